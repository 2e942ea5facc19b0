"""Reading a math answer written in LaTeX or plain text into an exact, structured value.

Model text is never evaluated: a tokenizer and a recursive-descent parser build SymPy objects
node by node, and every node that could grow without bound is refused before it is built
(``2^{2^{2^{2^{2^{2}}}}}``, ``(10^{9})!``), so parsing is cheap and bounded even on hostile
input. Numbers stay exact: ``0.1`` is the rational 1/10, never a float.

The result is one of the :data:`Answer` shapes: an expression (with the number of decimals
if it was written as a plain decimal), text, a multiple-choice letter, a relation
(``y = 2x+1``, ``x \\ge 3``), a bracketed sequence (tuple or interval; brackets kept), an
unordered collection (``\\{1, 2\\}`` or a bare ``1, 2``), a union of intervals, or a matrix.
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
    "percent signs, degree marks, dollar signs and trailing unit words are dropped from both "
    "answer and gold: 25\\% = 25 (not 0.25), 30^\\circ = 30 (not \\pi/6), 5\\text{ cm} = 5"
)


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
    """An ordered sequence with its brackets: a tuple ``(1, 2)`` or an interval ``[0, \\infty)``."""

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


Answer = Union[Expr, Text, Choice, Relation, Bracketed, Collection, IntervalUnion, Matrix, Chain, Ratio]  # noqa: UP007

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
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ(?![a-zA-Z])|\\degree(?![a-zA-Z])")
_PERCENT = re.compile(r"\\?%")
_DOLLAR = re.compile(r"\\\$|\$")
_FRAC_VARIANTS = re.compile(r"\\[dtc]frac(?![a-zA-Z])")
_THOUSANDS = re.compile(r"(?<![\d.])(\d{1,3})((?:(?:,|\{,\}|\\,| )\d{3})+)(?![\d.])")
_TEXT = re.compile(r"\\(?:text|textbf|textit|textrm|textnormal|mbox|mathrm|operatorname)\s*\{([^{}]*)\}")
_TRAILING_TEXT = re.compile(
    r"(?<=\S)\s*\\(?:text|mbox|textrm|mathrm)\s*\{\s*[A-Za-z][A-Za-z ./]*\}(?:\^\{?[23]\}?)?\s*$"
)
_TRAILING_WORDS = re.compile(r"(?<=[\d)}])\s+([A-Za-z]{2,}(?:\s+[A-Za-z]+)*)(?:\^\{?[23]\}?)?\s*$")
_MATH_WORDS = {"pi", "inf", "infty", "infinity", "sqrt", "or", "and", "either", "i"}


def _drop_units(text: str) -> str:
    """``5\\text{ cm}``, ``12 apples``, ``3 \\text{ m}^2`` → the number alone (see :data:`UNIT_POLICY`)."""
    text = _TRAILING_TEXT.sub("", text)
    m = _TRAILING_WORDS.search(text)
    if m and not any(w.lower() in _MATH_WORDS for w in m.group(1).split()):
        text = text[: m.start()]
    return text


def _merge_thousands(text: str) -> str:
    """``1,000,000`` / ``1{,}000`` / ``1\\,000`` → ``1000000``, but only outside brackets, where a comma
    could separate the items of a tuple or an interval."""
    out, depth, last = [], 0, 0
    for m in _THOUSANDS.finditer(text):
        depth += sum(text.count(c, last, m.start()) for c in "([{") - sum(text.count(c, last, m.start()) for c in ")]}")
        out.append(text[last : m.start()])
        out.append(m.group(0) if depth > 0 else m.group(1) + re.sub(r"\{,\}|\\,|,| ", "", m.group(2)))
        last = m.end()
    out.append(text[last:])
    return "".join(out)


def normalise(text: str) -> str:
    """One spelling for equal things: unicode, spacing, ``\\dfrac``, thousands separators, units."""
    for char, repl in _UNICODE.items():
        text = text.replace(char, repl)
    for char, repl in _VULGAR.items():
        text = text.replace(char, f"({repl})")
    text = re.sub(r"[⁰¹²³⁴⁵⁶⁷⁸⁹]+", lambda m: "^{" + m.group(0).translate(_SUPERSCRIPTS) + "}", text)
    text = _DEGREES.sub("", text)
    text = _PERCENT.sub("", text)
    text = _DOLLAR.sub("", text)
    text = _FRAC_VARIANTS.sub(r"\\frac", text)
    text = text.replace(r"\lvert", "|").replace(r"\rvert", "|").replace(r"\vert", "|").replace(r"\mid", "|")
    text = text.replace(r"\lbrace", r"\{").replace(r"\rbrace", r"\}").replace(r"\{,\}", "{,}")
    text = _merge_thousands(text)
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
    value = sympy.Rational(int(whole or "0") * 10 ** len(frac) + int(frac or "0"), 10 ** len(frac))
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
        if len(text) > 1:  # "xy" is x*y, as in LaTeX
            value = sympy.Integer(1)
            for ch in text:
                value *= _symbol(ch)
            return value
        return _symbol(text + self.subscript())

    def command(self) -> sympy.Expr:
        name = self.take().text
        if name in _CONSTANTS:
            return _CONSTANTS[name]
        if name == r"\frac":
            self.nested()
            numerator, denominator = self.argument(), self.argument()
            self.depth -= 1
            return _divide(numerator, denominator)
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
        if name in (r"\{",):
            raise ParseError("a set inside an expression")
        raise ParseError(f"unknown command {name}")

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


def parse_answer(text: str, *, as_choice: bool = False) -> Answer:
    """Parse one final answer. ``as_choice`` when the gold is a multiple-choice letter."""
    text = normalise(text)
    if not text:
        raise ParseError("empty answer")
    try:
        return _parse(text, as_choice, depth=0)
    except RecursionError as exc:
        raise ParseError("nested too deeply") from exc


def _parse(text: str, as_choice: bool, depth: int) -> Answer:
    if depth > MAX_DEPTH:
        raise ParseError("nested too deeply")
    text = text.strip()
    if as_choice:
        letters = choice_letters(text)
        if len(letters) != 1:
            raise ParseError(f"expected one option letter, found {letters or 'none'}")
        return Choice(letters[0])
    matrix = _MATRIX.match(text)
    if matrix:
        rows = [r for r in re.split(r"\\\\", matrix.group(2)) if r.strip()]
        return Matrix(tuple(tuple(_parse(cell, False, depth + 1) for cell in row.split("&")) for row in rows))
    pieces = split_top_level(text, (r"\cup",))
    if len(pieces) > 1:
        return IntervalUnion(tuple(_parse(p, False, depth + 1) for p in pieces))
    items = split_top_level(text, (",", ";"))
    if len(items) > 1:
        return Collection(tuple(_parse(i, False, depth + 1) for i in items if i.strip()))
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
            return Collection(tuple(_parse(i, False, depth + 1) for i in items if i.strip()))
        if len(items) > 1:
            return Bracketed(opening, closing, tuple(_parse(i, False, depth + 1) for i in items))
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


def _looks_like_math_word(text: str) -> bool:
    """Single-letter products like ``xy`` or function names are math, not text."""
    word = text.replace(" ", "").lower()
    return len(word) <= 3 or word in _FUNCTIONS or word in _CONSTANTS


def _number_decimals(text: str) -> int | None:
    m = re.fullmatch(r"[+-]?\s*(\d*\.(\d+)|\d+\.)", text.replace(" ", ""))
    return len(m.group(2) or "") if m else None


def _relation(text: str) -> Answer | None:
    tokens = tokenize(text)
    if not any(t.kind == "rel" for t in tokens):
        return None
    sides: list[list[Token]] = [[]]
    ops = []
    for token in tokens[:-1]:
        if token.kind == "rel":
            ops.append(token.text)
            sides.append([])
        else:
            sides[-1].append(token)
    if any(not side for side in sides):
        raise ParseError("a relation with an empty side")
    values = [_expression(side + [tokens[-1]]) for side in sides]
    relations = tuple(Relation(op, values[i], values[i + 1]) for i, op in enumerate(ops))
    return relations[0] if len(relations) == 1 else Chain(relations)


def _plus_minus(text: str) -> Answer:
    """``a \\pm b`` is the two answers ``a + b`` and ``a - b``."""
    if text.count(r"\pm") + text.count(r"\mp") > 1:
        raise ParseError("more than one \\pm")
    plus = text.replace(r"\pm", "+").replace(r"\mp", "-")
    minus = text.replace(r"\pm", "-").replace(r"\mp", "+")
    return Collection((Expr(parse_expression(plus)), Expr(parse_expression(minus))))
