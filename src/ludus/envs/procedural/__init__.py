"""Single-turn environments over the seeded procedural task families of :mod:`ludus.tasks`,
with exact graders: integers and integer lists (:mod:`.exact`), countdown expressions
(:mod:`.countdown`)."""

from ludus.envs.procedural.countdown import (
    ExpressionError,
    expression_value,
    numbers_in,
    parse_expression,
    score_countdown,
)
from ludus.envs.procedural.env import (
    ArithmeticEnv,
    CountdownEnv,
    LinearEquationEnv,
    ProceduralEnv,
    SortingEnv,
)
from ludus.envs.procedural.exact import parse_int, parse_int_list, score_int, score_int_list

__all__ = [
    "ArithmeticEnv",
    "CountdownEnv",
    "ExpressionError",
    "LinearEquationEnv",
    "ProceduralEnv",
    "SortingEnv",
    "expression_value",
    "numbers_in",
    "parse_expression",
    "parse_int",
    "parse_int_list",
    "score_countdown",
    "score_int",
    "score_int_list",
]
