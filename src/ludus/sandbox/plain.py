"""Plain values across a trust boundary: encode Python values as tagged JSON, decode them strictly.

The code grader calls the solution in one process and compares results in another. Only
*plain built-in* values cross (None, bool, int, float, complex, str, bytes, list, tuple,
dict, set, frozenset), so an object whose ``__eq__`` always answers True can never reach a
comparison: the receiving side rebuilds every value from data with its own constructors.
``decode`` is the security boundary and trusts nothing in its input; ``encode`` is only a
convenience for the sending side (it also turns NumPy scalars and arrays into plain values).

Standard library only: this module is shipped as source into the sandbox.
"""

from __future__ import annotations

import json
import math

MAX_DEPTH = 100
MAX_ITEMS = 1_000_000
MAX_SAME_HASH = 64  # more keys than this sharing one hash is a hash-flooding attempt, not data


class NotPlain(TypeError):
    """A value that is not made of plain built-in types (or is too deep or too large)."""


def _enc(value, depth: int, budget: list[int]):
    budget[0] -= 1
    if budget[0] < 0:
        raise NotPlain(f"value has more than {MAX_ITEMS} parts")
    if depth > MAX_DEPTH:
        raise NotPlain(f"value is nested deeper than {MAX_DEPTH}")
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        return value if abs(value) < 2**53 else {"int": str(value)}
    if kind is float:
        return value if math.isfinite(value) else {"float": repr(value)}
    if kind is complex:
        return {"complex": [repr(value.real), repr(value.imag)]}
    if kind is bytes:
        return {"bytes": value.hex()}
    if kind is list:
        return [_enc(v, depth + 1, budget) for v in value]
    if kind in (tuple, set, frozenset):
        items = [_enc(v, depth + 1, budget) for v in value]
        return {kind.__name__: items}
    if kind is dict:
        return {"dict": [[_enc(k, depth + 1, budget), _enc(v, depth + 1, budget)] for k, v in value.items()]}
    converted = _numpy_to_builtin(value)
    if converted is not None:
        return _enc(converted[0], depth, budget)
    raise NotPlain(f"a {kind.__module__}.{kind.__qualname__} object is not a plain built-in value")


def _numpy_to_builtin(value):
    """NumPy scalars and arrays become their plain equivalents (a one-item tuple), else None."""
    module = type(value).__module__
    if module == "numpy" and hasattr(value, "tolist"):
        return (value.tolist(),)
    return None


def encode(value) -> str:
    """The JSON text of a plain value; raises NotPlain for anything else."""
    return json.dumps(_enc(value, 0, [MAX_ITEMS]))


def _dec(data, depth: int):
    if depth > MAX_DEPTH:
        raise NotPlain(f"value is nested deeper than {MAX_DEPTH}")
    kind = type(data)
    if data is None or kind in (bool, int, float, str):
        return data
    if kind is list:
        return [_dec(v, depth + 1) for v in data]
    if kind is not dict or len(data) != 1:
        raise NotPlain("malformed plain value")
    ((tag, body),) = data.items()
    if tag == "int" and type(body) is str:
        return int(body)
    if tag == "float" and body in ("inf", "-inf", "nan"):
        return float(body)
    if tag == "complex" and type(body) is list and len(body) == 2:
        return complex(float(body[0]), float(body[1]))
    if tag == "bytes" and type(body) is str:
        return bytes.fromhex(body)
    if tag in ("tuple", "set", "frozenset") and type(body) is list:
        items = [_dec(v, depth + 1) for v in body]
        if tag != "tuple":
            _refuse_hash_flooding(items)
        return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
    if tag == "dict" and type(body) is list:
        if not all(type(pair) is list and len(pair) == 2 for pair in body):
            raise NotPlain("malformed dict item")
        keys = [_dec(pair[0], depth + 1) for pair in body]
        _refuse_hash_flooding(keys)
        return dict(zip(keys, (_dec(pair[1], depth + 1) for pair in body), strict=True))
    raise NotPlain(f"unknown plain-value tag {tag!r}")


def _refuse_hash_flooding(keys: list) -> None:
    """Building a set or dict of n keys with one hash costs n²/2 comparisons: refuse it first.
    (Integers and tuples of them have predictable hashes; strings are salted per process.)"""
    if len(keys) <= MAX_SAME_HASH:
        return
    counts: dict[int, int] = {}
    for key in keys:
        h = hash(key)
        counts[h] = counts.get(h, 0) + 1
        if counts[h] > MAX_SAME_HASH:
            raise NotPlain(f"more than {MAX_SAME_HASH} keys share one hash: a hash-flooding value")


def decode(text: str):
    """Rebuild a plain value from ``encode``'s output; raises NotPlain (or ValueError) on anything else."""
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except RecursionError as exc:
        raise NotPlain("value is nested too deeply") from exc
    try:
        return _dec(data, 0)
    except (TypeError, RecursionError) as exc:  # e.g. an unhashable set item or dict key
        raise NotPlain(f"malformed plain value: {exc}") from exc


def _reject_constant(name: str):
    raise NotPlain(f"bare {name} is not allowed; floats travel tagged")
