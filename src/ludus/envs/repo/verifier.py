"""Running commands in, and grading, a repository inside the sandbox (the SWE-style ``repo`` env).

Two kinds of sandbox execution, both by one small runner, ``harness.py``, shipped into the sandbox
as module ``ludus_repo_runner``:

* ``shell`` — the agent's command, in a fresh copy of its repository: ``bash -c COMMAND`` in the
  working folder with a clean environment. When it ends (or reaches its time limit), every
  process it left is killed and the runner reports the files that changed, as JSON on a
  descriptor the command never holds. Nothing of it is trusted: the host validates every path
  and size (see ``ludus.envs.repo.env``), and it only carries what the agent could have written
  with its file tools anyway.
* ``grade`` — pytest on the grading tree (:func:`grading_tree`: the agent's tree with every test
  file restored from the pristine copy, test files it added deleted, ``conftest.py``,
  ``sitecustomize.py``/``usercustomize.py``, ``*.pth``, bytecode and pytest configuration files
  removed, then the hidden tests added). pytest runs with a grader-owned configuration
  (``-c /dev/null``, ``--noconftest``, ``-p no:cacheprovider``, ``-o addopts=``, plugin
  autoloading off, ``--import-mode=importlib``, the repository appended to — not put in front of
  — ``sys.path``, no environment variables of the agent) and a grader-owned reporter plugin,
  which writes the outcomes, with a random nonce, to a descriptor: never stdout.

Time limits (the command's ``timeout_s``, the tests' ``grade_timeout_s``) are the sandbox's: CPU
time, and own time (wall-clock time less the time spent waiting for a CPU), so a busy machine
never turns a command into a timeout or a passing fix into a failing one. A run the machine
starved until the sandbox's wall-clock backstop is ``infra_error`` (:class:`RepoSandboxError`):
the episode is retried, then masked.

Limitation, stated plainly: the code under test runs in the test process (tests import it), so
code written to attack *this* runner specifically could still reach it. The runner raises the
bar: the report must carry the nonce; exiting early, crashing or flooding output leaves no
report (score 0); and it fingerprints pytest's and pluggy's functions, every hook
implementation, its own reporter and ``builtins`` before collection and after every test — a
change scores 0 as "tampered".
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import tempfile
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ludus.core.types import InfraError, Score, Status
from ludus.sandbox import Limits, Sandbox, WorkerSpec
from ludus.sandbox.backend import interpreter
from ludus.sandbox.pool import DEFAULT_WARM_IMPORTS, shipped

REPORT_CAP = 64 << 20  # bytes of runner report the host reads at most
TREE_CAP = 64 << 20  # bytes of repository shipped into the sandbox at most (its /tmp holds 512 MiB)
TEST_DIRS = frozenset({"tests", "test", "testing"})
# removed from the grading tree wherever they are: they run code before or around the tests
REMOVED_NAMES = frozenset({"conftest.py", "sitecustomize.py", "usercustomize.py", "pytest.ini", "tox.ini"})
RESTORED_NAMES = frozenset({"setup.cfg", "pyproject.toml"})  # may carry pytest sections: back to pristine
HARNESS = Path(__file__).resolve().parent / "harness.py"  # the runner, module ``ludus_repo_runner`` in the sandbox
STOP_GRACE_S = 10.0  # how long the runner of a command at its time limit has to report the files it left


class RepoSandboxError(InfraError):
    """The sandbox failed, or a busy machine starved the run (not the agent): ``infra_error``."""


@dataclass
class ShellResult:
    """What one ``run`` command did: its output and the files it left (validated by the caller);
    ``files`` is None when the runner could not report them (nothing is to be kept)."""

    exit_code: int | None
    timed_out: bool
    output: str
    dropped_bytes: int
    files: list[str] | None
    changed: dict[str, bytes]
    skipped: list[str]
    links: dict[str, str]
    dirs: list[str]
    note: str = ""
    limit: str = ""  # the limit that stopped it, in the sandbox's words


@dataclass
class TestOutcome:
    outcome: str  # passed, failed, error, skipped, missing
    message: str = ""


@dataclass
class GradeReport:
    """The outcome of every expected test and why the run counts or does not."""

    outcomes: dict[str, TestOutcome] = field(default_factory=dict)
    problem: str = ""  # no valid report, tampering: the whole run failed
    timed_out: bool = False


def is_test_path(path: str) -> bool:
    """Test files as the grader treats them: ``test_*.py``, ``*_test.py``, ``conftest.py``,
    anything under a folder named ``tests``/``test``/``testing``, and any module of those names
    (``tests.py``, ``tests.so``, ...), which could stand in for the test package at import."""
    parts = PurePosixPath(path).parts
    name = parts[-1] if parts else ""
    return (
        name == "conftest.py"
        or name.split(".", 1)[0] in TEST_DIRS
        or (name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py")))
        or any(p in TEST_DIRS for p in parts[:-1])
    )


def grading_tree(
    final: Mapping[str, bytes], pristine: Mapping[str, bytes], hidden: Mapping[str, bytes]
) -> dict[str, bytes]:
    """The tree pytest grades: the agent's changes to non-test files only, plus the hidden tests."""
    tree: dict[str, bytes] = {}
    for path, data in final.items():
        name = PurePosixPath(path).name
        parts = PurePosixPath(path).parts
        if (
            is_test_path(path)
            or name in REMOVED_NAMES
            or name in RESTORED_NAMES
            or name.endswith((".pth", ".pyc", ".pyo"))
            or "__pycache__" in parts
            or ".pytest_cache" in parts
        ):
            continue
        if not sandbox_path_ok(path):
            continue
        tree[path] = data
    trusted = {p: d for p, d in pristine.items() if is_test_path(p) or PurePosixPath(p).name in RESTORED_NAMES}
    trusted = {p: d for p, d in trusted.items() if PurePosixPath(p).name not in REMOVED_NAMES}
    trusted.update(hidden)
    # an agent's file where a trusted file needs a folder would make the tree unwritable
    folders = {str(parent) for p in trusted for parent in PurePosixPath(p).parents}
    tree = {p: d for p, d in tree.items() if p not in folders and not any(p.startswith(t + "/") for t in trusted)}
    tree.update(trusted)
    return tree


def sandbox_path_ok(path: str) -> bool:
    """A relative path the sandbox writes (see ``inside._write_files``): no part starts with '..'."""
    parts = PurePosixPath(path).parts
    return bool(parts) and not path.startswith("/") and not any(p.startswith("..") for p in parts)


def tree_size(tree: Mapping[str, bytes]) -> int:
    return sum(len(d) for d in tree.values())


def test_files(test_ids: Iterable[str]) -> list[str]:
    """The files holding ``test_ids`` (``path::name``), in first-seen order."""
    return list(dict.fromkeys(t.split("::", 1)[0] for t in test_ids))


_sandboxes: dict[tuple[Any, ...], Sandbox] = {}
_sandboxes_lock = threading.Lock()


def shared_sandbox(*, workers: int | None = None, backend: str = "auto") -> Sandbox:
    """One pool of warm workers (with pytest imported) per configuration in a process: every
    episode builds its own environment, and each must not start its own workers."""
    key = (workers, backend)
    with _sandboxes_lock:
        if key not in _sandboxes:
            spec = WorkerSpec(
                modules=(shipped("ludus_repo_runner", HARNESS),), warm_imports=(*DEFAULT_WARM_IMPORTS, "pytest")
            )
            _sandboxes[key] = Sandbox(Limits(), workers=workers, backend_name=backend, spec=spec)  # type: ignore[arg-type]
        return _sandboxes[key]


@dataclass(frozen=True)
class RepoRunner:
    """Runs ``shell`` and ``grade`` executions of a repository tree in the sandbox."""

    sandbox: Sandbox
    timeout_s: float = 30.0
    grade_timeout_s: float = 120.0
    memory_mb: int = 2048
    output_cap: int = 16_000
    file_cap: int = 1 << 20
    total_cap: int = 16 << 20
    count_cap: int = 2000

    def _execute(
        self, call: str, payload: dict[str, Any], files: Mapping[str, bytes], limit_s: float, **options: Any
    ) -> Any:
        """Run the runner's ``call``: ``limit_s`` of CPU time and of own time (see the module doc)."""
        limits = Limits(
            wall_s=limit_s, cpu_s=limit_s, memory_mb=self.memory_mb, processes=64, disk_mb=512, file_size_mb=128
        )
        with tempfile.TemporaryFile() as results:
            execution = self.sandbox.run(
                call=f"ludus_repo_runner:{call}",
                payload=payload,
                files=dict(files),
                limits=limits,
                pass_fds=[results.fileno()],
                **options,
            )
            if execution.status == "infra_error":
                raise RepoSandboxError(execution.reason or "the sandbox failed")
            results.seek(0)
            raw = results.read(REPORT_CAP + 1)
        try:
            report = json.loads(raw) if raw and len(raw) <= REPORT_CAP else None
        except ValueError:
            report = None
        return report if isinstance(report, dict) else None, execution

    def shell(self, files: Mapping[str, bytes], symlinks: Mapping[str, str], command: str) -> ShellResult:
        """Run ``command`` with ``bash -c`` in a copy of ``files``. Raises RepoSandboxError."""
        payload = {
            "command": command,
            "symlinks": dict(symlinks),
            "path": f"{os.path.dirname(interpreter())}:/usr/local/bin:/usr/bin:/bin",
            "output_cap": self.output_cap,
            "file_cap": self.file_cap,
            "total_cap": self.total_cap,
            "count_cap": self.count_cap,
        }
        report, execution = self._execute("shell", payload, files, self.timeout_s, stop_grace_s=STOP_GRACE_S)
        if report is None:
            # the runner died (its limits, or the command killed it): no file change is kept
            timed_out = execution.status == "timeout"
            return ShellResult(
                None, timed_out, "", 0, None, {}, [], {}, [], limit=execution.reason if timed_out else "",
                note=f"the command's sandbox ended abnormally ({execution.status}: {execution.reason}); "
                "no file changes were kept",
            )  # fmt: skip
        try:
            return ShellResult(
                exit_code=report["exit_code"] if isinstance(report["exit_code"], int) else None,
                timed_out=bool(report["stopped"]),
                output=str(report["output"]),
                dropped_bytes=int(report["dropped"]),
                files=[str(f) for f in report["files"]],
                changed={str(k): base64.b64decode(v) for k, v in report["changed"].items()},
                skipped=[str(s) for s in report["skipped"]],
                links={str(k): str(v) for k, v in report["links"].items()},
                dirs=[str(d) for d in report["dirs"]],
                limit=execution.reason if report["stopped"] else "",
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            return ShellResult(
                None, False, "", 0, None, {}, [], {}, [],
                note=f"the command's report was malformed ({type(exc).__name__}); no file changes were kept",
            )  # fmt: skip

    def run_tests(self, tree: Mapping[str, bytes], test_ids: list[str]) -> GradeReport:
        """Run pytest with the grader's configuration on ``tree``; the outcome of each of ``test_ids``.
        Raises RepoSandboxError when the sandbox (not the code) failed."""
        nonce = secrets.token_hex(16)
        payload = {"nonce": nonce, "test_files": [f for f in test_files(test_ids) if f in tree]}
        report, execution = self._execute("grade", payload, tree, self.grade_timeout_s)
        outcomes = {t: TestOutcome("missing", "not in the test report") for t in test_ids}
        if report is None or report.get("nonce") != nonce or not isinstance(report.get("results"), dict):
            why = execution.reason or f"exit code {execution.exit_code}"
            return GradeReport(
                outcomes,
                f"the test run left no valid report ({execution.status}: {why}); "
                "the code under test exited, crashed, hung or interfered with the runner",
                timed_out=execution.status == "timeout",
            )
        for test_id in test_ids:
            got = report["results"].get(test_id)
            if isinstance(got, dict) and isinstance(got.get("outcome"), str):
                outcomes[test_id] = TestOutcome(got["outcome"], str(got.get("message", ""))[-600:])
        if report.get("tampered"):
            return GradeReport(outcomes, f"the code under test tampered with the test runner ({report['tampered']})")
        return GradeReport(outcomes)


def score_report(report: GradeReport, fail_to_pass: list[str], pass_to_pass: list[str]) -> Score:
    """Reward 1 only if every FAIL_TO_PASS and PASS_TO_PASS test passed; the reason names the others."""
    f2p_ok = sum(report.outcomes[t].outcome == "passed" for t in fail_to_pass)
    p2p_ok = sum(report.outcomes[t].outcome == "passed" for t in pass_to_pass)
    components = {
        "fail_to_pass": float(f2p_ok),
        "fail_to_pass_total": float(len(fail_to_pass)),
        "pass_to_pass": float(p2p_ok),
        "pass_to_pass_total": float(len(pass_to_pass)),
    }
    if report.problem:
        return Score(0.0, Status.TIMEOUT if report.timed_out else Status.WRONG, report.problem, components)
    failing = [t for t in [*fail_to_pass, *pass_to_pass] if report.outcomes[t].outcome != "passed"]
    if not failing:
        return Score(1.0, Status.CORRECT, f"all {len(fail_to_pass) + len(pass_to_pass)} tests passed", components)
    shown = "; ".join(f"{t} ({report.outcomes[t].outcome})" for t in failing[:8])
    more = f" and {len(failing) - 8} more" if len(failing) > 8 else ""
    return Score(0.0, Status.WRONG, f"{len(failing)} test(s) did not pass: {shown}{more}", components)


def grade_tree(
    runner: RepoRunner,
    final: Mapping[str, bytes],
    pristine: Mapping[str, bytes],
    hidden: Mapping[str, bytes],
    fail_to_pass: list[str],
    pass_to_pass: list[str],
) -> Score:
    """The whole grading procedure: build the grading tree, run the tests, score. Never raises
    for what the agent did; a sandbox failure is ``infra_error``."""
    tree = grading_tree(final, pristine, hidden)
    if tree_size(tree) > TREE_CAP:
        return Score.zero(Status.WRONG, f"the repository grew over {TREE_CAP >> 20} MiB; it was not graded")
    try:
        report = runner.run_tests(tree, [*fail_to_pass, *pass_to_pass])
    except RepoSandboxError as exc:
        return Score.zero(Status.INFRA_ERROR, f"the sandbox failed while grading: {exc}")
    return score_report(report, fail_to_pass, pass_to_pass)


_SAFE_ID = re.compile(r"^[^\0]+::[^\0]+$")


def valid_test_id(test_id: object) -> bool:
    """A pytest node id of the form ``path::name`` with a relative path."""
    if not isinstance(test_id, str) or not _SAFE_ID.match(test_id):
        return False
    path = PurePosixPath(test_id.split("::", 1)[0])
    return not path.is_absolute() and ".." not in path.parts
