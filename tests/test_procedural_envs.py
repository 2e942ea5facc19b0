"""The procedural environments end to end: reset, step with gold / wrong / garbage replies."""

from __future__ import annotations

import pytest

from ludus.core import registry
from ludus.core.env import Env
from ludus.core.types import Task
from ludus.envs.procedural.env import ArithmeticEnv, CountdownEnv, LinearEquationEnv, SortingEnv


def wrong_reply(env: Env, task: Task) -> str:
    """A well-formed answer that is not correct."""
    if isinstance(env, CountdownEnv):
        return str(task.info["numbers"][0])  # never the target, by construction
    if isinstance(env, SortingEnv):
        return " ".join(str(v + 1) for v in task.answer)
    return str(task.answer + 1)


ENV_NAMES = ["arithmetic", "countdown", "sorting", "linear-equation"]


@pytest.mark.parametrize("name", ENV_NAMES)
@pytest.mark.parametrize("difficulty", [1, 4])
def test_gold_wrong_and_garbage(name: str, difficulty: int) -> None:
    env = registry.make(name, difficulty=difficulty, seed=3)
    assert env.name == name and env.description
    for i in range(5):
        obs = env.reset(seed=i)
        task = env.task
        assert task is not None and obs.messages[-1].content == task.prompt
        gold = env.reference(task)
        assert gold is not None
        result = env.step(gold)
        assert result.done and result.score is not None
        assert (result.reward, result.score.status) == (1.0, "correct"), result.score.reason

        env.reset(seed=i)
        result = env.step(wrong_reply(env, task))
        assert (result.reward, result.score.status) == (0.0, "wrong"), result.score.reason

        env.reset(seed=i)
        result = env.step("I don't know, sorry!")
        assert (result.reward, result.score.status) == (0.0, "format_error"), result.score.reason


@pytest.mark.parametrize("reply", ["x=5", "x = 5", "Answer: x = 5", "<answer>x=5</answer>", "5"])
def test_linear_accepts_x_equals(reply: str) -> None:
    env = LinearEquationEnv()
    env.reset(Task(id="t", prompt="3x+5=20, x=?", answer=5))
    assert env.step(reply).reward == 1.0


def test_linear_rejects_another_variable() -> None:
    env = LinearEquationEnv()
    env.reset(Task(id="t", prompt="3x+5=20, x=?", answer=5))
    assert env.step("y=5").score.status == "format_error"


def test_sorting_accepts_a_json_list() -> None:
    env = SortingEnv()
    env.reset(Task(id="t", prompt="sort asc: 3 1 2", answer=[1, 2, 3]))
    assert env.step("[1, 2, 3]").reward == 1.0


def test_countdown_scores_from_task_info() -> None:
    env = CountdownEnv()
    env.reset(Task(id="t", prompt="Use 2 3 4 to make 14", answer="2+3*4", info={"numbers": [2, 3, 4], "target": 14}))
    result = env.step("(2+3)*4")
    assert (result.reward, result.score.status) == (0.0, "wrong")


def test_explicit_params_and_difficulty_are_exclusive() -> None:
    env = SortingEnv(length=4, low=0, high=3, ops="asc")
    task = env.task_source().get(0)
    assert task.prompt.startswith("sort asc: ") and len(task.answer) == 4
    with pytest.raises(ValueError, match="not both"):
        SortingEnv(difficulty=2, length=4)
    with pytest.raises(TypeError):
        CountdownEnv(digits=3)


def test_eval_split_is_held_out() -> None:
    env = CountdownEnv(difficulty=1, eval_fraction=0.2)
    train = {env.task_source("train").get(i).prompt for i in range(100)}
    held_out = {env.task_source("eval").get(i).prompt for i in range(100)}
    assert not train & held_out


def test_envs_are_registered_builtins() -> None:
    for name, cls in zip(ENV_NAMES, (ArithmeticEnv, CountdownEnv, SortingEnv, LinearEquationEnv), strict=True):
        assert registry.env_class(name) is cls
