"""The ``math`` family: problems from MATH/GSM8K-style files or seeded procedural families,
graded by :class:`MathVerifier` — exact, deny-by-default, bounded in time and memory
(docs/math.md). ``from ludus.envs.math import MathVerifier`` is the grader's one import path;
``verify_antiderivative`` checks an integration answer by differentiating it."""

from ludus.envs.math.antiderivative import verify_antiderivative
from ludus.envs.math.env import MathEnv
from ludus.envs.math.verifier import MathVerifier, verify_math

__all__ = ["MathEnv", "MathVerifier", "verify_antiderivative", "verify_math"]
