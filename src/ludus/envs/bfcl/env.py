"""The ``bfcl`` environment: BFCL's single-turn function-calling items, one answer message each.

The task offers the item's functions as tools; the model answers with one assistant message of
tool calls (or none) and the episode ends there. Grading is :func:`ludus.envs.bfcl.matcher.match_calls`,
our own re-implementation of BFCL's AST checker (see docs/bfcl.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from ludus.core.env import Env, JsonTypes, Split, TaskSource
from ludus.core.types import Message, Observation, Score, Status, StepResult, Task, ToolCall, ToolSpec
from ludus.envs.bfcl.data import NO_CALL, SINGLE_TURN, SOME_CALL, is_eval, load_category
from ludus.envs.bfcl.matcher import match_calls

_JSON_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None}


def json_schema(bfcl: Any) -> Any:
    """BFCL's parameter schema as JSON schema ("dict"→object, "float"→number, "tuple"→array, "any"→untyped)."""
    if isinstance(bfcl, list):
        return [json_schema(x) for x in bfcl]
    if not isinstance(bfcl, dict):
        return bfcl
    out = {}
    for key, value in bfcl.items():
        if key == "type" and isinstance(value, str):
            mapped = _JSON_TYPES.get(value, value)
            if mapped is not None:
                out[key] = mapped
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: json_schema(spec) for name, spec in value.items()}
        else:
            out[key] = json_schema(value)
    return out


def tool_name(bfcl_name: str) -> str:
    """The name offered to the model: chat APIs allow no "." in tool names, so it becomes "_" (as BFCL does)."""
    return bfcl_name.replace(".", "_")


def tool_spec(function: dict[str, Any]) -> ToolSpec:
    parameters = json_schema(function.get("parameters", {}))
    parameters.setdefault("type", "object")
    return ToolSpec(tool_name(function["name"]), function.get("description", ""), parameters)


def first_choice(value: Any) -> Any:
    """The first allowed value, nested dicts of choice lists resolved too (the oracle's answer)."""
    if isinstance(value, dict):
        return {k: first_choice(v[0] if isinstance(v, list) else v) for k, v in value.items() if v != [""]}
    if isinstance(value, list):
        return [first_choice(v) for v in value]
    return value


class ListTasks:
    """A fixed list of tasks."""

    def __init__(self, tasks: list[Task]):
        self.tasks = tasks
        self.size: int | None = len(tasks)

    def get(self, index: int) -> Task:
        return self.tasks[index % len(self.tasks)]


class BFCLEnv(Env):
    name = "bfcl"
    description = "BFCL single-turn function calling: one message of tool calls, graded like BFCL's AST checker"
    reward_range: ClassVar[tuple[float, float]] = (0.0, 1.0)
    # a client's item: its conversation, its function schemas and the calls that answer it (data only)
    # no tasks from clients: the matcher pairs a reply's calls with the gold's in every order,
    # which a client's gold of a dozen parallel calls turns into hours of a server thread
    client_task_info: ClassVar[Mapping[str, JsonTypes] | None] = None
    requires: ClassVar[Mapping[str, str]] = {
        "bfcl_eval": "pip install --no-deps bfcl-eval==2026.3.23 (or pass path= a folder of BFCL's JSON files)"
    }

    def __init__(
        self,
        tasks: TaskSource | None = None,
        category: str = "simple",
        path: str | Path | None = None,
        eval_fraction: float = 0.2,
    ):
        if path is not None:
            self.requires = {}  # type: ignore[misc]  # a folder of BFCL's files stands in for the wheel (its data is all we read)
        super().__init__(tasks)
        categories = list(SINGLE_TURN) if category == "all_single" else [category]
        self.items = [t for c in categories for t in load_category(c, path)]
        self.eval_fraction = eval_fraction

    def default_tasks(self, split: Split = "train") -> TaskSource:
        want_eval = split != "train"
        chosen = [t for t in self.items if is_eval(t.id, self.eval_fraction) == want_eval]
        return ListTasks(chosen)

    def tools(self) -> list[ToolSpec]:
        return [tool_spec(f) for f in self.task.info["functions"]] if self.task else []

    def begin(self, task: Task) -> Observation:
        messages = [Message(m["role"], m["content"]) for m in task.info["messages"]]
        return Observation(messages, [tool_spec(f) for f in task.info["functions"]])

    def transition(self, action: Message) -> StepResult:
        assert self.task is not None
        score = self.grade(self.task, action.tool_calls)
        return StepResult(Observation([]), reward=score.value, terminated=True, score=score)

    def grade(self, task: Task, calls: list[ToolCall]) -> Score:
        category = task.info["category"]
        if category in NO_CALL:
            if calls:
                return Score(0.0, Status.WRONG, f"no call was right, got {len(calls)}")
            return Score(1.0, Status.CORRECT, "no call, as expected")
        if category in SOME_CALL:
            return (
                Score(1.0, Status.CORRECT, "called a function")
                if calls
                else Score(0.0, Status.NO_ANSWER, "a call was expected")
            )
        if not calls:
            return Score(0.0, Status.NO_ANSWER, "no tool call")
        offered = {tool_name(f["name"]): f["name"] for f in task.info["functions"]}
        named = [ToolCall(offered.get(c.name, "<not offered>" + c.name), c.arguments, c.id) for c in calls]
        problem = match_calls(named, task.info["functions"], task.answer)
        return Score(0.0, Status.WRONG, problem) if problem else Score(1.0, Status.CORRECT, "calls match")

    def reference_actions(self, task: Task) -> list[Message] | None:
        if task.info["category"] in NO_CALL:
            return [Message("assistant", "None of these functions fits the request.")]
        if task.info["category"] in SOME_CALL:
            return None
        calls = []
        for i, entry in enumerate(task.answer):
            ((name, params),) = entry.items()
            args = {k: first_choice(v[0]) for k, v in params.items() if v and v[0] != ""}
            calls.append(ToolCall(tool_name(name), args, id=f"call_{i}"))
        return [Message("assistant", "", tool_calls=calls)]

    def cheats(self, task: Task) -> Mapping[str, list[Message]]:
        functions = task.info["functions"]
        every = [ToolCall(tool_name(f["name"]), {}, id=f"c{i}") for i, f in enumerate(functions)]
        return {"call_every_function_without_arguments": [Message("assistant", "", tool_calls=every)]}
