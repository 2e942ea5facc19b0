"""The values that flow through Ludus: tasks, messages, tools, observations, scores, trajectories.

Every type is a plain dataclass that round-trips through JSON with ``to_dict`` /
``from_dict`` (and ``to_json`` / ``from_json`` for one line), so a trajectory can be
logged, replayed, served over HTTP and trained on without a custom codec.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any, ClassVar, Literal, Self

ACTOR_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # an actor's name (Observation.actor): config keys, env args
Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")


class Status(StrEnum):
    """Why a score has the value it has.

    ``INFRA_ERROR`` means the grader itself failed (a crashed sandbox, a dead server): the
    sample says nothing about the policy and training masks it instead of scoring it 0.
    Any other string is allowed in :class:`Score` for environment-specific outcomes.
    """

    CORRECT = "correct"
    WRONG = "wrong"
    PARTIAL = "partial"
    NO_ANSWER = "no_answer"
    FORMAT_ERROR = "format_error"
    AMBIGUOUS = "ambiguous"
    TIMEOUT = "timeout"
    TRUNCATED = "truncated"
    GOLD_ERROR = "gold_error"
    HONEYPOT = "honeypot"  # the model touched a tool or data that no legitimate solution needs
    INFRA_ERROR = "infra_error"


class InfraError(RuntimeError):
    """An environment's infrastructure failed (a database server down, a sandbox lost).
    Raised from a tool or a verifier, it ends the episode as ``infra_error`` instead of being
    shown to the model as the tool's error: the model did nothing wrong."""


class _JsonMixin:
    """``to_json``/``from_json`` on top of each class's ``to_dict``/``from_dict``."""

    def to_dict(self) -> dict[str, Any]:  # pragma: no cover - overridden
        raise NotImplementedError

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:  # pragma: no cover - overridden
        raise NotImplementedError

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> Self:
        return cls.from_dict(json.loads(line))


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """Keep only the keys that name fields of ``cls``; a missing required field raises."""
    if not isinstance(data, dict):
        raise TypeError(f"{cls.__name__}.from_dict expects a JSON object, got {type(data).__name__}")
    names = _field_names(cls)
    return {k: v for k, v in data.items() if k in names}


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


@dataclass
class ToolCall(_JsonMixin):
    """A request by the model to call tool ``name`` with JSON ``arguments``."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCall:
        return cls(**_known(cls, data))


@dataclass
class Message(_JsonMixin):
    """One chat message. ``tool_calls`` only on assistant messages, ``tool_call_id`` only on tool ones."""

    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"Message.role must be one of {ROLES}, got {self.role!r}")
        if not isinstance(self.content, str):
            raise TypeError(f"Message.content must be a string, got {type(self.content).__name__}")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        kw = _known(cls, data)
        kw["tool_calls"] = [ToolCall.from_dict(c) for c in kw.get("tool_calls") or []]
        return cls(**kw)


@dataclass
class ToolSpec(_JsonMixin):
    """A tool the model may call, described as a JSON-schema function (OpenAI format)."""

    name: str
    description: str = ""  # optional in OpenAI's schema, as are the parameters
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def to_openai(self) -> dict[str, Any]:
        """The ``{"type": "function", "function": {...}}`` form chat APIs expect."""
        return {"type": "function", "function": self.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolSpec:
        if isinstance(data, dict) and data.get("type") == "function" and "function" in data:
            data = data["function"]
        return cls(**_known(cls, data))


@dataclass
class Task(_JsonMixin):
    """One problem: what the model is asked (``prompt``) and what the verifier knows (``answer``).

    ``answer`` is never shown to the model. ``info`` carries anything else a verifier needs
    (e.g. the numbers allowed in a countdown task); it must be JSON-serialisable.
    """

    id: str
    prompt: str
    answer: Any = None
    info: dict[str, Any] = field(default_factory=dict)
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Task:
        return cls(**_known(cls, data))


@dataclass
class Score(_JsonMixin):
    """A verifier's verdict: a reward ``value``, its named ``components``, a ``status`` and a ``reason``.

    ``reason`` is for humans reading logs ("expected 42, got 41"); ``status`` is for code.
    """

    value: float
    status: str = Status.CORRECT
    reason: str = ""
    components: dict[str, float] = field(default_factory=dict)
    extracted: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.value, (int, float)) or not math.isfinite(self.value):
            raise ValueError(f"Score.value must be a finite number, got {self.value!r}")
        self.value = float(self.value)
        self.status = str(self.status)

    @property
    def is_infra_error(self) -> bool:
        return self.status == Status.INFRA_ERROR

    @property
    def correct(self) -> bool:
        """What every accuracy and pass@k in Ludus counts: the grader judged the answer correct
        (status ``correct``), whatever shaping did to the value (partial credit, a format term)."""
        return self.status == Status.CORRECT

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value, "status": self.status, "reason": self.reason}
        if self.components:
            out["components"] = dict(self.components)
        if self.extracted is not None:
            out["extracted"] = self.extracted
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Score:
        return cls(**_known(cls, data))

    @classmethod
    def zero(cls, status: str, reason: str, *, extracted: str | None = None, **components: float) -> Score:
        return cls(0.0, status=status, reason=reason, components=dict(components), extracted=extracted)


@dataclass
class Observation(_JsonMixin):
    """What the policy sees: the conversation so far and the tools it may call.

    ``actor`` names who answers it: ``""`` (the default) the policy being run or trained; any
    other name one of the engine's other policies (``RolloutEngine(actors=...)``: the other seat
    of a game, played by a frozen checkpoint or a model behind a URL), whose replies are stepped
    like any action but are never the trajectory's turns."""

    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    actor: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "messages": [m.to_dict() for m in self.messages],
            "tools": [t.to_dict() for t in self.tools],
        }
        if self.actor:
            out["actor"] = self.actor
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Observation:
        kw = _known(cls, data)
        actor = kw.get("actor", "")
        if not isinstance(actor, str) or (actor and not ACTOR_NAME.fullmatch(actor)):
            raise ValueError(
                f"an observation's actor must be a name of letters, digits, '_', '.', '-'; got {actor!r}"[:200]
            )
        return cls(
            messages=[Message.from_dict(m) for m in kw.get("messages", [])],
            tools=[ToolSpec.from_dict(t) for t in kw.get("tools", [])],
            actor=actor,
        )


@dataclass
class StepResult(_JsonMixin):
    """The result of one ``Env.step``.

    ``observation`` holds only the messages the environment *added* (tool results, feedback) —
    unless ``history_rewritten``: then it holds the whole conversation the policy sees next,
    which is not the old one extended (an agent that edited its own history, see
    :class:`ludus.agents.AgentEnv`). ``terminated``: the episode ended by the task's rules;
    ``truncated``: it was cut off (turn limit). ``score`` is set on the last step and is the
    episode's final verdict.
    """

    observation: Observation
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    score: Score | None = None
    info: dict[str, Any] = field(default_factory=dict)
    history_rewritten: bool = False

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    def to_dict(self) -> dict[str, Any]:
        return {
            "observation": self.observation.to_dict(),
            "reward": self.reward,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "score": None if self.score is None else self.score.to_dict(),
            "info": self.info,
            **({"history_rewritten": True} if self.history_rewritten else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepResult:
        kw = _known(cls, data)
        kw["observation"] = Observation.from_dict(kw["observation"])
        kw["score"] = None if kw.get("score") is None else Score.from_dict(kw["score"])
        return cls(**kw)


@dataclass
class Turn(_JsonMixin):
    """One policy turn inside a trajectory, with the exact tokens it was sampled as.

    Keeping the token ids and behaviour log-probs (rather than re-tokenising text later) is
    what makes the training signal match what the policy actually did.
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    reward: float = 0.0
    finish_reason: str = "stop"

    def to_dict(self) -> dict[str, Any]:
        # not asdict: it deep-copies every token id and log-prob one by one (seconds for long episodes)
        return {
            "prompt_ids": list(self.prompt_ids),
            "completion_ids": list(self.completion_ids),
            "logprobs": list(self.logprobs),
            "reward": self.reward,
            "finish_reason": self.finish_reason,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Turn:
        return cls(**_known(cls, data))


def chained_turns(turns: Sequence[Turn]) -> list[list[int]]:
    """The turns of an episode cut into runs that form one token sequence each: turn ``k + 1``
    continues its run when its prompt ids begin with turn ``k``'s prompt and completion ids, so
    what lies between is exactly what the environment (or an agent) added. A turn whose prompt
    re-renders the history differently (a chat template that drops thinking blocks, an agent that
    edited its messages) starts a new run. Returns the turns' indices, run by run."""
    runs: list[list[int]] = []
    for k, turn in enumerate(turns):
        if runs:
            before = turns[runs[-1][-1]]
            seen = len(before.prompt_ids) + len(before.completion_ids)
            if (
                len(turn.prompt_ids) >= seen
                and turn.prompt_ids[: len(before.prompt_ids)] == before.prompt_ids
                and turn.prompt_ids[len(before.prompt_ids) : seen] == before.completion_ids
            ):
                runs[-1].append(k)
                continue
        runs.append([k])
    return runs


def chain_counts(runs: Sequence[Sequence[int]]) -> tuple[int, int]:
    """How an episode's :func:`chained_turns` runs came about: (turns merged into the turn before,
    turns that started a sequence of their own after the first)."""
    return sum(len(run) - 1 for run in runs), max(0, len(runs) - 1)


@dataclass
class Trajectory(_JsonMixin):
    """A whole episode: the task, every message, each policy turn's tokens, and the final score."""

    task: Task
    messages: list[Message]
    turns: list[Turn] = field(default_factory=list)
    score: Score | None = None
    env: str = ""
    seed: int | None = None
    policy_version: int = 0
    tools: list[ToolSpec] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    SCHEMA_VERSION: ClassVar[int] = 1

    @property
    def reward(self) -> float:
        """The episode return: the sum of per-step rewards."""
        return sum((t.reward for t in self.turns), 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.SCHEMA_VERSION,
            "env": self.env,
            "seed": self.seed,
            "policy_version": self.policy_version,
            "task": self.task.to_dict(),
            "messages": [m.to_dict() for m in self.messages],
            "tools": [t.to_dict() for t in self.tools],
            "turns": [t.to_dict() for t in self.turns],
            "score": None if self.score is None else self.score.to_dict(),
            "info": self.info,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        kw = _known(cls, data)
        kw["task"] = Task.from_dict(kw["task"])
        kw["messages"] = [Message.from_dict(m) for m in kw.get("messages", [])]
        kw["tools"] = [ToolSpec.from_dict(t) for t in kw.get("tools", [])]
        kw["turns"] = [Turn.from_dict(t) for t in kw.get("turns", [])]
        kw["score"] = None if kw.get("score") is None else Score.from_dict(kw["score"])
        return cls(**kw)
