"""Environments in Ray actors: an :class:`EnvHost` that reaches past one process and one machine.

    host = RayHost(actors=8, envs_per_actor=16)             # a local Ray instance, or address=...
    engine = RolloutEngine(policy, env_factory, sampling, host=host)
    try:
        trajectories = engine.run(requests(tasks))
    finally:
        host.shutdown()

Each actor is a process that holds many environments, keyed by an id, and runs their blocking
``reset``/``step`` calls on its own threads (a :class:`ThreadHost` inside the actor), so a slow step
holds up only its own episode. The factory travels to the actor with Ray's cloudpickle (a lambda
works); tasks, actions and results cross as their ``to_dict()`` JSON and are rebuilt on the other
side (see :class:`RayHost`).

Failures keep the engine's rules: an exception raised by an environment reaches the engine as that
exception; an actor that dies (a crash, a killed process, a lost node) fails the pending and later
calls of its environments with :class:`ActorDied` — never a hang — and is replaced for new ones.
"""

from __future__ import annotations

import itertools
import os
import socket
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ludus.core.env import Env
from ludus.core.types import Message, Observation, StepResult, Task
from ludus.rollout.hosts import EnvCalls, HostedEnv, ThreadHost

READY_TIMEOUT_S = 120.0  # how long RayHost() waits for its actors to start before saying why they did not


class ActorDied(RuntimeError):
    """The Ray actor holding an environment is gone; the environment's episode cannot continue."""


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError("RayHost needs Ray: pip install 'ludus[ray]'") from None
    return ray


class _EnvActor:
    """The actor: environments by id, their calls on ``threads`` threads of this process.

    An async actor, so that one hung environment call occupies one thread, never the actor."""

    def __init__(self, threads: int):
        self._host = ThreadHost(threads)
        self._envs: dict[int, HostedEnv] = {}

    async def pid(self) -> int:
        return os.getpid()

    async def open(self, eid: int, factory: Callable[[], Env]) -> str:
        env = await self._host.open(factory)
        self._envs[eid] = env
        return env.name

    async def reset(self, eid: int, task: dict[str, Any], seed: int) -> dict[str, Any]:
        return (await self._envs[eid].reset(Task.from_dict(task), seed)).to_dict()

    async def step(self, eid: int, action: dict[str, Any]) -> dict[str, Any]:
        return (await self._envs[eid].step(Message.from_dict(action))).to_dict()

    async def close(self, eid: int) -> None:
        env = self._envs.pop(eid, None)
        if env is not None:
            await env.close()  # queues the close on a thread; returns at once


@dataclass(eq=False)
class _Actor:
    handle: Any
    envs: int = 0  # environments open on it: new ones go to the least loaded actor
    dead: bool = False


class RayHost:
    """Environments in ``actors`` Ray actors, each running up to ``envs_per_actor`` environment
    calls at once (more environments than that may live on an actor; their calls wait for a thread).

    ``address``: an existing cluster (``"auto"`` for the one ``ray start`` or ``RAY_ADDRESS``
    names, ``"HOST:PORT"``, ``"ray://HOST:10001"``); ``None`` starts a Ray instance local to this
    machine, bound to 127.0.0.1, with one CPU per core. If Ray is already initialised in this process,
    that connection is used as it is. ``num_cpus_per_actor`` is the CPU reservation Ray schedules each
    actor with (fractions allowed).

    Tasks, actions and results cross the process boundary as ``to_dict()`` JSON rather than as
    pickled ludus objects: that is the format ludus already keeps trajectories in, it is plain
    data (nothing depends on both sides unpickling the same class layout; unknown fields are
    dropped, as when reading an older JSONL file), and ``from_dict`` validates what arrives, so a
    malformed result fails at the boundary with the field named. The factory is the one thing
    pickled: the environment's code must be importable on the workers (an installed package, a
    Ray ``runtime_env``, or defined in the driver's ``__main__``, which cloudpickle sends by value).

    ``shutdown()`` kills the actors this host made and, if this host called ``ray.init``, disconnects
    (which stops a local instance it started; a cluster it only joined keeps running)."""

    def __init__(
        self,
        actors: int = 2,
        envs_per_actor: int = 16,
        *,
        address: str | None = None,
        num_cpus_per_actor: float = 1.0,
    ):
        if actors < 1 or envs_per_actor < 1:
            raise ValueError(f"RayHost needs actors >= 1 and envs_per_actor >= 1, got {actors} and {envs_per_actor}")
        if num_cpus_per_actor < 0:
            raise ValueError(f"num_cpus_per_actor must be >= 0, got {num_cpus_per_actor}")
        if address is None and "ray" not in sys.modules:
            # Ray reads this once, on import: without it a "local" node advertises (and its servers
            # listen on) the machine's network address instead of 127.0.0.1.
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        self._ray = ray = _import_ray()
        self._initialised = not ray.is_initialized()
        if self._initialised:
            if address is None:
                cores = os.cpu_count() or 1
                if actors * num_cpus_per_actor > cores:
                    raise ValueError(
                        f"{actors} actors × {num_cpus_per_actor} CPUs do not fit the {cores} cores of this machine: "
                        "lower actors or num_cpus_per_actor (fractions are fine: environments mostly wait)"
                    )
                ray.init(
                    address="local",  # never a cluster found on the side (ray start, RAY_ADDRESS)
                    num_cpus=cores,
                    include_dashboard=False,
                    _node_ip_address="127.0.0.1",
                )
                if ray.util.get_node_ip_address() != "127.0.0.1":
                    warnings.warn(
                        "ray was imported before RayHost, so the local Ray instance listens on this machine's "
                        "network address: set RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 before importing ray to keep it "
                        "on 127.0.0.1",
                        stacklevel=2,
                    )
            else:
                _probe(address)
                ray.init(address=address)
        self._remote = ray.remote(_EnvActor).options(num_cpus=num_cpus_per_actor)
        self._threads = envs_per_actor
        self._ids = itertools.count()
        self._actors = [_Actor(self._remote.remote(envs_per_actor)) for _ in range(actors)]
        self._spawned = list(self._actors)
        self._await_ready(num_cpus_per_actor)

    def _await_ready(self, num_cpus_per_actor: float) -> None:
        ray = self._ray
        pending = {a.handle.pid.remote(): a for a in self._actors}
        try:
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=READY_TIMEOUT_S)
            ray.get(ready)
        except ray.exceptions.RayError as exc:
            self.shutdown()
            raise RuntimeError(
                f"a Ray actor for environments failed to start ({type(exc).__name__}): {_first_line(exc)} "
                "(on a cluster, every node needs ludus and the environments' packages installed)"
            ) from exc
        if len(ready) < len(pending):
            self.shutdown()
            raise RuntimeError(
                f"only {len(ready)} of {len(pending)} Ray actors started within {READY_TIMEOUT_S:.0f} s: "
                f"the cluster lacks CPUs for {len(pending)} × num_cpus_per_actor={num_cpus_per_actor} "
                f"(available: {ray.available_resources().get('CPU', 0)}); lower actors or num_cpus_per_actor"
            )

    async def open(self, factory: Callable[[], Env]) -> _ActorEnv:
        """A new environment on the least loaded actor; an actor found dead is replaced, once."""
        try:
            return await self._open_on(self._least_loaded(), factory)
        except ActorDied:
            return await self._open_on(self._least_loaded(), factory)

    def opens_quickly(self, factory: Callable[[], Env]) -> bool:
        return False  # an actor call, which may wait on a dead actor or a slow factory

    async def _open_on(self, actor: _Actor, factory: Callable[[], Env]) -> _ActorEnv:
        env = _ActorEnv(self, actor, next(self._ids))
        actor.envs += 1
        try:
            env.name = await env.call("open", factory)
        except BaseException:
            actor.envs -= 1
            raise
        return env

    def _least_loaded(self) -> _Actor:
        return min(self._actors, key=lambda a: a.envs)

    def _lost(self, actor: _Actor) -> None:
        """``actor`` died: a fresh one takes its place for new environments."""
        if actor.dead:
            return
        actor.dead = True
        self._ray.kill(actor.handle, no_restart=True)  # it may only look dead (a lost node): make sure
        fresh = _Actor(self._remote.remote(self._threads))
        self._actors[self._actors.index(actor)] = fresh
        self._spawned.append(fresh)

    def shutdown(self) -> None:
        """Kill this host's actors (never waiting for a hung call); disconnect if this host connected."""
        for actor in self._spawned:
            try:
                self._ray.kill(actor.handle, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone: nothing left to release
                pass
        self._spawned.clear()
        if self._initialised and self._ray.is_initialized():
            self._ray.shutdown()
        self._initialised = False


class _ActorEnv:
    """An environment in a Ray actor, as the engine runs it: every call is an awaited actor call."""

    calls = EnvCalls.ASYNC

    def __init__(self, host: RayHost, actor: _Actor, eid: int):
        self.host, self.actor, self.eid, self.name = host, actor, eid, ""

    async def reset(self, task: Task, seed: int) -> Observation:
        return Observation.from_dict(await self.call("reset", task.to_dict(), seed))

    async def step(self, action: Message) -> StepResult:
        return StepResult.from_dict(await self.call("step", action.to_dict()))

    async def close(self) -> None:
        self.actor.envs -= 1
        if not self.actor.dead:
            try:
                await self.call("close")
            except ActorDied:
                pass  # nothing left to close

    async def call(self, method: str, *args: Any) -> Any:
        """``method`` on the actor. The environment's own exception is raised as itself; a dead
        actor as :class:`ActorDied` (and replaced)."""
        ray = self.host._ray
        if self.actor.dead:
            raise ActorDied(f"the Ray actor holding this environment died before this {method} (see its first error)")
        try:
            return await getattr(self.actor.handle, method).remote(self.eid, *args)
        except ray.exceptions.RayActorError as exc:
            self.host._lost(self.actor)
            raise ActorDied(
                f"the Ray actor holding this environment died during {method} "
                f"(its process crashed or was killed, or its node was lost): {_first_line(exc)}"
            ) from exc
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause
            raise (cause if isinstance(cause, Exception) else exc) from exc


def _probe(address: str) -> None:
    """Fail fast on a ``HOST:PORT`` nobody answers at: Ray itself keeps retrying for minutes."""
    host, sep, port = address.rpartition(":")
    if "://" in address or not sep or not port.isdigit():
        return  # "auto", a ray:// client address: Ray's own errors are prompt enough
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as exc:
        raise ConnectionError(
            f"no Ray cluster answers at {address} ({exc}): check the address (ray status shows it)"
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
