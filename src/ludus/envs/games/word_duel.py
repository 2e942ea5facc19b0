"""Word duel: a two-player Wordle race. Each player has a secret five-letter word from a fixed
list of 100; the players take turns guessing the other's word (any listed word not guessed
before) and see Wordle feedback for it: ``G`` the right letter in the right place, ``Y`` a letter
of the word elsewhere, ``-`` not (or no more) in it, repeated letters counted as Wordle counts them.
The first to guess the other's word wins; when both have used ``max_guesses`` guesses, a draw.

The random player guesses any word not tried yet; the greedy player a random word consistent with
all its feedback so far; the perfect player the listed word that leaves the fewest candidates in
the worst case (a one-step minimax, candidates preferred on ties)."""

from __future__ import annotations

import random
import re
from collections import Counter
from functools import lru_cache
from typing import Any

from ludus.envs.games.base import DRAW, Game, GameEnv, whole

WORDS = tuple(
    """
    about above actor acute admit adopt adult after agent alarm album alert alike alive allow alone along
    alter among angle angry apart apple apply arena argue arise aside asset audio avoid award aware badly
    baker basic beach began begin being below bench birth black blade blame blind block blood board boost
    booth bound brain brand bread break breed brief bring broad brown build built buyer cable candy carry
    catch cause chain chair chart chase cheap check chest chief child china claim class clean clear climb
    clock close cloud coach coast could count court cover craft crane crash cream crime cross crowd crown
    """.split()
)
State = tuple[tuple[str, str], tuple[str, ...], tuple[str, ...], int]  # secrets, guesses of seat 0 and 1, to move


@lru_cache(maxsize=1 << 16)
def feedback(guess: str, secret: str) -> str:
    """Wordle's feedback: greens first, then yellows while the secret has that letter left."""
    marks = ["-"] * 5
    left = Counter(s for g, s in zip(guess, secret, strict=True) if g != s)
    for i, (g, s) in enumerate(zip(guess, secret, strict=True)):
        if g == s:
            marks[i] = "G"
        elif left[g] > 0:
            marks[i] = "Y"
            left[g] -= 1
    return "".join(marks)


class WordDuel(Game):
    name = "word-duel"
    move_help = "<move>WORD</move> with WORD one of the listed words you have not guessed yet"

    def __init__(self, max_guesses: int = 8):
        self.max_guesses = max_guesses = whole("max_guesses", max_guesses, 1, 30)
        self.rules = (
            "Rules (a two-player Wordle race): each player has a secret word; the players take turns guessing the "
            "other's word. A guess must be one of the listed words that you have not guessed before. After each "
            "guess its feedback is shown, one mark per letter: G the right letter in the right place, Y in the "
            "word but elsewhere, - not in the word (a repeated letter is marked only as often as the word has it). "
            f"The first to guess the other's word wins; after {max_guesses} guesses each, the game is a draw.\n"
            "The words: " + " ".join(WORDS)
        )

    def initial(self, rng: random.Random) -> State:
        a, b = rng.sample(WORDS, 2)
        return (a, b), (), (), 0

    def to_move(self, state: State) -> int:
        return state[3]

    def legal(self, state: State) -> list[str]:
        if self.returns(state) is not None:
            return []
        tried = state[1 + state[3]]
        return [w for w in WORDS if w not in tried]

    def apply(self, state: State, move: str) -> State:
        seat = state[3]
        guesses = list(state[1:3])
        guesses[seat] = guesses[seat] + (move,)
        return state[0], guesses[0], guesses[1], 1 - seat

    def returns(self, state: State) -> tuple[float, float] | None:
        secrets, g0, g1, _ = state
        if secrets[1] in g0:
            return 1.0, 0.0
        if secrets[0] in g1:
            return 0.0, 1.0
        if len(g0) >= self.max_guesses and len(g1) >= self.max_guesses:
            return DRAW, DRAW
        return None

    def render(self, state: State, seat: int) -> str:
        secrets = state[0]
        mine, theirs = state[1 + seat], state[2 - seat]
        lines = [f"Your secret word (the opponent is guessing it): {secrets[seat]}."]
        lines.append("Your guesses at the opponent's word: " + (", ".join(f"{g} {feedback(g, secrets[1 - seat])}"
                                                                       for g in mine) or "none yet") + ".")  # fmt: skip
        lines.append("The opponent's guesses at your word: " + (", ".join(f"{g} {feedback(g, secrets[seat])}"
                                                                        for g in theirs) or "none yet") + ".")  # fmt: skip
        lines.append(f"Guesses used: you {len(mine)} of {self.max_guesses}, the opponent {len(theirs)}.")
        return "\n".join(lines)

    def parse(self, text: str) -> str | None:
        word = text.lower()
        return word if re.fullmatch(r"[a-z]{5}", word) else None

    def outcome_note(self, before: State, move: str, after: State, seat: int) -> str:
        if before[3] != seat:
            return ""
        return f"Your guess {move}: {feedback(move, before[0][1 - seat])}."

    def describe(self, state: State, move: str) -> str:
        return f"the guess {move} ({feedback(move, state[0][1 - state[3]])})"

    def candidates(self, state: State) -> list[str]:
        """The words the player to move may still face, by its feedback so far."""
        seat = state[3]
        secret = state[0][1 - seat]
        seen = [(g, feedback(g, secret)) for g in state[1 + seat]]
        return [w for w in WORDS if all(feedback(g, w) == f for g, f in seen) and w not in state[1 + seat]]

    def oracle_order(self, state: State, seat: int) -> list[str]:
        secret = state[0][1 - seat]
        return [secret] + [w for w in self.legal(state) if w != secret]

    # ---- scripted players ---------------------------------------------------------------------
    def greedy_player(self, state: State, rng: random.Random) -> str:
        """A random word consistent with all its feedback so far."""
        return rng.choice(self.candidates(state) or self.legal(state))

    def perfect_player(self, state: State, rng: random.Random) -> str:
        """The word that leaves the fewest candidates in the worst case; candidates first on ties."""
        candidates = self.candidates(state)
        if len(candidates) <= 2:
            return rng.choice(candidates or self.legal(state))
        pool = set(candidates)
        scored = []
        for guess in self.legal(state):
            worst = max(Counter(feedback(guess, w) for w in candidates).values())
            scored.append((worst, guess not in pool, guess))
        best = min(scored)[:2]
        return rng.choice([g for w, c, g in scored if (w, c) == best])


class WordDuelEnv(GameEnv):
    """A two-player Wordle race against a scripted guesser; ``max_guesses`` each."""

    name = "word-duel"
    description = "two-player Wordle race against a scripted guesser (random, greedy, minimax); <move>WORD</move>"

    def __init__(self, tasks: Any = None, *, max_guesses: int = 8, **kwargs: Any):
        game = WordDuel(max_guesses)
        self.max_guesses = game.max_guesses
        super().__init__(tasks, game=game, **kwargs)

    def params(self) -> str:
        return f"{super().params()},max_guesses={self.max_guesses}"

    def max_policy_moves(self) -> int:
        return self.max_guesses

    def illegal_example(self, state: State) -> str | None:
        return "zzzzz"
