"""Our own AST-style matcher for BFCL answers (deny by default).

A possible answer is a list of ``{function: {param: [allowed values]}}``; ``""`` among the allowed
values means the parameter may be omitted. Calls match in any order, one answer entry per call.
"""

from __future__ import annotations

import re
from typing import Any

from ludus.core.types import ToolCall

_STRING_NOISE = re.compile(r"[ ,./\-_*^]")


def normalise(text: str) -> str:
    """Case, space and punctuation-insensitive form of a string, as BFCL compares strings."""
    return _STRING_NOISE.sub("", text).lower().replace("'", '"')


def type_ok(value: Any, bfcl_type: str) -> bool:
    """Whether ``value`` has BFCL type ``bfcl_type`` (an int is accepted for a float)."""
    if bfcl_type == "any":
        return True
    if bfcl_type == "boolean":
        return isinstance(value, bool)
    if bfcl_type == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if bfcl_type == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if bfcl_type == "string":
        return isinstance(value, str)
    if bfcl_type in ("array", "tuple"):
        return isinstance(value, list)
    if bfcl_type == "dict":
        return isinstance(value, dict)
    return False


def same_type_as_answer(value: Any, choices: list[Any]) -> bool:
    """BFCL lets a value of another type than declared pass when the answer itself has that type
    (e.g. a string naming a variable where an array is declared); then only the value decides."""
    answers = [c for c in choices if c != ""]
    return bool(answers) and type(value) is type(answers[0])


def value_matches(value: Any, allowed: Any) -> bool:
    """Whether ``value`` equals one allowed value, strings normalised, containers element by element."""
    if isinstance(value, str) and isinstance(allowed, str):
        return normalise(value) == normalise(allowed)
    if isinstance(value, list) and isinstance(allowed, list):
        return len(value) == len(allowed) and all(value_matches(v, a) for v, a in zip(value, allowed, strict=True))
    if isinstance(value, dict) and isinstance(allowed, dict):
        for key, choices in allowed.items():
            options = choices if isinstance(choices, list) else [choices]
            if key not in value:
                if "" not in options:
                    return False
            elif not any(value_matches(value[key], c) for c in options):
                return False
        return set(value) <= set(allowed)
    if isinstance(value, bool) or isinstance(allowed, bool):
        return value is allowed
    if isinstance(value, (int, float)) and isinstance(allowed, (int, float)):
        return value == allowed
    return False


def call_problem(call: ToolCall, function: dict[str, Any], expected: dict[str, list[Any]]) -> str | None:
    """Why ``call`` does not match one answer entry for ``function``, or None when it does."""
    properties = function.get("parameters", {}).get("properties", {})
    required = function.get("parameters", {}).get("required", [])
    if not isinstance(call.arguments, dict):
        return "arguments are not an object"
    for name in required:
        if name not in call.arguments:
            return f"missing required parameter {name!r}"
    for name, value in call.arguments.items():
        if name not in properties or name not in expected:
            return f"unexpected parameter {name!r}"
        choices = expected[name]
        if not type_ok(value, properties[name].get("type", "any")):
            if not same_type_as_answer(value, choices):
                return f"parameter {name!r} has the wrong type"
            if value not in choices:  # a variable name is compared exactly, as BFCL does
                return f"parameter {name!r} has a wrong value {value!r}"
            continue
        if value == [] and "" in choices:
            continue  # an empty list counts as leaving an optional list out, as in BFCL
        if not any(value_matches(value, c) for c in choices if c != "" or value == ""):
            return f"parameter {name!r} has a wrong value {value!r}"
    for name, choices in expected.items():
        if name not in call.arguments and "" not in choices:
            return f"missing parameter {name!r}"
    return None


def match_calls(calls: list[ToolCall], functions: list[dict[str, Any]], answer: list[dict[str, Any]]) -> str | None:
    """Why ``calls`` do not match ``answer`` (in any order), or None when they do."""
    if len(calls) != len(answer):
        return f"expected {len(answer)} call(s), got {len(calls)}"
    by_name = {f["name"]: f for f in functions}
    for call in calls:
        if call.name not in by_name:
            return f"unknown function {call.name!r}"

    def assign(i: int, used: frozenset[int]) -> bool:
        if i == len(answer):
            return True
        ((name, expected),) = answer[i].items()
        for j, call in enumerate(calls):
            if j not in used and call.name == name and call_problem(call, by_name[name], expected) is None:
                if assign(i + 1, used | {j}):
                    return True
        return False

    if assign(0, frozenset()):
        return None
    if len(answer) == 1:
        ((name, expected),) = answer[0].items()
        if calls[0].name != name:
            return f"wrong function {calls[0].name!r}, expected {name!r}"
        return call_problem(calls[0], by_name[name], expected)
    return "the calls do not match the expected calls in any order"
