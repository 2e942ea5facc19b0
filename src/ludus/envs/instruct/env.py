"""``instruct``: verifiable instruction following, IFEval-style, graded by code and no judge."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, ClassVar

from ludus.core.env import JsonTypes, SingleTurnEnv, Split, TaskSource
from ludus.core.rubric import Criterion, Rubric
from ludus.core.types import Message, Score, Status, Task
from ludus.envs.instruct.cheats import cheats
from ludus.envs.instruct.constraints import CHECKERS, COUNTS, Constraint, check, describe, named_constraints
from ludus.envs.instruct.substance import MAX_CHARS, MIN_OWN_WORDS, constraints_of, no_echo, substance
from ludus.envs.instruct.tasks import InstructFamily, load_ifeval
from ludus.tasks.loaders import split_files
from ludus.tasks.procedural import ProceduralTasks

# a client's own task (an env server's --allow-client-tasks): at most this many constraints (the
# built-in generator makes up to 5) and this much JSON of them
MAX_CLIENT_CONSTRAINTS = 8
MAX_CLIENT_CONSTRAINT_CHARS = 4_000
# and no count past this: a word count sets how long a reply may be (ten characters a word), and
# a client's ``num_words`` of 10**9 let megabyte replies stall the loop
MAX_CLIENT_COUNT = MAX_CHARS // 10


class InstructEnv(SingleTurnEnv):
    """A writing request with 1-3 constraints (IFEval's kinds); one rubric criterion per constraint.

    ``partial_credit=False`` (the default) pays 1 only when every constraint is met — IFEval's
    prompt-level score — while ``Score.components`` still says which were; ``True`` pays the
    fraction met. The fraction pays a reply for the constraints it happens to meet (another
    task's reply, a bare keyword list), which is why it is not the default. ``loose=True``
    grades as IFEval's loose score does (markdown ``*`` removed, first or last line dropped).
    ``min_own_words`` is the substance gate's floor (lower it for file tasks that ask for one
    word or a list of numbers).

    Every constraint is gated on ``substance`` then ``no_echo`` (both measured, weight 0;
    :mod:`.substance`): a reply that does not address its task (empty, content-free, off its
    topic, repetition, disguised words) or copies the prompt's instructions back meets nothing.
    Tasks are generated (seeded, eval split held out by content) or read from an IFEval-format
    file (``path=``; ``unsupported`` counts the instruction ids without a checker).
    """

    name = "instruct"
    description = "verifiable instruction following (IFEval's 25 kinds): word counts, keywords, JSON, bullets, ..."
    quick = True  # pure Python checks (language detection aside)
    # ludus check --redteam plays the generic answer cheats (empty replies, the reference between
    # its own words reversed and another task's reply, enormous replies) and ``cheats`` below.
    redteam_kinds: ClassVar[frozenset[str]] = frozenset({"answer"})
    client_task_info: ClassVar[Mapping[str, JsonTypes] | None] = {
        "family": str,
        "request": str,
        "topic": str,
        "instruction_ids": list,
        "unsupported": list,
    }
    client_task_answer: ClassVar[JsonTypes] = dict

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
        min_own_words: int = MIN_OWN_WORDS,
    ):
        super().__init__(tasks)
        self.family = InstructFamily(min_constraints, max_constraints, kinds)
        self.seed, self.eval_fraction, self.loose, self.partial_credit = seed, eval_fraction, loose, partial_credit
        self.min_own_words = min_own_words
        self.unsupported: Counter[str] = Counter()
        self.files = split_files(path, eval_path, lambda p: load_ifeval(p, self.unsupported), eval_fraction)

    def default_tasks(self, split: Split = "train") -> TaskSource:
        if split in self.files:
            return self.files[split]()
        return ProceduralTasks(self.family, seed=self.seed, split=split, eval_fraction=self.eval_fraction)

    def reference(self, task: Task) -> str | None:
        answer = task.answer if isinstance(task.answer, Mapping) else {}
        return answer.get("reference")

    def client_task(self, data: Any) -> Task:
        """A client's task, its constraints few, small and of known kinds: they are checked on the
        server's event loop (``quick``), where a task of thousands would stall every session."""
        task = super().client_task(data)
        constraints = task.answer.get("constraints") if isinstance(task.answer, Mapping) else None
        if not isinstance(constraints, list) or not 1 <= len(constraints) <= MAX_CLIENT_CONSTRAINTS:
            raise ValueError(f"task.answer['constraints'] must be a list of 1 to {MAX_CLIENT_CONSTRAINTS} constraints")
        for c in constraints:
            if not isinstance(c, dict) or c.get("kind") not in CHECKERS:
                raise ValueError(f"a constraint is an object whose 'kind' is one of {', '.join(CHECKERS)}")
            for key, value in c.items():
                if key in COUNTS:
                    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_CLIENT_COUNT:
                        raise ValueError(
                            f"constraint {c['kind']}: {key} must be a whole number from 0 to {MAX_CLIENT_COUNT}"
                        )
                elif not isinstance(value, str | None) and not (
                    isinstance(value, list) and all(isinstance(v, str) for v in value)
                ):
                    raise ValueError(f"constraint {c['kind']}: {key} must be text or a list of text")
            try:
                check(c, "a reply to try the constraint on")
            except Exception as exc:  # noqa: BLE001 - what the checker cannot read, the client is told
                raise ValueError(
                    f"constraint {c['kind']} cannot be checked: {type(exc).__name__}: {exc}"[:300]
                ) from None
        if len(json.dumps(constraints)) > MAX_CLIENT_CONSTRAINT_CHARS:
            raise ValueError(f"task.answer['constraints'] is over {MAX_CLIENT_CONSTRAINT_CHARS} characters of JSON")
        return task

    def rubric(self, task: Task) -> Rubric:
        """``substance`` and ``no_echo`` (weight 0, the gates), then one criterion per constraint,
        named by its kind."""
        gate = partial(substance, min_own_words=self.min_own_words)
        criteria = [Criterion("substance", gate, weight=0.0), Criterion("no_echo", no_echo, 0.0, "substance")]
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
        """Replies that must earn nothing (:func:`.cheats.cheats`): content-free replies, the prompt
        copied back plainly and in Unicode disguises, constraints broken where only code cannot
        see it, and the reference with each constraint broken."""
        return {name: [Message("assistant", text)] for name, text in cheats(task, self.reference(task)).items()}
