"""The judged environment: a rubric whose judge criterion asks an LLM judge over HTTP (the scripted judge on 127.0.0.1)."""

import json

import pytest

from ludus.core import registry
from ludus.envs.judged import JudgedEnv
from ludus.envs.judged.tasks import builtin_tasks
from ludus.rewards.scripted_judge import ScriptedJudgeServer


@pytest.fixture(scope="module")
def server():
    with ScriptedJudgeServer() as running:
        yield running


def play(env, task, reply):
    env.reset(task)
    return env.step(reply).score


def test_the_reference_passes_the_judge_and_an_empty_reply_never_reaches_it(server):
    env = JudgedEnv(judge={"model": server.url, "model_name": "scripted"})
    task = env.task_source("eval").get(0)
    before = server.stats()["requests"]
    score = play(env, task, env.reference(task))
    assert score.correct and score.components == {"answered": 1.0, "judge": 1.0}
    assert server.stats()["requests"] == before + 1
    empty = play(env, task, "   ")
    assert empty.status == "no_answer" and empty.value == 0.0 and empty.components["judge"] == 0.0
    assert server.stats()["requests"] == before + 1  # gated: the judge was not asked
    half = play(env, task, env.reference(task).split(";")[0] + ".")
    assert 0 < half.value < 1 and half.status == "partial"


def test_a_judge_that_cannot_give_a_verdict_is_an_infrastructure_failure_not_a_zero(server):
    env = JudgedEnv(judge={"model": server.url, "model_name": "scripted?malformed=9", "retries": 1})
    task = env.task_source("train").get(0)
    score = play(env, task, env.reference(task))
    assert score.status == "infra_error" and score.value == 0.0
    assert "criterion 'judge' failed" in score.reason and "no well-formed verdict in 2 attempts" in score.reason


def test_prompts_from_a_file_and_a_rubric_from_the_arguments(server, tmp_path):
    rows = [{"prompt": f"Name colour {i}.", "reference": f"- colour {i}\n- bright"} for i in range(8)]
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = registry.make(
        "judged",
        judge={"model": server.url, "model_name": "scripted"},
        path=str(path),
        rubric=[
            {"function": "env", "name": "judged", "weight": 2},
            {"function": "test_rubric:short", "name": "short", "weight": 1},
        ],
    )
    task = env.task_source("train").get(0)
    assert task.prompt.startswith("Name colour")
    score = play(env, task, "colour 0 is bright.")
    assert set(score.components) == {"judged", "short"} and score.components["judged"] == 1.0


def test_the_built_in_splits_are_disjoint():
    train, held_out = builtin_tasks("train"), builtin_tasks("eval")
    assert len(train) > len(held_out) > 0 and not {t.prompt for t in train} & {t.prompt for t in held_out}
