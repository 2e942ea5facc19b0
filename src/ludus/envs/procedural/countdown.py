"""Countdown verification: does the model's expression reach the target with the given numbers?

The expression is model text, so it is never handed to ``eval``: a small recursive-descent
parser accepts only integers, ``+ - * /`` and parentheses, within a length and nesting cap,
and evaluates with :class:`fractions.Fraction` so that ``7/2*2`` is exactly 7.
"""

from __future__ import annotations

import re
from collections import Counter
from fractions import Fraction
from typing import TypeAlias

from ludus.core.types import Score, Status
from ludus.envs.procedural.exact import parse_int
from ludus.tasks.answers import final_answer

MAX_EXPRESSION_CHARS = 200
MAX_DEPTH = 20

# An integer leaf, or (operator, left, right).
Node: TypeAlias = "int | tuple[str, Node, Node]"

_TOKEN = re.compile(r"[0-9]+|[-+*/()]")
_SPELLINGS = {
    "\\times": "*",
    "\\cdot": "*",
    "\\div": "/",
    "\u00d7": "*",  # ×
    "\u22c5": "*",  # ⋅
    "\u00b7": "*",  # ·
    "\u00f7": "/",  # ÷
    "\u2212": "-",  # minus sign
    "\u2013": "-",  # en dash
}


class ExpressionError(ValueError):
    """The text is not a well-formed expression of integers, ``+ - * /`` and parentheses."""


def _tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    pos = 0
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ExpressionError(f"unexpected character {text[pos]!r} at position {pos}")
        tokens.append(m.group())
        pos = m.end()
    return tokens


class _Parser:
    """expr := term (('+'|'-') term)* ; term := factor (('*'|'/') factor)* ; factor := INT | '(' expr ')'"""

    def __init__(self, tokens: list[str]):
        self.tokens, self.pos, self.depth = tokens, 0, 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise ExpressionError("the expression ends too early")
        self.pos += 1
        return token

    def expr(self) -> Node:
        node = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            node = (op, node, self.term())
        return node

    def term(self) -> Node:
        node = self.factor()
        while self.peek() in ("*", "/"):
            op = self.take()
            node = (op, node, self.factor())
        return node

    def factor(self) -> Node:
        token = self.take()
        if token[0].isdigit():
            return int(token)
        if token == "(":
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise ExpressionError(f"parentheses are nested deeper than {MAX_DEPTH} levels")
            node = self.expr()
            if self.peek() != ")":
                raise ExpressionError("a '(' is never closed")
            self.take()
            self.depth -= 1
            return node
        hint = " (a sign before a number, like -3, is not allowed)" if token in "+-" else ""
        raise ExpressionError(f"expected a number or '(' but found {token!r}{hint}")


def parse_expression(text: str) -> Node:
    """Parse ``text`` into a tree; raises :class:`ExpressionError` saying what is wrong."""
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"the expression is {len(text)} characters; the cap is {MAX_EXPRESSION_CHARS}")
    for spelling, op in _SPELLINGS.items():
        text = text.replace(spelling, op)
    parser = _Parser(_tokenize(text))
    if parser.peek() is None:
        raise ExpressionError("the expression is empty")
    node = parser.expr()
    if parser.peek() is not None:
        raise ExpressionError(f"unexpected {parser.peek()!r} after a complete expression")
    return node


def expression_value(node: Node) -> Fraction:
    """The exact value of a parsed expression; raises ``ZeroDivisionError``."""
    if isinstance(node, int):
        return Fraction(node)
    op, left, right = node
    a, b = expression_value(left), expression_value(right)
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    return a / b


def numbers_in(node: Node) -> list[int]:
    """Every integer literal in the expression, in order."""
    if isinstance(node, int):
        return [node]
    return numbers_in(node[1]) + numbers_in(node[2])


def score_countdown(completion: str, numbers: list[int], target: int) -> Score:
    """1.0 if the reply's final answer is an expression over ``numbers`` (each at most as often
    as given) that equals ``target`` exactly; otherwise 0 with a status and reason.

    ``expr = target`` is accepted as well as a bare ``expr``.
    """
    answer, early = final_answer(completion)
    if early is not None:
        return early
    assert answer is not None
    sides = answer.split("=")
    if len(sides) > 2:
        return Score(0.0, Status.FORMAT_ERROR, "give one expression, not a chain of '=' steps", extracted=answer)
    if len(sides) == 2:
        claimed = parse_int(sides[1])
        if claimed is None:
            return Score(
                0.0,
                Status.FORMAT_ERROR,
                f"the right side of '=' ({sides[1].strip()[:40]!r}) is not an integer",
                extracted=answer,
            )
        if claimed != target:
            return Score(0.0, Status.WRONG, f"the answer claims {claimed}, the target is {target}", extracted=answer)
    try:
        tree = parse_expression(sides[0])
    except ExpressionError as exc:
        return Score(0.0, Status.FORMAT_ERROR, f"not a valid expression: {exc}", extracted=answer)
    available = Counter(numbers)
    for n, times in (Counter(numbers_in(tree)) - available).items():
        if n not in available:
            reason = f"uses {n}, which is not one of the numbers {sorted(numbers)}"
        else:
            reason = f"uses {n} {available[n] + times} times but it is given {available[n]} time(s)"
        return Score(0.0, Status.WRONG, reason, extracted=answer)
    try:
        value = expression_value(tree)
    except ZeroDivisionError:
        return Score(0.0, Status.WRONG, "the expression divides by zero", extracted=answer)
    if value == target:
        return Score(1.0, Status.CORRECT, f"the expression equals {target}", extracted=answer)
    return Score(0.0, Status.WRONG, f"the expression equals {value}, the target is {target}", extracted=answer)
