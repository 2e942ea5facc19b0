"""Connect four: ``cols`` columns of ``rows`` cells (default 7×6); a move drops a disc into a
column that is not full, where it falls to the lowest empty cell; four of a player's discs in a
row, a column or a diagonal win; a full board without a line is a draw. The perfect player is a
depth-limited negamax with alpha-beta pruning (``depth`` plies, default 4) and a heuristic at the
horizon: open windows of four with two or three of one's own discs."""

from __future__ import annotations

import random
import re
from functools import cache
from typing import Any

from ludus.envs.games.base import DRAW, WIN, Game, GameEnv, Setup, whole

# a state: (discs of seat 0, discs of seat 1, heights per column, seat to move); bitboards with
# column c occupying bits c*(rows+1) .. c*(rows+1)+rows-1 (one spare bit per column)
Board = tuple[int, int, tuple[int, ...], int]
BIG = 1_000_000


@cache
def _windows(rows: int, cols: int) -> tuple[int, ...]:
    h1 = rows + 1
    out = []
    for c in range(cols):
        for r in range(rows):
            for dc, dr in ((1, 0), (0, 1), (1, 1), (1, -1)):
                cells = [(c + k * dc, r + k * dr) for k in range(4)]
                if all(0 <= cc < cols and 0 <= rr < rows for cc, rr in cells):
                    out.append(sum(1 << (cc * h1 + rr) for cc, rr in cells))
    return tuple(out)


class ConnectFour(Game):
    name = "connect-four"
    seat_names = ("first player (X)", "second player (O)")

    def __init__(self, rows: int = 6, cols: int = 7, depth: int = 4):
        # whole numbers: a depth of 2.5 would never reach the horizon and search the whole game
        rows, cols, depth = whole("rows", rows, 4, 8), whole("cols", cols, 4, 9), whole("depth", depth, 1, 8)
        self.rows, self.cols, self.depth = rows, cols, depth
        self.h1 = rows + 1
        self.windows = _windows(rows, cols)
        self.order = sorted(range(cols), key=lambda c: (abs(2 * c - (cols - 1)), c))  # the centre first
        self.rules = (
            f"Rules: a board of {cols} columns (numbered 1-{cols} from the left) and {rows} rows. X moves first, "
            "then the players alternate; a move drops a disc into a column that is not full, where it falls to "
            "the lowest empty cell. Four of your discs in a row, a column or a diagonal win; a full board "
            "without a line is a draw."
        )
        self.move_help = f"<move>C</move> with C the number (1-{cols}) of a column that is not full"

    def initial(self, rng: random.Random) -> Board:
        return 0, 0, (0,) * self.cols, 0

    def to_move(self, state: Board) -> int:
        return state[3]

    def _won(self, b: int) -> bool:
        for s in (1, self.h1, self.h1 - 1, self.h1 + 1):
            m = b & (b >> s)
            if m & (m >> (2 * s)):
                return True
        return False

    def legal(self, state: Board) -> list[str]:
        if self._won(state[0]) or self._won(state[1]):
            return []
        return [str(c + 1) for c in range(self.cols) if state[2][c] < self.rows]

    def apply(self, state: Board, move: str) -> Board:
        c = int(move) - 1
        heights = state[2]
        bit = 1 << (c * self.h1 + heights[c])
        boards = [state[0], state[1]]
        boards[state[3]] |= bit
        return boards[0], boards[1], heights[:c] + (heights[c] + 1,) + heights[c + 1 :], 1 - state[3]

    def returns(self, state: Board) -> tuple[float, float] | None:
        if self._won(state[0]):
            return 1.0, 0.0
        if self._won(state[1]):
            return 0.0, 1.0
        if all(h == self.rows for h in state[2]):
            return DRAW, DRAW
        return None

    def render(self, state: Board, seat: int) -> str:
        lines = []
        for r in range(self.rows - 1, -1, -1):
            cells = []
            for c in range(self.cols):
                bit = 1 << (c * self.h1 + r)
                cells.append("X" if state[0] & bit else "O" if state[1] & bit else ".")
            lines.append(" ".join(cells))
        lines.append(" ".join(str(c + 1) for c in range(self.cols)))
        return "Board (bottom row last, column numbers below):\n" + "\n".join(lines) + f"\nYou are {'XO'[seat]}."

    def parse(self, text: str) -> str | None:
        return text if re.fullmatch(r"[1-9]", text) and int(text) <= self.cols else None

    def describe(self, state: Board, move: str) -> str:
        return f"{'XO'[state[3]]} in column {move}"

    # ---- search -------------------------------------------------------------------------------
    def heuristic(self, mine: int, theirs: int) -> int:
        score = 0
        for w in self.windows:
            a, b = mine & w, theirs & w
            if a and not b:
                n = a.bit_count()
                score += 1 if n == 1 else 4 if n == 2 else 16
            elif b and not a:
                n = b.bit_count()
                score -= 1 if n == 1 else 4 if n == 2 else 16
        return score

    def negamax(self, state: Board, depth: int, alpha: int, beta: int) -> int:
        me = state[3]
        if self._won(state[1 - me]):
            return -BIG - depth  # the previous move won: sooner is worse for the side to move
        if all(h == self.rows for h in state[2]):
            return 0
        if depth == 0:
            return self.heuristic(state[me], state[1 - me])
        best = -BIG * 2
        for c in self.order:
            if state[2][c] < self.rows:
                value = -self.negamax(self.apply(state, str(c + 1)), depth - 1, -beta, -alpha)
                if value > best:
                    best = value
                if best > alpha:
                    alpha = best
                if alpha >= beta:
                    break
        return best

    def search_moves(self, state: Board, depth: int) -> list[str]:
        """The best moves by a ``depth``-ply negamax, each scored with a full window."""
        scored = []
        for c in self.order:
            if state[2][c] < self.rows:
                move = str(c + 1)
                scored.append((-self.negamax(self.apply(state, move), depth - 1, -BIG * 2, BIG * 2), move))
        top = max(v for v, _ in scored)
        return [m for v, m in scored if v == top]

    def perfect_player(self, state: Board, rng: random.Random) -> str:
        """Depth-limited negamax (``depth`` plies, alpha-beta); a random one of the best moves."""
        return rng.choice(self.search_moves(state, self.depth))


class ConnectFourEnv(GameEnv):
    """Connect four against a scripted player; ``rows``, ``cols`` and the searcher's ``depth``."""

    name = "connect-four"
    description = "connect four against a scripted player (random, greedy, depth-limited negamax); <move>C</move>"
    default_opening = 2

    def __init__(self, tasks: Any = None, *, rows: int = 6, cols: int = 7, depth: int = 4, **kwargs: Any):
        game = ConnectFour(rows, cols, depth)
        self.rows, self.cols, self.depth = game.rows, game.cols, game.depth
        super().__init__(tasks, game=game, **kwargs)

    def params(self) -> str:
        return f"{super().params()},rows={self.rows},cols={self.cols},depth={self.depth}"

    def max_policy_moves(self) -> int:
        return (self.rows * self.cols + 1) // 2

    def find_win(self, setup: Setup) -> tuple[str, ...] | None:
        """Too big to search whole: the oracle plays a deeper negamax than the opponent's against
        the (deterministic) opponent and keeps the line when it wins; a few depths are tried."""
        game: ConnectFour = self.game  # type: ignore[assignment]
        for depth in dict.fromkeys((min(game.depth + 1, 6), 2, 3, 5)):
            state, _ = self.advance(setup, self.start_state(setup))
            line = []
            while game.returns(state) is None:
                move = game.search_moves(state, depth)[0]
                line.append(move)
                state, _ = self.advance(setup, game.apply(state, move))
            result = game.returns(state)
            if result is not None and result[setup.seat] == WIN:
                return tuple(line)
        return None

    def illegal_example(self, state: Board) -> str | None:
        return str(self.cols + 1) if self.cols < 9 else None
