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
    conversation by its opening and its number of replies so far. Tasks that open alike but are
    solved differently (the same question on different records: the answer is in a tool's reply)
    are played through once, and answered by everything the environment has said so far."""

    def __init__(self, env_factory: Callable[[], Env], episodes: Iterable[EpisodeRequest]):
        self._script: dict[str, tuple[str, list[Message]]] = {}
        self._played: dict[str, tuple[str, Message]] = {}  # what the environment said so far -> the next action
        env = env_factory()
        try:
            by_opening: dict[str, list[tuple[EpisodeRequest, list[Message]]]] = {}
            for request in episodes:
                opening = self._open(env, request)
                actions = env.reference_actions(request.task)
                if actions is None:
                    raise ValueError(
                        f"environment {env.name!r} gives no reference actions for task {request.task.id!r}; "
                        "implement reference() or reference_actions() to run the oracle"
                    )
                by_opening.setdefault(opening, []).append((request, actions))
            for opening, scripts in by_opening.items():
                if len({json.dumps([m.to_dict() for m in a], sort_keys=True) for _, a in scripts}) == 1:
                    self._script[opening] = (scripts[0][0].task.id, scripts[0][1])
                    continue
                for request, actions in scripts:
                    self._play(env, request, actions)
        finally:
            env.close()

    @staticmethod
    def _open(env: Env, request: EpisodeRequest) -> str:
        try:
            return _opening(env.reset(request.task, request.seed).messages)
        except Exception as exc:  # noqa: BLE001 - a setup failure of the oracle, said in one line
            raise ValueError(
                f"the oracle could not open task {request.task.id!r} of environment {env.name!r} to learn "
                f"how it begins: {type(exc).__name__}: {exc}"
            ) from None

    def _play(self, env: Env, request: EpisodeRequest, actions: list[Message]) -> None:
        """Play ``actions`` through and learn each from what the environment said before it."""
        said = list(env.reset(request.task, request.seed).messages)
        for action in actions:
            known = self._played.setdefault(_heard(said), (request.task.id, action))
            if known[1].to_dict() != action.to_dict():
                raise ValueError(
                    f"tasks {known[0]!r} and {request.task.id!r} reach the same conversation but have different "
                    "reference actions: the oracle cannot tell them apart"
                )
            result = env.step(action)
            if result.done:
                return
            said += result.observation.messages

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
            if _opening(conversation) in self._script:
                _, actions = self._script[_opening(conversation)]
                turn = sum(m.role == "assistant" for m in conversation)
                replies.append(_reply(actions[turn] if turn < len(actions) else None))
            else:
                replies.append(_reply(self._played.get(_heard(conversation), ("", None))[1]))
        return replies


def _heard(conversation: list[Message]) -> str:
    """Everything but the model's own replies: what the environment has said so far."""
    return json.dumps([m.to_dict() for m in conversation if m.role != "assistant"], sort_keys=True, ensure_ascii=False)


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
