"""Where the rollout engine's environments run: threads in this process, or elsewhere (Ray).

The engine never touches an ``Env`` directly; it opens a :class:`HostedEnv` on an
:class:`EnvHost` and awaits ``reset``/``step``/``close`` on it. The engine applies the time
limits and turns exceptions into ``infra_error``, so a host only has to run calls and report
their results or their exceptions. Which host a command uses: :mod:`ludus.rollout.placement`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import queue
import threading
from collections.abc import Callable
from typing import Any, Protocol

from ludus.core.env import Env, has_async_hooks
from ludus.core.types import Message, Observation, StepResult, Task


class EnvCalls(enum.Enum):
    """How an environment's calls are run, decided once when it is opened (:func:`env_calls`)."""

    QUICK = "quick"  # pure Python that returns at once (``Env.quick``): called inline, no thread, no time limit
    ASYNC = "async"  # I/O behind async hooks (or another process): its coroutines awaited on the event loop
    BLOCKING = "blocking"  # anything else: each call on a thread


def env_calls(env: Env) -> EnvCalls:
    """The one decision how ``env`` is called. Async hooks win over ``quick``: an environment that
    does I/O keeps its time limit whatever it declares."""
    if has_async_hooks(env):
        return EnvCalls.ASYNC
    return EnvCalls.QUICK if env.quick else EnvCalls.BLOCKING


class HostedEnv(Protocol):
    """One environment as a host runs it, wherever it lives. ``name`` is the environment's name;
    ``calls`` says how its calls run: the engine gives :attr:`EnvCalls.QUICK` ones no time limit."""

    name: str
    calls: EnvCalls

    async def reset(self, task: Task, seed: int) -> Observation: ...

    async def step(self, action: Message) -> StepResult: ...

    async def close(self) -> None: ...


class EnvHost(Protocol):
    async def open(self, factory: Callable[[], Env]) -> HostedEnv:
        """A new environment made by ``factory`` (which may have to travel to another process)."""
        ...

    def opens_quickly(self, factory: Callable[[], Env]) -> bool:
        """Whether ``open(factory)`` returns at once (it has made a quick environment before):
        the engine then sets no time limit on it."""
        ...

    def shutdown(self) -> None:
        """Release the host's workers; never waits for a hung environment call."""
        ...


class ThreadHost:
    """Environments in this process; their calls run on ``size`` daemon threads, or as they
    :func:`env_calls` says: an environment with async hooks runs its coroutines on the event loop,
    a ``quick`` one runs its calls directly (a thread hop costs more than a procedural step).
    Daemon threads, because a call that never returns must not keep the process alive at exit."""

    def __init__(self, size: int):
        self._size = size
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, daemon=True, name="ludus-env") for _ in range(size)]
        for thread in self._threads:
            thread.start()
        self._quick_factories: set[Callable[[], Env]] = set()  # factories seen making quick environments
        # calls on a thread now, and whether another thread has taken that one's place
        self._running: dict[asyncio.Future[Any], bool] = {}
        self._replaced = 0
        self._lock = threading.Lock()
        self._closing: set[asyncio.Future[Any]] = set()  # environment closes not finished yet

    async def open(self, factory: Callable[[], Env]) -> _InProcessEnv:
        env = factory() if self.opens_quickly(factory) else await self.run(factory)
        hosted = _InProcessEnv(self, env)
        if hosted.calls is EnvCalls.QUICK:
            self._quick_factories.add(factory)
        return hosted

    def opens_quickly(self, factory: Callable[[], Env]) -> bool:
        return factory in self._quick_factories

    def run(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """``fn(*args)`` on a pool thread, as a future of the running event loop. Cancelling the
        future abandons the result, not the call (a thread cannot be interrupted)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._jobs.put((loop, future, fn, args))
        return future

    def _work(self) -> None:
        # a loop future and one call_soon_threadsafe per result: half the cost of a
        # concurrent.futures.Future (its Condition) chained to the loop by asyncio.wrap_future
        while (job := self._jobs.get()) is not None:
            loop, future, fn, args = job
            if future.cancelled():  # the caller gave up before the call started
                continue
            with self._lock:
                self._running[future] = False
            try:
                outcome: tuple[Any, BaseException | None] = (fn(*args), None)
            except BaseException as exc:  # noqa: BLE001 - delivered to the awaiting episode
                outcome = (None, exc)
            with self._lock:
                replaced = self._running.pop(future)
                self._replaced -= replaced
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting
                loop.call_soon_threadsafe(_settle, future, *outcome)
            if replaced:
                return  # a new thread took this one's place while its call was abandoned

    def replace_abandoned(self) -> int:
        """Start a thread in place of each one whose call was given up (its future cancelled: a
        time limit passed) but still runs, so that new calls do not queue behind hung ones; the
        hung thread leaves the pool when its call returns. At most ``size`` threads are replaced
        at once. Returns how many were."""
        started = 0
        with self._lock:
            for future, replaced in self._running.items():
                if replaced or not future.cancelled() or self._replaced >= self._size:
                    continue
                self._running[future] = True
                self._replaced += 1
                thread = threading.Thread(target=self._work, daemon=True, name="ludus-env")
                thread.start()
                self._threads.append(thread)
                started += 1
            if started:
                self._threads = [t for t in self._threads if t.is_alive()]
        return started

    def close_later(self, env: Env) -> None:
        """Close ``env`` on a pool thread without holding up the episode that used it."""
        future = self.run(_close_quietly, env)
        self._closing.add(future)
        future.add_done_callback(self._closing.discard)

    async def closes_finished(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` seconds: a close may hang) until every environment given to
        :meth:`close_later` is closed, so that whoever ran the episodes finds their processes and
        connections released. Returns whether they all were."""
        if self._closing:
            await asyncio.wait(list(self._closing), timeout=timeout)
        return not self._closing

    def shutdown(self) -> None:
        """Let queued jobs (environment closes) finish, then stop the threads; never waits."""
        for _ in self._threads:
            self._jobs.put(None)


class _InProcessEnv:
    """An environment of this process, called as its :class:`EnvCalls` says."""

    def __init__(self, host: ThreadHost, env: Env):
        self.host, self.env, self.name, self.calls = host, env, env.name, env_calls(env)

    async def reset(self, task: Task | Callable[[], Task], seed: int) -> Observation:
        """``task`` may be a function that loads it: it is then called on the thread that runs
        the reset, so a task source that does I/O costs no extra thread hop."""
        if self.calls is EnvCalls.BLOCKING:
            return await self.host.run(self._reset, task, seed)
        if not isinstance(task, Task):
            task = await self.host.run(task)
        return await self.env.areset(task, seed) if self.calls is EnvCalls.ASYNC else self.env.reset(task, seed)

    def _reset(self, task: Task | Callable[[], Task], seed: int) -> Observation:
        return self.env.reset(task if isinstance(task, Task) else task(), seed)

    async def step(self, action: Message) -> StepResult:
        if self.calls is EnvCalls.ASYNC:
            return await self.env.astep(action)
        if self.calls is EnvCalls.QUICK:
            return self.env.step(action)
        return await self.host.run(self.env.step, action)

    async def close(self) -> None:
        if self.calls is EnvCalls.QUICK:
            _close_quietly(self.env)
        else:
            self.host.close_later(self.env)


_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.done():  # cancelled while the call ran (a time limit): the result is dropped
        return
    if exc is None:
        future.set_result(result)
    else:
        future.set_exception(exc)


def _close_quietly(env: Env) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001 - closing must not turn a finished episode into a failure
        pass
