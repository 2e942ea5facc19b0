"""Tasks for a simulated service: a goal in words, the calls that reach it, and how it is graded.

Each task draws its own records (:func:`~ludus.envs.synth.data.seed_records`, seeded by the
task) and one goal the document's operations allow:

* ``create`` — add a record with given values; a value that names another record does so by
  that record's key ("for the customer whose email is …"), so the model must look it up;
* ``update`` / ``delete`` — change one property of, or remove, the record a key names;
* ``count`` / ``lookup`` — report how many records have a value, or one property of the record
  a key names (through list's filters and pages).

The oracle's calls (:attr:`Goal.calls`), run on the task's records, give the one final state the
task asks for. Grading compares the episode's final state with it — every record removed,
changed or added must be the ones asked for, and nothing else may change (deny by default) —
and for a report the answer with the oracle's.
"""

from __future__ import annotations

import json
import math
import random
import re
import unicodedata
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ludus.core.types import Score, Status
from ludus.envs.synth.data import KEYS, foreign_keys, person, seed_records, value
from ludus.envs.synth.resources import Catalog, Resource, merged
from ludus.envs.synth.store import Store
from ludus.tasks.answers import final_answer

KINDS = ("create", "update", "delete", "count", "lookup")
CHANGES = ("create", "update", "delete")
RECORDS = 8  # per resource and task
MAX_ANSWER = 200  # characters of a report's answer: a lookup never asks for a whole nested tree


class GoalError(Exception):
    """A goal whose oracle calls the service refuses, or that would leave the service as it
    is: the task source draws another (a document may declare what the simulation cannot do)."""


@dataclass(frozen=True)
class Goal:
    kind: str
    text: str
    calls: tuple[tuple[str, dict[str, Any]], ...]  # (operation, arguments), in order
    answer: Any = None  # a report's value

    def to_info(self) -> dict[str, Any]:
        return {"kind": self.kind, "calls": [list(c) for c in self.calls], "answer": self.answer}


def records_for(catalog: Catalog, data_seed: str) -> dict[str, list[dict[str, Any]]]:
    return seed_records(catalog, random.Random(data_seed), RECORDS)


def make_goal(
    catalog: Catalog,
    records: dict[str, list[dict[str, Any]]],
    rng: random.Random,
    kinds: tuple[str, ...] = KINDS,
    resources: tuple[str, ...] | None = None,
) -> Goal | None:
    """One goal of one of ``kinds`` about one of ``resources`` (default all) for these records, or
    ``None`` when the draw fits nothing (the caller draws again)."""
    resource = rng.choice([r for r in catalog.resources if resources is None or r.name in resources])
    kind = rng.choice([k for k in KINDS if k in kinds and _possible(k, resource)] or ["none"])
    rows = records[resource.name]
    if kind == "none" or not rows:
        return None
    make = {"create": _create, "update": _update, "delete": _delete, "count": _count, "lookup": _lookup}[kind]
    try:
        return make(catalog, resource, records, rng)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, ArithmeticError):
        return None  # a body schema the values cannot be drawn from (a document's own mistake): draw again


def _possible(kind: str, r: Resource) -> bool:
    ops = r.operations
    findable = "list" in ops or ("read" in ops and not _keys(r))
    if kind == "create":
        return "create" in ops and bool(_settable(r))
    if kind == "update":
        return ("update" in ops or "replace" in ops) and findable and bool(_changeable(r))
    if kind == "delete":
        return "delete" in ops and findable
    if kind == "count":
        return "list" in ops and any(_countable(r, p) for p in r.filters)
    return findable and bool(_shown(r))


def _keys(r: Resource) -> list[str]:
    return [p for p in KEYS if p in r.properties and p in r.schema.get("required", [])]


def _settable(r: Resource) -> list[str]:
    """What a create sets: the body's properties a record has, but the service's own (``readOnly``)."""
    body, read_only = merged_body(r, "create"), _read_only(r)
    return [p for p in body.get("properties", {}) if p in r.properties and p not in read_only]


def _changeable(r: Resource) -> list[str]:
    verb = "update" if "update" in r.operations else "replace"
    body, keys, read_only = merged_body(r, verb), _keys(r), _read_only(r)
    return [
        p
        for p in body.get("properties", {})
        if p not in keys and p != r.id_field and p in r.properties and p not in read_only
    ]


def _read_only(r: Resource) -> list[str]:
    return [p for p, s in r.properties.items() if isinstance(s, dict) and s.get("readOnly")]


def _shown(r: Resource) -> list[str]:
    return [p for p in r.properties if p != r.id_field and p not in _keys(r)]


def _countable(r: Resource, prop: str) -> bool:
    schema = r.properties.get(prop, {})
    schema = merged(schema) if isinstance(schema, dict) else {}  # an enum within allOf (3.0's $ref beside a default)
    return bool(schema.get("enum")) or schema.get("type") == "boolean"


def merged_body(r: Resource, verb: str) -> dict[str, Any]:
    op = r.operations.get(verb)
    return merged(op.body) if op is not None and op.body else {}


def _singular(r: Resource) -> str:
    name = r.name.replace("_", " ").replace("-", " ")
    return name[:-3] + "y" if name.endswith("ies") else name[:-1] if name.endswith("s") else name


def _quote(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False)


def _naming(r: Resource, row: dict[str, Any]) -> tuple[str, list[tuple[str, dict[str, Any]]], Any]:
    """How the task names ``row`` ("the product whose name is …"), the calls that find its id,
    and the id."""
    key = next(iter(_keys(r)), None)
    ident = row[r.id_field]
    if key is None:
        return f"the {_singular(r)} with {r.id_field} {_quote(ident)}", [], ident
    return f"the {_singular(r)} whose {key} is {_quote(row[key])}", _find(r, key, row[key]), ident


def _path_id(r: Resource, ident: Any) -> Any:
    """``ident`` as the record path's parameter takes it: text where the document declares the
    parameter a string (every id is text in a URL) though the records' ids are numbers."""
    schema = next(
        (p.schema for op in r.operations.values() for p in op.params if p.name == r.id_param and p.location == "path"),
        {},
    )
    kinds = schema.get("type") if isinstance(schema.get("type"), list) else [schema.get("type")]
    text_only = "string" in kinds and not {"integer", "number"} & set(kinds)
    return str(ident) if text_only and not isinstance(ident, str) else ident


def _find(r: Resource, prop: str, wanted: Any) -> list[tuple[str, dict[str, Any]]]:
    """The list calls that find the records whose ``prop`` is ``wanted``: one filtered call,
    or every page."""
    op = r.operations["list"].name
    if prop in r.filters:
        return [(op, {prop: wanted, **_page(r, 0)})]
    return [(op, _page(r, 0))]


def _page(r: Resource, index: int) -> dict[str, Any]:
    if r.paging is None:
        return {}
    size_name, position_name = r.paging
    size = r.operations["list"].params
    maximum = next(p.schema.get("maximum", 100) for p in size if p.name == size_name)
    return {size_name: maximum, position_name: index * maximum if position_name == "offset" else index + 1}


def _create(catalog: Catalog, r: Resource, records: dict, rng: random.Random) -> Goal | None:
    body_schema, settable = merged_body(r, "create"), _settable(r)
    required = [p for p in body_schema.get("required", []) if p in settable]  # a readOnly id is not asked for
    optional = [p for p in settable if p not in required]
    chosen = required + rng.sample(optional, k=min(len(optional), rng.randint(0, 1)))
    keys = foreign_keys(r, catalog)
    body, words, calls, who = {}, [], [], person(r, rng)
    for prop in chosen:
        if prop in keys and records.get(keys[prop].name):
            other = keys[prop]
            row = rng.choice(records[other.name])
            naming, find, ident = _naming(other, row)
            body[prop], calls = ident, calls + find
            words.append(f"{prop.replace('_id', '').replace('Id', '')}: {naming}")
            continue
        v = value(body_schema["properties"][prop], prop, rng, who)
        if prop in KEYS and canonical_json(v) in {canonical_json(row.get(prop)) for row in records[r.name]}:
            return None
        body[prop] = v
        words.append(f"{prop}: {_quote(v)}")
    calls.append((r.operations["create"].name, {"body": body}))
    return Goal("create", f"Add a {_singular(r)} with {'; '.join(words)}.", tuple(calls))


def _update(catalog: Catalog, r: Resource, records: dict, rng: random.Random) -> Goal | None:
    row = rng.choice(records[r.name])
    prop = rng.choice(_changeable(r))
    new = value(r.properties[prop], prop, rng)
    if new == row.get(prop) or (prop in foreign_keys(r, catalog)):
        return None
    naming, calls, ident = _naming(r, row)
    if "update" in r.operations:
        change = (r.operations["update"].name, {r.id_param: _path_id(r, ident), "body": {prop: new}})
    else:
        whole = {k: v for k, v in row.items() if k != r.id_field and k not in _read_only(r)}
        change = (r.operations["replace"].name, {r.id_param: _path_id(r, ident), "body": {**whole, prop: new}})
    return Goal("update", f"Set the {prop} of {naming} to {_quote(new)}.", (*calls, change))


def _delete(catalog: Catalog, r: Resource, records: dict, rng: random.Random) -> Goal | None:
    row = rng.choice(records[r.name])
    naming, calls, ident = _naming(r, row)
    remove = (r.operations["delete"].name, {r.id_param: _path_id(r, ident)})
    return Goal("delete", f"Remove {naming}.", (*calls, remove))


def _count(catalog: Catalog, r: Resource, records: dict, rng: random.Random) -> Goal | None:
    prop = rng.choice([p for p in r.filters if _countable(r, p)])
    wanted = rng.choice([row.get(prop) for row in records[r.name] if prop in row] or [None])
    if wanted is None:
        return None
    n = sum(row.get(prop) == wanted for row in records[r.name])
    text = f"How many {r.name.replace('_', ' ')} have {prop} {_quote(wanted)}? Answer with the number as <answer>N</answer>."
    return Goal("count", text, tuple(_find(r, prop, wanted)), n)


def _lookup(catalog: Catalog, r: Resource, records: dict, rng: random.Random) -> Goal | None:
    row = rng.choice(records[r.name])
    prop = rng.choice(_shown(r))
    if prop not in row:
        return None
    if not answer_text(row[prop]).strip() or len(answer_text(row[prop])) > MAX_ANSWER:
        return None  # an empty text cannot be answered (<answer></answer> is no answer), a whole tree should not be
    naming, calls, ident = _naming(r, row)
    if not calls and "read" in r.operations:
        calls = [(r.operations["read"].name, {r.id_param: _path_id(r, ident)})]
    text = f"What is the {prop} of {naming}? Answer as <answer>…</answer>."
    return Goal("lookup", text, tuple(calls), row[prop])


# ---- grading -------------------------------------------------------------------------------------


def expected_state(catalog: Catalog, records: dict, goal: Goal) -> dict:
    """The final state the task asks for: the oracle's calls run on the task's records."""
    store = Store(catalog, records)
    initial = store.snapshot()
    for op, args in goal.calls:
        reply = store.call(op, args)
        if reply.status >= 400:
            raise GoalError(f"the oracle's {op} failed: {reply.text()[:300]}")
    final = store.snapshot()
    if goal.kind in CHANGES and _difference(catalog, initial, final, initial) is None:
        raise GoalError(f"the {goal.kind} would change nothing (the service keeps what it owns)")
    return final


def grade(catalog: Catalog, initial: dict, final: dict, expected: dict, goal: Goal, completion: str) -> Score:
    """The episode's score: its final state against the expected one (deny by default), and a
    report's answer against the oracle's."""
    problem = _difference(catalog, initial, final, expected)
    if problem:
        return Score.zero(Status.WRONG, problem)
    if goal.kind in ("count", "lookup"):
        answer, refusal = final_answer(completion)
        if refusal is not None:
            return refusal
        if not _same_answer(answer, goal.answer):
            return Score.zero(Status.WRONG, f"the answer {answer[:80]!r} is not the record's value")
    return Score(1.0, Status.CORRECT, "the service is in the state the task asks for")


def _difference(catalog: Catalog, initial: dict, final: dict, expected: dict) -> str | None:
    for r in catalog.resources:
        before, got, want = initial[r.name], final[r.name], expected[r.name]
        kept = set(want) & set(before)
        if (set(before) - set(got)) != (set(before) - set(want)):
            removed = sorted(set(before) - set(got), key=str)
            return f"{r.name}: removed {removed or 'nothing'}, the task asks to remove {sorted(set(before) - set(want), key=str) or 'nothing'}"
        for key in sorted(kept, key=str):
            if canonical_json(got[key]) != canonical_json(want[key]):
                return f"{r.name} record {key!r} is {canonical_json(got[key])[:200]}, not the one asked for"
        new_got = sorted(_without(got[k], r.id_field) for k in set(got) - set(before))
        new_want = sorted(_without(want[k], r.id_field) for k in set(want) - set(before))
        if new_got != new_want:
            shown = [n[:200] for n in new_got[:2]], [n[:200] for n in new_want[:2]]
            return f"{r.name}: added {len(new_got)} record(s) {shown[0]}, the task asks for {shown[1]}"
    return None


def canonical(value: Any) -> Any:
    """``value`` as JSON means it: a whole number is one number (``45.0`` is ``45``, ``-0.0``
    is ``0``), and ``true`` stays no number (Python's ``True == 1`` does not hold in JSON)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


def canonical_json(value: Any) -> str:
    return json.dumps(canonical(value), sort_keys=True, ensure_ascii=False)


def _without(record: dict, id_field: str) -> str:
    return canonical_json({k: v for k, v in record.items() if k != id_field})


def answer_text(value: Any) -> str:
    """How a report's value is written in an answer: text as it is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _nfkc(text: str) -> str:
    return unicodedata.normalize("NFKC", text)


NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d{1,4})?")


def _same_answer(answer: str, wanted: Any) -> bool:
    text = _nfkc(answer).strip()
    if isinstance(wanted, bool):
        return text.lower() == str(wanted).lower()
    if isinstance(wanted, (int, float)):  # the same number, exactly: 2**53 + 1 is not 2**53, "nan" is nothing
        return bool(NUMBER.fullmatch(text)) and math.isfinite(wanted) and Decimal(text) == Decimal(repr(wanted))
    if not isinstance(wanted, str):  # a list, an object or null: the same JSON value, however spaced
        try:
            return canonical_json(json.loads(text)) == _nfkc(canonical_json(wanted))
        except (ValueError, RecursionError):
            return False
    return " ".join(text.strip("\"'").split()).casefold() == " ".join(_nfkc(wanted).split()).casefold()
