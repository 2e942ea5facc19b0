"""Single-turn environments over the procedural task families of :mod:`ludus.tasks`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Protocol

from ludus.core.env import JsonTypes, SingleTurnEnv, Split, TaskSource
from ludus.core.types import Score, Status, Task
from ludus.envs.procedural.countdown import score_countdown
from ludus.envs.procedural.exact import digit_agreement, parse_int, score_int, score_int_list
from ludus.tasks import arithmetic, countdown, linear, sorting
from ludus.tasks.arithmetic import Arithmetic
from ludus.tasks.countdown import Countdown
from ludus.tasks.linear import LinearEquation
from ludus.tasks.procedural import ProceduralTasks, TaskFamily
from ludus.tasks.sorting import Sorting


class ProceduralEnv(SingleTurnEnv):
    """A single-turn environment whose built-in tasks come from one :class:`TaskFamily`.

    ``seed`` picks the task stream; the eval split holds problems the train split never shows.
    """

    system_prompt: ClassVar[str | None] = "Reply with the final answer only."
    quick = True  # scoring is a few microseconds of pure Python
    # a client's own problem is its prompt and gold answer; nothing in a task reaches the disk
    client_task_info: ClassVar[Mapping[str, JsonTypes] | None] = {"family": str}

    def __init__(
        self, family: TaskFamily, tasks: TaskSource | None = None, *, seed: int = 0, eval_fraction: float = 0.1
    ):
        super().__init__(tasks)
        self.family, self.seed, self.eval_fraction = family, seed, eval_fraction

    def default_tasks(self, split: Split = "train") -> TaskSource:
        return ProceduralTasks(self.family, seed=self.seed, split=split, eval_fraction=self.eval_fraction)

    def reference(self, task: Task) -> str | None:
        return None if task.answer is None else str(task.answer)


class ArithmeticEnv(ProceduralEnv):
    """Integer arithmetic: ``37+45=`` → ``82``. Exact integer answer.

    ``digit_credit`` (reward shaping, off by default) pays a wrong integer answer up to that
    much for the fraction of its digits that match the gold right-aligned; only an exact
    answer earns 1 and counts as ``correct``. It turns a rare all-or-nothing signal into a
    dense one, which is what lets a tiny model improve by RL in minutes.
    """

    name = "arithmetic"
    description = "integer arithmetic (a+b, a-b, a*b) with a digits/operators difficulty knob"
    difficulty_levels = tuple(sorted(arithmetic.LEVELS))

    def __init__(
        self,
        tasks: TaskSource | None = None,
        *,
        difficulty: int | None = None,
        digits: int = 2,
        ops: str = "+",
        min_digits: int | None = None,
        seed: int = 0,
        eval_fraction: float = 0.1,
        digit_credit: float = 0.0,
    ):
        if not 0.0 <= digit_credit < 1.0:
            raise ValueError(
                f"digit_credit must be in [0, 1): a wrong answer may not earn full reward; got {digit_credit}"
            )
        family = Arithmetic.at_level(difficulty) if difficulty is not None else Arithmetic(digits, ops, min_digits)
        super().__init__(family, tasks, seed=seed, eval_fraction=eval_fraction)
        self.digit_credit = digit_credit

    def score(self, task: Task, completion: str) -> Score:
        score = score_int(completion, task.answer)
        if not self.digit_credit or score.status != Status.WRONG or score.extracted is None:
            return score
        agreement = digit_agreement(parse_int(score.extracted), task.answer)
        score.value = self.digit_credit * agreement
        score.components = {"digits": agreement}
        score.reason += f"; {agreement:.0%} of digits right"
        return score


class LeveledFamily(Protocol):
    """A task family class: built from keyword parameters or from a difficulty level."""

    def __call__(self, **params: Any) -> TaskFamily: ...

    def at_level(self, difficulty: int) -> TaskFamily: ...


class LeveledEnv(ProceduralEnv):
    """A :class:`ProceduralEnv` made from ``difficulty=N`` or from the family's own parameters."""

    family_cls: ClassVar[LeveledFamily]

    def __init__(
        self,
        tasks: TaskSource | None = None,
        *,
        difficulty: int | None = None,
        seed: int = 0,
        eval_fraction: float = 0.1,
        **params: Any,
    ):
        if difficulty is not None and params:
            raise ValueError(f"pass difficulty or explicit parameters ({', '.join(params)}), not both")
        family = self.family_cls.at_level(difficulty) if difficulty is not None else self.family_cls(**params)
        super().__init__(family, tasks, seed=seed, eval_fraction=eval_fraction)


class CountdownEnv(LeveledEnv):
    """Countdown: reach the target from the given numbers; the reply is an expression."""

    name = "countdown"
    description = "countdown numbers game: combine 3-6 numbers with + - * / to hit a target"
    system_prompt = "Reply with the expression only."
    family_cls = Countdown
    difficulty_levels = tuple(sorted(countdown.LEVELS))
    client_task_info = {"family": str, "numbers": list, "target": int}

    def client_task(self, data: Any) -> Task:
        """A client's numbers are whole numbers, as the game's are."""
        task = super().client_task(data)
        numbers = task.info.get("numbers", [])
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers):
            raise ValueError("task.info['numbers'] must be a list of whole numbers")
        return task

    def score(self, task: Task, completion: str) -> Score:
        return score_countdown(completion, task.info["numbers"], task.info["target"])


class SortingEnv(LeveledEnv):
    """List manipulation: ``sort asc: 5 2 9`` → ``2 5 9``. Exact list answer."""

    name = "sorting"
    description = "list manipulation (sort, reverse, remove duplicates) with a length/value-range knob"
    family_cls = Sorting
    difficulty_levels = tuple(sorted(sorting.LEVELS))
    client_task_info = {"family": str, "op": str}
    client_task_answer = list

    def score(self, task: Task, completion: str) -> Score:
        return score_int_list(completion, task.answer)

    def reference(self, task: Task) -> str | None:
        # the prompt's own style, for supervised warm-starts
        return None if task.answer is None else " ".join(map(str, task.answer))


class LinearEquationEnv(LeveledEnv):
    """Linear equations: ``3x+5=20, x=?`` → ``5`` (``x = 5`` is accepted too)."""

    name = "linear-equation"
    description = "solve a*x+b=c (harder levels: x on both sides) for an integer x"
    family_cls = LinearEquation
    difficulty_levels = tuple(sorted(linear.LEVELS))

    def score(self, task: Task, completion: str) -> Score:
        return score_int(completion, task.answer, variable="x")
