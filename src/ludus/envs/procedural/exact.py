"""Exact-answer verification for tasks whose gold answer is an integer or a list of integers.

Deny by default: the final answer must be *exactly one* well-formed value. Hedging (two
different boxed answers, "3 or 4"), extra words and empty answers score 0 with a status
saying why. Model text is never evaluated; it is parsed with regular expressions.
"""

from __future__ import annotations

import re

from ludus.core.types import Score, Status
from ludus.tasks.answers import final_answer

_INT = re.compile(r"[+-]?\d+")
_MINUS = str.maketrans({"\u2212": "-", "\u2013": "-"})


def parse_int(text: str) -> int | None:
    text = text.translate(_MINUS).strip().rstrip(".").replace(" ", "")
    if re.fullmatch(r"[+-]?\d{1,3}(,\d{3})+", text):
        text = text.replace(",", "")
    return int(text) if _INT.fullmatch(text) else None


def parse_int_list(text: str) -> list[int] | None:
    text = text.translate(_MINUS).strip().strip("[]()").strip()
    if not text:
        return []
    parts = [p.strip() for p in re.split(r"[,\s]+", text) if p.strip()]
    values = [int(p) if _INT.fullmatch(p) else None for p in parts]
    return None if any(v is None for v in values) else [v for v in values if v is not None]


def score_int(completion: str, gold: int, *, variable: str | None = None) -> Score:
    """1.0 if the reply's single final answer is the integer ``gold``, else 0 with the reason.

    With ``variable="x"`` the answer may also be written ``x = 5``, as people write solutions.
    """
    answer, early = final_answer(completion)
    if early is not None:
        return early
    assert answer is not None
    if variable is not None:
        answer = re.sub(rf"^{re.escape(variable)}\s*=\s*", "", answer)
    value = parse_int(answer)
    if value is None:
        return Score(0.0, Status.FORMAT_ERROR, f"{answer[:60]!r} is not a single integer", extracted=answer)
    if value == int(gold):
        return Score(1.0, Status.CORRECT, f"{value} is correct", extracted=answer)
    return Score(0.0, Status.WRONG, f"expected {gold}, got {value}", extracted=answer)


def score_int_list(completion: str, gold: list[int]) -> Score:
    """1.0 if the reply's final answer is exactly the list ``gold`` (same order), else 0."""
    answer, early = final_answer(completion)
    if early is not None:
        return early
    assert answer is not None
    values = parse_int_list(answer)
    if values is None:
        return Score(0.0, Status.FORMAT_ERROR, f"{answer[:60]!r} is not a list of integers", extracted=answer)
    if values == list(gold):
        return Score(1.0, Status.CORRECT, "the list is correct", extracted=answer)
    return Score(0.0, Status.WRONG, f"expected {gold}, got {values}", extracted=answer)


def digit_agreement(value: int | None, gold: int) -> float:
    """Fraction of positions (right-aligned, sign included) where ``value`` and ``gold`` agree.

    The denominator is the longer of the two, so padding an answer with extra digits lowers it.
    """
    if value is None:
        return 0.0
    a, b = str(value), str(gold)
    width = max(len(a), len(b))
    a, b = a.rjust(width), b.rjust(width)
    return sum(x == y for x, y in zip(a, b, strict=True)) / width
