"""The host side of the sandbox: a pool of warm workers, one execution at a time each.

A worker is an interpreter started once inside bubblewrap (see backend.py) that has already
imported what executions commonly need; each execution is a fork of it in fresh namespaces
(see inside.py), so an execution costs a fork instead of an interpreter start. The host
talks JSON to its workers — never pickle: nothing from inside the sandbox is ever executed
or unpickled here. A worker that dies or stops answering is killed and replaced, and the
execution it held is reported as ``infra_error``.

Callers may be threads or asyncio tasks; each execution borrows one idle worker.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import os
import queue
import signal
import socket
import subprocess
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ludus.sandbox import backend
from ludus.sandbox.inside import recv_frame, send_frame
from ludus.sandbox.types import Execution, Limits

HERE = Path(__file__).resolve().parent
STARTUP_TIMEOUT_S = 60.0
REPLY_GRACE_S = 15.0  # how long past an execution's backstop the host waits before declaring the worker dead
# Modules model code imports most, loaded once by each worker. Every execution is a fork, and
# a fork (and its exit) costs in proportion to the worker's memory: measured here, 0.5 ms with
# these, 1.3 ms with twelve more (decimal, statistics, dataclasses, unittest, ...).
DEFAULT_WARM_IMPORTS = ("collections", "itertools", "functools", "math", "re", "heapq", "bisect", "string", "typing")

# The worker's first instruction: read the boot frame from the control socket, install the
# shipped modules (never from disk: the ludus package is not in the sandbox), and serve.
BOOT = """
import json, socket, struct, sys, types
ctrl = socket.socket(fileno=int(sys.argv[1]))
def exact(n):
    data = b''
    while len(data) < n:
        chunk = ctrl.recv(n - len(data))
        if not chunk:
            raise SystemExit(0)
        data += chunk
    return data
boot = json.loads(exact(struct.unpack('!I', exact(4))[0]))
sys.path.extend(boot['path'])
for name, source in boot['modules']:
    module = types.ModuleType(name)
    module.__file__ = '<' + name + '>'
    sys.modules[name] = module
    exec(compile(source, module.__file__, 'exec'), module.__dict__)
sys.modules['ludus_inside'].main(ctrl, boot)
"""

Mode = Literal["python", "argv", "call"]


def shipped(module_name: str, path: Path) -> tuple[str, str]:
    """A module to install inside the worker under ``module_name``, from a source file of ours."""
    return module_name, path.read_text()


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker is started with: extra modules to install, imports to warm, sys.path additions,
    and the hash seed of its interpreter.

    ``hash_seed`` is ``PYTHONHASHSEED``. A plain ``python`` draws a fresh one per run; a worker
    cannot (its executions are forks of one interpreter, whose strings already carry their
    hashes), so it is fixed instead: every execution on every worker iterates a set of strings
    in the same order, and a score does not depend on which worker ran the code. ``None`` draws
    one per worker start, shared by the executions of that worker.
    """

    modules: tuple[tuple[str, str], ...] = ()
    warm_imports: tuple[str, ...] = DEFAULT_WARM_IMPORTS
    site_packages: bool = True
    hash_seed: int | None = 0

    def __post_init__(self) -> None:
        if self.hash_seed is not None and not (
            isinstance(self.hash_seed, int) and not isinstance(self.hash_seed, bool) and 0 <= self.hash_seed < 2**32
        ):
            raise ValueError(f"hash_seed must be an integer in [0, 4294967295] or None, got {self.hash_seed!r}")


WORKER_MEMORY_HEADROOM_MB = 512  # the worker's own memory, on top of the execution's memory_mb


class WorkerDied(RuntimeError):
    pass


class _Worker:
    """One worker process. Made in two steps: the process starts on the spawner thread (see
    _Spawner), then ``handshake`` (on any thread) boots it and waits until it is ready — so
    several workers boot at once (``Sandbox.warm``)."""

    def __init__(self, isolation: backend.Isolation, spec: WorkerSpec, limits: Limits):
        host_sock, worker_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock = host_sock
        self.send_lock = threading.Lock()
        # the worker's own processes (bwrap's two, the worker) and memory come on top of the execution's
        self.memory_total_mb = limits.memory_mb + WORKER_MEMORY_HEADROOM_MB
        self.cgroups = backend.worker_cgroups(limits.processes + 8, self.memory_total_mb << 20)
        extra_env = {} if spec.hash_seed is None else {"PYTHONHASHSEED": str(spec.hash_seed)}
        try:
            self.process = subprocess.Popen(
                backend.worker_command(isolation, BOOT, worker_sock.fileno(), self.cgroups, extra_env),
                pass_fds=[worker_sock.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=backend.worker_env(isolation, extra_env),
                start_new_session=True,
            )
        finally:
            worker_sock.close()
        self._stderr_tail: list[bytes] = []
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        modules = [
            shipped("ludus_plain", HERE / "plain.py"),
            shipped("ludus_load", HERE / "load.py"),
            shipped("ludus_inside", HERE / "inside.py"),
            *spec.modules,
        ]
        self._boot = {
            "path": backend.site_packages() if spec.site_packages else [],
            "modules": modules,
            "warm_imports": list(spec.warm_imports),
            "isolate": "namespaces" if isolation.backend == "bwrap" else "none",
            "keep_in_tmp": [p for p in backend.python_paths() if p.startswith("/tmp/")],
        }

    def handshake(self) -> _Worker:
        """Send the boot frame and wait for the worker to be ready; on failure it is closed."""
        try:
            send_frame(self.sock, self._boot)
            ready = self.receive(time.monotonic() + STARTUP_TIMEOUT_S)
        except BaseException:
            self.close()
            raise
        self.level: str = ready.get("isolation", "none")
        self.level_detail: str = ready.get("detail", "")
        return self

    def _drain_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._stderr_tail = (self._stderr_tail + [line])[-20:]

    def stderr_tail(self) -> str:
        return b"".join(self._stderr_tail).decode("utf-8", "replace").strip()

    def receive(self, deadline: float) -> dict[str, Any]:
        self.sock.settimeout(max(0.001, deadline - time.monotonic()))
        try:
            message, fds = recv_frame(self.sock)
        except TimeoutError as exc:
            raise TimeoutError("the sandbox worker did not answer in time") from exc
        except (OSError, ValueError) as exc:
            raise WorkerDied(f"the sandbox worker broke its connection: {exc}; {self.stderr_tail()}") from exc
        for fd in fds:
            os.close(fd)
        if message is None:
            self.process.wait(timeout=5)
            raise WorkerDied(f"the sandbox worker exited ({self.process.returncode}): {self.stderr_tail()}")
        if not isinstance(message, dict):
            raise WorkerDied("the sandbox worker sent a malformed reply")
        return message

    def send(self, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
        with self.send_lock:
            send_frame(self.sock, message, fds)

    def alive(self) -> bool:
        return self.process.poll() is None

    def memory_limit_hits(self) -> int:
        """How often this worker's memory cgroup reached its limit (0 without one). The kernel's
        OOM killer may then end the worker itself rather than the execution (memory in memfds
        is charged to the group but to no process), so a death that follows a hit is the
        execution's doing, not the machine's."""
        hits = 0
        for group in self.cgroups:
            try:
                if (group / "memory.failcnt").exists():  # v1
                    hits += int((group / "memory.failcnt").read_text())
                elif (group / "memory.events").exists():  # v2
                    events = dict(line.split() for line in (group / "memory.events").read_text().splitlines())
                    hits += int(events.get("max", 0))
            except (OSError, ValueError):
                continue
        return hits

    def close(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()
        self.sock.close()
        if self.process.stderr:
            self.process.stderr.close()
        for group in self.cgroups:
            backend.remove_cgroup(group)


class _Spawner:
    """Starts every worker from one long-lived thread.

    bubblewrap's --die-with-parent uses PR_SET_PDEATHSIG, which fires when the *thread* that
    started the sandbox exits — so workers must not be started from short-lived threads
    (asyncio.to_thread, thread pools).
    """

    def __init__(self) -> None:
        self.requests: queue.Queue[tuple[Any, queue.Queue[Any]]] = queue.Queue()
        threading.Thread(target=self._loop, name="ludus-sandbox-spawner", daemon=True).start()

    def _loop(self) -> None:
        while True:
            make, answer = self.requests.get()
            try:
                answer.put((True, make()))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                answer.put((False, exc))

    def spawn(self, make: Any) -> Any:
        answer: queue.Queue[Any] = queue.Queue()
        self.requests.put((make, answer))
        ok, value = answer.get()
        if not ok:
            raise value
        return value


_spawner: _Spawner | None = None
_spawner_lock = threading.Lock()
_live_pools: weakref.WeakSet[Sandbox] = weakref.WeakSet()


def _spawn(make: Any) -> Any:
    global _spawner
    with _spawner_lock:
        if _spawner is None:
            _spawner = _Spawner()
    return _spawner.spawn(make)


class Running:
    """An execution in progress: ``wait()`` for its ``Execution``, or ``kill()`` it early."""

    def __init__(self, pool: Sandbox, worker: _Worker, limits: Limits, memory_limit_hits: int = 0):
        self._pool, self._worker, self._limits = pool, worker, limits
        self._memory_limit_hits = memory_limit_hits
        self._result: Execution | None = None

    def kill(self) -> None:
        if self._result is None:
            try:
                self._worker.send({"op": "kill"})
            except OSError:
                pass

    def wait(self) -> Execution:
        if self._result is not None:
            return self._result
        worker, healthy = self._worker, False
        try:
            reply = worker.receive(time.monotonic() + self._limits.backstop_s + REPLY_GRACE_S)
            self._result = Execution.from_json(reply)
            healthy = True
        except TimeoutError:
            self._result = Execution("infra_error", reason="the sandbox worker stopped answering; it was replaced")
        except (WorkerDied, OSError) as exc:
            if worker.memory_limit_hits() > self._memory_limit_hits:
                self._result = Execution(
                    "memory",
                    reason="the execution's processes and memory files reached the sandbox's total "
                    f"of {worker.memory_total_mb} MiB",
                )
            else:
                self._result = Execution("infra_error", reason=str(exc))
        finally:
            self._pool._release(worker, healthy)
        return self._result


class Sandbox:
    """Run untrusted programs in isolation, on a pool of warm workers.

    >>> with Sandbox() as box:
    ...     box.run("print(input()[::-1])", stdin=b"abc").stdout
    'cba\\n'

    ``backend`` is ``auto`` (bubblewrap if it works here, else the unisolated ``process``
    backend with a loud ``UnisolatedWarning``), ``bwrap`` (refuse to run without it) or
    ``process``. ``workers`` defaults to the number of CPUs.
    """

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        workers: int | None = None,
        backend_name: backend.Backend | Literal["auto"] = "auto",
        spec: WorkerSpec | None = None,
    ):
        self.limits = limits or Limits()
        self.isolation = backend.choose(backend_name)
        self.spec = spec or WorkerSpec()
        self.size = max(1, workers or os.cpu_count() or 1)
        self._idle: queue.LifoQueue[_Worker | None] = queue.LifoQueue()
        self._workers: set[_Worker] = set()
        self._lock = threading.Lock()
        self._closed = False
        for _ in range(self.size):
            self._idle.put(None)  # a slot whose worker starts on first use
        _live_pools.add(self)

    @property
    def level(self) -> str:
        """The isolation the workers reached: ``namespaces``, ``worker`` or ``none`` (see inside.py)."""
        worker = self._borrow()
        try:
            return worker.level
        finally:
            self._release(worker, True)

    def _borrow(self) -> _Worker:
        if self._closed:
            raise RuntimeError("this Sandbox is closed")
        worker = self._idle.get()
        if worker is not None and worker.alive():
            return worker
        if worker is not None:
            self._discard(worker)
        try:
            return self._start_worker()
        except BaseException:
            self._idle.put(None)
            raise

    def warm(self) -> None:
        """Start every worker not started yet, all at once, instead of each on its first use
        (their start-ups overlap: a pool of N costs about one start on N cores). Slots in use
        are left alone."""
        if self._closed:
            raise RuntimeError("this Sandbox is closed")
        slots = []
        while True:
            try:
                slots.append(self._idle.get_nowait())
            except queue.Empty:
                break
        started = [w for w in slots if w is not None]
        empty = len(slots) - len(started)
        failure: BaseException | None = None
        if empty:
            with ThreadPoolExecutor(empty) as pool:
                futures = [pool.submit(self._start_worker) for _ in range(empty)]
            for future in futures:
                if future.exception() is None:
                    started.append(future.result())
                else:
                    failure = failure or future.exception()
                    self._idle.put(None)
        for worker in started:
            self._idle.put(worker)
        if failure is not None:
            raise failure

    def _start_worker(self) -> _Worker:
        worker = _spawn(lambda: _Worker(self.isolation, self.spec, self.limits)).handshake()
        with self._lock:
            self._workers.add(worker)
        return worker

    def _release(self, worker: _Worker, healthy: bool) -> None:
        if healthy and not self._closed:
            self._idle.put(worker)
        else:
            self._discard(worker)
            self._idle.put(None)

    def _discard(self, worker: _Worker) -> None:
        with self._lock:
            self._workers.discard(worker)
        worker.close()

    def start(
        self,
        code: str | None = None,
        *,
        argv: Sequence[str] | None = None,
        call: str | None = None,
        payload: Any = None,
        files: Mapping[str, str | bytes] | None = None,
        stdin: bytes | str = b"",
        limits: Limits | None = None,
        pass_fds: Sequence[int] = (),
        serve: bool = False,
        call_cpu_s: float | None = None,
        stop_grace_s: float | None = None,
        module_name: str = "__main__",
        trusted: bool = False,
    ) -> Running:
        """Begin one execution and return at once. Exactly one of ``code`` (Python source, run
        in-process by a warm interpreter), ``argv`` (a program to execute) or ``call``
        (``module:function`` of a module shipped in the worker spec) must be given.

        ``pass_fds`` become descriptors 3, 4, … of the execution. With ``serve``, the code's
        top-level names then answer calls on descriptor 3 (see ``inside.serve_calls``), each
        call stopped after ``call_cpu_s`` seconds of CPU time if given.

        ``stop_grace_s``: a program that reaches its CPU or own-time limit is sent SIGTERM and
        given that long to end by itself before SIGKILL (still ``timeout``): a runner such as
        the repo environment's reports what its command left behind.

        ``trusted`` is for ludus's own code (``call``) only, such as the code grader's test
        runner: it skips the per-execution namespaces (still inside the worker's sandbox, with
        limits, its own process group and temporary folder), which saves a fork. Never pass
        it for model-written code.
        """
        if trusted and call is None:
            raise ValueError("trusted= is only for call= (ludus's own shipped functions), never for code or argv")
        if sum(x is not None for x in (code, argv, call)) != 1:
            raise ValueError("give exactly one of code=, argv= or call=")
        if call_cpu_s is not None and not (serve and call_cpu_s > 0):
            raise ValueError(f"call_cpu_s must be a positive number of seconds, with serve=True; got {call_cpu_s!r}")
        for name in files or {}:  # the caller's mistake, said now, rather than a failed execution
            path = os.path.normpath(name)
            if not name or path in (".", "..") or path.startswith(("/", "../")):
                raise ValueError(f"file path {name!r} must stay inside the execution's working directory")
        limits = limits or self.limits
        mode: Mode = "python" if code is not None else "argv" if argv is not None else "call"
        request: dict[str, Any] = {
            "op": "run",
            "mode": mode,
            "limits": limits.to_json(),
            "stack_bytes": limits.stack_bytes(),
            "files": {name: _file_json(content) for name, content in (files or {}).items()},
            "stdin_b64": base64.b64encode(stdin.encode() if isinstance(stdin, str) else stdin).decode(),
            "serve": serve,
            "call_cpu_s": call_cpu_s,
            "stop_grace_s": stop_grace_s,
            "module_name": module_name,
            "trusted": trusted,
        }
        if code is not None:
            request["code"] = code
        elif argv is not None:
            if not argv:
                raise ValueError("argv must name a program")
            request["argv"] = list(argv)
        else:
            request["call"], request["payload"] = call, payload
        worker = self._borrow()
        hits = worker.memory_limit_hits()
        try:
            worker.send(request, pass_fds)
        except OSError as exc:
            self._release(worker, False)
            running = Running(self, worker, limits)
            running._result = Execution("infra_error", reason=f"could not reach the sandbox worker: {exc}")
            return running
        return Running(self, worker, limits, hits)

    def run(self, code: str | None = None, **kwargs: Any) -> Execution:
        """Run one execution to its end (see ``start`` for the arguments)."""
        return self.start(code, **kwargs).wait()

    async def arun(self, code: str | None = None, **kwargs: Any) -> Execution:
        return await asyncio.to_thread(self.run, code, **kwargs)

    def close(self) -> None:
        """Kill every worker. Executions in flight end as ``infra_error``."""
        self._closed = True
        with self._lock:
            workers, self._workers = list(self._workers), set()
        for worker in workers:
            worker.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _file_json(content: str | bytes) -> str | dict[str, str]:
    return {"b64": base64.b64encode(content).decode()} if isinstance(content, bytes) else content


@atexit.register
def _close_all() -> None:
    for pool in list(_live_pools):
        pool.close()
