"""Group rewards from a judge's ranking (train/ranking.py), against the scripted judge server on 127.0.0.1."""

import json

import pytest

from ludus.core.types import Message, Score, Status, Task, Trajectory, Turn
from ludus.rewards.judge import Judge
from ludus.rewards.scripted_judge import ScriptedJudgeServer
from ludus.train import Trainer
from ludus.train.ranking import rank_groups

TASK = Task(id="sky", prompt="Why is the sky blue?", answer="- scattering\n- sunlight")


@pytest.fixture(scope="module")
def server():
    with ScriptedJudgeServer() as running:
        yield running


def episode(reply: str, score: Score) -> Trajectory:
    return Trajectory(
        task=TASK,
        messages=[Message("user", TASK.prompt), Message("assistant", reply)],
        turns=[Turn([1], [2], [0.0], reward=score.value)],
        score=score,
    )


def test_a_group_is_rewarded_by_its_ranking_and_failures_keep_their_score(server):
    judge = Judge(server.url, model_name="scripted", reference="answer")
    group = [
        episode("Scattering of sunlight.", Score.zero(Status.WRONG, "env says no")),
        episode("Scattering.", Score(1.0)),
        episode("No idea.", Score(1.0)),
        episode("Scattering of sunlight.", Score.zero(Status.HONEYPOT, "read the secrets")),
        episode("Scattering of sunlight.", Score.zero(Status.INFRA_ERROR, "sandbox died")),
    ]
    rank_groups(judge, [group])
    assert [t.reward for t in group[:3]] == [1.0, 0.5, 0.0]
    assert group[0].score.components == {"env": 0.0, "judge_rank": 1.0}
    assert group[1].score.components["env"] == 1.0 and group[1].score.status == "partial"
    assert [t.score.status for t in group[3:]] == ["honeypot", "infra_error"]  # never shown to the judge
    judge.close()


def test_a_failing_judge_masks_the_group_instead_of_inventing_rewards(server):
    judge = Judge(server.url, model_name="scripted?malformed=9", reference="answer", retries=1)
    group = [episode("Scattering.", Score(1.0)), episode("No idea.", Score(0.0))]
    rank_groups(judge, [group])
    assert all(t.score.status == "infra_error" and "group judge failed" in t.score.reason for t in group)
    judge.close()


def test_asking_the_reversed_order_cancels_a_judge_s_position_bias(server):
    judge = Judge(server.url, model_name="scripted?bias=0.4", reference="answer")
    equal = ["Scattering.", "Sunlight.", "It is scattering."]  # the same quality, 1 of 2 points each
    once = [s.value for s in judge.rank(TASK, equal, rounds=1)]
    both = [s.value for s in judge.rank(TASK, equal, rounds=2)]
    assert len(set(once)) > 1  # one order: the judge favours whoever it saw first
    assert len(set(both)) == 1  # that order and its reverse: every reply sat at both ends
    judge.close()


def test_training_with_a_group_judge_logs_the_environment_s_reward_beside_the_judge_s(small_config, server):
    config = small_config(
        name="ranked",
        env="judged",
        env_args={"judge": {"model": server.url, "model_name": "scripted"}},
        group_judge={"model": server.url, "model_name": "scripted", "reference": "answer", "rounds": 2},
        tiny={"d_model": 32, "n_layers": 1, "n_heads": 2, "max_len": 512},
        warmstart_steps=0,
        steps=2,
        prompts_per_step=2,
        group_size=2,
        max_tokens=16,
        eval_size=2,
        eval_every=2,
        temperature=1.0,
    )
    result = Trainer.create(config, log=lambda _: None).run()
    records = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if "reward/mean" in r]
    assert len(train) == 2
    for record in train:
        assert {"reward/env", "reward/judge_rank", "reward/answered"} <= set(record)
        assert record["reward/mean"] == pytest.approx(record["reward/judge_rank"], abs=1e-3)
