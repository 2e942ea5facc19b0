"""Is this an antiderivative of that? A symbolic check for integration tasks, bounded like the verifier.

Both expressions (sympy-style text: ``x**2/2 + sin(x) + C``) are read by Ludus's own parser, never
``eval``; the derivative of the answer minus the integrand must simplify to zero. The work runs in a
guarded worker process with a time and memory limit, since ``simplify`` on hostile input can run for
minutes. An unevaluated ``Integral`` in the answer restates the question and is refused.
"""

from __future__ import annotations

import re
import threading

import sympy

from ludus.core.types import Score, Status
from ludus.envs.math.guard import GuardedPool
from ludus.envs.math.latex import ParseError, TooLarge, parse_expression
from ludus.envs.math.verifier import values_equal

MAX_CHARS = 500
TIMEOUT_S = 10.0
# sympy's function names as the parser's LaTeX names (it reads \sin(x), not sin(x))
_FUNCTIONS = {f: f for f in ("sqrt", "exp", "log", "ln", "sin", "cos", "tan", "sec", "csc", "cot")} | {
    "asin": "arcsin",
    "acos": "arccos",
    "atan": "arctan",
}
_pool: GuardedPool | None = None
_pool_lock = threading.Lock()


def _read(text: str, variable: str) -> sympy.Expr:
    text = text.replace("**", "^")
    if variable not in ("e", "E"):
        text = re.sub(r"(?<![A-Za-z_])E(?![A-Za-z_])", "e", text)
    for name, latex in _FUNCTIONS.items():
        text = re.sub(rf"(?<![A-Za-z\\]){name}(?=\s*\()", "\\\\" + latex, text)
    return parse_expression(text)


def check(answer: str, integrand: str, variable: str) -> tuple[str, str]:
    """In the worker: ``("correct" | "wrong" | "format_error", reason)``."""
    try:
        expr = _read(answer, variable)
    except (ParseError, TooLarge, RecursionError, ValueError, TypeError) as exc:
        return Status.FORMAT_ERROR, f"not an expression we can read: {exc}"
    x, c = sympy.Symbol(variable), sympy.Symbol("C")
    if not expr.free_symbols <= {x, c}:
        return Status.WRONG, f"unknown symbols {sorted(map(str, expr.free_symbols - {x, c}))}"
    if expr.has(sympy.Integral, sympy.Derivative):
        return Status.WRONG, "the answer still contains an integral"
    derivative = sympy.diff(expr, x)
    if derivative.has(c) or not values_equal(sympy.simplify(derivative - _read(integrand, variable)), sympy.Integer(0)):
        return Status.WRONG, "its derivative is not the integrand"
    return Status.CORRECT, "its derivative is the integrand"


def verify_antiderivative(answer: str, integrand: str, variable: str = "x", *, timeout_s: float = TIMEOUT_S) -> Score:
    """1.0 when ``answer`` (``+ C`` optional) differentiates to ``integrand`` in ``variable``, else 0 and why."""
    global _pool
    if len(answer) > MAX_CHARS:
        return Score.zero(Status.FORMAT_ERROR, f"the antiderivative is longer than {MAX_CHARS} characters")
    with _pool_lock:
        if _pool is None:
            _pool = GuardedPool(f"{__name__}:check", workers=2, memory_mb=1024)
    outcome = _pool.call(answer, integrand, variable, timeout_s=timeout_s)
    if outcome.kind in ("timeout", "memory"):
        return Score(0.0, Status.TIMEOUT, f"verification stopped: {outcome.detail}", extracted=answer)
    if outcome.kind != "ok":
        return Score(0.0, Status.INFRA_ERROR, f"the checker failed: {outcome.detail}", extracted=answer)
    status, reason = outcome.value
    return Score(1.0 if status == Status.CORRECT else 0.0, status, reason, extracted=answer)
