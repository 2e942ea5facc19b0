"""Which task each training group gets: environment mixtures, an adaptive curriculum over
difficulty levels, and revisits of tasks that taught something.

A run trains on one or more environments (``envs: [{name, args, weight}]``); with
``curriculum: true`` each of them is split into one *arm* per difficulty level. Every group
of G samples is drawn from one arm::

    environment ~ weights  ─▶  level ~ the curriculum  ─▶  the arm's next task (or a revisit)

**Curriculum.** GRPO learns only from groups whose rewards differ: a level the model always
solves, or never, teaches nothing. Per environment the picker keeps a *current* level and, per
level, the success rates (fraction of correct samples) of its last ``window`` groups. When the
current level's recent rate reaches the band's top it is promoted to the next level; when it
falls to the band's bottom (by default 0: not one sample solved in a whole window) it is
demoted. A bottom above what a fresh level scores makes the run bounce between two levels. A fraction ``review`` of the groups goes to the
levels below the current one, so what was learnt is kept. Decisions use full windows only, and
a level's window restarts when the run enters it, so one lucky group moves nothing.

**Failing environments.** An environment whose last ``FAILING_GROUPS`` groups were all
infrastructure failures (a dead server, a broken sandbox) rests: its share goes to the others,
and one probe group every ``PROBE_EVERY`` picks tells when it is back. One broken environment
of a mixture costs masked samples, never the run.

**Revisits** (``revisit`` > 0): that fraction of groups re-asks a task whose last group had
reward variance (what GRPO learns from), up to three times, instead of a fresh one.

Everything the picker decides from is in :meth:`TaskPicker.state_dict`, saved with every
checkpoint: a resumed run continues the same curriculum. The picker is used from the learner's
thread and, sampling ahead, from the sampler's; a lock keeps its state whole.
"""

from __future__ import annotations

import random
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ludus.core import registry
from ludus.core.env import Env, TaskSource, cycled_task
from ludus.core.types import Task, Trajectory
from ludus.train.config import ConfigError, TrainConfig

MAX_VISITS = 3  # a task is asked at most this many times through revisits
MAX_WAITING = 1024  # revisits queued per environment; the oldest go first when it is full
FAILING_GROUPS = 3  # consecutive all-infra-error groups after which an environment rests
PROBE_EVERY = 32  # picks between two probe groups of a resting environment


@dataclass(frozen=True, eq=False)  # compared by identity: an arm is one place in one run
class Arm:
    """One place groups come from: an environment (at one difficulty level, with a curriculum).

    ``key`` names it in metrics and checkpoints: ``label`` or ``label/L3``."""

    label: str  # the environment's name in this run (its ``label`` in ``envs``, default its name)
    level: int | None
    env: Callable[[], Env]
    train: TaskSource
    eval_tasks: tuple[Task, ...]

    @property
    def key(self) -> str:
        return self.label if self.level is None else f"{self.label}/L{self.level}"

    def task(self, index: int) -> Task:
        """Task ``index`` of the arm's training stream (a finite dataset comes round again)."""
        return cycled_task(self.train, index)


@dataclass(frozen=True)
class CurriculumSettings:
    """``band``: the learnable band of success rates, ``(low, high)``; ``window``: groups per level
    that a decision reads; ``review``: the fraction of groups drawn from levels below the current one."""

    band: tuple[float, float] = (0.0, 0.6)
    window: int = 32
    review: float = 0.2

    def __post_init__(self) -> None:
        low, high = self.band
        if not 0 <= low < high <= 1:
            raise ValueError(f"curriculum band must be two rates 0 <= low < high <= 1, got {list(self.band)}")
        if self.window < 1:
            raise ValueError(f"curriculum window must be at least 1 group, got {self.window}")
        if not 0 <= self.review < 1:
            raise ValueError(f"curriculum review must be a fraction in [0, 1), got {self.review}")


@dataclass
class _Ladder:
    """One environment's curriculum: its level arms, easiest first, and where the run stands."""

    arms: list[Arm]
    current: int = 0
    rates: dict[str, deque[float]] = field(default_factory=dict)
    failures: int = 0  # consecutive groups that were infrastructure failures only

    @property
    def resting(self) -> bool:
        return self.failures >= FAILING_GROUPS


@dataclass(frozen=True)
class Pick:
    """A group's assignment: its arm and the index of its task in the arm's stream."""

    arm: Arm
    index: int
    visits: int = 0  # earlier groups of the same task (revisits)

    @property
    def task(self) -> Task:
        return self.arm.task(self.index)


class TaskPicker:
    """Assigns tasks to groups (see the module docstring).

    ``groups``: the arms of each environment with its weight; an environment with several arms
    is a curriculum ladder (its arms easiest first)."""

    def __init__(
        self,
        groups: Sequence[tuple[Sequence[Arm], float]],
        *,
        seed: int = 0,
        curriculum: CurriculumSettings | None = None,
        revisit: float = 0.0,
    ):
        if not groups:
            raise ValueError("a run needs at least one environment")
        if not 0 <= revisit < 1:
            raise ValueError(f"revisit must be a fraction in [0, 1), got {revisit}")
        self.settings = curriculum or CurriculumSettings()
        self.revisit = revisit
        self.ladders = [_Ladder(list(arms)) for arms, _ in groups]
        self.weights = [float(w) for _, w in groups]
        self.arms = {arm.key: arm for ladder in self.ladders for arm in ladder.arms}
        for ladder in self.ladders:
            ladder.rates = {arm.key: deque(maxlen=self.settings.window) for arm in ladder.arms}
        self.counters = {key: 0 for key in self.arms}
        self.revisits: dict[str, deque[tuple[str, int, int]]] = {
            ladder.arms[0].label: deque(maxlen=MAX_WAITING) for ladder in self.ladders
        }
        self.rng = random.Random(seed)
        self.picks = 0
        self._lock = threading.Lock()

    # ---- drawing ----

    def pick(self) -> Pick:
        """The next group's arm and task."""
        with self._lock:
            self.picks += 1
            ladder = self.ladders[self._ladder()]
            waiting = self.revisits[ladder.arms[0].label]
            if waiting and self.rng.random() < self.revisit:
                key, index, visits = waiting.popleft()
                return Pick(self.arms[key], index, visits)
            arm = ladder.arms[self._level(ladder)]
            index = self.counters[arm.key]
            self.counters[arm.key] += 1
            return Pick(arm, index)

    def _ladder(self) -> int:
        """An environment by weight, leaving out resting ones (unless all rest) except for probes."""
        weights = self.weights
        if len(weights) > 1 and self.picks % PROBE_EVERY:
            live = [0.0 if ladder.resting else w for ladder, w in zip(self.ladders, weights, strict=True)]
            weights = live if any(live) else weights
        return self.rng.choices(range(len(self.ladders)), weights)[0]

    def _level(self, ladder: _Ladder) -> int:
        if ladder.current > 0 and self.rng.random() < self.settings.review:
            return self.rng.randrange(ladder.current)
        return ladder.current

    # ---- learning from outcomes ----

    def observe(self, pick: Pick, group: Sequence[Trajectory]) -> None:
        """A finished group of ``pick``: its success rate moves the curriculum; a group with reward
        variance queues its task for a revisit. Infrastructure failures are not outcomes."""
        measured = [t for t in group if t.score is not None and not t.score.is_infra_error]
        with self._lock:
            ladder = next(lad for lad in self.ladders if pick.arm in lad.arms)
            ladder.failures = 0 if measured else ladder.failures + 1
            if not measured:
                return
            rate = sum(t.score.correct for t in measured) / len(measured)  # type: ignore[union-attr]
            ladder.rates[pick.arm.key].append(rate)
            if self.revisit and len({t.reward for t in measured}) > 1 and pick.visits + 1 < MAX_VISITS:
                self.revisits[pick.arm.label].append((pick.arm.key, pick.index, pick.visits + 1))
            self._move(ladder)

    def _move(self, ladder: _Ladder) -> None:
        """Promote or demote the ladder's current level on a full window of its rates."""
        window = ladder.rates[ladder.arms[ladder.current].key]
        if len(ladder.arms) < 2 or len(window) < self.settings.window:
            return
        rate = sum(window) / len(window)
        low, high = self.settings.band
        step = (
            1 if rate >= high and ladder.current + 1 < len(ladder.arms) else -1 if rate <= low and ladder.current else 0
        )
        if step:
            ladder.current += step
            ladder.rates[ladder.arms[ladder.current].key].clear()  # judge the new level on fresh groups

    # ---- reporting and resuming ----

    def metrics(self) -> dict[str, float]:
        """Per curriculum: the current level, the band position of its recent rate (-1 at the bottom, 0 in,
        1 above; 0 before a window is full) and every level's recent success rate."""
        out: dict[str, float] = {}
        low, high = self.settings.band
        with self._lock:
            for ladder in self.ladders:
                if len(self.ladders) > 1:
                    out[f"mix/{ladder.arms[0].label}/resting"] = int(ladder.resting)
                if len(ladder.arms) < 2:
                    continue
                label, current = ladder.arms[0].label, ladder.arms[ladder.current]
                window = ladder.rates[current.key]
                rate = sum(window) / len(window) if window else 0.0
                full = len(window) == self.settings.window
                out[f"curriculum/{label}/level"] = current.level  # type: ignore[assignment]
                out[f"curriculum/{label}/band"] = (rate >= high) - (rate <= low) if full else 0
                for arm in ladder.arms:
                    if rates := ladder.rates[arm.key]:
                        out[f"curriculum/{label}/rate/L{arm.level}"] = round(sum(rates) / len(rates), 4)
        return out

    def state_dict(self) -> dict[str, Any]:
        """Everything later picks depend on, as JSON."""
        with self._lock:
            version, internal, gauss = self.rng.getstate()
            return {
                "counters": dict(self.counters),
                "current": [ladder.current for ladder in self.ladders],
                "failures": [ladder.failures for ladder in self.ladders],
                "picks": self.picks,
                "rates": {key: list(rates) for ladder in self.ladders for key, rates in ladder.rates.items()},
                "revisits": {label: [list(entry) for entry in queue] for label, queue in self.revisits.items()},
                "rng": [version, list(internal), gauss],
            }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`; arms the saved run did not have are an error."""
        unknown = set(state["counters"]) - set(self.arms)
        if unknown:
            raise ValueError(f"the checkpoint's curriculum has arms this run does not: {sorted(unknown)}")
        with self._lock:
            self.counters.update(state["counters"])
            self.picks = state["picks"]
            for ladder, current, failures in zip(self.ladders, state["current"], state["failures"], strict=True):
                ladder.current, ladder.failures = current, failures
                for key, rates in ladder.rates.items():
                    rates.clear()
                    rates.extend(state["rates"].get(key, []))
            for label, entries in state["revisits"].items():
                self.revisits[label] = deque(((key, index, visits) for key, index, visits in entries), MAX_WAITING)
            version, internal, gauss = state["rng"]
            self.rng.setstate((version, tuple(internal), gauss))


def build_picker(
    config: TrainConfig, single: Callable[[], Env], first: Env | None = None
) -> tuple[TaskPicker, list[Env]]:
    """The picker of a run's environments (``config.env_entries()``), each split into its
    difficulty levels with ``curriculum``, and the environment made for each arm to read its
    tasks (and check its arguments), in the picker's order and still open: the start of a run
    reads them too (context sizing, the warm start), then closes them. ``single`` makes the
    environment of a run of one environment without a curriculum (it may be an env server's);
    ``first`` is one it has made already (the check of its arguments), used instead of another."""
    entries = config.env_entries()
    ladders: list[tuple[list[Arm], float]] = []
    made: list[Env] = []
    try:
        for entry in entries:
            ladders.append((_ladder(config, entry, single, first, made), entry["weight"]))
    except BaseException:
        for env in made:
            env.close()
        raise
    settings = CurriculumSettings(
        (config.curriculum_band[0], config.curriculum_band[1]), config.curriculum_window, config.curriculum_review
    )
    return TaskPicker(ladders, seed=config.seed, curriculum=settings, revisit=config.revisit), made


def _ladder(
    config: TrainConfig, entry: dict[str, Any], single: Callable[[], Env], first: Env | None, made: list[Env]
) -> list[Arm]:
    """One environment's arms (one per level with a curriculum), each made environment added to ``made``."""
    name, args, label = entry["name"], entry["args"], entry["label"]
    levels: list[int | None] = [None]
    if config.curriculum:
        levels = list(_levels(config, name, args, label))
    arms = []
    for level in levels:
        if not config.envs and level is None:
            make, env = single, first
        else:
            try:
                make = registry.factory(name, args if level is None else {**args, "difficulty": level})
            except (registry.UnknownEnvError, registry.EnvLoadError, TypeError) as exc:
                raise ConfigError(f"config field 'envs': {label}: {exc}") from None
            env = None
        arm, env = _arm(make, label, level, config.eval_size, env)
        made.append(env)
        arms.append(arm)
    return arms


def _levels(config: TrainConfig, name: str, args: dict[str, Any], label: str) -> tuple[int, ...]:
    """The curriculum's levels for one environment, checked against the ones it has."""
    try:
        have = registry.env_class(name).difficulty_levels
    except (registry.UnknownEnvError, registry.EnvLoadError) as exc:
        raise ConfigError(f"config field 'envs': {label}: {exc}") from None
    if not have:
        raise ConfigError(
            f"curriculum: environment {label!r} has no difficulty levels (its difficulty_levels is empty)"
        )
    if "difficulty" in args:
        raise ConfigError(f"curriculum: {label!r} sets difficulty in its args; the curriculum sets it, drop it")
    levels = tuple(config.curriculum_levels) or have
    wrong = [level for level in levels if level not in have]
    if wrong:
        raise ConfigError(f"config field 'curriculum_levels': {label!r} has levels {list(have)}, not {wrong}")
    if len(levels) < 2:
        raise ConfigError(f"config field 'curriculum_levels' needs at least two levels to move between, got {levels}")
    return levels


def _arm(make: Callable[[], Env], label: str, level: int | None, eval_size: int, env: Env | None) -> tuple[Arm, Env]:
    """An arm with its train stream and held-out tasks, read from ``env`` or from one environment
    made now (which also checks that the arguments fit); that environment, open."""
    if env is None:
        try:
            env = make()
        except (TypeError, ValueError) as exc:
            where = label if level is None else f"{label} at difficulty {level}"
            raise ConfigError(f"the environment arguments of {where} do not fit: {exc}") from exc
    try:
        source = env.task_source("eval")
        size = eval_size if source.size is None else min(eval_size, source.size)
        return Arm(label, level, make, env.task_source("train"), tuple(source.get(i) for i in range(size))), env
    except BaseException:
        env.close()
        raise
