"""Countdown: combine the given numbers with ``+ - * /`` to reach a target.

Every instance is solvable by construction: the target is the value of a random expression
tree over all the numbers, whose intermediate values are positive integers.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ludus.tasks.procedural import MAX_TRIES, Problem, TaskFamily

# difficulty -> (how many numbers, largest number, operators the reference solution uses)
LEVELS: dict[int, tuple[int, int, str]] = {
    1: (3, 10, "+-"),
    2: (3, 10, "+-*"),
    3: (4, 25, "+-*"),
    4: (4, 25, "+-*/"),
    5: (5, 50, "+-*/"),
    6: (6, 100, "+-*/"),
}

_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}
_ATOM = 3


@dataclass(frozen=True)
class _Expr:
    value: int
    text: str
    precedence: int


def _combine(a: _Expr, b: _Expr, op: str) -> _Expr | None:
    """``a op b`` (operands swapped where that makes it valid), or None when no positive integer results."""
    if op in "-/" and a.value < b.value:
        a, b = b, a
    if op == "+":
        value = a.value + b.value
    elif op == "*":
        value = a.value * b.value
    elif op == "-":
        value = a.value - b.value
    elif b.value > 1 and a.value % b.value == 0:
        value = a.value // b.value
    else:
        return None
    if value <= 0:
        return None
    prec = _PRECEDENCE[op]
    left = a.text if a.precedence >= prec else f"({a.text})"
    # a-(b+c) and a/(b*c) keep their parentheses; a+(b-c) and a*(b/c) do not need them.
    right = b.text if b.precedence > prec or (b.precedence == prec and op in "+*") else f"({b.text})"
    return _Expr(value, f"{left}{op}{right}", prec)


@dataclass
class Countdown(TaskFamily):
    """``count`` numbers from 1..``max_number`` and a target up to ``max_target``.

    ``ops`` are the operators the hidden reference solution is built from (fewer operators
    give easier targets); the model may always use all four.
    """

    count: int = 4
    max_number: int = 25
    ops: str = "+-*/"
    max_target: int = 1000

    name = "countdown"

    def __post_init__(self) -> None:
        if not 3 <= self.count <= 6:
            raise ValueError(f"count must be between 3 and 6, got {self.count}")
        if not 2 <= self.max_number <= 1000:
            raise ValueError(f"max_number must be between 2 and 1000, got {self.max_number}")
        if not self.ops or set(self.ops) - set("+-*/"):
            raise ValueError(f"ops must be a non-empty string of '+', '-', '*', '/', got {self.ops!r}")
        if self.max_target < 10:
            raise ValueError(f"max_target must be at least 10, got {self.max_target}")

    @classmethod
    def at_level(cls, difficulty: int) -> Countdown:
        if difficulty not in LEVELS:
            raise ValueError(f"countdown difficulty must be one of {sorted(LEVELS)}, got {difficulty}")
        count, max_number, ops = LEVELS[difficulty]
        return cls(count=count, max_number=max_number, ops=ops)

    def _reference(self, rng: random.Random, numbers: list[int]) -> _Expr | None:
        """A random expression tree over all ``numbers``, or None if this draw found no valid one."""
        nodes = [_Expr(n, str(n), _ATOM) for n in numbers]
        while len(nodes) > 1:
            i, j = rng.sample(range(len(nodes)), 2)
            for op in rng.sample(self.ops, len(self.ops)):
                combined = _combine(nodes[i], nodes[j], op)
                if combined is not None:
                    break
            else:
                return None
            nodes = [n for k, n in enumerate(nodes) if k not in (i, j)] + [combined]
        return nodes[0]

    def make(self, rng: random.Random) -> Problem:
        for _ in range(MAX_TRIES):
            numbers = sorted(rng.randint(1, self.max_number) for _ in range(self.count))
            ref = self._reference(rng, numbers)
            if ref is not None and ref.value <= self.max_target and ref.value not in numbers:
                shown = " ".join(map(str, numbers))
                return Problem(
                    prompt=f"Use {shown} to make {ref.value} (+ - * /, each number at most once)",
                    answer=ref.text,
                    info={"numbers": numbers, "target": ref.value},
                )
        raise RuntimeError(f"countdown ({self.params()}) found no instance in {MAX_TRIES} tries; raise max_target")
