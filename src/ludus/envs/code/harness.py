"""The test side of code grading. Runs in its own sandbox execution, apart from the solution.

The solution runs in another sandbox (``inside.serve_calls``) and never shares a process, a
file or a namespace with this one: the tests call it through a socket, and only plain values
(plain.py) come back, rebuilt here — so nothing the solution does (``sys.exit``,
``os._exit``, patching builtins or the test runner, an object whose ``__eq__`` is always
true, printing "PASSED", editing or reading test files) can change a verdict. Results go to
the host on descriptor 4, which the solution never holds.

Standard library only (pytest too when the format needs it): shipped into the sandbox as source.
"""

from __future__ import annotations

import ast
import builtins
import os
import random
import socket
import sys
import time
import traceback
import types

try:
    import ludus_inside as inside
    import ludus_plain as plain
except ImportError:  # pragma: no cover - only for reading on the host
    from ludus.sandbox import inside, plain

CALL_SOCKET_FD, RESULTS_FD = 3, 4
MAX_REPLY = 64 * 1024 * 1024
MESSAGE_CHARS = 400


class SolutionGone(BaseException):
    """The solution process died or stopped answering; no later call can succeed.

    A BaseException, so a test's ``except Exception`` (written for "must raise") cannot
    mistake a crash or a hang for the expected error; the test fails either way (see _run_statements)."""


class CallTimeout(SolutionGone):
    """A call used the CPU time a call may use (the solution's side counts it: see inside.serve_calls)."""


class SolutionError(Exception):
    """The solution raised an exception that is not a built-in one."""


class Remote:
    """Stands for one function of the solution (or, with ``method``, for that method of a fresh
    instance of the solution's class ``name``): calls travel as plain values over the socket."""

    def __init__(self, link: Link, name: str, method: str | None = None):
        self._link, self._target, self._method = link, name, method
        self.__name__ = method or name

    def __call__(self, *args, **kwargs):
        message = {"call": self._target, "args": _encode_args(args), "kwargs": _encode_args(kwargs)}
        if self._method is not None:
            message["method"] = self._method
        return self._link.request(message)

    def __repr__(self) -> str:
        return f"<solution function {self.__name__}>"


def _encode_args(value) -> str:
    try:
        return plain.encode(value)
    except plain.NotPlain as exc:
        raise TypeError(f"a test passed a value the solution cannot receive: {exc}") from exc


class Link:
    """The socket to the solution. Waits for its replies without a clock of its own: the time a
    call may take is counted in CPU on the solution's side, and a solution that sleeps or hangs
    ends at its execution's limits, which closes the socket (a wall-clock wait here would turn
    a busy machine into a timeout)."""

    def __init__(self, sock: socket.socket):
        self.sock, self.gone, self.timed_out = sock, "", False
        self.calls = 0

    def receive(self):
        if self.gone:
            raise SolutionGone(self.gone)
        try:
            message, fds = inside.recv_frame(self.sock, MAX_REPLY)
        except (Exception, MemoryError, RecursionError) as exc:  # noqa: BLE001 - whatever it sent, it failed
            message, fds = None, []
            self.gone = f"the solution sent a malformed message ({type(exc).__name__})"
        for fd in fds:
            os.close(fd)
        if message is None or type(message) is not dict:
            self.gone = self.gone or "the solution exited or crashed"
            raise SolutionGone(self.gone)
        return message

    def request(self, message: dict):
        if self.gone:
            raise SolutionGone(self.gone)
        self.calls += 1
        try:
            inside.send_frame(self.sock, message)
        except OSError as exc:
            self.gone = f"the solution exited or crashed ({exc})"
            raise SolutionGone(self.gone) from None
        reply = self.receive()
        if reply.get("timeout") is True:
            self.gone, self.timed_out = str(reply.get("error", "the call ran out of CPU time"))[:MESSAGE_CHARS], True
            raise CallTimeout(self.gone)
        if reply.get("ok") is True and type(reply.get("value")) is str:
            try:
                return plain.decode(reply["value"])
            except (Exception, MemoryError, RecursionError) as exc:  # noqa: BLE001 - NotPlain, ValueError, ...
                raise SolutionError(f"malformed value from the solution: {type(exc).__name__}: {exc}"[:400]) from None
        error_type, text = str(reply.get("error_type", "Error")), str(reply.get("error", ""))[:MESSAGE_CHARS]
        if error_type == "NotPlain":
            raise SolutionError(f"the solution returned something that is not a plain value: {text}")
        # a built-in exception keeps its class, so tests that expect e.g. ValueError still work
        cls = getattr(builtins, error_type, None)
        if isinstance(cls, type) and issubclass(cls, Exception) and cls.__module__ == "builtins":
            raise cls(text)
        raise SolutionError(text if text.startswith(error_type) else f"{error_type}: {text}")


def _message(exc: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return text[:MESSAGE_CHARS]


def run(payload: dict, _fd: int) -> int:
    """Entry point (mode ``call``): run the tests in ``payload`` and write the results to fd 4.

    Frames as it goes — ``{"started": true}`` once the solution has loaded, one ``{"result":
    id, ...}`` per statement test — then the whole report. If a test never ends (the
    solution's value sent it into an endless loop, say) and this process is killed, the host
    still knows the tests had started: the solution's failure, not the grader's."""
    results_sock = socket.socket(fileno=RESULTS_FD)

    def emit(frame: dict) -> None:
        inside.send_frame(results_sock, frame)

    try:
        report = _run(payload, emit)
    except BaseException as exc:  # noqa: BLE001 - the host must hear about it
        report = {"harness_error": _message(exc) + "\n" + traceback.format_exc(limit=5)[-1500:]}
    inside.send_frame(results_sock, report)
    results_sock.close()
    return 0


def _run(payload: dict, emit) -> dict:
    link = Link(socket.socket(fileno=CALL_SOCKET_FD))
    try:
        hello = link.receive()
    except SolutionGone as exc:
        return {"loaded": False, "load_error": str(exc)}
    if hello.get("loaded") is not True:
        return {"loaded": False, "load_error": str(hello.get("error", "the solution did not load"))[:2000]}
    names = hello.get("names") if type(hello.get("names")) is dict else {}
    emit({"started": True})
    if payload["runner"] == "pytest":
        report = _run_pytest(payload, link, names)
    else:
        report = _run_statements(payload, link, names, emit)
    link.sock.close()
    return report


def _solution_functions(names: dict) -> list[str]:
    """The solution's functions a test may call by name. Never a builtin's name: a solution
    defining ``len`` or ``abs`` must not change what the tests' own ``len`` or ``abs`` compute."""
    return [n for n, kind in names.items() if kind == "callable" and n.isidentifier() and not hasattr(builtins, n)]


def _run_statements(payload: dict, link: Link, names: dict, emit) -> dict:
    """Tests as statements (HumanEval asserts, MBPP asserts) against bound remote functions.

    HumanEval tests reach the solution as ``candidate`` and by the entry point's own name (some
    call both); MBPP tests call its functions by name, so those (minus anything the test setup
    defines) are bound too. With ``solution_class`` (call-based APPS tasks), a solution that
    defines that class is called as a method of a fresh instance of it, as APPS and LeetCode do."""
    namespace: dict = {"__name__": "__tests__"}
    aliases = payload.get("bind", {})
    owner = payload.get("solution_class")
    method_of = owner if owner and names.get(owner) == "callable" else None

    def remote(target: str) -> Remote:
        return Remote(link, method_of, target) if method_of else Remote(link, target)

    for alias, target in aliases.items():
        namespace[alias] = remote(target)
    calls_before = link.calls
    try:
        exec(compile(payload.get("setup", ""), "<test setup>", "exec"), namespace)
    except BaseException as exc:  # noqa: BLE001
        return {"loaded": True, "setup_error": _message(exc), "setup_called_solution": link.calls > calls_before}
    for alias, target in aliases.items():  # setup must not shadow the solution's functions
        namespace[alias] = remote(target)
    if payload.get("bind_by_name"):
        for name in _solution_functions(names):
            namespace.setdefault(name, Remote(link, name))
    results: dict[str, dict] = {}
    for test in payload["tests"]:
        started = time.monotonic()
        try:
            exec(compile(test["code"], f"<test {test['id']}>", "exec"), namespace)
            outcome, message = "passed", ""
        except CallTimeout as exc:
            outcome, message = "timeout", str(exc)
        except SolutionGone as exc:
            outcome, message = "crashed", str(exc)
        except AssertionError as exc:
            outcome, message = "failed", _message(exc) if str(exc) else "assertion failed"
        except BaseException as exc:  # noqa: BLE001
            outcome, message = "error", _message(exc)
        if outcome == "passed" and link.gone:  # the test swallowed the crash; it still failed
            outcome, message = ("timeout" if link.timed_out else "crashed"), link.gone
        results[test["id"]] = {"outcome": outcome, "message": message, "seconds": round(time.monotonic() - started, 4)}
        emit({"result": test["id"], **results[test["id"]]})
        if outcome != "passed" and payload.get("prune"):
            break
    return {"loaded": True, "results": results}


def _run_pytest(payload: dict, link: Link, names: dict) -> dict:
    """A pytest test file against a stand-in module whose attributes are the solution's."""
    import pytest  # noqa: PLC0415 - only this format needs it

    module = types.ModuleType(payload["module"])
    public = [n for n in names if n.isidentifier() and not hasattr(builtins, n)]  # see _solution_functions
    for name in public:
        setattr(module, name, Remote(link, name) if names[name] == "callable" else _fetch(link, name))
    # ``from solution import *`` must not replace what the test file binds itself (e.g. math.isclose)
    own = _bound_names(payload["test_file"])
    module.__all__ = [n for n in public if not n.startswith("_") and n not in own]
    sys.modules[payload["module"]] = module
    os.makedirs("tests_ludus", exist_ok=True)
    path = os.path.join("tests_ludus", "test_task.py")
    with open(path, "w") as fh:
        fh.write(payload["test_file"])

    class Collector:
        def __init__(self) -> None:
            self.collected: list[str] = []
            self.results: dict[str, dict] = {}
            self.errors: list[str] = []

        def pytest_collection_modifyitems(self, items):
            if payload.get("shuffle_seed") is not None:
                random.Random(payload["shuffle_seed"]).shuffle(items)
            self.collected = [item.nodeid for item in items]

        def pytest_collectreport(self, report):
            if report.failed:
                self.errors.append(str(report.longrepr)[-MESSAGE_CHARS:])

        def pytest_runtest_logreport(self, report):
            if link.gone and report.passed:  # the solution died or hung: nothing after that counts
                report.outcome, report.longrepr = "failed", link.gone
            current = self.results.get(report.nodeid)
            if report.when == "call" or (report.outcome != "passed" and current is None):
                outcome = "passed" if report.passed and not hasattr(report, "wasxfail") else "failed"
                if report.skipped:
                    outcome = "skipped"
                elif outcome == "failed" and link.gone:  # as _run_statements says it (and the verifier reads it)
                    outcome = "timeout" if link.timed_out else "crashed"
                self.results[report.nodeid] = {
                    "outcome": outcome,
                    "message": str(report.longrepr or "")[-MESSAGE_CHARS:],
                }

    collector = Collector()
    # the task's file runs under plain pytest, as the repo grader's does: plugins installed beside
    # the grader would change what it means (and loading them took ~2.7 s of CPU per grading here)
    for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS"):
        os.environ.pop(name, None)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    args = [path, "-q", "-p", "no:cacheprovider", "--noconftest", "-o", "addopts=", "--rootdir", ".", "-c", os.devnull]
    if payload.get("prune"):
        args.append("-x")
    pytest.main(args, plugins=[collector])
    if collector.errors and not collector.collected:
        return {
            "loaded": True,
            "setup_error": "test collection failed: " + collector.errors[0],
            "setup_called_solution": link.calls > 0,
        }
    results = {
        nodeid: collector.results.get(nodeid, {"outcome": "missing", "message": "no result"})
        for nodeid in collector.collected
    }
    return {"loaded": True, "results": results, "expected": collector.collected}


def _bound_names(source: str) -> set[str]:
    """Names a module binds at top level (imports, definitions, assignments), star imports aside."""
    bound: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return bound


def _fetch(link: Link, name: str):
    try:
        return link.request({"get": name})
    except (Exception, SolutionGone) as exc:  # noqa: BLE001 - an attribute the tests may never touch
        return _Unavailable(name, _message(exc))


class _Unavailable:
    def __init__(self, name: str, why: str):
        self.name, self.why = name, why

    def __getattr__(self, attr):
        raise AttributeError(f"solution attribute {self.name!r} is not a plain value: {self.why}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit("this module runs inside the sandbox; see ludus.envs.code.verifier")
