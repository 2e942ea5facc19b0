"""Single-turn environments over the procedural task families of :mod:`ludus.tasks`."""

from __future__ import annotations

from typing import ClassVar

from ludus.core.env import SingleTurnEnv, Split, TaskSource
from ludus.core.types import Score, Task
from ludus.tasks.arithmetic import Arithmetic
from ludus.tasks.procedural import ProceduralTasks, TaskFamily
from ludus.verifiers.exact import score_int


class ProceduralEnv(SingleTurnEnv):
    """A single-turn environment whose built-in tasks come from one :class:`TaskFamily`.

    ``seed`` picks the task stream; the eval split holds problems the train split never shows.
    """

    system_prompt: ClassVar[str | None] = "Reply with the final answer only."

    def __init__(
        self, family: TaskFamily, tasks: TaskSource | None = None, *, seed: int = 0, eval_fraction: float = 0.1
    ):
        super().__init__(tasks)
        self.family, self.seed, self.eval_fraction = family, seed, eval_fraction

    def default_tasks(self, split: Split = "train") -> TaskSource:
        return ProceduralTasks(self.family, seed=self.seed, split=split, eval_fraction=self.eval_fraction)


class ArithmeticEnv(ProceduralEnv):
    """Integer arithmetic: ``37+45=`` → ``82``. Exact integer answer."""

    name = "arithmetic"
    description = "integer arithmetic (a+b, a-b, a*b) with a digits/operators difficulty knob"

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
    ):
        family = Arithmetic.at_level(difficulty) if difficulty is not None else Arithmetic(digits, ops, min_digits)
        super().__init__(family, tasks, seed=seed, eval_fraction=eval_fraction)

    def score(self, task: Task, completion: str) -> Score:
        return score_int(completion, task.answer)
