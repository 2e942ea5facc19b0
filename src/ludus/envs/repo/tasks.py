"""Repository tasks for the SWE-style ``repo`` environment: a procedural bug injector and a loader.

A repository task's ``answer`` (never shown to the model) holds:

* ``files`` — the starting tree, ``{path: text}`` (procedural tasks), or ``repo_path`` — a local
  folder whose files are copied at each reset (loaded rows);
* ``hidden_tests`` — ``{path: text}``: test files added only at grading time, inside the sandbox;
* ``fail_to_pass`` / ``pass_to_pass`` — pytest node ids (``path::name``) that must all pass;
* ``gold_patch`` — the fix as a unified diff (for the oracle), and for procedural tasks
  ``gold_edits``, the same fix as search-and-replace edits.

:class:`RepoTasks` builds small Python libraries (summary statistics, text helpers, an interval
type, an inventory), injects one bug of a kind — ``off_by_one``, ``wrong_operator``,
``missing_edge_case``, ``wrong_default`` — and writes an issue describing the symptom (never the
fix), fail-to-pass tests that catch the bug and pass-to-pass tests that do not touch it.
:func:`load_repo_tasks` reads SWE-bench-style JSONL rows pointing at local repositories.
"""

from __future__ import annotations

import difflib
import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ludus.core.env import Split
from ludus.core.types import Task
from ludus.envs.repo.verifier import valid_test_id
from ludus.tasks.loaders import TaskFileError
from ludus.tasks.procedural import seed_tag

BUG_KINDS = ("off_by_one", "wrong_operator", "missing_edge_case", "wrong_default")
HIDDEN_TEST_FILE = "tests/test_regression.py"

# a test helper: equal values of exactly the same types, so an object whose ``__eq__`` always
# says True (or an int subclass) never passes for the expected value
SAME = """

def _same(actual, expected):
    if type(actual) is not type(expected):
        return False
    if isinstance(expected, (list, tuple)):
        return len(actual) == len(expected) and all(_same(a, e) for a, e in zip(actual, expected))
    if isinstance(expected, float):
        return abs(actual - expected) <= 1e-9 * max(1.0, abs(expected))
    return expected == actual
"""


@dataclass(frozen=True)
class Bug:
    """One injectable bug: ``fixed`` in module ``module`` becomes ``buggy``."""

    name: str
    kind: str
    feature: str  # what the bug breaks, in words
    module: str
    fixed: str
    buggy: str
    issue: Callable[[random.Random, str], tuple[str, list[tuple[str, str]]]]  # -> (issue, f2p tests)
    breaks: frozenset[str] = frozenset()  # features whose ordinary tests fail under the bug: not pass-to-pass


@dataclass(frozen=True)
class Library:
    name: str
    packages: tuple[str, ...]
    modules: dict[str, str]  # module name -> source with {pkg}
    imports: str  # the test files' import lines, with {pkg}
    features: dict[str, Callable[[random.Random], list[tuple[str, str]]]]  # feature -> tests
    uses: dict[str, frozenset[str]]  # feature -> the features its tests rely on
    bugs: tuple[Bug, ...]


def _ints(rng: random.Random, n: int, lo: int = -20, hi: int = 40) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(n)]


def _words(rng: random.Random, n: int) -> list[str]:
    pool = ["alpha", "river", "stone", "maple", "cloud", "ember", "quartz", "lemon", "orbit", "tiger", "velvet", "noon"]
    return rng.sample(pool, n)


# ---- library 1: summary statistics ----

STATS_SUMMARY = '''"""Summary statistics of lists of numbers."""


def mean(values):
    """The arithmetic mean. Raises ValueError on empty input."""
    if not values:
        raise ValueError("mean of empty data")
    return sum(values) / len(values)


def median(values):
    """The middle value; for an even count, the mean of the two middle values."""
    if not values:
        raise ValueError("median of empty data")
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2 == 1:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2


def variance(values, ddof=0):
    """The variance: ddof=0 (the default) gives the population variance, ddof=1 the sample one."""
    if len(values) <= ddof:
        raise ValueError("not enough data")
    m = mean(values)
    return sum((v - m) ** 2 for v in values) / (len(values) - ddof)
'''

STATS_SERIES = '''"""Operations on series of numbers."""


def moving_average(values, window):
    """The mean of every run of `window` consecutive values, in order."""
    if window < 1:
        raise ValueError("window must be at least 1")
    return [sum(values[i : i + window]) / window for i in range(len(values) - window + 1)]


def clamp(value, low, high):
    """`value` limited to the range [low, high]."""
    if value < low:
        return low
    if value > high:
        return high
    return value


def cumulative(values):
    """Running totals of `values`."""
    total, out = 0, []
    for v in values:
        total += v
        out.append(total)
    return out
'''


def _mean(xs: list[int]) -> float:
    return sum(xs) / len(xs)


def _stats_features() -> dict[str, Callable[[random.Random], list[tuple[str, str]]]]:
    def mean_t(rng: random.Random) -> list[tuple[str, str]]:
        xs = _ints(rng, rng.randint(3, 6))
        return [("test_mean", f"assert _same(mean({xs}), {_mean(xs)!r})")]

    def median_t(rng: random.Random) -> list[tuple[str, str]]:
        xs = _ints(rng, rng.choice([3, 5, 7]))
        return [("test_median_odd", f"assert _same(median({xs}), {sorted(xs)[len(xs) // 2]!r})")]

    def variance_t(rng: random.Random) -> list[tuple[str, str]]:
        xs = _ints(rng, rng.randint(3, 6))
        m = _mean(xs)
        sample = sum((v - m) ** 2 for v in xs) / (len(xs) - 1)
        return [("test_sample_variance", f"assert _same(variance({xs}, ddof=1), {sample!r})")]

    def moving_t(rng: random.Random) -> list[tuple[str, str]]:
        xs = _ints(rng, rng.randint(3, 6))
        return [
            ("test_moving_average_window_one", f"assert _same(moving_average({xs}, 1), {[float(x) for x in xs]!r})")
        ]

    def clamp_t(rng: random.Random) -> list[tuple[str, str]]:
        lo = rng.randint(-10, 0)
        hi = lo + rng.randint(5, 15)
        return [
            ("test_clamp_inside", f"assert _same(clamp({lo + 2}, {lo}, {hi}), {lo + 2})"),
            ("test_clamp_outside", f"assert _same(clamp({hi + 7}, {lo}, {hi}), {hi}) and _same(clamp({lo - 3}, {lo}, {hi}), {lo})"),
        ]  # fmt: skip

    def cumulative_t(rng: random.Random) -> list[tuple[str, str]]:
        xs = _ints(rng, rng.randint(2, 6))
        out, total = [], 0
        for x in xs:
            total += x
            out.append(total)
        return [("test_cumulative", f"assert _same(cumulative({xs}), {out!r})")]

    return {
        "mean": mean_t,
        "median": median_t,
        "variance": variance_t,
        "moving_average": moving_t,
        "clamp": clamp_t,
        "cumulative": cumulative_t,
    }


def _stats_bugs() -> tuple[Bug, ...]:
    def moving(rng: random.Random, pkg: str) -> tuple[str, list[tuple[str, str]]]:
        w = rng.randint(2, 3)
        xs = _ints(rng, rng.randint(w + 2, w + 4))
        want = [sum(xs[i : i + w]) / w for i in range(len(xs) - w + 1)]
        issue = (
            f"`{pkg}.series.moving_average({xs}, {w})` returns {len(want) - 1} averages, but there are "
            f"{len(want)} runs of {w} consecutive values: the average of the last run "
            f"({want[-1]!r}) is missing."
        )
        return issue, [
            ("test_moving_average_covers_every_window", f"assert _same(moving_average({xs}, {w}), {want!r})")
        ]

    def median(rng: random.Random, pkg: str) -> tuple[str, list[tuple[str, str]]]:
        while True:
            xs = _ints(rng, rng.choice([4, 6]))
            s = sorted(xs)
            pair = s[len(s) // 2 - 1] + s[len(s) // 2]
            if pair % 2:
                break
        want = pair / 2
        issue = (
            f"`{pkg}.summary.median({xs})` returns {pair // 2}, but the median of an even number of values "
            f"is the mean of the two middle ones: {want!r}."
        )
        return issue, [("test_median_even_count", f"assert _same(median({xs}), {want!r})")]

    def mean_empty(rng: random.Random, pkg: str) -> tuple[str, list[tuple[str, str]]]:
        issue = (
            f"`{pkg}.summary.mean([])` crashes with ZeroDivisionError. The docstring promises a "
            "ValueError for empty input, which callers catch."
        )
        test = "with pytest.raises(ValueError):\n        mean([])"
        return issue, [("test_mean_of_empty_data_is_a_value_error", test)]

    def variance_default(rng: random.Random, pkg: str) -> tuple[str, list[tuple[str, str]]]:
        xs = _ints(rng, rng.randint(4, 6))
        m = _mean(xs)
        ss = sum((v - m) ** 2 for v in xs)
        issue = (
            f"`{pkg}.summary.variance({xs})` returns {ss / (len(xs) - 1):.4f}, the sample variance, "
            f"but the documented default is the population variance ({ss / len(xs):.4f})."
        )
        return issue, [("test_variance_default_is_population", f"assert _same(variance({xs}), {ss / len(xs)!r})")]

    return (
        Bug(
            "moving_average_drops_last",
            "off_by_one",
            "moving_average",
            "series",
            "range(len(values) - window + 1)",
            "range(len(values) - window)",
            moving,
            frozenset({"moving_average"}),
        ),
        Bug(
            "median_floor_division",
            "wrong_operator",
            "median",
            "summary",
            "(ordered[mid - 1] + ordered[mid]) / 2",
            "(ordered[mid - 1] + ordered[mid]) // 2",
            median,
        ),
        Bug(
            "mean_empty",
            "missing_edge_case",
            "mean",
            "summary",
            '    if not values:\n        raise ValueError("mean of empty data")\n    return sum(values) / len(values)',
            "    return sum(values) / len(values)",
            mean_empty,
        ),
        Bug(
            "variance_sample_default",
            "wrong_default",
            "variance",
            "summary",
            "def variance(values, ddof=0):",
            "def variance(values, ddof=1):",
            variance_default,
        ),
    )


# ---- library 2: text helpers ----

TEXT_FORMAT = '''"""Formatting helpers for short texts."""


def truncate(text, width, suffix="..."):
    """`text` cut to at most `width` characters, ending in `suffix` when it was cut."""
    if len(text) <= width:
        return text
    return text[: width - len(suffix)] + suffix


def slugify(text, sep="-"):
    """The lower-cased words of `text` (letters and digits) joined by `sep`."""
    words = "".join(c if c.isalnum() else " " for c in text.lower()).split()
    return sep.join(words)
'''

TEXT_WORDS = '''"""Word-level helpers."""


def first_word(text):
    """The first whitespace-separated word of `text`, or "" when there is none."""
    words = text.split()
    if not words:
        return ""
    return words[0]


def count_longer(text, n):
    """How many words of `text` have more than `n` characters."""
    return sum(1 for w in text.split() if len(w) > n)


def is_palindrome(text):
    """True when the letters and digits of `text` read the same both ways, ignoring case."""
    cleaned = [c.lower() for c in text if c.isalnum()]
    return cleaned == cleaned[::-1]
'''


def _text_features() -> dict[str, Callable[[random.Random], list[tuple[str, str]]]]:
    def truncate_t(rng: random.Random) -> list[tuple[str, str]]:
        w = " ".join(_words(rng, 2))
        return [("test_truncate_short_text_unchanged", f"assert _same(truncate({w!r}, {len(w) + 3}), {w!r})")]

    def slugify_t(rng: random.Random) -> list[tuple[str, str]]:
        a, b, c = _words(rng, 3)
        text = f"{a.title()}, {b}!  {c.upper()}"
        return [
            ("test_slugify_custom_separator", f"assert _same(slugify({text!r}, sep='+'), {a + '+' + b + '+' + c!r})")
        ]

    def first_t(rng: random.Random) -> list[tuple[str, str]]:
        a, b = _words(rng, 2)
        return [("test_first_word", f"assert _same(first_word('  {a} {b}'), {a!r})")]

    def count_t(rng: random.Random) -> list[tuple[str, str]]:
        ws = _words(rng, 5)
        n = 3
        return [("test_count_longer_short_limit", f"assert _same(count_longer({' '.join(ws)!r}, {n}), {sum(len(x) > n for x in ws)})")]  # fmt: skip

    def palindrome_t(rng: random.Random) -> list[tuple[str, str]]:
        w = rng.choice(["Never odd or even", "Step on no pets", "Was it a car, or a cat I saw?"])
        return [("test_palindrome", f"assert is_palindrome({w!r}) is True and is_palindrome('ludus') is False")]

    return {"truncate": truncate_t, "slugify": slugify_t, "first_word": first_t, "count_longer": count_t, "is_palindrome": palindrome_t}  # fmt: skip


def _text_bugs() -> tuple[Bug, ...]:
    def truncate(rng: random.Random, pkg: str) -> tuple[str, list[tuple[str, str]]]:
        text = " ".join(_words(rng, 3))
        width = rng.randint(7, len(text) - 3)
        want = text[: width - 3] + "..."
        issue = (
            f"`{pkg}.format.truncate({text!r}, {width})` returns a string of {width + 1} characters; "
            f"the result must never be longer than the width ({width})."
        )
        return issue, [("test_truncate_respects_width", f"assert _same(truncate({text!r}, {width}), {want!r})")]

    def slug(rng: random.Random, pkg: str) -> tuple[str, list[tuple[str, str]]]:
        a, b, c = _words(rng, 3)
        text = f"{a.title()} {b} {c}"
        issue = (
            f"`{pkg}.format.slugify({text!r})` gives {a + '_' + b + '_' + c!r}, but slugs are meant for URLs "
            f"and the default separator is documented everywhere as a hyphen: {a + '-' + b + '-' + c!r}."
        )
        return issue, [("test_slugify_default_separator", f"assert _same(slugify({text!r}), {a + '-' + b + '-' + c!r})")]  # fmt: skip

    def first(rng: random.Random, pkg: str) -> tuple[str, list[tuple[str, str]]]:
        blank = rng.choice(["", "   ", "\t\n"])
        issue = f"`{pkg}.words.first_word({blank!r})` raises IndexError instead of returning an empty string."
        return issue, [("test_first_word_of_blank_text", f"assert _same(first_word({blank!r}), '') and _same(first_word(''), '')")]  # fmt: skip

    def longer(rng: random.Random, pkg: str) -> tuple[str, list[tuple[str, str]]]:
        ws = _words(rng, 4)
        n = len(ws[0])
        text = " ".join(ws)
        want = sum(len(w) > n for w in ws)
        issue = (
            f"`{pkg}.words.count_longer({text!r}, {n})` returns {sum(len(w) >= n for w in ws)}: words of exactly "
            f"{n} characters are counted, though only longer words should be ({want})."
        )
        return issue, [("test_count_longer_is_strict", f"assert _same(count_longer({text!r}, {n}), {want})")]

    return (
        Bug("truncate_too_long", "off_by_one", "truncate", "format",
            "text[: width - len(suffix)]", "text[: width - len(suffix) + 1]", truncate),
        Bug("slugify_underscore", "wrong_default", "slugify", "format",
            'def slugify(text, sep="-"):', 'def slugify(text, sep="_"):', slug),
        Bug("first_word_blank", "missing_edge_case", "first_word", "words",
            '    if not words:\n        return ""\n    return words[0]', "    return words[0]", first),
        Bug("count_longer_inclusive", "wrong_operator", "count_longer", "words",
            "if len(w) > n)", "if len(w) >= n)", longer),
    )  # fmt: skip


# ---- library 3: an interval type ----

INTERVAL = '''"""Half-open intervals [start, end) of numbers."""


class Interval:
    """The numbers x with start <= x < end."""

    def __init__(self, start, end):
        if end < start:
            raise ValueError("an interval cannot end before it starts")
        self.start = start
        self.end = end

    def __repr__(self):
        return f"Interval({self.start!r}, {self.end!r})"

    def length(self):
        return self.end - self.start

    def contains(self, x):
        return self.start <= x < self.end

    def overlaps(self, other):
        """True when the two intervals share at least one number."""
        return self.start < other.end and other.start < self.end

    def expanded(self, margin=1):
        """The interval grown by `margin` on each side (1 by default)."""
        return Interval(self.start - margin, self.end + margin)
'''

INTERVAL_OPS = '''"""Operations on collections of intervals."""

from {pkg}.interval import Interval


def merge(intervals):
    """The union of `intervals` as sorted, disjoint intervals (touching ones are joined)."""
    out = []
    for iv in sorted(intervals, key=lambda i: (i.start, i.end)):
        if out and iv.start <= out[-1].end:
            out[-1] = Interval(out[-1].start, max(out[-1].end, iv.end))
        else:
            out.append(Interval(iv.start, iv.end))
    return out


def total_length(intervals):
    """The length of the union of `intervals`."""
    return sum(iv.length() for iv in merge(intervals))
'''


def _interval_features() -> dict[str, Callable[[random.Random], list[tuple[str, str]]]]:
    def contains_t(rng: random.Random) -> list[tuple[str, str]]:
        a = rng.randint(-10, 10)
        b = a + rng.randint(3, 9)
        return [("test_contains_start_and_inside", f"iv = Interval({a}, {b})\n    assert iv.contains({a}) is True and iv.contains({a + 1}) is True and iv.contains({a - 1}) is False")]  # fmt: skip

    def overlaps_t(rng: random.Random) -> list[tuple[str, str]]:
        a = rng.randint(-10, 10)
        return [("test_overlapping_intervals", f"assert Interval({a}, {a + 5}).overlaps(Interval({a + 3}, {a + 9})) is True and Interval({a}, {a + 2}).overlaps(Interval({a + 4}, {a + 6})) is False")]  # fmt: skip

    def length_t(rng: random.Random) -> list[tuple[str, str]]:
        a, n = rng.randint(-10, 10), rng.randint(1, 9)
        return [("test_length", f"assert _same(Interval({a}, {a + n}).length(), {n})")]

    def expanded_t(rng: random.Random) -> list[tuple[str, str]]:
        a, m = rng.randint(-10, 10), rng.randint(2, 4)
        return [("test_expanded_by_margin", f"iv = Interval({a}, {a + 3}).expanded({m})\n    assert _same((iv.start, iv.end), ({a - m}, {a + 3 + m}))")]  # fmt: skip

    def merge_t(rng: random.Random) -> list[tuple[str, str]]:
        a = rng.randint(-10, 10)
        pairs = [(a + 6, a + 9), (a, a + 3), (a + 2, a + 5)]
        want = [(a, a + 5), (a + 6, a + 9)]
        code = f"merged = merge([Interval(s, e) for s, e in {pairs}])\n    assert _same([(i.start, i.end) for i in merged], {want})"
        return [("test_merge", code)]

    def total_t(rng: random.Random) -> list[tuple[str, str]]:
        a = rng.randint(-10, 10)
        return [("test_total_length", f"assert _same(total_length([Interval({a}, {a + 4}), Interval({a + 2}, {a + 7})]), 7)")]  # fmt: skip

    return {"contains": contains_t, "overlaps": overlaps_t, "length": length_t, "expanded": expanded_t, "merge": merge_t, "total_length": total_t}  # fmt: skip


def _interval_bugs() -> tuple[Bug, ...]:
    def contains(rng: random.Random, pkg: str) -> tuple[str, list[tuple[str, str]]]:
        a = rng.randint(-10, 10)
        b = a + rng.randint(2, 8)
        issue = (
            f"`Interval({a}, {b}).contains({b})` returns True, but intervals are half-open: the end "
            f"point {b} is not part of [{a}, {b})."
        )
        return issue, [("test_end_is_excluded", f"assert Interval({a}, {b}).contains({b}) is False")]

    def length(rng: random.Random, pkg: str) -> tuple[str, list[tuple[str, str]]]:
        a, n = rng.randint(-10, 10), rng.randint(2, 9)
        issue = (
            f"`Interval({a}, {a + n}).length()` returns {n + 1}; a half-open interval [{a}, {a + n}) has length {n}."
        )
        return issue, [("test_length_of_half_open_interval", f"assert _same(Interval({a}, {a + n}).length(), {n})")]

    def reversed_(rng: random.Random, pkg: str) -> tuple[str, list[tuple[str, str]]]:
        a = rng.randint(0, 10)
        b = a - rng.randint(1, 5)
        issue = (
            f"`{pkg}.interval.Interval({a}, {b})` is accepted silently and then reports a negative length; "
            "an interval that ends before it starts should be rejected with a ValueError."
        )
        return issue, [("test_reversed_interval_is_rejected", f"with pytest.raises(ValueError):\n        Interval({a}, {b})")]  # fmt: skip

    def margin(rng: random.Random, pkg: str) -> tuple[str, list[tuple[str, str]]]:
        a = rng.randint(-10, 10)
        issue = (
            f"`Interval({a}, {a + 4}).expanded()` returns the interval unchanged; the docstring says it "
            f"grows by 1 on each side by default, i.e. Interval({a - 1}, {a + 5})."
        )
        code = f"iv = Interval({a}, {a + 4}).expanded()\n    assert _same((iv.start, iv.end), ({a - 1}, {a + 5}))"
        return issue, [("test_expanded_default_margin", code)]

    def touching(rng: random.Random, pkg: str) -> tuple[str, list[tuple[str, str]]]:
        a = rng.randint(-10, 10)
        b = a + rng.randint(2, 6)
        issue = (
            f"`Interval({a}, {b}).overlaps(Interval({b}, {b + 3}))` returns True, but the two intervals share "
            "no number: they only touch."
        )
        return issue, [("test_touching_intervals_do_not_overlap", f"assert Interval({a}, {b}).overlaps(Interval({b}, {b + 3})) is False")]  # fmt: skip

    return (
        Bug("contains_end", "wrong_operator", "contains", "interval",
            "self.start <= x < self.end", "self.start <= x <= self.end", contains),
        Bug("length_plus_one", "off_by_one", "length", "interval",
            "return self.end - self.start", "return self.end - self.start + 1", length, frozenset({"length"})),
        Bug("reversed_accepted", "missing_edge_case", "init", "interval",
            '        if end < start:\n            raise ValueError("an interval cannot end before it starts")\n', "", reversed_),
        Bug("expanded_zero", "wrong_default", "expanded", "interval",
            "def expanded(self, margin=1):", "def expanded(self, margin=0):", margin),
        Bug("overlaps_touching", "wrong_operator", "overlaps", "interval",
            "self.start < other.end and other.start < self.end", "self.start <= other.end and other.start <= self.end", touching),
    )  # fmt: skip


# ---- library 4: an inventory ----

STOCK = '''"""Item counts of a small store."""


class Inventory:
    """How many units of each item are in stock."""

    def __init__(self):
        self._counts = {}

    def add(self, item, qty=1):
        """Add `qty` units of `item` (one unit by default)."""
        if qty < 0:
            raise ValueError("quantity must not be negative")
        self._counts[item] = self._counts.get(item, 0) + qty

    def remove(self, item, qty=1):
        """Take `qty` units of `item` out; ValueError when fewer are in stock."""
        have = self._counts.get(item, 0)
        if qty > have:
            raise ValueError(f"only {have} of {item!r} in stock")
        self._counts[item] = have - qty

    def count(self, item):
        return self._counts.get(item, 0)

    def low_stock(self, threshold=5):
        """Items with fewer than `threshold` units, sorted by name."""
        return sorted(item for item, n in self._counts.items() if n < threshold)
'''

STOCK_REPORT = '''"""Reports over item counts (dicts of item -> units)."""


def total_value(counts, prices):
    """The value of the stock: units times unit price, summed over items."""
    return sum(n * prices[item] for item, n in counts.items())


def top_items(counts, n):
    """The `n` items with the most units, most first (ties by name)."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [item for item, _ in ranked[:n]]
'''


def _stock_features() -> dict[str, Callable[[random.Random], list[tuple[str, str]]]]:
    def add_t(rng: random.Random) -> list[tuple[str, str]]:
        w, q = _words(rng, 1)[0], rng.randint(2, 9)
        return [("test_add_and_count", f"inv = Inventory()\n    inv.add({w!r}, {q})\n    inv.add({w!r}, 2)\n    assert _same(inv.count({w!r}), {q + 2})")]  # fmt: skip

    def remove_t(rng: random.Random) -> list[tuple[str, str]]:
        w, q = _words(rng, 1)[0], rng.randint(4, 9)
        return [("test_remove_some", f"inv = Inventory()\n    inv.add({w!r}, {q})\n    inv.remove({w!r}, 3)\n    assert _same(inv.count({w!r}), {q - 3})")]  # fmt: skip

    def low_t(rng: random.Random) -> list[tuple[str, str]]:
        a, b = sorted(_words(rng, 2))
        return [("test_low_stock", f"inv = Inventory()\n    inv.add({a!r}, 1)\n    inv.add({b!r}, 40)\n    assert _same(inv.low_stock(), [{a!r}])")]  # fmt: skip

    def value_t(rng: random.Random) -> list[tuple[str, str]]:
        a, b = _words(rng, 2)
        qa, qb, pa, pb = (rng.randint(2, 9) for _ in range(4))
        return [("test_total_value", f"assert _same(total_value({{{a!r}: {qa}, {b!r}: {qb}}}, {{{a!r}: {pa}, {b!r}: {pb}}}), {qa * pa + qb * pb})")]  # fmt: skip

    def top_t(rng: random.Random) -> list[tuple[str, str]]:
        ws = _words(rng, 4)
        counts = {w: rng.randint(1, 50) for w in ws}
        want = [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
        return [("test_top_items_all", f"assert _same(top_items({counts!r}, {len(ws) + 2}), {want!r})")]

    return {"add": add_t, "remove": remove_t, "low_stock": low_t, "total_value": value_t, "top_items": top_t}


def _stock_bugs() -> tuple[Bug, ...]:
    def add_default(rng: random.Random, pkg: str) -> tuple[str, list[tuple[str, str]]]:
        w = _words(rng, 1)[0]
        issue = f"After `inv.add({w!r})` (no quantity), `inv.count({w!r})` is 0; adding an item should add one unit by default."
        return issue, [("test_add_defaults_to_one_unit", f"inv = Inventory()\n    inv.add({w!r})\n    inv.add({w!r})\n    assert _same(inv.count({w!r}), 2)")]  # fmt: skip

    def remove_check(rng: random.Random, pkg: str) -> tuple[str, list[tuple[str, str]]]:
        w, q = _words(rng, 1)[0], rng.randint(1, 4)
        issue = (
            f"Removing more than is in stock is accepted: with {q} units of {w!r}, `inv.remove({w!r}, {q + 2})` "
            f"leaves a count of -2. It should raise ValueError and leave the count at {q}."
        )
        code = (
            f"inv = Inventory()\n    inv.add({w!r}, {q})\n    with pytest.raises(ValueError):\n"
            f"        inv.remove({w!r}, {q + 2})\n    assert _same(inv.count({w!r}), {q})"
        )
        return issue, [("test_cannot_remove_more_than_in_stock", code)]

    def low(rng: random.Random, pkg: str) -> tuple[str, list[tuple[str, str]]]:
        a, b = sorted(_words(rng, 2))
        t = rng.randint(3, 8)
        issue = (
            f"`low_stock({t})` lists items that have exactly {t} units; only items with fewer than "
            f"the threshold should be listed."
        )
        code = f"inv = Inventory()\n    inv.add({a!r}, {t - 1})\n    inv.add({b!r}, {t})\n    assert _same(inv.low_stock({t}), [{a!r}])"
        return issue, [("test_low_stock_threshold_is_strict", code)]

    def value(rng: random.Random, pkg: str) -> tuple[str, list[tuple[str, str]]]:
        a, b = _words(rng, 2)
        qa, qb, pa, pb = 2, 2, 2, 2
        while qa + pa + qb + pb == qa * pa + qb * pb:
            qa, qb, pa, pb = (rng.randint(2, 9) for _ in range(4))
        issue = (
            f"`total_value({{{a!r}: {qa}, {b!r}: {qb}}}, {{{a!r}: {pa}, {b!r}: {pb}}})` returns {qa + pa + qb + pb}; "
            f"{qa} units at {pa} and {qb} units at {pb} are worth {qa * pa + qb * pb}."
        )
        return issue, [("test_total_value_multiplies", f"assert _same(total_value({{{a!r}: {qa}, {b!r}: {qb}}}, {{{a!r}: {pa}, {b!r}: {pb}}}), {qa * pa + qb * pb})")]  # fmt: skip

    def top(rng: random.Random, pkg: str) -> tuple[str, list[tuple[str, str]]]:
        ws = _words(rng, 5)
        counts = {w: rng.randint(1, 50) for w in ws}
        n = rng.randint(2, 4)
        want = [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))][:n]
        issue = f"`top_items(counts, {n})` returns only {n - 1} items for an inventory of {len(ws)} items."
        return issue, [("test_top_items_returns_n", f"assert _same(top_items({counts!r}, {n}), {want!r})")]

    return (
        Bug("add_zero_default", "wrong_default", "add", "stock",
            "def add(self, item, qty=1):", "def add(self, item, qty=0):", add_default),
        Bug("remove_unchecked", "missing_edge_case", "remove", "stock",
            '        if qty > have:\n            raise ValueError(f"only {have} of {item!r} in stock")\n', "", remove_check),
        Bug("low_stock_inclusive", "wrong_operator", "low_stock", "stock",
            "if n < threshold)", "if n <= threshold)", low),
        Bug("total_value_adds", "wrong_operator", "total_value", "report",
            "n * prices[item]", "n + prices[item]", value, frozenset({"total_value"})),
        Bug("top_items_short", "off_by_one", "top_items", "report",
            "ranked[:n]", "ranked[: n - 1]", top),
    )  # fmt: skip


def _same_deps(features: dict[str, Any], extra: dict[str, frozenset[str]]) -> dict[str, frozenset[str]]:
    return {f: frozenset({f}) | extra.get(f, frozenset()) for f in features}


def libraries() -> tuple[Library, ...]:
    """The four procedural libraries (built fresh: they hold only functions and sources)."""
    stats_f, text_f, iv_f, stock_f = _stats_features(), _text_features(), _interval_features(), _stock_features()
    return (
        Library(
            "stats", ("statkit", "numtally", "figurine"),
            {"summary": STATS_SUMMARY, "series": STATS_SERIES},
            "from {pkg}.series import clamp, cumulative, moving_average\nfrom {pkg}.summary import mean, median, variance",
            stats_f, _same_deps(stats_f, {"variance": frozenset({"mean"})}), _stats_bugs(),
        ),
        Library(
            "text", ("textkit", "wordsmithy", "glyphs"),
            {"format": TEXT_FORMAT, "words": TEXT_WORDS},
            "from {pkg}.format import slugify, truncate\nfrom {pkg}.words import count_longer, first_word, is_palindrome",
            text_f, _same_deps(text_f, {}), _text_bugs(),
        ),
        Library(
            "interval", ("spanlib", "rangekit", "segmenta"),
            {"interval": INTERVAL, "ops": INTERVAL_OPS},
            "from {pkg}.interval import Interval\nfrom {pkg}.ops import merge, total_length",
            iv_f,
            _same_deps(iv_f, {"total_length": frozenset({"length", "merge"})}),
            _interval_bugs(),
        ),
        Library(
            "inventory", ("stockroom", "depotly", "pantryware"),
            {"stock": STOCK, "report": STOCK_REPORT},
            "from {pkg}.report import top_items, total_value\nfrom {pkg}.stock import Inventory",
            stock_f,
            _same_deps(stock_f, {"remove": frozenset({"add"}), "low_stock": frozenset({"add"})}),
            _stock_bugs(),
        ),
    )  # fmt: skip


def bug_catalogue() -> list[tuple[str, str]]:
    """Every ``(library, bug)`` pair the generator can produce."""
    return [(lib.name, bug.name) for lib in libraries() for bug in lib.bugs]


def _test_file(imports: str, tests: list[tuple[str, str]]) -> str:
    body = "".join(f"\n\ndef {name}():\n    {code}\n" for name, code in tests)
    return f"import pytest\n\n{imports}\n{SAME}{body}"


def _unique(tests: list[tuple[str, str]]) -> list[tuple[str, str]]:
    seen: dict[str, int] = {}
    out = []
    for name, code in tests:
        seen[name] = seen.get(name, 0) + 1
        out.append((name if seen[name] == 1 else f"{name}_{seen[name]}", code))
    return out


def unified_diff(before: dict[str, str], after: dict[str, str]) -> str:
    """A git-style unified diff from ``before`` to ``after`` (text files)."""
    chunks = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        chunks.extend(
            difflib.unified_diff(
                (old or "").splitlines(keepends=True),
                (new or "").splitlines(keepends=True),
                "/dev/null" if old is None else f"a/{path}",
                "/dev/null" if new is None else f"b/{path}",
            )
        )
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in chunks)


def make_task(rng: random.Random, library: Library, bug: Bug, task_id: str, source: str) -> Task:
    """One procedural repository task: ``bug`` injected into ``library``."""
    pkg = rng.choice(library.packages)
    fixed = {f"{pkg}/__init__.py": f'"""{pkg}: small {library.name} helpers."""\n'}
    for module, src in library.modules.items():
        fixed[f"{pkg}/{module}.py"] = src.replace("{pkg}", pkg)
    buggy = dict(fixed)
    path = f"{pkg}/{bug.module}.py"
    if buggy[path].count(bug.fixed) != 1:
        raise RuntimeError(f"bug {bug.name}: its snippet must occur exactly once in {path}")
    buggy[path] = buggy[path].replace(bug.fixed, bug.buggy)
    issue, f2p = bug.issue(rng, pkg)
    imports = library.imports.replace("{pkg}", pkg)
    safe = [f for f, deps in library.uses.items() if not deps & bug.breaks]
    visible = _unique([t for f in safe for t in library.features[f](rng)])
    p2p_hidden = _unique([t for f in safe for t in library.features[f](rng)])
    visible_file = f"tests/test_{library.name}.py"
    hidden_tests = _unique(f2p + [(f"{n}_again", c) for n, c in p2p_hidden])
    files = {
        **buggy,
        "README.md": f"# {pkg}\n\nSmall {library.name} helpers. Run the tests with `python -m pytest -q`.\n",
        visible_file: _test_file(imports, visible),
    }
    f2p_ids = [f"{HIDDEN_TEST_FILE}::{n}" for n, _ in hidden_tests[: len(f2p)]]
    p2p_ids = [f"{HIDDEN_TEST_FILE}::{n}" for n, _ in hidden_tests[len(f2p) :]]
    p2p_ids += [f"{visible_file}::{n}" for n, _ in visible]
    prompt = (
        f"You are working in the repository of the Python package `{pkg}`.\n\n"
        f"Issue:\n{issue}\n\n"
        "Fix the bug in the package's code so that the issue is resolved without breaking anything else. "
        "Use the tools to look at the files, edit them and run commands (e.g. `python -m pytest -q`); "
        "call submit() when you are done."
    )
    answer = {
        "files": files,
        "hidden_tests": {HIDDEN_TEST_FILE: _test_file(imports, hidden_tests)},
        "fail_to_pass": f2p_ids,
        "pass_to_pass": p2p_ids,
        "gold_patch": unified_diff(buggy, fixed),
        "gold_edits": [{"path": path, "search": bug.buggy, "replace": bug.fixed}],
    }
    if not bug.buggy:  # a deleted block: the edit re-inserts it after the line before it
        before_line = _context(fixed[path], bug.fixed)
        answer["gold_edits"] = [{"path": path, "search": before_line, "replace": before_line + bug.fixed}]
    info = {"library": library.name, "package": pkg, "bug": bug.name, "bug_kind": bug.kind}
    return Task(id=task_id, prompt=prompt, answer=answer, info=info, source=source)


def _context(source: str, block: str) -> str:
    """The line just before ``block`` in ``source`` (unique in the buggy file, where ``block`` is gone)."""
    head = source[: source.index(block)]
    return head.splitlines(keepends=True)[-1]


class RepoTasks:
    """An endless, seeded :class:`~ludus.core.env.TaskSource` of procedural repository tasks.

    Task ``i`` uses ``random.Random(f"repo:{seed}:{split}:{i}")``; its library and bug are
    entry ``i mod N`` of a seeded shuffle of all N ``(library, bug)`` pairs, so any N
    consecutive indices cover every bug. Values, package names and tests vary with ``i``;
    train and eval use different random streams (not guaranteed disjoint bug types).
    """

    size: int | None = None

    def __init__(self, seed: int = 0, split: Split = "train"):
        if split not in ("train", "eval"):
            raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
        self.seed, self.split = seed, split
        self._libraries = libraries()
        self._pairs = [(lib, bug) for lib in self._libraries for bug in lib.bugs]
        random.Random(f"repo-order:{seed}:{split}").shuffle(self._pairs)

    def get(self, index: int) -> Task:
        library, bug = self._pairs[index % len(self._pairs)]
        rng = random.Random(f"repo:{self.seed}:{self.split}:{index}")
        return make_task(rng, library, bug, f"repo/{self.split}/{seed_tag(self.seed)}/{index}", "repo")


# ---- applying unified diffs (gold patches, test patches) ----


class PatchError(ValueError):
    """A unified diff that does not apply; the message names the file and hunk."""


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _diff_path(line: str) -> str | None:
    name = line[4:].split("\t", 1)[0].strip()
    if name == "/dev/null":
        return None
    return name[2:] if name[:2] in ("a/", "b/") else name


def apply_patch(files: dict[str, str], patch: str) -> dict[str, str]:
    """``files`` with the unified diff ``patch`` applied (new and deleted files included).
    Each hunk must match exactly, at its line or anywhere in the file. Raises PatchError."""
    out = dict(files)
    lines = patch.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        if not (lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")):
            i += 1
            continue
        old_path, new_path = _diff_path(lines[i]), _diff_path(lines[i + 1])
        path = new_path or old_path
        if path is None:
            raise PatchError(f"line {i + 1}: a file diff from /dev/null to /dev/null")
        if old_path is not None and old_path not in out:
            raise PatchError(f"{old_path}: the patch changes a file that does not exist")
        text = out.get(old_path, "") if old_path else ""
        current = text.splitlines(keepends=True)
        i += 2
        offset = 0
        while i < len(lines) and lines[i].startswith("@@"):
            m = _HUNK.match(lines[i])
            if not m:
                raise PatchError(f"{path}: malformed hunk header {lines[i].strip()!r}")
            i += 1
            old, new = [], []
            while i < len(lines) and lines[i][:1] in (" ", "-", "+", "\\"):
                line = lines[i]
                if line.startswith("\\"):
                    for side in (old, new) if lines[i - 1][:1] == " " else ((old,) if lines[i - 1][:1] == "-" else (new,)):  # fmt: skip
                        if side:
                            side[-1] = side[-1].rstrip("\n")
                elif line[0] in " -":
                    old.append(line[1:])
                    if line[0] == " ":
                        new.append(line[1:])
                else:
                    new.append(line[1:])
                i += 1
            start = max(int(m.group(1)) - 1, 0) + offset if old else int(m.group(1)) + offset
            at = _find(current, old, start)
            if at is None:
                raise PatchError(f"{path}: hunk {m.group(0)!r} does not match the file")
            current[at : at + len(old)] = new
            offset += len(new) - len(old)
        if new_path is None:
            out.pop(path, None)
        else:
            if old_path and old_path != new_path:
                out.pop(old_path, None)
            out[new_path] = "".join(current)
    return out


def _find(lines: list[str], block: list[str], start: int) -> int | None:
    if not block:
        return min(start, len(lines))
    candidates = [start] + sorted(range(len(lines) - len(block) + 1), key=lambda k: abs(k - start))
    for k in candidates:
        if 0 <= k <= len(lines) - len(block) and lines[k : k + len(block)] == block:
            return k
    return None


# ---- SWE-bench-style rows ----


def _ids(row: dict[str, Any], name: str, fail: Callable[[str, str], TaskFileError]) -> list[str]:
    value = row.get(name)
    if isinstance(value, str):  # SWE-bench stores the lists as JSON text
        try:
            value = json.loads(value)
        except ValueError:
            raise fail(name, "is not a JSON list of test ids") from None
    if not isinstance(value, list) or not all(valid_test_id(t) for t in value):
        raise fail(name, "must be a list of pytest node ids like 'tests/test_x.py::test_name'")
    return value


def _read_text_tree(root: Path) -> dict[str, str]:
    """The text files of ``root`` (no .git, no symbolic links), for applying a patch."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if ".git" in path.relative_to(root).parts or path.is_symlink() or not path.is_file():
            continue
        try:
            out[rel] = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
    return out


def load_repo_tasks(path: str | Path) -> list[Task]:
    """Tasks from a JSONL file of SWE-bench-style rows: ``repo_path`` (a local folder, relative
    paths from the file's folder), ``problem_statement``, ``FAIL_TO_PASS`` and ``PASS_TO_PASS``
    (lists of pytest node ids, or JSON text of them), ``test_patch`` (a unified diff adding the
    hidden tests), optional ``patch`` (the gold fix) and ``instance_id``. Every row is checked
    now, including that its patches apply; a bad one raises TaskFileError naming file, line, field."""
    file = Path(path)
    if not file.is_file():
        raise TaskFileError(file, "no such file")
    tasks = []
    for lineno, line in enumerate(file.read_text().splitlines(), 1):
        if not line.strip():
            continue

        def fail(name: str, message: str, lineno: int = lineno) -> TaskFileError:
            return TaskFileError(file, f"field {name!r} {message}", where=f"line {lineno}", field=name)

        try:
            row = json.loads(line)
        except ValueError as exc:
            raise TaskFileError(file, f"not valid JSON ({exc})", where=f"line {lineno}") from None
        if not isinstance(row, dict):
            raise TaskFileError(file, "a row must be a JSON object", where=f"line {lineno}")
        repo = row.get("repo_path")
        if not isinstance(repo, str) or not repo:
            raise fail("repo_path", "must name a local folder")
        root = (file.parent / repo).resolve()
        if not root.is_dir():
            raise fail("repo_path", f"points to {root}, which is not a folder")
        statement = row.get("problem_statement")
        if not isinstance(statement, str) or not statement.strip():
            raise fail("problem_statement", "must be a non-empty string")
        f2p, p2p = _ids(row, "FAIL_TO_PASS", fail), _ids(row, "PASS_TO_PASS", fail)
        if not f2p:
            raise fail("FAIL_TO_PASS", "must name at least one test")
        test_patch, gold = row.get("test_patch"), row.get("patch")
        if not isinstance(test_patch, str) or not test_patch.strip():
            raise fail("test_patch", "must be a unified diff adding the hidden tests")
        if gold is not None and not isinstance(gold, str):
            raise fail("patch", "must be a unified diff (or absent)")
        pristine = _read_text_tree(root)
        try:
            patched = apply_patch(pristine, test_patch)
        except PatchError as exc:
            raise fail("test_patch", f"does not apply to {root}: {exc}") from None
        if gold:
            try:
                apply_patch(pristine, gold)
            except PatchError as exc:
                raise fail("patch", f"does not apply to {root}: {exc}") from None
        hidden = {p: t for p, t in patched.items() if pristine.get(p) != t}
        instance = row.get("instance_id") or f"{file.stem}-{lineno}"
        answer = {
            "repo_path": str(root),
            "hidden_tests": hidden,
            "fail_to_pass": f2p,
            "pass_to_pass": p2p,
            "gold_patch": gold or "",
        }
        prompt = (
            f"You are working in a Python repository.\n\nIssue:\n{statement.strip()}\n\n"
            "Fix the issue in the repository's code. Use the tools to look at files, edit them and run "
            "commands; call submit() when you are done."
        )
        tasks.append(Task(id=str(instance), prompt=prompt, answer=answer, info={"repo_path": str(root)}, source="swe"))
    if not tasks:
        raise TaskFileError(file, "holds no rows")
    return tasks
