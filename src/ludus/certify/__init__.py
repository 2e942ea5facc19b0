"""Certifying an environment before it trains anything: ``ludus check`` (docs/tools.md).

* :func:`check_env` (``contract.py``) — the contract of :mod:`ludus.core.env`: reset and step
  invariants, JSON round-trips, determinism, the reward range, malformed actions; one line each.
* :func:`redteam_env` (``redteam.py``, ``ludus check --redteam``) — the oracle solves every task,
  the floor earns nothing, and neither a library of generic cheats (answer, code, tool) nor the
  environment's own ``Env.cheats()`` earns more than the floor; one report-card line each.

Both drive an environment only through the contract (``ludus.core``), on this process's
instances or on an env server's (``RemoteEnv``): nothing here trains or runs the engine.
"""

from ludus.certify.contract import CheckReport, CheckResult, check_env, check_env_by_name, format_report
from ludus.certify.redteam import CHEATS, Cheat, format_redteam, redteam_env, redteam_env_by_name

__all__ = [
    "CHEATS",
    "Cheat",
    "CheckReport",
    "CheckResult",
    "check_env",
    "check_env_by_name",
    "format_redteam",
    "format_report",
    "redteam_env",
    "redteam_env_by_name",
]
