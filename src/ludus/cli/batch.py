"""Scoring a JSONL file of (completion, gold) lines: the engine behind ``ludus verify``.

Every good line is written back with its verdict added (``reward``, ``status``, ``reason``
and the fields the verifier adds: see :class:`LineSpec`), in input order. A malformed line (bad JSON, a missing or non-text field) is reported
with its line number and skipped; it never stops the run. Lines are scored in chunks so a
large file streams through in bounded memory.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ludus.core.types import Score

CHUNK = 256


@dataclass
class BatchReport:
    scored: int = 0
    reward_sum: float = 0.0
    statuses: Counter[str] = field(default_factory=Counter)
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (line number, why)
    seconds: float = 0.0

    @property
    def mean_reward(self) -> float:
        return self.reward_sum / self.scored if self.scored else 0.0


def text_gold(value: Any) -> str:
    """Math golds: text, or a number as in GSM8K files."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise ValueError(f"must be a string, got {type(value).__name__}")
    return value


def math_annotation(row: dict[str, Any], score: Score) -> None:
    row.update(reward=score.value, status=score.status, extracted=score.extracted, reason=score.reason)


@dataclass(frozen=True)
class LineSpec:
    """Where a line keeps its completion and gold, how the gold is checked, what is written back."""

    completion_field: str = "completion"
    gold_field: str = "gold"
    gold: Callable[[Any], Any] = text_gold  # raises ValueError for a gold of the wrong shape
    annotate: Callable[[dict[str, Any], Score], None] = math_annotation


def _read_line(text: str, spec: LineSpec) -> tuple[dict[str, Any], str, Any]:
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(row, dict):
        raise ValueError(f"a JSON {type(row).__name__}, expected an object")
    for name in (spec.completion_field, spec.gold_field):
        if name not in row:
            raise ValueError(f"missing field {name!r} (the line has {sorted(row)[:8]})")
    completion = row[spec.completion_field]
    if not isinstance(completion, str):
        raise ValueError(f"field {spec.completion_field!r} must be a string, got {type(completion).__name__}")
    try:
        gold = spec.gold(row[spec.gold_field])
    except ValueError as exc:
        raise ValueError(f"field {spec.gold_field!r} {exc}") from None
    return row, completion, gold


def score_jsonl(
    lines: Iterable[str],
    write: Callable[[str], None],
    score_many: Callable[[Sequence[tuple[Any, Any]]], list[Score]],
    *,
    spec: LineSpec = LineSpec(),
    on_line: Callable[[int], None] | None = None,
) -> BatchReport:
    """Score every line with ``score_many`` (e.g. :meth:`MathVerifier.score_many`, which takes
    (completion, gold) pairs) and ``write`` it back."""
    report = BatchReport()
    start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    pairs: list[tuple[Any, Any]] = []

    def flush() -> None:
        for row, score in zip(rows, score_many(pairs), strict=True):
            spec.annotate(row, score)
            write(json.dumps(row, ensure_ascii=False) + "\n")
            report.scored += 1
            report.reward_sum += score.value
            report.statuses[score.status] += 1
        if on_line is not None:
            on_line(len(rows))
        rows.clear()
        pairs.clear()

    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            row, completion, gold = _read_line(text, spec)
        except ValueError as exc:
            report.skipped.append((number, str(exc)))
            if on_line is not None:
                on_line(1)
            continue
        rows.append(row)
        pairs.append((completion, gold))
        if len(rows) >= CHUNK:
            flush()
    if rows:
        flush()
    report.seconds = time.perf_counter() - start
    return report
