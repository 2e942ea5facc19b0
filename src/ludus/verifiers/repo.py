"""Running commands in, and grading, a repository inside the sandbox (the SWE-style ``repo`` env).

Two kinds of sandbox execution, both by one small runner shipped into the sandbox as source:

* ``shell`` — the agent's command, in a fresh copy of its repository: ``bash -c COMMAND`` in the
  working folder with a clean environment. When it ends (or times out), every process it left
  is killed and the runner reports the files that changed, as JSON on a descriptor the command
  never holds. Nothing of it is trusted: the host validates every path and size (see
  ``ludus.envs.repo``), and it only carries what the agent could have written with its file
  tools anyway.
* ``grade`` — pytest on the grading tree (:func:`grading_tree`: the agent's tree with every test
  file restored from the pristine copy, test files it added deleted, ``conftest.py``,
  ``sitecustomize.py``/``usercustomize.py``, ``*.pth``, bytecode and pytest configuration files
  removed, then the hidden tests added). pytest runs with a grader-owned configuration
  (``-c /dev/null``, ``--noconftest``, ``-p no:cacheprovider``, ``-o addopts=``, plugin
  autoloading off, ``--import-mode=importlib``, the repository appended to — not put in front of
  — ``sys.path``, no environment variables of the agent) and a grader-owned reporter plugin,
  which writes the outcomes, with a random nonce, to a descriptor: never stdout.

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
from pathlib import PurePosixPath
from typing import Any

from ludus.core.types import Score, Status
from ludus.sandbox import Limits, Sandbox, WorkerSpec
from ludus.sandbox.backend import interpreter
from ludus.sandbox.pool import DEFAULT_WARM_IMPORTS

REPORT_CAP = 64 << 20  # bytes of runner report the host reads at most
TREE_CAP = 64 << 20  # bytes of repository shipped into the sandbox at most (its /tmp holds 512 MiB)
TEST_DIRS = frozenset({"tests", "test", "testing"})
# removed from the grading tree wherever they are: they run code before or around the tests
REMOVED_NAMES = frozenset({"conftest.py", "sitecustomize.py", "usercustomize.py", "pytest.ini", "tox.ini"})
RESTORED_NAMES = frozenset({"setup.cfg", "pyproject.toml"})  # may carry pytest sections: back to pristine

# The runner, shipped into the sandbox as module ``ludus_repo_runner`` (standard library and
# pytest only; the ludus package is not in the sandbox).
RUNNER = r'''
import base64, builtins, hashlib, json, os, selectors, signal, stat, subprocess, sys, time

SKIP_DIRS = {"__pycache__", ".pytest_cache", ".git"}
RESULTS_FD = 3


def _write_report(obj):
    data = json.dumps(obj).encode()
    os.ftruncate(RESULTS_FD, 0)  # whatever was written to the descriptor before does not count
    done = 0
    while done < len(data):
        done += os.pwrite(RESULTS_FD, data[done:], done)


def _scan(root):
    """Regular files (rel -> sha256), symbolic links (rel -> target) and folders, links not followed."""
    files, links, dirs = {}, {}, []
    for dirpath, dirnames, filenames in os.walk(root):
        keep = []
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                links[rel] = os.readlink(path)
            elif stat.S_ISDIR(st.st_mode):
                if name not in SKIP_DIRS:
                    keep.append(name)
                    dirs.append(rel)
            elif stat.S_ISREG(st.st_mode):
                try:
                    with open(path, "rb") as fh:
                        files[rel] = (hashlib.sha256(fh.read()).hexdigest(), st.st_size)
                except OSError:
                    continue
        dirnames[:] = [d for d in dirnames if d in keep]
    return files, links, dirs


def _kill_others(pgid):
    """Everything the command started. Process 1 of its own PID namespace can reach them all."""
    if os.getpid() == 1:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
    else:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break


def shell(payload, _fd):
    root = os.getcwd()
    for rel, target in payload["symlinks"].items():
        try:
            os.makedirs(os.path.dirname(rel) or ".", exist_ok=True)
            os.symlink(target, rel)
        except OSError:
            pass
    before, _, _ = _scan(root)
    os.makedirs("/tmp/home", exist_ok=True)
    env = {"PATH": payload["path"], "HOME": "/tmp/home", "LANG": "C.UTF-8", "TMPDIR": "/tmp",
           "PYTHONDONTWRITEBYTECODE": "1", "TERM": "dumb"}
    proc = subprocess.Popen(["bash", "-c", payload["command"]], cwd=root, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    cap, out, dropped = payload["output_cap"], bytearray(), 0
    deadline = time.monotonic() + payload["timeout_s"]
    timed_out, ended_at = False, None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    while True:
        now = time.monotonic()
        if ended_at is None and proc.poll() is not None:
            ended_at = now
        if ended_at is not None and now > ended_at + 0.2:
            break  # a background process may hold the pipe open: it does not hold us
        if now > deadline:
            timed_out = True
            break
        if not sel.get_map():
            time.sleep(0.02)
            continue
        for _key, _ in sel.select(timeout=0.05):
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                sel.unregister(proc.stdout)
                break
            room = cap - len(out)
            out += chunk[:max(room, 0)]
            dropped += max(0, len(chunk) - max(room, 0))
    exit_code = proc.poll()
    _kill_others(proc.pid)
    after, links, dirs = _scan(root)
    changed, skipped, total = {}, [], 0
    for rel, (digest, size) in sorted(after.items()):
        if before.get(rel, (None,))[0] == digest:
            continue
        if size > payload["file_cap"] or total + size > payload["total_cap"] or len(changed) >= payload["count_cap"]:
            skipped.append(rel)
            continue
        with open(os.path.join(root, rel), "rb") as fh:
            data = fh.read(payload["file_cap"] + 1)
        total += len(data)
        changed[rel] = base64.b64encode(data).decode()
    _write_report({"exit_code": exit_code, "timed_out": timed_out, "output": out.decode("utf-8", "replace"),
                   "dropped": dropped, "files": sorted(after), "changed": changed, "skipped": skipped,
                   "links": links, "dirs": dirs})
    os._exit(0)


# ---- grading ----

def _ident(value):
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        return (id(value), _ident(value.fget), _ident(value.fset))
    if not callable(value):
        return None
    code = getattr(value, "__code__", None)
    return (id(value), id(code))


def _probes():
    """What decides an outcome, as (label, live namespace, name, identity) to re-check cheaply:
    pytest's, pluggy's and the builtins' functions and class members."""
    probes = []
    mods = [m for n, m in list(sys.modules.items()) if m is not None and (n == "pytest" or n.startswith(("_pytest", "pluggy")))]
    for mod in [*mods, builtins]:
        space = vars(mod)
        for name, value in list(space.items()):
            if name.startswith("_") and mod is not builtins:
                continue
            ident = _ident(value)
            if ident is not None:
                probes.append((mod.__name__ + "." + name, space, name, ident))
            if isinstance(value, type) and value.__module__ == mod.__name__:
                members = vars(value)  # a live view
                for attr, member in list(members.items()):
                    if attr.startswith("_") and not (attr.startswith("__") and attr.endswith("__")):
                        continue
                    ident = _ident(member)
                    if ident is not None:
                        probes.append((mod.__name__ + "." + name + "." + attr, members, attr, ident))
    return probes


def _hooks(config):
    hook = config.pluginmanager.hook
    return {name: tuple((i.plugin_name, id(i.function)) for i in caller.get_hookimpls())
            for name, caller in list(vars(hook).items()) if hasattr(caller, "get_hookimpls")}


class Reporter:
    def __init__(self):
        self.results, self.errors, self.tampered, self.config, self.baseline = {}, [], "", None, None

    def check(self):
        if self.baseline is None or self.tampered:
            return
        probes, hooks, own = self.baseline
        changed = [label for label, space, name, ident in probes if _ident(space.get(name)) != ident]
        changed += ["hook " + name for name, impls in _hooks(self.config).items() if hooks.get(name, ()) != impls]
        if {k: _ident(v) for k, v in vars(Reporter).items()} != own or vars(self) is not self._own_dict:
            changed.append("the reporter")
        if changed:
            self.tampered = "changed: " + ", ".join(changed[:5])

    def pytest_collection(self, session):
        self.config = session.config
        self._own_dict = vars(self)
        self.baseline = (_probes(), _hooks(session.config),
                         {k: _ident(v) for k, v in vars(Reporter).items()})

    def pytest_sessionfinish(self, session):
        self.check()  # before unconfigure, which undoes pytest's own configure-time patches

    def pytest_collectreport(self, report):
        if report.failed:
            self.errors.append(str(report.longrepr)[-600:])

    def pytest_runtest_logreport(self, report):
        if report.when == "call":
            self.check()
        entry = self.results.setdefault(report.nodeid, {"outcome": "missing", "message": ""})
        if report.when == "call":
            if report.passed and not hasattr(report, "wasxfail"):
                if entry["outcome"] == "missing":
                    entry["outcome"] = "passed"
            else:
                entry["outcome"] = "skipped" if report.skipped else "failed"
                entry["message"] = str(report.longrepr or "")[-600:]
        elif not report.passed:
            entry["outcome"] = "skipped" if report.skipped else "error"
            entry["message"] = str(report.longrepr or "")[-600:]


def grade(payload, _fd):
    nonce = payload.pop("nonce")
    for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONPATH"):
        os.environ.pop(name, None)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    sys.dont_write_bytecode = True
    import pytest

    root = os.getcwd()
    sys.path.append(root)  # after the standard library and site-packages: the repository cannot shadow them
    reporter = Reporter()
    args = ["-c", os.devnull, "--rootdir", root, "--noconftest", "-p", "no:cacheprovider", "-o", "addopts=",
            "--import-mode=importlib", "-q", "--tb=short", "-p", "no:pastebin", "-p", "no:debugging",
            *payload["test_files"]]
    error = ""
    try:
        exit_code = int(pytest.main(args, plugins=[reporter]))
    except BaseException as exc:  # the code under test may raise SystemExit and the like
        exit_code, error = -1, repr(exc)[:500]
    _write_report({"nonce": nonce, "results": reporter.results, "collect_errors": reporter.errors[:20],
                   "tampered": reporter.tampered, "exit_code": exit_code, "error": error})
    os._exit(0)  # now: nothing the code under test registered (atexit, a stream's flush) runs after the report
'''


class RepoSandboxError(RuntimeError):
    """The sandbox failed (not the agent): callers report ``infra_error``."""


@dataclass
class ShellResult:
    """What one ``run`` command did: its output and the files it left (validated by the caller)."""

    exit_code: int | None
    timed_out: bool
    output: str
    dropped_bytes: int
    files: list[str]
    changed: dict[str, bytes]
    skipped: list[str]
    links: dict[str, str]
    dirs: list[str]
    note: str = ""


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
            spec = WorkerSpec(modules=(("ludus_repo_runner", RUNNER),), warm_imports=(*DEFAULT_WARM_IMPORTS, "pytest"))
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

    def _execute(self, call: str, payload: dict[str, Any], files: Mapping[str, bytes], wall_s: float) -> Any:
        limits = Limits(
            wall_s=wall_s, cpu_s=wall_s, memory_mb=self.memory_mb, processes=64, disk_mb=512, file_size_mb=128
        )
        with tempfile.TemporaryFile() as results:
            execution = self.sandbox.run(
                call=f"ludus_repo_runner:{call}",
                payload=payload,
                files=dict(files),
                limits=limits,
                pass_fds=[results.fileno()],
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
            "timeout_s": self.timeout_s,
            "output_cap": self.output_cap,
            "file_cap": self.file_cap,
            "total_cap": self.total_cap,
            "count_cap": self.count_cap,
        }
        report, execution = self._execute("shell", payload, files, self.timeout_s + 20.0)
        if report is None:
            # the runner died (its limits, or the command killed it): no file change is kept
            return ShellResult(
                None, False, "", 0, [], {}, [], {}, [],
                note=f"the command's sandbox ended abnormally ({execution.status}: {execution.reason}); "
                "no file changes were kept",
            )  # fmt: skip
        try:
            return ShellResult(
                exit_code=report["exit_code"] if isinstance(report["exit_code"], int) else None,
                timed_out=bool(report["timed_out"]),
                output=str(report["output"]),
                dropped_bytes=int(report["dropped"]),
                files=[str(f) for f in report["files"]],
                changed={str(k): base64.b64decode(v) for k, v in report["changed"].items()},
                skipped=[str(s) for s in report["skipped"]],
                links={str(k): str(v) for k, v in report["links"].items()},
                dirs=[str(d) for d in report["dirs"]],
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            return ShellResult(
                None, False, "", 0, [], {}, [], {}, [],
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
