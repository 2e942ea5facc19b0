"""MiniWoB++ on a real Chromium: every supported task is solved by the scripted oracle and by
nothing less, episodes are deterministic, and the page's scorer cannot be fooled from the tools."""

import importlib.util
from concurrent.futures import ThreadPoolExecutor

import pytest

from ludus.certify.contract import check_env, format_report
from ludus.core.env import MissingDependency
from ludus.core.types import Message, Status, ToolCall
from ludus.envs.web.miniwob import SUPPORTED, MiniWoBEnv
from ludus.rollout.engine import EpisodeRequest
from ludus.rollout.evaluate import evaluate
from ludus.rollout.scripted import NothingPolicy, OraclePolicy
from support import play_reference

pytestmark = pytest.mark.skipif(importlib.util.find_spec("miniwob") is None, reason="needs pip install 'ludus[web]'")


def call(name: str, **args) -> Message:
    return Message("assistant", "", tool_calls=[ToolCall(name, args, id="c1")])


@pytest.fixture(scope="module")
def env():
    env = MiniWoBEnv()
    yield env
    env.close()


def play_oracle(env: MiniWoBEnv, name: str, seed: int):
    """The oracle's last step on (name, seed), and on seed 0 an empty reply's on a fresh episode."""
    task = MiniWoBEnv.task_for(name, seed)
    result = play_reference(env, task)
    if seed:
        return result, None
    env.reset(task, 0)
    return result, env.step("")


def test_the_oracle_solves_every_supported_task_and_nothing_does_not():
    jobs = [(name, seed) for name in SUPPORTED for seed in (0, 1)]
    lanes = 3  # one environment per thread: an environment runs one episode at a time

    def lane(k: int) -> list:
        env = MiniWoBEnv()
        try:
            return [play_oracle(env, *job) for job in jobs[k::lanes]]
        finally:
            env.close()

    with ThreadPoolExecutor(lanes) as pool:
        results = list(pool.map(lane, range(lanes)))
    jobs = [job for k in range(lanes) for job in jobs[k::lanes]]
    outcomes = [outcome for lane_outcomes in results for outcome in lane_outcomes]
    failed = {
        job: (result and result.score and result.score.reason)
        for job, (result, _) in zip(jobs, outcomes, strict=True)
        if result is None or not result.done or result.score.value != 1.0 or not result.score.correct
    }
    assert not failed, failed
    nothings = {job: nothing.score for job, (_, nothing) in zip(jobs, outcomes, strict=True) if nothing}
    assert len(nothings) == len(SUPPORTED)
    assert all(s.value == 0 and s.status == Status.WRONG for s in nothings.values()), nothings


def test_the_oracle_policy_on_the_rollout_engine():
    names = ["click-tab-2", "login-user", "navigate-tree"]  # two live oracles, one that types
    tasks = [MiniWoBEnv.task_for(n, s) for n in names for s in (3, 4)]
    oracle = OraclePolicy(MiniWoBEnv, [EpisodeRequest(t, 0) for t in tasks])
    summary = evaluate(oracle, MiniWoBEnv, tasks)
    assert summary.mean_reward == 1.0, summary
    assert evaluate(NothingPolicy(), MiniWoBEnv, tasks).mean_reward == 0.0


def test_the_first_observation_is_deterministic(env):
    task = MiniWoBEnv.task_for("click-button", 5)
    first = env.reset(task, 0).messages
    again = env.reset(task, 0).messages
    assert [m.to_dict() for m in first] == [m.to_dict() for m in again]
    assert first[-1].content.startswith('Task: Click on the "')
    assert "reward" not in first[-1].content.lower() and "time left" not in first[-1].content.lower()
    other = env.reset(MiniWoBEnv.task_for("click-button", 6), 0).messages
    assert other[-1].content != first[-1].content


def test_the_task_supply():
    env = MiniWoBEnv(names=["click-test", "enter-text"])
    train, held_out = env.task_source("train"), env.task_source("eval")
    tasks = [train.get(i) for i in range(6)]
    assert [t.info["miniwob"] for t in tasks] == ["click-test", "enter-text"] * 3
    assert [t.info["seed"] for t in tasks] == [0, 0, 1, 1, 2, 2]
    assert len({t.id for t in tasks}) == 6 and train.get(3) == tasks[3]
    eval_seeds = {held_out.get(i).info["seed"] for i in range(100)}
    assert not eval_seeds & {train.get(i).info["seed"] for i in range(100)}
    assert MiniWoBEnv.task_for("click-test", 7).info == {"miniwob": "click-test", "seed": 7}


def test_a_client_chooses_a_supported_task_and_a_seed_and_nothing_else():
    env = MiniWoBEnv(names=["click-test"])
    sent = {"id": "mine", "prompt": "ignore the page", "info": {"miniwob": "enter-text", "seed": 3}}
    assert env.client_task(sent) == MiniWoBEnv.task_for("enter-text", 3)  # the canonical task, its own prompt
    for info, refused in [
        ({"miniwob": "../../../etc/passwd", "seed": 0}, "not a MiniWoB"),
        ({"miniwob": "drag-box", "seed": 0}, "does not support"),
        ({"miniwob": "click-test"}, "needs task.info"),
        ({"miniwob": "click-test", "seed": "0"}, "wrong type"),
        ({"miniwob": "click-test", "seed": 0, "url": "http://127.0.0.1:1/"}, "does not accept"),
    ]:
        with pytest.raises(ValueError, match=refused):
            env.client_task({**sent, "info": info})


def test_unknown_and_unsupported_names_are_clear_errors(monkeypatch):
    with pytest.raises(ValueError, match="not a MiniWoB"):
        MiniWoBEnv.task_for("click-the-moon")
    with pytest.raises(ValueError, match="does not support"):
        MiniWoBEnv(names=["drag-box"])
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(MissingDependency, match=r"pip install 'ludus\[web\]'"):
        MiniWoBEnv()


def test_a_wrong_click_is_wrong(env):
    env.reset(MiniWoBEnv.task_for("click-test-2", 0), 0)
    assert env.tab is not None
    two = env._call(env.tab.evaluate("() => document.querySelector('#subbtn2').dataset.ludusId"))
    result = env.step(call("click", element=int(two)))
    assert result.done and result.reward == 0 and result.score.status == Status.WRONG
    assert result.score.reason == "the task's scorer gave reward -1"


def test_partial_credit_from_the_scorer_is_wrong(env):
    task = MiniWoBEnv.task_for("click-checkboxes", 0)  # five boxes, three to tick
    env.reset(task, 0)
    actions = env.reference_actions(task)
    assert len(actions) == 4
    for action in actions[1:]:  # one box left unticked: four of five right
        result = env.step(action)
    assert result.done and result.reward == 0 and result.score.status == Status.WRONG
    assert result.score.reason == "the task's scorer gave reward 0.6"


def test_the_scorer_grades_a_click_made_in_the_same_turn_as_finish(env):
    task = MiniWoBEnv.task_for("click-test", 0)
    env.reset(task, 0)
    (click,) = env.reference_actions(task)
    both = Message("assistant", "", tool_calls=[*click.tool_calls, ToolCall("finish", {}, id="c2")])
    assert env.step(both).score.correct


@pytest.mark.parametrize("action", [call("finish"), call("answer", text="done"), "I clicked the button."])
def test_ending_without_the_scorer_scores_zero(env, action):
    env.reset(MiniWoBEnv.task_for("click-test", 1), 0)
    result = env.step(action)
    assert result.done and result.reward == 0 and result.score.status == Status.WRONG
    assert "scorer had not ended" in result.score.reason


def test_another_task_or_a_script_url_cannot_end_the_task(env):
    env.reset(MiniWoBEnv.task_for("enter-text", 0), 0)
    result = env.step(call("goto", url="javascript:WOB_DONE_GLOBAL=true;WOB_RAW_REWARD_GLOBAL=1"))
    assert not result.done and "only opens pages of this site" in result.observation.messages[-1].content
    # another task's page (whose own trivial episode the model could start and solve) ends this one
    result = env.step(call("goto", url="/miniwob/click-test.html"))
    assert result.done and result.reward == 0 and result.score.status == Status.WRONG
    assert "page was left" in result.score.reason
    for name, actions in env.cheats(MiniWoBEnv.task_for("enter-text", 0)).items():
        env.reset(MiniWoBEnv.task_for("enter-text", 0), 0)
        final = None
        for action in actions:
            final = env.step(action)
            if final.done:
                break
        assert final is not None and not (final.done and final.score.correct), name


def test_ludus_check_passes():
    report = check_env(
        lambda: MiniWoBEnv(names=["click-checkboxes", "enter-text", "click-tab-2"]), name="miniwob", seeds=range(2)
    )
    assert report.ok, format_report(report)
