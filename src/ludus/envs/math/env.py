"""The math environment: one problem, one reply, graded by the exact math verifier.

Tasks come from a MATH- or GSM8K-style file (``path=`` with ``fields="math"`` / ``"gsm8k"``,
or your own column names) or, without a file, from a seeded procedural family, so the
environment works with nothing downloaded. The reply must put its final answer in
``\\boxed{}`` (or another marker the verifier accepts, see :class:`MathVerifier`).

``format_weight`` adds a format component that is paid *only together with a correct
answer*: a correct answer in the first-priority marker (``\\boxed{}`` by default) earns 1,
a correct answer marked some other way earns ``1 - format_weight``, a wrong answer 0
however neat. So the format term can never be farmed on its own.

``fallback="last_math"`` grades a reply with no marker by its last math expression (see
:class:`MathVerifier`). It is for *evaluating* free-form outputs; leave it off for training,
where the marker is part of what is learned.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

from ludus.core.env import JsonTypes, SingleTurnEnv, Split, TaskSource
from ludus.core.types import Score, Status, Task
from ludus.envs.math.verifier import DecimalGold, Fallback, MathVerifier
from ludus.tasks.answers import MARKERS, Marker, find_answers
from ludus.tasks.arithmetic import Arithmetic
from ludus.tasks.linear import LinearEquation
from ludus.tasks.loaders import Preset, load_tasks, split_files
from ludus.tasks.procedural import ProceduralTasks, TaskFamily

Family = Literal["arithmetic", "linear-equation"]


def _family(name: Family, difficulty: int) -> TaskFamily:
    if name == "arithmetic":
        return Arithmetic.at_level(difficulty)
    if name == "linear-equation":
        return LinearEquation.at_level(difficulty)
    raise ValueError(f"family must be 'arithmetic' or 'linear-equation', got {name!r}")


class MathEnv(SingleTurnEnv):
    name = "math"
    description = "math problems (procedural or MATH/GSM8K files) graded by the exact math verifier"
    system_prompt = "Solve the problem. Put the final answer in \\boxed{}."
    # a client's problem and gold: the gold is parsed in the guarded workers, like any reply
    client_task_info: ClassVar[Mapping[str, JsonTypes] | None] = {"family": str, "solution": str}

    def __init__(
        self,
        tasks: TaskSource | None = None,
        *,
        path: str | None = None,
        eval_path: str | None = None,
        fields: Preset | None = None,
        prompt_field: str | None = None,
        answer_field: str | None = None,
        family: Family = "arithmetic",
        difficulty: int = 2,
        seed: int = 0,
        format_weight: float = 0.0,
        priority: tuple[Marker, ...] = MARKERS,
        timeout_s: float = 5.0,
        max_answer_chars: int = 1_000,
        decimal_gold: DecimalGold = "rounded",
        fallback: Fallback | None = None,
    ):
        if not 0.0 <= format_weight < 1.0:
            raise ValueError(
                f"format_weight must be in [0, 1): a correct answer always earns most; got {format_weight}"
            )
        self.files = split_files(
            path,
            eval_path,
            lambda p: load_tasks(p, fields=fields, prompt_field=prompt_field, answer_field=answer_field),
        )
        super().__init__(tasks)
        self.family = _family(family, difficulty)
        self.seed, self.format_weight = seed, format_weight
        self.verifier = MathVerifier(
            priority=tuple(priority),
            timeout_s=timeout_s,
            max_answer_chars=max_answer_chars,
            decimal_gold=decimal_gold,
            fallback=fallback,
        )

    def default_tasks(self, split: Split = "train") -> TaskSource:
        """The file's rows (``eval_path`` for the eval split, else a held-out part of ``path``) or procedural problems."""
        if split in self.files:
            return self.files[split]()
        return ProceduralTasks(self.family, seed=self.seed, split=split)

    def reference(self, task: Task) -> str | None:
        return None if task.answer is None else f"\\boxed{{{task.answer}}}"

    def score(self, task: Task, completion: str) -> Score:
        if task.answer is None or not str(task.answer).strip():
            return Score.zero(Status.GOLD_ERROR, f"task {task.id} has no gold answer")
        score = self.verifier.score(completion, str(task.answer))
        if not self.format_weight:
            return score
        correct = score.status == Status.CORRECT
        formatted = bool(find_answers(completion, self.verifier.priority[:1])[0])
        score.components = {"correct": float(correct), "format": float(formatted)}
        if correct and not formatted:
            score.value = 1.0 - self.format_weight
            score.reason += f"; not in {self.verifier.priority[0]} format"
        return score
