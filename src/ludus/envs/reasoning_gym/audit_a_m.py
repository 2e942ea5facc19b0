"""Audit verdicts, replacement scorers and reference answers for reasoning-gym datasets ab … mini_sudoku."""

from __future__ import annotations

import ast
import functools
import json
import re
from collections import Counter, deque
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal, localcontext
from fractions import Fraction
from typing import Any

from ludus.core.types import Score, Status
from ludus.envs.procedural import ExpressionError, expression_value, numbers_in, parse_expression, parse_int
from ludus.envs.reasoning_gym.grading import (
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

_NUM = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)"  # a plain decimal: no exponent, so its size is bounded by its length


def _rounds_to(value: Fraction | Decimal, places: int) -> set[Decimal]:
    """``value`` rounded to ``places`` decimals, half-up and half-even (golds use either)."""
    with localcontext() as ctx:  # rg's decimal_arithmetic lowers the global precision to 12 digits
        ctx.prec = 80
        if isinstance(value, Fraction):
            value = Decimal(value.numerator) / Decimal(value.denominator)
        quantum = Decimal(1).scaleb(-places)
        return {value.quantize(quantum, rounding=r) for r in (ROUND_HALF_UP, ROUND_HALF_EVEN)}


# ---------------------------------------------------------------------------------------------
# advanced_geometry

_DEGREE = r"\s*(?:°|\^\s*\\circ|\^\s*\{\s*\\circ\s*\}|degrees?)?"


def score_advanced_geometry(answer: str, entry: dict[str, Any]) -> Score:
    """Angle: the number (° optional) rounds to the 2-decimal gold; orthocenter: exactly one pair
    ``(x, y)`` equal to the exact point or to it rounded to 3 decimals; incircle radius: the gold's value,
    or a longer decimal that rounds to it."""
    if (refusal := early(answer)) is not None:
        return refusal
    meta, text = entry["metadata"], answer.strip().translate(MINUS)
    task = meta["task_type"]
    if task == "angle_measure":
        m = re.fullmatch(rf"({_NUM}){_DEGREE}", text)
        if m is None:
            return format_error(f"{text[:60]!r} is not one angle in degrees", answer)
        gold = Decimal(entry["answer"].replace("°", "").strip())
        places = max(2, -gold.as_tuple().exponent)  # rg rounds angles to 2 decimals; "90.0°" means 90.00
        if gold in _rounds_to(Decimal(m.group(1)), places):
            return correct(f"{m.group(1)}° rounds to {gold}°", answer)
        return wrong(f"expected {gold}°, got {m.group(1)}°", answer)
    if task == "orthocenter":
        m = re.fullmatch(rf"\(?\s*({_NUM})\s*,\s*({_NUM})\s*\)?", text)
        if m is None:
            return format_error(f"{text[:60]!r} is not one point (x, y)", answer)
        for value, exact in zip((m.group(1), m.group(2)), meta["ortho"], strict=True):
            gold = Fraction(str(exact))
            mine = Fraction(value)
            if mine != gold and not (_rounds_to(mine, 3) & _rounds_to(gold, 3)):
                return wrong(f"expected {entry['answer']}, got ({m.group(1)}, {m.group(2)})", answer)
        return correct("the orthocenter is correct", answer)
    if task == "incircle_radius":
        m = re.fullmatch(rf"(?:r\s*=\s*)?({_NUM})", text)
        if m is None:
            return format_error(f"{text[:60]!r} is not one radius", answer)
        gold, mine = Decimal(entry["answer"]), Decimal(m.group(1))
        places = max(3, -gold.as_tuple().exponent)  # the question asks for 3 decimals
        if mine == gold or (-mine.as_tuple().exponent > places and gold in _rounds_to(mine, places)):
            return correct(f"the radius {mine} is correct", answer)
        return wrong(f"expected {gold}, got {mine}", answer)
    return Score.zero(Status.GOLD_ERROR, f"unknown task type {task!r}")


# ---------------------------------------------------------------------------------------------
# binary_matrix (rg runs eval() on the answer)


def _int_grid(text: str) -> list[list[int]] | None:
    """Rows of integers, one per line; or a JSON array of arrays of integers."""
    if text.strip().startswith("["):
        try:
            grid = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            return None
        ok = isinstance(grid, list) and all(isinstance(r, list) and all(type(c) is int for c in r) for r in grid)
        return grid if ok and grid else None
    rows = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not rows or not all(re.fullmatch(r"\d+(?:[ \t]+\d+)*", row) for row in rows):
        return None
    return [[int(x) for x in row.split()] for row in rows]


def score_binary_matrix(answer: str, entry: dict[str, Any]) -> Score:
    """The distance matrix as rows of space-separated integers (extra spaces allowed) or as a JSON array of
    arrays, equal to the gold."""
    if (refusal := early(answer)) is not None:
        return refusal
    grid = _int_grid(answer)
    if grid is None:
        return format_error("the answer is not a matrix of integers, one row per line", answer)
    if grid == _int_grid(entry["answer"]):
        return correct("the matrix is correct", answer)
    return wrong("the matrix differs from the gold", answer)


# ---------------------------------------------------------------------------------------------
# boxnet


def _square(x: str, y: str) -> str:
    return f"{float(x)}_{float(y)}"


_AGENT = re.compile(r"\s*Agent\[\s*(\d+\.5)\s*,\s*(\d+\.5)\s*\]\s*")
_MOVE = re.compile(r"\s*move\(\s*(box_\w+)\s*,\s*(?:(target_\w+)|square\[\s*(\d+\.5)\s*,\s*(\d+\.5)\s*\])\s*\)\s*")


def score_boxnet(answer: str, entry: dict[str, Any]) -> Score:
    """A JSON list of steps; each step maps agents to one action each, all checked against the state at
    the start of the step (a box moves at most one square per step, an agent acts only on its own square);
    any impossible action is wrong; full marks only when every box has reached its target."""
    if (refusal := early(answer)) is not None:
        return refusal
    try:
        plan = json.loads(answer)
    except (json.JSONDecodeError, RecursionError):
        return format_error("the answer is not JSON", answer)
    if not isinstance(plan, list) or not all(isinstance(step, dict) for step in plan):
        return format_error("the answer must be a JSON list of action dictionaries", answer)
    state = {k: list(v) for k, v in entry["metadata"]["initial_state"].items()}
    for n, step in enumerate(plan, 1):
        moved: set[str] = set()
        arrivals: list[tuple[str, str]] = []
        for agent, action in step.items():
            a, m = _AGENT.fullmatch(agent), _MOVE.fullmatch(action) if isinstance(action, str) else None
            if a is None or m is None:
                return format_error(
                    f"step {n}: {agent!r}: {str(action)[:60]!r} is not 'Agent[x, y]': 'move(...)'", answer
                )
            here = _square(*a.groups())
            box, target = m.group(1), m.group(2)
            if here not in state:
                return wrong(f"step {n}: there is no agent at {agent}", answer)
            if box in moved or box not in state[here]:
                return wrong(f"step {n}: {agent} cannot reach {box}", answer)
            moved.add(box)
            if target is not None:
                if target not in state[here] or box[4:] != target[7:]:
                    return wrong(f"step {n}: {agent} has no {target} matching {box}", answer)
                state[here].remove(box)
                state[here].remove(target)
                continue
            there = _square(m.group(3), m.group(4))
            dx, dy = (abs(float(p) - float(q)) for p, q in zip(a.groups(), m.groups()[2:], strict=True))
            if there not in state or dx + dy != 1:
                return wrong(f"step {n}: {agent} cannot move {box} to {there}", answer)
            state[here].remove(box)
            arrivals.append((there, box))
        for there, box in arrivals:
            state[there].append(box)
    left = sorted(item for items in state.values() for item in items if item.startswith("box_"))
    if left:
        return wrong(f"boxes not on their targets: {left}", answer)
    return correct("every box reached its target", answer)


def reference_boxnet(entry: dict[str, Any]) -> str | None:
    """One box at a time along a shortest path to its target, one action per step."""
    state = {k: list(v) for k, v in entry["metadata"]["initial_state"].items()}
    coords = {k: tuple(float(p) for p in k.split("_")) for k in state}
    plan: list[dict[str, str]] = []

    def agent(square: str) -> str:
        x, y = coords[square]
        return f"Agent[{x}, {y}]"

    for start, items in list(state.items()):
        for box in [i for i in items if i.startswith("box_")]:
            target = "target_" + box[4:]
            goal = next((k for k, v in state.items() if target in v), None)
            if goal is None:
                return None
            prev: dict[str, str | None] = {start: None}
            queue = deque([start])
            while queue:
                cur = queue.popleft()
                for nxt, c in coords.items():
                    d = abs(c[0] - coords[cur][0]) + abs(c[1] - coords[cur][1])
                    if d == 1 and nxt not in prev:
                        prev[nxt] = cur
                        queue.append(nxt)
            if goal not in prev:
                return None
            path, node = [], goal
            while node is not None:
                path.append(node)
                node = prev[node]
            path.reverse()
            for here, there in zip(path, path[1:], strict=False):
                x, y = coords[there]
                plan.append({agent(here): f"move({box}, square[{x}, {y}])"})
            plan.append({agent(goal): f"move({box}, {target})"})
            state[goal].remove(target)
    return json.dumps(plan)


# ---------------------------------------------------------------------------------------------
# codeio


def _same_json(a: Any, b: Any) -> bool:
    """Equality that keeps JSON's types apart: ``true`` is not ``1``, a string is not a number."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b or (a != a and b != b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def score_codeio(answer: str, entry: dict[str, Any]) -> Score:
    """The predicted output as one JSON value equal to the gold's, any whitespace or key order,
    with JSON types kept apart (``true`` ≠ ``1``)."""
    if (refusal := early(answer)) is not None:
        return refusal
    gold_text, text = entry["answer"].strip(), answer.strip()
    if text == gold_text:
        return correct("the output is exactly the gold", answer)
    try:
        gold = json.loads(gold_text)
    except json.JSONDecodeError:
        return wrong("the output differs from the gold (which is not JSON)", answer)
    try:
        mine = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return format_error("the answer is not one JSON value", answer)
    if _same_json(mine, gold):
        return correct("the output equals the gold", answer)
    return wrong("the output differs from the gold", answer)


# ---------------------------------------------------------------------------------------------
# coin_flip


_SCI = re.compile(r"[+]?(\d+)(?:\.(\d*))?(?:[eE]([+-]?\d{1,3}))?")


def score_coin_flip(answer: str, entry: dict[str, Any]) -> Score:
    """The exact probability as a fraction ``a/b`` or a decimal, or a decimal (``e`` notation allowed) with
    at least 4 significant digits that is the probability correctly rounded to its last digit."""
    if (refusal := early(answer)) is not None:
        return refusal
    rational = entry["metadata"]["rational"]
    gold = Fraction(rational["numerator"], rational["denominator"])
    text = answer.strip()
    if m := re.fullmatch(r"(\d{1,60})\s*/\s*(\d{1,60})", text):
        if int(m.group(2)) != 0 and Fraction(int(m.group(1)), int(m.group(2))) == gold:
            return correct("the probability is exact", answer)
        return wrong(f"expected {gold}, got {text}", answer)
    m = _SCI.fullmatch(text)
    if m is None or len(text) > 80:
        return format_error(f"{text[:60]!r} is not a fraction or a decimal", answer)
    mine = Decimal(text)
    if Fraction(mine) == gold:
        return correct("the probability is exact", answer)
    digits = (m.group(1) + (m.group(2) or "")).lstrip("0")
    places = len(m.group(2) or "") - int(m.group(3) or 0)
    if len(digits) >= 4 and 0 <= places <= 25 and mine in _rounds_to(gold, places):
        return correct(f"{text} is the probability correctly rounded", answer)
    return wrong(f"expected {gold} = {float(gold):.10g}, got {text}", answer)


# ---------------------------------------------------------------------------------------------
# complex_arithmetic (rg: distance NaN gives min(1.0, nan) == 1.0, so "nan" earns full marks)

_UNSIGNED = r"(?:\d+(?:\.\d*)?|\.\d+)"


def _parse_complex(text: str) -> tuple[Fraction, Fraction] | None:
    if m := re.fullmatch(rf"([+-]?{_UNSIGNED})", text):
        return Fraction(m.group(1)), Fraction(0)
    if m := re.fullmatch(rf"([+-]?)({_UNSIGNED})?\*?[ij]", text):
        imag = Fraction(m.group(2)) if m.group(2) else Fraction(1)
        return Fraction(0), -imag if m.group(1) == "-" else imag
    if m := re.fullmatch(rf"([+-]?{_UNSIGNED})([+-])({_UNSIGNED})?\*?[ij]", text):
        imag = Fraction(m.group(3)) if m.group(3) else Fraction(1)
        return Fraction(m.group(1)), -imag if m.group(2) == "-" else imag
    return None


def score_complex_arithmetic(answer: str, entry: dict[str, Any]) -> Score:
    """``a + bi`` (or ``a``, ``bi``, ``i``; ``j`` allowed) with exactly the gold's real and imaginary parts."""
    if (refusal := early(answer)) is not None:
        return refusal
    text = re.sub(r"\s*([-+*()ij])\s*", r"\1", answer.translate(MINUS).strip().lower())  # "0 5 - 3i": two numbers
    while len(text) > 1 and text[0] == "(" and text[-1] == ")":
        text = text[1:-1]
    parsed = _parse_complex(text) if len(text) <= 200 else None
    if parsed is None:
        return format_error(f"{answer.strip()[:60]!r} is not a complex number a + bi", answer)
    real, imag = parsed
    gold_re, gold_im = entry["metadata"]["result"]
    if (real, imag) == (gold_re, gold_im):
        return correct("the complex number is correct", answer)
    return wrong(f"expected {entry['answer']}, got {answer.strip()[:60]}", answer)


# ---------------------------------------------------------------------------------------------
# countdown (rg runs sympy.parse_expr, i.e. eval, on the answer)


_LEADINGMINUS = re.compile(r"(^|\()\s*-")


def score_countdown_all(answer: str, entry: dict[str, Any]) -> Score:
    """An expression of + - * / and parentheses (a minus sign may open the expression or a bracket),
    parsed by our own parser, that uses every given number exactly once, as the question demands, and
    equals the target exactly; ``expr = target`` is accepted."""
    if (refusal := early(answer)) is not None:
        return refusal
    meta = entry["metadata"]
    numbers, target = list(meta["numbers"]), int(meta["target"])
    sides = answer.split("=")
    if len(sides) > 2 or (len(sides) == 2 and parse_int(sides[1]) != target):
        return wrong("the right side of '=' is not the target", answer)
    text, inserted = _LEADINGMINUS.subn(r"\g<1>0-", sides[0].strip())  # -a ... reads as 0-a ...
    try:
        tree = parse_expression(text)
    except ExpressionError as exc:
        return format_error(f"not a valid expression: {exc}", answer)
    used = Counter(numbers_in(tree))
    used[0] -= inserted
    if +used != Counter(numbers):
        return wrong(f"the expression uses {sorted((+used).elements())}, not each of {sorted(numbers)} once", answer)
    try:
        value = expression_value(tree)
    except ZeroDivisionError:
        return wrong("the expression divides by zero", answer)
    if value == target:
        return correct(f"the expression equals {target}", answer)
    return wrong(f"the expression equals {value}, the target is {target}", answer)


# ---------------------------------------------------------------------------------------------
# decimal_arithmetic (rg's tolerance is 10^-3 although the question asks for 12 significant digits)


def _exact_value(node: ast.AST) -> Fraction:
    """The exact value of the question's (trusted) expression: numbers, + - * / and brackets only."""
    if isinstance(node, ast.Expression):
        return _exact_value(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(str(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _exact_value(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult | ast.Div):
        a, b = _exact_value(node.left), _exact_value(node.right)
        ops = {ast.Add: a.__add__, ast.Sub: a.__sub__, ast.Mult: a.__mul__, ast.Div: a.__truediv__}
        return ops[type(node.op)](b)
    raise ValueError(f"unexpected {type(node).__name__} in the question's expression")


def _to_significant(value: Fraction, digits: int) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = 80
        exact = Decimal(value.numerator) / Decimal(value.denominator)
        ctx.prec, ctx.rounding = digits, ROUND_HALF_UP
        return +exact


def score_decimal_arithmetic(answer: str, entry: dict[str, Any]) -> Score:
    """A plain decimal equal to the expression's value rounded half-up to 12 significant digits, or to
    rg's gold (the same computed with 12-digit intermediate rounding, which can differ in the last digit)."""
    if (refusal := early(answer)) is not None:
        return refusal
    mine = decimal_number(answer, grouping=True)
    if mine is None:
        return format_error(f"{answer.strip()[:60]!r} is not a decimal number", answer)
    accepted = {Decimal(entry["answer"])}
    expression = entry["question"].strip().splitlines()[-1].removesuffix("= ?").strip()
    try:
        accepted.add(_to_significant(_exact_value(ast.parse(expression, mode="eval")), 12))
    except (SyntaxError, ValueError, ZeroDivisionError):
        pass  # only rg's gold then
    if mine in accepted:
        return correct("the value is correct to 12 significant digits", answer)
    return wrong(f"expected {entry['answer']}, got {mine}", answer)


# ---------------------------------------------------------------------------------------------
# figlet_font and letter_jumble (rg's partial credit reaches 1.0 for answers that are not the gold)


def score_figlet_font(answer: str, entry: dict[str, Any]) -> Score:
    """The word, case and spaces ignored, exactly."""
    if (refusal := early(answer)) is not None:
        return refusal
    mine = answer.replace(" ", "").strip().lower()
    if mine == entry["answer"].strip().lower():
        return correct("the word is correct", answer)
    return wrong(f"expected {entry['answer']}, got {answer.strip()[:60]}", answer)


def score_letter_jumble(answer: str, entry: dict[str, Any]) -> Score:
    """The unscrambled sentence, case and runs of spaces ignored, exactly: no missing or extra words."""
    if (refusal := early(answer)) is not None:
        return refusal
    mine, gold = answer.lower().split(), entry["answer"].lower().split()
    if mine == gold:
        return correct("the sentence is correct", answer)
    if mine[: len(gold)] == gold:
        return wrong(f"{len(mine) - len(gold)} extra word(s) after the sentence", answer)
    return wrong("the sentence differs from the gold", answer)


# ---------------------------------------------------------------------------------------------
# fraction_simplification (rg's LaTeX branch uses re.match, so any text after \frac{a}{b} is ignored)


def score_fraction_simplification(answer: str, entry: dict[str, Any]) -> Score:
    """Exactly one fraction ``a/b`` or ``\\frac{a}{b}`` (``$`` allowed) in lowest terms equal to the gold."""
    if (refusal := early(answer)) is not None:
        return refusal
    text = answer.strip().strip("$").strip()
    m = re.fullmatch(r"\\d?frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}|(\d+)\s*/\s*(\d+)", text)
    if m is None:
        return format_error(f"{text[:60]!r} is not one fraction a/b", answer)
    num, den = (int(g) for g in (m.groups()[:2] if m.group(1) else m.groups()[2:]))
    meta = entry["metadata"]
    if (num, den) == (meta["simplified_numerator"], meta["simplified_denominator"]):
        return correct("the simplified fraction is correct", answer)
    return wrong(f"expected {entry['answer']}, got {num}/{den}", answer)


# ---------------------------------------------------------------------------------------------
# game_of_life (rg ignores extra rows and columns and counts true as 1)


def score_game_of_life(answer: str, entry: dict[str, Any]) -> Score:
    """A JSON array of arrays of 0/1 integers of exactly the gold's shape and values."""
    if (refusal := early(answer)) is not None:
        return refusal
    try:
        grid = json.loads(answer)
    except (json.JSONDecodeError, RecursionError):
        return format_error("the answer is not JSON", answer)
    ok = isinstance(grid, list) and all(isinstance(row, list) and all(type(c) is int for c in row) for row in grid)
    if not ok:
        return format_error("the answer must be a JSON array of arrays of integers", answer)
    if grid == json.loads(entry["answer"]):
        return correct("the board is correct", answer)
    return wrong("the board differs from the gold", answer)


# ---------------------------------------------------------------------------------------------
# game_of_life_halting (rg compares bool(answer) with bool("False"): any non-empty answer passes)


def score_game_of_life_halting(answer: str, entry: dict[str, Any]) -> Score:
    """``True`` or ``False`` (any case, quotes or a final period allowed) equal to the gold."""
    if (refusal := early(answer)) is not None:
        return refusal
    word = answer.strip().strip("'\"`*").rstrip(".").strip().lower()
    if word not in ("true", "false"):
        return format_error(f"{answer.strip()[:60]!r} is not True or False", answer)
    if word == entry["answer"].strip().lower():
        return correct(f"{word} is correct", answer)
    return wrong(f"expected {entry['answer']}, got {word}", answer)


# ---------------------------------------------------------------------------------------------
# gsm_symbolic (rg takes the first number anywhere in the answer and drops a leading minus)


def score_gsm_symbolic(answer: str, entry: dict[str, Any]) -> Score:
    """One plain number (a currency sign and thousands commas allowed), numerically equal to the gold."""
    if (refusal := early(answer)) is not None:
        return refusal
    text = answer.strip().rstrip(".").strip()
    text = re.sub(r"^([+-]?)\s*[$€£]\s*", r"\1", text.translate(MINUS))
    mine = decimal_number(text, grouping=True)
    if mine is None:
        return format_error(f"{answer.strip()[:60]!r} is not one number", answer)
    if mine == Decimal(entry["answer"]):
        return correct(f"{mine} is correct", answer)
    return wrong(f"expected {entry['answer']}, got {mine}", answer)


# ---------------------------------------------------------------------------------------------
# intermediate_integration (rg runs sympy.parse_expr on the answer)


def score_intermediate_integration(answer: str, entry: dict[str, Any]) -> Score:
    """A closed-form antiderivative whose derivative is the integrand (``verify_antiderivative``), on one line:
    our parser reads a line break as a space, so the gold with a second value under it ('... + C' then '43')
    would be the product '43*C', still an antiderivative."""
    from ludus.envs.math import verify_antiderivative  # noqa: PLC0415 - sympy: not for ``ludus envs``

    if (refusal := early(answer)) is not None:
        return refusal
    if "\n" in answer.strip():
        return format_error("the antiderivative is split over several lines; write one expression", answer)
    meta = entry["metadata"]
    return verify_antiderivative(answer.strip(), meta["integrand"], meta["variable"])


def reference_intermediate_integration(entry: dict[str, Any]) -> str | None:
    """rg's gold, unless sympy could not integrate and left ``Integral(...)`` (then no known answer)."""
    return None if "Integral(" in entry["answer"] else entry["answer"]


# ---------------------------------------------------------------------------------------------
# knights_knaves (rg keeps (name, role) pairs from any text, so padding and repeats pass)

_KK_GLUE = frozenset({"is", "a", "an", "and"})


@functools.cache
def _kk_roles() -> frozenset[str]:
    from reasoning_gym.logic.knights_knaves import VALID_ROLES  # noqa: PLC0415 - not for ``ludus envs``

    return frozenset(VALID_ROLES)


def _kk_pairs(text: str) -> list[tuple[str, str]] | None:
    """Each ``name is a role`` of ``text`` in order, or None if a word is neither a name, a role nor glue."""
    words = re.sub(r"[.,;()]", " ", text.lower()).split()
    pairs, name = [], None
    for word in words:
        if word in _KK_GLUE:
            continue
        if word in _kk_roles():
            if name is None:
                return None
            pairs.append((name, word))
            name = None
        elif name is None:
            name = word
        else:
            return None  # two names in a row: words that are not part of a statement
    return None if name is not None else pairs


def score_knights_knaves(answer: str, entry: dict[str, Any]) -> Score:
    if (refusal := early(answer)) is not None:
        return refusal
    gold = _kk_pairs(entry["answer"])
    mine = _kk_pairs(answer)
    if gold is None:
        return Score.zero(Status.INFRA_ERROR, "the gold answer does not read as statements")
    if mine is None:
        return format_error("not only statements like 'Zoey is a knight'", answer)
    names = [name for name, _ in mine]
    if len(set(names)) != len(names):
        return format_error("a person's role is stated more than once", answer)
    if set(mine) == set(gold):
        return correct("every role is right", answer)
    return wrong(f"expected {sorted(gold)}, got {sorted(mine)}", answer)


# ---------------------------------------------------------------------------------------------
# knight_swap (rg pays only a solution no longer than its own, though the question asks for any)


def score_knight_swap(answer: str, entry: dict[str, Any]) -> Score:
    """``No`` for an impossible puzzle; otherwise a JSON list of ``"color,from,to"`` moves, alternating
    from the starting colour, each a knight move to an empty square, ending with the colours swapped."""
    if (refusal := early(answer)) is not None:
        return refusal
    meta, text = entry["metadata"], answer.strip()
    if not meta["is_possible"]:
        if text.strip(".").lower() == "no":
            return correct("the puzzle is impossible", answer)
        return wrong("the puzzle is impossible; the answer is No", answer)
    if text.strip(".").lower() == "no":
        return wrong("the puzzle is possible", answer)
    try:
        moves = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return format_error("the answer is not a JSON list of moves", answer)
    if not isinstance(moves, list) or not all(isinstance(m, str) for m in moves):
        return format_error("the answer must be a JSON list of 'color,from,to' strings", answer)
    board, pieces, turn = meta["board"], dict(meta["pieces"]), meta["start_turn"]
    for n, move in enumerate(moves, 1):
        parts = [p.strip() for p in move.split(",")]
        if len(parts) != 3:
            return format_error(f"move {n} {move[:30]!r} is not 'color,from,to'", answer)
        color, start, end = parts
        if color != turn:
            return wrong(f"move {n}: it is {turn}'s turn", answer)
        if pieces.get(start) != color or end not in board.get(start, ()) or pieces.get(end) is not None:
            return wrong(f"move {n} ({move}) is not a legal knight move", answer)
        pieces[end], pieces[start] = color, None
        turn = "B" if turn == "w" else "w"
    start_pieces = meta["pieces"]
    swapped = all(pieces.get(sq) == {"w": "B", "B": "w"}[c] for sq, c in start_pieces.items() if c)
    if swapped:
        return correct(f"the {len(moves)} moves swap the knights", answer)
    return wrong("the knights are not swapped at the end", answer)


# ---------------------------------------------------------------------------------------------
# cryptarithm, graph_color and kakurasu: rg pays the answer with repeats, extra entries or words around it


_LETTER_DIGIT = re.compile(r"\s*([A-Z])\s*=\s*(\d)\s*")


def score_cryptarithm(answer: str, entry: dict[str, Any]) -> Score:
    """``A=1,B=2``: each letter once, then rg's rules (exactly the puzzle's letters, distinct digits, no
    leading zero, a true sum)."""
    if (refusal := early(answer)) is not None:
        return refusal
    pairs = [_LETTER_DIGIT.fullmatch(p) for p in answer.strip().split(",")]
    if not all(pairs):
        return format_error("not a mapping like 'A=1,B=2'", answer)
    letters = [m.group(1) for m in pairs if m is not None]
    if len(set(letters)) != len(letters):
        return format_error("a letter is given a digit more than once", answer)
    if rg_pays("cryptarithm", ",".join(f"{m.group(1)}={m.group(2)}" for m in pairs if m is not None), entry):
        return correct("the mapping makes the sum true", answer)
    return wrong("the mapping does not solve the puzzle", answer)


def _object_without_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object hook: a repeated key is an error, where json.loads would keep its last value."""
    if len({key for key, _ in pairs}) != len(pairs):
        raise ValueError("a key is repeated")
    return dict(pairs)


def score_graph_color(answer: str, entry: dict[str, Any]) -> Score:
    """A JSON object whose keys are exactly the vertices, each once, with integer colours from the allowed
    ones and no edge between two vertices of one colour."""
    if (refusal := early(answer)) is not None:
        return refusal
    puzzle = entry["metadata"]["puzzle"]
    try:
        coloring = json.loads(answer, object_pairs_hook=_object_without_repeats)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError, as is a repeated key
        return format_error("not a JSON object with each vertex once", answer)
    if not isinstance(coloring, dict) or set(coloring) != {str(v) for v in puzzle["vertices"]}:
        return format_error("the keys must be exactly the vertices", answer)
    allowed = set(puzzle["color_options"])
    if any(type(c) is not int or c not in allowed for c in coloring.values()):
        return wrong(f"a colour is not one of {sorted(allowed)}", answer)
    for u, v in puzzle["edges"]:
        if coloring[str(u)] == coloring[str(v)]:
            return wrong(f"vertices {u} and {v} are joined and share a colour", answer)
    return correct("no edge joins two vertices of one colour", answer)


def score_kakurasu(answer: str, entry: dict[str, Any]) -> Score:
    """Rows of 0s and 1s (spaces between; or a JSON array of arrays), then rg's row and column sums."""
    if (refusal := early(answer)) is not None:
        return refusal
    grid = _int_grid(answer)
    if grid is None or any(c not in (0, 1) for row in grid for c in row):
        return format_error("not a grid of 0s and 1s, one row per line", answer)
    if rg_pays("kakurasu", "\n".join(" ".join(map(str, row)) for row in grid), entry):
        return correct("every row and column sum is met", answer)
    return wrong("a row or column sum is not met", answer)


# ---------------------------------------------------------------------------------------------
# graph_color: the entry has no answer, so we build one.


def reference_graph_color(entry: dict[str, Any]) -> str | None:
    coloring = entry["metadata"].get("possible_answer")
    return None if coloring is None else json.dumps({str(k): v for k, v in coloring.items()})


# ---------------------------------------------------------------------------------------------

AUDIT: dict[str, Verdict] = {
    "ab": Verdict("works", "rg pays only the exact final token string, which the rewriting rules determine uniquely."),
    "advanced_geometry": Verdict(
        "replaced",
        "rg reads only the first two comma-separated fields of an orthocenter answer, so '(7.765, 7.882, 99)' "
        "earns full marks, and pays a radius only as the exact gold string; we require exactly one pair (x, y) "
        "equal to the point rounded to 3 decimals, an angle that rounds to the gold, and a radius equal to "
        "the gold's value.",
        score_advanced_geometry,
    ),
    "arc_agi": Verdict("works", "rg parses the answer grid with its board format and pays only an exact match."),
    "binary_matrix": Verdict(
        "replaced",
        "rg calls eval() on any answer that is not the exact gold string, so a reply can run code on the host; "
        "we parse rows of integers with a regex (or a JSON array of arrays) and compare them with the gold.",
        score_binary_matrix,
    ),
    "bitwise_arithmetic": Verdict(
        "works",
        "rg compares int(answer, 0) with the value of the trusted problem expression; int() of a reply is "
        "bounded (Python refuses more than 4,300 digits, which scores 0).",
    ),
    "boxnet": Verdict(
        "replaced",
        "rg executes each step's moves one after another, so a box can be carried several squares in one "
        "step, silently skips impossible moves and crashes (KeyError) on a move off the grid or a non-list "
        "JSON; we simulate each step simultaneously, reject any impossible move, and pay only when every "
        "box is on its target.",
        score_boxnet,
        reference_boxnet,
    ),
    "calendar_arithmetic": Verdict(
        "works",
        "rg pays full marks only for the exact weekday, the exact integer count (its exp(-5·error) is below "
        "1 for any error) or the exact Yes/No.",
    ),
    "chain_sum": Verdict(
        "replaced",
        "rg deletes every comma before reading the number, so '0,13168' (two numbers) earns full marks for "
        "13168; we read one number (commas only between groups of three digits) and compare it exactly.",
        score_exact_number,
    ),
    "circuit_logic": Verdict("works", "rg pays full marks only for the exact 0/1 string."),
    "codeio": Verdict(
        "replaced",
        "rg compares JSON with Python equality, so true passes for 1 and 1 for true, and pays only the exact "
        "string for a non-object gold, so '[[2,3,1]]' is refused for '[[2, 3, 1]]'; we compare parsed JSON "
        "values with JSON types kept apart, whatever the whitespace.",
        score_codeio,
    ),
    "coin_flip": Verdict(
        "replaced",
        "rg accepts any number within 1e-4 absolute of the probability, so 0 earns full marks for 1/2^15 and "
        "p + 0.00009 for any p, and runs Fraction() on the answer, so '1e400' crashes it (OverflowError) and "
        "'1e99999999' takes over a minute of CPU; we require the exact value or a correctly rounded decimal "
        "with at least 4 significant digits.",
        score_coin_flip,
    ),
    "color_cube_rotation": Verdict("works", "rg pays only the exact colour name, case-insensitively."),
    "complex_arithmetic": Verdict(
        "replaced",
        "rg scores min(1.0, exp(-distance)) and the distance to 'nan' is NaN, so the answer 'nan' earns full "
        "marks; we parse a + bi with a regex and require exactly the gold's real and imaginary parts.",
        score_complex_arithmetic,
    ),
    "countdown": Verdict(
        "replaced",
        "rg evaluates the answer with sympy.parse_expr, which is eval, so a reply can run code on the host; "
        "we parse + - * / and parentheses with our own parser, evaluate exactly and require every number "
        "used once.",
        score_countdown_all,
    ),
    "cryptarithm": Verdict(
        "replaced",
        "rg reads 'A=1,B=2' into a dict, so a letter given twice keeps its last digit and the mapping with "
        "repeats or a first wrong guess ('Y=3,B=4,…,Y=7') earns full marks; we require each letter once, then "
        "rg's rules (exactly the puzzle's letters, distinct digits, no leading zero, a true sum).",
        score_cryptarithm,
    ),
    "decimal_arithmetic": Verdict(
        "replaced",
        "rg accepts any answer within 10^-3 (its operands' decimals) although the question asks for 12 "
        "significant digits, so 4.8618 passes for 4.86090396050; we require the value to 12 significant "
        "digits, correctly rounded or as rg's 12-digit step-by-step gold (the two differ in the last digit "
        "for about 9% of entries).",
        score_decimal_arithmetic,
    ),
    "decimal_chain_sum": Verdict("works", "rg pays only Decimal(answer) == Decimal(gold), exact equality."),
    "dice": Verdict(
        "works",
        "rg pays only the exact reduced fraction string the question asks for (case and newlines ignored).",
    ),
    "emoji_mystery": Verdict("works", "rg pays only the exact decoded sentence; its per-character credit is below 1."),
    "family_relationships": Verdict("works", "rg pays only the exact relationship word, case-insensitively."),
    "figlet_font": Verdict(
        "replaced",
        "rg scores min(0.1 per letter in place, 1.0), so any answer matching 10 letters of a word of 10 or more "
        "letters earns full marks (the default config makes only 3-7 letters, a curriculum more); we require "
        "the word exactly, case and spaces ignored.",
        score_figlet_font,
    ),
    "fraction_simplification": Verdict(
        "replaced",
        "rg matches \\frac{a}{b} with re.match, so anything after it is ignored and '\\frac{138}{583} + 1' "
        "earns full marks; we require exactly one fraction a/b or \\frac{a}{b} equal to the simplified gold.",
        score_fraction_simplification,
    ),
    "futoshiki": Verdict(
        "works",
        "rg pays full marks only for the exact solution grid (trailing spaces ignored) and the generator "
        "keeps the solution unique.",
    ),
    "game_of_life": Verdict(
        "replaced",
        "rg counts only the gold's cells, so a board with extra rows or columns earns full marks, and takes "
        "true for 1; we require a JSON array of 0/1 integers equal to the gold in shape and values.",
        score_game_of_life,
    ),
    "game_of_life_halting": Verdict(
        "replaced",
        "rg compares bool(answer) with bool(gold) and bool('False') is True, so every non-empty answer, "
        "'True' or 'False', earns full marks; we require the word True or False equal to the gold.",
        score_game_of_life_halting,
    ),
    "graph_color": Verdict(
        "replaced",
        "rg ignores keys that are not vertices, keeps the last of a repeated key and takes true for colour 1, "
        "so a colouring with extra entries earns full marks; we require a JSON object with each vertex once and "
        "nothing else, integer colours from the allowed ones and no edge within one colour.",
        score_graph_color,
        reference_graph_color,
    ),
    "group_anagrams": Verdict("works", "rg pays only the same groups as the solution, order-insensitively."),
    "gsm_symbolic": Verdict(
        "replaced",
        "rg takes the first number anywhere in the answer and its regex drops a leading minus, so '-20' and "
        "'20 or 30' earn full marks for 20; we require exactly one number equal to the gold.",
        score_gsm_symbolic,
    ),
    "intermediate_integration": Verdict(
        "replaced",
        "rg runs sympy.parse_expr (eval) on the answer and pays the unevaluated 'Integral(integrand, x)', "
        "which restates the question; we parse with Ludus's own parser in a guarded worker and require a "
        "closed form whose derivative is the integrand.",
        score_intermediate_integration,
        reference_intermediate_integration,
    ),
    "jugs": Verdict(
        "works",
        "rg simulates the JSON move list from empty jugs and pays any sequence that ends with a jug at the target.",
    ),
    "kakurasu": Verdict(
        "replaced",
        "rg keeps only the characters 0 and 1 of each line, so the grid with words around it ('So: 0 1 0 …', "
        "a final '?') earns full marks; we require rows of 0s and 1s (or a JSON array), then rg's row and "
        "column sums.",
        score_kakurasu,
    ),
    "knight_swap": Verdict(
        "replaced",
        "rg pays a valid swap only if it is no longer than its own solution although the question just asks "
        "for the moves, so correct longer solutions fail; we pay any legal alternating sequence that swaps "
        "the knights, and 'No' exactly when the puzzle is impossible.",
        score_knight_swap,
    ),
    "knights_knaves": Verdict(
        "replaced",
        "rg reads any word before a role as a name and ignores every other word, so the right statement twice "
        "with words between ('A is a knight and B is a knave or maybe not A is a knight and B is a knave') earns "
        "full marks; we accept only the puzzle's names, roles and 'is/a/an/and', each person's role stated once.",
        score_knights_knaves,
    ),
    "letter_jumble": Verdict(
        "replaced",
        "rg's word-by-word partial credit sums to 1.0 (for most sentence lengths, float rounding aside) when "
        "the answer starts with the gold's words, so the sentence followed by any extra words earns full "
        "marks; we require exactly the gold's words, case "
        "and spacing ignored.",
        score_letter_jumble,
    ),
    "manipulate_matrix": Verdict(
        "works",
        "rg pays only the exact matrix (whitespace normalised); its substring credit is below 1.",
    ),
    "mini_sudoku": Verdict(
        "works",
        "rg pays full marks only for the exact grid (trailing spaces ignored) and the generator keeps the "
        "solution unique.",
    ),
}
