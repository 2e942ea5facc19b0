"""Tools: schemas come from hints and docstrings; model-supplied arguments can never crash a tool call."""

from __future__ import annotations

from typing import Any, Literal, Optional

import pytest

from ludus.core import Score, Status, Task, ToolEnv
from ludus.core.tools import (
    TOOL_CALL_FORMATS,
    Tool,
    ToolSchemaError,
    parse_tool_calls,
    render_tool_calls,
    tool_spec,
    validate_arguments,
)
from ludus.core.types import InfraError, Message, ToolCall


def everything(
    n: int,
    x: float,
    s: str,
    flag: bool,
    ids: list[int],
    counts: dict[str, int],
    mode: Literal["fast", "slow"],
    maybe: int | None = None,
    label: Optional[str] = None,  # noqa: UP045 - the typing.Optional spelling must work too
    k: int = 3,
) -> str:
    """Exercise every supported parameter type.

    A second paragraph that belongs to the description.

    Args:
        n: how many.
        x (float): a number whose description
            continues on the next line.
        s: some text.
        flag: on or off.
        ids: which items.
        counts: tally per name.
        mode: how to run.
        maybe: an optional integer.
        label: an optional label.
        k: top k.

    Returns:
        A summary that must not leak into k's description.
    """
    return f"{n} {x} {s} {flag} {ids} {counts} {mode} {maybe} {label} {k}"


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first addend.
        b: the second addend.
    """
    return a + b


def divide(a: float, b: float) -> float:
    """Divide a by b."""
    return a / b


def test_schema_from_hints_and_google_docstring() -> None:
    spec = tool_spec(everything)
    assert spec.name == "everything"
    assert (
        spec.description
        == "Exercise every supported parameter type. A second paragraph that belongs to the description."
    )
    params = spec.parameters
    assert params["type"] == "object"
    assert params["additionalProperties"] is False
    assert params["required"] == ["n", "x", "s", "flag", "ids", "counts", "mode"]
    props = params["properties"]
    assert props["n"] == {"type": "integer", "description": "how many."}
    assert props["x"] == {"type": "number", "description": "a number whose description continues on the next line."}
    assert props["s"] == {"type": "string", "description": "some text."}
    assert props["flag"] == {"type": "boolean", "description": "on or off."}
    assert props["ids"] == {"type": "array", "items": {"type": "integer"}, "description": "which items."}
    assert props["counts"] == {
        "type": "object",
        "additionalProperties": {"type": "integer"},
        "description": "tally per name.",
    }
    assert props["mode"] == {"enum": ["fast", "slow"], "description": "how to run."}
    nullable_int = [{"type": "integer"}, {"type": "null"}]
    assert props["maybe"] == {"anyOf": nullable_int, "default": None, "description": "an optional integer."}
    nullable_str = [{"type": "string"}, {"type": "null"}]
    assert props["label"] == {"anyOf": nullable_str, "default": None, "description": "an optional label."}
    assert props["k"] == {"type": "integer", "default": 3, "description": "top k."}


def test_name_override_and_bound_methods_drop_self() -> None:
    class Counter:
        def bump(self, by: int = 1) -> int:
            """Increase the counter."""
            return by

    spec = tool_spec(Counter().bump, name="increment")
    assert spec.name == "increment"
    assert list(spec.parameters["properties"]) == ["by"]
    assert spec.parameters["required"] == []


def test_missing_docstring_is_an_error_naming_the_tool() -> None:
    def nodoc(a: int) -> int:
        return a

    with pytest.raises(ToolSchemaError, match=r"tool 'nodoc' needs a docstring"):
        tool_spec(nodoc)


def test_missing_type_hint_names_the_parameter() -> None:
    def partly(a: int, b) -> int:  # type: ignore[no-untyped-def]
        """Half typed."""
        return a

    with pytest.raises(ToolSchemaError, match=r"parameter 'b' of tool 'partly' has no type hint"):
        tool_spec(partly)


class Opaque:
    """A type with no JSON-schema equivalent."""


def test_unsupported_type_names_the_parameter() -> None:
    def uses(a: int, thing: Opaque) -> None:
        """Take something JSON cannot carry."""

    with pytest.raises(ToolSchemaError, match=r"parameter 'thing' of tool 'uses' has type"):
        tool_spec(uses)


def test_unresolvable_hint_is_a_schema_error() -> None:
    class LocalOnly:
        pass

    def uses(a: LocalOnly) -> None:
        """Take a type that get_type_hints cannot see (a local class under postponed annotations)."""

    with pytest.raises(ToolSchemaError, match=r"tool 'uses': cannot resolve its type hints: .*LocalOnly"):
        tool_spec(uses)


def test_var_args_are_rejected() -> None:
    def star(*values: int) -> int:
        """Sum values."""
        return sum(values)

    with pytest.raises(ToolSchemaError, match=r"\*args/\*\*kwargs"):
        tool_spec(star)


def test_valid_call_returns_text_and_ok() -> None:
    assert Tool(add)(ToolCall("add", {"a": 2, "b": 3})) == ("5", True)
    assert Tool(everything)(
        ToolCall(
            "everything",
            {"n": 1, "x": 2, "s": "a", "flag": True, "ids": [1], "counts": {"q": 1}, "mode": "slow", "maybe": None},
        )
    ) == ("1 2 a True [1] {'q': 1} slow None None 3", True)


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({"a": "2", "b": 3}, "argument 'a' of add must be integer"),
        ({"a": True, "b": 3}, "argument 'a' of add must be integer"),
        ({"a": 2.5, "b": 3}, "argument 'a' of add must be integer"),
        ({"a": 2}, "missing required argument(s): b"),
        ({"a": 2, "b": 3, "c": 4}, "unknown argument(s): c"),
        ("{'a': 2}", "must be a JSON object, got str"),
        ([2, 3], "must be a JSON object, got list"),
        (None, "must be a JSON object, got NoneType"),
    ],
)
def test_bad_arguments_give_error_text_not_exceptions(arguments: Any, fragment: str) -> None:
    text, ok = Tool(add)(ToolCall("add", arguments))
    assert not ok
    assert text.startswith("Error: ")
    assert fragment in text


@pytest.mark.parametrize(
    ("bad", "name"),
    [
        ({"ids": [1, "2"]}, "ids"),
        ({"counts": {"q": "1"}}, "counts"),
        ({"counts": [1]}, "counts"),
        ({"mode": "medium"}, "mode"),
        ({"maybe": "3"}, "maybe"),
        ({"flag": 1}, "flag"),
        ({"x": "1.5"}, "x"),
    ],
)
def test_nested_and_enum_types_are_checked(bad: dict[str, Any], name: str) -> None:
    good = {"n": 1, "x": 2.0, "s": "a", "flag": True, "ids": [1], "counts": {"q": 1}, "mode": "fast"}
    spec = tool_spec(everything)
    assert validate_arguments(spec, good) is None
    problem = validate_arguments(spec, {**good, **bad})
    assert problem is not None and f"argument {name!r}" in problem


def test_a_tool_that_raises_gives_error_text() -> None:
    text, ok = Tool(divide)(ToolCall("divide", {"a": 1, "b": 0}))
    assert not ok
    assert text == "Error: divide failed: ZeroDivisionError: division by zero"


def test_an_infrastructure_failure_in_a_tool_ends_the_episode_as_infra_error() -> None:
    def lookup(key: str) -> str:
        """Look a key up in a database that has gone away."""
        raise InfraError("the database server is down")

    with pytest.raises(InfraError):  # not shown to the model as the tool's error
        Tool(lookup)(ToolCall("lookup", {"key": "a"}))

    class Env(ToolEnv):
        name = "lookup"

        def tool_functions(self):
            return [lookup]

        def score(self, task, completion):
            return Score.zero(Status.WRONG, "unused")

    env = Env()
    env.reset(Task(id="t", prompt="look up a"))
    result = env.step(Message("assistant", "", tool_calls=[ToolCall("lookup", {"key": "a"}, id="1")]))
    assert result.done and result.score.status == Status.INFRA_ERROR and "server is down" in result.score.reason


def test_non_string_results_are_shown_as_repr() -> None:
    def pair(a: int) -> tuple[int, int]:
        """Pair up."""
        return (a, a)

    assert Tool(pair)(ToolCall("pair", {"a": 4})) == ("(4, 4)", True)


# ---- tool calls written as text, per model family ----

CALLS = [ToolCall("add", {"a": 1, "b": [2, 3]}, id="call_0"), ToolCall("now", {}, id="call_1")]


@pytest.mark.parametrize("name", sorted(TOOL_CALL_FORMATS))
def test_each_format_reads_back_what_it_writes(name):
    text = render_tool_calls(CALLS, name)
    assert parse_tool_calls(text, name) == ("", CALLS)
    assert parse_tool_calls("just an answer: 42", name) == ("just an answer: 42", [])


def test_open_model_formats_are_read_as_those_models_write_them():
    now = ToolCall("now", {}, id="call_0")
    assert parse_tool_calls('Sure.<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>') == ("Sure.", [now])
    mistral = parse_tool_calls('[TOOL_CALLS] [{"name": "now", "arguments": {}, "id": "abc123"}]', "mistral")
    assert mistral == ("", [ToolCall("now", {}, id="abc123")])
    llama = parse_tool_calls('<|python_tag|>{"name": "add", "parameters": {"a": 1, "b": [2, 3]}}', "llama3_json")
    assert llama == ("", [CALLS[0]])
    assert parse_tool_calls('{"name": "now", "parameters": {}}', "llama3_json") == ("", [now])


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("hermes", "<tool_call>{name: add}</tool_call>"),
        ("hermes", '<tool_call>{"arguments": {}}</tool_call>'),
        ("mistral", "[TOOL_CALLS] [{broken"),
        ("llama3_json", "<|python_tag|>{not json"),
    ],
)
def test_an_unreadable_call_becomes_an_error_for_the_model_not_an_answer(name, text):
    _, calls = parse_tool_calls(text, name)
    assert len(calls) == 1 and calls[0].name == ""

    class Env(ToolEnv):
        name = "adder"

        def tool_functions(self):
            return [add]

        def score(self, task, completion):
            return Score.zero(Status.WRONG, "unused")

    env = Env()
    env.reset(Task(id="t", prompt="add"))
    result = env.step(Message("assistant", "", tool_calls=calls))
    assert not result.done and result.info["tool_errors"] == 1
    assert result.observation.messages[0].content.startswith("Error: this tool call could not be read")


def test_unknown_formats_are_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="unknown tool-call format 'xml'; known: hermes, mistral, llama3_json"):
        parse_tool_calls("x", "xml")
