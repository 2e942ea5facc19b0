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

from ludus.core.env import Env
from ludus.core.types import Score
from ludus.integrations.common import EnvFactory, Grader, Layout, RowError, TaskRef, chat

DATA_SOURCE_PREFIX = "ludus/"
AGENT_NAME = "ludus_agent"
RESULT_KEYS = ("score", "acc", "ludus_infra_error")  # every result has these, as verl's metrics need
VERL_LAYOUT = Layout(  # where verl rows keep what names their task (see rows)
    {
        "env": "data_source",
        "env_args": "extra_info.env_args",
        "split": "extra_info.split",
        "index": "extra_info.index",
        "seed": "extra_info.seed",
        "task_id": "extra_info.task_id",
    },
    "verl",
)


def rows(exported: Any, *, with_tools: bool | None = None) -> list[dict[str, Any]]:
    """verl dataset rows from :func:`ludus.integrations.common.export_tasks`: ``data_source``,
    ``prompt``, ``ability``, ``reward_model`` and ``extra_info`` as verl's RLHFDataset reads them;
    rows of environments with tools also name the agent loop (``agent_name``)."""
    out = []
    for e in exported:
        ref: TaskRef = e.ref
        row: dict[str, Any] = {
            "data_source": DATA_SOURCE_PREFIX + ref.env,
            "prompt": chat(e.observation.messages),
            "ability": ref.env,
            "reward_model": {"style": "rule", "ground_truth": ref.task_id},
            "extra_info": {
                "split": ref.split,
                "index": ref.index,
                "seed": ref.seed,
                "task_id": ref.task_id,
                "env": ref.env,
                "env_args": ref.env_args,
            },
        }
        if with_tools if with_tools is not None else bool(e.observation.tools):
            row["agent_name"] = AGENT_NAME
        out.append(row)
    return out


def task_ref(data_source: str, ground_truth: Any, extra_info: Mapping[str, Any] | None) -> TaskRef:
    """The task a verl row names (see :func:`rows`), with a clear error for rows Ludus did not write."""
    if not isinstance(data_source, str) or not data_source.startswith(DATA_SOURCE_PREFIX):
        raise RowError(
            f"data_source {data_source!r} is not a Ludus environment ('ludus/<env>'): write the dataset with "
            f"{VERL_LAYOUT.export()}, or route other data sources to another reward function"
        )
    info = dict(extra_info or {})
    env = data_source[len(DATA_SOURCE_PREFIX) :]
    values = {
        "env": info.get("env", env),
        "env_args": info.get("env_args", "{}"),
        "split": info.get("split"),
        "index": info.get("index"),
        "seed": info.get("seed", info.get("index")),
        "task_id": info.get("task_id", ground_truth),
    }
    ref = TaskRef.parse(values, VERL_LAYOUT, where=f"the {data_source} row")
    if ref.env != env:
        raise RowError(f"the row's data_source names {env!r} but its extra_info names {ref.env!r}")
    if ground_truth is not None and str(ground_truth) != ref.task_id:
        raise RowError(f"the row's ground_truth {ground_truth!r} is not its task id {ref.task_id!r}")
    return ref


def remote_factory(url: str) -> EnvFactory:
    """Environments on the env server at ``url`` (the HTTP client is imported when one is made)."""

    def make() -> Env:
        from ludus.rollout.remote import RemoteEnv

        return RemoteEnv(url)

    return make


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
