"""What a verl row of Ludus holds and how it names its task: the rows ``ludus export --format
verl`` writes (:func:`rows`), the task a row names (:func:`task_ref`) and environments on an env
server (:func:`remote_factory`). Shared by ``compute_score`` (verl.py) and the agent loop
(verl_agent_loop.py), which import this, never each other."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ludus.core.env import Env
from ludus.integrations.common import EnvFactory, Layout, RowError, TaskRef, chat

DATA_SOURCE_PREFIX = "ludus/"
AGENT_NAME = "ludus_agent"
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
