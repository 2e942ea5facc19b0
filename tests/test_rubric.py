"""Rubrics: weighted criteria, gates, components, and a broken criterion is infra_error, never a number."""

import pytest

from ludus.core.rubric import Criterion, Rubric, reward_function
from ludus.core.types import InfraError, Score, Status, Task

TASK = Task(id="t", prompt="Say hello in a box.", answer="hello")
calls: list[str] = []


def boxed(task, completion):
    return "\\boxed{" in completion


def says_answer(task, completion):
    calls.append(completion)
    return Score(1.0) if task.answer in completion else Score.zero(Status.WRONG, f"no {task.answer!r}")


def short(task, completion):
    return max(0.0, 1 - len(completion) / 100)


RUBRIC = Rubric(
    [
        Criterion("format", boxed),
        Criterion("answer", says_answer, weight=3, gate="format"),
        Criterion("short", short, pass_at=0.5),
    ]
)


def test_every_criterion_passes():
    score = RUBRIC.score(TASK, "\\boxed{hello}")
    assert score.status == "correct" and score.correct
    assert score.components == {"format": 1.0, "answer": 1.0, "short": pytest.approx(0.87)}
    assert score.value == pytest.approx((1 + 3 + 0.87) / 5)


def test_a_gate_keeps_the_gated_criterion_from_running():
    calls.clear()
    score = RUBRIC.score(TASK, "hello")
    assert calls == []  # the answer check never saw an unboxed completion
    assert score.components == {"format": 0.0, "answer": 0.0, "short": pytest.approx(0.95)}
    assert score.status == "partial" and not score.correct
    assert "answer: not run, format did not pass" in score.reason


def test_a_failing_criterion_names_itself_and_keeps_its_status():
    score = RUBRIC.score(TASK, "\\boxed{goodbye}")
    assert score.status == "partial" and "answer: no 'hello'" in score.reason
    alone = Rubric([Criterion("answer", says_answer)]).score(TASK, "goodbye")
    assert alone.value == 0 and alone.status == "wrong"


@pytest.mark.parametrize(
    "broken",
    [
        lambda task, completion: 1 / 0,
        lambda task, completion: 1.7,
        lambda task, completion: float("nan"),
        lambda task, completion: "1",
        lambda task, completion: Score.zero(Status.INFRA_ERROR, "judge server down"),
        lambda task, completion: (_ for _ in ()).throw(InfraError("judge server down")),
    ],
)
def test_a_broken_criterion_makes_the_whole_score_infra_error(broken):
    score = Rubric([Criterion("format", boxed), Criterion("judge", broken)]).score(TASK, "\\boxed{hello}")
    assert score.status == "infra_error" and score.value == 0.0
    assert "criterion 'judge' failed" in score.reason


def test_bad_rubrics_are_refused_when_built():
    with pytest.raises(ValueError, match="not a criterion before it"):
        Rubric([Criterion("a", boxed, gate="b"), Criterion("b", boxed)])
    with pytest.raises(ValueError, match="two criteria"):
        Rubric([Criterion("a", boxed), Criterion("a", short)])
    with pytest.raises(ValueError, match="weight"):
        Criterion("a", boxed, weight=0)
    with pytest.raises(ValueError, match="at least one"):
        Rubric([])


def test_from_config_loads_functions_by_import_path():
    rubric = Rubric.from_config(
        [
            {"function": "test_rubric:boxed", "name": "format"},
            {"function": "test_rubric:says_answer", "weight": 3, "gate": "format"},
        ]
    )
    score = rubric.score(TASK, "\\boxed{hello}")
    assert score.correct and score.components == {"format": 1.0, "says_answer": 1.0}
    with pytest.raises(ValueError, match="no reward function 'no-such-reward'"):
        reward_function("no-such-reward")
    with pytest.raises(ValueError, match="could not be loaded"):
        reward_function("test_rubric:missing")
    with pytest.raises(ValueError, match="unknown keys"):
        Rubric.from_config([{"function": "test_rubric:boxed", "wieght": 2}])
