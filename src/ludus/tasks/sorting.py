"""Sorting: apply one list operation (sort, reverse, deduplicate) to a list of integers."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from ludus.tasks.procedural import Problem, TaskFamily

OPS: dict[str, Callable[[list[int]], list[int]]] = {
    "asc": sorted,
    "desc": lambda xs: sorted(xs, reverse=True),
    "reverse": lambda xs: xs[::-1],
    "dedupe": lambda xs: list(dict.fromkeys(xs)),  # first occurrence of each value, in order
}
_PROMPTS = {"asc": "sort asc", "desc": "sort desc", "reverse": "reverse", "dedupe": "remove duplicates, keep order"}

# difficulty -> (list length, smallest value, largest value, operations)
LEVELS: dict[int, tuple[int, int, int, tuple[str, ...]]] = {
    1: (3, 0, 9, ("asc", "desc")),
    2: (5, 0, 9, ("asc", "desc", "reverse")),
    3: (6, 0, 99, ("asc", "desc", "reverse", "dedupe")),
    4: (8, 0, 99, ("asc", "desc", "reverse", "dedupe")),
    5: (10, -99, 99, ("asc", "desc", "reverse", "dedupe")),
    6: (16, -999, 999, ("asc", "desc", "reverse", "dedupe")),
}


@dataclass
class Sorting(TaskFamily):
    """A list of ``length`` integers in ``low..high`` and one of ``ops``; the prompt is ``"sort asc: 5 2 9 1"``.

    ``ops`` is a tuple of names from :data:`OPS` (a comma-separated string is accepted too,
    for command lines). The answer is the resulting list.
    """

    length: int = 5
    low: int = 0
    high: int = 9
    ops: tuple[str, ...] = ("asc", "desc", "reverse", "dedupe")

    name = "sorting"

    def __post_init__(self) -> None:
        if isinstance(self.ops, str):
            self.ops = tuple(op.strip() for op in self.ops.split(","))
        self.ops = tuple(self.ops)
        if not 2 <= self.length <= 1000:
            raise ValueError(f"length must be between 2 and 1000, got {self.length}")
        if self.low >= self.high:
            raise ValueError(f"low must be smaller than high, got low={self.low}, high={self.high}")
        unknown = [op for op in self.ops if op not in OPS]
        if not self.ops or unknown:
            raise ValueError(f"ops must be a non-empty selection of {sorted(OPS)}, got {self.ops!r}")

    @classmethod
    def at_level(cls, difficulty: int) -> Sorting:
        if difficulty not in LEVELS:
            raise ValueError(f"sorting difficulty must be one of {sorted(LEVELS)}, got {difficulty}")
        length, low, high, ops = LEVELS[difficulty]
        return cls(length=length, low=low, high=high, ops=ops)

    def make(self, rng: random.Random) -> Problem:
        op = rng.choice(self.ops)
        values = [rng.randint(self.low, self.high) for _ in range(self.length)]
        if op == "dedupe" and len(set(values)) == len(values):  # make sure there is something to remove
            i, j = rng.sample(range(self.length), 2)
            values[j] = values[i]
        shown = " ".join(map(str, values))
        return Problem(prompt=f"{_PROMPTS[op]}: {shown}", answer=OPS[op](values), info={"op": op})
