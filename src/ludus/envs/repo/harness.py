"""The sandbox side of the ``repo`` environment: runs the agent's shell commands and grades with pytest.

Shipped into the sandbox as module ``ludus_repo_runner`` by ``ludus.envs.repo.verifier``, which
calls :func:`shell` or :func:`grade`; each reports as JSON on descriptor 3 (never stdout, which the
command or the code under test controls). Standard library only (pytest too, imported by
:func:`grade`): the ludus package is not in the sandbox. Importing it on the host runs nothing.

Neither keeps time: the sandbox does, counting CPU time and own time (not time spent waiting
for a CPU on a busy machine). At a command's limit it sends SIGTERM and :func:`shell` reports
what the command left behind before the sandbox's SIGKILL.
"""

import base64
import builtins
import hashlib
import json
import os
import selectors
import signal
import stat
import subprocess
import sys
import time

SKIP_DIRS = {"__pycache__", ".pytest_cache", ".git"}
RESULTS_FD = 3


def _write_report(obj: dict) -> None:
    data = json.dumps(obj).encode()
    os.ftruncate(RESULTS_FD, 0)  # whatever was written to the descriptor before does not count
    done = 0
    while done < len(data):
        done += os.pwrite(RESULTS_FD, data[done:], done)


def _scan(root: str) -> tuple[dict, dict, list]:
    """Regular files (rel -> (sha256, size)), symbolic links (rel -> target) and folders, links not followed."""
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


def _kill_others(pgid: int) -> None:
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


_STOP: list[bool] = []  # the sandbox's SIGTERM arrived: the command reached its time limit


def _stop(_signum: int, _frame: object) -> None:
    _STOP.append(True)


def shell(payload: dict, _fd: int) -> None:
    """Run ``payload["command"]`` in the working folder; report its output and the files it changed,
    also when the sandbox stops it at its time limit."""
    signal.signal(signal.SIGTERM, _stop)
    root = os.getcwd()
    for rel, target in payload["symlinks"].items():
        try:
            os.makedirs(os.path.dirname(rel) or ".", exist_ok=True)
            os.symlink(target, rel)
        except OSError:
            pass
    before, _, _ = _scan(root)
    os.makedirs("/tmp/home", exist_ok=True)
    env = {
        "PATH": payload["path"],
        "HOME": "/tmp/home",
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",
        "PYTHONDONTWRITEBYTECODE": "1",
        "TERM": "dumb",
        # the agent's pytest runs as the grader's, without the plugins installed beside it (whose
        # loading cost ~2.7 s of CPU per `python -m pytest` here: a command's whole budget, under load)
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
    proc = subprocess.Popen(
        ["bash", "-c", payload["command"]],
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    cap, out, dropped = payload["output_cap"], bytearray(), 0
    ended_at = None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    while not _STOP:
        now = time.monotonic()
        if ended_at is None and proc.poll() is not None:
            ended_at = now
        if ended_at is not None and now > ended_at + 0.2:
            break  # a background process may hold the pipe open: it does not hold us
        if not sel.get_map():
            time.sleep(0.02)
            continue
        for _key, _ in sel.select(timeout=0.05):
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                sel.unregister(proc.stdout)
                break
            room = cap - len(out)
            out += chunk[: max(room, 0)]
            dropped += max(0, len(chunk) - max(room, 0))
    stopped, exit_code = bool(_STOP), proc.poll()
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
    _write_report(
        {
            "exit_code": exit_code,
            "stopped": stopped,
            "output": out.decode("utf-8", "replace"),
            "dropped": dropped,
            "files": sorted(after),
            "changed": changed,
            "skipped": skipped,
            "links": links,
            "dirs": dirs,
        }
    )
    os._exit(0)


# ---- grading ----


def _ident(value: object) -> tuple | None:
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        return (id(value), _ident(value.fget), _ident(value.fset))
    if not callable(value):
        return None
    code = getattr(value, "__code__", None)
    return (id(value), id(code))


def _probes() -> list[tuple]:
    """What decides an outcome, as (label, live namespace, name, identity) to re-check cheaply:
    pytest's, pluggy's and the builtins' functions and class members."""
    probes = []
    mods = [
        m
        for n, m in list(sys.modules.items())
        if m is not None and (n == "pytest" or n.startswith(("_pytest", "pluggy")))
    ]
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


def _hooks(config) -> dict:
    hook = config.pluginmanager.hook
    return {
        name: tuple((i.plugin_name, id(i.function)) for i in caller.get_hookimpls())
        for name, caller in list(vars(hook).items())
        if hasattr(caller, "get_hookimpls")
    }


class Reporter:
    """The grader's pytest plugin: every outcome, collection errors, and whether pytest was tampered with."""

    def __init__(self) -> None:
        self.results, self.errors, self.tampered, self.config, self.baseline = {}, [], "", None, None

    def check(self) -> None:
        if self.baseline is None or self.tampered:
            return
        probes, hooks, own = self.baseline
        changed = [label for label, space, name, ident in probes if _ident(space.get(name)) != ident]
        changed += ["hook " + name for name, impls in _hooks(self.config).items() if hooks.get(name, ()) != impls]
        if {k: _ident(v) for k, v in vars(Reporter).items()} != own or vars(self) is not self._own_dict:
            changed.append("the reporter")
        if changed:
            self.tampered = "changed: " + ", ".join(changed[:5])

    def pytest_collection(self, session) -> None:
        self.config = session.config
        self._own_dict = vars(self)
        self.baseline = (_probes(), _hooks(session.config), {k: _ident(v) for k, v in vars(Reporter).items()})

    def pytest_sessionfinish(self, session) -> None:
        self.check()  # before unconfigure, which undoes pytest's own configure-time patches

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self.errors.append(str(report.longrepr)[-600:])

    def pytest_runtest_logreport(self, report) -> None:
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


def grade(payload: dict, _fd: int) -> None:
    """Run pytest with the grader's configuration on ``payload["test_files"]``; report every outcome."""
    nonce = payload.pop("nonce")
    for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONPATH"):
        os.environ.pop(name, None)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    sys.dont_write_bytecode = True
    import pytest

    root = os.getcwd()
    sys.path.append(root)  # after the standard library and site-packages: the repository cannot shadow them
    reporter = Reporter()
    args = [
        "-c", os.devnull, "--rootdir", root, "--noconftest", "-p", "no:cacheprovider", "-o", "addopts=",
        "--import-mode=importlib", "-q", "--tb=short", "-p", "no:pastebin", "-p", "no:debugging",
        *payload["test_files"],
    ]  # fmt: skip
    error = ""
    try:
        exit_code = int(pytest.main(args, plugins=[reporter]))
    except BaseException as exc:  # the code under test may raise SystemExit and the like
        exit_code, error = -1, repr(exc)[:500]
    _write_report(
        {
            "nonce": nonce,
            "results": reporter.results,
            "collect_errors": reporter.errors[:20],
            "tampered": reporter.tampered,
            "exit_code": exit_code,
            "error": error,
        }
    )
    os._exit(0)  # now: nothing the code under test registered (atexit, a stream's flush) runs after the report
