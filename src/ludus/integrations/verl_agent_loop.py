"""``LudusAgentLoop``: verl's tool agent loop playing a Ludus episode (see :mod:`ludus.integrations.verl`).

This module imports verl, so ``ludus.integrations.verl`` imports it only when the class is asked
for. The class is defined at module level and is not ``@register``-ed: verl's agent-loop worker
instantiates loops from its registry with hydra, by the ``_target_`` an agent-loop config file
gives (``ludus.integrations.verl.LudusAgentLoop``, or this module's path), for every sample; a
class that registered itself on import would replace that entry, and the arguments it carries
(``env_server``), with its own.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.experimental.agent_loop.tool_agent_loop import AgentData, AgentState, ToolAgentLoop
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from ludus.core.env import Env
from ludus.core.types import Message, Score, Status, ToolCall, ToolSpec
from ludus.integrations.common import EnvPool, EnvUnavailable, TaskRef, chat, infra_error
from ludus.integrations.verl_rows import remote_factory, task_ref


class _Schema:
    """What verl's loop reads of a tool: its name and OpenAI schema (Ludus runs the call)."""

    def __init__(self, spec: ToolSpec):
        self.name = spec.name
        self.tool_schema = OpenAIFunctionToolSchema.model_validate(spec.to_openai())


class LudusAgentLoop(ToolAgentLoop):
    """verl's tool agent loop playing a Ludus episode: the environment's prompt and tools, each
    assistant turn's tool calls one ``step``, the final reply graded by the environment.

    ``env_server`` plays the episodes on an env server (``ludus serve-env``) instead of here. An
    environment that cannot start for a sample (its server down, say) makes the sample an
    ``infra_error``: one reply is sampled to the row's own prompt and masked from the loss."""

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
        envs = EnvPool(remote_factory(self.env_server) if self.env_server else None)
        try:
            self.score = await self._start(envs, ref, kwargs)
            output = await super().run(sampling_params, **kwargs)
            score = self.score or await self._grade_final()
        finally:
            envs.close()
        output.extra_fields["ludus_score"] = score.to_json()
        output.extra_fields["ludus_status"] = score.status
        if score.is_infra_error:  # masked: no token of this sample enters the loss
            output.response_mask = [0] * len(output.response_mask)
            output.extra_fields["ludus_masked"] = True
            output.reward_score = 0.0
        else:
            output.reward_score = score.value
        return output

    async def _start(self, envs: EnvPool, ref: TaskRef, kwargs: dict[str, Any]) -> Score | None:
        """Reset the row's episode and make its prompt and tools the environment's; ``None`` when
        it started, its ``infra_error`` score when it could not."""
        try:  # in a thread: a RemoteEnv asks its server for /info and the task over blocking HTTP
            slot = await asyncio.to_thread(envs.new_slot, ref)
            task = await asyncio.to_thread(envs.task, slot, ref)
        except EnvUnavailable as exc:
            return infra_error(exc)
        self.env = slot.env
        try:
            observation = await self.env.areset(task, seed=ref.seed)
        except Exception as exc:  # noqa: BLE001 - the environment failed, not the model
            self.env = None
            return infra_error(exc, "reset")
        self.tools = {spec.name: _Schema(spec) for spec in observation.tools}
        self.tool_schemas = [
            t.tool_schema.model_dump(exclude_unset=True, exclude_none=True) for t in self.tools.values()
        ]
        kwargs["raw_prompt"] = chat(observation.messages)
        return None

    async def _handle_generating_state(
        self, agent_data: AgentData, sampling_params: dict[str, Any], ignore_termination: bool = False
    ) -> AgentState:
        before = len(agent_data.messages)
        state = await super()._handle_generating_state(agent_data, sampling_params, ignore_termination)
        if self.env is None:  # the environment did not start: this one reply, masked, is the sample
            return AgentState.TERMINATED
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
