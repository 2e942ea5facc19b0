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

Infrastructure failures: verl has no way to leave a sample out of the reward. The agent loop
masks such a sample's tokens from the loss (its ``response_mask`` is all zeros) and reports
``ludus_infra_error``; ``compute_score`` cannot touch the loss, so by default it raises rather
than train on a made-up 0 (``reward_kwargs: {on_infra_error: zero}`` scores 0 and counts them
in ``ludus_infra_error`` instead). ``reward_kwargs: {env_server: URL}`` grades on an env server.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from ludus.core.types import Score, Status
from ludus.integrations.common import Episodes, Grader, RowError, TaskRef, chat

DATA_SOURCE_PREFIX = "ludus/"
AGENT_NAME = "ludus_agent"
RESULT_KEYS = ("score", "acc", "ludus_infra_error")  # every result has these, as verl's metrics need


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
            "`ludus export ENV --format verl`, or route other data sources to another reward function"
        )
    info = dict(extra_info or {})
    env = data_source[len(DATA_SOURCE_PREFIX) :]
    columns = {
        "ludus_env": info.get("env", env),
        "ludus_env_args": info.get("env_args", "{}"),
        "ludus_split": info.get("split"),
        "ludus_index": info.get("index"),
        "ludus_seed": info.get("seed", info.get("index")),
        "ludus_task_id": info.get("task_id", ground_truth),
    }
    ref = TaskRef.from_columns(columns, where=f"the {data_source} row's extra_info")
    if ref.env != env:
        raise RowError(f"the row's data_source names {env!r} but its extra_info names {ref.env!r}")
    if ground_truth is not None and str(ground_truth) != ref.task_id:
        raise RowError(f"the row's ground_truth {ground_truth!r} is not its task id {ref.task_id!r}")
    return ref


def _remote(url: str) -> Any:
    from ludus.rollout.remote import RemoteEnv

    def make() -> Any:
        return RemoteEnv(url)

    return make


_graders: dict[str, Grader] = {}
_graders_lock = threading.Lock()


def _grader(env_server: str | None) -> Grader:
    key = env_server or ""
    with _graders_lock:
        if key not in _graders:
            _graders[key] = Grader(_remote(env_server) if env_server else None)
        return _graders[key]


def result(score: Score, on_infra_error: str = "raise") -> dict[str, float]:
    """verl's reward result: ``score`` plus numbers its metrics average (``acc``: graded correct)."""
    if score.is_infra_error:
        if on_infra_error != "zero":
            raise RuntimeError(
                f"Ludus could not grade this sample (infra_error: {score.reason}). verl cannot leave a sample out "
                "of the reward, and a made-up 0 would train the model on the grader's failure: fix the environment, "
                "use the ludus_agent loop (which masks such samples), or set reward_kwargs on_infra_error: zero"
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
# verl is imported only when the loop is used, so that exporting and compute_score need no verl.


def __getattr__(name: str) -> Any:
    if name == "LudusAgentLoop":
        cls = _agent_loop_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _agent_loop_class() -> type:
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
    from verl.experimental.agent_loop.tool_agent_loop import AgentData, AgentState, ToolAgentLoop
    from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

    from ludus.core.env import Env
    from ludus.core.types import Message, ToolCall
    from ludus.integrations.common import Slot, registered

    class _Schema:
        """What verl's loop reads of a tool: its name and OpenAI schema (Ludus runs the call)."""

        def __init__(self, spec: Any):
            self.name = spec.name
            self.tool_schema = OpenAIFunctionToolSchema.model_validate(spec.to_openai())

    @register(AGENT_NAME)
    class LudusAgentLoop(ToolAgentLoop):
        """verl's tool agent loop playing a Ludus episode: the environment's prompt and tools, each
        assistant turn's tool calls one ``step``, the final reply graded by the environment.

        ``env_server`` plays the episodes on an env server (``ludus serve-env``) instead of here."""

        def __init__(self, *args: Any, env_server: str | None = None, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.env_server = env_server
            self.env: Env | None = None
            self.score: Score | None = None
            self.replies: dict[int, str] = {}
            self.final: tuple[str, bool] = ("", False)  # the last reply's text, and whether it calls tools

        async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
            reward_model = kwargs.get("reward_model") or {}
            ref = task_ref(kwargs.get("data_source", ""), reward_model.get("ground_truth"), kwargs.get("extra_info"))
            factory = _remote(self.env_server) if self.env_server else registered(ref.env, ref.env_args)
            self.env = factory()
            try:
                task = Episodes().task(Slot(self.env), ref)
                observation = await self.env.areset(task, seed=ref.seed)
                self.tools = {spec.name: _Schema(spec) for spec in observation.tools}
                self.tool_schemas = [
                    t.tool_schema.model_dump(exclude_unset=True, exclude_none=True) for t in self.tools.values()
                ]
                kwargs["raw_prompt"] = chat(observation.messages)
                output = await super().run(sampling_params, **kwargs)
                score = self.score or await self._grade_final()
            finally:
                self.env.close()
            output.extra_fields["ludus_score"] = score.to_json()
            output.extra_fields["ludus_status"] = score.status
            if score.is_infra_error:  # masked: no token of this sample enters the loss
                output.response_mask = [0] * len(output.response_mask)
                output.extra_fields["ludus_masked"] = True
                output.reward_score = 0.0
            else:
                output.reward_score = score.value
            return output

        async def _handle_generating_state(
            self, agent_data: AgentData, sampling_params: dict[str, Any], ignore_termination: bool = False
        ) -> AgentState:
            before = len(agent_data.messages)
            state = await super()._handle_generating_state(agent_data, sampling_params, ignore_termination)
            text = self.tokenizer.decode(agent_data.response_ids, skip_special_tokens=True)
            if len(agent_data.messages) > before:  # verl parsed the reply
                self.final = (text, bool(agent_data.tool_calls))
            else:  # the loop ended on a limit before parsing it: see whether it calls tools
                _, calls = await self.tool_parser.extract_tool_calls(
                    agent_data.response_ids, [t.tool_schema for t in self.tools.values()]
                )
                self.final = (text, bool(calls))
            return state

        async def _handle_processing_tools_state(self, agent_data: AgentData) -> AgentState:
            assert self.env is not None
            calls = agent_data.tool_calls[: self.max_parallel_calls]
            parsed = []
            for i, call in enumerate(calls):
                try:
                    arguments = json.loads(call.arguments)
                except (TypeError, ValueError):
                    arguments = call.arguments  # the environment answers unreadable arguments with an error
                parsed.append(ToolCall(call.name, arguments, id=call.tool_call_id or f"call_{i}"))
            step = await self.env.astep(Message("assistant", "", tool_calls=parsed))
            replies = [m.content for m in step.observation.messages if m.role == "tool"]
            self.replies = {id(call): replies[i] if i < len(replies) else "" for i, call in enumerate(calls)}
            if step.done:
                self.score = step.score
            state = await super()._handle_processing_tools_state(agent_data)
            return AgentState.TERMINATED if self.score is not None else state

        async def _call_tool(self, tool_call: Any, tools_kwargs: dict[str, Any], agent_data: AgentData) -> Any:
            text = self.replies.get(id(tool_call), "")
            limit = self.max_tool_response_length
            if limit and len(text) > limit:
                text = text[:limit] + "...(truncated)"
            return ToolResponse(text=text), 0.0, {}

        async def _grade_final(self) -> Score:
            assert self.env is not None
            text, calls_pending = self.final
            if calls_pending:
                return Score.zero(Status.TRUNCATED, "the episode ended on a tool call, without a final answer")
            step = await self.env.astep(Message("assistant", text))
            if not step.done or step.score is None:
                return Score.zero(Status.TRUNCATED, "the environment expected more turns after the final reply")
            return step.score

    return LudusAgentLoop
