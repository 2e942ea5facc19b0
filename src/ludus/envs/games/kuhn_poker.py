"""Kuhn poker, a match of ``hands`` hands (default 5): a deck of three cards, J < Q < K. Each hand
both players ante 1 chip and get one card each, which the other does not see; the seats take
turns acting first. The first to act checks or bets 1; after a check the second checks (showdown
for the pot of 2) or bets 1; facing a bet a player calls (showdown for the pot of 4) or folds
(the bettor takes the pot). At the showdown the higher card takes the pot. Whoever is ahead in
chips after the last hand wins the match; even chips are a draw.

The perfect player plays a Nash equilibrium of one hand (Kuhn's family, with alpha = 1/3):
first to act, J bets 1/3 of the time, Q checks and calls a bet 2/3 of the time, K bets;
second to act, K bets or calls, Q checks or calls a bet 1/3 of the time, J bets 1/3 of the time
after a check and folds to a bet. The greedy player plays its card: K bets and calls, Q checks
and calls, J checks and folds."""

from __future__ import annotations

import random
import re
from typing import Any

from ludus.envs.games.base import Game, GameEnv, whole

CARDS = {1: "J", 2: "Q", 3: "K"}
WORDS = {"c": "check", "b": "bet", "k": "call", "f": "fold"}
LETTERS = {v: k for k, v in WORDS.items()}
PAST = {"c": "checked", "b": "bet", "k": "called", "f": "folded"}
# (deals per hand, the hand being played, its actions so far, seat 0's chips won so far)
Match = tuple[tuple[tuple[int, int], ...], int, str, int]
ALPHA = 1 / 3


def hand_result(history: str, first: int, cards: tuple[int, int]) -> int | None:
    """Chips seat ``first`` wins from the other when the hand's actions are ``history`` (None: not over)."""
    showdown = 1 if cards[first] > cards[1 - first] else -1
    return {"cc": showdown, "bf": 1, "bk": 2 * showdown, "cbf": -1, "cbk": 2 * showdown}.get(history)


class KuhnPoker(Game):
    name = "kuhn-poker"
    hidden_information = True
    move_help = "<move>ACTION</move> with ACTION one of check, bet, call, fold (as legal)"

    def __init__(self, hands: int = 5):
        self.hands = hands = whole("hands", hands, 1, 50)
        self.rules = (
            f"Rules (Kuhn poker, a match of {hands} hand(s)): the deck is J < Q < K. Each hand both players ante "
            "1 chip and get one card each, hidden from the other; the players take turns acting first, hand by "
            "hand. The first to act may check or bet 1. After a check the other may check (showdown, the pot is 2) "
            "or bet 1. Facing a bet a player may call (showdown, the pot is 4) or fold (the bettor takes the pot). "
            "At a showdown the higher card takes the pot. Whoever has won more chips after the last hand wins the "
            "match; even chips are a draw."
        )

    def initial(self, rng: random.Random) -> Match:
        deals = tuple(tuple(rng.sample([1, 2, 3], 2)) for _ in range(self.hands))
        return deals, 0, "", 0  # type: ignore[return-value]

    def first(self, state: Match) -> int:
        return state[1] % 2

    def to_move(self, state: Match) -> int:
        return self.first(state) if len(state[2]) % 2 == 0 else 1 - self.first(state)

    def legal(self, state: Match) -> list[str]:
        if state[1] >= self.hands:
            return []
        return ["check", "bet"] if state[2] in ("", "c") else ["call", "fold"]

    def apply(self, state: Match, move: str) -> Match:
        deals, hand, history, chips = state
        history += LETTERS[move]
        won = hand_result(history, self.first(state), deals[hand])
        if won is None:
            return deals, hand, history, chips
        return deals, hand + 1, "", chips + (won if self.first(state) == 0 else -won)

    def returns(self, state: Match) -> tuple[float, float] | None:
        if state[1] < self.hands:
            return None
        chips = state[3]
        return (1.0, 0.0) if chips > 0 else (0.0, 1.0) if chips < 0 else (0.5, 0.5)

    def render(self, state: Match, seat: int) -> str:
        deals, hand, history, chips = state
        mine = chips if seat == 0 else -chips
        lines = [f"Chips won so far: you {mine:+d}, the opponent {-mine:+d}."]
        if hand >= self.hands:
            return lines[0]
        first = self.first(state)
        who = "you act" if first == seat else "the opponent acts"
        lines.append(f"Hand {hand + 1} of {self.hands}: your card is {CARDS[deals[hand][seat]]}; {who} first.")
        if history:
            acted = [("you" if (first if i % 2 == 0 else 1 - first) == seat else "the opponent") + " " + PAST[a]
                     for i, a in enumerate(history)]  # fmt: skip
            lines.append("This hand so far: " + ", ".join(acted) + ".")
        if self.to_move(state) == seat:
            lines.append(f"Your move: {' or '.join(self.legal(state))}.")
        return "\n".join(lines)

    def parse(self, text: str) -> str | None:
        word = text.lower()
        return word if re.fullmatch(r"check|bet|call|fold", word) else None

    def outcome_note(self, before: Match, move: str, after: Match, seat: int) -> str:
        deals, hand, history, _ = before
        if after[1] == hand:
            return ""
        cards = deals[hand]
        full = history + LETTERS[move]
        won = hand_result(full, self.first(before), cards)
        assert won is not None
        mine = won if self.first(before) == seat else -won
        if full.endswith("f"):
            how = "the opponent folds" if mine > 0 else "you fold"
            return f"Hand {hand + 1} ends: {how}; you {'win' if mine > 0 else 'lose'} {abs(mine)} chip(s)."
        return (f"Hand {hand + 1} showdown: your {CARDS[cards[seat]]} against the opponent's {CARDS[cards[1 - seat]]}; "
                f"you {'win' if mine > 0 else 'lose'} {abs(mine)} chip(s).")  # fmt: skip

    def describe(self, state: Match, move: str) -> str:
        return move

    # ---- scripted players ---------------------------------------------------------------------
    def greedy_player(self, state: Match, rng: random.Random) -> str:
        """Plays its card: K bets and calls, Q checks and calls, J checks and folds."""
        card = state[0][state[1]][self.to_move(state)]
        if state[2] in ("", "c"):
            return "bet" if card == 3 else "check"
        return "fold" if card == 1 else "call"

    def perfect_player(self, state: Match, rng: random.Random) -> str:
        """A Nash equilibrium of one hand (alpha = 1/3), as in the module's docstring."""
        card = state[0][state[1]][self.to_move(state)]
        history, p = state[2], rng.random()
        if history == "":  # first to act
            return "bet" if card == 3 or (card == 1 and p < ALPHA) else "check"
        if history == "c":  # second, after a check
            return "bet" if card == 3 or (card == 1 and p < 1 / 3) else "check"
        if history == "b":  # second, facing a bet
            return "call" if card == 3 or (card == 2 and p < 1 / 3) else "fold"
        # first, after checking, facing a bet
        return "call" if card == 3 or (card == 2 and p < ALPHA + 1 / 3) else "fold"


class KuhnPokerEnv(GameEnv):
    """Kuhn poker (hidden cards) against a scripted player; ``hands`` per match."""

    name = "kuhn-poker"
    hidden_information = True
    description = "Kuhn poker, a match of hands against a scripted player (random, greedy, Nash); <move>bet</move>"

    def __init__(self, tasks: Any = None, *, hands: int = 5, **kwargs: Any):
        game = KuhnPoker(hands)
        self.hands = game.hands
        super().__init__(tasks, game=game, **kwargs)

    def params(self) -> str:
        return f"{super().params()},hands={self.hands}"

    def max_policy_moves(self) -> int:
        return 2 * self.hands

    def illegal_example(self, state: Match) -> str | None:
        return "call" if state[2] in ("", "c") else "check"
