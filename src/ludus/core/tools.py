"""Tools as JSON-schema functions, derived from type-hinted Python functions.

    def add(a: int, b: int) -> int:
        '''Add two integers.

        Args:
            a: the first addend.
            b: the second addend.
        '''
        return a + b

    spec = tool_spec(add)   # ToolSpec(name="add", description="Add two integers.", parameters={...})

Arguments coming from a model are untrusted: :class:`Tool` checks them against the schema
and turns every mistake into an error string the model can read, never an exception.

A tool that is *deterministic* — the same arguments on the same environment state give the
same result — can be declared ``@tool(cacheable=True)``; a :class:`ToolCache` then runs each
distinct call once for every episode that shares the state (the G samples of a GRPO group
asking the same SQL query, say).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import threading
import types
import typing
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Literal, TypeVar, get_args, get_origin, overload

from ludus.core.types import InfraError, ToolCall, ToolSpec

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


F = TypeVar("F", bound=Callable[..., Any])


@overload
def tool(fn: F, *, name: str | None = None, cacheable: bool = False, honeypot: bool = False) -> F: ...
@overload
def tool(
    fn: None = None, *, name: str | None = None, cacheable: bool = False, honeypot: bool = False
) -> Callable[[F], F]: ...
def tool(fn: Any = None, *, name: str | None = None, cacheable: bool = False, honeypot: bool = False) -> Any:
    """Mark a function (or method) as a tool: ``name`` overrides its name; ``cacheable`` says
    it is deterministic given the environment's state, so a :class:`ToolCache` may reuse its
    results; ``honeypot`` says no legitimate solution calls it (see ``ToolEnv``). Plain
    type-hinted functions are tools without it."""

    def mark(f: F) -> F:
        f.__ludus_tool__ = {"name": name, "cacheable": cacheable, "honeypot": honeypot}  # type: ignore[attr-defined]
        return f

    return mark(fn) if fn is not None else mark


class Tool:
    """A Python function paired with its schema; calling it with model arguments never raises.
    The schema comes from the function's type hints and docstring, or is given whole (``spec``:
    a tool described by a document, such as an OpenAPI operation, whose function takes the
    arguments as keywords)."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None, spec: ToolSpec | None = None):
        marks = getattr(fn, "__ludus_tool__", {})
        self.fn = fn
        self.spec = spec or tool_spec(fn, name or marks.get("name"))
        self.cacheable: bool = marks.get("cacheable", False)
        self.honeypot: bool = marks.get("honeypot", False)

    @property
    def name(self) -> str:
        return self.spec.name

    def __call__(self, call: ToolCall) -> tuple[str, bool]:
        """Run the call; returns ``(text for the model, ok)``."""
        text, ok, _ = self.outcome(call)
        return text, ok

    def outcome(self, call: ToolCall) -> tuple[str, bool, bool]:
        """``(text for the model, ok, storable)``: whether a :class:`ToolCache` may keep it
        (a success, or a :class:`ToolError` marked deterministic)."""
        problem = validate_arguments(self.spec, call.arguments)
        if problem:
            return f"Error: {problem}", False, False
        try:
            result = self.fn(**call.arguments)
        except ToolError as exc:
            return f"Error: {exc}", False, exc.deterministic
        except InfraError:
            raise  # the episode is infra_error: see InfraError
        except Exception as exc:  # the tool's own failure is information for the model
            return f"Error: {self.name} failed: {type(exc).__name__}: {exc}", False, False
        return result if isinstance(result, str) else repr(result), True, True


class ToolError(Exception):
    """Raised by a tool to answer the model ``Error: <message>`` (counted as a failed call).
    ``deterministic=True`` says the same call on the same state always fails so — a query
    past its step budget — and a :class:`ToolCache` may keep the error like a result; other
    errors (a timeout on a busy machine) are never kept."""

    def __init__(self, message: str, *, deterministic: bool = False):
        super().__init__(message)
        self.deterministic = deterministic


class ToolCache:
    """Results of cacheable tool calls, shared by every environment instance given it.

    Thread-safe (environments run on many threads) and bounded (least recently used entries
    go first). Only successes and deterministic tool errors (:class:`ToolError`) are kept: another error
    may be transient. Concurrent misses on one key run the tool once; the others wait for its
    result (single flight)."""

    def __init__(self, max_entries: int = 10_000):
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self.hits = self.misses = 0
        self._data: OrderedDict[str, tuple[str, bool]] = OrderedDict()
        self._running: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(scope: str, call: ToolCall) -> str:
        """``scope`` names the state the result depends on (a database's hash, a task id)."""
        blob = json.dumps([scope, call.name, call.arguments], sort_keys=True, ensure_ascii=False, default=repr)
        return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()

    def run(self, key: str, call: Callable[[], tuple[str, bool, bool]]) -> tuple[str, bool, bool]:
        """``(text, ok)`` of ``call()`` (which adds whether it may be stored, see
        :meth:`Tool.outcome`) or of the stored outcome; the third value says it was stored."""
        while True:
            with self._lock:
                if key in self._data:
                    self._data.move_to_end(key)
                    self.hits += 1
                    return (*self._data[key], True)
                running = self._running.get(key)
                if running is None:
                    self._running[key] = done = threading.Event()
                    self.misses += 1
                    break
            running.wait()  # another thread runs this very call; then look again
        try:
            text, ok, storable = call()
            if storable:
                with self._lock:
                    self._data[key] = (text, ok)
                    if len(self._data) > self.max_entries:
                        self._data.popitem(last=False)
            return text, ok, False
        finally:
            with self._lock:
                del self._running[key]
            done.set()

    def __len__(self) -> int:
        return len(self._data)


# ---- tool calls written as text ----
# Local models (the tiny model, transformers checkpoints) write tool calls into their text, each
# model family in its own format; servers such as vLLM return them already parsed. Both end up as
# ``ToolCall``s on the assistant message. A call that cannot be read is not dropped: it becomes a
# ``ToolCall`` with an empty name and the raw text as ``arguments``, which a ``ToolEnv`` answers
# with an error the model can learn from (and counts), as it does any wrong call.


def unreadable_call(raw: str, index: int) -> ToolCall:
    """A tool call the model wrote but that is not a JSON object with a string ``name``."""
    return ToolCall("", raw[:2000], id=f"call_{index}")  # type: ignore[arg-type] - raw text on purpose


# A call nested deeper is no call: servers read earlier calls' arguments again deep in their own
# stack (vLLM's json.loads fails past a few hundred levels: a 500, and a masked episode).
MAX_CALL_DEPTH = 64
_CONTAINERS = frozenset((dict, list))  # what json.loads makes of objects and arrays


def nested_deeper(value: Any, levels: int) -> bool:
    """Whether JSON ``value`` nests lists and objects more than ``levels`` deep: level by level
    (no recursion), each container's items looked over in C (a list of token ids costs next to
    nothing)."""
    level = [value] if isinstance(value, dict | list) else []
    for _ in range(levels):
        below: list[Any] = []
        for item in level:
            children = item.values() if isinstance(item, dict) else item
            if not _CONTAINERS.isdisjoint(map(type, children)):
                below += [child for child in children if type(child) in _CONTAINERS]
        if not below:
            return False
        level = below
    return True


def _json(text: str) -> Any:
    """The JSON value ``text`` holds, or ``None``: not JSON, or nested past Python's recursion limit."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _encodable(data: Any) -> bool:
    """Whether a call can go back into a prompt: a lone surrogate escape (``\\ud800``) cannot be
    encoded — the next turn would fail, and a failed turn is masked, not scored."""
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except (ValueError, RecursionError):  # UnicodeEncodeError is a ValueError
        return False
    return True


def _call_from_json(data: Any, raw: str, index: int, arguments_key: str = "arguments") -> ToolCall:
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
        return unreadable_call(raw, index)
    if not _encodable(data) or nested_deeper(data, MAX_CALL_DEPTH):
        return unreadable_call(raw, index)
    arguments = data.get(arguments_key, data.get("arguments", {}))
    return ToolCall(data["name"], arguments, id=str(data.get("id") or f"call_{index}"))


class ToolCallFormat:
    """How one family of models writes tool calls in text: ``parse`` splits a reply into its
    content and its calls; ``render`` writes calls back the same way (for the conversation
    history of a model without a chat template)."""

    name: str = ""
    # whether the markers are special tokens in recent tokenizers ([TOOL_CALLS], <|python_tag|>):
    # a reply must then be decoded with special tokens kept for its calls to be seen
    special_markers: bool = False

    def parse(self, text: str) -> tuple[str, list[ToolCall]]:
        raise NotImplementedError

    def render(self, calls: list[ToolCall]) -> str:
        raise NotImplementedError


class HermesFormat(ToolCallFormat):
    """``<tool_call>{"name": …, "arguments": {…}}</tool_call>`` blocks anywhere in the reply
    (Hermes, Qwen 2.5/3 and many fine-tunes; the embedded tiny model's format)."""

    name = "hermes"
    _block = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)

    def parse(self, text: str) -> tuple[str, list[ToolCall]]:
        calls: list[ToolCall] = []

        def take(match: re.Match[str]) -> str:
            calls.append(_call_from_json(_json(match.group(1)), match.group(1), len(calls)))
            return ""

        content = self._block.sub(take, text)
        return (content.strip() if calls else content), calls

    def render(self, calls: list[ToolCall]) -> str:
        return "".join(
            f"<tool_call>{json.dumps({'name': c.name, 'arguments': c.arguments}, ensure_ascii=False)}</tool_call>"
            for c in calls
        )


class MistralFormat(ToolCallFormat):
    """``[TOOL_CALLS]`` then a JSON list of ``{"name", "arguments"}`` objects (Mistral and
    Mixtral instruct models); the text before the marker is the content."""

    name = "mistral"
    special_markers = True
    marker = "[TOOL_CALLS]"

    def parse(self, text: str) -> tuple[str, list[ToolCall]]:
        if self.marker not in text:
            return text, []
        content, _, raw = text.partition(self.marker)
        data = _json(raw)
        if data is None:
            return content.strip(), [unreadable_call(raw.strip(), 0)]
        items = data if isinstance(data, list) else [data]
        return content.strip(), [_call_from_json(item, json.dumps(item), i) for i, item in enumerate(items)]

    def render(self, calls: list[ToolCall]) -> str:
        if not calls:
            return ""
        return self.marker + json.dumps([{"name": c.name, "arguments": c.arguments} for c in calls], ensure_ascii=False)


class Llama3JsonFormat(ToolCallFormat):
    """Llama 3.1–3.3 JSON tool calls: the whole reply (optionally after ``<|python_tag|>``) is
    ``{"name": …, "parameters": {…}}``, several separated by ``;``. A reply that does not start
    like a call is plain content."""

    name = "llama3_json"
    special_markers = True
    tag = "<|python_tag|>"

    def parse(self, text: str) -> tuple[str, list[ToolCall]]:
        body = text.strip()
        tagged = body.startswith(self.tag)
        body = body.removeprefix(self.tag).strip()
        if not tagged and not re.match(r'^\{\s*"name"', body):
            return text, []
        calls: list[ToolCall] = []
        decoder = json.JSONDecoder()
        rest = body
        while rest:
            try:
                data, end = decoder.raw_decode(rest)
            except (ValueError, RecursionError):
                calls.append(unreadable_call(rest, len(calls)))
                break
            calls.append(_call_from_json(data, rest[:end], len(calls), arguments_key="parameters"))
            rest = rest[end:].strip().removeprefix(";").strip()
        return "", calls

    def render(self, calls: list[ToolCall]) -> str:
        return "; ".join(json.dumps({"name": c.name, "parameters": c.arguments}, ensure_ascii=False) for c in calls)


TOOL_CALL_FORMATS: dict[str, ToolCallFormat] = {
    f.name: f for f in (HermesFormat(), MistralFormat(), Llama3JsonFormat())
}


def tool_call_format(name: str) -> ToolCallFormat:
    """The format called ``name`` (``hermes``, ``mistral``, ``llama3_json``)."""
    try:
        return TOOL_CALL_FORMATS[name]
    except KeyError:
        raise ValueError(
            f"unknown tool-call format {name!r}; known: {', '.join(TOOL_CALL_FORMATS)} "
            "(pick the one the model was trained to write)"
        ) from None


def parse_tool_calls(text: str, format: str = "hermes") -> tuple[str, list[ToolCall]]:
    """Split a reply into its content and its tool calls, read in ``format``."""
    return tool_call_format(format).parse(text)


def render_tool_calls(calls: list[ToolCall], format: str = "hermes") -> str:
    """The text form of ``calls`` in ``format``, which :func:`parse_tool_calls` reads back."""
    return tool_call_format(format).render(calls)
