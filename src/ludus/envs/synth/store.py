"""The simulated service: records in memory, changed only by the operations the document declares.

Each call is checked as the service would check it — path parameters and the body against
their JSON schemas (``jsonschema``, formats included), a record that does not exist is a 404 —
and answered with a status and a JSON body. What the simulation decides on its own (a new
record's id, a required property the create body does not carry) follows one rule each, listed
in docs/synth.md. Nothing here trusts the caller: arguments come from a model.
"""

from __future__ import annotations

import copy
import json
import math
import re
import uuid
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker, validators
from jsonschema.exceptions import SchemaError, ValidationError
from referencing.exceptions import Unresolvable

from ludus.envs.synth.resources import Catalog, Resource, merged
from ludus.envs.synth.spec import Operation

DEFAULT_PAGE = 10
MAX_PAGE = 100  # a page the document does not bound holds at most this many records
FORMATS = FormatChecker()
MAX_DEPTH = 32  # arrays and objects within each other in a call's arguments
MAX_VALUES = 10_000  # values in a call's arguments
MAX_TEXT = 10_000  # characters of one string (or key) in a call's arguments
MAX_PATTERN_TEXT = 2_000  # characters of a string checked against a pattern (re backtracks)


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any = None

    def text(self) -> str:
        """What the model reads: the status and the body as JSON."""
        return json.dumps({"status": self.status, "body": self.body}, ensure_ascii=False, sort_keys=True)


class Store:
    """Every resource's records, by id. ``records`` is the initial data (deep-copied)."""

    def __init__(self, catalog: Catalog, records: dict[str, list[dict[str, Any]]]):
        self.catalog = catalog
        self.tables: dict[str, dict[Any, dict[str, Any]]] = {}
        for resource in catalog.resources:
            rows = copy.deepcopy(records.get(resource.name, []))
            self.tables[resource.name] = {row[resource.id_field]: row for row in rows}
        self.issued: dict[str, int] = {name: len(table) for name, table in self.tables.items()}  # ids never reused
        self.ops: dict[str, tuple[Resource, str]] = {
            op.name: (resource, verb) for resource in catalog.resources for verb, op in resource.operations.items()
        }

    def snapshot(self) -> dict[str, dict[Any, dict[str, Any]]]:
        return copy.deepcopy(self.tables)

    def call(self, name: str, arguments: dict[str, Any]) -> Reply:
        """Run operation ``name`` with a tool call's ``arguments`` (its path and query parameters,
        and ``body``); already checked against the tool's schema by the caller."""
        resource, verb = self.ops[name]
        op = resource.operations[verb]
        table = self.tables[resource.name]
        if problem := unreadable(arguments):  # before anything copies or checks them
            return self._error(op, 400, problem)
        for param in op.params:
            if param.name in arguments and (problem := invalid(arguments[param.name], param.schema, param.name)):
                return self._error(op, 400, problem)
        key = None
        if resource.id_param and resource.id_param in arguments:
            key = _find(table, arguments[resource.id_param])
            if key is None:
                shown = arguments[resource.id_param]
                return self._error(op, 404, f"no {resource.name} record with {resource.id_field} {shown!r:.80}")
        body = copy.deepcopy(arguments.get("body"))  # the store keeps nothing the caller holds
        if op.body is not None:
            if body is None and op.body_required:
                return self._error(op, 400, "a request body is required")
            if body is not None and (problem := invalid(body, request_schema(op.body, _read_only(resource)))):
                return self._error(op, 400, problem)
        if verb == "list":
            return self._list(resource, op, arguments)
        if verb == "read":
            return Reply(_success(op, 200), copy.deepcopy(table[key]))
        if verb == "delete":
            del table[key]
            return Reply(_success(op, 204), None)
        if verb == "create":
            record = self._new_record(resource, body or {})
            if (problem := invalid(record, resource.schema)) is not None:
                return self._error(op, 400, problem)
            table[record[resource.id_field]] = record
            return Reply(_success(op, 201), copy.deepcopy(record))
        # replace (PUT: the body is the whole record) or update (PATCH: the fields it carries)
        record = {resource.id_field: key, **(body or {})} if verb == "replace" else {**table[key], **(body or {})}
        for prop in _read_only(resource):  # the service's fields stay the service's
            if prop in table[key]:
                record[prop] = table[key][prop]
        record[resource.id_field] = table[key][resource.id_field]  # a record keeps its id, readOnly or not
        if (problem := invalid(record, resource.schema)) is not None:
            return self._error(op, 400, problem)
        table[key] = record
        return Reply(_success(op, 200), copy.deepcopy(record))

    def _list(self, resource: Resource, op: Operation, arguments: dict[str, Any]) -> Reply:
        rows = [r for _, r in sorted(self.tables[resource.name].items(), key=lambda kv: _order(kv[0]))]
        for param, prop in resource.filters.items():
            if param in arguments:
                rows = [r for r in rows if r.get(prop) == arguments[param]]
        total = len(rows)
        if resource.paging is not None:
            size_name, position_name = resource.paging
            params = {p.name: p for p in op.params}
            size_schema = params[size_name].schema
            size = _whole(arguments.get(size_name, size_schema.get("default", DEFAULT_PAGE)), DEFAULT_PAGE)
            size = max(1, min(size, _whole(size_schema.get("maximum", MAX_PAGE), MAX_PAGE)))
            position = _whole(arguments.get(position_name, params[position_name].schema.get("default", 0)), 0)
            if _beyond(arguments.get(position_name)):  # past any page there is: an empty one, not the first
                position = 10**9
            start = position if position_name == "offset" else (max(position, 1) - 1) * size
            rows = rows[start : start + size]
        else:
            rows = rows[:MAX_PAGE]
        rows = copy.deepcopy(rows)
        if resource.envelope is None:
            return Reply(_success(op, 200), rows)
        body: dict[str, Any] = {resource.envelope: rows}
        if resource.total:
            body[resource.total] = total
        return Reply(_success(op, 200), body)

    def _new_record(self, resource: Resource, body: dict[str, Any]) -> dict[str, Any]:
        """The record a create makes: the body, a new id, and for each required property the body
        does not carry its default, else its first enum value (a new order is ``pending``)."""
        record = {k: v for k, v in body.items() if k not in _read_only(resource)}
        record[resource.id_field] = self._next_id(resource)
        for prop in resource.schema.get("required", []):
            schema = resource.properties.get(prop, {})
            schema = merged(schema) if isinstance(schema, dict) else {}  # a default or an enum within allOf too
            if prop in record:
                continue
            if "default" in schema:
                record[prop] = copy.deepcopy(schema["default"])
            elif schema.get("enum"):
                record[prop] = copy.deepcopy(schema["enum"][0])
        return record

    def _next_id(self, resource: Resource) -> Any:
        """The next id no record of ``resource`` has had: a deleted record's id is not given
        again (a record deleted and made anew is a new record, as in a real service)."""
        table = self.tables[resource.name]
        numbers = [k for k in table if isinstance(k, int) and not isinstance(k, bool)]
        n = max([self.issued[resource.name], *numbers]) + 1
        while record_id(resource, n) in table:
            n += 1
        self.issued[resource.name] = n
        return record_id(resource, n)

    def _error(self, op: Operation, status: int, message: str) -> Reply:
        """An error as the document declares it: its status if declared, else the declared
        ``4XX``/``default``, else the status itself."""
        declared = [int(s) for s in op.statuses if s.isdigit() and 400 <= int(s) < 500]
        if status not in declared and status == 400 and 422 in declared:
            status = 422
        return Reply(status, {"error": message})


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Any:
    """``pattern`` as jsonschema checks it, on strings short enough for ``re``'s backtracking
    (the reading of the document drops the patterns that backtrack exponentially: spec.py)."""
    if not validator.is_type(instance, "string"):
        return
    if len(instance) > MAX_PATTERN_TEXT:
        yield ValidationError(f"a text checked against a pattern may hold at most {MAX_PATTERN_TEXT} characters")
    elif not re.search(pattern, instance):
        yield ValidationError(f"{instance[:80]!r} does not match {pattern[:80]!r}")


Validator = validators.extend(Draft202012Validator, {"pattern": _pattern})
BROKEN = (Unresolvable, re.error, TypeError, ValueError, KeyError, AttributeError, ArithmeticError, RecursionError)


def invalid(value: Any, schema: dict[str, Any], what: str = "the body") -> str | None:
    """Why ``value`` (``what``: the body, a parameter) does not fit ``schema`` (the first error,
    one line), or ``None``."""
    try:
        error = next(iter(Validator(schema, format_checker=FORMATS).iter_errors(value)), None)
    except SchemaError as exc:  # the document's own schema is broken: the service cannot check
        return f"the service's schema is invalid: {exc.message[:200]}"
    except BROKEN as exc:  # a keyword of the wrong type, a $ref to nothing: the document's mistake
        return f"the service's schema cannot be checked: {type(exc).__name__}: {str(exc)[:200]}"
    if error is None:
        return None
    path = [str(p) for p in error.absolute_path]
    where = "/".join(path if what == "the body" and path else [what, *path])
    return f"{where}: {_message(error)}"[:300]


def _message(error: ValidationError) -> str:
    return error.message if len(error.message) <= 200 else error.message[:200] + "…"


def unreadable(value: Any) -> str | None:
    """Why ``value`` (a call's arguments) is no JSON a service reads — nested too deep, too
    large, a NaN or an infinity — or ``None``. Checked before anything copies or validates it."""
    count, todo = 0, [(value, 0)]
    while todo:
        node, depth = todo.pop()
        count += 1
        if count > MAX_VALUES:
            return f"the request holds more than {MAX_VALUES} values"
        if isinstance(node, float) and not math.isfinite(node):
            return f"{node} is not a JSON number"
        if isinstance(node, str) and len(node) > MAX_TEXT:
            return f"a text of {len(node)} characters; at most {MAX_TEXT}"
        if isinstance(node, (dict, list)):
            if depth >= MAX_DEPTH:
                return f"the request nests more than {MAX_DEPTH} deep"
            if isinstance(node, dict):
                todo.extend((k, depth + 1) for k in node)
            todo.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return None


def request_schema(schema: dict[str, Any], read_only: list[str]) -> dict[str, Any]:
    """``schema`` as a request is checked by it: a ``readOnly`` property listed as required is
    required of responses only (OpenAPI): a client need not send the id the service sets."""
    if not read_only or not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if isinstance(out.get("required"), list):
        out["required"] = [r for r in out["required"] if r not in read_only]
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(out.get(key), list):
            out[key] = [request_schema(part, read_only) for part in out[key]]
    return out


def record_id(resource: Resource, n: int) -> Any:
    """The id of the ``n``-th record of ``resource`` (from 1): ``n`` where ids are numbers; for
    text ids the first of ``abc-n``, ``n`` and a UUID (named by the resource and ``n``) that fits
    the id's schema (its format, length or pattern), else ``abc-n`` (the records are refused)."""
    schema = resource.properties.get(resource.id_field, {})
    schema = schema if isinstance(schema, dict) else {}
    kind = schema.get("type", "integer")
    kinds = kind if isinstance(kind, list) else [kind]
    if "integer" in kinds or ("number" in kinds and "string" not in kinds):
        return n
    made = str(uuid.uuid5(uuid.NAMESPACE_URL, f"ludus-synth:{resource.name}:{n}"))
    tries = [made] if schema.get("format") == "uuid" else [f"{resource.name[:3]}-{n}", str(n), made]
    return next((t for t in tries if invalid(t, schema) is None), tries[0])


def _find(table: dict[Any, Any], key: Any) -> Any:
    """The key of ``table`` a path parameter names, or ``None``: in a URL every id is text, so
    ``"3"`` finds record 3 (a document may declare its path parameters as strings)."""
    if isinstance(key, bool) or not isinstance(key, (str, int, float)):
        return None  # true is no id, and a list or an object names no record
    if key in table:
        return next(k for k in table if k == key)  # the table's own key: 3.0 finds record 3
    return next((k for k in table if str(k) == str(key)), None)


def _beyond(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 10**9


def _read_only(resource: Resource) -> list[str]:
    return [p for p, s in resource.properties.items() if s.get("readOnly")]


def _success(op: Operation, usual: int) -> int:
    codes = sorted(int(s) for s in op.statuses if s.isdigit() and 200 <= int(s) < 300)
    return usual if usual in codes or not codes else codes[0]


def _whole(value: Any, fallback: int) -> int:
    """A paging number as an int (a schema without a type lets a model send anything)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 10**9 else fallback


def _order(key: Any) -> tuple[int, Any]:
    return (0, key) if isinstance(key, int) else (1, str(key))
