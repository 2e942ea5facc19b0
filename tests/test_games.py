"""The games family (docs/games.md): rules, strict move reading, illegal-move penalties, scripted
players of known strength, determinism, and `ludus check --redteam` on every game."""

from __future__ import annotations

import random
from functools import reduce

import pytest

from ludus.cli import main
from ludus.core.types import Status
from ludus.envs.games import (
    ConnectFour,
    ConnectFourEnv,
    GameEnv,
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
from ludus.envs.games.base import Setup
from ludus.envs.games.kuhn_poker import hand_result
from ludus.envs.games.word_duel import feedback

GAMES = ["tictactoe", "connect-four", "nim", "kuhn-poker", "word-duel"]


def play_out(game, state, players, seed: str):
    """Play ``players[seat](state, rng)`` until the end; the final state."""
    k = 0
    while game.returns(state) is None:
        k += 1
        seat = game.to_move(state)
        move = players[seat](state, random.Random(f"{seed}:{k}"))
        assert move in game.legal(state)
        state = game.apply(state, move)
    return state


# ---- rules ----------------------------------------------------------------------------------------


def test_tictactoe_rules_win_draw_and_terminal() -> None:
    g = TicTacToe()
    s = g.initial(random.Random(0))
    for move in ["1", "4", "2", "5"]:
        s = g.apply(s, move)
    assert g.returns(s) is None and g.to_move(s) == 0
    won = g.apply(s, "3")
    assert g.returns(won) == (1.0, 0.0) and g.legal(won) == []
    s = g.initial(random.Random(0))
    for move in ["1", "2", "3", "5", "4", "6", "8", "7", "9"]:  # X O X / X O O / O X X
        s = g.apply(s, move)
    assert g.returns(s) == (0.5, 0.5)
    assert g.parse("5") == "5" and g.parse("0") is None and g.parse("10") is None


def test_connect_four_rules_lines_gravity_and_full_columns() -> None:
    g = ConnectFour()
    s = g.initial(random.Random(0))
    for move in ["1", "2", "1", "2", "1", "2"]:
        s = g.apply(s, move)
    assert g.returns(s) is None
    assert g.returns(g.apply(s, "1")) == (1.0, 0.0)  # a column of four
    s = g.initial(random.Random(0))
    for move in ["1", "1", "2", "2", "3", "3"]:
        s = g.apply(s, move)
    assert g.returns(g.apply(s, "4")) == (1.0, 0.0)  # a row of four on the bottom
    s = g.initial(random.Random(0))
    for move in ["1", "2", "2", "3", "4", "3", "3", "4", "4", "7"]:  # X's diagonal 1,2,3,4 rising
        s = g.apply(s, move)
    assert g.returns(g.apply(s, "4")) == (1.0, 0.0)
    s = g.initial(random.Random(0))
    for _ in range(6):
        s = g.apply(s, "5")
    assert "5" not in g.legal(s) and g.parse("8") is None
    small = ConnectFour(rows=4, cols=4)
    full = play_out(small, small.initial(random.Random(0)), [small.random_player] * 2, "fill")
    assert small.returns(full) is not None


def test_nim_rules_last_object_wins() -> None:
    g = Nim(heaps=2, max_heap=3)
    s = ((1, 2), 0)
    assert g.legal(s) == ["1 1", "2 1", "2 2"]
    s = g.apply(s, "2 2")
    assert s == ((1, 0), 1) and g.returns(s) is None
    assert g.returns(g.apply(s, "1 1")) == (0.0, 1.0)  # seat 1 took the last object
    assert g.parse("2  3") == "2 3" and g.parse("02 3") is None and g.parse("2 0") is None


def test_kuhn_poker_hands_chips_and_showdowns() -> None:
    assert hand_result("cc", 0, (3, 1)) == 1 and hand_result("bk", 0, (1, 2)) == -2
    assert hand_result("bf", 1, (1, 3)) == 1 and hand_result("cbf", 0, (3, 1)) == -1
    assert hand_result("cb", 0, (3, 1)) is None
    g = KuhnPoker(hands=2)
    s = (((3, 1), (2, 3)), 0, "", 0)
    s = g.apply(g.apply(s, "bet"), "call")  # seat 0's K wins 2
    assert s[1:] == (1, "", 2) and g.to_move(s) == 1  # seat 1 acts first in hand 2
    s = g.apply(g.apply(s, "bet"), "fold")  # seat 1 bets, seat 0 folds: seat 1 wins 1
    assert g.returns(s) == (1.0, 0.0) and s[3] == 1
    hidden = g.render((((3, 1), (2, 3)), 0, "", 0), 0)
    assert "your card is K" in hidden and " J" not in hidden  # the opponent's card stays hidden


def test_word_duel_feedback_counts_repeated_letters_as_wordle() -> None:
    assert feedback("crane", "crane") == "GGGGG"
    assert feedback("apple", "paper") == "YYG-Y"
    assert feedback("allow", "alarm") == "GG---"  # the second l finds no l left
    g = WordDuel(max_guesses=1)
    s = (("crane", "brain"), (), (), 0)
    assert g.returns(g.apply(s, "brain")) == (1.0, 0.0)
    drawn = g.apply(g.apply(s, "about"), "above")
    assert g.returns(drawn) == (0.5, 0.5)
    assert g.parse("BRAIN") == "brain" and g.parse("brains") is None


# ---- reading moves and penalties ------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "5",
        "<move>5</move> <move>6</move>",
        "<move>5 6</move>",
        "<move>５</move>",  # a full-width digit
        "<move>٥</move>",  # an Arabic-Indic digit
        "<move>\u200b5</move>",  # a zero-width space
        "<move>5\u200d</move>",
        "<move>5",
        "<MOVE>5</MOVE><move>5</move>",
        "<move>5</move>" + " x" * 20_000,  # huge
        "<move><move>5</move></move>",
    ],
)
def test_hostile_replies_are_refused(reply: str) -> None:
    move, why = read_move(TicTacToe(), reply)
    assert move is None and why


def test_a_plain_move_with_reasoning_around_it_is_read() -> None:
    assert read_move(TicTacToe(), "The centre is strongest.\n<move> 5 </move>") == ("5", "")


def first_task(env: GameEnv):
    return env.default_tasks("train").get(0)


def test_an_illegal_move_loses_by_default() -> None:
    env = TicTacToeEnv()
    task = first_task(env)
    env.reset(task)
    taken = next(str(i + 1) for i, c in enumerate(env.state) if c != ".") if "X" in env.state else None
    result = env.step(f"<move>{taken}</move>" if taken else "no move")
    assert result.terminated and result.reward == 0.0 and result.score.status == Status.FORMAT_ERROR


def test_retries_are_counted_then_the_game_is_lost() -> None:
    env = NimEnv(illegal="retry:2")
    assert env.max_turns == NimEnv().max_turns + 2 * 2  # two refusals for each seat
    task = first_task(env)
    env.reset(task)
    for left in (1, 0):
        result = env.step("<move>9 9</move>")
        assert not result.done and f"({left} more refusal(s) allowed.)" in result.observation.messages[0].content
    result = env.step("<move>9 9</move>")
    assert result.terminated and result.score.status == Status.FORMAT_ERROR
    env.reset(task)  # a refusal does not spoil the game: the oracle still wins after two
    line = env.reference_actions(task)
    for action in ["junk", "<move>1 99</move>", *line]:
        result = env.step(action)
    assert result.score.status == Status.CORRECT and result.reward == 1.0


def test_a_loss_and_a_draw_are_scored() -> None:
    env = TicTacToeEnv(opponent="perfect", winnable=False, opening=0, seat=0)
    task = first_task(env)
    env.reset(task)
    for move in ["1", "2", "3", "4", "5", "6", "7", "8", "9"]:
        if move in env.game.legal(env.state):
            result = env.step(f"<move>{move}</move>")
            if result.done:
                break
    assert result.score.status in (Status.WRONG, Status.PARTIAL)
    env = TicTacToeEnv(opponent="perfect", winnable=False, opening=0, seat=0, draw_reward=0.25)
    env.reset(task)
    solver = env.game.solver
    while True:
        result = env.step(f"<move>{solver.best_moves(env.state)[0]}</move>")
        if result.done:
            break
    assert result.score.status == Status.PARTIAL and result.reward == 0.25  # perfect against perfect


def test_bad_arguments_are_refused() -> None:
    for kwargs in ({"opponent": "genius"}, {"illegal": "retry"}, {"illegal": "retry:-1"}, {"seat": 2},
                   {"draw_reward": 1.0}):  # fmt: skip
        with pytest.raises(ValueError):
            TicTacToeEnv(**kwargs)


# ---- scripted players -----------------------------------------------------------------------------


def test_nim_solver_agrees_with_the_nim_sum() -> None:
    g = Nim(heaps=3, max_heap=5)
    rng = random.Random(1)
    for _ in range(200):
        heaps = tuple(rng.randint(0, 5) for _ in range(3))
        if not any(heaps):
            continue
        assert (g.solver.value((heaps, 0)) == 1.0) == (reduce(lambda a, b: a ^ b, heaps) != 0)


@pytest.mark.parametrize("opponent", ["random", "greedy"])
def test_perfect_never_loses_tictactoe_from_any_start(opponent: str) -> None:
    g = TicTacToe()
    for seed in range(150):
        for seat in (0, 1):
            players = [g.perfect_player, g.players()[opponent]]
            if seat:
                players.reverse()
            end = play_out(g, g.initial(random.Random(seed)), players, f"{opponent}:{seed}")
            assert g.returns(end)[seat] >= 0.5


@pytest.mark.parametrize("opponent", ["random", "greedy"])
def test_perfect_never_loses_nim_from_a_won_start(opponent: str) -> None:
    g = Nim(heaps=3, max_heap=6)
    for seed in range(150):
        start = g.initial(random.Random(seed))
        seat = 0 if g.solver.value(start) == 1.0 else 1  # the perfect player takes the winning side
        players = [g.perfect_player, g.players()[opponent]]
        if seat:
            players.reverse()
        assert g.returns(play_out(g, start, players, f"{opponent}:{seed}"))[seat] == 1.0


def win_rate(game, strong: str, weak: str, games: int) -> float:
    total = 0.0
    for seed in range(games):
        seat = seed % 2
        players = [game.players()[strong], game.players()[weak]]
        if seat:
            players.reverse()
        total += game.returns(play_out(game, game.initial(random.Random(seed)), players, f"{seed}"))[seat]
    return total / games


def test_greedy_beats_random_most_of_the_time() -> None:
    assert win_rate(TicTacToe(), "greedy", "random", 200) > 0.7
    assert win_rate(ConnectFour(), "greedy", "random", 40) > 0.7
    assert win_rate(WordDuel(), "greedy", "random", 60) > 0.7


def test_connect_four_search_beats_greedy() -> None:
    assert win_rate(ConnectFour(depth=3), "perfect", "greedy", 12) > 0.7


def test_kuhn_nash_player_is_not_exploited_by_greedy() -> None:
    g = KuhnPoker(hands=20)
    assert win_rate(g, "perfect", "random", 60) > 0.6
    assert win_rate(g, "perfect", "greedy", 60) >= 0.4


# ---- determinism, tasks, the environment contract -------------------------------------------------


@pytest.mark.parametrize("cls", [TicTacToeEnv, ConnectFourEnv, NimEnv, KuhnPokerEnv, WordDuelEnv])
def test_tasks_are_seeded_split_and_replay(cls: type[GameEnv]) -> None:
    a, b = cls(), cls()
    train = [a.default_tasks("train").get(i) for i in range(4)]
    assert [t.to_dict() for t in train] == [b.default_tasks("train").get(i).to_dict() for i in range(4)]
    evals = {str(a.default_tasks("eval").get(i).info) for i in range(4)}
    assert not evals & {str(t.info) for t in train}
    assert cls(seed=1).default_tasks("train").get(0).info != train[0].info
    task = train[0]
    runs = []
    for env in (a, b):
        steps = [env.reset(task, 3).to_json()]
        for action in env.reference_actions(task):
            steps.append(env.step(action).to_json())
        runs.append(steps)
    assert runs[0] == runs[1] and '"status":"correct"' in runs[0][-1]


def test_the_opponent_does_not_depend_on_the_episode_seed() -> None:
    env = KuhnPokerEnv(opponent="perfect")
    task = first_task(env)
    assert env.reset(task, 0).to_json() == env.reset(task, 99).to_json()


def test_the_opening_prompt_hides_the_opponents_secret() -> None:
    for env in (KuhnPokerEnv(), WordDuelEnv()):
        for i in range(5):
            task = env.default_tasks("train").get(i)
            setup = env.setup_of(task)
            state = env.start_state(setup)
            if isinstance(env, WordDuelEnv):
                assert state[0][1 - setup.seat] not in task.prompt.split("The words:")[0]
                assert state[0][setup.seat] in task.prompt
            else:
                hidden = {1: "J", 2: "Q", 3: "K"}[state[0][0][1 - setup.seat]]
                assert f"card is {hidden}" not in task.prompt or state[0][0][setup.seat] == state[0][0][1 - setup.seat]


def test_winnable_tasks_against_the_perfect_player() -> None:
    env = TicTacToeEnv(opponent="perfect")
    for i in range(3):
        task = env.default_tasks("train").get(i)
        assert task.info["opening"]  # from the empty board a perfect player cannot be beaten
        assert env.oracle_line(env.setup_of(task)) is not None
    assert env.oracle_line(Setup("0", 0, "perfect", ())) is None


@pytest.mark.parametrize("name", GAMES)
def test_ludus_check_redteam_passes(name: str, capsys) -> None:
    assert main(["check", name, "--redteam", "--tasks", "2"]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "resists the red-team" in out and "env cheat every legal move" in out


@pytest.mark.parametrize(
    ("name", "args"),
    [("tictactoe", '{"opponent": "perfect", "illegal": "retry:2"}'), ("nim", '{"opponent": "perfect"}'),
     ("kuhn-poker", '{"opponent": "perfect", "hands": 3}'), ("word-duel", '{"opponent": "perfect"}')],
)  # fmt: skip
def test_redteam_passes_against_the_perfect_player(name: str, args: str, capsys) -> None:
    assert main(["check", name, "--env-args", args, "--redteam", "--tasks", "2"]) == 0, capsys.readouterr().out


@pytest.mark.parametrize("name", GAMES)
def test_moves_as_a_tool_pass_the_redteam(name: str, capsys) -> None:
    args = '{"moves": "tool", "illegal": "retry:1", "view": "state"}'
    assert main(["check", name, "--env-args", args, "--redteam", "--tasks", "2"]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "env cheat two calls" in out and "env cheat the move as text, no call" in out


def test_moves_as_a_tool_answer_every_call_and_keep_the_conversation_well_formed() -> None:
    from ludus.core.types import Message, ToolCall

    env = TicTacToeEnv(moves="tool", illegal="retry:1", opponent="random", winnable=False)
    task = env.default_tasks("train").get(0)
    obs = env.reset(task)
    assert [t.name for t in obs.tools] == ["move"] and "Call the tool move" in obs.messages[0].content
    free = env.game.legal(env.state)
    two = Message("assistant", "", [ToolCall("move", {"move": free[0]}, "a"), ToolCall("move", {"move": free[1]}, "b")])
    refused = env.step(two)
    answers = refused.observation.messages
    assert [(m.role, m.tool_call_id) for m in answers] == [("tool", "a"), ("tool", "b")]  # one answer per call
    assert "Refused" in answers[0].content and not refused.done
    played = env.step(Message("assistant", "thinking aloud <move>1</move>", [ToolCall("move", {"move": free[0]}, "c")]))
    assert played.observation.messages[0].role == "tool" and played.observation.messages[0].tool_call_id == "c"
    assert played.observation.tools and env.state[int(free[0]) - 1] == "X" if task.info["seat"] == 0 else True
    assert TicTacToeEnv(moves="tool").reference(task) is None  # a warm start reads text replies
    assert TicTacToeEnv(moves="tool").reference_example(task, 0) is None
    with pytest.raises(ValueError, match="moves must be"):
        TicTacToeEnv(moves="json")


@pytest.mark.parametrize("opponent", ["self", "greedy"])
def test_warm_start_examples_come_from_the_whole_game_with_the_perfect_move(opponent):
    # a model warm-started on opening positions alone played "1 1" once heap 1 was empty
    env = NimEnv(heaps=2, max_heap=5, view="state", opponent=opponent)
    source = env.task_source("train")
    later = 0
    for i in range(200):
        conversation, reply = env.reference_example(source.get(i), seed=i)
        assert [m.role for m in conversation] == ["user"]
        text = conversation[0].content
        heaps = tuple(int(n) for n in text.split("Heaps: ")[1].rstrip(".").replace("heap 1: ", "").split(", heap 2: "))
        later += "first player" in text and "The opponent plays" in text  # the first player's second turn or later
        move = read_move(env.game, reply)[0]
        seat = 0 if "first player" in text else 1
        assert move in env.game.legal((heaps, seat)), (text, reply)
        after = env.game.apply((heaps, seat), move)[0]
        if heaps[0] ^ heaps[1]:  # a winning position: the perfect move leaves a nim-sum of 0
            assert after[0] ^ after[1] == 0, (text, reply)
    assert later > 25  # not only the game's first turns


def test_warm_start_examples_in_conversation_view_are_a_seats_whole_conversation():
    env = TicTacToeEnv(opponent="self", view="conversation")
    source = env.task_source("train")
    lengths = set()
    for i in range(30):
        task = source.get(i)
        conversation, reply = env.reference_example(task, seed=i)
        lengths.add(len(conversation))
        roles = [m.role for m in conversation]
        assert roles == ["user", "assistant"] * (len(roles) // 2) + ["user"]
        assert all(read_move(env.game, m.content)[0] for m in conversation if m.role == "assistant")
        assert conversation[0].content.startswith("You are playing tic-tac-toe as the ")
        assert read_move(env.game, reply)[0] is not None
    assert max(lengths) >= 5  # turns from deep in the game
