"""Ludus in verl: ``compute_score`` for single-turn environments, ``LudusAgentLoop`` for tool environments.

Single turn — verl loads a custom reward function from a file::

    reward.custom_reward_function.path=$(python -c 'import ludus.integrations.verl as m; print(m.__file__)')
    reward.custom_reward_function.name=compute_score

on rows that ``ludus export ENV --format verl`` wrote: ``data_source`` is ``ludus/<env>``,
``reward_model.ground_truth`` the task's id, and ``extra_info`` holds the split, index, seed and
the environment's arguments, from which the grader rebuilds the task (no answer is in the file).

Multi turn — an agent loop that plays the whole Ludus episode: the environment's own first
observation and tools, each parsed tool call one ``step``, the final reply graded by the
environment. Register it with an agent-loop config file (``agent_loop_config_path``)::

    - name: ludus_agent
      _target_: ludus.integrations.verl.LudusAgentLoop

Rows of tool environments carry ``agent_name: ludus_agent``. The loop puts the score in the
output (verl then needs no reward function for these rows) and its status in ``extra_fields``.
The class lives in :mod:`ludus.integrations.verl_agent_loop` (importing this module imports no verl).

Infrastructure failures — a grader that fails, an environment or env server that cannot start
for a sample: verl has no way to leave a sample out of the reward. The agent loop masks such a
sample's tokens from the loss (its ``response_mask`` is all zeros) and reports
``ludus_infra_error``; ``compute_score`` cannot touch the loss, so by default it raises rather
than train on a made-up 0 (``reward_kwargs: {on_infra_error: zero}`` scores 0 and counts them
in ``ludus_infra_error`` instead). ``reward_kwargs: {env_server: URL}`` grades on an env server.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from ludus.core.types import Score
from ludus.integrations.common import Grader
from ludus.integrations.verl_rows import remote_factory, task_ref

RESULT_KEYS = ("score", "acc", "ludus_infra_error")  # every result has these, as verl's metrics need


_graders: dict[str, Grader] = {}
_graders_lock = threading.Lock()


def _grader(env_server: str | None) -> Grader:
    key = env_server or ""
    with _graders_lock:
        if key not in _graders:
            _graders[key] = Grader(remote_factory(env_server) if env_server else None)
        return _graders[key]


def result(score: Score, on_infra_error: str = "raise") -> dict[str, float]:
    """verl's reward result: ``score`` plus numbers its metrics average (``acc``: graded correct)."""
    if score.is_infra_error:
        if on_infra_error != "zero":
            raise RuntimeError(
                f"Ludus could not grade this sample (infra_error: {score.reason}). verl cannot leave a sample out "
                "of the reward, and a made-up 0 would train the model on the grader's failure: fix the environment, "
                "use the ludus_agent loop (which masks such samples), or score such samples 0 and count them with "
                "reward.custom_reward_function.reward_kwargs.on_infra_error=zero"
            )
        return {"score": 0.0, "acc": 0.0, "ludus_infra_error": 1.0}
    return {"score": score.value, "acc": float(score.correct), "ludus_infra_error": 0.0}


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any = None,
    extra_info: Mapping[str, Any] | None = None,
    *,
    on_infra_error: str = "raise",
    env_server: str | None = None,
    **_: Any,
) -> dict[str, float]:
    """verl's custom reward function: the Ludus score of ``solution_str`` on the row's task.

    A row that :class:`LudusAgentLoop` played already carries its score (in the ``extra_fields``
    that verl merges into ``extra_info``); that score is returned as it is."""
    if on_infra_error not in ("raise", "zero"):
        raise ValueError(f"on_infra_error must be 'raise' or 'zero', got {on_infra_error!r}")
    info = dict(extra_info or {})
    if "ludus_score" in info:  # graded by the agent loop, tool calls and all
        score = Score.from_dict(json.loads(info["ludus_score"]))
        return result(score, "zero" if score.is_infra_error and "ludus_masked" in info else on_infra_error)
    ref = task_ref(data_source, ground_truth, info)
    return result(_grader(env_server).grade(ref, solution_str), on_infra_error)


# ---- multi-turn: the agent loop ------------------------------------------------------------------


def __getattr__(name: str) -> Any:
    """``LudusAgentLoop`` by its documented path (hydra's ``_target_``) without importing verl here:
    it lives in :mod:`ludus.integrations.verl_agent_loop`, imported on first use."""
    if name == "LudusAgentLoop":
        from ludus.integrations.verl_agent_loop import LudusAgentLoop

        return LudusAgentLoop
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
