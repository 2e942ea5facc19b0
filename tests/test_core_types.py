"""Every core type must survive JSON unchanged: trajectories are logged, replayed and served as JSON lines."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from ludus.core.types import (
    Message,
    Observation,
    Score,
    Status,
    StepResult,
    Task,
    ToolCall,
    ToolSpec,
    Trajectory,
    Turn,
)

CALL = ToolCall("lookup", {"key": "π", "depth": 2, "tags": ["a", None], "nested": {"x": 1.5}}, id="call_1")
SPEC = ToolSpec(
    "lookup",
    "Look a key up.",
    {
        "type": "object",
        "properties": {"key": {"type": "string", "description": "what to find"}, "depth": {"type": "integer"}},
        "required": ["key"],
        "additionalProperties": False,
    },
)
SCORE = Score(0.5, Status.PARTIAL, "half the tests pass", components={"tests": 0.5, "format": 1.0}, extracted="42")
MESSAGES = [
    Message("system", "Be brief."),
    Message("user", "What is 6×7? 日本語 ✓"),
    Message("assistant", "", tool_calls=[CALL]),
    Message("tool", "found", tool_call_id="call_1", name="lookup"),
    Message("assistant", "<answer>42</answer>"),
]
TASK = Task("t/1", "What is 6×7?", answer=[4, 2], info={"numbers": [6, 7], "meta": {"level": 3}}, source="unit")

SAMPLES: list[Any] = [
    TASK,
    Task("t/2", "no answer"),
    *MESSAGES,
    CALL,
    ToolCall("noargs"),
    SPEC,
    ToolSpec("bare", "No parameters."),
    Observation(MESSAGES[:2], [SPEC]),
    Observation([Message("user", "hi")]),
    StepResult(Observation([MESSAGES[3]]), reward=0.25, info={"elapsed_ms": 3}),
    StepResult(Observation([]), reward=1.0, terminated=True, score=SCORE),
    StepResult(Observation([]), truncated=True, score=Score.zero(Status.TRUNCATED, "turn limit")),
    SCORE,
    Score(0.0, "custom_status", "env-specific outcome"),
    Turn([1, 2, 3], [4, 5], [-0.1, -2.5], reward=0.5, finish_reason="length"),
    Trajectory(
        TASK,
        MESSAGES,
        turns=[Turn([1], [2], [-0.3], 1.0)],
        score=SCORE,
        env="arithmetic",
        seed=7,
        policy_version=3,
        tools=[SPEC],
        info={"group": 1},
    ),
    Trajectory(Task("t/3", "p"), [Message("user", "p")]),
]


@pytest.mark.parametrize("obj", SAMPLES, ids=lambda o: type(o).__name__)
def test_json_round_trip(obj: Any) -> None:
    data = obj.to_dict()
    text = json.dumps(data)  # to_dict must be plain JSON data, no dataclasses or enums left
    assert type(obj).from_dict(json.loads(text)) == obj
    assert type(obj).from_json(obj.to_json()) == obj
    assert "\n" not in obj.to_json()  # one object, one JSON line


def test_unicode_is_kept_readable_in_json() -> None:
    line = Message("user", "6×7 ✓").to_json()
    assert "6×7 ✓" in line


def test_tool_spec_accepts_openai_function_form() -> None:
    openai = SPEC.to_openai()
    assert openai["type"] == "function" and openai["function"]["name"] == "lookup"
    assert ToolSpec.from_dict(openai) == SPEC
    assert ToolSpec.from_json(json.dumps(openai)) == SPEC


def test_message_tool_calls_become_tool_call_objects() -> None:
    back = Message.from_json(MESSAGES[2].to_json())
    assert isinstance(back.tool_calls[0], ToolCall)
    assert back.tool_calls[0].arguments["nested"] == {"x": 1.5}


def test_unknown_keys_are_ignored_for_forward_compatibility() -> None:
    data = {**TASK.to_dict(), "added_in_a_later_version": True}
    assert Task.from_dict(data) == TASK


def test_step_result_done_and_trajectory_reward() -> None:
    assert StepResult(Observation([]), terminated=True).done
    assert StepResult(Observation([]), truncated=True).done
    assert not StepResult(Observation([])).done
    traj = Trajectory(TASK, [], turns=[Turn([], [], [], 0.25), Turn([], [], [], 0.5)])
    assert traj.reward == 0.75
    assert traj.to_dict()["schema"] == Trajectory.SCHEMA_VERSION


def test_score_normalises_value_and_status() -> None:
    score = Score(1, Status.CORRECT)
    assert isinstance(score.value, float) and score.value == 1.0
    assert type(score.status) is str and score.status == "correct"
    assert Score.zero(Status.INFRA_ERROR, "sandbox died").is_infra_error
    assert not SCORE.is_infra_error


def test_bad_role_is_rejected_with_the_allowed_roles() -> None:
    with pytest.raises(ValueError, match=r"role must be one of .*'robot'"):
        Message("robot", "hi")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="role"):
        Message.from_dict({"role": "bot", "content": "x"})


def test_non_string_content_is_rejected() -> None:
    with pytest.raises(TypeError, match="content must be a string"):
        Message("user", 42)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, "1.0", None])
def test_score_value_must_be_a_finite_number(value: Any) -> None:
    with pytest.raises(ValueError, match="finite number"):
        Score(value)
    with pytest.raises(ValueError, match="finite number"):
        Score.from_dict({"value": value})


@pytest.mark.parametrize(
    "cls",
    [Task, Message, ToolCall, ToolSpec, Observation, StepResult, Score, Turn, Trajectory],
    ids=lambda c: c.__name__,
)
@pytest.mark.parametrize("data", [[1, 2], "text", 3, None], ids=["list", "str", "int", "null"])
def test_from_dict_rejects_non_objects_by_name(cls: type, data: Any) -> None:
    with pytest.raises(TypeError, match=rf"{cls.__name__}\.from_dict expects a JSON object"):
        cls.from_dict(data)


def test_missing_required_field_is_named() -> None:
    with pytest.raises(TypeError, match="'id'"):
        Task.from_dict({"prompt": "x"})
