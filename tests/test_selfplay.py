"""Seats and self-play (docs/games.md): a game's two seats played by the learner, another policy
(the engine's actors) or a scripted player; the engine batching both seats; per-seat groups; the
opponent pool, ratings and `ludus train --self-play`."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from ludus.cli import main
from ludus.core.registry import factory, make
from ludus.core.types import Message, Score, Status, Trajectory, Turn
from ludus.envs.games import TicTacToeEnv
from ludus.policies.base import Completion, Policy, SamplingParams
from ludus.rollout.engine import RolloutConfig, RolloutEngine, requests
from ludus.rollout.evaluate import evaluate
from ludus.train.selfplay import (
    ANCHOR,
    LEARNER,
    Elo,
    SelfPlay,
    calibrate,
    expected_score,
    learner_result,
    performance,
    seat_groups,
    win_rate,
)


class Player(Policy):
    """A deterministic policy that reads the state from the conversation it is given: in
    tic-tac-toe the first (``pick="first"``) or last free square, in Kuhn poker the first move
    offered; it records every call's conversations."""

    def __init__(self, pick: str = "first", junk: bool = False):
        self.pick, self.junk = pick, junk
        self.calls: list[list[list[Message]]] = []

    def generate(self, conversations, sampling, *, tools=None, generator=None):
        self.calls.append(conversations)
        return [Completion(self.reply(c), [1, 2], [3], [-0.5], "stop") for c in conversations]

    def reply(self, conversation: list[Message]) -> str:
        if self.junk:
            return "I resign the formalities."
        text = conversation[-1].content
        if "Your move:" in text:
            offered = re.search(r"Your move: (\w+)", text)
            return f"<move>{offered.group(1)}</move>"
        board = text.rsplit("Board (numbers are empty squares):", 1)[1].split("You are")[0]
        free = re.findall(r"[1-9]", board)
        return f"<move>{free[0] if self.pick == 'first' else free[-1]}</move>"


def run(env_args: dict, learner: Policy, actors: dict | None = None, n: int = 4, group: int = 2, lockstep=False):
    f = factory(env_args.pop("name", "tictactoe"), env_args)
    env = f()
    tasks = [env.default_tasks("train").get(i) for i in range(n)]
    engine = RolloutEngine(learner, f, SamplingParams(max_tokens=16), RolloutConfig(lockstep=lockstep), actors=actors)
    return engine.run(requests(tasks, group))


def match(t: Trajectory) -> dict:
    return t.info["env"]["match"]


# ---- seats in the environment ---------------------------------------------------------------------


@pytest.mark.parametrize("view", ["conversation", "state"])
def test_self_play_asks_each_seat_its_own_view_and_scores_both(view: str) -> None:
    env = make("tictactoe", opponent="self", view=view, winnable=False)
    task = env.default_tasks("train").get(3)
    obs = env.reset(task)
    assert obs.actor == ""  # both seats are the learner's
    seen = []
    result = None
    while result is None or not result.done:
        conversation = env.messages
        seen.append(conversation[-1].content)
        result = env.step(Player().reply(conversation))
    marks = [re.search(r"You are (X|O)\.", text).group(1) for text in seen]
    assert marks == ["XO"[s] for s in env.seats]  # every turn was shown to the seat that moved
    assert len(set(marks)) == 2
    m = result.info["match"]
    assert sorted(m["rewards"]) in ([0.0, 1.0], [0.5, 0.5])  # zero-sum
    assert result.score.value == m["rewards"][task.info["seat"]]
    if view == "state":
        assert all(len(text) < 250 for text in seen)  # each turn a short prompt of its own, no history


def test_a_forfeit_loses_for_the_seat_that_made_it_and_wins_for_the_other() -> None:
    env = make("tictactoe", opponent="self", illegal="retry:1", winnable=False)
    task = env.default_tasks("train").get(0)
    env.reset(task)
    mover = env.game.to_move(env.state)
    refused = env.step("no idea")
    assert not refused.done and "Refused" in refused.observation.messages[-1].content
    assert env.game.to_move(env.state) == mover  # the same seat tries again
    result = env.step("<move>0</move>")
    m = result.info["match"]
    assert m["statuses"][mover] == "format_error" and m["rewards"][mover] == 0.0
    assert m["statuses"][1 - mover] == "correct" and m["rewards"][1 - mover] == 1.0
    assert m["seats"] == [mover, mover]


def test_a_seat_played_by_an_actor_is_handed_to_it_with_its_own_conversation() -> None:
    env = make("tictactoe", opponent="actor:rival", winnable=False)
    task = next(t for t in (env.default_tasks("train").get(i) for i in range(20)) if t.info["seat"] == 1)
    obs = env.reset(task)
    first = env.game.to_move(env.state)
    assert obs.actor == ("" if first == 1 else "rival")


def test_opponent_names_are_checked() -> None:
    for bad in ["actor:", "actor:a b", "actor:" + "x" * 65, "Self", "actor:../x", 3]:
        with pytest.raises(ValueError, match="opponent must be"):
            make("tictactoe", opponent=bad)
    with pytest.raises(ValueError, match="winnable needs a scripted opponent"):
        make("nim", opponent="self", winnable=True)
    with pytest.raises(ValueError, match="view must be"):
        make("nim", view="everything")


def test_hidden_cards_stay_hidden_from_the_other_seat_in_self_play() -> None:
    env = make("kuhn-poker", opponent="self", hands=3)
    for i in range(6):
        task = env.default_tasks("train").get(i)
        env.reset(task)
        deals = env.state[0]
        result = None
        while result is None or not result.done:
            seat, hand = env.game.to_move(env.state), env.state[1]
            other = "JQK"[deals[hand][1 - seat] - 1]
            latest = env.messages[-1].content
            assert f"your card is {'JQK'[deals[hand][seat] - 1]}" in latest
            # the other seat's card of this hand is never in what this seat has read of this hand
            this_hand = latest.rsplit(f"Hand {hand + 1} of", 1)[1]
            assert f"card is {other}" not in this_hand
            result = env.step(Player().reply(env.messages))


# ---- the engine ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("lockstep", [False, True])
def test_the_engine_batches_both_seats_and_records_only_the_learners_turns(lockstep: bool) -> None:
    learner = Player()
    trajs = run({"opponent": "self", "view": "state", "winnable": False}, learner, n=4, group=2, lockstep=lockstep)
    assert len(trajs) == 8 and all(t.score.status != "infra_error" for t in trajs)
    seats_in_a_call = [{re.search(r"You are (X|O)", c[-1].content).group(1) for c in call} for call in learner.calls]
    assert {"X", "O"} in seats_in_a_call  # one generate call held both seats' turns
    for t in trajs:
        assert len(t.turns) == len(match(t)["seats"]) and set(match(t)["seats"]) == {0, 1}


@pytest.mark.parametrize("lockstep", [False, True])
def test_an_actor_answers_its_seat_in_its_own_batches_and_its_turns_are_not_trained(lockstep: bool) -> None:
    learner, rival = Player("first"), Player("last")
    trajs = run({"opponent": "actor:rival", "winnable": False}, learner, {"rival": rival}, n=6, lockstep=lockstep)
    assert rival.calls and max(len(c) for c in rival.calls) > 1  # batched across episodes
    for t in trajs:
        seat = t.task.info["seat"]
        assert match(t)["seats"] == [seat] * len(t.turns)
        assert t.score.value == match(t)["rewards"][seat]
        assert t.messages[-1].content.endswith(("You win.", "You lose.", "The game is a draw."))
        assert re.search(r"You are (X|O)", t.messages[0].content).group(1) == "XO"[seat]  # the learner's own


def test_an_actor_the_engine_lacks_is_an_infra_error_not_retried() -> None:
    trajs = run({"opponent": "actor:ghost", "winnable": False, "seat": 1}, Player(), {"rival": Player()}, n=2, group=1)
    for t in trajs:
        assert t.score.status == "infra_error" and "ghost" in t.score.reason and t.info["attempts"] == 1


def test_a_junk_actor_forfeits_and_the_learner_wins() -> None:
    trajs = run({"opponent": "actor:rival", "winnable": False, "seat": 0}, Player(), {"rival": Player(junk=True)})
    assert all(t.score.status == "correct" and "opponent made an unreadable" in t.score.reason for t in trajs)


# ---- per-seat groups ------------------------------------------------------------------------------------


def test_seat_groups_cut_turns_and_scores_by_seat() -> None:
    trajs = run({"opponent": "self", "view": "state", "winnable": False}, Player(), n=1, group=4)
    infra = Trajectory(task=trajs[0].task, messages=[], score=Score.zero(Status.INFRA_ERROR, "down"))
    groups = seat_groups([*trajs, infra])
    assert len(groups) == 2 and all(len(g) == 5 for g in groups)
    for seat, group in enumerate(groups):
        for t, whole in zip(group, trajs, strict=False):
            assert t.info["seat"] == seat
            assert len(t.turns) == match(whole)["seats"].count(seat)
            assert t.score.value == t.reward == match(whole)["rewards"][seat]  # the return GRPO reads
        assert group[-1].score.status == "infra_error"
    for a, b in zip(groups[0], groups[1], strict=False):
        if a.score.status != "infra_error":
            assert a.score.value + b.score.value == pytest.approx(1.0)  # zero-sum
    plain = Trajectory(task=trajs[0].task, messages=[], turns=[Turn([1], [2], [0.0])], score=Score(1.0, Status.CORRECT))
    assert seat_groups([plain]) == [[plain]]


# ---- ratings and the pool ----------------------------------------------------------------------------------


def test_elo_keeps_the_anchor_and_moves_winners_up() -> None:
    elo = Elo()
    assert elo.expected("a", "b") == 0.5
    elo.update([("a", ANCHOR, 1.0)] * 10 + [("a", "b", 1.0)])
    assert elo.rating(ANCHOR) == 1000.0 and elo.rating("a") > 1000.0 > elo.rating("b")
    before = elo.rating("a")
    elo.update([("a", "b", 0.5)])
    assert elo.rating("a") < before  # a draw against a weaker player costs
    assert elo.games["a"] == 12


def test_a_performance_rating_is_the_rating_whose_expected_score_is_the_score_made() -> None:
    assert performance([(1000.0, 0.5)] * 10) == pytest.approx(1000.0)
    assert performance([(1200.0, 1.0), (800.0, 0.0)]) == pytest.approx(1000.0)
    won, lost = performance([(1000.0, 1.0)] * 64), performance([(1000.0, 0.0)] * 64)
    assert 1500 < won < 2500 and -500 < lost < 500  # finite: one virtual draw per opponent
    a_few = performance([(1000.0, 0.0)] * 61 + [(1000.0, 1.0)] * 3)
    assert lost < a_few < 1000.0 < performance([(1000.0, 0.0)] * 30 + [(1000.0, 1.0)] * 34) < won
    # the expected score at the rating found is the score made, prior included
    games = [(1000.0, 1.0), (1400.0, 0.5), (1400.0, 0.0), (1000.0, 1.0)]
    r = performance(games)
    with_prior = [*games, (1000.0, 0.5), (1400.0, 0.5)]
    assert sum(expected_score(r, o) for o, _ in with_prior) == pytest.approx(sum(s for _, s in with_prior), abs=1e-6)


@pytest.mark.parametrize("name", ["tictactoe", "nim"])
def test_scripted_players_are_calibrated_in_order_of_strength(name: str) -> None:
    ratings = calibrate(make(name, winnable=False), seed=0)
    assert ratings["random"] == 1000.0 < ratings["greedy"] < ratings["perfect"]
    assert ratings == calibrate(make(name, winnable=False), seed=0)  # seeded


def test_the_learner_is_measured_at_evaluations_and_pool_games_move_only_the_member(tmp_path) -> None:
    pool = SelfPlay(tmp_path, every=1, size=2, sampling="rating", latest=0.0, seed=0)
    pool.calibrate(make("nim", winnable=False))
    anchors = {k: v for k, v in pool.elo.ratings.items() if k != LEARNER}
    task = make("nim").default_tasks("train").get(0)

    def played(status: str, opponent: str = "") -> Trajectory:
        t = Trajectory(task=task, messages=[], score=Score(1.0 if status == "correct" else 0.0, Status(status)))
        t.task = dataclasses.replace(task, info={**task.info, "opponent": opponent})
        return t

    pool.record_eval({"random": [played("correct")] * 40, "greedy": [played("wrong")] * 40})
    strong = pool.elo.rating(LEARNER)
    assert anchors["random"] < strong < anchors["greedy"] + 400
    pool.record_eval({"random": [played("wrong")] * 40, "greedy": [played("wrong")] * 40})
    assert pool.elo.rating(LEARNER) < anchors["random"] < strong  # a measurement, not a sum of updates
    pool.elo.ratings["pool-1"] = 1000.0
    before = pool.elo.rating(LEARNER)
    pool.record_training([[played("correct", "actor:pool-1")] * 8])
    assert pool.elo.rating(LEARNER) == before and pool.elo.rating("pool-1") < 1000.0
    assert {k: v for k, v in pool.elo.ratings.items() if k in anchors} == anchors  # the anchors never move


def test_learner_result_reads_the_status() -> None:
    t = Trajectory(task=None, messages=[], score=Score(0.5, Status.PARTIAL))  # type: ignore[arg-type]
    assert learner_result(t) == 0.5
    t.score = Score.zero(Status.FORMAT_ERROR, "bad move")
    assert learner_result(t) == 0.0
    t.score = Score.zero(Status.INFRA_ERROR, "down")
    assert learner_result(t) is None
    assert win_rate([t])["games"] == 0


def test_the_pool_adds_every_k_steps_keeps_the_newest_and_deletes_the_rest(tmp_path) -> None:
    from ludus.policies.tiny import TinyConfig, TinyPolicy

    policy = TinyPolicy(TinyConfig(d_model=16, n_layers=1, n_heads=2, max_len=64), seed=0)
    pool = SelfPlay(tmp_path / "pool", every=2, size=2, sampling="recency", latest=0.0, seed=0)
    assert pool.opponent(0) == "self"  # nobody in the pool yet
    for step in range(1, 8):
        pool.maybe_add(step, policy)
    assert [m.name for m in pool.members] == ["pool-4", "pool-6"]
    assert len(list((tmp_path / "pool").iterdir())) == 3  # pool-2 stays until a checkpoint lets it go
    pool.checkpointed()
    assert sorted(p.name for p in (tmp_path / "pool").iterdir()) == ["step_000004", "step_000006"]
    assert set(pool.actors) == {"pool-4", "pool-6"}
    drawn = [pool.opponent(g) for g in range(400)]
    assert drawn == [pool.opponent(g) for g in range(400)]  # seeded by the group's number
    assert 1.5 < drawn.count("actor:pool-6") / drawn.count("actor:pool-4") < 2.6  # recency: weights 1 and 2
    pool.sampling = "rating"
    pool.elo.ratings.update({"pool-4": 1400.0, "pool-6": 600.0, LEARNER: 1000.0})
    drawn = [pool.opponent(g) for g in range(400)]
    assert drawn.count("actor:pool-4") > 5 * drawn.count("actor:pool-6")  # the stronger member, more often
    again = SelfPlay(tmp_path / "pool", every=2, size=2, sampling="recency", latest=0.0, seed=0)
    again.load_state_dict(pool.state_dict(), step=6)
    assert [m.name for m in again.members] == ["pool-4", "pool-6"] and again.elo.ratings == pool.elo.ratings
    again.load_state_dict({"members": [["pool-4", 4, "step_000004"]], "ratings": {}}, step=4)
    assert [p.name for p in (tmp_path / "pool").iterdir()] == ["step_000004"]  # saved after the checkpoint


def test_a_league_of_scripted_players_is_drawn_from_the_start_and_never_leaves(tmp_path) -> None:
    from ludus.policies.tiny import TinyConfig, TinyPolicy

    policy = TinyPolicy(TinyConfig(d_model=16, n_layers=1, n_heads=2, max_len=64), seed=0)
    pool = SelfPlay(tmp_path / "pool", every=1, size=1, sampling="recency", latest=0.5, seed=0, league=["random"])
    before = [pool.opponent(g) for g in range(400)]
    assert set(before) == {"self", "random"} and 150 < before.count("random") < 250  # before any checkpoint
    for step in range(1, 4):
        pool.maybe_add(step, policy)
    drawn = [pool.opponent(g) for g in range(400)]
    assert set(drawn) == {"self", "random", "actor:pool-3"}  # size 1 evicts checkpoints, never the league
    assert 0.6 < drawn.count("random") / drawn.count("actor:pool-3") < 1.6  # recency: each weighs 1
    pool.sampling = "rating"
    pool.elo.ratings.update({"random": 1000.0, "pool-3": 1000.0, LEARNER: 1600.0})
    drawn = [pool.opponent(g) for g in range(400)]
    assert 0.6 < drawn.count("random") / drawn.count("actor:pool-3") < 1.6  # equal ratings: equal odds


# ---- training --------------------------------------------------------------------------------------------

TINY = '{"d_model": 32, "n_layers": 1, "n_heads": 2, "max_len": 256}'


def test_ludus_train_self_play_keeps_a_pool_rates_players_and_resumes(tmp_path, capsys, monkeypatch) -> None:
    from ludus.train import trainer

    evaluations = []
    monkeypatch.setattr(trainer, "evaluate", lambda *a, **k: evaluations.append(a[1]) or evaluate(*a, **k))
    args = ["train", "--env", "tictactoe", "--env-args", '{"view": "state", "winnable": false}', "--self-play",
            "--steps", "6", "--pool-every", "2", "--pool-size", "2", "--self-play-latest", "0.3",
            "--prompts-per-step", "4", "--group-size", "2", "--eval-every", "3", "--eval-size", "4",
            "--max-tokens", "16", "--warmstart-steps", "5", "--tiny", TINY, "--runs-dir", str(tmp_path),
            "--name", "sp", "--checkpoint-every", "3", "--pool-scripted", "random"]  # fmt: skip
    assert main(args) == 0
    run = tmp_path / "sp"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "loss" in r]
    evals = [r for r in records if "eval/accuracy" in r]
    assert all("rating/learner" in r and "selfplay/pool_size" in r for r in steps)
    assert sum(r["selfplay/pool_matches"] for r in steps) > 0  # some groups met the pool
    assert {f"eval/vs_{p}/win_rate" for p in ("random", "greedy", "perfect")} <= set(evals[-1])
    assert evals[-1]["rating/random"] == 1000.0 and "rating/pool-6" in evals[-1]
    assert len({(r["rating/greedy"], r["rating/perfect"]) for r in evals}) == 1  # calibrated once, fixed
    # each evaluation: the run's own held-out games (against the game's default scripted player,
    # counted as that player's games too) and the other two players': three, not four
    default = TicTacToeEnv().opponent
    assert len(evaluations) == 3 * len(evals)
    assert all(r[f"eval/vs_{default}/win_rate"] == r["eval/accuracy"] for r in evals)
    assert sorted(p.name for p in (run / "pool").iterdir()) == ["step_000004", "step_000006"]
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert {s["task"]["info"]["opponent"].rsplit("-", 1)[0] for s in samples} == {"self", "actor:pool", "random"}
    # resumed from the checkpoint of step 3 (a later one lost): its pool was [pool-2], whose folder
    # the checkpoint of step 6 let go; the run goes on without it, and its later members are made again
    (run / "checkpoints" / "step_000006").rename(tmp_path / "later")
    assert main(["train", "--resume", str(run)]) == 0
    assert "pool-2 are no longer on disk" in capsys.readouterr().err
    assert sorted(p.name for p in (run / "pool").iterdir()) == ["step_000004", "step_000006"]


def test_self_play_is_refused_where_it_cannot_work(tmp_path, capsys) -> None:
    base = ["train", "--runs-dir", str(tmp_path), "--steps", "1", "--warmstart-steps", "0", "--self-play"]
    assert main([*base, "--env", "arithmetic"]) != 0
    assert "needs a two-player game" in capsys.readouterr().err
    assert main([*base, "--env", "nim", "--max-staleness", "1"]) != 0
    assert "drop max_staleness" in capsys.readouterr().err
    assert main([*base, "--env", "nim", "--env-server", "http://127.0.0.1:9"]) != 0
    assert "drop env_server" in capsys.readouterr().err
    assert main([*base, "--env", "nim", "--self-play-latest", "2"]) != 0
    assert "self_play_latest" in capsys.readouterr().err
    assert main([*base, "--env", "nim", "--pool-scripted", "grandmaster"]) != 0
    assert "'grandmaster' is not a scripted player of 'nim' (greedy, perfect, random)" in capsys.readouterr().err
    assert main([*base[:-1], "--env", "nim", "--pool-scripted", "random"]) != 0
    assert "set self_play: true" in capsys.readouterr().err


# ---- another model behind a URL plays a seat ------------------------------------------------------------


def test_ludus_eval_seats_a_model_behind_an_openai_url(tmp_path) -> None:
    from ludus.serve.model_server import create_app
    from support import serving

    rival = Player("last")
    with serving(create_app(rival, "rival")) as url:
        code = main(["eval", "tictactoe", "--model", "tiny", "--model-args", TINY, "--env-args", '{"opponent": "actor:rival", "winnable": false, "view": "state"}',
                     "--actor", f"rival={url}", "--tasks", "4", "--max-tokens", "16", "--runs", str(tmp_path),
                     "--name", "seated"])  # fmt: skip
    assert code == 0
    trajs = [json.loads(line) for line in (tmp_path / "seated" / "trajectories.jsonl").read_text().splitlines()]
    assert len(trajs) == 4 and rival.calls  # the server's model played the other seat
    for t in trajs:
        assert t["score"]["status"] != "infra_error"
        assert t["info"]["env"]["match"]["seats"] == [t["task"]["info"]["seat"]] * len(t["turns"])


def test_train_config_actors_are_checked(tmp_path, capsys) -> None:
    base = ["train", "--runs-dir", str(tmp_path), "--steps", "1", "--warmstart-steps", "0", "--env", "nim"]
    assert main([*base, "--actors", '{"pool-3": "runs/x/final"}']) != 0
    assert "self-play's pool" in capsys.readouterr().err
    assert main([*base, "--actors", '{"rival": "tiny"}']) != 0
    assert "must name a model" in capsys.readouterr().err
    assert main([*base, "--actors", f'{{"rival": "{tmp_path}/nowhere"}}']) != 0
    assert "config field 'actors': rival" in capsys.readouterr().err


def test_a_checkpoint_naming_other_files_as_pool_members_is_refused(tmp_path) -> None:
    pool = SelfPlay(tmp_path / "pool", every=2, size=2, sampling="recency", latest=0.5, seed=0)
    for members in ([["pool-2", 2, "../../elsewhere"]], [["pool-2", 2, "step_000004"]], [["x", 2, "step_000002"]]):
        with pytest.raises(ValueError, match="not a pool member"):
            pool.load_state_dict({"members": members}, step=4)


def test_a_seat_crosses_an_env_server_as_the_observations_actor() -> None:
    # the server plays the game; the client's engine answers each observation as its actor says
    from ludus.rollout.remote import RemoteEnv, ServerHost
    from support import start_env_server

    args = {"opponent": "actor:rival", "winnable": False}
    proc, url = start_env_server("--show-reasons", env="tictactoe", env_args=args)
    host = ServerHost([url])
    rival = Player("last")
    try:
        remote = RemoteEnv(url)
        tasks = [remote.task_source("train").get(i) for i in range(4)]
        engine = RolloutEngine(
            Player("first"), lambda: remote, SamplingParams(max_tokens=16), host=host, actors={"rival": rival}
        )
        got = engine.run(requests(tasks, 2))
    finally:
        host.shutdown()
        proc.terminate()
        proc.wait(timeout=30)
    want = run(dict(args), Player("first"), {"rival": Player("last")})
    assert rival.calls and len(got) == len(want) == 8
    assert [(t.task.id, t.score.to_dict(), [m.to_dict() for m in t.messages], len(t.turns)) for t in got] == [
        (t.task.id, t.score.to_dict(), [m.to_dict() for m in t.messages], len(t.turns)) for t in want
    ]
