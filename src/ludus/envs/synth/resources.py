"""The resources an OpenAPI document's operations act on, found from its paths.

A *collection* is a path whose last segment is a word (``/products``); its *item* path adds one
parameter (``/products/{productId}``). Their operations are read as the usual REST verbs: list
(``GET`` collection: query parameters named after a property filter by equality, ``limit`` and
``offset`` or ``page`` and ``per_page`` page), create (``POST`` collection), read (``GET`` item),
replace (``PUT`` item), update (``PATCH`` item) and delete (``DELETE`` item). An operation that
is none of these (``POST /orders/{id}/refund``), a collection under another's item
(``/customers/{id}/orders``) or a resource whose records have no schema cannot be simulated from
the document alone: each is reported in :attr:`Catalog.skipped` with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ludus.envs.synth.spec import Operation, Skipped, Spec

PAGING = (("limit", "offset"), ("per_page", "page"), ("page_size", "page"))
VERBS = {("get", False): "list", ("post", False): "create", ("get", True): "read", ("put", True): "replace",
         ("patch", True): "update", ("delete", True): "delete"}  # fmt: skip


@dataclass
class Resource:
    """One collection of records and the operations on it."""

    name: str  # the collection's last segment: "products"
    collection: str  # "/products"
    item: str | None = None  # "/products/{productId}"
    id_param: str | None = None  # "productId"
    id_field: str = "id"
    schema: dict[str, Any] = field(default_factory=dict)  # one record's JSON schema (allOf merged)
    operations: dict[str, Operation] = field(default_factory=dict)  # verb -> operation
    filters: dict[str, str] = field(default_factory=dict)  # list's query parameter -> the property it matches
    paging: tuple[str, str] | None = None  # (size, position) query parameters of list
    envelope: str | None = None  # the list response's property holding the records (None: a bare array)
    total: str | None = None  # the list response's property counting every match

    def honoured(self, op: Operation) -> list[str]:
        """The parameters of ``op`` the simulation reads: all of them, but for list only its
        filters and paging."""
        if op is not self.operations.get("list"):
            return [p.name for p in op.params]
        return [p.name for p in op.params if p.name in self.filters or p.name in (self.paging or ())]

    @property
    def properties(self) -> dict[str, dict[str, Any]]:
        return self.schema.get("properties", {})

    def writable(self) -> list[str]:
        """Properties a client sets: every one but the id and those marked ``readOnly``."""
        return [p for p, s in self.properties.items() if p != self.id_field and not s.get("readOnly")]


@dataclass
class Catalog:
    title: str
    resources: list[Resource]
    skipped: list[Skipped]
    notes: list[Skipped]

    def resource(self, name: str) -> Resource:
        for r in self.resources:
            if r.name == name:
                return r
        raise KeyError(name)


def catalog(spec: Spec) -> Catalog:
    """The resources of ``spec``; the operations and parameters it cannot simulate, with reasons."""
    skipped, notes = list(spec.skipped), list(spec.notes)
    found: dict[str, Resource] = {}
    for op in spec.operations:
        parts = [p for p in op.path.split("/") if p]
        is_item = bool(parts) and _is_param(parts[-1])
        base = parts[:-1] if is_item else parts
        if not base or any(_is_param(p) for p in base) or _is_param(base[-1]):
            why = (
                "an operation on the root" if not base else "a path under a record (a nested collection, or an action)"
            )
            skipped.append(Skipped(op.label, f"{why}: only top-level collections and their records are simulated"))
            continue
        verb = VERBS.get((op.method, is_item))
        if verb is None:
            skipped.append(Skipped(op.label, f"{op.method.upper()} on a {'record' if is_item else 'collection'} is no "
                                             "create, read, update or delete: its effect is not in the document"))  # fmt: skip
            continue
        collection = "/" + "/".join(base)
        resource = found.setdefault(collection, Resource(name=base[-1], collection=collection))
        if is_item:
            if resource.item not in (None, op.path):
                skipped.append(Skipped(op.label, f"a second record path for {collection} (first: {resource.item})"))
                continue
            resource.item, resource.id_param = op.path, parts[-1][1:-1]
        if verb in resource.operations:
            skipped.append(Skipped(op.label, f"a second {verb} operation for {collection}"))
            continue
        resource.operations[verb] = op
    kept = []
    for resource in found.values():
        parent = next((c for c in found if resource.collection.startswith(c + "/")), None)
        if parent is not None:  # /pet/findByStatus beside /pet: a search or an action, not a table of its own
            why = f"a path under the collection {parent} (a search, a view or an action on it): its effect is not in "
            why += "the document"
            skipped += [Skipped(op.label, why) for op in resource.operations.values()]
            continue
        problem = _complete(resource, notes)
        if problem:
            skipped += [Skipped(op.label, problem) for op in resource.operations.values()]
        else:
            kept.append(resource)
    return Catalog(spec.title, kept, skipped, notes)


def merged(schema: dict[str, Any]) -> dict[str, Any]:
    """A schema with ``allOf`` folded in (properties and required lists joined, an enum, a
    format or a bound a part has and the schema does not taken from it), the shape the
    simulation reads records and values by: 3.0 wraps a ``$ref`` in ``allOf`` to add a default."""
    out = {k: v for k, v in schema.items() if k != "allOf"}
    for part in schema.get("allOf", []) if isinstance(schema.get("allOf"), list) else []:
        if not isinstance(part, dict):
            continue
        part = merged(part)
        if out.get("type") is None:  # the first part that has a type gives it
            out["type"] = part.get("type")
        for key, value in part.items():
            if key not in ("properties", "required", "additionalProperties", "type", "readOnly", "writeOnly"):
                out.setdefault(key, value)
        if isinstance(part.get("properties"), dict):
            out["properties"] = {**out.get("properties", {}), **part["properties"]}
        if isinstance(part.get("required"), list):
            out["required"] = [*out.get("required", []),
                               *[r for r in part["required"] if r not in out.get("required", [])]]  # fmt: skip
        if part.get("additionalProperties") is False and "additionalProperties" not in out:
            out["additionalProperties"] = False
    if out.get("type") is None and "properties" in out:
        out["type"] = "object"
    return out


def _complete(resource: Resource, notes: list[Skipped]) -> str | None:
    """Fill in ``resource``'s record schema, id, filters and paging; the reason it cannot be
    simulated, if any."""
    ops = resource.operations
    schema = _record_schema(resource)
    if schema is None:
        return f"no schema of a {resource.name} record in any response of its operations"
    resource.schema = schema
    props = resource.properties
    id_field = next((p for p in (resource.id_param, "id") if p and p in props), None)
    if resource.item and id_field is None:
        return f"the records of {resource.collection} have no property 'id' or {resource.id_param!r} to find them by"
    resource.id_field = id_field or "id"
    if "list" in ops:
        listing = ops["list"]
        names = {p.name for p in listing.params if p.location == "query"}
        resource.paging = next(((size, pos) for size, pos in PAGING if size in names and pos in names), None)
        for param in listing.params:
            if param.location != "query" or (resource.paging and param.name in resource.paging):
                continue
            if param.name in props:
                resource.filters[param.name] = param.name
            elif param.required:
                return f"{listing.label} requires the query parameter {param.name!r}, which matches no property"
            else:
                notes.append(Skipped(listing.label, f"the query parameter {param.name!r} matches no property of a "
                                                    "record: left out of the tool"))  # fmt: skip
        resource.envelope, resource.total = _envelope(listing, resource)
    if id_field is None:  # no record path, no id: the simulation numbers the records itself
        resource.schema = {**schema, "properties": {**props, "id": {"type": "integer", "readOnly": True}}}
        notes.append(Skipped(resource.collection, "its records have no id in the document: the simulation numbers "
                                                  "them (a readOnly 'id')"))  # fmt: skip
    return None


def _record_schema(resource: Resource) -> dict[str, Any] | None:
    """One record's schema: from reading one, else from what create returns, else from list."""
    ops = resource.operations
    for verb, status in (("read", "2"), ("create", "2"), ("replace", "2"), ("update", "2")):
        op = ops.get(verb)
        schema = _success_schema(op, status) if op else None
        if schema is not None and merged(schema).get("properties"):
            return merged(schema)
    if "list" in ops and (schema := _success_schema(ops["list"], "2")) is not None:
        items = _list_items(schema)
        if items is not None and merged(items[1]).get("properties"):
            return merged(items[1])
    return None


def _success_schema(op: Operation, prefix: str) -> dict[str, Any] | None:
    for status in sorted(op.responses):
        if status.startswith(prefix) and op.responses[status]:
            return op.responses[status]
    return None


def _list_items(schema: dict[str, Any]) -> tuple[str | None, dict[str, Any]] | None:
    """Where a list response holds its records: ``(None, items)`` for a bare array, ``(property,
    items)`` for an envelope object."""
    schema = merged(schema)
    if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        return None, schema["items"]
    arrays = [(name, s["items"]) for name, s in schema.get("properties", {}).items()
              if s.get("type") == "array" and isinstance(s.get("items"), dict)]  # fmt: skip
    return arrays[0] if len(arrays) == 1 else None


def _envelope(listing: Operation, resource: Resource) -> tuple[str | None, str | None]:
    schema = _success_schema(listing, "2")
    where = _list_items(schema) if schema else None
    if where is None or where[0] is None:
        return None, None
    props = merged(schema).get("properties", {})  # type: ignore[arg-type]
    total = next(
        (n for n in ("total", "count", "total_count", "totalCount") if props.get(n, {}).get("type") == "integer"), None
    )
    return where[0], total


def _is_param(segment: str) -> bool:
    return bool(re.fullmatch(r"\{[^{}]+\}", segment))
