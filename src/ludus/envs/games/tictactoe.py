"""Tic-tac-toe on a 3×3 board: squares 1-9, X moves first; three in a row wins, a full board
without one is a draw. The perfect player is an exact negamax with a memo."""

from __future__ import annotations

import random
import re
from typing import Any

from ludus.envs.games.base import DRAW, Game, GameEnv, Solver

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
Board = tuple[str, ...]  # nine of "X", "O", "."


class TicTacToe(Game):
    name = "tic-tac-toe"
    seat_names = ("first player (X)", "second player (O)")
    rules = (
        "Rules: a 3x3 board with squares numbered 1-9, row by row from the top left. X moves first, then the "
        "players alternate, each marking one empty square. Three of your marks in a row, a column or a "
        "diagonal wins; a full board without a line is a draw."
    )
    move_help = "<move>N</move> with N the number (1-9) of an empty square"

    def __init__(self) -> None:
        self.solver = Solver(self)

    def initial(self, rng: random.Random) -> Board:
        return tuple("." * 9)

    def to_move(self, state: Board) -> int:
        return 0 if state.count("X") == state.count("O") else 1

    def legal(self, state: Board) -> list[str]:
        if self.winner(state) is not None:
            return []
        return [str(i + 1) for i, c in enumerate(state) if c == "."]

    def apply(self, state: Board, move: str) -> Board:
        i = int(move) - 1
        return state[:i] + ("XO"[self.to_move(state)],) + state[i + 1 :]

    @staticmethod
    def winner(state: Board) -> int | None:
        for a, b, c in LINES:
            if state[a] != "." and state[a] == state[b] == state[c]:
                return "XO".index(state[a])
        return None

    def returns(self, state: Board) -> tuple[float, float] | None:
        won = self.winner(state)
        if won is not None:
            return (1.0, 0.0) if won == 0 else (0.0, 1.0)
        if "." not in state:
            return (DRAW, DRAW)
        return None

    def render(self, state: Board, seat: int) -> str:
        rows = [" ".join(state[c] if state[c] != "." else str(c + 1) for c in range(r, r + 3)) for r in (0, 3, 6)]
        mark = "XO"[seat]
        return "Board (numbers are empty squares):\n" + "\n".join(rows) + f"\nYou are {mark}."

    def parse(self, text: str) -> str | None:
        return text if re.fullmatch(r"[1-9]", text) else None

    def describe(self, state: Board, move: str) -> str:
        return f"{'XO'[self.to_move(state)]} on square {move}"

    def perfect_player(self, state: Board, rng: random.Random) -> str:
        """Exact negamax with a memo; a random one of the best moves, those that leave the fewest
        wins in one first: in a lost position every move has the same value, and without this it
        would stop blocking and play like the random player."""
        best = self.solver.best_moves(state)
        threats = {move: self.wins_in_one(self.apply(state, move)) for move in best}
        fewest = min(threats.values())
        return rng.choice([move for move in best if threats[move] == fewest])

    def wins_in_one(self, state: Board) -> int:
        """How many moves win at once for the player to move."""
        if self.returns(state) is not None:
            return 0
        me = self.to_move(state)
        return sum((self.returns(self.apply(state, move)) or (0.0, 0.0))[me] == 1.0 for move in self.legal(state))


class TicTacToeEnv(GameEnv):
    """Tic-tac-toe against a scripted player (``opponent``: random, greedy, perfect)."""

    name = "tictactoe"
    description = "tic-tac-toe against a scripted player (random, greedy, perfect negamax); moves as <move>N</move>"
    default_opening = 2

    def __init__(self, tasks: Any = None, **kwargs: Any):
        super().__init__(tasks, game=TicTacToe(), **kwargs)

    def max_policy_moves(self) -> int:
        return 5

    def illegal_example(self, state: Board) -> str | None:
        taken = [str(i + 1) for i, c in enumerate(state) if c != "."]
        return taken[0] if taken else None
