"""The asynchronous rollout engine: many episodes in flight, generation and environments overlapping.

    engine = RolloutEngine(policy, env_factory, SamplingParams(max_tokens=64))
    trajectories = engine.run(requests(tasks, group_size=8))          # or, in an event loop:
    async for group in engine.groups(tasks, group_size=8): ...         # GRPO groups as they complete

Why: a synchronous loop generates for the whole batch, then runs the whole batch's environments,
so one slow environment step (a 30-second test suite, a browser page) idles the model. Here
every episode is its own coroutine. An episode that needs a reply queues its conversation; one
generation loop takes whatever is queued (up to ``max_batch``) into a single ``agenerate`` call
the moment the previous call returns, so the model is busy as long as any episode waits for it.
Environment steps run meanwhile on their own thread pool (``env_concurrency`` at once).

Failures are never rewards: a backend that fails (``PolicyError``), an environment that raises
or hangs past ``step_timeout_s``, end the attempt with ``infra_error``; the episode is retried
(``infra_retries``) and, if it keeps failing, recorded with that status so training masks it.

With a :class:`JsonlSink`, each trajectory is appended to a JSONL file the moment it finishes,
keyed by its request; a rerun with the same sink skips every key already written (resume).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import zlib
from collections import defaultdict
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ludus.core.env import Env
from ludus.core.types import Message, Observation, Score, Status, StepResult, Task, ToolSpec, Trajectory, Turn
from ludus.policies.base import Completion, ContextFull, Policy, PolicyError, SamplingParams
from ludus.rollout.hosts import EnvCalls, EnvHost, HostedEnv, ThreadHost

# asked after each step that did not end the episode; a Score ends it (see RolloutEngine)
StopHook = Callable[[Trajectory, StepResult], Score | None]
CLOSE_WAIT_S = 30.0  # how long the end of a run waits for environment closes (a close may hang)


@dataclass(frozen=True)
class EpisodeRequest:
    """One episode to run. ``key`` names it in the output (and for resume); ``group`` gathers
    the G samples of one task for GRPO. ``env`` makes its environment when the episode is not
    the engine's own environment's (a mixture of environments in one run)."""

    task: Task
    seed: int = 0
    key: str = ""
    group: str = ""
    env: Callable[[], Env] | None = None


def requests(
    tasks: Iterable[Task],
    group_size: int = 1,
    *,
    first: int = 0,
    numbered: bool = False,
    env: Callable[[], Env] | None = None,
) -> Iterator[EpisodeRequest]:
    """``group_size`` requests per task: the one way episodes are numbered, keyed and seeded.

    The i-th task is group number ``n = first + i`` and its sample ``k`` gets seed ``n·G + k``,
    so a stream of groups cut anywhere (a training step, a resume, a sampler running ahead) draws
    the same seeds. A group is named by its task's id (keys ``<task id>#<k>``: evaluation, where
    each task appears once), or with ``numbered`` by its number (keys ``<n>#<k>``: a training
    stream, in which a finite dataset comes round again). ``env``: see :class:`EpisodeRequest`."""
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    for i, task in enumerate(tasks, start=first):
        group = str(i) if numbered else task.id
        for k in range(group_size):
            yield EpisodeRequest(task, seed=i * group_size + k, key=f"{group}#{k}", group=group, env=env)


def sample_index(trajectory: Trajectory) -> int:
    """Which sample of its group a trajectory is (the ``k`` of its key ``<group>#<k>``)."""
    return int(trajectory.info["key"].rpartition("#")[2])


@dataclass(frozen=True)
class RolloutConfig:
    """``max_batch``: conversations per generate call. ``max_episodes``: episodes in flight.
    ``env_concurrency``: environment calls running at once (threads). ``generate_calls``:
    generate calls in flight (1 for a local model; more for an HTTP server that batches itself).
    Time limits are per environment call and per episode, in seconds (``None``: none).
    ``max_episode_tokens`` caps the completion tokens of an episode's turns together: an
    episode that reaches it unfinished ends as ``truncated``.
    ``lockstep``: generate only when every episode in flight waits for the model, for all of
    them in request order (in calls of ``max_batch``) — no overlap, but the batches, and so a
    seeded generator's draws, do not depend on timing: the trainer's reproducible mode."""

    max_batch: int = 64
    max_episodes: int = 256
    env_concurrency: int = 32
    generate_calls: int = 1
    step_timeout_s: float | None = 300.0
    episode_timeout_s: float | None = None
    infra_retries: int = 2
    lockstep: bool = False
    max_episode_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_batch", "max_episodes", "env_concurrency", "generate_calls"):
            if getattr(self, name) < 1:
                raise ValueError(f"RolloutConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_episode_tokens is not None and self.max_episode_tokens < 1:
            raise ValueError(f"RolloutConfig.max_episode_tokens must be >= 1, got {self.max_episode_tokens}")
        if self.infra_retries < 0:
            raise ValueError(f"RolloutConfig.infra_retries must be >= 0, got {self.infra_retries}")


class _InfraFailure(Exception):
    """Ends an attempt as ``infra_error``; ``retry`` says whether another attempt may help."""

    def __init__(self, reason: str, retry: bool = True):
        super().__init__(reason)
        self.retry = retry


class _Flight:
    """The generation queues of one stream — the engine's policy's and one per actor that an
    observation named — and the episodes in flight, which lockstep counts across all of them."""

    def __init__(
        self,
        engine: RolloutEngine,
        generator: torch.Generator | None,
    ):
        self.engine, self.generator = engine, generator
        self.alive = 0  # episodes in flight (lockstep waits until every one waits for a model)
        self.released: set[_Generation] = set()  # lockstep: the queues that may take what they hold
        self.queues: dict[str, _Generation] = {}
        self.loops: list[asyncio.Task[None]] = []
        self.learner = self.queue("")

    def queue(self, actor: str) -> _Generation:
        """The queue of ``actor`` (``""``: the engine's policy), made and started on first use."""
        if actor not in self.queues:
            engine = self.engine
            policy = engine.policy if not actor else engine.actors.get(actor)
            if policy is None:
                known = ", ".join(sorted(engine.actors)) or "none"
                raise _InfraFailure(f"the environment asked actor {actor!r}, which the engine was not given ({known})",
                                    retry=False)  # fmt: skip
            generator = self.generator
            if actor and generator is not None:  # each actor its own stream of draws, seeded from the engine's
                generator = torch.Generator().manual_seed(generator.initial_seed() + zlib.crc32(actor.encode()))
            self.queues[actor] = queue = _Generation(policy, engine.sampling, engine.config, generator, self)
            self.loops.append(asyncio.create_task(queue.loop()))
        return self.queues[actor]

    def waiting(self) -> int:
        return sum(q.waiting() for q in self.queues.values())

    def wake_all(self) -> None:
        for q in self.queues.values():
            q.wake.set()

    def episode_ended(self) -> None:
        self.alive -= 1
        self.wake_all()  # in lockstep, the others may now be all that is left


class _Generation:
    """Queue of conversations waiting for one model, drained by one loop into batched calls."""

    def __init__(
        self,
        policy: Policy,
        sampling: SamplingParams,
        config: RolloutConfig,
        generator: torch.Generator | None,
        flight: _Flight,
    ):
        self.policy, self.sampling, self.config, self.generator = policy, sampling, config, generator
        self.flight = flight
        self.pending: list[tuple[int, list[Message], list[ToolSpec], asyncio.Future[Completion]]] = []
        self.wake = asyncio.Event()
        self.busy_s = 0.0  # wall time with at least one generate call in flight
        self.calls = 0
        self._in_flight = 0
        self._busy_since = 0.0

    async def complete(self, order: int, messages: list[Message], tools: list[ToolSpec]) -> Completion:
        future: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
        self.pending.append((order, list(messages), list(tools), future))
        if self.config.lockstep and len(self.flight.queues) > 1:
            self.flight.wake_all()  # this may be the last episode another queue waits for
        else:
            self.wake.set()
        return await future

    def waiting(self) -> int:
        self.pending = [item for item in self.pending if not item[3].done()]  # episodes cancelled while queued
        return len(self.pending)

    def _take(self) -> list[tuple[int, list[Message], list[ToolSpec], asyncio.Future[Completion]]]:
        flight = self.flight
        if self.config.lockstep:
            if self not in flight.released:
                if flight.waiting() < flight.alive:
                    return []  # someone is still in the environment
                flight.released = set(flight.queues.values())  # every queue takes what it holds now
                flight.wake_all()
            flight.released.discard(self)
            self.waiting()
            self.pending.sort(key=lambda item: item[0])
        else:
            self.waiting()
        batch, self.pending = self.pending[: self.config.max_batch], self.pending[self.config.max_batch :]
        return batch

    async def loop(self) -> None:
        slots = asyncio.Semaphore(self.config.generate_calls)
        calls: set[asyncio.Task[None]] = set()
        try:
            while True:
                await self.wake.wait()
                await slots.acquire()
                await asyncio.sleep(0)  # let every episode that is ready to ask do so first: fuller batches
                batch = self._take()
                if not batch or not self.pending:
                    self.wake.clear()
                if not batch:
                    slots.release()
                    continue
                call = asyncio.create_task(self._call(batch))
                calls.add(call)
                call.add_done_callback(lambda c: (calls.discard(c), slots.release()))
        finally:
            for call in calls:
                call.cancel()

    async def _call(self, batch: list[tuple[int, list[Message], list[ToolSpec], asyncio.Future[Completion]]]) -> None:
        self._in_flight += 1
        if self._in_flight == 1:
            self._busy_since = time.monotonic()
        self.calls += 1
        try:
            conversations, tools = [b[1] for b in batch], [b[2] for b in batch]
            completions = await self.policy.agenerate(
                conversations, self.sampling, tools=tools, generator=self.generator
            )
            if len(completions) != len(batch):
                raise PolicyError(f"the backend returned {len(completions)} completions for {len(batch)} conversations")
        except Exception as exc:  # noqa: BLE001 - every waiting episode must hear of it
            if isinstance(exc, ValueError) and len(batch) > 1:
                # the model refuses an input (a conversation an agent made too long for it): only its episode fails
                for item in batch:
                    await self._call([item])
                return
            error = exc if isinstance(exc, PolicyError | ContextFull) else PolicyError(f"{type(exc).__name__}: {exc}")
            for *_, future in batch:
                if not future.done():
                    future.set_exception(error)
        else:
            for (*_, future), completion in zip(batch, completions, strict=True):
                if not future.done():
                    future.set_result(completion)
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self.busy_s += time.monotonic() - self._busy_since


class RolloutEngine:
    """Runs episodes of ``env_factory()`` environments with ``policy`` (see the module docstring)."""

    def __init__(
        self,
        policy: Policy,
        env_factory: Callable[[], Env],
        sampling: SamplingParams,
        config: RolloutConfig | None = None,
        host: EnvHost | None = None,
        stop_when: StopHook | None = None,
        generator: torch.Generator | None = None,
        actors: Mapping[str, Policy] | None = None,
    ):
        """``host`` runs the environments (see hosts.py); by default a ``ThreadHost`` of
        ``env_concurrency`` threads, made and shut down by each ``stream``. A host you pass is
        yours to shut down. ``stop_when(trajectory, result)`` is asked after every step that
        did not end the episode; a ``Score`` it returns ends the episode with that score
        (early termination: a code episode whose visible tests fail, a runaway dialogue).
        ``generator`` seeds the sampling of a local model (reproducible with ``lockstep``).
        ``actors``: other policies by name, for observations that name one (``Observation.actor``:
        a game's other seat); each gets its own batched queue, and its replies are never turns.
        The mapping is read when an episode first asks for a name, so a caller may add to it
        between streams (an opponent pool)."""
        self.policy, self.env_factory, self.sampling = policy, env_factory, sampling
        self.actors: Mapping[str, Policy] = actors if actors is not None else {}
        self.config = config or RolloutConfig()
        self.host = host
        self.stop_when = stop_when
        self.generator = generator
        self.stats: dict[str, float] = {}

    # ---- public API ----

    def run(self, episodes: Iterable[EpisodeRequest], sink: JsonlSink | None = None) -> list[Trajectory]:
        """Run every episode (not already in ``sink``) to its end; the new trajectories in input order."""
        episodes = list(_keyed(episodes))

        async def collect() -> dict[str, Trajectory]:
            return {t.info["key"]: t async for t in self.stream(episodes, sink)}

        done = asyncio.run(collect())
        return [done[r.key] for r in episodes if r.key in done]

    async def stream(
        self, episodes: Iterable[EpisodeRequest] | AsyncIterable[EpisodeRequest], sink: JsonlSink | None = None
    ) -> AsyncIterator[Trajectory]:
        """Trajectories in the order they finish. Requests are drawn lazily from ``episodes``
        (at most ``max_episodes`` in flight), so the iterable may be endless; an async iterable
        may also pace them (the trainer's staleness bound admits a group only when it may)."""
        skip = sink.done_keys() if sink is not None else set()
        flight = _Flight(self, self.generator)
        generation = flight.learner
        host = self.host or ThreadHost(self.config.env_concurrency)
        admitted = asyncio.Semaphore(self.config.max_episodes)
        finished: asyncio.Queue[Trajectory | None] = asyncio.Queue()
        running: set[asyncio.Task[None]] = set()
        started = time.monotonic()

        async def one(order: int, request: EpisodeRequest) -> None:
            try:
                trajectory = await self._episode(order, request, flight, host)
                if sink is not None:
                    sink.write(trajectory)
                await finished.put(trajectory)
            finally:
                flight.episode_ended()
                admitted.release()

        async def admit() -> None:
            try:
                order = -1
                async for request in _akeyed(episodes):
                    order += 1
                    if request.key in skip:
                        continue
                    await admitted.acquire()
                    flight.alive += 1
                    task = asyncio.create_task(one(order, request))
                    running.add(task)
                    task.add_done_callback(running.discard)
                for outcome in await asyncio.gather(*list(running), return_exceptions=True):
                    if isinstance(outcome, Exception):
                        raise outcome  # the engine's own bug: surface it, never drop an episode silently
            finally:
                await finished.put(None)

        feeder = asyncio.create_task(admit())
        try:
            while (trajectory := await finished.get()) is not None:
                yield trajectory
            await feeder  # re-raises an error of the request iterable
        finally:
            for task in (feeder, *flight.loops, *running):
                task.cancel()
            await asyncio.gather(feeder, *flight.loops, *running, return_exceptions=True)
            if self.host is None:  # a host of its own: the environments it ran are closed when the stream ends
                await host.closes_finished(CLOSE_WAIT_S)
                host.shutdown()
            wall = time.monotonic() - started
            self.stats = {
                "wall_s": wall,
                "generate_busy_s": generation.busy_s,
                "generate_calls": float(generation.calls),
                "generator_busy_fraction": generation.busy_s / wall if wall > 0 else 0.0,
            }

    async def groups(
        self, tasks: Iterable[Task], group_size: int, sink: JsonlSink | None = None
    ) -> AsyncIterator[list[Trajectory]]:
        """GRPO groups: the ``group_size`` trajectories of one task, in sample order, yielded when
        the last one finishes (infra failures included, with their status, for the trainer to mask)."""
        members: dict[str, list[Trajectory]] = defaultdict(list)
        async for trajectory in self.stream(requests(tasks, group_size), sink):
            group = members[trajectory.info["group"]]
            group.append(trajectory)
            if len(group) == group_size:
                yield sorted(members.pop(trajectory.info["group"]), key=sample_index)

    # ---- one episode ----

    async def _episode(self, order: int, request: EpisodeRequest, flight: _Flight, host: EnvHost) -> Trajectory:
        attempts = 0
        while True:
            attempts += 1
            trajectory = Trajectory(
                task=request.task, messages=[], seed=request.seed, policy_version=self.policy.version
            )
            waiting = {"actor": ""}  # the other policy the episode waits for, if any (set by _attempt)
            try:
                if self.config.episode_timeout_s is None:
                    await self._attempt(order, request, trajectory, flight, host, waiting)
                else:
                    await asyncio.wait_for(
                        self._attempt(order, request, trajectory, flight, host, waiting),
                        self.config.episode_timeout_s,
                    )
                retry = True  # an infra_error the environment reported (a sandbox failure, say)
            except TimeoutError:
                limit = self.config.episode_timeout_s
                if waiting["actor"]:  # another policy's slowness is no verdict on this one
                    reason = f"actor {waiting['actor']!r} did not answer before the episode's {limit} s ran out"
                    trajectory.score = Score.zero(Status.INFRA_ERROR, reason)
                else:
                    trajectory.score = Score.zero(Status.TIMEOUT, f"the episode did not finish within {limit} s")
                retry = False
            except _InfraFailure as failure:
                trajectory.score = Score.zero(Status.INFRA_ERROR, str(failure))
                retry = failure.retry
            if trajectory.score is None:
                trajectory.score = Score.zero(Status.INFRA_ERROR, "the episode ended without a score")
            trajectory.info.update(key=request.key, group=request.group, attempts=attempts)
            if not (trajectory.score.is_infra_error and retry and attempts <= self.config.infra_retries):
                return trajectory

    async def _attempt(
        self,
        order: int,
        request: EpisodeRequest,
        trajectory: Trajectory,
        flight: _Flight,
        host: EnvHost,
        waiting: dict[str, str],
    ) -> None:
        factory = request.env or self.env_factory
        env: HostedEnv = await self._env_call("create", host.open(factory), host.opens_quickly(factory))
        try:
            trajectory.env = env.name
            quick = env.calls is EnvCalls.QUICK
            obs: Observation = await self._env_call("reset", env.reset(request.task, request.seed), quick)
            trajectory.messages, trajectory.tools = list(obs.messages), list(obs.tools)
            actor = obs.actor
            while True:
                waiting["actor"] = actor
                try:
                    completion = await flight.queue(actor).complete(order, trajectory.messages, trajectory.tools)
                    waiting["actor"] = ""
                except ContextFull as exc:
                    who = f"model backend{f' of actor {actor!r}' if actor else ''}"
                    if not trajectory.turns:  # the task's opening (or an actor's, before the policy spoke) is too long
                        raise _InfraFailure(f"{who}: {exc}", retry=False) from None
                    # the policy's replies grew the conversation; masking it would let a losing policy
                    # escape its zero by talking past the context (its own, or an opponent's)
                    whose = f"the context of actor {actor!r}" if actor else "the model's context"
                    reason = f"the conversation outgrew {whose}: {exc}"
                    trajectory.score = Score.zero(Status.TRUNCATED, reason)
                    return
                except PolicyError as exc:
                    raise _InfraFailure(f"model backend{f' of actor {actor!r}' if actor else ''}: {exc}") from None
                action = completion.message()
                result: StepResult = await self._env_call("step", env.step(action), quick)
                if not actor:
                    trajectory.turns.append(
                        Turn(
                            completion.prompt_ids,
                            completion.completion_ids,
                            completion.logprobs,
                            result.reward,
                            completion.finish_reason,
                        )
                    )
                elif trajectory.turns:  # another policy's turn is not the trajectory's: its reward goes to the last one
                    trajectory.turns[-1].reward += result.reward
                actor = result.observation.actor
                # the conversation as Env.step leaves it: the action, then what the environment added
                # (or, when an agent rewrote its history, the conversation it sends next)
                if result.history_rewritten:
                    trajectory.messages = list(result.observation.messages)
                else:
                    trajectory.messages = [*trajectory.messages, action, *result.observation.messages]
                if result.observation.tools:  # a step may change the tool set (BFCL's miss_func reveals functions)
                    trajectory.tools = list(result.observation.tools)
                _add_step_info(trajectory.info, result.info)
                if result.done:
                    trajectory.score = result.score
                    return
                limit = self.config.max_episode_tokens
                if limit is not None and sum(len(t.completion_ids) for t in trajectory.turns) >= limit:
                    trajectory.score = Score.zero(Status.TRUNCATED, f"the episode used its {limit} completion tokens")
                    return
                if self.stop_when is not None and (verdict := self.stop_when(trajectory, result)) is not None:
                    trajectory.score = verdict
                    trajectory.info["stopped_early"] = True
                    return
        finally:
            await env.close()

    async def _env_call(self, what: str, call: Awaitable[Any], quick: bool = False) -> Any:
        """An environment call with the step time limit (none for a quick environment's calls,
        which cannot hang). Raising or hanging is the environment's failure (``infra_error``),
        never the policy's answer."""
        limit = None if quick else self.config.step_timeout_s
        deadline = asyncio.timeout(limit)
        try:
            if limit is None:  # no timer to arm: the cheap path of quick environments
                return await call
            async with deadline:
                return await call
        except TimeoutError:
            if not deadline.expired():
                raise _InfraFailure(f"environment {what} raised TimeoutError") from None
            # a thread cannot be stopped: it finishes (or hangs) on its own, unwaited
            raise _InfraFailure(f"environment {what} did not finish within {limit} s", retry=False) from None
        except Exception as exc:  # noqa: BLE001 - an environment bug, not the policy's answer
            raise _InfraFailure(f"environment {what} raised {type(exc).__name__}: {exc}"[:1000]) from None


def _add_step_info(info: dict[str, Any], step: dict[str, Any]) -> None:
    """Keep what the environment reported at each step in ``info["env"]``: numbers (counters
    such as ``tool_calls``) summed over the episode, anything else as last reported."""
    if not step:
        return
    total = info.setdefault("env", {})
    for key, value in step.items():
        old = total.get(key)
        if is_number(value) and (old is None or is_number(old)):
            total[key] = (old or 0) + value
        else:
            total[key] = value


def is_number(value: Any) -> bool:
    """A count or measure an environment reported (``bool`` is an ``int`` in Python, but not one)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _keyed(episodes: Iterable[EpisodeRequest]) -> Iterator[EpisodeRequest]:
    """Requests with a key each (the index where none was given); keys must be unique."""
    check = _KeyCheck()
    for request in episodes:
        yield check(request)


async def _akeyed(episodes: Iterable[EpisodeRequest] | AsyncIterable[EpisodeRequest]) -> AsyncIterator[EpisodeRequest]:
    """:func:`_keyed` for a plain or an async iterable."""
    if not isinstance(episodes, AsyncIterable):
        for request in _keyed(episodes):
            yield request
        return
    check = _KeyCheck()
    async for request in episodes:
        yield check(request)


class _KeyCheck:
    def __init__(self) -> None:
        self.seen: set[str] = set()

    def __call__(self, request: EpisodeRequest) -> EpisodeRequest:
        i = len(self.seen)
        if not request.key:
            request = EpisodeRequest(request.task, request.seed, key=str(i), group=request.group or str(i))
        if request.key in self.seen:
            raise ValueError(f"two episode requests share the key {request.key!r}; keys must be unique")
        self.seen.add(request.key)
        return request


class JsonlSink:
    """Finished trajectories, one JSON line each, appended (and flushed) as they finish.

    Opening an existing file keeps its complete lines — a line cut short by a crash is dropped —
    so a rerun resumes: ``done_keys`` lists what is already there."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._kept: list[dict[str, Any]] = []
        if self.path.exists():
            raw = self.path.read_bytes()
            complete, _, _ = raw.rpartition(b"\n")
            for line in complete.splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # not ours or damaged: never fatal, never resumed from
                if isinstance(record, dict) and isinstance(record.get("info"), dict) and "key" in record["info"]:
                    self._kept.append(record)
            if len(complete) + 1 != len(raw) and raw:
                self.path.write_bytes(complete + b"\n" if complete else b"")
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the sink

    def done_keys(self) -> set[str]:
        return {r["info"]["key"] for r in self._kept}

    def trajectories(self) -> list[Trajectory]:
        """What the file held when opened (a resumed run's earlier results)."""
        return [Trajectory.from_dict(r) for r in self._kept]

    def write(self, trajectory: Trajectory) -> None:
        self._file.write(json.dumps(trajectory.to_dict(), ensure_ascii=False) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> JsonlSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
