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
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import SchemaError, ValidationError

from ludus.envs.synth.resources import Catalog, Resource
from ludus.envs.synth.spec import Operation

DEFAULT_PAGE = 10
MAX_PAGE = 100  # a page the document does not bound holds at most this many records
FORMATS = FormatChecker()


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
        for param in op.params:
            if param.name in arguments and (problem := invalid(arguments[param.name], param.schema, param.name)):
                return self._error(op, 400, problem)
        key = None
        if resource.id_param and resource.id_param in arguments:
            key = arguments[resource.id_param]
            if key not in table:
                return self._error(op, 404, f"no {resource.name} record with {resource.id_field} {key!r}")
        body = arguments.get("body")
        if op.body is not None:
            if body is None and op.body_required:
                return self._error(op, 400, "a request body is required")
            if body is not None and (problem := invalid(body, op.body)):
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
            if prop in record:
                continue
            if "default" in schema:
                record[prop] = copy.deepcopy(schema["default"])
            elif schema.get("enum"):
                record[prop] = copy.deepcopy(schema["enum"][0])
        return record

    def _next_id(self, resource: Resource) -> Any:
        table = self.tables[resource.name]
        kind = resource.properties.get(resource.id_field, {}).get("type", "integer")
        numbers = [k for k in table if isinstance(k, int) and not isinstance(k, bool)]
        if "integer" in (kind if isinstance(kind, list) else [kind]):
            return max(numbers, default=0) + 1
        n = len(table) + 1
        while f"{resource.name[:3]}-{n}" in table:
            n += 1
        return f"{resource.name[:3]}-{n}"

    def _error(self, op: Operation, status: int, message: str) -> Reply:
        """An error as the document declares it: its status if declared, else the declared
        ``4XX``/``default``, else the status itself."""
        declared = [int(s) for s in op.statuses if s.isdigit() and 400 <= int(s) < 500]
        if status not in declared and status == 400 and 422 in declared:
            status = 422
        return Reply(status, {"error": message})


def invalid(value: Any, schema: dict[str, Any], what: str = "the body") -> str | None:
    """Why ``value`` (``what``: the body, a parameter) does not fit ``schema`` (the first error,
    one line), or ``None``."""
    try:
        error = next(iter(Draft202012Validator(schema, format_checker=FORMATS).iter_errors(value)), None)
    except SchemaError as exc:  # the document's own schema is broken: the service cannot check
        return f"the service's schema is invalid: {exc.message[:200]}"
    if error is None:
        return None
    path = [str(p) for p in error.absolute_path]
    where = "/".join(path if what == "the body" and path else [what, *path])
    return f"{where}: {_message(error)}"[:300]


def _message(error: ValidationError) -> str:
    return error.message if len(error.message) <= 200 else error.message[:200] + "…"


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
