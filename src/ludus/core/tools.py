"""Tools as JSON-schema functions, derived from type-hinted Python functions.

    def add(a: int, b: int) -> int:
        '''Add two integers.

        Args:
            a: the first addend.
            b: the second addend.
        '''
        return a + b

    spec = tool_spec(add)   # ToolSpec(name="add", description="Add two integers.", parameters={...})

Arguments coming from a model are untrusted: :func:`call_tool` checks them against the
schema and turns every mistake into an error string the model can read, never an exception.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, get_args, get_origin

from ludus.core.types import ToolCall, ToolSpec

_SCALARS: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


class ToolSchemaError(TypeError):
    """A Python function cannot be described as a JSON-schema tool (say which parameter and why)."""


def _schema_for(annotation: Any, where: str) -> dict[str, Any]:
    if annotation is inspect.Parameter.empty:
        raise ToolSchemaError(f"{where} has no type hint; tools need one on every parameter")
    if annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}
    if annotation is Any:
        return {}
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (list, tuple, set, frozenset) or annotation in (list, tuple):
        items = [a for a in args if a is not Ellipsis]
        schema: dict[str, Any] = {"type": "array"}
        if items:
            schema["items"] = _schema_for(items[0], where)
        return schema
    if origin is dict or annotation is dict:
        schema = {"type": "object"}
        if len(args) == 2:
            schema["additionalProperties"] = _schema_for(args[1], where)
        return schema
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            inner = _schema_for(options[0], where)
            return {"anyOf": [inner, {"type": "null"}]} if type(None) in args else inner
        return {"anyOf": [_schema_for(a, where) for a in args]}
    raise ToolSchemaError(f"{where} has type {annotation!r}, which has no JSON-schema equivalent")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Summary (text before ``Args:``) and per-parameter descriptions (Google style)."""
    doc = inspect.cleandoc(doc or "")
    parts = re.split(r"^\s*(?:Args|Arguments|Parameters):\s*$", doc, maxsplit=1, flags=re.M)
    summary = " ".join(parts[0].split())
    params: dict[str, str] = {}
    if len(parts) == 2:
        current = None
        for line in parts[1].splitlines():
            m = re.match(r"^\s*(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", line)
            if m:
                current = m.group(1)
                params[current] = m.group(2).strip()
            elif re.match(r"^\S", line):
                break  # a new section (Returns:, Raises:) ends the argument list
            elif current and line.strip():
                params[current] += " " + line.strip()
    return summary, params


def tool_spec(fn: Callable[..., Any], name: str | None = None) -> ToolSpec:
    """Describe ``fn`` as a :class:`ToolSpec` from its signature, type hints and docstring."""
    tool_name = name or fn.__name__
    summary, param_docs = _parse_docstring(fn.__doc__ or "")
    if not summary:
        raise ToolSchemaError(f"tool {tool_name!r} needs a docstring: it is the description the model reads")
    try:
        hints = typing.get_type_hints(fn)
    except NameError as exc:  # a string annotation naming something not importable where fn lives
        raise ToolSchemaError(f"tool {tool_name!r}: cannot resolve its type hints: {exc}") from exc
    properties: dict[str, Any] = {}
    required: list[str] = []
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolSchemaError(f"tool {tool_name!r}: *args/**kwargs cannot be described to a model")
        schema = _schema_for(hints.get(pname, param.annotation), f"parameter {pname!r} of tool {tool_name!r}")
        if pname in param_docs:
            schema["description"] = param_docs[pname]
        if param.default is inspect.Parameter.empty:
            required.append(pname)
        else:
            schema["default"] = param.default
        properties[pname] = schema
    parameters = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return ToolSpec(name=tool_name, description=summary, parameters=parameters)


def _type_ok(value: Any, schema: dict[str, Any]) -> bool:
    if "enum" in schema:
        return value in schema["enum"]
    if "anyOf" in schema:
        return any(_type_ok(value, s) for s in schema["anyOf"])
    kind = schema.get("type")
    if kind is None:
        return True
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "array":
        return isinstance(value, list) and all(_type_ok(v, schema.get("items", {})) for v in value)
    if kind == "object":
        extra = schema.get("additionalProperties", {})
        return isinstance(value, dict) and all(
            _type_ok(v, extra if isinstance(extra, dict) else {}) for v in value.values()
        )
    return False


def validate_arguments(spec: ToolSpec, arguments: Any) -> str | None:
    """``None`` if ``arguments`` fit ``spec``'s schema, else a sentence saying what is wrong."""
    if not isinstance(arguments, dict):
        return f"arguments to {spec.name} must be a JSON object, got {type(arguments).__name__}"
    props: dict[str, Any] = spec.parameters.get("properties", {})
    missing = [p for p in spec.parameters.get("required", []) if p not in arguments]
    if missing:
        return f"{spec.name} is missing required argument(s): {', '.join(missing)}"
    unknown = [a for a in arguments if a not in props]
    if unknown:
        return f"{spec.name} got unknown argument(s): {', '.join(map(str, unknown))}; it takes {', '.join(props) or 'none'}"
    for pname, value in arguments.items():
        if not _type_ok(value, props[pname]):
            want = props[pname].get("type") or props[pname].get("enum") or "a valid value"
            return f"argument {pname!r} of {spec.name} must be {want}, got {value!r:.80}"
    return None


class Tool:
    """A Python function paired with its schema; calling it with model arguments never raises."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None):
        self.fn = fn
        self.spec = tool_spec(fn, name)

    @property
    def name(self) -> str:
        return self.spec.name

    def __call__(self, call: ToolCall) -> tuple[str, bool]:
        """Run the call; returns ``(text for the model, ok)``."""
        problem = validate_arguments(self.spec, call.arguments)
        if problem:
            return f"Error: {problem}", False
        try:
            result = self.fn(**call.arguments)
        except Exception as exc:  # the tool's own failure is information for the model
            return f"Error: {self.name} failed: {type(exc).__name__}: {exc}", False
        return result if isinstance(result, str) else repr(result), True


# ---- tool calls written as text ----
# Local models (the tiny model, transformers checkpoints) write tool calls into their text, in
# the common ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` form; servers such as
# vLLM return them already parsed. Both end up as ``ToolCall``s on the assistant message.

_CALL_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall]]:
    """Split a reply into its content and its tool calls. A block that is not a JSON object
    with a string ``name`` is not a call and stays in the content, where the environment
    reads it as text; ``arguments`` is passed on as written (tools check it, see ``call_tool``)."""
    calls: list[ToolCall] = []

    def take(match: re.Match[str]) -> str:
        try:
            data = json.loads(match.group(1))
        except ValueError:
            return match.group(0)
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            return match.group(0)
        calls.append(ToolCall(data["name"], data.get("arguments", {}), id=f"call_{len(calls)}"))
        return ""

    content = _CALL_BLOCK.sub(take, text)
    return (content.strip() if calls else content), calls


def render_tool_calls(calls: list[ToolCall]) -> str:
    """The text form of ``calls`` that :func:`parse_tool_calls` reads back."""
    return "".join(
        f"<tool_call>{json.dumps({'name': c.name, 'arguments': c.arguments}, ensure_ascii=False)}</tool_call>"
        for c in calls
    )
