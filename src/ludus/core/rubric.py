"""Rewards composed of named criteria: weights, gates, one component per criterion.

    rubric = Rubric([
        Criterion("format", has_boxed_answer),                       # (task, completion) -> bool | float | Score
        Criterion("correct", answer_matches, weight=3, gate="format"),  # runs only when "format" passed
    ])
    score = rubric.score(task, completion)   # Score(value=Σ wᵢvᵢ / Σ wᵢ, components={"format": 1.0, "correct": 0.0})

Why a gate: an expensive or gameable criterion (a judge, a test run) should only see
completions that passed the cheap checks before it. A criterion that fails its gate is not
run and counts 0.

Deny by default, and never a partial number for a broken grader: a criterion that raises,
returns something that is not a number in [0, 1], or returns an ``infra_error`` Score makes
the whole score ``infra_error`` (training masks it), with the criterion named in the reason.
The status is ``correct`` when every criterion passed (reached its ``pass_at``), else
``partial`` when the value is above 0, else the first failing criterion's own status when it
gave a Score (``format_error``, ``no_answer``…) or ``wrong``.

A criterion of weight 0 is measured, not rewarded: its component is recorded (the trainer logs
it as ``reward/<name>``) but it counts neither in the value nor in the status — the true metric
beside a learned reward model's proxy, say.

Criteria can be named in configuration: ``Rubric.from_config`` takes a list of
``{"name", "function", "options", "weight", "gate", "pass_at"}`` where ``function`` is
``"module:attr"``, the name of a function registered under the ``ludus.rewards`` entry-point
group (exactly as environments register under ``ludus.envs``), or ``"source:ARGUMENT"`` for a
registered source that takes one (``"rm:runs/rm"``: a reward model's folder). With ``options``
(or an argument) the named object is a factory, called once to make the reward function
(``{"function": "judge", "options": {"model": "http://127.0.0.1:8000/v1"}}``).

Any environment whose grade goes through ``score(task, completion)`` (every ``SingleTurnEnv``
and ``ToolEnv``) takes a rubric from its configuration: ``env_args: {rubric: [...]}``, where
the function ``"env"`` is the environment's own grader (see :class:`RubricGraded`). A quick
environment stays quick only when every criterion says it is (``fn.quick = True``: pure Python
that returns at once); any other criterion is run on the environment threads, under the step
time limit, since it may block or hang.
"""

from __future__ import annotations

import functools
import math
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from ludus.core.env import Env, SingleTurnEnv, ToolEnv
from ludus.core.lazy import import_target
from ludus.core.types import InfraError, Score, Status, Task

REWARDS_GROUP = "ludus.rewards"

RewardFunction = Callable[[Task, str], "bool | float | Score"]
CONFIG_KEYS = frozenset({"name", "function", "options", "weight", "gate", "pass_at"})


@dataclass(frozen=True)
class Criterion:
    """One named part of a rubric. ``fn(task, completion)`` gives a bool, a number in [0, 1] or
    a :class:`Score` (whose ``value`` is used); ``gate`` names an earlier criterion that must have
    passed for this one to run; a criterion passes when its value reaches ``pass_at``. Weight 0:
    measured, not rewarded."""

    name: str
    fn: RewardFunction
    weight: float = 1.0
    gate: str | None = None
    pass_at: float = 1.0

    def __post_init__(self) -> None:
        # a name becomes a metric (reward/<name>) and a gate refers to it: YAML's bare true/yes/on
        # would otherwise arrive as a boolean and be logged as reward/True
        for key, value in (("name", self.name), ("gate", self.gate)):
            if not (isinstance(value, str) or (key == "gate" and value is None)):
                raise ValueError(
                    f"a criterion's {key} must be a string, got {value!r} ({type(value).__name__}); in YAML, "
                    'quote a name that reads as a boolean or a number (name: "yes")'
                )
        if not self.name:
            raise ValueError("a criterion needs a name")
        if not (isinstance(self.weight, (int, float)) and math.isfinite(self.weight) and self.weight >= 0):
            raise ValueError(
                f"criterion {self.name!r}: weight must be a number >= 0 (0: measured, not rewarded), got {self.weight!r}"
            )
        if not 0 < self.pass_at <= 1:
            raise ValueError(f"criterion {self.name!r}: pass_at must be in (0, 1], got {self.pass_at!r}")


class Rubric:
    """Criteria scored in order into one :class:`Score` (see the module docstring)."""

    def __init__(self, criteria: Sequence[Criterion]):
        if not criteria:
            raise ValueError("a rubric needs at least one criterion")
        seen: set[str] = set()
        for criterion in criteria:
            if criterion.name in seen:
                raise ValueError(f"two criteria are named {criterion.name!r}")
            if criterion.gate is not None and criterion.gate not in seen:
                raise ValueError(
                    f"criterion {criterion.name!r} is gated on {criterion.gate!r}, which is not a criterion before it"
                )
            seen.add(criterion.name)
        self.criteria = list(criteria)
        self.total_weight = sum(c.weight for c in self.criteria)
        if self.total_weight <= 0:
            raise ValueError("a rubric needs at least one criterion of weight above 0")

    @classmethod
    def from_config(
        cls, spec: Sequence[Mapping[str, Any]], functions: Mapping[str, RewardFunction] | None = None
    ) -> Rubric:
        """A rubric from plain data (YAML, JSON): each item has ``function`` and optionally ``name``,
        ``options``, ``weight``, ``gate``, ``pass_at`` (module docstring). ``functions`` are names
        that win over imports: the environment's own grader as ``"env"``."""
        if isinstance(spec, (str, bytes)) or not isinstance(spec, Sequence):
            raise ValueError(f"a rubric is a list of criteria ({{function, name, weight, ...}}), got {spec!r:.200}")
        criteria = []
        for i, item in enumerate(spec):
            if not isinstance(item, Mapping) or "function" not in item:
                raise ValueError(f"rubric item {i} needs a 'function' (module:attr or a ludus.rewards name): {item!r}")
            unknown = set(item) - CONFIG_KEYS
            if unknown:
                raise ValueError(f"rubric item {i} has unknown keys {sorted(unknown)}; known: {sorted(CONFIG_KEYS)}")
            function, options = str(item["function"]), item.get("options") or {}
            if not isinstance(options, Mapping):
                raise ValueError(f"rubric item {i}: 'options' must be a mapping, got {options!r}")
            if functions and function in functions:
                if options:
                    raise ValueError(f"rubric item {i}: {function!r} takes no options")
                fn = functions[function]
            else:
                fn = reward_function(function, options)
            name = item.get("name")
            criteria.append(
                Criterion(
                    _default_name(function) if name is None or name == "" else name,
                    fn,
                    float(item.get("weight", 1.0)),
                    item.get("gate"),
                    float(item.get("pass_at", 1.0)),
                )
            )
        return cls(criteria)

    def score(self, task: Task, completion: str) -> Score:
        components: dict[str, float] = {}
        passed: dict[str, bool] = {}
        failing: Score | None = None
        reasons = []
        for criterion in self.criteria:
            if criterion.gate is not None and not passed[criterion.gate]:
                components[criterion.name], passed[criterion.name] = 0.0, False
                reasons.append(f"{criterion.name}: not run, {criterion.gate} did not pass")
                continue
            try:
                value, verdict = _evaluate(criterion, task, completion)
            except _Broken as exc:
                return Score(0.0, Status.INFRA_ERROR, f"criterion {criterion.name!r} failed: {exc}", components)
            components[criterion.name] = value
            passed[criterion.name] = value >= criterion.pass_at
            if not passed[criterion.name]:
                failing = failing or verdict
                why = verdict.reason if verdict is not None and verdict.reason else f"{value:g}"
                reasons.append(f"{criterion.name}: {why}")
        value = sum(c.weight * components[c.name] for c in self.criteria) / self.total_weight
        if all(passed[c.name] for c in self.criteria if c.weight > 0):
            return Score(value, Status.CORRECT, "every criterion passed", components)
        status = Status.PARTIAL if value > 0 else (failing.status if failing is not None else Status.WRONG)
        return Score(value, status, "; ".join(reasons), components)


class _Broken(Exception):
    """A criterion's own failure: the score becomes infra_error."""


def _evaluate(criterion: Criterion, task: Task, completion: str) -> tuple[float, Score | None]:
    try:
        out = criterion.fn(task, completion)
    except InfraError as exc:
        raise _Broken(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - a grader bug is not the policy's fault
        raise _Broken(traceback.format_exception_only(type(exc), exc)[-1].strip()) from None
    verdict = out if isinstance(out, Score) else None
    if verdict is not None:
        if verdict.is_infra_error:
            raise _Broken(verdict.reason or "infra_error")
        out = verdict.value
    if isinstance(out, bool):
        return float(out), verdict
    if not isinstance(out, (int, float)) or not math.isfinite(out) or not 0 <= out <= 1:
        raise _Broken(f"returned {out!r}; a criterion gives a bool, a number in [0, 1] or a Score")
    return float(out), verdict


def reward_function(name: str, options: Mapping[str, Any] | None = None) -> RewardFunction:
    """The reward function ``name`` gives: ``"module:attr"``, a name registered under the
    ``ludus.rewards`` entry-point group, or ``"source:ARGUMENT"`` for a registered factory. With
    an argument or ``options``, the object named is a factory called with them."""
    registered = _registered_rewards(tuple(sys.path))
    source, colon, argument = name.partition(":")
    args: tuple[Any, ...] = ()
    if colon and source in registered:
        target, args = registered[source], (argument,)
    elif colon:
        target = name
    elif name in registered:
        target = registered[name]
    else:
        raise ValueError(
            f"no reward function {name!r}: give module:attr or one of the ludus.rewards entry points "
            f"({', '.join(sorted(registered)) or 'none installed'})"
        )
    try:
        obj = import_target(target)
    except Exception as exc:
        raise ValueError(
            f"reward function {name!r} ({target}) could not be loaded: {type(exc).__name__}: {exc}"
        ) from exc
    if not callable(obj):
        raise ValueError(f"reward function {name!r} ({target}) is not callable")
    if not (args or options):
        return obj
    try:
        fn = obj(*args, **(options or {}))
    except (TypeError, ValueError, OSError) as exc:
        raise ValueError(f"reward source {name!r} ({target}) refused its options {dict(options or {})}: {exc}") from exc
    if not callable(fn):
        raise ValueError(f"reward source {name!r} ({target}) made {fn!r}, which is not a reward function")
    return fn


@functools.lru_cache(maxsize=8)
def _registered_rewards(search_path: tuple[str, ...]) -> dict[str, str]:
    """The ``ludus.rewards`` entry points (name -> target) of the packages on ``sys.path``, read
    once per value of it (``search_path``), not per rubric: scanning every installed package costs
    tens of milliseconds, and an environment with a rubric builds it once per episode."""
    return {ep.name: ep.value for ep in entry_points(group=REWARDS_GROUP)}


def _default_name(function: str) -> str:
    """``"pkg.mod:fn"`` -> ``"fn"``; ``"rm:runs/rm"`` (a registered source) -> ``"rm"``; ``"judge"`` -> ``"judge"``."""
    source, colon, rest = function.partition(":")
    if not colon or source in _registered_rewards(tuple(sys.path)):
        return source
    return rest or function


class RubricGraded(SingleTurnEnv):
    """An environment graded by the rubric of its configuration (``rubric=[...]`` besides its own
    arguments) instead of by its own ``score``, which the rubric sees as the function ``"env"``.
    Not subclassed by hand: :func:`graded_by_rubric` puts it in front of an environment's class,
    so the environment keeps everything of its own (tool calls, honeypots) but its grade."""

    def __init__(self, *args: Any, rubric: Sequence[Mapping[str, Any]], **kwargs: Any):
        own = super().score  # the environment's class's grader, bound to this instance
        # built before the environment, so that a rubric refused leaves nothing open to close
        self.graded_by = Rubric.from_config(rubric, functions={"env": own})
        super().__init__(*args, **kwargs)
        # a judge or a reward model waits on a server or a batch: such an environment is no longer
        # quick (scored inline on the engine's event loop) unless every criterion says it is
        self.quick = self.quick and all(c.fn is own or getattr(c.fn, "quick", False) for c in self.graded_by.criteria)

    def score(self, task: Task, completion: str) -> Score:
        return self.graded_by.score(task, completion)


@functools.cache
def graded_by_rubric(cls: type[Env]) -> type[RubricGraded]:
    """``cls`` graded by a rubric: made with the same arguments plus ``rubric=[...]`` (one class
    per environment class). The environment must grade through ``score`` (every ``SingleTurnEnv``
    and ``ToolEnv`` does, unless it replaces their ``transition``, as the browser and repository
    environments do to grade state); one that does not is refused, not silently ignored."""
    grades_by_score = cls.transition in (SingleTurnEnv.transition, ToolEnv.transition)
    if not issubclass(cls, SingleTurnEnv) or not (grades_by_score or cls.grades_through_score):
        raise ValueError(
            f"environment {cls.name!r} grades in its own transition, not through score(task, completion), so a "
            "rubric cannot replace its grade; rubrics apply to SingleTurnEnv and ToolEnv environments"
        )
    return type(f"{cls.__name__}GradedByRubric", (RubricGraded, cls), {"__doc__": cls.__doc__})
