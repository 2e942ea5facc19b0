"""The audit's verdicts on reasoning-gym datasets n_queens … zebra_puzzles, and the scorers and references it adds."""

from __future__ import annotations

import json
import re
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from decimal import Decimal
from fractions import Fraction
from itertools import islice
from typing import Any

from ludus.core.types import Score, Status
from ludus.envs.procedural import score_countdown
from ludus.envs.reasoning_gym.grading import (
    MAX_CHARS,
    MINUS,
    correct,
    decimal_number,
    early,
    format_error,
    rg_pays,
    score_exact_number,
    wrong,
)
from ludus.envs.reasoning_gym.verdicts import Verdict

# ---------------------------------------------------------------------------------------------
# n_queens: rg eval()s the reply; we check the board itself, so every valid completion counts


def _board(answer: str, n: int) -> list[list[str]] | None:
    rows = []
    for line in answer.strip().splitlines():
        if not line.strip():
            continue
        cells = line.split() if " " in line.strip() else list(line.strip())
        rows.append(cells)
    if len(rows) != n or any(len(r) != n or any(c not in ("_", "Q") for c in r) for r in rows):
        return None
    return rows


def score_n_queens(answer: str, entry: dict[str, Any]) -> Score:
    if (refusal := early(answer)) is not None:
        return refusal
    puzzle = entry["metadata"]["puzzle"]
    n = len(puzzle)
    rows = _board(answer, n)
    if rows is None:
        return format_error(f"not a {n} x {n} board of '_' and 'Q'", answer)
    queens = [(r, c) for r in range(n) for c in range(n) if rows[r][c] == "Q"]
    given = [(r, c) for r in range(n) for c in range(n) if puzzle[r][c] == "Q"]
    if any(rows[r][c] != "Q" for r, c in given):
        return wrong("a queen that was already on the board was removed or moved", answer)
    want = len(given) + int(entry["metadata"]["num_removed"])
    if len(queens) != want:
        return wrong(f"the board has {len(queens)} queens; it needs {want}", answer)
    for i, (r1, c1) in enumerate(queens):
        for r2, c2 in queens[i + 1 :]:
            if r1 == r2 or c1 == c2 or abs(r1 - r2) == abs(c1 - c2):
                return wrong(f"the queens at {(r1, c1)} and {(r2, c2)} attack each other", answer)
    return correct("every queen is placed and none attacks another", answer)


# ---------------------------------------------------------------------------------------------
# number_format: rg accepts anything within 0.01 of the chosen number


def score_number_format(answer: str, entry: dict[str, Any]) -> Score:
    if (refusal := early(answer)) is not None:
        return refusal
    value = decimal_number(answer, grouping=True, exponent=True)
    if value is None:
        return format_error(f"{answer[:60]!r} is not a single number", answer)
    meta = entry["metadata"]
    golds = {Decimal(str(entry["answer"])), Decimal(repr(float(meta["solution"])))}
    for shown, cand in zip(meta["formatted_candidates"], meta["candidates"], strict=False):
        if (
            float(cand) == float(meta["solution"])
            and (d := decimal_number(shown, grouping=True, exponent=True)) is not None
        ):
            golds.add(d)
    if value in golds:
        return correct(f"{value} is the requested number", answer)
    return wrong(f"{value} is not the requested number {entry['answer']}", answer)


# ---------------------------------------------------------------------------------------------
# number_sorting: rg lets every number be off by up to 1


def _number_list(answer: str) -> list[Decimal] | None:
    text = answer.strip()
    if not (text.startswith("[") and text.endswith("]")):
        return None
    body = text[1:-1].strip()
    if not body:
        return []
    values = []
    for item in body.split(","):
        item = item.strip()
        if len(item) >= 2 and item[0] == item[-1] and item[0] in "'\"":
            item = item[1:-1]
        d = decimal_number(item, exponent=True)
        if d is None:
            return None
        values.append(d)
    return values


def score_number_sorting(answer: str, entry: dict[str, Any]) -> Score:
    if (refusal := early(answer)) is not None:
        return refusal
    values = _number_list(answer)
    if values is None:
        return format_error("not a list of numbers like ['-1.5', '2', '3.25']", answer)
    gold = [Decimal(x) for x in entry["metadata"]["sorted_numbers"]]
    if values == gold:
        return correct("the numbers are correctly sorted", answer)
    return wrong(f"expected {entry['answer']}", answer)


# ---------------------------------------------------------------------------------------------
# polynomial_equations: rg skips every comma-separated item that is not a number


def score_polynomial_equations(answer: str, entry: dict[str, Any]) -> Score:
    gold_text = str(entry["answer"]).strip()
    text = answer.strip() if isinstance(answer, str) else ""
    if len(text) > MAX_CHARS:
        return format_error(f"the answer is {len(text)} characters; the cap is {MAX_CHARS}", text)
    if text in ("", '""', "''"):
        if not gold_text:
            return correct("there is no real solution", text)
        return Score.zero(Status.NO_ANSWER, "empty answer")
    values = []
    for item in text.split(","):
        d = decimal_number(item, exponent=True)
        if d is None:
            return format_error(f"{item.strip()[:40]!r} is not a decimal number", text)
        values.append(float(d))
    gold = [float(x) for x in gold_text.split(",")] if gold_text else []
    if sorted(values) == sorted(gold):
        return correct("the real solutions are correct", text)
    return wrong(f"expected {gold_text or 'no real solution'}", text)


# ---------------------------------------------------------------------------------------------
# pool_matrix: rg accepts any matrix within 1% relative error; the question asks for 2 decimals


def _pooled(meta: dict[str, Any]) -> list[list[Fraction]]:
    matrix, k, kind = meta["matrix"], int(meta["pool_size"]), meta["pool_type"]
    out = []
    for r in range(0, len(matrix), k):
        row = []
        for c in range(0, len(matrix[0]), k):
            block = [
                Fraction(matrix[i][j])
                for i in range(r, min(r + k, len(matrix)))
                for j in range(c, min(c + k, len(matrix[0])))
            ]
            row.append(max(block) if kind == "max" else sum(block) / len(block))
        out.append(row)
    return out


def score_pool_matrix(answer: str, entry: dict[str, Any]) -> Score:
    if (refusal := early(answer)) is not None:
        return refusal
    rows = []
    for line in answer.strip().splitlines():
        cells = [decimal_number(c, exponent=True) for c in line.split()]
        if any(c is None for c in cells):
            return format_error("not a matrix of numbers separated by spaces and newlines", answer)
        rows.append([Fraction(c) for c in cells if c is not None])
    gold_text = [[Fraction(Decimal(c)) for c in line.split()] for line in str(entry["answer"]).strip().splitlines()]
    exact = _pooled(entry["metadata"])
    if [len(r) for r in rows] != [len(r) for r in exact]:
        return wrong(f"the matrix has the wrong shape; expected {len(exact)} x {len(exact[0])}", answer)
    half = Fraction(1, 200)
    for i, row in enumerate(rows):
        for j, value in enumerate(row):
            if value != gold_text[i][j] and abs(value - exact[i][j]) > half:
                return wrong(f"entry ({i}, {j}) is {float(value)}, not {float(exact[i][j]):.2f}", answer)
    return correct("every entry is correct to 2 decimal places", answer)


# ---------------------------------------------------------------------------------------------
# prime_factorization: rg raises ValueError on any factor that is not a bare integer


def score_prime_factorization(answer: str, entry: dict[str, Any]) -> Score:
    if (refusal := early(answer)) is not None:
        return refusal
    parts = [p.strip() for p in re.split(r"[×*·]|\s+x\s+", answer.strip())]
    if not all(re.fullmatch(r"\d{1,40}", p) for p in parts):
        return format_error("not a list of integer factors separated by ×", answer)
    gold = sorted(int(p) for p in str(entry["answer"]).split("×"))
    if sorted(int(p) for p in parts) == gold:
        return correct("the prime factorization is correct", answer)
    return wrong(f"expected {entry['answer']}", answer)


# ---------------------------------------------------------------------------------------------
# puzzle24: rg parse_expr()s the reply (code execution), truncates the value to an int and never
# checks that the four given numbers are the ones used


def score_puzzle24(answer: str, entry: dict[str, Any]) -> Score:
    if (refusal := early(answer)) is not None:
        return refusal
    numbers = [int(n) for n in entry["metadata"]["numbers"]]
    used = [int(n) for n in re.findall(r"\d+", answer.split("=")[0])]
    if Counter(used) != Counter(numbers):
        return wrong(f"the expression must use each of {numbers} exactly once, it uses {used}", answer)
    score = score_countdown(answer, numbers, 24)
    score.extracted = answer
    return score


# ---------------------------------------------------------------------------------------------
# polynomial_multiplication and simple_integration: rg sympy.parse_expr()s the reply, which is
# eval (a reply can run code on the host). Ours reads polynomials with a bounded parser.

MAX_DEGREE = 1_000  # the hardest level multiplies to degree ~100
MAX_COEFF_BITS = 20_000
MAX_NESTING = 20

Poly = dict[tuple[int, ...], Fraction]
_POLY_TOKEN = re.compile(r"\s*(\d+(?:\.\d+)?|[A-Za-z_]\w*|\*\*|[-+*/()])")


class PolyError(ValueError):
    """The text is not a polynomial in the allowed variables, or it is too large to build."""


def _clean(p: Poly) -> Poly:
    return {m: c for m, c in p.items() if c != 0}


def _check(p: Poly) -> Poly:
    for m, c in p.items():
        if sum(m) > MAX_DEGREE:
            raise PolyError(f"the degree exceeds {MAX_DEGREE}")
        if c.numerator.bit_length() > MAX_COEFF_BITS or c.denominator.bit_length() > MAX_COEFF_BITS:
            raise PolyError("a coefficient is too large")
    return p


def _add(a: Poly, b: Poly, sign: int = 1) -> Poly:
    out = dict(a)
    for m, c in b.items():
        out[m] = out.get(m, Fraction(0)) + sign * c
    return _clean(out)


def _mul(a: Poly, b: Poly) -> Poly:
    if a and b and max(map(sum, a)) + max(map(sum, b)) > MAX_DEGREE:
        raise PolyError(f"the degree exceeds {MAX_DEGREE}")
    out: Poly = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            m = tuple(x + y for x, y in zip(ma, mb, strict=True))
            out[m] = out.get(m, Fraction(0)) + ca * cb
    return _check(_clean(out))


class _PolyParser:
    """expr := term (('+'|'-') term)* ; term := unary (('*'|'/') unary)* ;
    unary := ('+'|'-') unary | power ; power := atom ('**' INT)? ; atom := NUMBER | NAME | '(' expr ')'"""

    def __init__(self, text: str, variables: tuple[str, ...]):
        self.variables = variables
        self.tokens: list[str] = []
        pos = 0
        text = text.translate(MINUS).rstrip()
        while pos < len(text):
            m = _POLY_TOKEN.match(text, pos)
            if m is None:
                raise PolyError(f"unexpected character {text[pos:].strip()[:1]!r}")
            self.tokens.append(m.group(1))
            pos = m.end()
        self.pos = 0
        self.depth = 0

    def const(self, c: Fraction) -> Poly:
        return _clean({(0,) * len(self.variables): c})

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        tok = self.peek()
        if tok is None:
            raise PolyError("the expression ends too early")
        self.pos += 1
        return tok

    def parse(self) -> Poly:
        if not self.tokens:
            raise PolyError("empty expression")
        p = self.expr()
        if self.peek() is not None:
            raise PolyError(f"unexpected {self.peek()!r}")
        return p

    def expr(self) -> Poly:
        p = self.term()
        while self.peek() in ("+", "-"):
            sign = 1 if self.take() == "+" else -1
            p = _check(_add(p, self.term(), sign))
        return p

    def term(self) -> Poly:
        p = self.unary()
        while self.peek() in ("*", "/"):
            if self.take() == "*":
                p = _mul(p, self.unary())
                continue
            d = self.unary()
            if set(d) != {(0,) * len(self.variables)}:
                raise PolyError("division by something other than a non-zero number")
            p = _mul(p, self.const(1 / d[(0,) * len(self.variables)]))
        return p

    def unary(self) -> Poly:
        if self.peek() in ("+", "-"):
            sign = 1 if self.take() == "+" else -1
            self.depth += 1
            if self.depth > MAX_NESTING * 5:
                raise PolyError("too many signs in a row")
            p = self.unary()
            self.depth -= 1
            return {m: sign * c for m, c in p.items()}
        return self.power()

    def power(self) -> Poly:
        base = self.atom()
        if self.peek() != "**":
            return base
        self.take()
        exp = self.take()
        if not exp.isdigit() or int(exp) > MAX_DEGREE:
            raise PolyError(f"the exponent must be an integer from 0 to {MAX_DEGREE}")
        out = self.const(Fraction(1))
        for _ in range(int(exp)):
            out = _mul(out, base)
        return out

    def atom(self) -> Poly:
        tok = self.take()
        if tok[0].isdigit():
            return self.const(Fraction(Decimal(tok)))
        if tok == "(":
            self.depth += 1
            if self.depth > MAX_NESTING:
                raise PolyError(f"parentheses nested deeper than {MAX_NESTING}")
            p = self.expr()
            if self.take() != ")":
                raise PolyError("a '(' is never closed")
            self.depth -= 1
            return p
        if tok in self.variables:
            i = self.variables.index(tok)
            return {tuple(int(k == i) for k in range(len(self.variables))): Fraction(1)}
        raise PolyError(f"unexpected {tok!r} (the variables are {', '.join(self.variables)})")


def parse_poly(text: str, variables: tuple[str, ...]) -> Poly:
    """A polynomial with exact rational coefficients over ``variables``; raises :class:`PolyError`."""
    if len(text) > MAX_CHARS:
        raise PolyError(f"the expression is {len(text)} characters; the cap is {MAX_CHARS}")
    return _PolyParser(text, variables).parse()


def score_polynomial_multiplication(answer: str, entry: dict[str, Any]) -> Score:
    if (refusal := early(answer)) is not None:
        return refusal
    variables = tuple(entry["metadata"]["variables"])
    if "(" in answer or ")" in answer:
        return wrong("the product is not expanded: the answer still has parentheses", answer)
    try:
        got = parse_poly(answer, variables)
    except PolyError as exc:
        return format_error(f"not a polynomial in {', '.join(variables)}: {exc}", answer)
    if got == parse_poly(str(entry["answer"]), variables):
        return correct("the expanded polynomial is correct", answer)
    return wrong(f"the polynomial differs from {str(entry['answer'])[:80]}", answer)


def _derivative(p: Poly, i: int) -> Poly:
    out: Poly = {}
    for m, c in p.items():
        if m[i]:
            d = tuple(e - (k == i) for k, e in enumerate(m))
            out[d] = out.get(d, Fraction(0)) + c * m[i]
    return _clean(out)


def score_simple_integration(answer: str, entry: dict[str, Any]) -> Score:
    if (refusal := early(answer)) is not None:
        return refusal
    var = entry["metadata"]["variable"]
    variables = (var, "C") if var != "C" else (var,)
    try:
        got = parse_poly(answer, variables)
    except PolyError as exc:
        return format_error(f"not a polynomial in {var} (plus a constant C): {exc}", answer)
    if _derivative(got, 0) == parse_poly(entry["metadata"]["integrand"], variables):
        return correct("the derivative of the answer is the integrand", answer)
    return wrong("the derivative of the answer is not the integrand", answer)


# ---------------------------------------------------------------------------------------------
# propositional_logic: rg's recursive parser takes any word as a variable, so a reply naming 30
# fresh lower-case atoms makes it build a 2**30-row truth table in memory (and deep nesting raises
# RecursionError). Ours admits only the question's variables and caps nesting.

_LOGIC_TOKEN = re.compile(r"\s*([A-Z]|[¬∧∨→↔()])")
_BINARY = ("↔", "→", "∨", "∧")  # loosest first, as rg parses them
Formula = Any  # a variable name, ("¬", f) or (operator, left, right)


def _logic_tokens(text: str) -> list[str] | None:
    tokens, pos, text = [], 0, text.rstrip()
    while pos < len(text):
        m = _LOGIC_TOKEN.match(text, pos)
        if m is None:
            return None
        tokens.append(m.group(1))
        pos = m.end()
    return tokens


def _parse_logic(tokens: list[str], depth: int = 0) -> Formula:
    """rg's grammar: strip enclosing parentheses, split at the rightmost top-level operator of the
    loosest kind (↔, then →, ∨, ∧), else a leading ¬, else a single variable."""
    if depth > 40 or not tokens:
        raise ValueError("empty or too deeply nested")
    if tokens[0] == "(" and tokens[-1] == ")":
        level = 0
        for i, t in enumerate(tokens):
            level += (t == "(") - (t == ")")
            if level == 0 and i < len(tokens) - 1:
                break
        else:
            return _parse_logic(tokens[1:-1], depth + 1)
    for op in _BINARY:
        level = 0
        for i in range(len(tokens) - 1, -1, -1):
            level += (tokens[i] == ")") - (tokens[i] == "(")
            if level == 0 and tokens[i] == op:
                return (op, _parse_logic(tokens[:i], depth + 1), _parse_logic(tokens[i + 1 :], depth + 1))
    if tokens[0] == "¬":
        return ("¬", _parse_logic(tokens[1:], depth + 1))
    if len(tokens) == 1 and tokens[0].isalpha():
        return tokens[0]
    raise ValueError(f"cannot read {''.join(tokens)[:40]!r}")


def _truth(f: Formula, env: dict[str, bool]) -> bool:
    if isinstance(f, str):
        return env[f]
    if f[0] == "¬":
        return not _truth(f[1], env)
    a, b = _truth(f[1], env), _truth(f[2], env)
    return {"∧": a and b, "∨": a or b, "→": (not a) or b, "↔": a == b}[f[0]]


def score_propositional_logic(answer: str, entry: dict[str, Any]) -> Score:
    if (refusal := early(answer)) is not None:
        return refusal
    premise_tokens = [_logic_tokens(p) or [] for p in entry["metadata"]["premises"]]
    variables = sorted(set(entry["metadata"]["variables"]) | {t for ts in premise_tokens for t in ts if t.isalpha()})
    tokens = _logic_tokens(answer)
    if tokens is None:
        return format_error("use only the variables, ¬ ∧ ∨ → ↔ and parentheses", answer)
    unknown = {t for t in tokens if t.isalpha()} - set(variables)
    if unknown:
        return wrong(f"{sorted(unknown)} are not variables of the question", answer)
    try:
        conclusion = _parse_logic(tokens)
        premises = [_parse_logic(ts) for ts in premise_tokens]
    except ValueError as exc:
        return format_error(f"not a formula: {exc}", answer)
    rows = [
        dict(zip(variables, [(k >> i) & 1 == 1 for i in range(len(variables))], strict=True))
        for k in range(2 ** len(variables))
    ]
    if any(all(_truth(p, env) for p in premises) and not _truth(conclusion, env) for env in rows):
        return wrong("the conclusion does not follow from the premises", answer)
    if isinstance(conclusion, str) or all(_truth(conclusion, env) for env in rows):
        return wrong("a bare variable or a tautology is a trivial conclusion", answer)
    return correct("the conclusion follows from the premises", answer)


def reference_propositional_logic(entry: dict[str, Any]) -> str | None:
    return entry["metadata"].get("example_answer")


# ---------------------------------------------------------------------------------------------
# rubiks_cube: rg expands "U999999999" into a billion-move list before simulating (memory bomb)

_CUBE_MOVE = re.compile(r"([LRDUBF]w?|[XYZMES])('?)([1-3]?)")


def score_rubiks_cube(answer: str, entry: dict[str, Any]) -> Score:
    if (refusal := early(answer)) is not None:
        return refusal
    from magiccube import Cube  # reasoning-gym's own cube simulator; imported only when needed

    moves = []
    for token in answer.split():
        m = _CUBE_MOVE.fullmatch(token)
        if m is None:
            return format_error(f"{token[:20]!r} is not a move in Singmaster notation", answer)
        moves += [m.group(1) + m.group(2)] * int(m.group(3) or 1)
    meta = entry["metadata"]
    cube = Cube(meta["cube_size"])
    cube.rotate(meta["scramble_moves"])
    if moves:
        cube.rotate(" ".join(moves))
    if cube.is_done():
        return correct("the moves solve the cube", answer)
    return wrong("the cube is not solved after these moves", answer)


def reference_rubiks_cube(entry: dict[str, Any]) -> str | None:
    """rg's own solution; it has none (an empty string) for cubes larger than 3x3."""
    return entry["metadata"].get("example_correct_answer") or None


# ---------------------------------------------------------------------------------------------
# rush_hour: rg maps a move's letter to the car of that rank among the board's letters (wrong when
# the letters skip one), loops once per step written ("A+99999999999" never ends) and silently cuts
# moves that hit another car short. Ours moves the named car along free cells, one whole move at a time.

_RUSH_SIZE = 6
_RUSH_MOVE = re.compile(r"([A-Z])([+-])(\d{1,2})")


def _rush_pieces(config: str) -> tuple[dict[str, list[int]], set[int]]:
    pieces: dict[str, list[int]] = {}
    walls = set()
    for i, label in enumerate(config):
        if label == "x":
            walls.add(i)
        elif label not in "o.":
            pieces.setdefault(label, []).append(i)
    return pieces, walls


def _rush_slides(cells: Sequence[int], direction: int, occupied: set[int]) -> Iterator[tuple[int, ...]]:
    """The car's cells after each further cell it slides (``direction`` 1: right or down, -1: left
    or up), while the way is free and on the board."""
    stride = cells[1] - cells[0]
    delta, head, row = direction * stride, cells[-1] if direction > 0 else cells[0], cells[0] // _RUSH_SIZE
    for steps in range(1, _RUSH_SIZE):
        head += delta
        if not 0 <= head < _RUSH_SIZE**2 or head in occupied or (stride == 1 and head // _RUSH_SIZE != row):
            return
        yield tuple(c + steps * delta for c in cells)


def _rush_move(cells: list[int], steps: int, occupied: set[int]) -> list[int] | None:
    """The cells after sliding ``steps`` (negative: left/up), or None if the way is not free."""
    slid = list(islice(_rush_slides(cells, 1 if steps > 0 else -1, occupied), abs(steps)))
    return list(slid[-1]) if len(slid) == abs(steps) else None


def _rush_solved(pieces: dict[str, list[int]]) -> bool:
    return pieces["A"][-1] == 3 * _RUSH_SIZE - 1


def score_rush_hour(answer: str, entry: dict[str, Any]) -> Score:
    if (refusal := early(answer)) is not None:
        return refusal
    pieces, walls = _rush_pieces(entry["metadata"]["board_config"])
    tokens = answer.replace(",", " ").split()
    for token in tokens:
        m = _RUSH_MOVE.fullmatch(token)
        if m is None:
            return format_error(f"{token[:20]!r} is not a move like 'F+1'", answer)
        label, sign, steps = m.group(1), m.group(2), int(m.group(3))
        if label not in pieces:
            return wrong(f"there is no car {label}", answer)
        if steps == 0:
            return wrong(f"{token} moves nothing", answer)
        occupied = walls | {c for other, cells in pieces.items() if other != label for c in cells}
        new = _rush_move(pieces[label], steps if sign == "+" else -steps, occupied)
        if new is None:
            return wrong(f"{token} is blocked or leaves the board", answer)
        pieces[label] = new
    if _rush_solved(pieces):
        return correct("the red car reaches the exit", answer)
    return wrong("the red car does not reach the exit", answer)


def reference_rush_hour(entry: dict[str, Any]) -> str | None:
    """A shortest solution by breadth-first search over board states (None if none is found); each
    state keeps the move that reached it."""
    pieces, walls = _rush_pieces(entry["metadata"]["board_config"])
    labels = sorted(pieces)
    start = tuple(tuple(pieces[k]) for k in labels)
    came_from: dict[tuple[tuple[int, ...], ...], tuple[Any, str] | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        if _rush_solved(dict(zip(labels, state, strict=True))):
            moves = []
            while (step := came_from[state]) is not None:
                state, move = step
                moves.append(move)
            return " ".join(reversed(moves))
        taken = walls.union(*state)
        for k, label in enumerate(labels):
            occupied = taken.difference(state[k])
            for direction in (1, -1):
                for steps, cells in enumerate(_rush_slides(state[k], direction, occupied), start=1):
                    nxt = state[:k] + (cells,) + state[k + 1 :]
                    if nxt not in came_from:
                        came_from[nxt] = (state, f"{label}{'+' if direction > 0 else '-'}{steps}")
                        queue.append(nxt)
    return None


# ---------------------------------------------------------------------------------------------
# spiral_matrix and string_insertion: rg eval()s the reply (code execution) to look for a list


def score_spiral_matrix(answer: str, entry: dict[str, Any]) -> Score:
    if (refusal := early(answer)) is not None:
        return refusal
    items = answer.replace(",", " ").strip().strip("[]").split()
    if not all(re.fullmatch(r"-?\d{1,12}", t) for t in items):
        return format_error("not a list of integers separated by spaces", answer)
    if [int(t) for t in items] == [int(t) for t in str(entry["answer"]).split()]:
        return correct("the spiral order is correct", answer)
    return wrong("the spiral order is wrong", answer)


def score_string_insertion(answer: str, entry: dict[str, Any]) -> Score:
    if (refusal := early(answer)) is not None:
        return refusal
    if answer.strip() == str(entry["answer"]):
        return correct("the string is correct", answer)
    return wrong(f"expected {entry['answer']!r}", answer)


# ---------------------------------------------------------------------------------------------
# survo: rg compares with the one stored grid, but some puzzles have several solutions


def score_survo(answer: str, entry: dict[str, Any]) -> Score:
    if (refusal := early(answer)) is not None:
        return refusal
    meta = entry["metadata"]
    puzzle, n = meta["puzzle"], int(meta["board_size"])
    grid = []
    for line in answer.strip().splitlines():
        cells = line.split()
        if not all(re.fullmatch(r"-?\d{1,9}", c) for c in cells):
            return format_error("not a grid of integers", answer)
        grid.append([int(c) for c in cells])
    if len(grid) != n or any(len(row) != n for row in grid):
        return format_error(f"not a {n} x {n} grid", answer)
    placed = []
    for i in range(n):
        for j in range(n):
            if puzzle[i][j] != 0 and grid[i][j] != puzzle[i][j]:
                return wrong(f"cell ({i}, {j}) was given as {puzzle[i][j]}", answer)
            if puzzle[i][j] == 0:
                placed.append(grid[i][j])
    if Counter(placed) != Counter(int(x) for x in meta["candidate_numbers"]):
        return wrong(f"the empty cells must hold exactly the numbers {meta['candidate_numbers']}", answer)
    for k in range(n - 1):
        if sum(grid[k][: n - 1]) != grid[k][n - 1]:
            return wrong(f"row {k + 1} does not add up", answer)
        if sum(grid[i][k] for i in range(n - 1)) != grid[n - 1][k]:
            return wrong(f"column {k + 1} does not add up", answer)
    return correct("every row and column adds up", answer)


# ---------------------------------------------------------------------------------------------
# time_intervals: rg reads only a prefix ("5 hours" passes for "5 days", "00:34:28:99" for
# "00:34:28") and misreads fractions of a second ("01.5" as 1.005 s)

_CLOCK = re.compile(r"(\d{1,6}):([0-5]\d)(?::([0-5]\d)(?:\.(\d{1,6}))?)?")
_DAYS = re.compile(r"(-?\d{1,7})(?:\s*days?)?\.?")
_DAYS_CLOCK = re.compile(r"(-?\d{1,7})\s*days?,\s*(\d{1,2}):([0-5]\d)(?::([0-5]\d))?")


def _clock_ms(m: re.Match[str]) -> int:
    h, mi, s, frac = m.group(1), m.group(2), m.group(3) or "0", m.group(4) or ""
    return ((int(h) * 60 + int(mi)) * 60 + int(s)) * 1000 + int((frac + "000")[:3])


def _interval_ms(text: str, kind: str) -> int | None:
    text = text.strip()
    if kind == "date":
        m = _DAYS.fullmatch(text)
        return None if m is None else int(m.group(1)) * 86_400_000
    if kind.startswith("time"):
        m = _CLOCK.fullmatch(text)
        if m is None or (m.group(4) and len(m.group(4)) > 3):
            return None
        return _clock_ms(m)
    m = _DAYS_CLOCK.fullmatch(text)
    if m is None:
        return None
    days, h, mi, s = int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4) or 0)
    return days * 86_400_000 + ((h * 60 + mi) * 60 + s) * 1000


def score_time_intervals(answer: str, entry: dict[str, Any]) -> Score:
    if (refusal := early(answer)) is not None:
        return refusal
    kind = entry["metadata"]["task_type"]
    got = _interval_ms(answer, kind)
    if got is None:
        return format_error(f"not a duration in the format {entry['metadata']['expected_format']}", answer)
    if got == _interval_ms(str(entry["answer"]), kind):
        return correct("the duration is correct", answer)
    return wrong(f"expected {entry['answer']}", answer)


# ---------------------------------------------------------------------------------------------
# tsumego: rg accepts only the generator's move, but other moves often capture as many stones

_GO_MOVE = re.compile(r"([A-Z])(\d{1,2})")


def _go_group(board: list[list[str]], r: int, c: int) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    """The group of stones at (r, c) and its liberties."""
    n, color = len(board), board[r][c]
    group, liberties, todo = {(r, c)}, set(), [(r, c)]
    while todo:
        i, j = todo.pop()
        for a, b in ((i + 1, j), (i - 1, j), (i, j + 1), (i, j - 1)):
            if 0 <= a < n and 0 <= b < n:
                if board[a][b] == ".":
                    liberties.add((a, b))
                elif board[a][b] == color and (a, b) not in group:
                    group.add((a, b))
                    todo.append((a, b))
    return group, liberties


def _captures(board: list[list[str]], move: str) -> int | None:
    """How many white stones Black's ``move`` captures; None if it is off the board, on a stone or suicide."""
    m = _GO_MOVE.fullmatch(move)
    n = len(board)
    if m is None:
        return None
    r, c = n - int(m.group(2)), ord(m.group(1)) - ord("A")
    if not (0 <= r < n and 0 <= c < n) or board[r][c] != ".":
        return None
    after = [row[:] for row in board]
    after[r][c] = "X"
    captured: set[tuple[int, int]] = set()
    for a, b in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
        if 0 <= a < n and 0 <= b < n and after[a][b] == "O" and (a, b) not in captured:
            group, liberties = _go_group(after, a, b)
            if not liberties:
                captured |= group
    if not captured and not _go_group(after, r, c)[1]:
        return None
    return len(captured)


def score_tsumego(answer: str, entry: dict[str, Any]) -> Score:
    if (refusal := early(answer)) is not None:
        return refusal
    move, gold = answer.strip().upper(), str(entry["answer"]).strip().upper()
    if _GO_MOVE.fullmatch(move) is None:
        return format_error("not a single move like 'C4'", answer)
    if move == gold:
        return correct(f"{move} is the stored answer", answer)
    board = entry["metadata"]["board"]
    got, best = _captures(board, move), _captures(board, gold) or 0
    if got is None:
        return wrong(f"{move} is not a legal move for Black", answer)
    if got >= max(best, 1):
        return correct(f"{move} captures {got} white stone(s), as many as {gold}", answer)
    return wrong(f"{move} captures {got} stone(s); {gold} captures {best}", answer)


# ---------------------------------------------------------------------------------------------
# padded answers: rg pays the gold followed, preceded or interleaved by other text. Ours read the
# reply strictly (only moves, only the list's items, each once) and leave the puzzle's rules to rg
# or replay them exactly.

_SOKOBAN_MOVES = re.compile(r"[UDLR](?:[\s,]*[UDLR])*")
_LOCK_SEPARATORS = re.compile(r"→|->|,|\s")
_HANOI_MOVE = re.compile(r"Move\s+disk\s+(\d{1,3})\s+from\s+Peg\s+(\d{1,3})\s+to\s+Peg\s+(\d{1,3})", re.I)


def score_sokoban(answer: str, entry: dict[str, Any]) -> Score:
    if (refusal := early(answer)) is not None:
        return refusal
    moves = answer.strip()
    if not _SOKOBAN_MOVES.fullmatch(moves):
        return format_error("not a sequence of moves U, D, L, R", answer)
    if rg_pays("sokoban", re.sub(r"[\s,]", "", moves), entry):
        return correct("every box is on a goal", answer)
    return wrong("the moves leave a box off its goal", answer)


def score_spell_backward(answer: str, entry: dict[str, Any]) -> Score:
    if (refusal := early(answer)) is not None:
        return refusal
    if answer.strip().lower() == str(entry["answer"]).strip().lower():
        return correct("the word is reversed", answer)
    return wrong(f"expected {entry['answer']!r}", answer)


def score_quantum_lock(answer: str, entry: dict[str, Any]) -> Score:
    """Only the buttons A, B, C (separated by '→', '->', commas or spaces), replayed by rg: the stored
    sequence or another of the same, shortest, length that reaches the target."""
    if (refusal := early(answer)) is not None:
        return refusal
    presses = _LOCK_SEPARATORS.sub("", answer).upper()
    if not re.fullmatch(r"[ABC]+", presses):
        return format_error("not a sequence of buttons A, B, C separated by '→'", answer)
    if rg_pays("quantum_lock", " → ".join(presses), entry):
        return correct("the shortest sequence reaches the target", answer)
    return wrong(f"the sequence misses the target or is not the shortest ({entry['answer']})", answer)


def score_tower_of_hanoi(answer: str, entry: dict[str, Any]) -> Score:
    """Only lines 'Move disk X from Peg Y to Peg Z', each a legal move, leaving every disk on the target
    peg in no more moves than rg's solution (rg's rule)."""
    if (refusal := early(answer)) is not None:
        return refusal
    meta = entry["metadata"]
    disks = list(range(int(meta["num_disks"]), 0, -1))
    pegs: dict[int, list[int]] = {peg: [] for peg in range(1, int(meta["num_pegs"]) + 1)}
    pegs[meta["start_peg"]] = disks[:]
    lines = [line.strip() for line in answer.splitlines() if line.strip()]
    for n, line in enumerate(lines, 1):
        m = _HANOI_MOVE.fullmatch(line)
        if m is None:
            return format_error(f"line {n} {line[:50]!r} is not 'Move disk X from Peg Y to Peg Z'", answer)
        disk, source, target = (int(g) for g in m.groups())
        here, there = pegs.get(source), pegs.get(target)
        if here is None or there is None or source == target or here[-1:] != [disk] or (there and there[-1] < disk):
            return wrong(f"move {n} ({line}) is not a legal move", answer)
        there.append(here.pop())
    if pegs[meta["target_peg"]] != disks:
        return wrong(f"the disks do not all end on peg {meta['target_peg']}", answer)
    if len(lines) > int(meta["solution_length"]):
        return wrong(f"{len(lines)} moves; rg's solution takes {meta['solution_length']}", answer)
    return correct(f"the {len(lines)} moves solve the puzzle", answer)


def score_palindrome_partitioning(answer: str, entry: dict[str, Any]) -> Score:
    """A JSON list of partitions (lists of strings), in any order, each of them once: exactly the set of
    all palindrome partitions."""
    if (refusal := early(answer)) is not None:
        return refusal
    try:
        parts = json.loads(answer)
    except (json.JSONDecodeError, RecursionError):
        return format_error("the answer is not JSON", answer)
    if not isinstance(parts, list) or not all(
        isinstance(p, list) and all(isinstance(s, str) for s in p) for p in parts
    ):
        return format_error("the answer must be a JSON list of lists of strings", answer)
    mine = [tuple(p) for p in parts]
    if len(set(mine)) != len(mine):
        return wrong("a partition is listed more than once", answer)
    if set(mine) == {tuple(p) for p in entry["metadata"]["solution"]}:
        return correct("every palindrome partition, once each", answer)
    return wrong("the partitions differ from the full list", answer)


def score_word_sorting(answer: str, entry: dict[str, Any]) -> Score:
    """The comma-separated words, exactly the sorted list: no extra or missing word."""
    if (refusal := early(answer)) is not None:
        return refusal
    words, gold = [w.strip() for w in answer.strip().split(",")], entry["metadata"]["sorted_words"]
    if words == gold:
        return correct("the words are sorted", answer)
    if words[: len(gold)] == gold:
        return wrong(f"{len(words) - len(gold)} extra item(s) after the sorted words", answer)
    return wrong(f"expected {entry['answer']}", answer)


def _works(reason: str) -> Verdict:
    return Verdict("works", reason)


AUDIT: dict[str, Verdict] = {
    "n_queens": Verdict(
        "replaced",
        "rg eval()s the reply (code execution on the host) when it is not one of the stored boards; "
        "we parse the board and check the given queens are kept, the count is right and no two queens attack.",
        score_n_queens,
    ),
    "needle_haystack": _works(
        "rg compares the name case-insensitively with spaces removed, which accepts only the needle's name."
    ),
    "number_format": Verdict(
        "replaced",
        "rg accepts any number within 0.01 of the chosen candidate, so 741787256.33 passes for 741787256.323; "
        "we require the candidate's exact value (thousands commas, trailing zeros and e-notation allowed).",
        score_number_format,
    ),
    "number_sorting": Verdict(
        "replaced",
        "rg accepts a sorted list whose every number is off by up to 1, so ['53', '31', '15', '-48', '-80'] "
        "passes for 52.2, 30.0, 14.0, -49.0, -81.0; we require the exact values in the asked order.",
        score_number_sorting,
    ),
    "palindrome_generation": _works(
        "rg checks the reply is a palindrome using exactly the given letters, which accepts every valid answer "
        "and nothing else."
    ),
    "palindrome_partitioning": Verdict(
        "replaced",
        "rg compares the set of the reply's partitions with the full list, so the list with a partition repeated "
        "earns full marks; we require a JSON list of lists of strings holding every partition once, in any order.",
        score_palindrome_partitioning,
    ),
    "path_star": _works("rg compares the whitespace-normalised path exactly, and the path in a star graph is unique."),
    "polynomial_equations": Verdict(
        "replaced",
        "rg silently drops every comma-separated item that is not a float, so '-0.04, 0.0, x=3' "
        "(a third, bogus root) scores 1.0; we require every item to be a decimal and the multiset to equal the gold.",
        score_polynomial_equations,
    ),
    "polynomial_multiplication": Verdict(
        "replaced",
        "rg runs sympy.parse_expr on the reply, which is eval (a reply can run code on the host); "
        "we parse an expanded polynomial with a bounded parser and compare exact coefficients.",
        score_polynomial_multiplication,
    ),
    "pool_matrix": Verdict(
        "replaced",
        "rg accepts any matrix within 1% relative error (np.allclose rtol=1e-2), so 5.27 passes for 5.22, "
        "though the question asks for 2 decimals; we require each entry within 0.005 of the exact pooled value.",
        score_pool_matrix,
    ),
    "power_function": _works(
        "rg compares Decimal values rounded to the 3 significant figures the question asks for, "
        "and Decimal parsing of the reply is bounded."
    ),
    "prime_factorization": Verdict(
        "replaced",
        "rg raises ValueError out of score_answer on any factor that is not a bare integer ('2 x 2 x 3', '2^2 × 3'); "
        "we return a format error instead and otherwise compare the multiset of factors as rg does.",
        score_prime_factorization,
    ),
    "products": Verdict(
        "replaced",
        "rg deletes every comma before reading the number, so '0,49665000' (two numbers) earns full marks for "
        "49665000; we read one number (commas only between groups of three digits) and compare it exactly.",
        score_exact_number,
    ),
    "propositional_logic": Verdict(
        "replaced",
        "rg's parser takes any lower-case word as a fresh variable, so a reply with 30 of them makes it build "
        "a 2**30-row truth table in memory (and deep nesting raises RecursionError); "
        "we admit only the question's variables and keep rg's rule (valid, not a bare variable, not a tautology).",
        score_propositional_logic,
        reference_propositional_logic,
    ),
    "puzzle24": Verdict(
        "replaced",
        "rg runs sympy.parse_expr on the reply (code execution), truncates the value with int() and never checks "
        "which numbers are used, so '4*6*1*1' passes for any puzzle; we parse with the countdown parser and require "
        "the four given numbers, each once, to make exactly 24.",
        score_puzzle24,
    ),
    "quantum_lock": Verdict(
        "replaced",
        "rg keeps only the letters A-C of the reply, so the sequence followed by words without them "
        "('B → C → C, I'm sure it's right') earns full marks; we accept only buttons and separators (→, ->, "
        "commas, spaces) and replay them with rg's scorer, which pays the shortest sequences that reach the target.",
        score_quantum_lock,
    ),
    "rearc": _works("rg parses the grid with a fixed alphabet and compares it exactly with the output grid."),
    "rectangle_count": _works("rg compares int(reply) with the count exactly; its partial credit is below 1."),
    "rubiks_cube": Verdict(
        "replaced",
        "rg expands a move like 'U999999999' into a billion-item list before simulating (a memory bomb); "
        "we accept Singmaster moves with a repeat count of at most 3 and check the cube is solved.",
        score_rubiks_cube,
        reference_rubiks_cube,
    ),
    "rush_hour": Verdict(
        "replaced",
        "rg maps a move's letter to the car by its rank among the board's letters, so on boards whose letters "
        "skip one (about 80%) it moves the wrong car and rejects right answers, and 'A+99999999999' loops "
        "forever; we move the car the question names, reject blocked moves and cap a move at 99 steps.",
        score_rush_hour,
        reference_rush_hour,
    ),
    "self_reference": _works("rg compares the reply with the number of solutions exactly."),
    "sentence_reordering": _works("rg compares the reply with the sentence exactly; its per-word credit is below 1."),
    "shortest_path": _works(
        "rg accepts the stored path or any valid path of the same (shortest) length, and 'infeasible' only "
        "when there is no path."
    ),
    "simple_integration": Verdict(
        "replaced",
        "rg runs sympy.parse_expr and simplify on the reply (code execution, unbounded work); "
        "we parse a polynomial plus an optional constant C with a bounded parser and compare its derivative "
        "with the integrand exactly.",
        score_simple_integration,
    ),
    "sokoban": Verdict(
        "replaced",
        "rg replays every character of the reply as a key and ignores the ones that are not moves, so a solution "
        "padded with words ('UURDL or maybe not UURDL0') earns full marks; we accept only the letters U, D, L, R "
        "(spaces and commas between them) and replay them with rg's own simulator.",
        score_sokoban,
    ),
    "spell_backward": Verdict(
        "replaced",
        "rg's per-letter prefix credit adds up to a float just above 1.0 for some lengths, so the reversed word "
        "followed by anything ('atxetearp or maybe not') earns full marks; we require the reversed word exactly, "
        "case and surrounding space ignored.",
        score_spell_backward,
    ),
    "spiral_matrix": Verdict(
        "replaced",
        "rg eval()s the reply (code execution on the host) to look for a Python list; "
        "we compare the list of integers exactly.",
        score_spiral_matrix,
    ),
    "string_insertion": Verdict(
        "replaced",
        "rg eval()s the reply (code execution on the host) to look for a list of characters; "
        "we compare the string exactly.",
        score_string_insertion,
    ),
    "sudoku": _works(
        "rg pays full marks only for the exact grid, and the generator keeps the solution unique; "
        "other credit is below 1."
    ),
    "survo": Verdict(
        "replaced",
        "rg accepts only the stored grid, but about 1% of puzzles have another filling with the given numbers "
        "that satisfies every sum; we check the givens, the multiset of placed numbers and every row and column sum.",
        score_survo,
    ),
    "time_intervals": Verdict(
        "replaced",
        "rg reads only a prefix of the reply, so '5 hours' passes for '5 days' and '00:34:28:99' for '00:34:28', "
        "and it reads '00:00:01.5' as 1.005 s; we parse the whole duration in the asked format.",
        score_time_intervals,
    ),
    "tower_of_hanoi": Verdict(
        "replaced",
        "rg finds a move anywhere in a line and checks only that the line has nine words, so text glued to the "
        "first word ('Moves:Move disk 1 from Peg 1 to Peg 3') earns full marks; we require every line to be "
        "exactly 'Move disk X from Peg Y to Peg Z', replay the moves under the rules and keep rg's limit of no "
        "more moves than its own solution.",
        score_tower_of_hanoi,
    ),
    "tsumego": Verdict(
        "replaced",
        "rg accepts only the generator's move, but in about a fifth of the puzzles another legal move captures "
        "as many stones; we also accept any legal move capturing at least as many (and at least one) stones.",
        score_tsumego,
    ),
    "word_ladder": _works(
        "rg checks the ends, one-letter steps and that every word is in its dictionary (unknown words halve the score)."
    ),
    "word_sorting": Verdict(
        "replaced",
        "rg's positional credit (a share for each word in its place) sums to 1 when the sorted words are "
        "followed by more ('…, zebra, apple'), so extra items earn full marks; we require exactly the sorted "
        "words, comma-separated.",
        score_word_sorting,
    ),
    "zebra_puzzles": _works("rg compares the answer with the unique solution case-insensitively."),
}
