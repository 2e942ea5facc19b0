"""Seeded procedural task generators with a difficulty knob.

Task ``i`` of a source is built from ``random.Random(f"{family}:{params}:{seed}:{split}:{i}")``,
so it is the same on every machine and Python run. Train and eval splits are disjoint *by
content*: a problem belongs to the eval split when a hash of its prompt falls in the eval
bucket (``eval_fraction`` of all problems), and the train split never yields it. Held-out
accuracy is therefore measured on problems the policy never trained on.
"""

from __future__ import annotations

import hashlib
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from ludus.core.env import Split
from ludus.core.types import Task

MAX_TRIES = 10_000


@dataclass(frozen=True)
class Problem:
    prompt: str
    answer: Any
    info: dict[str, Any]


class TaskFamily(ABC):
    """A kind of procedural problem. Grading lives with the environment (``ludus.envs``)."""

    name: ClassVar[str]

    @abstractmethod
    def make(self, rng: random.Random) -> Problem:
        """Build one problem; all randomness must come from ``rng``."""

    def params(self) -> str:
        """The parameters that change what ``make`` produces, as part of the seed string."""
        return ",".join(f"{k}={v}" for k, v in sorted(vars(self).items()))


def seed_tag(seed: int) -> str:
    """The seed as a task id names it: a digest, not the seed. Ids reach clients that must not
    rebuild the tasks (an env server's public task view); the same seed still gives the same ids."""
    return "s" + hashlib.sha256(f"ludus-seed:{seed}".encode()).hexdigest()[:12]


def in_eval_bucket(prompt: str, eval_fraction: float) -> bool:
    digest = hashlib.sha256(prompt.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < eval_fraction


def check_split(split: str, eval_fraction: float) -> None:
    """The split and eval fraction of a seeded task source, or ``ValueError`` saying what is allowed."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    if not 0.0 < eval_fraction < 1.0:
        raise ValueError(f"eval_fraction must be strictly between 0 and 1, got {eval_fraction}")


class ProceduralTasks:
    """An endless, deterministic :class:`~ludus.core.env.TaskSource` over one family."""

    size: int | None = None

    def __init__(self, family: TaskFamily, seed: int = 0, split: Split = "train", eval_fraction: float = 0.1):
        check_split(split, eval_fraction)
        self.family, self.seed, self.split, self.eval_fraction = family, seed, split, eval_fraction

    def get(self, index: int) -> Task:
        rng = random.Random(f"{self.family.name}:{self.family.params()}:{self.seed}:{self.split}:{index}")
        want_eval = self.split == "eval"
        for _ in range(MAX_TRIES):
            p = self.family.make(rng)
            if in_eval_bucket(p.prompt, self.eval_fraction) == want_eval:
                info = {"family": self.family.name, **p.info}
                return Task(
                    id=f"{self.family.name}/{self.split}/{seed_tag(self.seed)}/{index}",
                    prompt=p.prompt,
                    answer=p.answer,
                    info=info,
                    source=self.family.name,
                )
        raise RuntimeError(
            f"{self.family.name} ({self.family.params()}) produced no {self.split} problem in {MAX_TRIES} tries; "
            "its problem space is too small for this eval_fraction"
        )
