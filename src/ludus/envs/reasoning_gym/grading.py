"""What our replacement scorers share: the zero scores for empty and over-long answers, the verdict
constructors, reading a plain decimal number (never evaluated), grading one exact number, and rg's own
dataset for the rules of a puzzle once our scorer has read the reply strictly."""

from __future__ import annotations

import functools
import re
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any

from ludus.core.types import Score, Status

# a reply's cap: the hardest levels' answers are long (a 100x100 Game of Life board is ~20,000
# characters, a degree-98 product of polynomials 6,000); every scorer here reads in linear time
MAX_CHARS = 64_000
MINUS = str.maketrans({"\u2212": "-", "\u2013": "-"})
_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")
_EXPONENT = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d{1,3})?")  # at most 3 digits: bounded size
# thousands groups; the first has no leading zero, so "0,13168" (two items) is not read as 13168
_GROUPED = re.compile(r"[+-]?[1-9]\d{0,2}(?:,\d{3})+(?:\.\d*)?")


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


def score_exact_number(answer: str, entry: dict[str, Any]) -> Score:
    """One number equal to the gold: a sign, leading zeros, trailing decimal zeros, thousands commas and
    e-notation are allowed; anything else around it, or a second number, is a format error."""
    if (refusal := early(answer)) is not None:
        return refusal
    mine = decimal_number(answer, grouping=True, exponent=True)
    if mine is None:
        return format_error(f"{answer.strip()[:60]!r} is not one number", answer)
    if mine == Decimal(str(entry["answer"])):
        return correct(f"{entry['answer']} is correct", answer)
    return wrong(f"expected {entry['answer']}, got {mine}", answer)


@functools.cache
def rg_dataset(name: str) -> Any:
    """rg's dataset ``name`` at its defaults, made once, for the scorers that read only the entry: our
    scorer reads the reply strictly and leaves the puzzle's rules (a replay, a simulator) to rg."""
    from reasoning_gym import create_dataset  # noqa: PLC0415 - an optional extra, not for ``ludus envs``

    return create_dataset(name, size=1, seed=0)


def rg_pays(name: str, answer: str, entry: dict[str, Any]) -> bool:
    """Whether rg's scorer of ``name`` gives ``answer`` full marks (in a local decimal context: one rg
    generator changes the process-wide precision)."""
    with localcontext():
        return rg_dataset(name).score_answer(answer, entry) >= 1.0
