"""An OpenAPI 3.0/3.1 document read into the operations a tool environment can offer.

What the reading keeps is what a simulation can honour: JSON bodies and path and query
parameters, with every local ``$ref`` resolved. Everything else is listed in
:attr:`Spec.skipped` with the reason (a cookie parameter, a body that is not JSON, a reference
to another file), never dropped silently. A document that is not an OpenAPI 3.x description at
all raises :class:`SpecError` naming where and why.
"""

from __future__ import annotations

import copy
import json
import re
import re._constants as _sre
import re._parser as _sre_parser
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

METHODS = ("get", "put", "post", "delete", "patch")  # head, options and trace change nothing a task asks for
MAX_REF_DEPTH = 4  # a recursive schema is unrolled this deep, then any object
MAX_ENUM = 100  # a longer enum stays in the validation, not in the tool's description
MAX_DOCUMENT_BYTES = 20_000_000
MAX_NESTING = 100  # mappings and lists within each other in the document; deeper is refused, never a RecursionError
MAX_SCHEMA_DEPTH = 64  # schemas within each other once references are inlined
MAX_OPERATION_NODES = 20_000  # schema nodes one operation's inlined schemas may hold (references can multiply)
MAX_DOCUMENT_NODES = 5_000_000  # and the whole document's (a few seconds of work)
SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")  # name -> schema
SCHEMA_VALUES = ("items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else",
                 "unevaluatedProperties", "unevaluatedItems", "additionalItems", "contentSchema")  # fmt: skip
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what OpenAI-compatible servers accept


class SpecError(ValueError):
    """A document that is no OpenAPI 3.x description this reader can use; the message says
    where (a JSON pointer or a line) and what to do."""


@dataclass(frozen=True)
class Param:
    name: str
    location: str  # "path" or "query"
    schema: dict[str, Any]
    required: bool
    description: str = ""


@dataclass(frozen=True)
class Operation:
    """One HTTP operation. ``name`` is its tool's name: the ``operationId`` made safe, or the
    method and path for an operation without one. ``body`` is the JSON schema of its
    ``application/json`` request body; ``statuses`` the response codes the document declares."""

    name: str
    method: str
    path: str
    description: str
    params: tuple[Param, ...]
    body: dict[str, Any] | None
    body_required: bool
    statuses: tuple[str, ...]
    responses: dict[str, dict[str, Any] | None] = field(default_factory=dict)  # status -> JSON schema

    @property
    def label(self) -> str:
        return f"{self.method.upper()} {self.path}"


@dataclass(frozen=True)
class Skipped:
    where: str  # "POST /pets/{id}/photo", "GET /pets parameter X-Trace", ...
    why: str


@dataclass
class Spec:
    title: str
    version: str  # the API's own version (info.version)
    openapi: str  # the document's OpenAPI version
    operations: list[Operation]
    skipped: list[Skipped]
    notes: list[Skipped] = field(default_factory=list)  # kept, but changed: a recursive schema cut, an enum not shown

    def operation(self, name: str) -> Operation:
        for op in self.operations:
            if op.name == name:
                return op
        raise KeyError(name)


def load_spec(source: str | Path | dict[str, Any]) -> Spec:
    """Read an OpenAPI 3.0/3.1 document: a file (JSON or YAML), its text, or the parsed mapping."""
    document = _parse(source) if not isinstance(source, dict) else source
    if _nesting(document) > MAX_NESTING:
        raise SpecError(f"the document nests mappings and lists more than {MAX_NESTING} deep; no API description does")
    if not isinstance(document, dict):
        raise SpecError(f"an OpenAPI document is a mapping at its top level, got {type(document).__name__}")
    version = document.get("openapi")
    if version is None and "swagger" in document:
        raise SpecError(
            f"this is a Swagger {document.get('swagger')} document: only OpenAPI 3.0 and 3.1 are read; convert it "
            "first (for example with swagger2openapi or the Swagger Editor's 'Convert to OpenAPI 3')"
        )
    if not isinstance(version, str) or not re.fullmatch(r"3\.[01]\.\d+(-rc\d+)?", version):
        raise SpecError(f"'openapi' must be a 3.0.x or 3.1.x version string, got {version!r}")
    info = document.get("info")
    if not isinstance(info, dict) or not isinstance(info.get("title"), str) or not info["title"].strip():
        raise SpecError("'info.title' is missing: an OpenAPI document names its API there")
    paths = document.get("paths", {})
    if not isinstance(paths, dict):
        raise SpecError(f"'paths' must be a mapping of paths to operations, got {type(paths).__name__}")
    reader = _Reader(document)
    operations: list[Operation] = []
    for path, item in paths.items():
        if not isinstance(path, str) or not path.startswith("/"):
            reader.skip(f"path {path!r}", "a path must start with '/'")
            continue
        try:
            item = reader.resolve(item)
        except _Unresolvable as exc:
            reader.skip(f"path {path}", str(exc))
            continue
        if not isinstance(item, dict):
            reader.skip(f"path {path}", "its path item is not a mapping")
            continue
        shared = item.get("parameters", [])
        for method in METHODS:
            if method in item:
                op = reader.operation(path, method, item[method], shared)
                if op is not None:
                    operations.append(op)
        for other in sorted(set(item) - {*METHODS, "parameters", "summary", "description", "servers", "$ref"}):
            if other in ("head", "options", "trace"):
                reader.skip(f"{other.upper()} {path}", f"{other.upper()} changes nothing a task can ask for")
            elif not other.startswith("x-"):
                reader.skip(f"path {path} field {other!r}", "not a field of an OpenAPI path item")
    _name_operations(operations)
    return Spec(
        title=info["title"].strip(),
        version=str(info.get("version", "")),
        openapi=version,
        operations=operations,
        skipped=reader.skipped,
        notes=reader.notes,
    )


def _parse(source: str | Path) -> Any:
    text = source
    where = "the document"
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source and len(source) < 4096):
        path = Path(source)
        if not path.is_file():
            raise SpecError(f"{source}: no such file (pass an OpenAPI document's path, or its text)")
        if path.stat().st_size > MAX_DOCUMENT_BYTES:
            raise SpecError(f"{source}: larger than {MAX_DOCUMENT_BYTES // 1_000_000} MB; no API description is")
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise SpecError(f"{source}: not UTF-8 text (byte {exc.start})") from None
        where = str(source)
    assert isinstance(text, str)
    if len(text) > MAX_DOCUMENT_BYTES:
        raise SpecError(f"the document is larger than {MAX_DOCUMENT_BYTES // 1_000_000} MB; no API description is")
    try:
        return json.loads(text)
    except ValueError:
        pass
    except RecursionError:
        raise SpecError(f"{where} nests more than {MAX_NESTING} deep; no API description does") from None
    try:
        return yaml.load(text, Loader=_SafeLoader)  # noqa: S506 - a safe loader without aliases' blow-up
    except RecursionError:
        raise SpecError(f"{where} nests more than {MAX_NESTING} deep; no API description does") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise SpecError(f"{where} is neither JSON nor YAML{at}: {getattr(exc, 'problem', exc)}") from None


class _SafeLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing aliases: a document of nested aliases (a 'billion laughs')
    expands to gigabytes; API descriptions do not need them."""

    def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.YAMLError(f"YAML aliases (*{event.anchor}) are not read, at line {event.start_mark.line + 1}")
        return super().compose_node(parent, index)


class _Unresolvable(Exception):
    pass


class _Reader:
    """Resolves references and reads operations, noting what it leaves out."""

    def __init__(self, document: dict[str, Any]):
        self.document = document
        self.skipped: list[Skipped] = []
        self.notes: list[Skipped] = []
        self.budget = MAX_OPERATION_NODES  # what the operation being read may still inline
        self.spent = 0  # what the whole document has

    def spend(self, nodes: int) -> None:
        """Count ``nodes`` inlined: references can multiply a small document into billions of
        nodes (each of N schemas referring twice to the next), like YAML's aliases."""
        self.budget -= nodes
        self.spent += nodes
        if self.spent > MAX_DOCUMENT_NODES:
            raise SpecError(f"the document's schemas expand to more than {MAX_DOCUMENT_NODES} nodes once references "
                            "are inlined")  # fmt: skip
        if self.budget < 0:
            raise _Unresolvable(
                f"its schemas expand to more than {MAX_OPERATION_NODES} nodes once references are inlined"
            )

    def skip(self, where: str, why: str) -> None:
        self.skipped.append(Skipped(where, why))

    def note(self, where: str, why: str) -> None:
        if Skipped(where, why) not in self.notes:
            self.notes.append(Skipped(where, why))

    def pointer(self, ref: str) -> Any:
        if not ref.startswith("#"):
            raise _Unresolvable(f"$ref {ref!r} points into another document; only references within this one are read")
        node: Any = self.document
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise _Unresolvable(f"$ref {ref!r} points to nothing in this document")
        return node

    def resolve(self, node: Any) -> Any:
        """``node`` with a top-level ``$ref`` followed (a chain of them too)."""
        seen: tuple[str, ...] = ()
        while isinstance(node, dict) and isinstance(node.get("$ref"), str):
            ref = node["$ref"]
            if ref in seen:
                raise _Unresolvable(f"$ref {ref!r} refers to itself")
            seen = (*seen, ref)
            node = self.pointer(ref)
        return node

    def schema(self, node: Any, where: str, stack: tuple[str, ...] = (), depth: int = 0) -> dict[str, Any]:
        """A JSON schema with every reference inlined. A schema that contains itself (a tree's
        node) is unrolled ``MAX_REF_DEPTH`` times, then any object, and noted."""
        if not isinstance(node, dict):
            raise _Unresolvable(f"a schema must be a mapping, got {type(node).__name__}")
        if depth > MAX_SCHEMA_DEPTH:
            raise _Unresolvable(f"its schemas nest more than {MAX_SCHEMA_DEPTH} deep once references are inlined")
        self.spend(1)
        if isinstance(node.get("$ref"), str):
            ref = node["$ref"]
            if stack.count(ref) >= MAX_REF_DEPTH:
                self.note(where, f"the recursive schema {ref} is cut after {MAX_REF_DEPTH} levels (deeper: any object)")
                return {"type": "object"}
            siblings = {k: v for k, v in node.items() if k != "$ref"}  # 3.1 allows keywords beside $ref
            target = self.schema(self.pointer(ref), where, (*stack, ref), depth + 1)
            return {**target, **self.schema(siblings, where, stack, depth + 1)} if siblings else target
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in SCHEMA_MAPS and isinstance(value, dict):
                out[key] = {k: self.schema(v, where, stack, depth + 1) for k, v in value.items()}
            elif key in SCHEMA_VALUES and isinstance(value, dict):
                out[key] = self.schema(value, where, stack, depth + 1)
            elif key in ("allOf", "anyOf", "oneOf", "prefixItems") and isinstance(value, list):
                out[key] = [self.schema(v, where, stack, depth + 1) for v in value]
            else:
                self.spend(_size(value))
                out[key] = copy.deepcopy(value)
                if key == "enum" and isinstance(value, list) and len(value) > MAX_ENUM:
                    self.note(
                        where, f"an enum of {len(value)} values is checked but not listed in the tool's description"
                    )
        if out.get("nullable") is True and isinstance(out.get("type"), str):  # 3.0's nullable is 3.1's type list
            out["type"] = [out["type"], "null"]
        out.pop("nullable", None)
        for bound in ("Minimum", "Maximum"):  # 3.0's boolean exclusiveMinimum is 3.1's number (True == 1 otherwise)
            flag = out.get(f"exclusive{bound}")
            if isinstance(flag, bool):
                out.pop(f"exclusive{bound}")
                if flag and bound.lower() in out:
                    out[f"exclusive{bound}"] = out.pop(bound.lower())
        if isinstance(out.get("pattern"), str) and (why := slow_pattern(out["pattern"])):
            self.note(where, f"the pattern {out.pop('pattern')[:80]!r} is not checked: {why}")
        if isinstance(out.get("patternProperties"), dict):
            for pattern in [p for p in out["patternProperties"] if slow_pattern(p)]:
                out["patternProperties"].pop(pattern)
                self.note(where, f"the property names pattern {pattern[:80]!r} is not checked: {slow_pattern(pattern)}")
        return out

    def operation(self, path: str, method: str, node: Any, shared: Any) -> Operation | None:
        label = f"{method.upper()} {path}"
        self.budget = MAX_OPERATION_NODES
        try:
            node = self.resolve(node)
            if not isinstance(node, dict):
                raise _Unresolvable("the operation is not a mapping")
            params = self.params(label, [*_as_list(shared), *_as_list(node.get("parameters"))])
            body, body_required = self.body(label, node.get("requestBody"))
            responses = self.responses(label, node.get("responses"))
        except _Unresolvable as exc:
            self.skip(label, str(exc))
            return None
        if params is None or body is False:
            return None
        templated = set(re.findall(r"{([^{}]+)}", path))
        declared = {p.name for p in params if p.location == "path"}
        if templated != declared:
            missing = sorted(templated - declared) or sorted(declared - templated)
            self.skip(label, f"path parameter(s) {', '.join(missing)} in the path and its parameters do not match")
            return None
        words = [str(node.get(k, "")).strip() for k in ("summary", "description")]
        description = ". ".join(w.rstrip(".") for w in words if w) or label
        op_id = node.get("operationId")
        return Operation(
            name=op_id if isinstance(op_id, str) else "",
            method=method,
            path=path,
            description=description,
            params=tuple(params),
            body=body if isinstance(body, dict) else None,
            body_required=body_required,
            statuses=tuple(responses),
            responses=responses,
        )

    def params(self, label: str, raw: list[Any]) -> list[Param] | None:
        by_key: dict[tuple[str, str], Param] = {}  # an operation's parameter overrides the path's of that name
        for i, node in enumerate(raw):
            node = self.resolve(node)
            if not isinstance(node, dict) or not isinstance(node.get("name"), str) or "in" not in node:
                raise _Unresolvable(f"parameter {i} has no 'name' and 'in'")
            name, where = node["name"], node["in"]
            if where in ("header", "cookie"):
                if node.get("required"):
                    self.skip(label, f"the required {where} parameter {name!r}: a simulation has no headers or cookies")
                    return None
                self.note(label, f"the optional {where} parameter {name!r} is left out")
                continue
            if where not in ("path", "query"):
                raise _Unresolvable(f"parameter {name!r} is 'in: {where}', not path, query, header or cookie")
            if "schema" not in node:
                self.skip(label, f"parameter {name!r} has no schema (only 'content'): not read")
                return None
            by_key[(where, name)] = Param(
                name,
                where,
                self.schema(node["schema"], f"{label} parameter {name}"),
                bool(node.get("required")) or where == "path",
                str(node.get("description", "")).strip(),
            )
        return list(by_key.values())

    def body(self, label: str, node: Any) -> tuple[dict[str, Any] | bool | None, bool]:
        """The JSON body's schema; ``False`` when the operation is skipped (a body it cannot send)."""
        if node is None:
            return None, False
        node = self.resolve(node)
        if not isinstance(node, dict) or not isinstance(node.get("content"), dict):
            raise _Unresolvable("the request body has no 'content'")
        content = node["content"]
        json_type = next((t for t in content if _is_json(t)), None)
        required = bool(node.get("required"))
        if json_type is None:
            if required:
                self.skip(label, f"the request body is {', '.join(content)}, not JSON")
                return False, required
            self.note(label, f"the optional {', '.join(content)} body is left out")
            return None, False
        media = content[json_type] if isinstance(content[json_type], dict) else {}
        return self.schema(media.get("schema", {}), f"{label} body"), required

    def responses(self, label: str, node: Any) -> dict[str, dict[str, Any] | None]:
        out: dict[str, dict[str, Any] | None] = {}
        for status, response in (node or {}).items() if isinstance(node, dict) else []:
            response = self.resolve(response)
            schema = None
            content = response.get("content") if isinstance(response, dict) else None
            if isinstance(content, dict):
                json_type = next((t for t in content if _is_json(t)), None)
                if json_type is not None and isinstance(content[json_type], dict) and "schema" in content[json_type]:
                    schema = self.schema(content[json_type]["schema"], f"{label} response {status}")
            out[str(status)] = schema
        return out


def _name_operations(operations: list[Operation]) -> None:
    """Give every operation a unique tool name: its ``operationId`` with anything a tool name
    cannot hold replaced by ``_``, else the method and path (``get_pets_petId``)."""
    taken: set[str] = set()
    for i, op in enumerate(operations):
        base = op.name or f"{op.method}_{op.path}"
        name = re.sub(r"[^A-Za-z0-9-]+", "_", base).strip("_")[:60] or op.method
        candidate, n = name, 2
        while candidate in taken:
            candidate, n = f"{name[:57]}_{n}", n + 1
        taken.add(candidate)
        operations[i] = replace(op, name=candidate)


def _nesting(value: Any) -> int:
    """How deep mappings and lists nest in ``value`` (iteratively: a deep document must not
    exhaust Python's stack), counted up to one past ``MAX_NESTING``."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        node, depth = todo.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, depth)
            if depth > MAX_NESTING:
                break
            todo.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def _size(value: Any) -> int:
    """The number of values within ``value`` (itself included)."""
    count, todo = 0, [value]
    while todo:
        node = todo.pop()
        count += 1
        if isinstance(node, dict):
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
    return count


_REPEATS = (_sre.MAX_REPEAT, _sre.MIN_REPEAT, _sre.POSSESSIVE_REPEAT)


def slow_pattern(pattern: str) -> str | None:
    """Why checking text against ``pattern`` can take exponential time (Python's ``re``
    backtracks: ``^(a+)+$`` on forty a's and a ``!`` never ends), or why it is no pattern
    ``re`` reads; ``None`` for a pattern safe to check. Flagged: a repeated part holding a
    repeat of variable length (``(a+)+``, ``(\\w{1,3})*``), or alternatives that can start
    with the same character (``(ab|ac)+``)."""
    try:
        tree = _sre_parser.parse(pattern)
    except (re.error, RecursionError, OverflowError, ValueError, TypeError) as exc:
        return f"not a regular expression Python reads ({exc})"
    return "a repeat within a repeat can take exponential time to check" if _ambiguous(list(tree), False) else None


def _ambiguous(items: list[Any], repeated: bool) -> bool:
    for op, av in items:
        if op in _REPEATS:
            low, high, sub = av
            if (repeated and low != high) or _ambiguous(list(sub), repeated or high > 1):
                return True
        elif op is _sre.SUBPATTERN or op is _sre.ATOMIC_GROUP:
            if _ambiguous(list(av[-1] if op is _sre.SUBPATTERN else av), repeated):
                return True
        elif op is _sre.BRANCH:
            alternatives = [list(a) for a in av[1]]
            if repeated and _overlap([_first(a) for a in alternatives]):
                return True
            if any(_ambiguous(a, repeated) for a in alternatives):
                return True
        elif op in (_sre.ASSERT, _sre.ASSERT_NOT):
            if _ambiguous(list(av[1]), repeated):
                return True
        elif op is _sre.GROUPREF_EXISTS:
            if any(branch is not None and _ambiguous(list(branch), repeated) for branch in av[1:]):
                return True
    return False


def _first(items: list[Any]) -> set[int] | None:
    """The characters a match of ``items`` can start with; ``None`` when any (or none) can."""
    for op, av in items:
        if op is _sre.AT:
            continue
        if op is _sre.LITERAL:
            return {av}
        if op is _sre.SUBPATTERN:
            return _first(list(av[-1]))
        if op is _sre.IN and all(o in (_sre.LITERAL, _sre.RANGE) for o, _ in av):
            chars: set[int] = set()
            for o, v in av:
                if o is _sre.RANGE and v[1] - v[0] > 1000:
                    return None
                chars |= {v} if o is _sre.LITERAL else set(range(v[0], v[1] + 1))
            return chars
        return None
    return None


def _overlap(firsts: list[set[int] | None]) -> bool:
    if any(f is None for f in firsts):
        return True
    seen: set[int] = set()
    for chars in firsts:
        if seen & chars:  # type: ignore[operator]
            return True
        seen |= chars  # type: ignore[operator]
    return False


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _is_json(media_type: str) -> bool:
    base = media_type.split(";")[0].strip().lower()
    return base == "application/json" or base.endswith("+json")


def _escape(path: str) -> str:
    return path.replace("~", "~0").replace("/", "~1")
