"""What an execution may use (``Limits``) and what came of it (``Execution``)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal

from ludus.sandbox.load import backstop_s

ExecStatus = Literal["ok", "timeout", "memory", "killed", "infra_error"]
DEFAULT_STACK_MB = 8  # the usual `ulimit -s` of a shell (Linux distributions' default)
OPTIONAL_LIMITS = ("recursion", "stack_mb")  # None: as a plain `python` run has it


@dataclass(frozen=True)
class Limits:
    """Resource limits of one execution. The defaults suit a unit-test-sized program.

    Time limits count what the program did, not how busy the machine was: ``cpu_s`` is the CPU
    time of all its processes together, and ``wall_s`` bounds its *own* time, wall-clock time
    less the time it was ready to run but waiting for a CPU (so it stops a program that sleeps
    or blocks). Either is ``timeout``. A program the machine held back runs on, up to the
    wall-clock ``backstop_s``; one still running then is ``infra_error``, never ``timeout``.

    ``memory_mb`` caps the address space (so threads, which reserve stack, need headroom);
    ``processes`` caps processes and threads; ``disk_mb`` is the size of the private /tmp;
    ``output_bytes`` applies to stdout and stderr each — past it the execution is killed.

    By default Python code runs as under a plain ``python main.py``: the interpreter's own
    recursion limit (CPython's 1000, read from a fresh interpreter, never assumed) and the
    usual 8 MiB C stack (``ulimit -s``). ``recursion`` raises the limit on purpose — a
    relaxation the caller must own up to, e.g. in the score; it also raises the C stack to
    half of ``memory_mb`` (at most 1 GiB) unless ``stack_mb`` says otherwise.
    """

    wall_s: float = 10.0
    cpu_s: float = 10.0
    memory_mb: int = 1024
    processes: int = 64
    file_size_mb: int = 64
    open_files: int = 256
    output_bytes: int = 1 << 20
    disk_mb: int = 256
    recursion: int | None = None  # Python's recursion limit; None: the interpreter's default, as in `python`
    stack_mb: int | None = None  # the C stack (RLIMIT_STACK); None: 8 MiB, more with a raised ``recursion``

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.name in OPTIONAL_LIMITS:
                continue
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"Limits.{f.name} must be a positive number, got {value!r}")

    def stack_bytes(self) -> int:
        """The C stack an execution gets: ``stack_mb``, else 8 MiB (a plain shell's ``ulimit -s``),
        or, for a raised ``recursion``, half the memory limit (at most 1 GiB) for the deeper frames."""
        if self.stack_mb is not None:
            return int(self.stack_mb) << 20
        if self.recursion is not None:
            return max(DEFAULT_STACK_MB << 20, min(int(self.memory_mb) << 19, 1 << 30))
        return DEFAULT_STACK_MB << 20

    @property
    def backstop_s(self) -> float:
        """The wall-clock backstop: ``wall_s`` and ``cpu_s`` count the program's own doing, never
        time it spent waiting for a CPU, so a starved program runs on until this (see load.py)."""
        return backstop_s(max(self.wall_s, self.cpu_s))

    def to_json(self) -> dict[str, Any]:
        return _flat(self) | {"backstop_s": self.backstop_s}


@dataclass(frozen=True)
class Execution:
    """The outcome of one execution.

    ``status`` is ``ok`` when the program ran to its end (whatever its ``exit_code``),
    ``timeout`` (the CPU limit, or the wall-clock limit on its own time), ``memory``, ``killed``
    (a signal, the output limit, or the host stopping it), or ``infra_error`` — the sandbox
    itself failed, or the machine was so busy that the program reached the backstop, which
    says nothing about the program. ``reason`` says which limit or failure, in words.
    ``cpu_wait_s`` is how long the program was ready to run but waiting for a CPU.
    ``stopped_by`` names the limit that ended it: ``cpu``, ``wall`` (its own time), ``backstop``,
    ``output`` or ``host`` (empty when it ended by itself).
    """

    status: ExecStatus
    exit_code: int | None = None
    signal: int | None = None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    cpu_s: float = 0.0
    wall_s: float = 0.0
    cpu_wait_s: float = 0.0
    max_rss_mb: float = 0.0
    reason: str = ""
    stopped_by: str = ""

    @property
    def ok(self) -> bool:
        """Ran to completion and exited 0."""
        return self.status == "ok" and self.exit_code == 0

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Execution:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def to_json(self) -> dict[str, Any]:
        return _flat(self)


def _flat(obj: Limits | Execution) -> dict[str, Any]:
    """The fields as a dict (all are plain values; ``asdict``'s deep copy would be wasted work)."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}
