"""Linear equations in one unknown with an integer solution: ``3x+5=20`` or ``3x+5=-2x+30``."""

from __future__ import annotations

import random
from dataclasses import dataclass

from ludus.tasks.procedural import Problem, TaskFamily

# difficulty -> (largest |coefficient|, largest |x|, largest |constant|, x on both sides, negatives)
LEVELS: dict[int, tuple[int, int, int, bool, bool]] = {
    1: (5, 10, 10, False, False),
    2: (9, 10, 20, False, True),
    3: (12, 20, 50, False, True),
    4: (9, 10, 20, True, True),
    5: (20, 50, 100, True, True),
    6: (50, 100, 500, True, True),
}


def _side(coef: int, const: int) -> str:
    """``3x+5``, ``-x-7``, ``2x``: the sign belongs to the number, never ``+-``."""
    text = {1: "x", -1: "-x"}.get(coef, f"{coef}x")
    return f"{text}{const:+d}" if const else text


@dataclass
class LinearEquation(TaskFamily):
    """``a*x + b = c``, or with ``both_sides`` ``a*x + b = d*x + e``; the answer is the integer x.

    Coefficients are non-zero with magnitude up to ``max_coef``; ``negatives=False`` keeps
    coefficients, the solution and the given constants non-negative (the gentlest level).
    """

    max_coef: int = 9
    max_x: int = 10
    max_const: int = 20
    both_sides: bool = False
    negatives: bool = True

    name = "linear-equation"

    def __post_init__(self) -> None:
        min_coef = 2 if self.both_sides and not self.negatives else 1  # needs two different coefficients
        if self.max_coef < min_coef:
            raise ValueError(f"max_coef must be at least {min_coef} here, got {self.max_coef}")
        if self.max_x < 1:
            raise ValueError(f"max_x must be at least 1, got {self.max_x}")
        if self.max_const < 0:
            raise ValueError(f"max_const must be non-negative, got {self.max_const}")

    @classmethod
    def at_level(cls, difficulty: int) -> LinearEquation:
        if difficulty not in LEVELS:
            raise ValueError(f"linear-equation difficulty must be one of {sorted(LEVELS)}, got {difficulty}")
        max_coef, max_x, max_const, both_sides, negatives = LEVELS[difficulty]
        return cls(max_coef, max_x, max_const, both_sides, negatives)

    def _coef(self, rng: random.Random) -> int:
        sign = rng.choice((1, -1)) if self.negatives else 1
        return sign * rng.randint(1, self.max_coef)

    def _value(self, rng: random.Random, bound: int) -> int:
        return rng.randint(-bound if self.negatives else 0, bound)

    def make(self, rng: random.Random) -> Problem:
        a, x, b = self._coef(rng), self._value(rng, self.max_x), self._value(rng, self.max_const)
        if not self.both_sides:
            return Problem(prompt=f"{_side(a, b)}={a * x + b}, x=?", answer=x, info={})
        d = self._coef(rng)
        while d == a:
            d = self._coef(rng)
        if not self.negatives and a < d:  # keeps e = (a-d)x + b non-negative
            a, d = d, a
        return Problem(prompt=f"{_side(a, b)}={_side(d, (a - d) * x + b)}, x=?", answer=x, info={})
