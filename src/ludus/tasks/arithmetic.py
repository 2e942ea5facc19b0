"""Arithmetic: ``a op b`` with operands of a given number of digits."""

from __future__ import annotations

import random
from dataclasses import dataclass

from ludus.tasks.procedural import Problem, TaskFamily

# difficulty -> (digits per operand, operators)
LEVELS: dict[int, tuple[int, str]] = {
    1: (1, "+"),
    2: (2, "+"),
    3: (2, "+-"),
    4: (3, "+-"),
    5: (2, "+-*"),
    6: (3, "+-*"),
}


@dataclass
class Arithmetic(TaskFamily):
    """``digits``-digit operands joined by one of ``ops``; the prompt is ``"37+45="``.

    ``min_digits`` lets a source mix shorter operands in (a gentler curriculum); each operand's
    length is drawn uniformly from ``min_digits..digits``.
    """

    digits: int = 2
    ops: str = "+"
    min_digits: int | None = None

    name = "arithmetic"

    def __post_init__(self) -> None:
        if not 1 <= self.digits <= 18:
            raise ValueError(f"digits must be between 1 and 18, got {self.digits}")
        if not self.ops or set(self.ops) - set("+-*"):
            raise ValueError(f"ops must be a non-empty string of '+', '-', '*', got {self.ops!r}")
        if self.min_digits is not None and not 1 <= self.min_digits <= self.digits:
            raise ValueError(f"min_digits must be between 1 and digits ({self.digits}), got {self.min_digits}")

    @classmethod
    def at_level(cls, difficulty: int) -> Arithmetic:
        if difficulty not in LEVELS:
            raise ValueError(f"arithmetic difficulty must be one of {sorted(LEVELS)}, got {difficulty}")
        digits, ops = LEVELS[difficulty]
        return cls(digits=digits, ops=ops)

    def _operand(self, rng: random.Random) -> int:
        n = rng.randint(self.min_digits or self.digits, self.digits)
        return rng.randint(0 if n == 1 else 10 ** (n - 1), 10**n - 1)

    def make(self, rng: random.Random) -> Problem:
        a, b, op = self._operand(rng), self._operand(rng), rng.choice(self.ops)
        value = {"+": a + b, "-": a - b, "*": a * b}[op]
        return Problem(prompt=f"{a}{op}{b}=", answer=value, info={})
