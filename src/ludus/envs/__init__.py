"""Environment families, one package each: its tasks, its environment classes and its grader.

* :mod:`ludus.envs.procedural` — ``arithmetic``, ``countdown``, ``sorting``, ``linear-equation``
* :mod:`ludus.envs.math` — ``math``, graded by :class:`~ludus.envs.math.MathVerifier`
* :mod:`ludus.envs.code` — ``code``, ``code-tools``, graded by :class:`~ludus.envs.code.CodeVerifier`
* :mod:`ludus.envs.sql` — ``sql`` on SQLite or PostgreSQL
* :mod:`ludus.envs.repo` — ``repo``, SWE-style repositories
* :mod:`ludus.envs.web` — ``web`` (a built-in shop) and ``miniwob`` in a real Chromium
* :mod:`ludus.envs.instruct` — ``instruct``, verifiable instruction following (IFEval's constraints)
* :mod:`ludus.envs.judged` — ``judged``, open-ended requests graded by an LLM judge

Families never import each other; what they share lives below them (:mod:`ludus.tasks`,
:mod:`ludus.sandbox`, :mod:`ludus.core`). Each registers its environments under the
``ludus.envs`` entry-point group in ``pyproject.toml``, exactly as a third-party package does.
Names are imported on first use, so ``import ludus.envs`` loads no family.
"""

from ludus.core.lazy import lazy_exports

_EXPORTS = {
    "ArithmeticEnv": "procedural",
    "CountdownEnv": "procedural",
    "SortingEnv": "procedural",
    "LinearEquationEnv": "procedural",
    "MathEnv": "math",
    "MathVerifier": "math",
    "CodeEnv": "code",
    "CodeToolEnv": "code",
    "CodeVerifier": "code",
    "SQLEnv": "sql",
    "RepoEnv": "repo",
    "ShopEnv": "web",
    "InstructEnv": "instruct",
    "JudgedEnv": "judged",
    "MiniWoBEnv": "web",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
