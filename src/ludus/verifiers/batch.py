"""Scoring a JSONL file of (completion, gold) lines: the engine behind ``ludus verify``.

Every good line is written back with ``reward``, ``status``, ``extracted`` and ``reason``
added, in input order. A malformed line (bad JSON, a missing or non-text field) is reported
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


def _read_line(text: str, completion_field: str, gold_field: str) -> tuple[dict[str, Any], str, str]:
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(row, dict):
        raise ValueError(f"a JSON {type(row).__name__}, expected an object")
    values = []
    for name in (completion_field, gold_field):
        if name not in row:
            raise ValueError(f"missing field {name!r} (the line has {sorted(row)[:8]})")
        value = row[name]
        if isinstance(value, (int, float)) and not isinstance(value, bool) and name == gold_field:
            value = str(value)  # GSM8K-style numeric golds
        if not isinstance(value, str):
            raise ValueError(f"field {name!r} must be a string, got {type(value).__name__}")
        values.append(value)
    return row, values[0], values[1]


def score_jsonl(
    lines: Iterable[str],
    write: Callable[[str], None],
    score_many: Callable[[Sequence[tuple[str, str]]], list[Score]],
    *,
    completion_field: str = "completion",
    gold_field: str = "gold",
    on_line: Callable[[int], None] | None = None,
) -> BatchReport:
    """Score every line with ``score_many`` (e.g. :meth:`MathVerifier.score_many`) and ``write`` it back."""
    report = BatchReport()
    start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    pairs: list[tuple[str, str]] = []

    def flush() -> None:
        for row, score in zip(rows, score_many(pairs), strict=True):
            row.update(reward=score.value, status=score.status, extracted=score.extracted, reason=score.reason)
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
            row, completion, gold = _read_line(text, completion_field, gold_field)
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
