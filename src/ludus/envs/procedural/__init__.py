"""Single-turn environments over the seeded procedural task families of :mod:`ludus.tasks`,
with exact graders: integers and integer lists (:mod:`.exact`), countdown expressions
(:mod:`.countdown`)."""

from ludus.envs.procedural.countdown import score_countdown
from ludus.envs.procedural.env import (
    ArithmeticEnv,
    CountdownEnv,
    LinearEquationEnv,
    ProceduralEnv,
    SortingEnv,
)
from ludus.envs.procedural.exact import score_int, score_int_list

__all__ = [
    "ArithmeticEnv",
    "CountdownEnv",
    "LinearEquationEnv",
    "ProceduralEnv",
    "SortingEnv",
    "score_countdown",
    "score_int",
    "score_int_list",
]
