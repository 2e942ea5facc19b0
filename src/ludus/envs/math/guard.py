"""Run a pure function on untrusted input under a hard time and memory limit, from any thread.

``signal.alarm`` timeouts (what Math-Verify uses) only work on the main thread and cannot
interrupt C code such as a big-integer power; a thread cannot be killed at all. So the work
runs in a small pool of worker *processes*: the caller waits on a pipe with a deadline and,
when it passes, kills the worker (SIGKILL) and starts a fresh one on the next call. Workers
also get an address-space limit (``RLIMIT_AS``) so a memory blow-up fails inside the worker
instead of taking the host down. Callers may be threads or asyncio tasks (through
``asyncio.to_thread``); each call borrows one idle worker.

A worker is a fresh interpreter (``python -m ludus.envs.math.guard module:function``) talking
length-prefixed pickles over stdin/stdout, so it never re-imports the caller's ``__main__``
(the trap of multiprocessing's spawn) and never inherits a forked copy of torch's threads.

The deadline counts the worker's own time, not the wall clock's: a call ends as ``timeout``
when the worker used ``timeout_s`` of CPU, or of own time (wall time minus the time it waited
for a CPU: see :mod:`ludus.sandbox.load`). A worker that a busy machine starves gets more wall
time, up to a backstop; past it the call is ``starved``, which callers score ``infra_error``:
a load spike never turns an answer into a timeout.

This is for *our* code on hostile data (a LaTeX parser, a SymPy comparison), not for running
model-written code: that belongs in the sandbox.
"""

from __future__ import annotations

import atexit
import importlib
import os
import pickle
import resource
import select
import struct
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import IO, Any

from ludus.sandbox.load import TreeClock, backstop_s

STARTUP_TIMEOUT_S = 120.0  # importing the function's module (e.g. SymPy) on a loaded machine
_HEADER = struct.Struct("!I")


@dataclass(frozen=True)
class Outcome:
    """What happened to one call: ``ok`` with ``value``, or ``timeout`` / ``memory`` / ``crash`` /
    ``starved`` (the machine, not the call, was too slow) with ``detail``."""

    kind: str
    value: Any = None
    detail: str = ""


def _write(stream: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, left = [], n
    while left:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimeoutError
        chunk = os.read(fd, left)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read(fd: int, deadline: float | None) -> Any:
    (size,) = _HEADER.unpack(_read_exact(fd, _HEADER.size, deadline))
    return pickle.loads(_read_exact(fd, size, deadline))


class _Worker:
    def __init__(self, target: str, memory_bytes: int):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ludus.envs.math.guard", target, str(memory_bytes)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C in the caller's terminal is the caller's to handle
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.stdin, self.fd = self.process.stdin, self.process.stdout.fileno()
        try:
            ready = _read(self.fd, time.monotonic() + STARTUP_TIMEOUT_S) == "ready"
        except (TimeoutError, EOFError, OSError, pickle.UnpicklingError):
            ready = False
        if not ready:
            self.kill()
            raise RuntimeError(f"a verifier worker for {target} did not start within {STARTUP_TIMEOUT_S:g} s")

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


class GuardedPool:
    """``pool.call(*args, timeout_s=…)`` runs ``target(*args)`` in a worker process with a deadline.

    ``target`` is ``"package.module:function"``; arguments and result must pickle. Workers
    start lazily (start-up time never counts against a deadline), are reused across calls and
    are replaced after a timeout or a crash. ``close()`` (also run at interpreter exit) stops them.
    """

    def __init__(self, target: str, *, workers: int = 1, memory_mb: int = 1024):
        if workers < 1:
            raise ValueError("workers must be at least 1")
        if ":" not in target:
            raise ValueError(f"target must be 'module:function', got {target!r}")
        self.target = target
        self.size = workers
        self.memory_bytes = memory_mb * 1024 * 1024
        self._idle: list[_Worker] = []
        self._started = 0
        self._lock = threading.Condition()
        self._closed = False
        atexit.register(self.close)

    def _borrow(self) -> _Worker:
        with self._lock:
            while not self._idle and self._started >= self.size and not self._closed:
                self._lock.wait()
            if self._closed:
                raise RuntimeError("the pool is closed")
            if self._idle:
                return self._idle.pop()
            self._started += 1
        try:
            return _Worker(self.target, self.memory_bytes)
        except BaseException:
            self._give_back(None)
            raise

    def _give_back(self, worker: _Worker | None) -> None:
        with self._lock:
            if worker is not None and self._closed:
                worker.kill()
                worker = None
            if worker is None:
                self._started -= 1
            else:
                self._idle.append(worker)
            self._lock.notify()

    def call(self, *args: Any, timeout_s: float, wall_s: float | None = None) -> Outcome:
        """``target(*args)``, or why not: the caller turns a non-``ok`` outcome into a score.

        ``timeout_s`` counts the worker's CPU and own time; ``wall_s`` is how long a call that a
        busy machine starves may take before it is ``starved`` (default: ``backstop_s(timeout_s)``)."""
        try:
            worker: _Worker | None = self._borrow()
        except (RuntimeError, OSError) as exc:
            return Outcome("crash", detail=str(exc))
        assert worker is not None
        backstop = backstop_s(timeout_s) if wall_s is None else wall_s
        stopped: Outcome | None = None  # the call ended without a reply: the worker is killed
        try:
            clock, started = TreeClock([worker.process.pid]), time.monotonic()
            _write(worker.stdin, args)
            stopped = _await_reply(worker, clock, timeout_s, started, started + backstop)
            if stopped is None:
                kind, value = _read(worker.fd, started + backstop)
        except TimeoutError:  # a reply begun but not finished by the backstop: starved too
            stopped = Outcome("starved", detail=f"the machine was too busy: no whole reply within {backstop:g} s")
        except (EOFError, OSError, pickle.UnpicklingError):
            worker.kill()
            code = worker.process.returncode
            worker = None
            return Outcome("crash", detail=f"the verifier worker died (exit code {code})")
        finally:
            if worker is not None and stopped is not None:
                worker.kill()
                worker = None
            self._give_back(worker)
        if stopped is not None:
            return stopped
        return Outcome("ok", value) if kind == "ok" else Outcome(kind, detail=value)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._lock.notify_all()
        for worker in idle:
            worker.kill()

    def __enter__(self) -> GuardedPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _await_reply(worker: _Worker, clock: TreeClock, limit_s: float, started: float, backstop: float) -> Outcome | None:
    """Wait until the worker's reply is readable (``None``), until the worker has used ``limit_s``
    of CPU or own time (``timeout``), or until the wall clock reaches ``backstop`` (``starved``)."""
    check = started + limit_s
    while True:
        if select.select([worker.fd], [], [], max(0.0, min(check, backstop) - time.monotonic()))[0]:
            return None
        now = time.monotonic()
        wall, times = now - started, clock.sample(now)
        if times.overran(limit_s, wall):
            return Outcome(
                "timeout", detail=f"no result within {limit_s:g} s ({times.describe(wall)}); the worker was killed"
            )
        if now >= backstop:
            return Outcome(
                "starved", detail=f"the machine was too busy: {times.describe(wall)}, short of the {limit_s:g} s limit"
            )
        check = now + max(0.05, limit_s - max(times.cpu_s, times.own_s(wall)))


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _serve(target: str, memory_bytes: int) -> None:
    """The worker's loop: read arguments, call, write ``(kind, value)``; one call at a time."""
    module, _, name = target.partition(":")
    function = getattr(importlib.import_module(module), name)
    if memory_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    out, fd = sys.stdout.buffer, sys.stdin.fileno()
    sys.stdout = sys.stderr  # a stray print in the function must not corrupt the protocol
    _write(out, "ready")
    while True:
        try:
            args = _read(fd, None)
        except EOFError:
            return
        try:
            reply = ("ok", function(*args))
        except MemoryError:
            reply = ("memory", "the memory limit was exceeded")
        except Exception as exc:  # the function's own bug: report it and keep serving
            reply = ("crash", "".join(traceback.format_exception_only(exc)).strip())
        _write(out, reply)


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
