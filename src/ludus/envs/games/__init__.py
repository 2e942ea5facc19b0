"""Two-player text games (docs/games.md): the policy plays one seat, a scripted player of known
strength (random, greedy, perfect) the other. Each game is a pure :class:`Game` state machine
(:mod:`.base`), wrapped by :class:`GameEnv`."""

from ludus.envs.games.base import Game, GameEnv, Solver, read_move
from ludus.envs.games.connect_four import ConnectFour, ConnectFourEnv
from ludus.envs.games.kuhn_poker import KuhnPoker, KuhnPokerEnv
from ludus.envs.games.nim import Nim, NimEnv
from ludus.envs.games.tictactoe import TicTacToe, TicTacToeEnv
from ludus.envs.games.word_duel import WordDuel, WordDuelEnv

__all__ = [
    "ConnectFour",
    "ConnectFourEnv",
    "Game",
    "GameEnv",
    "KuhnPoker",
    "KuhnPokerEnv",
    "Nim",
    "NimEnv",
    "Solver",
    "TicTacToe",
    "TicTacToeEnv",
    "WordDuel",
    "WordDuelEnv",
    "read_move",
]
