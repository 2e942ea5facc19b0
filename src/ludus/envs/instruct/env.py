"""``instruct``: verifiable instruction following, IFEval-style, graded by code and no judge."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar

from ludus.core.env import SingleTurnEnv, Split, TaskSource
from ludus.core.rubric import Criterion, Rubric
from ludus.core.types import Message, Score, Status, Task
from ludus.envs.instruct.constraints import Constraint, check, describe
from ludus.envs.instruct.tasks import InstructFamily, load_ifeval, violate
from ludus.tasks.loaders import split_files
from ludus.tasks.procedural import ProceduralTasks


class InstructEnv(SingleTurnEnv):
    """A writing request with 1-3 constraints (IFEval's kinds); one rubric criterion per constraint.

    ``partial_credit=False`` (the default) pays 1 only when every constraint is met — IFEval's
    prompt-level score — while ``Score.components`` still says which were; ``True`` pays the
    fraction met. The fraction pays a reply for the constraints it happens to meet (another
    task's reply, a bare keyword list), which is why it is not the default. ``loose=True``
    grades as IFEval's loose score does (markdown ``*`` removed, first or last line dropped).

    Every criterion is gated on ``no_echo`` (measured, weight 0): a reply that copies the
    prompt's instructions back meets nothing. Tasks are generated (seeded, eval split held out
    by content) or read from an IFEval-format file (``path=``; ``unsupported`` counts the
    instruction ids without a checker).
    """

    name = "instruct"
    description = "verifiable instruction following (IFEval's 25 kinds): word counts, keywords, JSON, bullets, ..."
    quick: ClassVar[bool] = True  # pure Python checks (language detection aside)
    # No generic answer cheats (ludus check --redteam): they hedge around one gold answer, but here
    # any reply meeting every constraint is right — the reference with other text around it, or
    # its words reversed, too. Code checks no fluency or topic (gate on a judge from ludus.rewards
    # for that); ``cheats`` plays what this grader must refuse.
    redteam_kinds: ClassVar[frozenset[str]] = frozenset()

    def __init__(
        self,
        tasks: TaskSource | None = None,
        *,
        path: str | None = None,
        eval_path: str | None = None,
        min_constraints: int = 1,
        max_constraints: int = 3,
        kinds: Sequence[str] | None = None,
        seed: int = 0,
        eval_fraction: float = 0.1,
        loose: bool = False,
        partial_credit: bool = False,
    ):
        super().__init__(tasks)
        self.family = InstructFamily(min_constraints, max_constraints, kinds)
        self.seed, self.eval_fraction, self.loose, self.partial_credit = seed, eval_fraction, loose, partial_credit
        self.unsupported: Counter[str] = Counter()
        self.files = split_files(path, eval_path, lambda p: load_ifeval(p, self.unsupported), eval_fraction)

    def default_tasks(self, split: Split = "train") -> TaskSource:
        if split in self.files:
            return self.files[split]()
        return ProceduralTasks(self.family, seed=self.seed, split=split, eval_fraction=self.eval_fraction)

    def reference(self, task: Task) -> str | None:
        answer = task.answer if isinstance(task.answer, Mapping) else {}
        return answer.get("reference")

    def rubric(self, task: Task) -> Rubric:
        """``no_echo`` (weight 0, the gate), then one criterion per constraint, named by its kind."""
        criteria = [Criterion("no_echo", _no_echo, weight=0.0)]
        for name, constraint in named_constraints(constraints_of(task)):
            criteria.append(Criterion(name, self._criterion(constraint), gate="no_echo"))
        return Rubric(criteria)

    def _criterion(self, constraint: Constraint) -> Callable[[Task, str], Score]:
        def met(task: Task, completion: str) -> Score:
            if not completion.strip():
                return Score.zero(Status.NO_ANSWER, "empty reply")
            if check(constraint, completion, loose=self.loose):
                return Score(1.0, Status.CORRECT, "met")
            return Score.zero(Status.WRONG, f"not met: {describe(constraint)[:120]}")

        return met

    def score(self, task: Task, completion: str) -> Score:
        if not constraints_of(task):
            return Score.zero(Status.GOLD_ERROR, f"task {task.id} has no constraints to check")
        score = self.rubric(task).score(task, completion)
        if not self.partial_credit and score.status == Status.PARTIAL:
            score.value, score.status = 0.0, Status.WRONG  # prompt-level: all or nothing
        return score

    def cheats(self, task: Task) -> dict[str, list[Message]]:
        """Replies that must earn nothing: the prompt copied back (alone and before the reference),
        the task's keywords stuffed into a line, and the reference with each constraint broken."""
        say = lambda text: [Message("assistant", text)]  # noqa: E731
        reference, constraints = self.reference(task), constraints_of(task)
        out = {
            "the request echoed back": say(task.prompt),
            "the request echoed, then the reference": say(f"{task.prompt}\n\n{reference or ''}"),
        }
        keywords = [k for c in constraints for k in c.get("keywords", [])]
        keywords += [c["keyword"] for c in constraints if "keyword" in c]
        if keywords:
            out["the task's keywords, stuffed"] = say(" ".join(keywords * 10))
        if reference is not None:
            for name, constraint in named_constraints(constraints):
                out[f"the reference with {name} broken"] = say(violate(constraint, reference))
        return out


def constraints_of(task: Task) -> list[Constraint]:
    answer = task.answer if isinstance(task.answer, Mapping) else {}
    constraints = answer.get("constraints")
    return list(constraints) if isinstance(constraints, list) else []


def named_constraints(constraints: Sequence[Constraint]) -> list[tuple[str, Constraint]]:
    """Each constraint with its component name: the kind, ``_2``, ``_3``… when a kind repeats."""
    seen: Counter[str] = Counter()
    out = []
    for c in constraints:
        seen[c["kind"]] += 1
        out.append((c["kind"] if seen[c["kind"]] == 1 else f"{c['kind']}_{seen[c['kind']]}", c))
    return out


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def _no_echo(task: Task, completion: str) -> Score:
    """Fails when the reply copies the prompt, or one of its instruction sentences, back."""
    reply, prompt = _normal(completion), _normal(task.prompt)
    shown = [d for d in map(_normal, map(describe, constraints_of(task))) if d in prompt]
    for text in [prompt, *shown]:
        if text and text in reply:
            return Score.zero(Status.WRONG, f"the reply copies the prompt's instructions: {text[:80]!r}")
    return Score(1.0, Status.CORRECT, "")
