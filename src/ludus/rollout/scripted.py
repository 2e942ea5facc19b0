"""Scripted policies that prove an environment's tasks solvable and its rewards discriminating.

* :class:`OraclePolicy` plays each task's ``Env.reference_actions`` (it reads the gold
  solution): every task should earn the full reward.
* :class:`NothingPolicy` ends every turn with an empty reply: every task should earn nothing.

``ludus eval ENV --model oracle`` and ``--model nothing`` run them on the rollout engine, like
any model, so a new environment can be checked end to end before a GPU is spent on it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

import torch

from ludus.core.env import Env
from ludus.core.types import Message
from ludus.policies.base import Completion, Policy, SamplingParams, Tools
from ludus.rollout.engine import EpisodeRequest


def _opening(conversation: list[Message]) -> str:
    """The conversation up to the model's first reply: what identifies the episode's task."""
    head = []
    for message in conversation:
        if message.role == "assistant":
            break
        head.append(message.to_dict())
    return json.dumps(head, sort_keys=True, ensure_ascii=False)


def _reply(message: Message | None) -> Completion:
    if message is None:
        return Completion("", [], [], [], "stop")
    finish = "tool_calls" if message.tool_calls else "stop"
    return Completion(message.content, [], [], [], finish, list(message.tool_calls))


class OraclePolicy(Policy):
    """Replays ``reference_actions`` for the episodes it is built for: it resets an environment
    on each (task, seed) to learn the conversation the episode opens with, then answers a
    conversation by its opening and its number of replies so far."""

    def __init__(self, env_factory: Callable[[], Env], episodes: Iterable[EpisodeRequest]):
        self._script: dict[str, tuple[str, list[Message]]] = {}
        env = env_factory()
        try:
            for request in episodes:
                try:
                    opening = _opening(env.reset(request.task, request.seed).messages)
                except Exception as exc:  # noqa: BLE001 - a setup failure of the oracle, said in one line
                    raise ValueError(
                        f"the oracle could not open task {request.task.id!r} of environment {env.name!r} to learn "
                        f"how it begins: {type(exc).__name__}: {exc}"
                    ) from None
                actions = env.reference_actions(request.task)
                if actions is None:
                    raise ValueError(
                        f"environment {env.name!r} gives no reference actions for task {request.task.id!r}; "
                        "implement reference() or reference_actions() to run the oracle"
                    )
                known = self._script.setdefault(opening, (request.task.id, actions))
                if [m.to_dict() for m in known[1]] != [m.to_dict() for m in actions]:
                    raise ValueError(
                        f"tasks {known[0]!r} and {request.task.id!r} open with the same conversation but have "
                        "different reference actions: the oracle cannot tell them apart"
                    )
        finally:
            env.close()

    def generate(
        self,
        conversations: list[list[Message]],
        sampling: SamplingParams,
        *,
        tools: Tools = None,
        generator: torch.Generator | None = None,
    ) -> list[Completion]:
        replies = []
        for conversation in conversations:
            _, actions = self._script.get(_opening(conversation), ("", []))
            turn = sum(m.role == "assistant" for m in conversation)
            replies.append(_reply(actions[turn] if turn < len(actions) else None))
        return replies


class NothingPolicy(Policy):
    """An empty reply to everything: the floor every reward must stay at."""

    def generate(
        self,
        conversations: list[list[Message]],
        sampling: SamplingParams,
        *,
        tools: Tools = None,
        generator: torch.Generator | None = None,
    ) -> list[Completion]:
        return [_reply(None) for _ in conversations]
