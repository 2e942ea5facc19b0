"""Where the rollout engine's environments run: threads in this process, or elsewhere (Ray).

The engine never touches an ``Env`` directly; it opens an :class:`EnvSession` on an
:class:`EnvHost` and awaits ``reset``/``step``/``close`` on it. The engine applies the time
limits and turns exceptions into ``infra_error``, so a host only has to run calls and report
their results or their exceptions.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ludus.core.env import Env, has_async_hooks
from ludus.core.types import Message, Observation, StepResult, Task


class EnvSession(Protocol):
    """One environment instance, wherever it lives. ``name`` is the environment's name;
    ``quick`` (optional, default false) says its calls finish at once, without blocking, so
    the engine may await them without a time limit or a task of their own."""

    name: str

    async def reset(self, task: Task, seed: int) -> Observation: ...

    async def step(self, action: Message) -> StepResult: ...

    async def close(self) -> None: ...


class EnvHost(Protocol):
    async def open(self, factory: Callable[[], Env]) -> EnvSession:
        """A new environment made by ``factory`` (which may have to travel to another process)."""
        ...

    def shutdown(self) -> None:
        """Release the host's workers; never waits for a hung environment call."""
        ...


class ThreadHost:
    """Environments in this process; their calls run on ``size`` daemon threads. An
    environment that overrides ``areset``/``astep`` runs those as coroutines instead, and a
    ``quick`` one runs its calls directly (a thread hop costs more than a procedural step).
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

    async def open(self, factory: Callable[[], Env]) -> _ThreadSession:
        env = factory() if factory in self._quick_factories else await self.run(factory)
        if env.quick:
            self._quick_factories.add(factory)
        return _ThreadSession(self, env)

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

    def shutdown(self) -> None:
        """Let queued jobs (environment closes) finish, then stop the threads; never waits."""
        for _ in self._threads:
            self._jobs.put(None)


class _ThreadSession:
    def __init__(self, host: ThreadHost, env: Env):
        self.host, self.env, self.name, self.quick = host, env, env.name, env.quick
        # an environment's own coroutines run on the event loop; its blocking calls go to a thread
        native = has_async_hooks(env)
        self.async_reset, self.async_step = native or _overrides(env, "areset"), native or _overrides(env, "astep")

    async def reset(self, task: Task | Callable[[], Task], seed: int) -> Observation:
        """``task`` may be a function that loads it: it is then called on the thread that runs
        the reset, so a task source that does I/O costs no extra thread hop."""
        if self.async_reset or self.env.quick:
            if not isinstance(task, Task):
                task = await self.host.run(task)
            return await self.env.areset(task, seed) if self.async_reset else self.env.reset(task, seed)
        return await self.host.run(self._reset, task, seed)

    def _reset(self, task: Task | Callable[[], Task], seed: int) -> Observation:
        return self.env.reset(task if isinstance(task, Task) else task(), seed)

    async def step(self, action: Message) -> StepResult:
        if self.async_step:
            return await self.env.astep(action)
        if self.env.quick:
            return self.env.step(action)
        return await self.host.run(self.env.step, action)

    async def close(self) -> None:
        if self.env.quick:
            _close_quietly(self.env)
        else:
            self.host.run(_close_quietly, self.env)  # not awaited: closing must not hold up the episode


_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.done():  # cancelled while the call ran (a time limit): the result is dropped
        return
    if exc is None:
        future.set_result(result)
    else:
        future.set_exception(exc)


def _overrides(env: Env, method: str) -> bool:
    own = getattr(type(env), method, None)
    return own is not None and own is not getattr(Env, method)


def _close_quietly(env: Env) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001 - closing must not turn a finished episode into a failure
        pass


def make_host(
    threads: int,
    *,
    env_servers: Sequence[str] = (),
    token: str | None = None,
    ray: bool = False,
    ray_address: str | None = None,
    ray_actors: int = 2,
) -> EnvHost:
    """Where ``ludus eval`` and ``ludus train`` run environments: ``threads`` threads here (the
    default), sessions on env servers (:class:`~ludus.rollout.remote.ServerHost`), or Ray actors
    (:class:`~ludus.rollout.ray_host.RayHost`) sharing ``threads`` calls at once among them."""
    if env_servers and ray:
        raise ValueError("environments run on env servers or on Ray actors, not both: drop one of the two")
    if env_servers:
        from ludus.rollout.remote import ServerHost

        return ServerHost(env_servers, token=token)
    if ray:
        from ludus.rollout.ray_host import RayHost

        if ray_actors < 1:
            raise ValueError(f"Ray actors must be at least 1, got {ray_actors}")
        per_actor = -(-threads // ray_actors)  # the same calls at once in all as without Ray
        # on this machine alone, the actors share its cores; on a cluster each reserves one
        cpus = 1.0 if ray_address else min(1.0, (os.cpu_count() or 1) / ray_actors)
        return RayHost(ray_actors, per_actor, address=ray_address, num_cpus_per_actor=cpus)
    return ThreadHost(threads)
