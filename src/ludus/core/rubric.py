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

Criteria can be named in configuration: ``Rubric.from_config`` takes a list of
``{"name", "function", "weight", "gate", "pass_at"}`` where ``function`` is ``"module:attr"`` or
the name of a function registered under the ``ludus.rewards`` entry-point group, exactly as
environments register under ``ludus.envs``.
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from ludus.core.registry import import_target
from ludus.core.types import InfraError, Score, Status, Task

REWARDS_GROUP = "ludus.rewards"

RewardFunction = Callable[[Task, str], "bool | float | Score"]


@dataclass(frozen=True)
class Criterion:
    """One named part of a rubric. ``fn(task, completion)`` gives a bool, a number in [0, 1] or
    a :class:`Score` (whose ``value`` is used); ``gate`` names an earlier criterion that must have
    passed for this one to run; a criterion passes when its value reaches ``pass_at``."""

    name: str
    fn: RewardFunction
    weight: float = 1.0
    gate: str | None = None
    pass_at: float = 1.0

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a criterion needs a name")
        if not (isinstance(self.weight, (int, float)) and math.isfinite(self.weight) and self.weight > 0):
            raise ValueError(f"criterion {self.name!r}: weight must be a positive number, got {self.weight!r}")
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

    @classmethod
    def from_config(cls, spec: Sequence[Mapping[str, Any]]) -> Rubric:
        """A rubric from plain data (YAML, JSON): each item has ``function`` (``"module:attr"`` or a
        name registered under ``ludus.rewards``) and optionally ``name``, ``weight``, ``gate``, ``pass_at``."""
        criteria = []
        for i, item in enumerate(spec):
            if not isinstance(item, Mapping) or "function" not in item:
                raise ValueError(f"rubric item {i} needs a 'function' (module:attr or a ludus.rewards name): {item!r}")
            unknown = set(item) - {"name", "function", "weight", "gate", "pass_at"}
            if unknown:
                raise ValueError(f"rubric item {i} has unknown keys {sorted(unknown)}")
            function = str(item["function"])
            criteria.append(
                Criterion(
                    str(item.get("name") or function.rpartition(":")[2] or function),
                    reward_function(function),
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
        if all(passed.values()):
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


def reward_function(name: str) -> RewardFunction:
    """``"module:attr"``, or a function registered under the ``ludus.rewards`` entry-point group."""
    target = name
    if ":" not in name:
        found = [ep for ep in entry_points(group=REWARDS_GROUP) if ep.name == name]
        if not found:
            known = sorted(ep.name for ep in entry_points(group=REWARDS_GROUP))
            raise ValueError(
                f"no reward function {name!r}: give module:attr or one of the ludus.rewards entry points "
                f"({', '.join(known) or 'none installed'})"
            )
        target = found[0].value
    try:
        obj = import_target(target)
    except Exception as exc:
        raise ValueError(
            f"reward function {name!r} ({target}) could not be loaded: {type(exc).__name__}: {exc}"
        ) from exc
    if not callable(obj):
        raise ValueError(f"reward function {name!r} ({target}) is not callable")
    return obj
