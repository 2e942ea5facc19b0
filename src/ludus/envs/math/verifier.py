"""Math answer verification: exact where the gold is exact, deny by default, never hangs.

    >>> MathVerifier().score("... so the area is \\boxed{\\frac{3}{4}}", "0.75").status
    'correct'

The rules (each has a test in ``tests/test_math_verifier.py``):

* **One final answer** (:mod:`ludus.tasks.answers`): after the last ``</think>``; the first
  marker kind present in ``priority`` order (``\\boxed``/``\\fbox``, ``<answer>``, ``####``,
  ``Answer:``). Several *different* boxed answers, or a hedge ("3 or 4", a box listing every
  option) are ``ambiguous``; no marker or an empty box is ``no_answer``; an answer longer than
  ``max_answer_chars`` is a ``format_error`` and is never parsed. Where the gold lists several
  values (a list, or several boxes), "or"/"and" and several boxes list the answer's values
  instead. ``fallback="last_math"`` (evaluation only) reads an unmarked reply's last math span.
* **Exact when the gold is exact.** Numbers are rationals (``0.5`` = ``\\frac12``, but ``0.333``
  ≠ ``\\frac13`` and ``6.28`` ≠ ``2\\pi``); expressions are equal only if SymPy *proves* the
  difference is zero — a numerical match is never enough, so ``\\pi + 10^{-100}`` ≠ ``\\pi``
  and ``\\frac{1}{2004!}`` ≠ ``\\frac{1}{2006!}``.
* **Tolerance only for a decimal gold**: a gold written ``6.28`` is correct to its last digit,
  so an answer is accepted iff it rounds to it: ``|answer − gold| ≤ 0.5·10^-k`` for ``k``
  decimals (``2\\pi`` and ``6.283`` pass, ``6.3`` does not). The price: a gold ``12.5`` that
  is exact also accepts ``12.54``; ``decimal_gold="exact"`` turns the tolerance off for data
  whose decimal golds are exact (money amounts, for instance).
* **Units** (:data:`~ludus.envs.math.latex.UNIT_POLICY`): ``%``, ``°`` and unknown trailing
  unit words are dropped from both sides, so ``25\\%`` = ``25`` and ``25\\%`` ≠ ``0.25``; a known
  unit (:data:`~ludus.envs.math.latex.UNITS`, ``\\$5`` is dollars) on both sides is compared as a
  unit: ``1.5 km`` = ``1500 m``, ``150 m`` ≠ ``150 km``; a known unit against an unknown word is
  wrong; words that change the number (``squared``, ``tenths``, ``not``) are never units.
* **Notation** is read by unambiguous rules only: labels (``(p, q) = (3, 2)``, ``f(x) = 1``,
  ``x \\in [0, 1)``) are dropped where the gold has none and must match where it has one;
  ``x = 5 + 6 = 11`` is its last member; ``\\frac{10}{3} \\approx 3.33`` is its exact part, a
  bare ``\\approx 3.14`` a decimal correct to its last digit; ``0.\\overline{3}``, ``7\\frac34``,
  ``204_5``, ``\\emptyset``, ``1,000.99``, ``0,111``, ``f'`` and ``12:00`` (a time, never a ratio) are what
  they say; a ``\\text{}`` wrapper and a stray trailing backslash are formatting. docs/math.md lists every rule.
* **Structure is kept**: ordered tuples stay ordered; ``\\{…\\}`` and bare lists of all
  solutions compare as sets (a subset is wrong); interval brackets matter; matrices compare
  by shape and entries; an equation matches only an equivalent equation (``y=2x+1`` =
  ``2x-y+1=0``; ``x = 5`` and ``5`` match each other); inequalities keep their strictness;
  multiple-choice golds accept exactly one letter (``E*2`` names none; a gold ``C. x = 42`` is option C).
* **Bounded**: parsing and comparison run in a worker process (:mod:`ludus.envs.math.guard`)
  with a time and memory limit; exceeding it is ``timeout``, as is a number too large to
  build exactly. A gold that cannot be parsed is ``gold_error`` and never pays.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Literal

import sympy

from ludus.core.types import Score, Status
from ludus.envs.math.guard import GuardedPool, cpu_count
from ludus.envs.math.latex import (
    Alternatives,
    Answer,
    Approximate,
    BaseNumber,
    Bracketed,
    Chain,
    Choice,
    ClockTime,
    Collection,
    Expr,
    IntervalUnion,
    Labelled,
    Matrix,
    ParseError,
    Ratio,
    Relation,
    Text,
    TooLarge,
    Unit,
    choice_letter,
    is_hedged,
    normalise,
    parse_answer,
    parse_expression,
    split_alternatives,
    split_top_level,
    split_unit,
    unit_word,
)
from ludus.tasks.answers import MARKERS, Marker, boxed_contents, find_answers, last_math

# ---------------------------------------------------------------------------------------------
# Equivalence of parsed answers

DecimalGold = Literal["rounded", "exact"]  # how a gold written as a decimal (6.28, 12.5) is read
Fallback = Literal["last_math"]  # what an unmarked reply's answer is (evaluation only; None: no answer)

_PROBE_POINTS = (sympy.Rational(7213, 10000), sympy.Rational(-13819, 10000), sympy.Rational(29, 7))


def _numerically_close(a: sympy.Expr, b: sympy.Expr) -> bool | None:
    """A quick *refutation* test at fixed points; ``None`` if it cannot evaluate. Never a proof."""
    symbols = sorted(a.free_symbols | b.free_symbols, key=str)
    decided = None
    for shift, point in enumerate(_PROBE_POINTS):
        subs = {s: point + shift * k for k, s in enumerate(symbols)}
        try:
            x, y = complex(a.evalf(40, subs=subs)), complex(b.evalf(40, subs=subs))
        except (TypeError, ValueError, ZeroDivisionError, OverflowError):
            continue
        if x != x or y != y or abs(x) == float("inf") or abs(y) == float("inf"):  # nan / inf: undecided here
            continue
        if abs(x - y) > 1e-12 * max(1.0, abs(x), abs(y)):
            return False
        decided = True
        if not symbols:
            break
    return decided


def _provably_zero(d: sympy.Expr) -> bool:
    if d == 0:
        return True
    if d.is_Rational:
        return False
    if sympy.expand(d) == 0 or sympy.simplify(d) == 0:
        return True
    if d.is_number and not d.has(sympy.oo, -sympy.oo, sympy.zoo):
        try:  # exact for algebraic numbers: the minimal polynomial of 0 is x
            x = sympy.Dummy("x")
            return sympy.minimal_polynomial(d, x) == x
        except (NotImplementedError, ValueError, sympy.polys.polyerrors.BasePolynomialError):
            return False
    return False


def values_equal(answer: sympy.Expr, gold: sympy.Expr, decimals: int | None = None) -> bool:
    """``answer`` equals ``gold`` exactly or, when the gold was written with ``decimals`` places, rounds to it."""
    if answer == gold:
        return True
    if decimals is not None and gold.is_Rational and answer.is_number:
        bound = sympy.Rational(1, 2 * 10**decimals)
        if answer.is_Rational:
            return abs(answer - gold) <= bound
        diff = (answer - gold).evalf(decimals + 30)
        return bool(diff.is_comparable and abs(diff) <= bound)
    if answer.has(sympy.oo, -sympy.oo) or gold.has(sympy.oo, -sympy.oo):
        return False  # infinities are equal only when identical (checked above)
    if answer.is_Rational and gold.is_Rational:
        return False
    if _numerically_close(answer, gold) is False:
        return False
    return _provably_zero(answer - gold)


_FLIP = {">": "<", ">=": "<="}


def _oriented(r: Relation) -> tuple[str, sympy.Expr]:
    """``(op, d)`` with op in = != < <= meaning ``0 op d``: ``a < b`` and ``b > a`` both give ``('<', b - a)``."""
    if r.op in _FLIP:
        return _FLIP[r.op], r.lhs - r.rhs
    return r.op, r.rhs - r.lhs


def relations_equal(a: Relation, g: Relation) -> bool:
    (op_a, d_a), (op_g, d_g) = _oriented(a), _oriented(g)
    if op_a != op_g:
        return False
    if a.lhs.is_Symbol and a.lhs == g.lhs and a.op == g.op:  # x = 5 vs x = 5, the common case
        return values_equal(a.rhs, g.rhs)
    if d_g == 0 or d_a == 0:
        return d_a == d_g
    ratio = sympy.simplify(d_a / d_g)
    if ratio.free_symbols or not ratio.is_number or ratio == 0 or not ratio.is_finite:
        return False
    return bool(ratio.is_positive) if op_a in ("<", "<=") else True


def _is_label(e: sympy.Expr) -> bool:
    """A name on the left of ``=``: ``x``, ``m_1``, ``AB`` (a segment), ``f(x)`` (read as f·x), ``|AB|``, a ratio of
    names ``\\frac{NO}{BO}``; never ``x + y``, ``2x`` or ``x^2``."""
    if e.is_Symbol:
        return True
    if isinstance(e, sympy.Abs):
        return _is_label(e.args[0])
    factors = [f.base if f.is_Pow and f.exp == -1 else f for f in e.args] if e.is_Mul else []
    return bool(factors) and all(f.is_Symbol for f in factors) and len(set(factors)) == len(factors)


def _as_value(a: Answer) -> Answer:
    """What an answer states as its value: ``x = 5`` / ``f(x) = 5`` (a label on the left) reads as ``5``;
    an all-``=`` chain ``x = 5 + 6 = 11`` or a true numeric statement ``5 + 6 = 11`` as its last member
    (every member without variables must equal it); a one-item list as its item."""
    if isinstance(a, Relation) and a.op == "=":
        if _is_label(a.lhs) and not (a.lhs.is_Symbol and a.lhs in a.rhs.free_symbols):  # x = 2x + 1 is an equation
            return Expr(a.rhs)
        if not a.lhs.free_symbols and not a.rhs.free_symbols and values_equal(a.lhs, a.rhs):
            return Expr(a.rhs)
    if isinstance(a, Chain) and all(r.op == "=" for r in a.relations):
        members = [a.relations[0].lhs] + [r.rhs for r in a.relations]
        last = members[-1]
        first = 1 if _is_label(members[0]) else 0
        if all(values_equal(m, last) for m in members[first:-1] if not m.free_symbols and not last.free_symbols):
            return Expr(last)
    if isinstance(a, Collection) and len(a.items) == 1:
        return _as_value(a.items[0])
    return a


# ---- sets of real numbers: intervals, their unions, and the inequalities that state them ----

_ORDER = {"<": sympy.Lt, "<=": sympy.Le, ">": sympy.Gt, ">=": sympy.Ge}


def _inequality(a: Answer) -> bool:
    """``x > 3``, ``-2 \\le x \\le 7``, ``x < -1 \\text{ or } x > 2``: a set of reals stated by inequalities."""
    if isinstance(a, Relation):
        return a.op in _ORDER
    if isinstance(a, Chain):
        return all(r.op in _ORDER for r in a.relations)
    if isinstance(a, Collection):
        return len(a.items) > 1 and all(_inequality(i) for i in a.items)
    return isinstance(a, Labelled) and _inequality(a.value)


def _as_set(a: Answer) -> tuple[str | None, sympy.Set] | None:
    """The set of reals ``a`` states and the variable it names (``None``: none), or ``None`` if it states none."""
    if isinstance(a, Labelled):
        inner = _as_set(a.value)
        return (a.label, inner[1]) if inner is not None and inner[0] in (None, a.label) else None
    if isinstance(a, Bracketed) and len(a.items) == 2 and a.open in "([" and a.close in ")]":
        ends = [i.value if isinstance(i, Expr) else None for i in a.items]
        if any(e is None or not e.is_extended_real for e in ends) or not bool(ends[0] < ends[1]):  # type: ignore[operator]
            return None
        return None, sympy.Interval(ends[0], ends[1], a.open == "(" or ends[0] == -sympy.oo, a.close == ")")
    if isinstance(a, IntervalUnion):
        pieces = [_as_set(p) for p in a.pieces]
        if any(p is None or p[0] is not None for p in pieces):
            return None
        return None, sympy.Union(*(p[1] for p in pieces))  # type: ignore[index]
    relations = a.relations if isinstance(a, Chain) else (a,) if isinstance(a, Relation) else ()
    if relations and all(r.op in _ORDER for r in relations):
        names = set().union(*((r.lhs - r.rhs).free_symbols for r in relations))
        if len(names) != 1:
            return None
        (name,) = names
        solved = sympy.Interval(-sympy.oo, sympy.oo)
        try:
            for r in relations:
                solved = solved.intersect(_solved(r, name))
        except (NotImplementedError, ValueError, TypeError, sympy.polys.polyerrors.BasePolynomialError):
            return None  # a condition SymPy cannot solve states no set we can compare
        return str(name), solved
    if isinstance(a, Collection) and _inequality(a) and len(a.items) <= SET_PIECES:
        # "x < -1 or x > 2": pieces that do not overlap
        pieces = [_as_set(i) for i in a.items]
        if any(p is None for p in pieces) or len({p[0] for p in pieces}) != 1:  # type: ignore[index]
            return None
        sets = [p[1] for p in pieces]  # type: ignore[index]
        if any(x.intersect(y) != sympy.S.EmptySet for k, x in enumerate(sets) for y in sets[k + 1 :]):
            return None  # "x > 1, x < 3": a union or both conditions at once? unread
        return pieces[0][0], sympy.Union(*sets)  # type: ignore[index]
    return None


SET_PIECES = 8  # "x < -1 or x > 2 or …": more pieces state no set (each pair is checked for overlap)


def _misnamed(a: Answer) -> bool:
    """``\\{y \\mid x > 3\\}``: a name given to inequalities that never mention it (``\\{x \\mid x > a\\}`` does)."""
    if not isinstance(a, Labelled) or not _inequality(a.value):
        return False
    relations = [r for i in (a.value.items if isinstance(a.value, Collection) else (a.value,)) for r in _relations(i)]
    names = {str(n) for r in relations for n in (r.lhs - r.rhs).free_symbols}
    return bool(names) and a.label not in names


def _relations(a: Answer) -> tuple[Relation, ...]:
    if isinstance(a, Labelled):
        return _relations(a.value)
    return a.relations if isinstance(a, Chain) else (a,) if isinstance(a, Relation) else ()


def _solved(r: Relation, name: sympy.Symbol) -> sympy.Set:
    """The reals where ``r`` holds when it bounds the variable or its absolute value by a number (``x < 3``,
    ``3 > x``, ``|z| \\le \\frac32``); any other condition states no set (``ValueError``): a condition to solve
    is the question's, and copying it (``x^2 - 5x + 6 < 0`` for ``(2, 3)``) is no answer."""
    op, side, bound = (
        (r.op, r.lhs, r.rhs) if r.rhs.is_number else (_FLIP.get(r.op, r.op.replace("<", ">")), r.rhs, r.lhs)
    )
    if not (bound.is_number and bound.is_extended_real) or side not in (name, sympy.Abs(name)):
        raise ValueError("not a bound on the variable")
    strict = op in ("<", ">")
    if side == name:
        if op.startswith("<"):
            return sympy.Interval(-sympy.oo, bound, True, strict)
        return sympy.Interval(bound, sympy.oo, strict, True)
    if op.startswith("<"):  # |x| < b
        return sympy.Interval(-bound, bound, strict, strict)
    return sympy.Union(sympy.Interval(-sympy.oo, -bound, True, strict), sympy.Interval(bound, sympy.oo, strict, True))


def _intervals(s: sympy.Set) -> list[sympy.Interval] | None:
    pieces = list(s.args) if isinstance(s, sympy.Union) else [s]
    if not all(isinstance(p, sympy.Interval) for p in pieces):
        return None
    return sorted(pieces, key=lambda p: float(p.start))


def _sets_match(a: Answer, g: Answer) -> bool | None:
    """Whether ``a`` and ``g`` state the same set of reals (an interval, a union, inequalities in one variable);
    ``None`` when either states none."""
    mine, gold = _as_set(a), _as_set(g)
    if mine is None or gold is None:
        return None
    if mine[0] is not None and gold[0] is not None and mine[0] != gold[0]:
        return False  # y > 3 is no answer to x > 3
    if mine[1] == gold[1]:
        return True
    x, y = _intervals(mine[1]), _intervals(gold[1])
    if x is None or y is None or len(x) != len(y):
        return False
    return all(
        p.left_open == q.left_open
        and p.right_open == q.right_open
        and values_equal(p.start, q.start)
        and values_equal(p.end, q.end)
        for p, q in zip(x, y, strict=True)
    )


def _assignment(a: Answer) -> dict[str, sympy.Expr] | None:
    """``p = 5, q = 2``: each of several different names given one value, by name; else ``None``."""
    if not isinstance(a, Collection) or len(a.items) < 2:
        return None
    named = [i for i in a.items if isinstance(i, Relation) and i.op == "=" and i.lhs.is_Symbol]
    values = {str(i.lhs): i.rhs for i in named}
    if len(named) != len(a.items) or len(values) != len(named) or any(v.free_symbols for v in values.values()):
        return None
    return values


def _assignment_as_tuple(a: Answer) -> Bracketed | None:
    """``p = 5, q = 2`` as the ordered pair ``(5, 2)``: only with its names in alphabetical order (``x, y``;
    ``a, b, c``), the order a tuple of them is written in; ``q = 2, p = 5`` names no order."""
    values = _assignment(a)
    if values is None or list(values) != sorted(values):
        return None
    return Bracketed("(", ")", tuple(Expr(v) for v in values.values()))


def _one_variable(items: Sequence[Answer]) -> bool:
    """``x = 1, x = 4`` and ``x_1 = 1, x_2 = 4`` list solutions; ``x = 1, y = 4`` is an assignment, not a set."""
    names = {str(i.lhs).split("_")[0] for i in items if isinstance(i, Relation) and _is_label(i.lhs)}
    names |= {i.label.split("_")[0] for i in items if isinstance(i, Labelled)}  # x ≈ 1.41, y ≈ 2.83; x ∈ A, y ∈ B
    return len(names) <= 1


def _clock(a: Answer) -> ClockTime | None:
    if isinstance(a, ClockTime):
        return a
    if isinstance(a, Ratio) and len(a.terms) == 2 and all(t.is_Integer and t >= 0 for t in a.terms):
        hour, minute = int(a.terms[0]), int(a.terms[1])
        return ClockTime(hour, minute, None) if hour <= 24 and minute <= 59 else None
    return None


def _clocks_equal(a: ClockTime, g: ClockTime) -> bool:
    """Same minute and hour; ``3:00 PM`` = ``15:00``, and ``3:00`` (no AM/PM) = ``3:00 PM``, but ``3:00 AM`` ≠ ``15:00``."""
    if a.minute != g.minute:
        return False

    def hour24(c: ClockTime) -> int:
        return c.hour % 12 + (12 if c.half == "pm" else 0)

    if a.half and g.half:
        return hour24(a) == hour24(g)
    if a.half or g.half:
        half, plain = (a, g) if a.half else (g, a)
        if plain.hour > 12 or plain.hour == 0:  # a 24-hour time says AM or PM itself
            return hour24(half) == plain.hour % 24
        return half.hour % 12 == plain.hour % 12
    return a.hour == g.hour


def _approximation_matches(a: Approximate, g: Answer) -> bool:
    """``\\frac{10}{3} \\approx 3.33``: the exact part is the answer (and the decimal must agree with it to its
    written precision); a bare ``\\approx 3.14`` is compared as a decimal to its written precision and needs
    at least three significant digits (``\\approx 3`` is no answer to ``\\pi``)."""
    bound = sympy.Rational(1, 2 * 10**a.decimals)
    if a.exact is not None:
        exact = _as_value(a.exact)
        if isinstance(exact, Expr) and exact.value.is_number:
            diff = (exact.value - a.value).evalf(a.decimals + 30)
            if not (diff.is_comparable and abs(diff) <= bound):
                return False  # "2\pi \approx 6.5" contradicts itself
        return equivalent(a.exact, g)
    value = _as_value(g)
    if not isinstance(value, Expr) or not value.value.is_number:
        return False
    if value.decimals is not None:  # a decimal gold: the usual rule
        return values_equal(a.value, value.value, value.decimals)
    if a.significant < 3 or (value.value.is_Rational and _terminates(value.value)):
        return False  # "\\approx 100" or "\\approx 0.500" for an exact 100 or 1/2, which could have been written
    diff = (value.value - a.value).evalf(a.decimals + 30)
    return bool(diff.is_comparable and abs(diff) <= bound)


LONG_DECIMAL_DIGITS = 6  # a decimal with this many significant digits may stand for a repeating one
EXACT_DIGITS = 10  # ... and with this many, for the irrational number it agrees with to its last digit


def _simplest_between(lo: Fraction, hi: Fraction) -> Fraction:
    """The fraction with the smallest denominator in ``[lo, hi]`` (``0 <= lo <= hi``), by continued fractions
    (a loop, not recursion: a decimal of a thousand digits may have thousands of terms)."""
    terms = []
    while True:
        whole = math.floor(lo)
        if whole == lo or whole + 1 <= hi:
            terms.append(whole if whole == lo else whole + 1)
            break
        terms.append(whole)
        lo, hi = 1 / (hi - whole), 1 / (lo - whole)
    simplest = Fraction(terms.pop())
    while terms:
        simplest = terms.pop() + 1 / simplest
    return simplest


def _repeating_value(value: sympy.Rational, decimals: int | None) -> sympy.Rational | None:
    """The repeating decimal a long decimal stands for: with at least :data:`LONG_DECIMAL_DIGITS` significant digits,
    the simplest fraction within one unit of its last digit (rounded or cut: ``0.0833333333333333`` and ``0.083334``
    are 1/12, ``0.666666`` is 2/3), when that fraction has no finite decimal expansion; else ``None``. No simpler
    fraction rounds to the same digits, so the decimal names it; ``0.08`` or ``0.0833`` name nothing."""
    if decimals is None or not value.is_Rational or _significant(value, decimals) < LONG_DECIMAL_DIGITS:
        return None
    centre, unit = Fraction(int(abs(value).p), int(abs(value).q)), Fraction(1, 10**decimals)
    simplest = _simplest_between(max(Fraction(0), centre - unit), centre + unit)
    fraction = sympy.Rational(simplest.numerator, simplest.denominator) * sympy.sign(value)
    return None if _terminates(fraction) else fraction


def _significant(value: sympy.Rational, decimals: int) -> int:
    """The significant digits of a decimal written with ``decimals`` places (``0.0830``: 3)."""
    digits = abs(value) * 10**decimals
    return len(str(digits)) if digits.is_Integer and digits else 0


def _digits_of(a: Expr, exact: sympy.Expr) -> bool:
    """``0.8660254037844386`` for ``\\frac{\\sqrt3}{2}``: a decimal of at least :data:`EXACT_DIGITS` significant digits
    within one unit of its last digit of an irrational gold — a number printed to full precision, not a rounding."""
    if a.decimals is None or not exact.is_number or _significant(a.value, a.decimals) < EXACT_DIGITS:
        return False
    diff = (a.value - exact).evalf(a.decimals + 30)
    return bool(diff.is_comparable and abs(diff) <= sympy.Rational(1, 10**a.decimals))


def _terminates(r: sympy.Rational) -> bool:
    """Whether a rational has a finite decimal expansion (an integer, 1/2, 3/8), so its exact value can be written."""
    q = int(r.q)
    for p in (2, 5):
        while q % p == 0:
            q //= p
    return q == 1


def _match_unordered(answers: Sequence[Answer], golds: Sequence[Answer]) -> bool:
    if len(answers) != len(golds):
        return False
    unused = list(golds)
    for a in answers:
        hit = next((i for i, g in enumerate(unused) if equivalent(a, g)), None)
        if hit is None:
            return False
        unused.pop(hit)
    return True


def equivalent(a: Answer, g: Answer) -> bool:
    """Whether answer ``a`` is equivalent to gold ``g`` under the module's rules."""
    if _inequality(a) or _inequality(g):
        if _misnamed(a) or _misnamed(g):
            return False  # \{y \mid x > 3\}: a condition on another variable than the one named
        same = _sets_match(a, g)
        if same is not None:
            return same
    if isinstance(g, Labelled):  # a label is stripped only where it names the same thing, or one side has none
        if isinstance(a, Labelled):
            return a.label == g.label and equivalent(a.value, g.value)
        if isinstance(a, Relation) and a.op == "=" and _is_label(a.lhs) and re.fullmatch(_FUNCTION_NAME, g.label):
            if str(a.lhs) != "y" and a.lhs != parse_expression(g.label):
                return False  # g(x) = … is another function than f(x) = …; y = … is f's graph
        return equivalent(a, g.value)
    if isinstance(a, Labelled):
        if isinstance(g, Relation) and g.lhs.is_Symbol and str(g.lhs) != a.label:
            return False
        return equivalent(a.value, g)
    if isinstance(g, Alternatives):  # one of the gold's options, or all of them listed
        listed = isinstance(a, Collection) and _match_unordered(a.items, g.options)
        return listed or any(equivalent(a, option) for option in g.options)
    if isinstance(g, Approximate):
        if isinstance(a, Approximate):
            return (a.exact is None) == (g.exact is None) and (
                equivalent(a.exact, g.exact) if a.exact is not None and g.exact is not None else a.value == g.value
            )
        return g.exact is not None and equivalent(a, g.exact)
    if isinstance(a, Approximate):
        return _approximation_matches(a, g)
    if isinstance(g, BaseNumber):
        if isinstance(a, BaseNumber):
            return a.value == g.value and a.base in (g.base, 10)
        a = _as_value(a)
        return isinstance(a, Expr) and a.value.is_Integer and int(a.value) == g.value
    if isinstance(a, BaseNumber):  # a decimal gold is not answered in another base
        return a.base == 10 and isinstance(g, Expr) and g.value == a.value
    if isinstance(g, ClockTime):
        clock = _clock(a)
        return clock is not None and _clocks_equal(clock, g)
    if isinstance(a, ClockTime):
        return False
    if isinstance(g, Expr):
        a = _as_value(a)
        if not isinstance(a, Expr):
            return False
        if values_equal(a.value, g.value, g.decimals):
            return True
        # 0.0833333333333333 for 1/12, either way round: the repeating decimal a long one stands for
        repeating = _repeating_value(g.value, g.decimals) or g.value
        if repeating.is_Rational:
            return (_repeating_value(a.value, a.decimals) or a.value) == repeating
        return _digits_of(a, g.value)
    if isinstance(g, Relation):
        if isinstance(a, Relation):
            return relations_equal(a, g)
        if isinstance(a, Chain) and g.lhs not in [a.relations[0].lhs] + [r.rhs for r in a.relations]:
            return False  # "y = 2x = 6" says nothing of the form x = 6 (it gives x = 3)
        value = _as_value(a)
        return g.op == "=" and g.lhs.is_Symbol and isinstance(value, Expr) and values_equal(value.value, g.rhs)
    if isinstance(g, Chain):
        return isinstance(a, Chain) and _match_unordered(a.relations, g.relations)
    if isinstance(g, Choice):
        return isinstance(a, Choice) and a.letter == g.letter
    if isinstance(g, Text):
        return isinstance(a, Text) and a.text == g.text
    if isinstance(g, Bracketed):
        if not g.open and isinstance(a, Collection):  # ordered blanks: "5, 10" in their order
            a = Bracketed("", "", a.items)
        if g.open == "(" and g.close == ")":
            a = _assignment_as_tuple(a) or a
        return (
            isinstance(a, Bracketed)
            and (a.open, a.close) == (g.open, g.close)
            and len(a.items) == len(g.items)
            and all(equivalent(x, y) for x, y in zip(a.items, g.items, strict=True))
        )
    if isinstance(g, Collection):
        gold_values, values = _assignment(g), _assignment(a)
        if gold_values is not None:  # k = 45, n = 2: the same names, each with its value
            return (
                values is not None
                and values.keys() == gold_values.keys()
                and all(values_equal(values[k], v) for k, v in gold_values.items())
            )
        items = a.items if isinstance(a, Collection) else (a,)
        if not _one_variable(items):
            return False
        return _match_unordered([_as_value(i) for i in items], [_as_value(i) for i in g.items])
    if isinstance(g, IntervalUnion):
        return isinstance(a, IntervalUnion) and _match_unordered(a.pieces, g.pieces)
    if isinstance(g, Ratio):
        return (
            isinstance(a, Ratio)
            and len(a.terms) == len(g.terms)
            and all(values_equal(x * g.terms[0], y * a.terms[0]) for x, y in zip(a.terms, g.terms, strict=True))
            and any(t != 0 for t in g.terms)
        )
    if isinstance(g, Matrix):
        return (
            isinstance(a, Matrix)
            and [len(r) for r in a.rows] == [len(r) for r in g.rows]
            and all(
                equivalent(x, y) for ra, rg in zip(a.rows, g.rows, strict=True) for x, y in zip(ra, rg, strict=True)
            )
        )
    raise TypeError(f"unknown answer shape {type(g).__name__}")


# ---------------------------------------------------------------------------------------------
# Judging one reply (runs inside a guarded worker process)

_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|textit|mbox|mathrm)\s*\{([^{}]*)\}")


def _plain_text(text: str) -> str:
    return _TEXT_WRAPPER.sub(r"\1", normalise(text)).lower().replace(" ", "").strip(".")


def _unwrapped(text: str) -> str:
    """The text without ``\\text{}``-style wrappers and spaces, case kept: ``\\text{odd}`` is ``odd``. A space
    between two digits is kept: ``2 3`` is not ``23``."""
    plain = re.sub(r"(?<=\d)\s+(?=\d)", "\0", _TEXT_WRAPPER.sub(r"\1", normalise(text)))
    return plain.replace(" ", "").replace("\0", " ").strip(".")


def _distinct(texts: Sequence[str]) -> list[str]:
    seen: dict[str, str] = {}
    for t in texts:
        seen.setdefault(normalise(t), t.strip())
    return list(seen.values())


def _gold_boxes(gold: str) -> list[str]:
    """The gold's boxes, one per value: ``\\boxed{\\frac12}`` … ``\\boxed{0.5}`` is one value, stated twice."""
    boxes = _distinct(boxed_contents(gold))
    if len(boxes) < 2:
        return boxes
    try:
        values = [parse_answer(b) for b in boxes]
    except ParseError:
        return boxes
    if all(equivalent(v, values[-1]) and equivalent(values[-1], v) for v in values):
        return boxes[-1:]
    return boxes


def _gold_text(gold: str) -> str:
    """A gold's answer text; a gold with several different boxes (``\\boxed{2}`` and ``\\boxed{3}``) lists them all."""
    boxed = _gold_boxes(gold)
    if len(boxed) > 1:
        return ", ".join(boxed)
    return (boxed[-1] if boxed else gold).strip()


def _lists(gold: Answer) -> bool:
    """Whether the gold is a list of several values (so ``or``/``and`` in an answer list values, not hedge)."""
    return (isinstance(gold, Collection) and len(gold.items) > 1) or (isinstance(gold, Bracketed) and not gold.open)


def _read(text: str, as_choice: bool, lists: bool, decimal_comma: bool = False) -> tuple[Answer, Unit | None]:
    """Parse an answer (or gold) and split off a known unit. ``decimal_comma`` (a lone ``0,5`` is 0.5) only for
    answers to a single-number gold: a gold ``0,5`` is the dataset's list notation."""
    value_text, unit = (text, None) if as_choice else split_unit(text)
    answer = parse_answer(value_text, as_choice=as_choice, alternatives_as_list=lists, decimal_comma=decimal_comma)
    return answer, (unit if isinstance(_as_value(_approximation(answer) or answer), (Expr, Approximate)) else None)


def _approximation(answer: Answer) -> Approximate | None:
    """The approximation an answer states (``\\approx 3.14``, ``x \\approx 3.14``), if it is one."""
    core = answer.value if isinstance(answer, Labelled) else answer
    return core if isinstance(core, Approximate) else None


_OPTION_WITH_CONTENT = re.compile(r"^\s*(?:\(([A-E])\)|([A-E])[.)])\s+\S")  # "C. x = 42", "(C) 42", "C) 42"
_ANOTHER_OPTION = re.compile(r"\(\s*[A-E]\s*\)|(?<![A-Za-z\\])[A-E][.)](?:\s|$)|(?<![A-Za-z])(?:and|or)(?![A-Za-z])")


# a function named with its variables on the left of "=": f(x) = …, C(h) = …, g(x, y) = …
_FUNCTION_NAME = r"(?:[A-Za-z]|\\[a-zA-Z]+)(?:_\{?\w+\}?)?\s*\(\s*[a-z](?:\s*,\s*[a-z])*\s*\)"
_FUNCTION_LABEL = re.compile(rf"^[\s$]*({_FUNCTION_NAME})\s*=")


def _parse_gold(text: str) -> tuple[Answer, bool, Unit | None]:
    option = _OPTION_WITH_CONTENT.match(text)
    if option and not _ANOTHER_OPTION.search(text[option.end() - 1 :]):
        # the gold names one option and quotes its content: the answer must name the option
        return Choice(option.group(1) or option.group(2)), True, None
    as_choice = choice_letter(text) is not None and len(normalise(_TEXT_WRAPPER.sub(r"\1", text))) <= 3
    blanks = split_top_level(text.replace("\\;", "\\ "), (";",))  # \; is a space
    if len(blanks) > 1 and len(split_top_level(text, (",",))) == 1 and all(b.strip() for b in blanks):
        # "$5$;$10$": the answers of ordered blanks (a cloze), in their order
        return Bracketed("", "", tuple(_read(b, False, lists=False)[0] for b in blanks)), False, None
    try:
        answer, unit = _read(text, as_choice, lists=False)
        function = _FUNCTION_LABEL.match(text)
        if isinstance(answer, Relation) and answer.op == "=" and function:
            # f(x) = 2x + 3: the function; 2x + 3 and y = 2x + 3 state it too, g(x) = 2x + 3 another one
            answer = Labelled(re.sub(r"\s+", "", function.group(1)), Expr(answer.rhs))
        elif isinstance(answer, Relation) and not (answer.lhs.free_symbols or answer.rhs.free_symbols):
            answer = _as_value(answer)  # \log_6(1/36) = -2, a true statement: its value
    except ParseError:
        options = split_alternatives(text)
        if len(options) < 2 or as_choice:
            raise
        read = [_read(o, False, lists=False) for o in options]  # "(11,7) or (7,11)": any one is right
        if any(unit is not None for _, unit in read):
            raise
        options = tuple(o for o, _ in read)
        values = [  # "x = \pm 1 or x = 0": three values
            i for o in options for i in (o.items if isinstance(o, Collection) and _solutions(o.items) else (o,))
        ]
        names = {i.lhs for i in values if isinstance(i, Relation)}
        if len(names) <= 1 and all(isinstance(i, Expr) or _solutions((i,)) for i in values):
            # "5 or 9", "x = 1 or x = 2", "x = 1 or 2": the values, all of them (a question asking for one is not
            # told apart)
            return (Collection(options) if not names else _read(text, False, lists=True)[0]), False, None
        if all(_inequality(o) for o in options):  # "x < -1 or x > 2": the pieces of one set of reals, never a choice
            return _read(text, False, lists=True)[0], False, None
        cores = [o.value if isinstance(o, Labelled) else o for o in options]
        labels = {o.label for o in options if isinstance(o, Labelled)}
        if all(_interval(c) for c in cores) and (not labels or len(labels) == 1 == len({type(o) for o in options})):
            # "(-\infty, 1) or (3, \infty)", "x \in [0, 1] or x \in [2, 3]": one set of reals, its pieces
            union = IntervalUnion(tuple(cores))
            return (Labelled(labels.pop(), union) if labels else union), False, None
        return Alternatives(options), False, None
    return answer, as_choice, unit


def _solutions(items: Sequence[Answer]) -> bool:
    """``x = 1, x = -1``: values given to one name."""
    return all(isinstance(i, Relation) and i.op == "=" and i.lhs.is_Symbol for i in items)


def _interval(a: Answer) -> bool:
    """An interval no one would read as a point: a closed end or an infinite one (``[0, 1)``, ``(3, \\infty)``)."""
    if not isinstance(a, Bracketed) or _as_set(a) is None:
        return False
    return "[" in a.open or "]" in a.close or any(isinstance(i, Expr) and i.value.is_infinite for i in a.items)


def _in_gold_unit(answer: Answer, unit: Unit | None, gold_unit: Unit | None) -> Answer | None:
    """The answer's value in the gold's unit; ``None`` if the units differ (``150 m`` is not ``150 km``).
    Where only one side states a known unit the number is compared as written (see ``UNIT_POLICY``)."""
    value = _as_value(answer)
    if unit is None or gold_unit is None:
        return answer
    if _approximation(answer) is not None:  # an approximation is compared in the gold's own unit only
        return (
            answer
            if (unit.dimension, unit.power, unit.factor) == (gold_unit.dimension, gold_unit.power, gold_unit.factor)
            else None
        )
    if not isinstance(value, Expr):
        return answer
    if (unit.dimension, unit.power) != (gold_unit.dimension, gold_unit.power):
        return None
    if unit.factor == gold_unit.factor:
        return answer
    return Expr(value.value * (unit.factor / gold_unit.factor) ** unit.power)


_DENIAL = re.compile(
    r"(?<![A-Za-z])(?:not|isn't|wrong|incorrect|unsure|maybe|perhaps|possibly|cannot)(?![A-Za-z])", re.I
)


def _doubted(reply: str, answer: str, lists: bool) -> str | None:
    """For the ``last_math`` fallback: whether the sentence the answer was taken from hedges or denies it
    ("either 4 or 5", "$5$ is wrong", "maybe $x = 5$?"): a marker-less reply has no other statement of intent."""
    at = reply.rfind(answer)
    if at < 0:
        return None
    starts = [m.end() for m in re.finditer(r"[.!?](?=\s)|\n", reply[:at])]
    end = re.search(r"[.!?](?=\s|$)|\n", reply[at + len(answer) :])
    sentence = reply[starts[-1] if starts else 0 : at + len(answer) + (end.start() + 1 if end else len(reply))]
    if _DENIAL.search(sentence) or sentence.rstrip().endswith("?"):
        return "doubted or denied in its sentence"
    if not lists and is_hedged(sentence):
        return "one of several alternatives in its sentence"
    return None


def judge(
    completion: str,
    gold: str,
    priority: Sequence[Marker] = MARKERS,
    max_answer_chars: int = 1_000,
    decimal_gold: DecimalGold = "rounded",
    fallback: Fallback | None = None,
) -> Score:
    """Score one reply against one gold answer, in-process and without a time limit.

    Use :class:`MathVerifier` instead: it runs this under a hard limit."""
    try:
        gold_text = _gold_text(gold)
        gold_answer, as_choice, gold_unit = _parse_gold(gold_text)
        if decimal_gold == "exact" and isinstance(gold_answer, Expr):
            gold_answer = replace(gold_answer, decimals=None)
    except ParseError as exc:
        return Score.zero(Status.GOLD_ERROR, f"the gold answer {gold[:80]!r} cannot be read: {exc}")
    several = _lists(gold_answer)
    # where the gold lists values or is a set of reals, "or" lists values or joins pieces (x < -1 or x > 2)
    lists = several or _as_set(gold_answer) is not None
    answers, where = find_answers(completion, priority)
    if not answers and fallback == "last_math":
        answers, where = last_math(completion)
        doubt = _doubted(completion, answers[-1], lists) if answers else None
        if doubt:
            return Score.zero(Status.AMBIGUOUS, f"the fallback answer is {doubt}", extracted=answers[-1])
    if not answers:
        return Score.zero(Status.NO_ANSWER, where)
    if len(answers) > 1 and any(not t.strip() for t in answers) and any(t.strip() for t in answers):
        answers = [t for t in answers if t.strip()]  # "write it as \boxed{}": an empty box beside an answer is none
    under_cap = all(len(text) <= max_answer_chars for text in answers)  # none is normalised before the cap
    if under_cap and len(answers) > 1 and where == "\\boxed{}" and (several or len(_gold_boxes(gold)) > 1):
        # one box per value ("\boxed{2} and \boxed{3}") where the gold has several; against one value, a hedge
        answers, where = [", ".join(_distinct(answers))], "several \\boxed{} (the gold lists several)"
    for text in answers:
        if len(text) > max_answer_chars:
            return Score.zero(
                Status.FORMAT_ERROR,
                f"the answer in {where} is {len(text):,} characters; the cap is {max_answer_chars:,}",
            )
    final = answers[-1]
    if not normalise(final):
        return Score.zero(Status.NO_ANSWER, f"empty answer in {where}", extracted=final)
    if not lists and not is_hedged(gold_text) and any(is_hedged(t) for t in answers):
        return Score.zero(Status.AMBIGUOUS, f"the answer offers alternatives: {final[:80]!r}", extracted=final)

    units: list[Unit | None] = [None] * len(answers)
    if isinstance(gold_answer, Text):
        parsed: list[Answer] = [Text(_plain_text(t)) for t in answers]
    else:
        parsed = []
        for k, text in enumerate(answers):
            try:
                answer, units[k] = _read(text, as_choice, lists, decimal_comma=isinstance(gold_answer, Expr))
                parsed.append(answer)
            except TooLarge as exc:
                return Score.zero(Status.TIMEOUT, f"refused to build the answer exactly: {exc}", extracted=final)
            except ParseError as exc:
                status = Status.AMBIGUOUS if as_choice and "found [" in str(exc) else Status.FORMAT_ERROR
                return Score.zero(status, f"cannot read {text[:80]!r} as math: {exc}", extracted=final)
    last = replace(parsed[-1], decimals=None) if isinstance(parsed[-1], Expr) else parsed[-1]
    if any(not equivalent(p, last) for p in parsed[:-1]):  # exact: "1/3, about 0.333" is two answers
        return Score.zero(Status.AMBIGUOUS, f"{len(answers)} different final answers in {where}", extracted=final)
    in_gold_unit = _in_gold_unit(parsed[-1], units[-1], gold_unit)
    if (units[-1] is None) != (gold_unit is None) and unit_word(final if units[-1] is None else gold_text):
        in_gold_unit = None  # a known unit against another unit word: "5 \text{ tons}" is not "5 kg"
        return Score.zero(Status.WRONG, f"{final[:60]!r} is not in the unit of {gold_text[:60]!r}", extracted=final)
    same_unit = units[-1] is None or gold_unit is None or units[-1] == gold_unit
    same_text = (
        same_unit
        and (normalise(final) == normalise(gold_text) or _unwrapped(final) == _unwrapped(gold_text))
        and not isinstance(gold_answer, ClockTime)
    )
    try:
        equal = same_text or equivalent(in_gold_unit, gold_answer)  # (normalise drops units and "PM")
    except (OverflowError, ArithmeticError, RecursionError, sympy.polys.polyerrors.BasePolynomialError) as exc:
        return Score.zero(Status.TIMEOUT, f"refused to compare values this large: {exc!r:.80}", extracted=final)
    if equal:
        return Score(1.0, Status.CORRECT, f"{final[:60]!r} is equivalent to the gold answer", extracted=final)
    return Score.zero(Status.WRONG, f"{final[:60]!r} is not equivalent to {gold_text[:60]!r}", extracted=final)


# ---------------------------------------------------------------------------------------------
# The public verifier

_POOLS: dict[tuple[int, int], GuardedPool] = {}


def _pool(workers: int, memory_mb: int) -> GuardedPool:
    key = (workers, memory_mb)
    if key not in _POOLS:
        _POOLS[key] = GuardedPool("ludus.envs.math.verifier:judge", workers=workers, memory_mb=memory_mb)
    return _POOLS[key]


@dataclass(frozen=True)
class MathVerifier:
    """Scores replies against gold answers under a hard time and memory limit (see the module doc).

    Safe to call from any thread and (through :meth:`ascore`) from an event loop. Worker
    processes start on first use and are shared by verifiers with the same pool settings.
    """

    priority: tuple[Marker, ...] = MARKERS
    max_answer_chars: int = 1_000
    decimal_gold: DecimalGold = "rounded"
    fallback: Fallback | None = None  # "last_math": an unmarked reply's last math expression (evaluation only)
    timeout_s: float = 5.0
    memory_mb: int = 1024
    workers: int = field(default_factory=cpu_count)

    def __post_init__(self) -> None:
        unknown = [m for m in self.priority if m not in MARKERS]
        if unknown or not self.priority:
            raise ValueError(f"priority must list answer markers from {MARKERS}, got {self.priority}")
        if self.decimal_gold not in ("rounded", "exact"):
            raise ValueError(f"decimal_gold must be 'rounded' or 'exact', got {self.decimal_gold!r}")
        if self.fallback not in (None, "last_math"):
            raise ValueError(f"fallback must be None or 'last_math', got {self.fallback!r}")
        if self.timeout_s <= 0 or self.max_answer_chars < 1 or self.workers < 1:
            raise ValueError("timeout_s must be > 0, max_answer_chars and workers at least 1")

    def score(self, completion: str, gold: str) -> Score:
        outcome = _pool(self.workers, self.memory_mb).call(
            completion,
            gold,
            self.priority,
            self.max_answer_chars,
            self.decimal_gold,
            self.fallback,
            timeout_s=self.timeout_s,
        )
        if outcome.kind == "ok":
            return outcome.value
        if outcome.kind in ("timeout", "memory"):
            return Score.zero(Status.TIMEOUT, f"verification stopped: {outcome.detail}")
        return Score.zero(Status.INFRA_ERROR, f"the verifier failed: {outcome.detail}")

    async def ascore(self, completion: str, gold: str) -> Score:
        return await asyncio.to_thread(self.score, completion, gold)

    def score_many(self, pairs: Iterable[tuple[str, str]]) -> list[Score]:
        """Scores in input order, ``workers`` at a time."""
        with ThreadPoolExecutor(self.workers) as executor:
            return list(executor.map(lambda pair: self.score(*pair), pairs))


def verify_math(completion: str, gold: str, **options: object) -> Score:
    """One-off convenience for ``MathVerifier(**options).score(completion, gold)``."""
    return MathVerifier(**options).score(completion, gold)  # type: ignore[arg-type]
