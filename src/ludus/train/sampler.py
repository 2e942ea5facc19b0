"""Asynchronous training's sampler: groups sampled ahead by a copy of the policy, with a hard
bound on how stale they may be when the learner uses them.

    learner:  take(step) ─▶ update ─▶ advance(policy) ─▶ take(step + 1) ─▶ …
    sampler:  (its own thread and event loop) the rollout engine runs groups with the
              *behaviour* copy of the weights, which ``advance`` refreshes after every update

Why: in lockstep the model samples, then learns, then samples again, so the CPU/GPU does one
thing at a time. Here sampling for the next steps overlaps the update, at the price of samples
drawn by weights up to ``max_staleness`` updates old. The trainer corrects for that with
importance weights (see ``grpo.policy_loss``); this module guarantees the bound.

The bound, exactly. A group admitted while the behaviour weights are at version ``v`` has the
deadline ``v + max_staleness``: it must be in the learner's batch no later than step
``deadline``. Each step takes exactly ``groups_per_step`` groups. Two rules keep every
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
import threading
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from ludus.core.env import Env
from ludus.core.types import Message, Trajectory
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


@dataclass
class _Group:
    deadline: int
    pick: Pick
    order: int | None = None  # finish order once all its episodes are done
    trajectories: list[Trajectory] | None = None


class AheadSampler:
    """Samples GRPO groups of the tasks ``picker`` assigns ahead of the learner (see the module docstring),
    ``prompts_per_step`` groups of ``group_size`` per step, at most ``max_staleness`` updates old
    (fields of ``config``).

    Groups are numbered by their position in the stream (:func:`ludus.rollout.engine.requests`),
    which seeds their samples; the ``start`` position's ``replay`` groups (left unconsumed by a
    checkpoint) are admitted first, then ``next_group``, ``next_group + 1``, … Each gets its task
    from ``picker`` when it is admitted, and reports its outcome to it when it finishes.

    ``behaviour`` samples: by default a copy of ``policy`` in this process (:class:`BehaviourPolicy`);
    a rollout server's client (policies/rollout_server.py) samples on that server instead."""

    def __init__(
        self,
        policy: TrainablePolicy,
        env_factory: Callable[[], Env],
        picker: TaskPicker,
        sampling: SamplingParams,
        config: TrainConfig,
        host: EnvHost,
        start: StreamPosition = StreamPosition(),
        behaviour: SyncedPolicy | None = None,
    ):
        if config.max_staleness < 1:
            raise ValueError(f"max_staleness must be >= 1 for sampling ahead, got {config.max_staleness}")
        self.behaviour: SyncedPolicy = behaviour if behaviour is not None else BehaviourPolicy(policy)
        self.groups_per_step, self.group_size = config.prompts_per_step, config.group_size
        self.max_staleness = config.max_staleness
        batch = self.groups_per_step * self.group_size
        self._engine = RolloutEngine(
            self.behaviour,  # type: ignore[arg-type] - a Policy
            env_factory,
            sampling,
            RolloutConfig(max_batch=batch, max_episodes=(self.max_staleness + 1) * batch),
            host=host,
            generator=torch.Generator().manual_seed(config.seed + start.step),
        )
        self._picker = picker
        self._config = config
        self._drop_budget = (config.dynamic_sampling_rounds - 1) * self.groups_per_step
        self._dropped: list[tuple[Pick, list[Trajectory]]] = []
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

    def take(self, step: int, timeout_s: float | None = None) -> list[tuple[Pick, list[Trajectory]]]:
        """The ``groups_per_step`` groups for ``step`` with their picks, each sorted by sample; blocks
        until they are ready. Raises if the sampler failed, ``TimeoutError`` after ``timeout_s``."""
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
            self._next_step = step + 1
        self._nudge()  # room for new groups
        return [(g.pick, g.trajectories) for g in batch if g.trajectories is not None]

    def take_dropped(self) -> list[tuple[Pick, list[Trajectory]]]:
        """The groups dynamic sampling dropped since the last call (for the step's metrics)."""
        with self._cond:
            dropped, self._dropped = self._dropped, []
        return dropped

    def advance(self, policy: TrainablePolicy) -> None:
        """After an update: the behaviour policy gets the new weights (and version)."""
        self.behaviour.sync(policy)
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
                    self._picker.observe(entry.pick, trajectories)
                    if (
                        self._config.dynamic_sampling
                        and not has_signal(trajectories, self._config)
                        and len(self._dropped) < self._drop_budget
                    ):
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
                        pick = self._picker.pick()
                        self._groups[group] = _Group(deadline, pick)
                        if group not in self._replaying:
                            self._next_group = group + 1
                        break
                await self._wake.wait()
            for request in requests([pick.task], self.group_size, first=group, numbered=True, env=pick.arm.env):
                yield request
