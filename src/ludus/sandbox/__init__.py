"""Isolated execution of untrusted programs (model-written code): ``Sandbox(...).run(code)``.

Default backend: bubblewrap, with per-execution namespaces inside warm workers (see
``inside.py`` for the mechanism, ``backend.py`` for what the sandbox can see). ``ludus
doctor`` prints which isolation is active here and why.
"""

from ludus.sandbox.backend import Isolation, SandboxUnavailable, UnisolatedWarning, detect
from ludus.sandbox.pool import Running, Sandbox, WorkerSpec
from ludus.sandbox.types import ExecStatus, Execution, Limits

__all__ = [
    "ExecStatus",
    "Execution",
    "Isolation",
    "Limits",
    "Running",
    "Sandbox",
    "SandboxUnavailable",
    "UnisolatedWarning",
    "WorkerSpec",
    "detect",
]
