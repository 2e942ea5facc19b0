"""Red-team of the games environments (issue 35 part 1): replies, hidden information, env args,
retries and the task filter, each attacked as a reward-hacking policy or a hostile caller would."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time

import pytest

from ludus.core.env import EnvStateError
from ludus.core.types import Status
from ludus.envs.games import (
    ConnectFourEnv,
    KuhnPoker,
    KuhnPokerEnv,
    Nim,
    NimEnv,
    TicTacToe,
    TicTacToeEnv,
    WordDuel,
    WordDuelEnv,
    read_move,
)
from ludus.envs.games.kuhn_poker import LETTERS
from ludus.envs.games.word_duel import WORDS

ENVS = {"tictactoe": TicTacToeEnv, "connect-four": ConnectFourEnv, "nim": NimEnv, "kuhn-poker": KuhnPokerEnv,
        "word-duel": WordDuelEnv}  # fmt: skip
make = lambda name, **kwargs: ENVS[name](**kwargs)  # noqa: E731


def play(env, task, policy) -> Status:
    """One episode of ``policy(legal moves) -> move`` on ``task``; its final status."""
    env.reset(task)
    while True:
        result = env.step(f"<move>{policy(env.game.legal(env.state))}</move>")
        if result.done:
            return result.score.status


# ---- replies ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("game", "reply"),
    [
        (TicTacToe(), "<move>\xa05</move>"),  # a no-break space
        (TicTacToe(), "<move>⁵</move>"),  # superscript, circled, Devanagari, mathematical bold digits
        (TicTacToe(), "<move>⑤</move>"),
        (TicTacToe(), "<move>५</move>"),
        (TicTacToe(), "<move>𝟓</move>"),
        (TicTacToe(), "<move>5\x0b</move>"),  # a vertical tab
        (TicTacToe(), '<move id="a">5</move>'),
        (TicTacToe(), "<move>5</move >"),
        (TicTacToe(), "<!-- <move>3</move> --> <move>5</move>"),  # a second move hidden in a comment
        (TicTacToe(), "<move>5</move> <Move>3</Move>"),
        (TicTacToe(), "<move>5</move><move/>"),
        (TicTacToe(), "&lt;move&gt;5&lt;/move&gt;"),
        (TicTacToe(), TicTacToe().render(TicTacToe().initial(random.Random(0)), 0)),  # the board itself
        (Nim(), "<move>1\t3</move>"),
        (Nim(), "<move>01 3</move>"),
        (Nim(), "<move>1,3</move>"),
        (KuhnPoker(), "<move>bеt</move>"),  # a Cyrillic e
        (KuhnPoker(), "<move>ﬁold</move>"),  # a ligature
        (KuhnPoker(), "<move>bet call</move>"),
        (WordDuel(), "<move>crâne</move>"),
        (WordDuel(), "<move>crane crane</move>"),
    ],
)
def test_more_hostile_replies_are_refused(game, reply: str) -> None:
    move, why = read_move(game, reply)
    assert move is None and why


def test_reasoning_around_one_move_reads_that_move_only() -> None:
    t = TicTacToe()
    assert read_move(t, "```\n<move>5</move>\n```") == ("5", "")  # a code fence is only text around the tag
    assert read_move(t, "<move>5</move> undo that, I meant 3") == ("5", "")  # an 'undo' is text, not a move
    assert read_move(t, "<move>5</move> <mоve>3</mоve>") == ("5", "")  # a Cyrillic 'o': no tag at all


def test_the_refusal_of_several_tags_counts_them() -> None:
    move, why = read_move(TicTacToe(), "<move>5</move><move/>")
    assert move is None and "this reply has 1" not in why and "3 opening or closing tags" in why


@pytest.mark.parametrize("reply", ["<move>" * 3_333, "<move>a" * 2_857])
def test_a_reply_of_many_tags_is_refused_at_once(reply: str) -> None:
    """The lazy tag search is quadratic in the number of unclosed tags; the env runs on the event loop."""
    start = time.perf_counter()
    move, _ = read_move(TicTacToe(), reply)
    assert move is None and time.perf_counter() - start < 0.05


def test_moves_after_the_end_raise_and_retries_are_bounded() -> None:
    env = make("tictactoe", illegal="retry:999")
    task = env.default_tasks("train").get(0)
    env.reset(task)
    for action in env.reference_actions(task):
        result = env.step(action)
    assert result.score.status == Status.CORRECT
    with pytest.raises(EnvStateError):
        env.step("<move>5</move>")
    env.reset(task)
    board = env.game.render(env.state, env.setup.seat)
    refused = 0
    while True:  # junk forever: refused 999 times, each with the unchanged board, then lost
        result = env.step("junk")
        if result.done:
            break
        refused += 1
        assert result.reward == 0.0 and result.observation.messages[0].content.endswith(board)
    assert refused == 999 and result.score.status == Status.FORMAT_ERROR and env.turn <= env.max_turns


# ---- hidden information -----------------------------------------------------------------------------


def test_kuhn_views_do_not_depend_on_the_opponents_card() -> None:
    """Every state the policy can face renders the same whatever the opponent holds (before a showdown)."""
    game = KuhnPoker(hands=3)
    rng = random.Random(5)
    checked = 0
    for _ in range(200):
        state = game.initial(rng)
        while game.returns(state) is None:
            deals, hand, history, chips = state
            seat = game.to_move(state)
            mine = deals[hand][seat]
            other = next(c for c in (1, 2, 3) if c not in deals[hand])
            pair = (mine, other) if seat == 0 else (other, mine)
            twin = (deals[:hand] + (pair,) + deals[hand + 1 :], hand, history, chips)
            assert game.render(twin, seat) == game.render(state, seat)
            for move in game.legal(state):
                for before in (state, twin):
                    after = game.apply(before, move)
                    if after[1] == hand:  # the hand goes on: nothing about the cards is said
                        assert game.outcome_note(before, move, after, seat) == ""
                        assert game.outcome_note(before, move, after, 1 - seat) == ""
                    elif history + LETTERS[move] not in ("cc", "bk", "cbk"):  # a fold shows no card
                        note = game.outcome_note(before, move, after, seat)
                        assert "showdown" not in note and "opponent's" not in note
            checked += 1
            state = game.apply(state, rng.choice(game.legal(state)))
    assert checked > 500


def test_word_duel_observations_hide_the_secret_and_refusals_say_nothing() -> None:
    env = make("word-duel", opponent="greedy", illegal="retry:3")
    for i in range(6):
        task = env.default_tasks("train").get(i)
        env.reset(task)
        secret = env.state[0][1 - env.setup.seat]
        refusal = env.step("<move>zzzzz</move>").observation.messages[0].content
        tried = env.state[1 + env.setup.seat]
        assert f"legal: {', '.join(w for w in WORDS if w not in tried)}." in refusal  # the same for any secret
        assert secret not in refusal.split("legal:")[0] + refusal.split(".", 2)[-1]
        rng = random.Random(i)
        while True:
            guess = rng.choice([w for w in env.game.legal(env.state) if w != secret])
            result = env.step(f"<move>{guess}</move>")
            assert secret not in result.observation.messages[0].content
            assert secret not in (result.score.reason if result.score else "")
            if result.done:
                break


def test_client_tasks_are_refused() -> None:
    for name in ENVS:
        env = make(name)
        with pytest.raises(ValueError, match="takes no tasks from clients"):
            env.client_task({"id": "x", "prompt": "", "info": {"game_seed": "0", "seat": 0, "opponent": "random"}})


# ---- determinism and the scripted players -----------------------------------------------------------

REPLAY = """
import hashlib
from ludus.core.registry import make
out = []
for name in ("kuhn-poker", "word-duel", "tictactoe"):
    env = make(name, opponent="perfect")
    for i in range(2):
        task = env.default_tasks("train").get(i)
        out.append(env.reset(task, 7).to_json())
        line = env.reference_actions(task) or [f"<move>{env.game.legal(env.state)[0]}</move>"]  # an unwinnable deal
        out += [env.step(a).to_json() for a in line]
print(hashlib.sha256("".join(out).encode()).hexdigest())
"""


def test_episodes_replay_across_processes() -> None:
    digests = set()
    for hashseed in ("1", "2"):
        run = subprocess.run([sys.executable, "-c", REPLAY], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONHASHSEED": hashseed})  # fmt: skip
        assert run.returncode == 0, run.stderr
        digests.add(run.stdout.strip())
    assert len(digests) == 1


def test_perfect_tictactoe_still_blocks_when_lost() -> None:
    """X threatens squares 3 and 7 at once: O has lost, and every move has the same value; it must
    still block one, not play like the random player (a constant policy then won ~28% of tasks)."""
    game = TicTacToe()
    state = tuple("XX.XO...O")
    assert game.to_move(state) == 1 and game.solver.value(state) == 0.0
    for seed in range(40):
        assert game.perfect_player(state, random.Random(seed)) in ("3", "7")


def test_tasks_never_start_at_the_end_of_the_game() -> None:
    """With winnable=False a task could begin after the opponent's winning first move; the policy's
    first reply was then refused as illegal (format_error) in a game it never played."""
    env = make("word-duel", opponent="random", seat=1, winnable=False)
    source = env.default_tasks("train")
    for i in range(150):
        task = source.get(i)
        env.reset(task)
        assert not env.game.terminal(env.state)
    with pytest.raises(RuntimeError, match="found no train task"):  # one heap: the opponent takes it all
        make("nim", heaps=1, seat=1, winnable=False, opponent="greedy").default_tasks("train").get(0)


def test_kuhn_tasks_do_not_deal_the_policy_good_cards() -> None:
    """A deal kept only when an oracle that sees both cards can win it favoured the policy: 'always check, fold to a
    bet' won ~94% against greedy. A game of hidden information keeps every deal by default (50% here)."""
    env = make("kuhn-poker", opponent="greedy")
    source = env.default_tasks("train")
    passive = lambda legal: "check" if "check" in legal else "fold"  # noqa: E731
    wins = sum(play(env, source.get(i), passive) == Status.CORRECT for i in range(150))
    assert wins / 150 < 0.65


# ---- env args ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("connect-four", {"depth": 2.5}),  # never reached the horizon: a search of the whole game
        ("connect-four", {"rows": 6.5}),
        ("connect-four", {"rows": "6"}),
        ("connect-four", {"cols": True}),
        ("nim", {"heaps": 2.5}),
        ("nim", {"max_heap": 7.5}),
        ("nim", {"heaps": 100}),
        ("nim", {"max_heap": 10**6}),
        ("kuhn-poker", {"hands": 2.5}),
        ("kuhn-poker", {"hands": True}),
        ("kuhn-poker", {"hands": 10**9}),
        ("word-duel", {"max_guesses": 8.5}),
        ("tictactoe", {"illegal": None}),
        ("tictactoe", {"illegal": "retry:1000000000"}),
        ("tictactoe", {"seat": True}),
        ("tictactoe", {"opening": 2.7}),
        ("tictactoe", {"opening": 10**9}),
        ("tictactoe", {"winnable": "no"}),
        ("tictactoe", {"draw_reward": "0.5"}),
        ("tictactoe", {"eval_fraction": 0}),
        ("tictactoe", {"eval_fraction": "0.1"}),
    ],
)
def test_bad_env_args_fail_at_construction(name: str, kwargs: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        make(name, **kwargs)


def test_integral_floats_from_json_are_whole_numbers() -> None:
    env = make("connect-four", rows=6.0, cols=7.0, seat=1.0)
    assert (env.rows, env.cols, env.seat) == (6, 7, 1) and env.params() == make("connect-four", seat=1).params()
