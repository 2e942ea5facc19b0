"""Running a user's agent as a black box: a Python callable (sync or async) or a command.

Both kinds get the same things — the task, the base URL and key of the endpoint their model
calls go to, a working directory of their own — and end the same way, in an
:class:`AgentOutcome`. What the environment needs to judge a run fairly is the agent's own CPU
time (a limit that decides a verdict counts CPU, never the machine's load), so each run can
report it: a command's whole process tree (read from /proc by :class:`TreeClock`), a callable's
thread.

A command can be stopped (with all it started, daemons too: :mod:`ludus.agents.reaper`). A Python
agent is stopped by an exception raised in its thread, which takes effect at its next step of
Python: one blocked in C code (a long sleep) keeps its thread until that returns, its model calls
refused. Run agents that may hang as commands.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import inspect
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ludus.sandbox.load import TreeClock

# what is kept of a command's stdout (its answer) and stderr (its complaint)
ANSWER_BYTES = 1 << 20
STDERR_TAIL_BYTES = 4000
REAPER = Path(__file__).with_name("reaper.py")
REAPER_WAIT_S = 10.0  # for the reaper to kill what a stopped command left (milliseconds, as a rule)


@dataclass(frozen=True)
class AgentContext:
    """What a Python agent is called with: ``agent(context)``.

    ``task`` is the task as the agent may see it (``id``, ``prompt`` and the ``info`` keys the
    environment shares, never the answer). ``base_url`` and ``api_key`` are for the agent's
    OpenAI client — ``OpenAI(base_url=context.base_url, api_key=context.api_key)`` — and name this
    episode: every call made with them is one turn of it. ``workdir`` is an empty directory the
    agent may write to (graders may read what it leaves there)."""

    task: dict[str, Any]
    base_url: str
    api_key: str = field(repr=False)  # a secret: never in a log line
    workdir: Path


@dataclass
class AgentOutcome:
    """How an agent's run ended. ``answer``: what a callable returned (as text; ``None`` if it
    returned nothing) or what a command printed on stdout (stripped). ``error``: the exception a
    callable raised or a command's non-zero exit with the end of its stderr; ``None`` when it
    ended normally. ``workdir``: the directory it worked in. ``timed_out``: stopped at its CPU
    limit by the run itself (the sandbox counts it); ``infra_failure``: what ran the agent failed,
    not the agent (``error`` says how), so nothing of the episode is graded."""

    answer: str | None
    error: str | None
    workdir: Path
    exit_code: int | None = None
    cpu_s: float = 0.0
    timed_out: bool = False
    infra_failure: bool = False


class AgentRun:
    """One run of an agent, started at once in the background. ``on_end`` is called once, from
    the run's own thread, with its :class:`AgentOutcome`."""

    def cpu_s(self) -> float:
        """CPU time the agent has used so far."""
        raise NotImplementedError

    def stop(self) -> None:
        """End the run now if it can be ended (a command), else let it end on its own."""
        raise NotImplementedError


class AgentStopped(BaseException):
    """Raised in a Python agent's thread when its run is stopped (its episode ended): a
    ``BaseException``, so that the agent's own ``except Exception`` does not hold it."""


class CallableRun(AgentRun):
    """A Python agent in a thread of its own; an async one runs on an event loop of that thread."""

    def __init__(
        self, agent: Callable[[AgentContext], Any], context: AgentContext, on_end: Callable[[AgentOutcome], None]
    ):
        self._agent, self._context, self._on_end = agent, context, on_end
        self._clock: int | None = None
        self._last_cpu = 0.0
        self._lock = threading.Lock()
        self._returned = False  # the agent's code is done: nothing of it is left to stop
        self._stopped = False
        self._thread = threading.Thread(target=self._main, daemon=True, name="ludus-agent")
        self._thread.start()

    def _main(self) -> None:
        try:
            self._run()
        except AgentStopped:
            pass  # stopped as it ended: its episode reads no outcome now

    def _run(self) -> None:
        self._clock = time.pthread_getcpuclockid(threading.get_ident())
        answer, error = None, None
        try:
            result = self._agent(self._context)
            if inspect.isawaitable(result):
                result = asyncio.run(_awaited(result))
            answer = None if result is None else str(result)
        except BaseException as exc:  # noqa: BLE001 - the agent's failure, reported, never ours
            error = f"{type(exc).__name__}: {exc}"[:STDERR_TAIL_BYTES]
        with self._lock:
            self._returned = True
        cpu = self.cpu_s()
        self._on_end(AgentOutcome(answer, error, self._context.workdir, cpu_s=cpu))

    def cpu_s(self) -> float:
        if self._clock is not None:
            try:
                self._last_cpu = time.clock_gettime(self._clock)
            except OSError:  # the thread has ended: its last reading stands
                pass
        return self._last_cpu

    def stop(self) -> None:
        """Raise :class:`AgentStopped` in the agent's thread, once: Python code (a busy loop, a
        model call, which the ended episode refuses) stops at its next step; a call into C code (a
        sleep) first returns."""
        with self._lock:
            if self._returned or self._stopped or self._thread.ident is None:
                return
            self._stopped = True
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(self._thread.ident), ctypes.py_object(AgentStopped)
            )


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


class CommandRun(AgentRun):
    """An agent as a command, in a process group of its own, started in ``cwd``: the task as JSON
    on stdin and in the file ``$LUDUS_TASK_FILE``, its working directory in ``$LUDUS_WORKDIR``
    (``{task_file}`` and ``{workdir}`` in the arguments are replaced by those paths),
    ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` in its environment; its answer is what it prints
    on stdout. It runs under :mod:`ludus.agents.reaper`, so that whatever it starts, daemons
    included, ends with it, and counts in its CPU time."""

    def __init__(
        self, command: Sequence[str], context: AgentContext, on_end: Callable[[AgentOutcome], None], cwd: Path
    ):
        self._context, self._on_end = context, on_end
        task_file = context.workdir / ".ludus_task.json"
        task_json = json.dumps(context.task, ensure_ascii=False)
        task_file.write_text(task_json, encoding="utf-8")
        argv = [
            part.replace("{task_file}", str(task_file)).replace("{workdir}", str(context.workdir)) for part in command
        ]
        variables = {
            **os.environ,
            "OPENAI_BASE_URL": context.base_url,
            "OPENAI_API_KEY": context.api_key,
            "LUDUS_TASK_FILE": str(task_file),
            "LUDUS_WORKDIR": str(context.workdir),
        }
        self._process = subprocess.Popen(
            [sys.executable, "-I", "-S", str(REAPER), *argv],
            cwd=cwd,
            env=variables,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self._clock = TreeClock([self._process.pid])
        self._cpu = 0.0
        self._lock = threading.Lock()
        self._stdin = task_json.encode("utf-8")
        threading.Thread(target=self._main, daemon=True, name="ludus-agent-command").start()

    def _main(self) -> None:
        out, err = bytearray(), bytearray()
        readers = [
            threading.Thread(target=_read_into, args=(self._process.stdout, out, ANSWER_BYTES), daemon=True),
            threading.Thread(target=_read_into, args=(self._process.stderr, err, None), daemon=True),
        ]
        for reader in readers:
            reader.start()
        try:
            assert self._process.stdin is not None
            self._process.stdin.write(self._stdin)
            self._process.stdin.close()
        except OSError:
            pass  # an agent that does not read its stdin
        code = self._process.wait()
        self.cpu_s()
        self.stop()  # what it left running in its group goes with it
        for reader in readers:
            reader.join()
        answer = out.decode("utf-8", errors="replace").strip()
        error = None
        if code != 0:
            error = ended_with(code, err[-STDERR_TAIL_BYTES:].decode("utf-8", errors="replace").strip())
        self._on_end(AgentOutcome(answer, error, self._context.workdir, exit_code=code, cpu_s=self._cpu))

    def cpu_s(self) -> float:
        with self._lock:
            self._cpu = max(self._cpu, self._clock.sample().cpu_s)
            return self._cpu

    def stop(self) -> None:
        """The reaper kills the command and all it started, then itself (woken first if the
        command stopped its whole group); its group is killed after it, or in its place if it
        does not end in time."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, signal.SIGCONT)
        self._process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(REAPER_WAIT_S)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, signal.SIGKILL)


def ended_with(code: int, stderr_tail: str) -> str:
    """A command's failure in words: its exit status (a negative ``code``: the signal that
    killed it) and the end of its stderr."""
    how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
    return f"the agent command ended with {how}" + (f": {stderr_tail}" if stderr_tail else "")


def _read_into(stream: Any, into: bytearray, limit: int | None) -> None:
    """Read ``stream`` to its end, keeping at most ``limit`` bytes (all of stderr is read so that
    the agent never blocks on a full pipe; only its tail is kept)."""
    while chunk := stream.read1(65536):
        if limit is None:
            into += chunk
            del into[: max(0, len(into) - STDERR_TAIL_BYTES)]
        elif len(into) < limit:
            into += chunk[: limit - len(into)]
    stream.close()
