"""Where a training step's groups come from: one :class:`Sampler` shape, two ways.

    learner:  take(step) ─▶ update ─▶ advance(policy) ─▶ take(step + 1) ─▶ …

* :class:`LockstepSampler` (``max_staleness: 0``, the default) samples a step's groups when the
  learner asks, with the current weights: seeded runs are reproducible and resume exactly.
* :class:`AheadSampler` (``max_staleness: k``) samples in its own thread and event loop with
  the *behaviour* copy of the weights, which ``advance`` refreshes after every update, so that
  sampling the next steps overlaps the update — at the price of samples up to ``k`` updates old,
  which the loss corrects with importance weights (``grpo.policy_loss``).

Either may sample on an inference server instead of this process (``behaviour``: the client of
policies/rollout_server.py, which ``advance`` pushes the new weights to). Both number groups by
their place in the task stream (:func:`ludus.rollout.engine.requests`), which seeds their samples,
and report a :class:`StreamPosition` for checkpoints. With dynamic sampling both set aside
groups without reward variance (:meth:`Sampler.keeps`), each within its own budget.

The ahead sampler's bound, exactly. A group admitted while the behaviour weights are at version
``v`` has the deadline ``v + max_staleness``: it must be in the learner's batch no later than
step ``deadline``. Each step takes exactly ``groups_per_step`` groups. Two rules keep every
deadline met without dropping a slow, hard task:

* admission control — a new group is admitted only while every unconsumed group (running or
  finished) can still be used by its deadline: fewer than ``(v + max_staleness − next + 1) ·
  groups_per_step`` are unconsumed, ``next`` being the learner's next step (so
  ``(max_staleness + 1) · groups_per_step`` once the weights of the last update are synced);
  sampling is paced, never truncated (with dynamic sampling a group without reward variance
  is dropped when it finishes, freeing its place, up to ``dynamic_sampling_rounds − 1`` steps'
  worth of groups per step; past that budget such groups are kept);
* earliest-deadline feasibility — the learner takes finished groups in the order they
  finished, but only while the groups left behind can still all meet their deadlines; when
  they could not, it waits for the group that is due (:func:`pick_batch`).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import math
import threading
import time
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import torch

from ludus.core.env import Env
from ludus.core.types import Message, Task, Trajectory
from ludus.policies.base import Completion, Policy, SamplingParams, Tools, TrainablePolicy
from ludus.rollout.engine import EpisodeRequest, RolloutConfig, RolloutEngine, requests, sample_index
from ludus.rollout.hosts import EnvHost
from ludus.train.config import TrainConfig
from ludus.train.curriculum import Pick, TaskPicker
from ludus.train.grpo import has_signal


class BehaviourPolicy(Policy):
    """A copy of the learner's policy that samples in the sampler's thread. ``sync`` copies
    the learner's weights in between two generate calls, never during one."""

    def __init__(self, policy: TrainablePolicy):
        self.inner = copy.deepcopy(policy)
        self.inner.module.eval()  # it only samples, whatever mode the learner is in when copied
        self.version = policy.version
        self._lock = threading.Lock()

    def generate(
        self,
        conversations: list[list[Message]],
        sampling: SamplingParams,
        *,
        tools: Tools = None,
        generator: torch.Generator | None = None,
    ) -> list[Completion]:
        with self._lock:
            return self.inner.generate(conversations, sampling, tools=tools, generator=generator)

    def sync(self, policy: TrainablePolicy) -> None:
        with self._lock, torch.no_grad():
            self.inner.module.load_state_dict(policy.module.state_dict())
            self.version = self.inner.version = policy.version


class SyncedPolicy(Protocol):
    """What samples ahead: a policy whose weights ``sync`` makes the learner's (and its version)."""

    version: int

    def sync(self, policy: TrainablePolicy) -> object: ...


def admits(unconsumed: int, deadline: int, next_step: int, groups_per_step: int) -> bool:
    """Admission control: may a group due at step ``deadline`` join ``unconsumed`` others (all
    due by then), ``groups_per_step`` of them used per step from ``next_step`` on?"""
    return unconsumed < (deadline - next_step + 1) * groups_per_step


def pick_batch(unconsumed: dict[int, tuple[int, int | None]], step: int, size: int) -> list[int] | None:
    """The groups the learner takes at ``step``, or ``None`` if it must wait for more to finish.

    ``unconsumed`` maps a group to ``(deadline, finish order)``, the order being ``None`` while
    it runs. Finished groups are taken in finish order as long as the rest stay feasible: taken
    earliest deadline first, every remaining group would still be used by its deadline."""
    finished = sorted((order, group) for group, (_, order) in unconsumed.items() if order is not None)
    if len(finished) < size:
        return None
    picked: list[int] = []
    for _, group in finished:
        if _feasible(unconsumed, {*picked, group}, step, size):
            picked.append(group)
            if len(picked) == size:
                return picked
    return None


def _feasible(unconsumed: dict[int, tuple[int, int | None]], picked: set[int], step: int, size: int) -> bool:
    """Whether the batch ``picked`` can be completed (earliest deadlines first) so that after
    it every unconsumed group's deadline can still be met, ``size`` groups per later step."""
    rest = sorted(deadline for group, (deadline, _) in unconsumed.items() if group not in picked)
    remaining = rest[size - len(picked) :]  # the completion takes the earliest deadlines
    return all(deadline > step and i < (deadline - step) * size for i, deadline in enumerate(remaining))


@dataclass(frozen=True)
class StreamPosition:
    """Where the task stream stands, as a checkpoint records it: the learner's next ``step``, the
    next group never admitted (``next_group``), and the groups admitted but not trained on
    (``replay``), which are sampled again first."""

    step: int = 0
    next_group: int = 0
    replay: tuple[int, ...] = ()


Group = tuple[Pick, list[Trajectory]]  # a task's pick and its group_size trajectories, sorted by sample


@dataclass
class Batch:
    """What a step gets: the groups to learn from, every group sampled for it (those dynamic
    sampling set aside too: the step's metrics read them all), lockstep dynamic sampling's rounds,
    and how long the learner waited for a sampler ahead of it (``None``: it sampled them itself)."""

    kept: list[Group]
    sampled: list[Group]
    rounds: int = 0
    wait_s: float | None = None


class Sampler(ABC):
    """Where a step's groups come from: ``take(step)`` for each step, ``advance(policy)`` after each
    update, ``position()`` for a checkpoint, ``close()`` at the end.

    ``policy`` is the learner's. ``behaviour``, if given, samples in its place and gets its
    weights through ``sync`` (an inference server's client); by default the sampler's own
    (:meth:`_own_behaviour`). The task stream continues from ``start``. ``actors``: the engine's
    other policies (self-play's pool); ``task_of(task, group)``: the task group number ``group``
    plays (self-play gives each its opponent). ``generator`` seeds
    sampling: the trainer gives a lockstep sampler the learner's, so that one seeded stream makes
    the whole run reproducible; by default one seeded from ``config.seed`` and the start step."""

    def __init__(
        self,
        policy: TrainablePolicy,
        env_factory: Callable[[], Env],
        picker: TaskPicker,
        sampling: SamplingParams,
        config: TrainConfig,
        host: EnvHost,
        start: StreamPosition = StreamPosition(),
        *,
        generator: torch.Generator | None = None,
        behaviour: SyncedPolicy | None = None,
        actors: Mapping[str, Policy] | None = None,
        task_of: Callable[[Task, int], Task] | None = None,
    ):
        self.policy, self.picker, self.config = policy, picker, config
        self.task_of = task_of
        self.behaviour = behaviour if behaviour is not None else self._own_behaviour(policy)
        self._loss = config.loss()
        self._engine = RolloutEngine(
            self.behaviour if self.behaviour is not None else policy,  # type: ignore[arg-type] - a Policy
            env_factory,
            sampling,
            self._rollout_config(),
            host=host,
            generator=generator if generator is not None else torch.Generator().manual_seed(config.seed + start.step),
            actors=actors,
        )
        self._resume(start)

    def _task(self, pick: Pick, group: int) -> Task:
        """Group ``group``'s task: its pick's, or as ``task_of`` makes it (self-play: its opponent)."""
        return pick.task if self.task_of is None else self.task_of(pick.task, group)

    def _own_behaviour(self, policy: TrainablePolicy) -> SyncedPolicy | None:
        """What samples without an inference server: the learner's policy itself (``None``)."""
        return None

    @abstractmethod
    def _rollout_config(self) -> RolloutConfig:
        """The engine's batching and bounds."""

    @abstractmethod
    def _resume(self, start: StreamPosition) -> None:
        """Continue the task stream from ``start``."""

    def start(self) -> None:
        """Begin sampling (a sampler ahead of the learner starts its thread)."""

    @abstractmethod
    def take(self, step: int) -> Batch:
        """The groups of ``step``: ``prompts_per_step`` of them (fewer only if dynamic sampling found
        too few with a signal)."""

    def advance(self, policy: TrainablePolicy) -> None:
        """After an update: whatever samples gets the new weights (and version)."""
        if self.behaviour is not None:
            self.behaviour.sync(policy)

    @abstractmethod
    def position(self) -> StreamPosition:
        """What a checkpoint needs to resume the task stream."""

    def close(self) -> None:
        """Stop sampling and release what sampling holds."""

    def keeps(self, group: list[Trajectory]) -> bool:
        """Dynamic sampling's rule (DAPO): a group is learned from only if its rewards differ."""
        return not self.config.dynamic_sampling or has_signal(group, self._loss)


class LockstepSampler(Sampler):
    """A step's groups sampled when the learner asks, with its current weights, every live episode
    of a turn in one batch in request order, so that a seeded generator makes a step reproducible
    however the environments' threads are scheduled. With dynamic sampling, groups without reward
    variance are set aside and more sampled — as many as the signal rate so far says are missing —
    until the step has ``prompts_per_step`` or ``dynamic_sampling_rounds`` rounds ran."""

    def _rollout_config(self) -> RolloutConfig:
        batch = self.config.prompts_per_step * self.config.group_size
        return RolloutConfig(lockstep=True, max_batch=batch, max_episodes=batch)

    def _resume(self, start: StreamPosition) -> None:
        self._next_step, self._next_group = start.step, start.next_group

    def take(self, step: int) -> Batch:
        c = self.config
        self.policy.module.eval()
        kept: list[Group] = []
        sampled: list[Group] = []
        rounds = 0
        while True:
            missing = c.prompts_per_step - len(kept)
            rate = len(kept) / len(sampled) if sampled else 1.0
            picks = [self.picker.pick() for _ in range(min(c.prompts_per_step, math.ceil(missing / max(rate, 0.25))))]
            first, self._next_group = self._next_group, self._next_group + len(picks)
            episodes = itertools.chain.from_iterable(
                requests([self._task(pick, first + i)], c.group_size, first=first + i, numbered=True, env=pick.arm.env)
                for i, pick in enumerate(picks)
            )
            trajs = self._engine.run(episodes)
            batch = [(pick, trajs[i * c.group_size : (i + 1) * c.group_size]) for i, pick in enumerate(picks)]
            for pick, group in batch:
                self.picker.observe(pick, group)
            sampled += batch
            kept += [(pick, group) for pick, group in batch if self.keeps(group)]
            rounds += 1
            if not c.dynamic_sampling or len(kept) >= c.prompts_per_step or rounds >= c.dynamic_sampling_rounds:
                self._next_step = step + 1
                return Batch(kept[: c.prompts_per_step], sampled, rounds)

    def position(self) -> StreamPosition:
        return StreamPosition(self._next_step, self._next_group)


@dataclass
class _Group:
    deadline: int
    pick: Pick
    order: int | None = None  # finish order once all its episodes are done
    trajectories: list[Trajectory] | None = None


class AheadSampler(Sampler):
    """Samples GRPO groups of the tasks ``picker`` assigns ahead of the learner (see the module docstring),
    ``prompts_per_step`` groups of ``group_size`` per step, at most ``max_staleness`` updates old
    (fields of ``config``).

    Groups are numbered by their position in the stream (:func:`ludus.rollout.engine.requests`),
    which seeds their samples; the ``start`` position's ``replay`` groups (left unconsumed by a
    checkpoint) are admitted first, then ``next_group``, ``next_group + 1``, … Each gets its task
    from ``picker`` when it is admitted, and reports its outcome to it when it finishes.

    ``behaviour`` samples: by default a copy of ``policy`` in this process (:class:`BehaviourPolicy`);
    a rollout server's client (policies/rollout_server.py) samples on that server instead."""

    behaviour: SyncedPolicy

    def _own_behaviour(self, policy: TrainablePolicy) -> SyncedPolicy:
        """A copy of the learner's policy, which samples in the sampler's thread."""
        return BehaviourPolicy(policy)

    def _rollout_config(self) -> RolloutConfig:
        c = self.config
        if c.max_staleness < 1:
            raise ValueError(f"max_staleness must be >= 1 for sampling ahead, got {c.max_staleness}")
        batch = c.prompts_per_step * c.group_size
        return RolloutConfig(max_batch=batch, max_episodes=(c.max_staleness + 1) * batch)

    def _resume(self, start: StreamPosition) -> None:
        config = self.config
        self.groups_per_step, self.group_size = config.prompts_per_step, config.group_size
        self.max_staleness = config.max_staleness
        self._drop_budget = (config.dynamic_sampling_rounds - 1) * self.groups_per_step
        self._dropped: list[Group] = []
        self._order = itertools.chain(start.replay, itertools.count(start.next_group))
        self._next_group = start.next_group
        self._replaying = set(start.replay)
        self._groups: dict[int, _Group] = {}
        self._next_step = start.step  # the step the learner takes next
        self._finished = 0
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self._closing = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="ludus-sampler")

    # ---- the learner's side ----

    def start(self) -> None:
        self._thread.start()

    def take(self, step: int, timeout_s: float | None = None) -> Batch:
        """The ``groups_per_step`` groups for ``step`` with their picks, each sorted by sample, and
        those dynamic sampling dropped since the last step; blocks until they are ready. Raises if
        the sampler failed, ``TimeoutError`` after ``timeout_s``."""
        t0 = time.perf_counter()
        picked: list[int] | None = None

        def ready() -> bool:
            nonlocal picked
            picked = None if self._error is not None else pick_batch(self._view(), step, self.groups_per_step)
            return self._error is not None or picked is not None

        with self._cond:
            ok = self._cond.wait_for(ready, timeout_s)
            if self._error is not None:
                raise RuntimeError(f"the sampler failed: {self._error!r}") from self._error
            if not ok or picked is None:
                raise TimeoutError(f"no batch for step {step} within {timeout_s} s")
            batch = [self._groups.pop(group) for group in picked]
            dropped, self._dropped = self._dropped, []
            self._next_step = step + 1
        self._nudge()  # room for new groups
        kept = [(g.pick, g.trajectories) for g in batch if g.trajectories is not None]
        return Batch(kept, kept + dropped, wait_s=time.perf_counter() - t0)

    def advance(self, policy: TrainablePolicy) -> None:
        super().advance(policy)
        self._nudge()

    def position(self) -> StreamPosition:
        """What a checkpoint needs to resume the task stream (the step is the learner's)."""
        with self._cond:
            return StreamPosition(self._next_step, self._next_group, tuple(sorted(self._groups)))

    def close(self) -> None:
        with self._cond:
            self._closing = True
        if self._main is not None:
            self._in_loop(self._main.cancel)
        self._thread.join(timeout=30)

    # ---- the sampler's thread ----

    def _view(self) -> dict[int, tuple[int, int | None]]:
        return {group: (g.deadline, g.order) for group, g in self._groups.items()}

    def _nudge(self) -> None:
        if self._wake is not None:
            self._in_loop(self._wake.set)

    def _in_loop(self, fn: Callable[[], object]) -> None:
        if self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(fn)
            except RuntimeError:  # the loop has ended (the sampler failed): take() reports why
                pass

    def _run(self) -> None:
        try:
            asyncio.run(self._sample())
        except asyncio.CancelledError:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the learner, which raises it
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    async def _sample(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        self._main = asyncio.current_task()
        members: dict[int, list[Trajectory]] = defaultdict(list)
        async for trajectory in self._engine.stream(self._requests()):
            group = int(trajectory.info["group"])
            members[group].append(trajectory)
            if len(members[group]) == self.group_size:
                trajectories = sorted(members.pop(group), key=sample_index)
                with self._cond:
                    entry = self._groups[group]
                    self.picker.observe(entry.pick, trajectories)
                    if not self.keeps(trajectories) and len(self._dropped) < self._drop_budget:
                        del self._groups[group]  # its place goes to a fresh group
                        self._dropped.append((entry.pick, trajectories))
                        self._wake.set()  # type: ignore[union-attr] - set by _sample before the stream
                        continue
                    entry.trajectories = trajectories
                    entry.order, self._finished = self._finished, self._finished + 1
                    self._cond.notify_all()

    async def _requests(self) -> AsyncIterator[EpisodeRequest]:
        assert self._wake is not None
        for group in self._order:
            while True:
                self._wake.clear()
                with self._cond:
                    if self._closing:
                        return
                    deadline = self.behaviour.version + self.max_staleness
                    if admits(len(self._groups), deadline, self._next_step, self.groups_per_step):
                        pick = self.picker.pick()
                        self._groups[group] = _Group(deadline, pick)
                        if group not in self._replaying:
                            self._next_group = group + 1
                        break
                await self._wake.wait()
            task = self._task(pick, group)
            for request in requests([task], self.group_size, first=group, numbered=True, env=pick.arm.env):
                yield request
