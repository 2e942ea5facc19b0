"""Nim, normal play: heaps of objects; a move takes one or more objects from one heap; whoever
takes the last object wins. The perfect player is an exact negamax with a memo (it agrees with
the nim-sum rule: a position is lost for the player to move exactly when the heaps' XOR is 0)."""

from __future__ import annotations

import random
import re
from typing import Any

from ludus.envs.games.base import Game, GameEnv, Solver, whole

Heaps = tuple[tuple[int, ...], int]  # (the heaps, the seat to move)


class Nim(Game):
    name = "nim"
    move_help = "<move>H N</move>: take N objects from heap H (heaps numbered from 1)"

    def __init__(self, heaps: int = 3, max_heap: int = 7):
        heaps, max_heap = whole("heaps", heaps, 1, 6), whole("max_heap", max_heap, 1, 15)
        self.heaps, self.max_heap = heaps, max_heap
        self.solver = Solver(self)
        self.rules = (
            f"Rules: {heaps} heap(s) of objects. The players alternate; a move takes one or more objects from "
            "a single heap. Whoever takes the last object wins."
        )

    def initial(self, rng: random.Random) -> Heaps:
        return tuple(rng.randint(1, self.max_heap) for _ in range(self.heaps)), 0

    def to_move(self, state: Heaps) -> int:
        return state[1]

    def legal(self, state: Heaps) -> list[str]:
        return [f"{h + 1} {n}" for h, size in enumerate(state[0]) for n in range(1, size + 1)]

    def apply(self, state: Heaps, move: str) -> Heaps:
        h, n = (int(x) for x in move.split())
        heaps = list(state[0])
        heaps[h - 1] -= n
        return tuple(heaps), 1 - state[1]

    def returns(self, state: Heaps) -> tuple[float, float] | None:
        if any(state[0]):
            return None
        return (1.0, 0.0) if state[1] == 1 else (0.0, 1.0)  # the seat that just moved took the last one

    def render(self, state: Heaps, seat: int) -> str:
        heaps = ", ".join(f"heap {i + 1}: {n}" for i, n in enumerate(state[0]))
        return f"Heaps: {heaps}."

    def parse(self, text: str) -> str | None:
        m = re.fullmatch(r"([1-9]) +([1-9][0-9]?)", text)
        return None if m is None else f"{int(m.group(1))} {int(m.group(2))}"

    def describe(self, state: Heaps, move: str) -> str:
        h, n = move.split()
        return f"{move} (takes {n} from heap {h})"

    def perfect_player(self, state: Heaps, rng: random.Random) -> str:
        """Exact negamax with a memo; a random one of the best moves."""
        return rng.choice(self.solver.best_moves(state))


class NimEnv(GameEnv):
    """Nim against a scripted player; ``heaps`` and ``max_heap`` set the size."""

    name = "nim"
    description = "nim (take from one heap, last object wins) against a scripted player; moves as <move>H N</move>"

    def __init__(self, tasks: Any = None, *, heaps: int = 3, max_heap: int = 7, **kwargs: Any):
        game = Nim(heaps, max_heap)
        self.heaps, self.max_heap = game.heaps, game.max_heap
        super().__init__(tasks, game=game, **kwargs)

    def params(self) -> str:
        return f"{super().params()},heaps={self.heaps},max_heap={self.max_heap}"

    def max_policy_moves(self) -> int:
        return (self.heaps * self.max_heap + 1) // 2 + 1

    def illegal_example(self, state: Heaps) -> str | None:
        h = max(range(len(state[0])), key=lambda i: state[0][i])
        return f"{h + 1} {state[0][h] + 1}"
