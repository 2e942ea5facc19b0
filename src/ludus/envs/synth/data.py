"""Seeded records for a simulated service, made from the document's schemas.

Values follow each property's schema (type, enum, bounds, length, format) and, for plain
strings, its name: a ``name`` of a customer is a person's, an ``email`` an address, a ``city``
a city. A property named after another resource (``customer_id`` beside ``customers``) holds
one of that resource's ids, so the records refer to each other as a real service's do.
Properties a task may look a record up by (names, titles, emails) are unique within their
resource. Every record is checked against its schema; a resource whose records cannot be made
so is reported, never filled with records its own service would refuse.
"""

from __future__ import annotations

import json
import math
import random
import re
import re._constants as _sre
import re._parser as _sre_parser
import string
from collections.abc import Iterator
from itertools import chain
from typing import Any

from ludus.envs.synth.resources import Catalog, Resource, merged
from ludus.envs.synth.spec import slow_pattern
from ludus.envs.synth.store import MAX_PATTERN_TEXT, invalid, record_id

FIRST = ["Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lena", "Milo", "Nia",
         "Omar", "Pia", "Quin", "Rosa", "Sami", "Tess", "Uma", "Vito", "Wren", "Yara", "Zed"]  # fmt: skip
LAST = ["Abbott", "Baker", "Chen", "Diaz", "Evans", "Fischer", "Garcia", "Haddad", "Ito", "Jensen", "Kowalski",
        "Lopez", "Moreau", "Novak", "Okafor", "Patel", "Quinn", "Rossi", "Sato", "Tanaka"]  # fmt: skip
CITIES = ["Lisbon", "Oslo", "Kyoto", "Quito", "Accra", "Perth", "Tunis", "Lyon", "Porto", "Cork", "Riga", "Bern"]
ADJECTIVES = ["amber", "brisk", "coral", "dusty", "early", "fresh", "golden", "hearty", "ivory", "jolly", "keen",
              "lush", "mellow", "nutty", "olive", "plain", "quiet", "rustic", "smoky", "tart"]  # fmt: skip
NOUNS = ["loaf", "cheese", "apple", "pepper", "tea", "yogurt", "melon", "biscuit", "onion", "cider", "bun",
         "plum", "butter", "juice", "tart", "pear", "roll", "honey", "bean", "soup"]  # fmt: skip
KEYS = ("name", "title", "email", "username", "code", "sku", "slug")  # properties a record is looked up by
PEOPLE = ("customer", "user", "person", "member", "employee", "owner", "author", "contact", "attendee", "agent")
ROLES = ("assignee", "reporter", "requester", "author", "owner", "creator", "organizer", "organiser", "host",
         "manager", "approver", "reviewer", "editor", "sender", "recipient")  # a person's part in a record  # fmt: skip
TRIES = 50
MAX_LENGTH = 1_000  # a schema's minLength or minItems past this is refused: no record needs it (a document's 10**9)


class DataError(ValueError):
    """A resource whose records cannot be made to fit its own schema."""


def foreign_keys(resource: Resource, catalog: Catalog) -> dict[str, Resource]:
    """``resource``'s properties that name another resource's id: ``customer_id`` or
    ``customerId`` beside a resource ``customers``."""
    out = {}
    people = [o for o in catalog.resources if _people(o)]
    for prop in resource.properties:
        match = re.fullmatch(r"([a-z][a-z0-9]*?)_?[iI][dD]", prop)
        if match is None or prop == resource.id_field:
            continue
        for other in catalog.resources:
            if other is not resource and other.name.lower() in (match[1] + "s", match[1] + "es", match[1]):
                out[prop] = other
        if prop not in out and match[1] in ROLES and len(people) == 1 and people[0] is not resource:
            out[prop] = people[0]  # assignee_id beside users, and no other resource of people: a user's id
    return out


def _people(resource: Resource) -> bool:
    name = resource.name.lower()
    return name == "people" or any(word in name for word in PEOPLE)


def seed_records(catalog: Catalog, rng: random.Random, per_resource: int = 8) -> dict[str, list[dict[str, Any]]]:
    """``per_resource`` records for every resource, the ones others refer to made first."""
    records: dict[str, list[dict[str, Any]]] = {}
    pending = list(catalog.resources)
    while pending:
        ready = [r for r in pending if all(o.name in records for o in foreign_keys(r, catalog).values())]
        resource = (ready or pending)[0]  # a cycle of references: the first one refers to nothing yet
        pending.remove(resource)
        records[resource.name] = _records(resource, catalog, records, rng, per_resource)
    return records


def _records(
    resource: Resource, catalog: Catalog, made: dict[str, list[dict[str, Any]]], rng: random.Random, n: int
) -> list[dict[str, Any]]:
    keys = foreign_keys(resource, catalog)
    seen: dict[str, set[str]] = {p: set() for p in resource.properties if p in KEYS}  # values as JSON (lists too)
    out = []
    for i in range(n):
        for _ in range(TRIES):
            record = {resource.id_field: _id(resource, i)}
            who = person(resource, rng)  # one person's name and email per record
            for prop, schema in resource.properties.items():
                if prop == resource.id_field:
                    continue
                if prop in keys:
                    ids = [r[keys[prop].id_field] for r in made.get(keys[prop].name, [])]
                    if ids:
                        record[prop] = rng.choice(ids)
                        continue
                if prop in resource.schema.get("required", []) or rng.random() < 0.7:
                    try:
                        record[prop] = value(schema, prop, rng, who)
                    except (TypeError, ValueError, KeyError, IndexError, AttributeError, ArithmeticError) as exc:
                        raise DataError(f"cannot make {resource.name} records: the schema of {prop!r} cannot be "
                                        f"read ({type(exc).__name__}: {str(exc)[:200]})") from None  # fmt: skip
            clash = any(_as_key(record.get(p)) in seen[p] for p in seen)
            if not clash and invalid(record, resource.schema) is None:
                break
        else:
            problem = invalid(record, resource.schema) or "values that must be unique kept repeating"
            raise DataError(f"cannot make {resource.name} records that fit their schema: {problem}")
        for p in seen:
            seen[p].add(_as_key(record.get(p)))
        out.append(record)
    return out


def _as_key(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def person(resource: Resource, rng: random.Random) -> Person:
    """A name for one record of ``resource``, and whether its records are people."""
    return rng.choice(FIRST), rng.choice(LAST), _people(resource)


def _id(resource: Resource, i: int) -> Any:
    return record_id(resource, i + 1)


Person = tuple[str, str, bool]  # a record's first and last name, and whether the record is a person


def value(schema: dict[str, Any], name: str, rng: random.Random, who: Person | None = None) -> Any:
    """A value of ``schema`` for a property called ``name`` (of a record about ``who``)."""
    who = who or (rng.choice(FIRST), rng.choice(LAST), False)
    if isinstance(schema.get("allOf"), list):  # 3.0's `allOf: [$ref]` beside a default: one schema
        schema = merged(schema)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return rng.choice(schema["enum"])
    for key in ("oneOf", "anyOf"):
        if schema.get(key):
            return value(schema[key][0], name, rng, who)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    if kind == "boolean":
        return rng.random() < 0.5
    if kind in ("integer", "number"):
        lo, hi = _bounds(schema, 0, 100)
        step = schema.get("multipleOf")
        if _number(step) and step > 0:  # a multiple of it within the bounds (else the record is refused)
            first, last = math.ceil(lo / step), math.floor(max(lo, hi) / step)
            n = rng.randint(first, max(first, last)) * step
            return int(n) if kind == "integer" else round(n, 10)
        if kind == "integer":
            return rng.randint(int(lo), int(max(lo, hi)))
        return round(rng.uniform(lo, max(lo, hi)), 2)
    if kind == "array":
        items = schema.get("items", {}) if isinstance(schema.get("items"), dict) else {}
        least, most = _length(schema, "minItems"), schema.get("maxItems", 3)
        most = most if isinstance(most, int) and not isinstance(most, bool) else 3
        count = rng.randint(least, max(least, min(most, least + 3)))
        if schema.get("uniqueItems") is True:  # distinct values: draw each a few times before giving up
            distinct: list[Any] = []
            seen: set[str] = set()
            for _ in range(count * 10):
                if len(distinct) == count:
                    break
                item = value(items, name.rstrip("s"), rng, who)
                if _as_key(item) not in seen:
                    seen.add(_as_key(item))
                    distinct.append(item)
            return distinct
        return [value(items, name.rstrip("s"), rng, who) for _ in range(count)]
    if kind == "object":
        props = schema.get("properties", {}) if isinstance(schema.get("properties"), dict) else {}
        required = schema.get("required", [])
        out = {p: value(s, p, rng, who) for p, s in props.items() if p in required or rng.random() < 0.5}
        extra = schema.get("additionalProperties", True)
        for _ in range(_length(schema, "minProperties") - len(out)):  # a map that must hold some entries
            if extra is False:
                break
            key = next(k for k in (f"{rng.choice(NOUNS)}{i or ''}" for i in range(1000)) if k not in out)
            out[key] = value(extra if isinstance(extra, dict) else {}, key, rng, who)
        return out
    if kind == "null":
        return None
    return _string(schema, name, rng, who)


def _bounds(schema: dict[str, Any], lo: float, hi: float) -> tuple[float, float]:
    """The range to draw a number from: the schema's bounds (OpenAPI 3.1's numeric exclusive ones
    moved in by one), else ``lo`` to ``lo + hi``."""
    low, high = schema.get("minimum", lo), schema.get("maximum")
    if _number(schema.get("exclusiveMinimum")):
        low = schema["exclusiveMinimum"] + 1
    if _number(schema.get("exclusiveMaximum")):
        high = schema["exclusiveMaximum"] - 1
    out = float(low), float(low + hi if high is None else high)
    if not all(math.isfinite(x) for x in out):
        raise ValueError(f"the bounds {out} are no finite numbers")
    return out


def _length(schema: dict[str, Any], key: str) -> int:
    least = schema.get(key, 0)
    if not isinstance(least, int) or least > MAX_LENGTH:
        raise ValueError(f"{key} {least!r}: records of that size are not made")
    return least


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _string(schema: dict[str, Any], name: str, rng: random.Random, who: Person) -> str:
    first, last, person = who
    word = name.lower()
    fmt = schema.get("format")
    if fmt == "email" or "email" in word:
        text = f"{first.lower()}.{last.lower()}{rng.randint(1, 99)}@example.com"
    elif fmt == "date":
        text = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    elif fmt == "date-time":
        text = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(8, 18):02d}:00:00Z"
    elif fmt == "time":
        text = f"{rng.randint(8, 18):02d}:{rng.choice(['00', '15', '30', '45'])}:00"
    elif fmt == "duration":  # ISO 8601
        text = f"PT{rng.choice([5, 10, 15, 30, 45, 60, 90])}M"
    elif fmt == "uuid":
        text = "-".join("".join(rng.choice("0123456789abcdef") for _ in range(n)) for n in (8, 4, 4, 4, 12))
    elif fmt in ("uri", "url") or word in ("url", "website", "link"):
        text = f"https://example.com/{rng.choice(NOUNS)}/{rng.randint(1, 999)}"
    elif "city" in word or "town" in word:
        text = rng.choice(CITIES)
    elif person and word in ("name", "full_name", "fullname", "display_name"):
        text = f"{first} {last}"
    elif word in ("first_name", "firstname", "given_name"):
        text = first
    elif word in ("last_name", "lastname", "surname", "family_name"):
        text = last
    elif word in ("phone", "phone_number", "telephone"):
        text = f"+1 555 {rng.randint(100, 999)} {rng.randint(1000, 9999)}"
    elif word in ("description", "notes", "note", "body", "summary", "comment", "details"):
        text = f"{rng.choice(ADJECTIVES).capitalize()} {rng.choice(NOUNS)}, {rng.choice(ADJECTIVES)} and {rng.choice(ADJECTIVES)}."
    elif word in ("code", "sku"):
        text = "".join(rng.choice(string.ascii_uppercase) for _ in range(3)) + f"-{rng.randint(100, 999)}"
    else:
        text = f"{rng.choice(ADJECTIVES).capitalize()} {rng.choice(NOUNS)}"
    lo, hi = _length(schema, "minLength"), schema.get("maxLength", 200)
    hi = hi if isinstance(hi, int) and not isinstance(hi, bool) else 200
    text = text[:hi]
    text = text + "x" * max(0, lo - len(text))
    pattern = schema.get("pattern")
    if not isinstance(pattern, str) or slow_pattern(pattern):  # a pattern re could take forever on: not checked
        return text
    # the natural text if the pattern allows it (a username without its space), else one the pattern makes
    natural = [text, text.replace(" ", "_"), text.lower().replace(" ", "-"), text.replace(" ", "")]
    made: Iterator[str | None] = (matching(pattern, rng) for _ in range(20))
    return next((t for t in chain(natural, made) if t is not None and lo <= len(t) <= hi and _search(pattern, t)), text)


def _search(pattern: str, text: str) -> bool:
    try:
        return len(text) <= MAX_PATTERN_TEXT and re.search(pattern, text) is not None
    except (re.error, RecursionError, OverflowError, ValueError, TypeError):
        return False


CLASSES = {
    _sre.CATEGORY_DIGIT: string.digits,
    _sre.CATEGORY_NOT_DIGIT: string.ascii_letters,
    _sre.CATEGORY_WORD: string.ascii_letters + string.digits + "_",
    _sre.CATEGORY_NOT_WORD: "-.,:; ",
    _sre.CATEGORY_SPACE: " ",
    _sre.CATEGORY_NOT_SPACE: string.ascii_letters + string.digits,
}
MAX_MADE = 2_000  # characters of a text made from a pattern


def matching(pattern: str, rng: random.Random) -> str | None:
    """A text ``pattern`` matches, made by walking its parsed form (a repeat drawn from its
    least to three more, a class from its members, one alternative of several), or ``None``
    for a pattern this cannot follow. The caller checks the text: lookarounds are ignored."""
    try:
        tree = _sre_parser.parse(pattern)
    except (re.error, RecursionError, OverflowError, ValueError, TypeError):
        return None
    out: list[str] = []
    try:
        _emit(list(tree), rng, out, {}, 0)
    except (_TooLong, RecursionError, ValueError, TypeError, IndexError):
        return None
    return "".join(out)


class _TooLong(Exception):
    pass


def _emit(items: list[Any], rng: random.Random, out: list[str], groups: dict[int, str], depth: int) -> None:
    if depth > 50 or len(out) > MAX_MADE:
        raise _TooLong
    for op, av in items:
        if op is _sre.LITERAL:
            out.append(chr(av))
        elif op is _sre.NOT_LITERAL:
            out.append("a" if av != ord("a") else "b")
        elif op is _sre.ANY:
            out.append("x")
        elif op is _sre.IN:
            out.append(_member(av, rng))
        elif op is _sre.BRANCH:
            _emit(list(rng.choice(av[1])), rng, out, groups, depth + 1)
        elif op is _sre.SUBPATTERN:
            start = len(out)
            _emit(list(av[-1]), rng, out, groups, depth + 1)
            if av[0] is not None:
                groups[av[0]] = "".join(out[start:])
        elif op is _sre.ATOMIC_GROUP:
            _emit(list(av), rng, out, groups, depth + 1)
        elif op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT, _sre.POSSESSIVE_REPEAT):
            low, high, sub = av
            if low > MAX_MADE:
                raise _TooLong
            for _ in range(rng.randint(low, max(low, min(high, low + 3)))):
                _emit(list(sub), rng, out, groups, depth + 1)
        elif op is _sre.GROUPREF:
            out.append(groups.get(av, ""))
        elif op is _sre.GROUPREF_EXISTS:
            branch = av[1] if av[0] in groups else av[2]
            if branch is not None:
                _emit(list(branch), rng, out, groups, depth + 1)
        # AT (anchors), ASSERT and ASSERT_NOT (lookarounds) add nothing


def _member(items: list[Any], rng: random.Random) -> str:
    """One character of a class (``[a-z0-9_]``, ``\\d``, ``[^,]``)."""
    negate = any(op is _sre.NEGATE for op, _ in items)
    chars: set[str] = set()
    for op, av in items:
        if op is _sre.LITERAL:
            chars.add(chr(av))
        elif op is _sre.RANGE:
            chars.update(chr(c) for c in range(av[0], min(av[1], av[0] + 200) + 1))
        elif op is _sre.CATEGORY:
            chars.update(CLASSES.get(av, ""))
    if negate:
        chars = set(string.ascii_letters + string.digits + " -_.") - chars
    readable = sorted(c for c in chars if c.isalnum()) or sorted(chars)
    return rng.choice(readable)
