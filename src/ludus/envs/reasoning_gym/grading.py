"""What our replacement scorers share: the zero scores for empty and over-long answers, the verdict
constructors, and reading a plain decimal number (never evaluated)."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from ludus.core.types import Score, Status

# a reply's cap: the hardest levels' answers are long (a 100x100 Game of Life board is ~20,000
# characters, a degree-98 product of polynomials 6,000); every scorer here reads in linear time
MAX_CHARS = 64_000
MINUS = str.maketrans({"\u2212": "-", "\u2013": "-"})
_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")
_EXPONENT = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d{1,3})?")  # at most 3 digits: bounded size
_GROUPED = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?")


def correct(reason: str, answer: str) -> Score:
    return Score(1.0, Status.CORRECT, reason, extracted=answer)


def wrong(reason: str, answer: str) -> Score:
    return Score.zero(Status.WRONG, reason, extracted=answer)


def format_error(reason: str, answer: str) -> Score:
    return Score.zero(Status.FORMAT_ERROR, reason, extracted=answer)


def early(answer: str) -> Score | None:
    """The zero score for an empty or over-long answer, else None."""
    if not isinstance(answer, str) or not answer.strip():
        return Score.zero(Status.NO_ANSWER, "empty answer")
    if len(answer) > MAX_CHARS:
        return Score.zero(Status.FORMAT_ERROR, f"the answer is {len(answer)} characters; the cap is {MAX_CHARS}")
    return None


def decimal_number(text: str, *, grouping: bool = False, exponent: bool = False) -> Decimal | None:
    """A plain decimal (``-1.5``; ``1,234.5`` with ``grouping``; ``2e-3`` with ``exponent``), else None."""
    text = text.translate(MINUS).strip()
    if grouping and _GROUPED.fullmatch(text):
        text = text.replace(",", "")
    if not (_EXPONENT if exponent else _DECIMAL).fullmatch(text):
        return None
    try:
        return Decimal(text)
    except InvalidOperation:  # the patterns admit only valid literals
        return None
