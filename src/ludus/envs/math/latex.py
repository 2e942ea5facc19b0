"""Reading a math answer written in LaTeX or plain text into an exact, structured value.

Model text is never evaluated: a tokenizer and a recursive-descent parser build SymPy objects
node by node, and every node that could grow without bound is refused before it is built
(``2^{2^{2^{2^{2^{2}}}}}``, ``(10^{9})!``), so parsing is cheap and bounded even on hostile
input. Numbers stay exact: ``0.1`` is the rational 1/10, never a float.

The result is one of the :data:`Answer` shapes: an expression (with the number of decimals
if it was written as a plain decimal), text, a multiple-choice letter, a relation
(``y = 2x+1``, ``x \\ge 3``), a bracketed sequence (tuple or interval; brackets kept), an
unordered collection (``\\{1, 2\\}``, ``{1, 2}``, a bare ``1, 2``, the empty set), a union of
intervals, a matrix, a labelled value (``(p, q) = (3, 2)``, ``x \\in [0, 1)``), an approximation
(``\\frac{10}{3} \\approx 3.33``), a number in another base (``204_5``) or a time of day (``12:00``).
Unit-like decorations are dropped on purpose (see :data:`UNIT_POLICY`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

import sympy

MAX_DIGITS = 10_000  # no exact integer larger than this many digits is ever built
MAX_FACTORIAL = 3_000
MAX_DEPTH = 100  # nesting of brackets and fractions

UNIT_POLICY = (
    "percent signs, degree marks, dollar signs and unknown trailing unit words are dropped from both "
    "answer and gold: 25\\% = 25 (not 0.25), 30^\\circ = 30 (not \\pi/6), 5\\text{ cm} = 5; a known unit "
    "(UNITS; a leading \\$ is dollars) stated on both sides is compared as a unit: 1.5 km = 1500 m, 150 m != 150 km; "
    "words that change the number (3 thousand, 5 squared, 5 tenths, not 5) are never dropped"
)


@dataclass(frozen=True)
class Unit:
    """A physical unit an answer is stated in: ``km`` is ``Unit("length", 1000, 1)``, ``cm^2`` is area."""

    dimension: str
    factor: sympy.Expr  # in the dimension's base unit (m, kg, s, l, m/s, m², rad, cent)
    power: int = 1


def _units() -> dict[str, tuple[str, sympy.Rational]]:
    R = sympy.Rational
    table = {
        "length": {
            ("mm", "millimeter", "millimetre"): R(1, 1000),
            ("cm", "centimeter", "centimetre"): R(1, 100),
            ("dm", "decimeter", "decimetre"): R(1, 10),
            ("m", "meter", "metre"): R(1),
            ("km", "kilometer", "kilometre"): R(1000),
            ("in", "inch", "inches"): R(254, 10000),
            ("ft", "foot", "feet"): R(3048, 10000),
            ("yd", "yard"): R(9144, 10000),
            ("mi", "mile"): R(1609344, 1000),
        },
        "mass": {
            ("mg", "milligram"): R(1, 10**6),
            ("g", "gram", "gm"): R(1, 1000),
            ("kg", "kilogram"): R(1),
            ("lb", "lbs", "pound"): R(45359237, 10**8),
            ("oz", "ounce"): R(28349523125, 10**12),
            ("tonne", "metric ton"): R(1000),
            ("ton", "short ton"): R(90718474, 10**5),
        },
        "time": {
            ("ms", "millisecond"): R(1, 1000),
            ("s", "sec", "secs", "second"): R(1),
            ("min", "mins", "minute"): R(60),
            ("h", "hr", "hrs", "hour"): R(3600),
            ("day",): R(86400),
            ("week",): R(604800),
        },
        "money": {("cent", "cents", "¢"): R(1), ("dollar", "$"): R(100)},
        "calendar": {("month",): R(1), ("year", "yr", "yrs"): R(12), ("decade",): R(120), ("century",): R(1200)},
        "volume": {
            ("ml", "milliliter", "millilitre"): R(1, 1000),
            ("l", "liter", "litre"): R(1),
            ("gal", "gallon"): R(3785411784, 10**9),
            ("qt", "quart"): R(946352946, 10**9),
            ("pt", "pint"): R(473176473, 10**9),
        },
        "area": {("acre",): R(40468564224, 10**7), ("ha", "hectare"): R(10000)},
        "angle": {("rad", "radian"): R(1), ("deg", "degree"): sympy.pi / 180},
        "speed": {
            ("m/s", "meters per second"): R(1),
            ("km/h", "km/hr", "kmh", "kph", "kilometers per hour"): R(5, 18),
            ("mph", "mi/h", "miles per hour"): R(1609344, 3600000),
        },
    }
    out = {}
    for dimension, units in table.items():
        for names, factor in units.items():
            for name in names:
                out[name] = (dimension, factor)
                if (
                    len(name) >= 3
                    and name.isalpha()
                    and name[-1] != "s"
                    and name not in ("century", "foot", "kmh", "kph", "mph")
                ):
                    out[name + "s"] = (dimension, factor)  # plurals of words: days, hours, meters
    out["centuries"] = out["century"]
    return out


UNITS = _units()
# Searched for, so it starts only where a run of spacing does (not again from each space of the run), and
# no two ``\s*`` meet across an optional character: each would be a quadratic scan of a run of spaces.
_UNIT_TAIL = re.compile(
    r"(?<![\s~])(?<!\\[,;:! ])(?:\\[,;:! ]|~|\s)*"
    r"(?:\\(?:text|textnormal|textrm|mathrm|mbox|textbf|textit)\s*\{(?P<wrapped>[^{}]*)\}"
    r"|(?P<bare>(?<![A-Za-z\\])[A-Za-z]+(?:/[A-Za-z]+)?))(?:\s*\^\s*(?:\{\s*)?(?P<power>[23])(?:\s*\})?)?\s*(?:\.\s*)?$"
)


_DOLLARS = re.compile(r"^(?:\\\$|\$(?=\s*\d[^$]*$))\s*(\d[\d,.]*)\s*$")


def split_unit(text: str) -> tuple[str, Unit | None]:
    """``1.5 \\text{ km}`` → ``("1.5", Unit(length, 1000))``; text without a *known* unit comes back whole.

    A unit is known if it is in :data:`UNITS` (metric and imperial length, mass, time, volume, speed;
    ``square``/``cubic``/``^2``/``^3`` for area and volume). A bare one-letter unit (``150 m``) counts
    only after a number and a space, so ``2m`` stays the product 2·m."""
    stripped = text.strip()
    if len(stripped) > 2 and stripped[0] == stripped[-1] == "$" and stripped.count("$") == 2:
        stripped = stripped[1:-1].strip()  # $576\pi\;m^{2}$: math, not money
    inner = _NUMBER_IN_TEXT.match(stripped)
    if inner:
        stripped = inner.group(1).strip()
    money = _DOLLARS.match(stripped)
    if money and not _UNIT_TAIL.search(money.group(1)):  # \$5, $5: an amount of money (5 dollars, not 5 cents)
        return money.group(1), Unit("money", UNITS["$"][1])
    m = _UNIT_TAIL.search(stripped)
    if not m:
        return text, None
    head = stripped[: m.start()].rstrip()
    name = (m.group("wrapped") if m.group("wrapped") is not None else m.group("bare")) or ""
    name = re.sub(r"\\[,;:! ]|~", " ", name).strip()
    power = int(m.group("power") or 1)
    inner_power = re.fullmatch(r"(.*\S)\s*\^\s*\{?([23])\}?", name)
    if inner_power:
        name, power = inner_power.group(1).strip(), int(inner_power.group(2))
    words = name.split()
    if len(words) > 1 and words[-1].lower() in ("squared", "cubed"):  # meters squared
        power = 2 if words[-1].lower() == "squared" else 3
        words = words[:-1]
    if words and words[0].lower() in ("square", "sq", "cubic"):
        power = 3 if words[0].lower() == "cubic" else 2
        words = words[1:]
    name = " ".join(words)
    key = name.lower()
    # a unit typeset apart with a LaTeX space (576\pi\;m^{2}, 2\,h) is one after any value, a letter too
    spaced = re.search(r"\\[,;: ]|~", stripped[len(head) : m.start("bare")]) if m.group("bare") else None
    after_value = (
        re.search(r"[\d})]$", head) or (m.group("wrapped") is not None and re.search(r"[A-Za-z]$", head)) or spaced
    )
    if key not in UNITS or not head or not after_value:  # 16\pi \text{ cm}, but never "x m" (x·m)
        return text, None
    if (
        m.group("bare")
        and len(name) == 1
        and not spaced
        and not (re.search(r"\d$", head) and stripped[len(head)].isspace())
    ):
        return text, None
    dimension, factor = UNITS[key]
    return head, Unit(dimension, factor, power)


def unit_word(text: str) -> str | None:
    """The trailing unit word of an answer whether known or not (``12 \\text{ apples}`` → ``apples``), else None."""
    stripped = text.strip()
    inner = _NUMBER_IN_TEXT.match(stripped)
    if inner:
        stripped = inner.group(1).strip()
    m = _UNIT_TAIL.search(stripped)
    if not m or not re.search(r"\d$", stripped[: m.start()].rstrip()):
        return None
    name = re.sub(r"\\[,;:! ]|~", " ", m.group("wrapped") if m.group("wrapped") is not None else m.group("bare") or "")
    name = " ".join(name.split()).lower()
    if not re.fullmatch(r"[a-z][a-z ./]*", name) or any(w in _MATH_WORDS for w in name.split()):
        return None
    if set(name.split()) <= {"square", "sq", "cubic", "unit", "units"}:  # "square units" stands for any unit
        return None
    return name


class ParseError(ValueError):
    """The text is not a math answer this parser can read."""


class TooLarge(ParseError):
    """The text denotes a number too large to build exactly (a power tower, a huge factorial)."""


@dataclass(frozen=True)
class Expr:
    value: sympy.Expr
    decimals: int | None = None  # set when written as a plain decimal literal such as 6.28


@dataclass(frozen=True)
class Text:
    text: str  # lower-cased, spaces removed


@dataclass(frozen=True)
class Choice:
    letter: str


@dataclass(frozen=True)
class Relation:
    op: str  # one of = != < <= > >=
    lhs: sympy.Expr
    rhs: sympy.Expr


@dataclass(frozen=True)
class Bracketed:
    """An ordered sequence with its brackets: a tuple ``(1, 2)``, an interval ``[0, \\infty)``; none: the answers
    of ordered blanks (a gold ``5; 10``)."""

    open: str
    close: str
    items: tuple[Answer, ...]


@dataclass(frozen=True)
class Collection:
    """Unordered: a set ``\\{1, 2\\}`` or a bare list of all solutions ``1, 2``."""

    items: tuple[Answer, ...]


@dataclass(frozen=True)
class IntervalUnion:
    pieces: tuple[Answer, ...]


@dataclass(frozen=True)
class Matrix:
    rows: tuple[tuple[Answer, ...], ...]


@dataclass(frozen=True)
class Ratio:
    """``3:4``; equal to any proportional ratio with the same number of terms (``6:8``)."""

    terms: tuple[sympy.Expr, ...]


@dataclass(frozen=True)
class Chain:
    """Several relations written as one, e.g. ``1 < x \\le 3``."""

    relations: tuple[Relation, ...]


@dataclass(frozen=True)
class Labelled:
    """``(p, q) = (3, 2)``, ``x \\in [0, 1)``, ``V_1 : V_2 = 11 : 21``: a value with the name it is given."""

    label: str  # canonical spelling, spaces removed
    value: Answer


@dataclass(frozen=True)
class Approximate:
    """``\\frac{10}{3} \\approx 3.33``: an exact part (if written) and an approximate decimal."""

    exact: Answer | None
    value: sympy.Rational
    decimals: int
    significant: int  # significant digits written in the approximate value


@dataclass(frozen=True)
class BaseNumber:
    """``204_5``: a number written in base 2–36."""

    value: int
    base: int


@dataclass(frozen=True)
class ClockTime:
    """``12:00``, ``3:05 \\text{ PM}``: a time of day, never a ratio."""

    hour: int
    minute: int
    half: str | None  # "am", "pm" or None


@dataclass(frozen=True)
class Alternatives:
    """A gold that offers several right answers: ``(11,7) \\text{ or } (7,11)``, ``21, 16 \\text{ or } 11``."""

    options: tuple[Answer, ...]


Answer = Union[  # noqa: UP007
    Expr,
    Text,
    Choice,
    Relation,
    Bracketed,
    Collection,
    IntervalUnion,
    Matrix,
    Chain,
    Ratio,
    Labelled,
    Approximate,
    BaseNumber,
    ClockTime,
    Alternatives,
]

# ---------------------------------------------------------------------------------------------
# Normalisation: one canonical spelling for everything that does not change the value.

_UNICODE = {
    "\u2212": "-",
    "\u2013": "-",
    "\u2014": "-",
    "\u00d7": r"\times ",
    "\u00b7": r"\cdot ",
    "\u22c5": r"\cdot ",
    "\u00f7": r"\div ",
    "\u03c0": r"\pi ",
    "\u221e": r"\infty ",
    "\u221a": r"\sqrt ",
    "\u2264": r"\le ",
    "\u2265": r"\ge ",
    "\u2260": r"\ne ",
    "\u222a": r"\cup ",
    "\u00b0": "",
    "\u2032": "'",
    "\u2248": r"\approx ",
    "\u2205": r"\emptyset ",
    "\u00a0": " ",
    "\u2009": " ",
    "\u202f": " ",
}
_VULGAR = {"½": "1/2", "⅓": "1/3", "⅔": "2/3", "¼": "1/4", "¾": "3/4", "⅕": "1/5", "⅙": "1/6", "⅛": "1/8"}
_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹", "0123456789")

_DROP = re.compile(
    r"\\(?:left|right|bigl|bigr|Bigl|Bigr|biggl|biggr|big|Big|bigg|Bigg|displaystyle|textstyle|limits)(?![a-zA-Z])"
    r"|(?<!\\)\\[,;:! ]|\\q?quad(?![a-zA-Z])|~|\\(?:mathbf|mathit|boldsymbol|rm|bf)\s*(?=\{)"
)
_DEGREES = re.compile(r"\^\s*(?:\{\s*)?\\circ\s*\}?|\\circ(?![a-zA-Z])|\\degree(?![a-zA-Z])")  # one \s* per gap: linear
_PERCENT = re.compile(r"\\?%")
_TRAILING_BACKSLASH = re.compile(r"\\+\s*$")
_DOLLAR = re.compile(r"\\\$|\$")
_FRAC_VARIANTS = re.compile(r"\\[dtc]frac(?![a-zA-Z])")
# a thousands group is exactly three digits, the first group has no leading zero ("0,111" is a decimal
# comma), and a decimal part may follow: 1,000.99
_THOUSANDS = re.compile(
    r"(?<![\d.,])([1-9]\d{0,2})((?:(?:, ?\\! ?|,|\{,\}|\\[,;:]|\\ |~| )\d{3})+)(?!\d|,\d)(?!\.\d*[.,]\d)"
)  # separators: 1,000  1{,}000  1,\!000  11,\! 111 (spaces around \!)  1\,000  1\;000  1\ 000  1~000  1 000
_ONLY_THOUSANDS = re.compile(r"(?:(?:, ?\\! ?|\{,\})\d{3})+")  # separators never used between items: also in brackets
_DECIMAL_COMMA = re.compile(r"^([+-]?\s*)0(?:,|\{,\})(\d+)$")
_TEXT = re.compile(r"\\(?:text|textbf|textit|textrm|textnormal|mbox|mathrm|operatorname)\s*\{([^{}]*)\}")
_TRAILING_TEXT = re.compile(
    r"(?<=\S)\s*\\(?:text|mbox|textrm|textnormal|textbf|textit|mathrm)\s*\{\s*(?:~\s*)?[A-Za-z][A-Za-z ./]*\}"
    r"(?:\^\{?[23]\}?)?\s*$"
)
_REALS = re.compile(r"\\mathbb\s*(?:\{\s*)?R\s*\}?(?![a-zA-Z])|\u211d")  # \mathbb{R}, ℝ: every real number
_EMPTY_SET = re.compile(r"\\(?:emptyset|varnothing)(?![a-zA-Z])|\\\{(?:\s|\\[,;:! ]|~)*\\\}|\\O(?![a-zA-Z])")
_OVERLINE = re.compile(r"(?<![\d.])(\d*)\.(\d*)\\overline\s*(?:\{(\d{1,100})\}|(\d))")
_PAREN_REPEAT = re.compile(r"(?<![\d.])(\d+)\.(\d*)\((\d{1,100})\)")
# 7\frac{3}{4} and 7 3/4 are mixed numbers (7 + 3/4), never products; only proper fractions qualify
_MIXED_LATEX = re.compile(
    r"(?<![\d.^_])(\d+)\s*\\frac\s*(?:\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}|(\d)(\d))(?![\d^])"
)  # 2\frac{1}{2} and its shorthand 2\frac12 alike
_MIXED_PLAIN = re.compile(r"(?<![\d.^_/])(\d+)\s+(\d+)\s*/\s*(\d+)(?![\d.^])")
# the number starts where its run of digits and dots does (leading dots kept as they are): tried from
# every digit of a long run, the run would be rescanned from each, quadratic
_SCALE_WORDS = re.compile(
    r"(?<![\d.])([\d.]*\d)\s*(?:\\(?:text|mbox|textrm|mathrm)\s*\{\s*)?(hundred|thousand|million|billion|trillion|dozen)s?"
    r"(?![A-Za-z])\s*\}?",
    re.I,
)
_SCALES = {"hundred": "10^{2}", "thousand": "10^{3}", "million": "10^{6}", "billion": "10^{9}", "trillion": "10^{12}"}
_SCALES["dozen"] = "12"
_OPERATOR = re.compile(r"\\(?:operatorname\*?|mathrm|text|textrm)\s*\{\s*([a-zA-Z]+)\s*\}")
_NAMED_FUNCTIONS = set("sin cos tan cot sec csc arcsin arccos arctan sinh cosh tanh ln log exp gcd lcm".split())
_NUMBER_IN_TEXT = re.compile(
    r"^\\(?:text|textbf|textit|textrm|textnormal|mbox|mathrm)\s*\{\s*((?:[-+]\s*)?[\d.,]++[^{}]*)\}$"
)
_TRAILING_WORDS = re.compile(r"(?<=[\d)}])\s+([A-Za-z]{2,}(?:\s+[A-Za-z]+)*)(?:\^\{?[23]\}?)?\s*$")
_MATH_WORDS = {"pi", "inf", "infty", "infinity", "sqrt", "or", "and", "either", "i"}


# trailing words that change or deny the number before them are never dropped as units: "5 squared",
# "5 tenths", "5 \\text{ not}", "5 \\text{ or more}" are not 5 (the answer then cannot be read)
_VALUE_WORDS = re.compile(
    r"(?<![A-Za-z])(?:not|no|non|never|wrong|incorrect|false|except|but|squared|cubed|factorial|inverse|reciprocal"
    r"|negative|minus|plus|times\s+\S|over|to|through|least|most|more|less|fewer|greater|smaller|larger|above|below"
    r"|under|approx\w*|about|roughly|around|nearly|almost|half|halves|quarters?|thirds?|percent\s+of|mod|modulo"
    r"|maybe|perhaps|possibly|probably|likely|unlikely|guess\w*|unsure|uncertain"
    r"|(?:four|fif|six|seven|eigh|nin|ten|eleven|twelf|twentie|hundred|thousand|million|billion)ths?)"
    r"(?![A-Za-z])",
    re.I,
)


def _drops_as_unit(words: str) -> bool:
    words = re.sub(
        r"(?<=[A-Za-z])\s+(?:squared|cubed)\s*(?:\}\s*)?$", "", words.strip()
    )  # units squared: a power of the unit
    return not _VALUE_WORDS.search(words) and not any(w.lower() in _MATH_WORDS for w in words.split())


def _drop_units(text: str) -> str:
    """``5\\text{ cm}``, ``12 apples``, ``3 \\text{ m}^2`` → the number alone (see :data:`UNIT_POLICY`); a word that
    changes the number (``5 \\text{ squared}``, ``5 \\text{ tenths}``, ``5 \\text{ not}``) is kept, and unreadable."""
    text = _TRAILING_TEXT.sub(lambda m: "" if _drops_as_unit(_TEXT.sub(r"\1", m.group(0))) else m.group(0), text)
    m = _TRAILING_WORDS.search(text)
    if m and _drops_as_unit(m.group(1)):
        text = text[: m.start()]
    return text


def _int(digits: str) -> int:
    """``int()`` of a digit string of any length up to ``MAX_DIGITS`` (Python refuses > 4,300 digits at once)."""
    value = 0
    for k in range(0, len(digits), 1000):
        chunk = digits[k : k + 1000]
        value = value * 10 ** len(chunk) + int(chunk)
    return value


def _repeating(whole: str, fixed: str, period: str) -> str:
    """``0.1\\overline{6}`` → ``(\\frac{15}{90})``: a repeating decimal as the exact rational it denotes."""
    if len(whole) + len(fixed) > 1000:
        return f"{whole}.{fixed}\\overline{{{period}}}"  # left unread: too long to be an answer
    head = _int(whole or "0") * 10 ** len(fixed) + _int(fixed or "0")
    numerator = head * (10 ** len(period) - 1) + int(period)
    denominator = 10 ** len(fixed) * (10 ** len(period) - 1)
    return f"(\\frac{{{numerator}}}{{{denominator}}})"


def _mixed(m: re.Match[str]) -> str:
    if len(m.group(0)) > 1000:
        return m.group(0)
    whole, numerator, denominator = (int(g) for g in m.groups() if g is not None)
    if not 0 < numerator < denominator:
        return m.group(0)
    return f"({whole}+\\frac{{{numerator}}}{{{denominator}}})"


def _merge_thousands(text: str) -> str:
    """``1,000,000`` / ``1{,}000`` / ``1\\,000`` → ``1000000``, but only outside brackets, where a comma
    could separate the items of a tuple or an interval (``,\\!`` and ``{,}`` never do: ``\\frac{12}{5,\\!525}``)."""
    out, depth, last = [], 0, 0
    for m in _THOUSANDS.finditer(text):
        depth += sum(text.count(c, last, m.start()) for c in "([{") - sum(text.count(c, last, m.start()) for c in ")]}")
        out.append(text[last : m.start()])
        merge = depth == 0 or _ONLY_THOUSANDS.fullmatch(m.group(2))
        out.append(m.group(1) + re.sub(r"\D", "", m.group(2)) if merge else m.group(0))
        last = m.end()
    out.append(text[last:])
    return "".join(out)


_DOUBLED_COMMAND = re.compile(r"\\\\[A-Za-z]")  # \\frac: a command whose backslash was escaped twice


def undoubled(text: str) -> str:
    """LaTeX escaped twice by a JSON dump (``\\\\frac{1}{5}``, ``-2 \\\\le x``) as written once, when a doubled
    backslash starts a command (``\\\\`` before a letter is no line break in an answer): every backslash halved
    where all are doubled, else only those commands' and only outside environments (a matrix's row breaks,
    ``1 \\\\ x``, stay)."""
    if "\\\\" not in text or not _DOUBLED_COMMAND.search(text):
        return text
    if "\\" not in text.replace("\\\\", ""):
        return text.replace("\\\\", "\\")
    if "begin{" in text:  # an environment with rows: \\ may break them
        return text
    return _DOUBLED_COMMAND.sub(lambda m: m.group(0)[1:], text)  # \\dfrac{2}{3} + \frac{1}{72}: escaped in part


def normalise(text: str, *, decimal_comma: bool = True) -> str:
    """One spelling for equal things: unicode, spacing, ``\\dfrac``, thousands separators, units.

    ``decimal_comma``: read a lone ``0,111`` as 0.111 (never when a list is expected)."""
    text = undoubled(text)
    number_in_text = _NUMBER_IN_TEXT.match(text.strip())
    if number_in_text:  # \textbf{150 km} -> 150 km
        text = number_in_text.group(1)
    for char, repl in _UNICODE.items():
        text = text.replace(char, repl)
    for char, repl in _VULGAR.items():
        text = text.replace(char, f"({repl})")
    text = re.sub(r"[⁰¹²³⁴⁵⁶⁷⁸⁹]+", lambda m: "^{" + m.group(0).translate(_SUPERSCRIPTS) + "}", text)
    text = _DEGREES.sub("", text)
    text = _PERCENT.sub("", text)
    text = _DOLLAR.sub("", text)
    text = _TRAILING_BACKSLASH.sub("", text)  # "185\\" or "185\\\\": a stray backslash or line break, not math
    text = _FRAC_VARIANTS.sub(r"\\frac", text)
    text = _EMPTY_SET.sub(r"\\emptyset ", text)
    text = _REALS.sub(r"(-\\infty, \\infty)", text)
    text = _OVERLINE.sub(lambda m: _repeating(m.group(1), m.group(2), m.group(3) or m.group(4)), text)
    text = _PAREN_REPEAT.sub(lambda m: _repeating(m.group(1), m.group(2), m.group(3)), text)
    text = _OPERATOR.sub(
        lambda m: (
            f" {m.group(1)} "
            if m.group(1) in ("e", "i")
            else f"\\{m.group(1)} "
            if m.group(1) in _NAMED_FUNCTIONS
            else m.group(0)
        ),
        text,
    )
    text = text.replace(r"\lvert", "|").replace(r"\rvert", "|").replace(r"\vert", "|").replace(r"\mid", "|")
    text = text.replace(r"\lbrace", r"\{").replace(r"\rbrace", r"\}").replace(r"\{,\}", "{,}")
    text = _merge_thousands(text)
    text = _MIXED_LATEX.sub(_mixed, text)
    text = _MIXED_PLAIN.sub(_mixed, text)
    text = _SCALE_WORDS.sub(lambda m: f"{m.group(1)}\\times {_SCALES[m.group(2).lower()]}", text)
    if decimal_comma:
        text = _DECIMAL_COMMA.sub(r"\g<1>0.\2", text.strip())
    text = _DROP.sub(" ", text)
    text = _drop_units(text.strip())
    text = text.strip()
    while text.endswith((".", ";")) and not re.search(r"\d\.$", text[-2:]):
        text = text[:-1].rstrip()
    if text.endswith(".") and re.fullmatch(r".*\D\d+\.", text):  # "is 42." -> "42"
        text = text[:-1]
    return text.strip()


# ---------------------------------------------------------------------------------------------
# Tokens

_TOKEN = re.compile(
    r"(?P<num>\d+(?:\.\d*)?(?:[eE][+-]?\d+(?![a-zA-Z]))?|\.\d+)"
    r"|(?P<cmd>\\[a-zA-Z]+|\\[{}|])"
    r"|(?P<rel><=|>=|!=|=<|=>|[<>=])"
    r"|(?P<word>[a-zA-Z]+)"
    r"|(?P<sym>\\\\|[-+*/^_!(){}\[\]|,&'])"
    r"|(?P<space>\s+)"
)
_REL_COMMANDS = {
    r"\le": "<=",
    r"\leq": "<=",
    r"\leqslant": "<=",
    r"\ge": ">=",
    r"\geq": ">=",
    r"\geqslant": ">=",
    r"\ne": "!=",
    r"\neq": "!=",
    r"\lt": "<",
    r"\gt": ">",
}
_REL_ALIASES = {"=<": "<=", "=>": ">="}


@dataclass(frozen=True)
class Token:
    kind: str  # num cmd rel word sym text end
    text: str


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        text_match = _TEXT.match(text, pos)
        if text_match:
            tokens.append(Token("text", text_match.group(1)))
            pos = text_match.end()
            continue
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ParseError(f"unexpected character {text[pos]!r}")
        kind = m.lastgroup or ""
        value = m.group(0)
        pos = m.end()
        if kind == "space":
            continue
        if kind == "cmd" and value in _REL_COMMANDS:
            kind, value = "rel", _REL_COMMANDS[value]
        elif kind == "rel":
            value = _REL_ALIASES.get(value, value)
        tokens.append(Token(kind, value))
    tokens.append(Token("end", ""))
    return tokens


# ---------------------------------------------------------------------------------------------
# Guarded construction: refuse what would be too large to build exactly.


def _digits(value: sympy.Rational) -> float:
    """log10 of the larger of numerator and denominator, from bit lengths (no big-int printing)."""
    return max(abs(value.p).bit_length(), value.q.bit_length()) * 0.30103


def guarded_pow(base: sympy.Expr, exponent: sympy.Expr) -> sympy.Expr:
    if exponent.is_Rational and base.is_number:
        size = abs(exponent.p)
        if base.is_Rational and base not in (0, 1, -1):
            if size * _digits(base) > MAX_DIGITS:
                raise TooLarge(f"a power with more than {MAX_DIGITS:,} digits")
        elif size > MAX_DIGITS:
            raise TooLarge(f"a power with an exponent above {MAX_DIGITS:,}")
    elif exponent.is_number and not exponent.is_Rational and base.is_Rational and base not in (0, 1, -1):
        # e.g. 2^{\pi\cdot 10^{9}}: its size is bounded only if the exponent is modest
        approx = exponent.evalf(15)
        if not approx.is_comparable or abs(approx) * _digits(base) > MAX_DIGITS:
            raise TooLarge("a power too large to build exactly")
    elif exponent.is_number and base.is_number and not base.is_Rational:
        # e^{e^{e^{10}}}: no exact comparison of such a number ends, and evaluating it overflows
        try:
            size = abs(exponent.evalf(15)) * abs(sympy.log(abs(base.evalf(15)) + 2, 10).evalf(15))
        except (OverflowError, ValueError, TypeError):
            raise TooLarge("a power too large to evaluate") from None
        if size.is_comparable and size > MAX_DIGITS:
            raise TooLarge("a power too large to build exactly")
    return sympy.Pow(base, exponent)


def guarded_factorial(n: sympy.Expr) -> sympy.Expr:
    if not (n.is_Integer and n >= 0):
        if n.is_number:
            raise ParseError("factorial of something that is not a non-negative integer")
        return sympy.factorial(n)
    if n > MAX_FACTORIAL:
        raise TooLarge(f"factorial of {n} (the limit is {MAX_FACTORIAL})")
    return sympy.factorial(n)


def _number(text: str) -> tuple[sympy.Rational, int | None]:
    """An exact rational for a numeric literal, and its decimal places if written with a point."""
    mantissa, _, exponent = text.lower().partition("e")
    if len(mantissa) > MAX_DIGITS:
        raise TooLarge("a literal with more than 10,000 digits")
    whole, point, frac = mantissa.partition(".")
    value = sympy.Rational(_int(whole or "0") * 10 ** len(frac) + _int(frac or "0"), 10 ** len(frac))
    if exponent:
        power = int(exponent)
        if abs(power) > MAX_DIGITS:
            raise TooLarge("a scientific-notation exponent above 10,000")
        value *= sympy.Rational(10) ** power
        return value, None
    return value, (len(frac) if point else None)


_CONSTANTS = {
    r"\pi": sympy.pi,
    r"\infty": sympy.oo,
    r"\infinity": sympy.oo,
    "pi": sympy.pi,
    "inf": sympy.oo,
    "infty": sympy.oo,
    "infinity": sympy.oo,
    "oo": sympy.oo,
    r"\e": sympy.E,
    r"\varpi": sympy.pi,
}
_FUNCTIONS = {
    "sin": sympy.sin,
    "cos": sympy.cos,
    "tan": sympy.tan,
    "cot": sympy.cot,
    "sec": sympy.sec,
    "csc": sympy.csc,
    "arcsin": sympy.asin,
    "arccos": sympy.acos,
    "arctan": sympy.atan,
    "sinh": sympy.sinh,
    "cosh": sympy.cosh,
    "tanh": sympy.tanh,
    "ln": sympy.log,
    "exp": sympy.exp,
    "sqrt": sympy.sqrt,
}
_GREEK = {
    "alpha",
    "beta",
    "gamma",
    "delta",
    "theta",
    "lambda",
    "mu",
    "sigma",
    "phi",
    "omega",
    "tau",
    "rho",
    "epsilon",
    "varepsilon",
    "varphi",
    "psi",
    "xi",
    "eta",
    "zeta",
    "nu",
    "kappa",
    "chi",
}
_CONNECTIVES = {"or", "and", "either"}


# ---------------------------------------------------------------------------------------------
# Expression parser


class _Parser:
    def __init__(self, tokens: list[Token]):
        self.tokens = tokens
        self.pos = 0
        self.depth = 0
        self.bound: set[str] = set()  # summation indices: "i" is the index there, not the imaginary unit

    def peek(self, offset: int = 0) -> Token:
        return self.tokens[min(self.pos + offset, len(self.tokens) - 1)]

    def take(self) -> Token:
        token = self.tokens[self.pos]
        self.pos = min(self.pos + 1, len(self.tokens) - 1)
        return token

    def expect(self, text: str) -> None:
        token = self.take()
        if token.text != text:
            raise ParseError(f"expected {text!r}, found {token.text or 'the end'!r}")

    def at(self, *texts: str) -> bool:
        return self.peek().text in texts and self.peek().kind in ("sym", "cmd")

    def nested(self) -> _Parser:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ParseError("nested too deeply")
        return self

    # expr := term (('+' | '-') term)*
    def expr(self) -> sympy.Expr:
        value = self.term()
        while self.at("+", "-"):
            op = self.take().text
            right = self.term()
            value = value + right if op == "+" else value - right
        return value

    # term := unary (('*' | '/' | \cdot | \times | \div | implicit) unary)*
    def term(self) -> sympy.Expr:
        value = self.unary()
        while True:
            if self.at("*", r"\cdot", r"\times", r"\ast"):
                self.take()
                value = value * self.unary()
            elif self.at("/", r"\div"):
                self.take()
                value = _divide(value, self.unary())
            elif self.starts_factor():
                if self.peek().kind == "num" and self.pos > 0 and self.tokens[self.pos - 1].kind == "num":
                    raise ParseError("two numbers side by side (2 3 is neither 6 nor 23)")
                value = value * self.power()
            else:
                return value

    def starts_factor(self) -> bool:
        token = self.peek()
        if token.kind in ("num", "word"):
            return token.kind == "num" or token.text not in _CONNECTIVES
        if token.kind == "cmd":
            return token.text not in (r"\cdot", r"\times", r"\div", r"\pm", r"\mp", r"\cup", r"\cap", r"\}", r"\ast")
        return token.kind == "sym" and token.text in ("(", "{", "[")

    def unary(self) -> sympy.Expr:
        if self.at("-"):
            self.take()
            return -self.unary()
        if self.at("+"):
            self.take()
            return self.unary()
        return self.power()

    # power := postfix ('^' exponent)?    (right-associative: a^b^c = a^(b^c))
    def power(self) -> sympy.Expr:
        base = self.postfix()
        if self.at("^"):
            self.take()
            exponent = self.unary() if not self.at("{") else self.group()
            return self.postfixes(guarded_pow(base, exponent))
        return base

    def postfix(self) -> sympy.Expr:
        return self.postfixes(self.primary())

    def postfixes(self, value: sympy.Expr) -> sympy.Expr:
        while self.at("!"):
            self.take()
            value = guarded_factorial(value)
        return value

    def group(self) -> sympy.Expr:
        """``{…}`` as an argument (``\\frac{a}{b}``, ``x^{n}``)."""
        self.expect("{")
        self.nested()
        value = self.expr()
        self.expect("}")
        self.depth -= 1
        return value

    def argument(self) -> sympy.Expr:
        """A LaTeX macro argument: a ``{group}`` or a single character (``\\frac12``)."""
        if self.at("{"):
            return self.group()
        token = self.peek()
        if token.kind == "num" and len(token.text) > 1:
            first, rest = token.text[0], token.text[1:]
            self.tokens[self.pos] = Token("num", rest)
            return _number(first)[0]
        if token.kind == "word" and len(token.text) > 1:
            self.tokens[self.pos] = Token("word", token.text[1:])
            return sympy.Symbol(token.text[0])
        return self.primary()

    def subscript(self) -> str:
        if not self.at("_"):
            return ""
        self.take()
        if self.at("{"):
            self.take()
            parts = []
            while not self.at("}"):
                if self.peek().kind == "end":
                    raise ParseError("unclosed subscript")
                parts.append(self.take().text)
            self.take()
            return "_" + "".join(parts)
        return "_" + self.take().text

    def primary(self) -> sympy.Expr:
        token = self.peek()
        if token.kind == "num":
            self.take()
            return _number(token.text)[0]
        if token.kind == "word":
            return self.word()
        if token.kind == "cmd":
            return self.command()
        if token.kind == "sym" and token.text in ("(", "[", "{"):
            close = {"(": ")", "[": "]", "{": "}"}[token.text]
            self.take()
            self.nested()
            value = self.expr()
            self.expect(close)
            self.depth -= 1
            return value
        if token.kind == "sym" and token.text == "|":
            self.take()
            self.nested()
            value = self.expr()
            self.expect("|")
            self.depth -= 1
            return sympy.Abs(value)
        raise ParseError(f"unexpected {token.text or 'end of answer'!r}")

    def word(self) -> sympy.Expr:
        text = self.take().text
        if text in _CONSTANTS:
            return _CONSTANTS[text]
        if text.lower() in _FUNCTIONS:
            return self.apply(_FUNCTIONS[text.lower()])
        if text == "log":
            return self.logarithm()
        if text in ("gcd", "lcm") and self.at("("):
            return self.integer_function(text)
        if len(text) > 1:  # "xy" is x*y, as in LaTeX
            value = sympy.Integer(1)
            for ch in text:
                value *= _symbol(ch)
            return value
        name = text + self.subscript()
        primes = 0
        while self.at("'"):  # f', y'': a derivative's name, one symbol
            self.take()
            primes += 1
        if primes:
            return sympy.Symbol(name + "'" * primes)
        return sympy.Symbol(name) if name in self.bound else _symbol(name)

    def command(self) -> sympy.Expr:
        name = self.take().text
        if name in _CONSTANTS:
            return _CONSTANTS[name]
        if name == r"\frac":
            self.nested()
            numerator, denominator = self.argument(), self.argument()
            self.depth -= 1
            return _divide(numerator, denominator)
        if name in (r"\sum", r"\prod"):
            return self.big_operator(name)
        if name in (r"\gcd", r"\lcm"):
            return self.integer_function(name[1:])
        if name == r"\binom":
            n, k = self.argument(), self.argument()
            if n.is_Integer and k.is_Integer and n > MAX_FACTORIAL:
                raise TooLarge("a binomial coefficient that large")
            return sympy.binomial(n, k)
        if name == r"\sqrt":
            index = None
            if self.at("["):
                self.take()
                index = self.expr()
                self.expect("]")
            radicand = self.argument()
            return sympy.sqrt(radicand) if index is None else guarded_pow(radicand, _divide(sympy.Integer(1), index))
        if name[1:] in _FUNCTIONS:
            return self.apply(_FUNCTIONS[name[1:]])
        if name == r"\log":
            return self.logarithm()
        if name[1:] in _GREEK:
            return _symbol(name[1:] + self.subscript())
        if name in (r"\{", r"\emptyset"):
            raise ParseError("a set inside an expression")
        raise ParseError(f"unknown command {name}")

    def big_operator(self, name: str) -> sympy.Expr:
        """``\\sum_{k=1}^{10} k^2`` / ``\\prod_{k=1}^{n} k``: the index, its bounds, then one term."""
        self.expect("_")
        self.expect("{")
        index = self.take()
        if index.kind != "word" or len(index.text) != 1 or self.take().text != "=":
            raise ParseError(f"{name} needs a subscript like {{k=1}}")
        lower = self.expr()
        self.expect("}")
        self.expect("^")
        upper = self.argument()
        self.nested()
        outer, self.bound = self.bound, self.bound | {index.text}
        body = self.term()
        self.bound = outer
        self.depth -= 1
        var = sympy.Symbol(index.text)
        span = upper - lower
        if span.is_number:  # refused before any work, like (10^6)!
            if not span.is_finite or any(b.is_number and abs(b) > 10**100 for b in (lower, upper)):
                raise TooLarge(f"a {name[1:]} with bounds that large")
            closed_form = name == r"\sum" and body.is_polynomial(var) and sympy.degree(body, var) <= 10
            if span > (10_000 if name == r"\sum" else MAX_FACTORIAL) and not closed_form:
                raise TooLarge(f"a {name[1:]} over {span} terms")
        return (sympy.summation if name == r"\sum" else sympy.product)(body, (var, lower, upper))

    def integer_function(self, name: str) -> sympy.Expr:
        """``\\gcd(12, 18)``, ``\\operatorname{lcm}(4, 6)``: integers only."""
        self.expect("(")
        args = [self.expr()]
        while self.at(","):
            self.take()
            args.append(self.expr())
        self.expect(")")
        if len(args) < 2 or not all(a.is_Integer for a in args):
            raise ParseError(f"{name} of something other than integers")
        function = sympy.igcd if name == "gcd" else sympy.ilcm
        return sympy.Integer(function(*[int(a) for a in args]))

    def apply(self, function: object) -> sympy.Expr:
        power = None
        if self.at("^"):  # \sin^2 x
            self.take()
            power = self.argument()
        argument = self.power() if not self.at("(") else self.primary()
        value = function(argument)  # type: ignore[operator]
        return guarded_pow(value, power) if power is not None else value

    def logarithm(self) -> sympy.Expr:
        base = None
        if self.at("_"):
            self.take()
            base = self.argument()
        argument = self.power() if not self.at("(") else self.primary()
        return sympy.log(argument) if base is None else sympy.log(argument, base)


def _symbol(name: str) -> sympy.Expr:
    if name == "e":
        return sympy.E
    if name == "i":
        return sympy.I
    return sympy.Symbol(name)


def _divide(numerator: sympy.Expr, denominator: sympy.Expr) -> sympy.Expr:
    if denominator == 0:
        raise ParseError("division by zero")
    return numerator / denominator


def parse_expression(text: str) -> sympy.Expr:
    return _expression(tokenize(text))


def _expression(tokens: list[Token]) -> sympy.Expr:
    parser = _Parser(tokens)
    try:
        value = parser.expr()
    except RecursionError as exc:
        raise ParseError("nested too deeply") from exc
    if parser.peek().kind != "end":
        raise ParseError(f"unexpected {parser.peek().text!r} after the expression")
    if value.has(sympy.zoo, sympy.nan):
        raise ParseError("the expression is undefined")
    return value


# ---------------------------------------------------------------------------------------------
# Answer structure: choices, relations, sequences, sets, unions, matrices, text.

_CHOICE = re.compile(r"^\(?([A-E])\)?(?:\s.*)?$|^\\textbf\{\s*\(?([A-E])\)?\s*\}.*$")
_MATRIX = re.compile(r"^\\begin\{([pbvBV]?matrix|array)\}(?:\{[^{}]*\})?(.*)\\end\{\1\}$", re.S)
_PLAIN_WORDS = re.compile(r"^[A-Za-z][A-Za-z '\-]*$")
_LETTER_IN_ARITHMETIC = re.compile(
    r"(?<![A-Za-z\\])[A-E](?![A-Za-z])\s*(?:[*^/+=_]|\\cdot|\\times)|(?:[*^/+=\d]|\\cdot|\\times)\s*[A-E](?![A-Za-z])"
)


_NEGATION = re.compile(
    r"(?<![A-Za-z])(?:not|no|never|neither|nor|none|false|wrong|incorrect|except|eliminat\w*|rul\w* out|isn't|cannot)"
    r"(?![A-Za-z])|\\(?:neg|lnot|not|ne|neq)(?![a-zA-Z])",
    re.I,
)


def split_top_level(text: str, separators: tuple[str, ...]) -> list[str]:
    """Split ``text`` at ``separators`` that are outside every bracket pair."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        if text.startswith(("\\{", "\\left(", "\\left[", "\\left\\{"), i):
            depth += 1
            i += 2
            continue
        if text.startswith("\\}", i):
            depth -= 1
            i += 2
            continue
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0:
            for sep in separators:
                if text.startswith(sep, i) and not (
                    sep[0].isalpha() and text[i + len(sep) : i + len(sep) + 1].isalpha()
                ):
                    parts.append(text[start:i])
                    i += len(sep)
                    start = i
                    break
            else:
                i += 1
                continue
            continue
        i += 1
    parts.append(text[start:])
    return parts


def _outer_brackets(text: str) -> tuple[str, str, str] | None:
    """``(open, inner, close)`` if one bracket pair encloses all of ``text``."""
    if text.startswith("\\{") and text.endswith("\\}"):
        opening, closing, inner = "{", "}", text[2:-2]
    elif text and text[0] in "([" and text[-1] in ")]":
        opening, closing, inner = text[0], text[-1], text[1:-1]
    else:
        return None
    depth = 0
    for ch in inner:  # the first bracket must close only at the very end
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                return None
    return (opening, inner, closing) if depth == 0 else None


def is_hedged(text: str) -> bool:
    """ "3 or 4", "either 3 or 4", "3 \\text{ or } 4": more than one answer offered as *the* answer."""
    plain = _TEXT.sub(lambda m: f" {m.group(1)} ", text)
    return re.search(r"(?<![a-zA-Z])(?:or|either)(?![a-zA-Z])", plain) is not None


def choice_letter(text: str) -> str | None:
    plain = _TEXT.sub(lambda m: m.group(1), text).strip()
    plain = re.sub(r"\\textbf\{([^{}]*)\}", r"\1", plain).strip()
    m = _CHOICE.match(plain)
    if m:
        return m.group(1) or m.group(2)
    return None


def choice_letters(text: str) -> list[str]:
    """Every option letter mentioned in an answer such as ``(A) and (C)`` or ``B, D``."""
    plain = _TEXT.sub(lambda m: m.group(1), text)
    return sorted(set(re.findall(r"(?<![A-Za-z\\])([A-E])(?![A-Za-z])", plain)))


_NAME = r"(?:[A-Za-z]|\\[a-zA-Z]+)(?:_\{?[A-Za-z0-9]+\}?)?'*"
_TUPLE_LABEL = re.compile(rf"^\(\s*{_NAME}(?:\s*,\s*{_NAME})+\s*\)$")
_RATIO_LABEL = re.compile(rf"^{_NAME}(?:\s*:\s*{_NAME})+$")
_TEXT_LABEL = re.compile(r"^\\(?:text|textrm|textnormal|mathrm)\s*\{\s*[A-Za-z][A-Za-z ]*\}$")  # \text{Area} = 25
_SET_BUILDER = re.compile(rf"^\\\{{\s*({_NAME})\s*(?:\||:|\\mid)\s*(.+?)\s*\\\}}$", re.S)
_MEMBERSHIP = re.compile(rf"^({_NAME})\s*\\in(?![a-zA-Z])\s*(.+)$", re.S)
_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})\s*(?:\\text\{\s*)?([ap])?\.?\s*(?:m\.?)?\s*\}?$", re.I)
_BASE = re.compile(r"^([0-9A-Z]+)_\{?(\d{1,2})\}?$")
# one solution given as assignments to several names: "p = 5, q = 2"
_ASSIGNMENTS = re.compile(rf"^\s*{_NAME}\s*=\s*[^=,;]+(?:,\s*{_NAME}\s*=\s*[^=,;]+)+$")
_CONNECTIVE = re.compile(r"\\text\{\s*(or|and)\s*\}|(?<![a-zA-Z\\])(or|and)(?![a-zA-Z])")


def parse_answer(
    text: str, *, as_choice: bool = False, alternatives_as_list: bool = False, decimal_comma: bool = True
) -> Answer:
    """Parse one final answer. ``as_choice`` when the gold is a multiple-choice letter;
    ``alternatives_as_list`` when the gold is a set of all solutions, so that ``x = 4 \\text{ or } x = 1``
    lists them (elsewhere "or" is a hedge and never reaches the parser); ``decimal_comma`` reads a lone
    ``0,111`` as 0.111."""
    clock = _CLOCK.match(text.strip().strip("$").strip())
    if clock and not as_choice:
        hour, minute, half = int(clock.group(1)), int(clock.group(2)), clock.group(3)
        if clock.group(2).startswith("0") or half:
            if hour > 24 or minute > 59 or (half and not 1 <= hour <= 12):
                raise ParseError("not a time of day")
            return ClockTime(hour, minute, half.lower() + "m" if half else None)
    text = normalise(text, decimal_comma=decimal_comma)
    if not text:
        raise ParseError("empty answer")
    try:
        return _parse(text, as_choice, depth=0, alternatives=alternatives_as_list)
    except RecursionError as exc:
        raise ParseError("nested too deeply") from exc


def _label(text: str) -> str:
    return re.sub(r"\s+|\{|\}", "", text)


def _top_level_equals(text: str) -> int | None:
    """The index of the one top-level ``=`` (not part of ``<=``, ``>=``, ``!=``, ``==``), if exactly one."""
    parts = split_top_level(text, ("=",))
    if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
        return None
    if parts[0].rstrip()[-1:] in "<>!" or parts[1].lstrip()[:1] in "<>=":
        return None
    return len(parts[0])


def _connectives(text: str, words: tuple[str, ...]) -> list[re.Match[str]]:
    """The connectives among ``words`` ("and", "or", also as ``\\text{ or }``) outside every bracket."""
    found, last, depth = [], 0, 0
    for m in _CONNECTIVE.finditer(text):
        depth += sum(text.count(c, last, m.start()) for c in "([{") - sum(text.count(c, last, m.start()) for c in ")]}")
        last = m.start()
        if depth == 0 and (m.group(1) or m.group(2)) in words:
            found.append(m)
    return found


def _connectives_to_commas(text: str, words: tuple[str, ...]) -> str:
    """``1 \\text{ and } 4`` → ``1 , 4`` (and "or" where the gold lists solutions), outside brackets only."""
    out, last = [], 0
    for m in _connectives(text, words):
        out += [text[last : m.start()], " , "]
        last = m.end()
    return "".join(out) + text[last:]


def split_alternatives(text: str) -> list[str]:
    """``(11,7) or (7,11)``, ``$21,16$ or $11$`` → its parts at each "or" outside brackets."""
    parts, last = [], 0
    for m in _connectives(text, ("or",)):
        parts.append(text[last : m.start()])
        last = m.end()
    return [*parts, text[last:]]


def _list_items(items: list[str]) -> list[str]:
    """The items of a list, refusing an item written with a leading zero: in ``1,000`` or ``(1,000)`` the comma
    groups thousands, and reading it as the list ``1, 0`` would pay a thousand for two numbers."""
    for item in items[1:]:
        if re.fullmatch(r"\s*0\d+\s*", item):
            raise ParseError(f"a list item with a leading zero ({item.strip()!r}): thousands or a list?")
    return items


def _flatten_plus_minus(items: list[str], parsed: list[Answer]) -> tuple[Answer, ...]:
    """``0, \\pm 3`` lists 0, 3 and -3: a ``\\pm`` item contributes both of its values."""
    out: list[Answer] = []
    for source, item in zip(items, parsed, strict=True):
        if isinstance(item, Collection) and (r"\pm" in source or r"\mp" in source):
            out.extend(item.items)
        else:
            out.append(item)
    return tuple(out)


def _parse(text: str, as_choice: bool, depth: int, alternatives: bool = False) -> Answer:
    if depth > MAX_DEPTH:
        raise ParseError("nested too deeply")
    text = text.strip()

    def sub(part: str) -> Answer:
        return _parse(part, False, depth + 1, alternatives)

    if as_choice:
        letters = choice_letters(text)
        if len(letters) != 1:
            raise ParseError(f"expected one option letter, found {letters or 'none'}")
        plain = _TEXT.sub(lambda m: m.group(1), text)
        if _LETTER_IN_ARITHMETIC.search(plain) or re.match(r"\s*[-+]\s*\(?[A-E]", plain):
            raise ParseError("an option letter used as a quantity (2E, E*2, -B), not named")
        if _NEGATION.search(plain):
            raise ParseError("an option named only to be denied (not B, E is false)")
        return Choice(letters[0])
    if text == r"\emptyset":
        return Collection(())
    text = _semicolons_as_commas(text)
    matrix = _MATRIX.match(text)
    if matrix is None and text.startswith("(") and text.endswith(")") and text.count(r"\begin{") == 1:
        matrix = _MATRIX.match(text[1:-1].strip())  # (\begin{pmatrix}…\end{pmatrix}): one matrix in parentheses
    if matrix:
        rows = [r for r in re.split(r"\\\\", matrix.group(2)) if r.strip()]
        return Matrix(tuple(tuple(sub(cell) for cell in row.split("&")) for row in rows))
    base = _BASE.match(re.sub(r"\\(?:text|mathrm)\{([0-9A-Z]+)\}", r"\1", text))
    if base and any(c.isdigit() for c in base.group(1)):
        digits, radix = base.group(1), int(base.group(2))
        if 2 <= radix <= 36 and all(int(c, 36) < radix for c in digits) and len(digits) <= 100:
            return BaseNumber(int(digits, radix), radix)
    builder = _SET_BUILDER.match(text)
    if builder:  # \{x \mid -2 \le x < 1\}: the set its condition states
        return Labelled(_label(builder.group(1)), sub(builder.group(2)))
    member = _MEMBERSHIP.match(text)
    if member and len(split_top_level(member.group(2), (",", ";"))) == 1:  # x ∈ {1}, y ∈ {2} is a list of two
        return Labelled(_label(member.group(1)), sub(member.group(2)))
    pieces = split_top_level(text, (r"\cup",))
    if len(pieces) > 1:
        return IntervalUnion(tuple(sub(p) for p in pieces))
    if not _PLAIN_WORDS.match(text):
        text = _connectives_to_commas(text, ("and", "or") if alternatives else ("and",))
    groups = [g for g in split_top_level(text, (";",)) if g.strip()]
    if len(groups) > 1 and all(_ASSIGNMENTS.match(g) for g in groups):  # p=5, q=2; p=7, q=2: two solutions
        return Collection(tuple(sub(g) for g in groups))
    items = [i for i in split_top_level(text, (",", ";")) if i.strip()]
    if len(items) > 1:
        return Collection(_flatten_plus_minus(items, [sub(i) for i in _list_items(items)]))
    equals = _top_level_equals(text)
    if equals is not None:
        lhs, rhs = text[:equals].strip(), text[equals + 1 :].strip()
        if (
            _TUPLE_LABEL.match(lhs)
            or _TEXT_LABEL.match(lhs)
            or _RATIO_LABEL.match(lhs.replace(r"\colon", ":"))  # A:B = 1 (the ratio's value), V_1:V_2 = 11:21
            or (re.fullmatch(_NAME, lhs) and _outer_brackets(rhs) and len(split_top_level(rhs[1:-1], (",",))) > 1)
            or (re.fullmatch(_NAME, lhs.strip("{} ")) and _MATRIX.match(rhs))
        ):  # ... and D = (0, 1), a point named by a letter; \mathbf{L} = \begin{pmatrix}…, a named matrix
            return Labelled(_label(lhs.replace(r"\colon", ":")), sub(rhs))
        if re.fullmatch(_NAME, lhs) and (r"\pm" in rhs or r"\mp" in rhs) and not (r"\pm" in lhs or r"\mp" in lhs):
            name, values = parse_expression(lhs), _plus_minus(rhs)  # y = \pm 2: the two values, each given to y
            return Collection(tuple(Relation("=", name, v.value) for v in values.items if isinstance(v, Expr)))
    if r"\approx" in text:
        return _approximate(text, depth, alternatives)
    terms = split_top_level(text.replace(r"\colon", ":"), (":",))
    if len(terms) > 1:
        return Ratio(tuple(parse_expression(t) for t in terms))
    relation = _relation(text)
    if relation is not None:
        return relation
    outer = _outer_brackets(text)
    if outer is not None:
        opening, inner, closing = outer
        items = split_top_level(inner, (",",))
        if opening == "{":
            items = [i for i in items if i.strip()]
            return Collection(_flatten_plus_minus(items, [sub(i) for i in _list_items(items)]))
        if len(items) > 1:
            return Bracketed(opening, closing, tuple(sub(i) for i in _list_items(items)))
    if text.startswith("{") and text.endswith("}") and _outer_braces(text):
        items = split_top_level(text[1:-1], (",",))
        if len(items) > 1:  # {1, 3}: a set written without \{ \}
            return Collection(_flatten_plus_minus(items, [sub(i) for i in _list_items(items)]))
    if r"\pm" in text or r"\mp" in text:
        return _plus_minus(text)
    if _PLAIN_WORDS.match(text) and len(text.replace(" ", "")) > 1 and text.lower() not in _CONSTANTS:
        if not _looks_like_math_word(text):
            return Text(text.lower().replace(" ", ""))
    if text.startswith(r"\text") and _TEXT.fullmatch(text):
        inner = _TEXT.fullmatch(text).group(1).strip()  # type: ignore[union-attr]
        if _PLAIN_WORDS.match(inner) and len(inner) > 1:
            return Text(inner.lower().replace(" ", ""))
        try:
            return Expr(parse_expression(inner))
        except ParseError:
            return Text(inner.lower().replace(" ", ""))
    decimals = _number_decimals(text)
    return Expr(parse_expression(text), decimals)


def _semicolons_as_commas(text: str) -> str:
    """``(1; 2)`` → ``(1, 2)``: inside one pair of brackets, semicolons separate the items where no comma does."""
    outer = _outer_brackets(text)
    if outer is None:
        return text
    inner = outer[1]
    items = split_top_level(inner, (";",))
    if len(items) == 1 or len(split_top_level(inner, (",",))) > 1:
        return text
    bracket = 2 if text.startswith("\\{") else 1
    return text[:bracket] + ",".join(items) + text[-bracket:]


def _outer_braces(text: str) -> bool:
    depth = 0
    for i, ch in enumerate(text):
        depth += ch == "{"
        depth -= ch == "}"
        if depth == 0 and i < len(text) - 1:
            return False
    return depth == 0


def _approximate(text: str, depth: int, alternatives: bool) -> Approximate | Labelled:
    """``A = \\pi r^2 = 16\\pi \\approx 50.27``: the exact part (if any) and the written decimal."""
    parts = split_top_level(text, (r"\approx",))
    if len(parts) < 2 or any(not p.strip() for p in parts[1:]):
        raise ParseError("an approximation without a value")
    written = parts[-1].replace(" ", "")
    m = re.fullmatch(r"([+-]?)(\d*)\.?(\d*)", written)
    if not m or not (m.group(2) or m.group(3)):
        raise ParseError(f"an approximate value that is not a decimal: {parts[-1]!r}")
    value, decimals = _number(written.lstrip("+-"))
    if m.group(1) == "-":
        value = -value
    digits = (m.group(2) + m.group(3)).lstrip("0")
    head = parts[0].strip()
    exact = None
    if head and not re.fullmatch(_NAME, head):  # "x \approx 0.33" has no exact part
        exact = _parse(head, False, depth + 1, alternatives)
    approximate = Approximate(exact, value, decimals or 0, len(digits))
    return Labelled(_label(head), approximate) if head and exact is None else approximate  # y ≈ 3.14 names y


def _looks_like_math_word(text: str) -> bool:
    """Single-letter products like ``xy`` or function names are math, not text."""
    word = text.replace(" ", "").lower()
    return len(word) <= 3 or word in _FUNCTIONS or word in _CONSTANTS


def _number_decimals(text: str) -> int | None:
    """The decimal places of a plain decimal (``6.28``: 2), also in scientific notation (``2.31 \\times 10^{-3}``: 5)."""
    m = re.fullmatch(r"[+-]?(\d*\.(\d+)|\d+\.)(?:(?:\\times|\\cdot)10\^\{?([+-]?\d{1,4})\}?)?", text.replace(" ", ""))
    if not m:
        return None
    places = len(m.group(2) or "") - int(m.group(3) or 0)
    return places if places >= 0 else None


def _relation(text: str) -> Answer | None:
    tokens = tokenize(text)
    if not any(t.kind == "rel" for t in tokens):
        return None
    sides: list[list[Token]] = [[]]
    ops = []
    depth = 0
    for token in tokens[:-1]:
        if token.kind == "sym" and token.text in "([{":
            depth += 1
        elif token.kind == "sym" and token.text in ")]}":
            depth -= 1
        if token.kind == "rel" and depth == 0:
            ops.append(token.text)
            sides.append([])
        else:
            sides[-1].append(token)
    if not ops:
        return None
    if any(not side for side in sides):
        raise ParseError("a relation with an empty side")
    values = [_expression(side + [tokens[-1]]) for side in sides]
    relations = tuple(Relation(op, values[i], values[i + 1]) for i, op in enumerate(ops))
    return relations[0] if len(relations) == 1 else Chain(relations)


def _plus_minus(text: str) -> Collection:
    """``a \\pm b`` is the two answers ``a + b`` and ``a - b``."""
    if text.count(r"\pm") + text.count(r"\mp") > 1:
        raise ParseError("more than one \\pm")
    plus = text.replace(r"\pm", "+").replace(r"\mp", "-")
    minus = text.replace(r"\pm", "-").replace(r"\mp", "+")
    return Collection((Expr(parse_expression(plus)), Expr(parse_expression(minus))))
