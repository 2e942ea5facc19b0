"""``ludus proxy``: an OpenAI-compatible endpoint in front of a Ludus policy that records every
model call of an agent, token-exactly, under the episode it belongs to.

    whoever runs the agents (admin token)             the agent (any OpenAI client)
    POST /ludus/episodes {"task_id": …} ─────▶ key
                                                      OPENAI_BASE_URL=…/v1, OPENAI_API_KEY=key
                                                      POST /v1/chat/completions  (each call recorded)
    POST /ludus/episodes/KEY/end {"reward": 1} ─▶ the episode as a Trajectory (+ DIR/episodes.jsonl)

What is recorded is what the policy sampled — its :class:`~ludus.policies.base.Completion`'s
prompt ids, completion ids and behaviour log-probs — never text tokenised again; one
:class:`~ludus.core.types.Turn` per reply. Calls with an unknown key, after their episode ended,
or malformed are refused in OpenAI's format and never recorded. The admin endpoints need the
proxy's token, which the agent never holds: an agent knows its episode key, and with it alone
could otherwise end its own episode with a reward of its choosing.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

from fastapi import Body, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict

from ludus.core.types import Message, Score, Task, ToolCall, ToolSpec, Trajectory, Turn, chain_counts, chained_turns
from ludus.policies.base import Completion, SamplingParams
from ludus.policies.openai import tool_call_to_wire
from ludus.rollout.engine import JsonlSink
from ludus.serve.env_server import checked_token
from ludus.serve.model_server import PolicyBackend, Sampled
from ludus.serve.openai_front import ChatCall, OpenAIError, TextCall, openai_app

ENDED_REMEMBERED = 100_000  # ended episodes whose keys are still answered "ended" (later ones: unknown)
EXTERNAL = "external"  # the status of a score given as a bare reward: graded elsewhere, never "correct"


@dataclass
class Episode:
    """One agent's episode: its calls so far, each reply a :class:`Turn`. ``key`` is the secret
    the agent sends as its API key; ``id`` names the episode in records."""

    key: str = field(repr=False)
    id: str
    metadata: dict[str, Any]
    opened: float
    turns: list[Turn] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)  # calls refused or failed, never recorded
    messages: list[Message] = field(default_factory=list)  # the last call's conversation and its reply
    tools: list[ToolSpec] = field(default_factory=list)
    prompt: str = ""  # the first user message of the first call: the task as the agent put it
    first_version: int | None = None
    sampling: int = 0  # calls let through and not yet recorded or failed: they count against max_calls

    def view(self) -> dict[str, Any]:
        """What ``GET /ludus/episodes/KEY`` shows: everything but the key."""
        return {
            "id": self.id,
            "metadata": self.metadata,
            "opened": self.opened,
            "calls": self.calls,
            "turns": len(self.turns),
            "errors": self.errors,
            "messages": [m.to_dict() for m in self.messages],
        }

    def trajectory(self, score: Score | None) -> Trajectory:
        """The episode for training: its turns in call order, the reward on the last one, and in
        ``info`` the calls, the errors and how the turns chain into token sequences."""
        turns = [replace(t) for t in self.turns]
        if score is not None and turns:
            turns[-1].reward = score.value
        runs = chained_turns(turns)
        merged, split = chain_counts(runs)
        task_id = self.metadata.get("task_id")
        return Trajectory(
            task=Task(id=str(task_id) if task_id is not None else self.id, prompt=self.prompt, source="proxy"),
            messages=list(self.messages),
            turns=turns,
            score=score,
            policy_version=self.first_version or 0,
            tools=list(self.tools),
            info={
                "episode": self.id,
                "metadata": self.metadata,
                "opened": self.opened,
                "ended": time.time(),
                "calls": self.calls,
                "errors": self.errors,
                "chains": {"runs": runs, "merged": merged, "split": split},
            },
        )


def _reply(completion: Completion) -> Message:
    """The assistant message the agent received, tool calls under the ids it was sent."""
    calls = [
        ToolCall(c.name, c.arguments, id=tool_call_to_wire(c, i)["id"]) for i, c in enumerate(completion.tool_calls)
    ]
    return Message("assistant", completion.text, tool_calls=calls)


class EpisodeBook:
    """The proxy's episodes: opened, recorded into and ended from any thread. With ``out``, every
    ended episode is appended to ``out/episodes.jsonl`` (flushed and synced as it ends). At most
    ``max_open`` episodes are open and each takes at most ``max_calls`` calls, so that episodes
    never ended or agents that never stop cannot grow the proxy without bound."""

    def __init__(self, *, out: str | Path | None = None, max_open: int = 10_000, max_calls: int = 1_000):
        if max_open < 1 or max_calls < 1:
            raise ValueError(f"max_open and max_calls must be >= 1, got {max_open} and {max_calls}")
        self.max_open, self.max_calls = max_open, max_calls
        self.counts: Counter[str] = Counter()
        self._open: dict[str, Episode] = {}
        self._ended: OrderedDict[str, str] = OrderedDict()  # key -> episode id
        self._lock = threading.Lock()
        self._sink = JsonlSink(Path(out) / "episodes.jsonl") if out is not None else None
        self._sink_lock = threading.Lock()

    @property
    def open_count(self) -> int:
        return len(self._open)

    def open(self, metadata: dict[str, Any] | None = None) -> Episode:
        """A new episode; its ``key`` is the agent's API key."""
        with self._lock:
            if len(self._open) >= self.max_open:
                raise OpenAIError(
                    503,
                    f"{self.max_open} episodes are open, the most this proxy holds: end some first",
                    "too_many_episodes",
                )
            episode = Episode(
                f"ep-{secrets.token_urlsafe(24)}", secrets.token_hex(8), dict(metadata or {}), time.time()
            )
            self._open[episode.key] = episode
            self.counts["opened"] += 1
        return episode

    def check(self, key: str | None) -> None:
        """An agent's call may go ahead: its key names an open episode with calls to spare,
        counting those still being sampled (an agent that sends many at once gets no more). Each
        call let through is then recorded or reported failed."""
        with self._lock:
            episode = self._agents_episode(key)
            if len(episode.calls) + episode.sampling >= self.max_calls:
                self.counts["refused_calls"] += 1
                raise OpenAIError(
                    400, f"this episode has made {self.max_calls} calls, the most an episode may", "too_many_calls"
                )
            episode.sampling += 1

    def record(
        self, key: str | None, call: ChatCall | TextCall, sampled: Sampled, started: float, wall_s: float
    ) -> None:
        """The call's replies, as sampled. An episode that ended while its call was being sampled
        records nothing: the agent is told it ended."""
        completions = sampled.completions
        with self._lock:
            try:
                episode = self._agents_episode(key)
            except OpenAIError:
                self.counts["late_calls"] += 1
                raise
            episode.sampling -= 1
            first = len(episode.turns)
            episode.turns += [
                Turn(c.prompt_ids, c.completion_ids, c.logprobs, 0.0, c.finish_reason) for c in completions
            ]
            episode.calls.append(
                {
                    "endpoint": "chat/completions" if isinstance(call, ChatCall) else "completions",
                    "turns": list(range(first, len(episode.turns))),
                    "asked": call.asked,
                    "applied": {
                        "temperature": call.sampling.temperature,
                        "top_p": call.sampling.top_p,
                        "max_tokens": call.sampling.max_tokens,
                        "n": call.n,
                        "seed": call.seed,
                    },
                    "tool_calls": [[tool_call_to_wire(t, i) for i, t in enumerate(c.tool_calls)] for c in completions],
                    "weight_version": sampled.weight_version,
                    "batch": sampled.batch,
                    "started": started,
                    "wall_s": wall_s,
                    "prompt_tokens": sum(len(c.prompt_ids) for c in completions),
                    "completion_tokens": sum(len(c.completion_ids) for c in completions),
                }
            )
            if isinstance(call, ChatCall):
                episode.messages = [*call.messages, _reply(completions[0])]
                episode.tools = list(call.tools)
                if not episode.prompt:
                    episode.prompt = next((m.content for m in call.messages if m.role == "user"), "")
            if episode.first_version is None:
                episode.first_version = sampled.weight_version
            self.counts["calls"] += 1

    def record_error(self, key: str | None, error: BaseException) -> None:
        """A call :meth:`check` let through that the model refused or failed: in the episode's
        ``errors`` (a status of 500 or more is the proxy's or the model's failure, never the agent's)."""
        if isinstance(error, OpenAIError):
            entry = {"status": error.status, "code": error.code, "message": error.message}
        else:
            entry = {"status": 500, "code": "model_error", "message": f"{type(error).__name__}: {error}"}
        with self._lock:
            episode = self._open.get(key) if key else None
            if episode is not None:
                episode.sampling -= 1
                episode.errors.append({**entry, "at": time.time()})

    def view(self, key: str) -> dict[str, Any]:
        with self._lock:
            return self._admins_episode(key).view()

    def end(self, key: str, score: Score | None = None) -> Trajectory:
        """End the episode: its :class:`Trajectory`, with ``score`` (its value the last turn's
        reward), also appended to ``out/episodes.jsonl``. Later calls with its key are refused."""
        with self._lock:
            episode = self._admins_episode(key)
            del self._open[key]
            self._ended[key] = episode.id
            while len(self._ended) > ENDED_REMEMBERED:
                self._ended.popitem(last=False)
            self.counts["ended"] += 1
        trajectory = episode.trajectory(score)
        if self._sink is not None:
            with self._sink_lock:
                self._sink.write(trajectory)
        return trajectory

    def close(self) -> None:
        if self._sink is not None:
            self._sink.close()

    def _agents_episode(self, key: str | None) -> Episode:
        episode = self._open.get(key) if key else None
        if episode is not None:
            return episode
        if key in self._ended:
            self.counts["refused_ended"] += 1
            raise OpenAIError(
                401, f"episode {self._ended[key]} has ended: its key takes no more calls", "episode_ended"
            )
        self.counts["refused_unknown"] += 1
        raise OpenAIError(
            401,
            "unknown API key: send the key of an open episode (POST /ludus/episodes gives one) as the API key "
            "or in the X-Ludus-Episode header",
            "invalid_api_key",
        )

    def _admins_episode(self, key: str) -> Episode:
        episode = self._open.get(key)
        if episode is not None:
            return episode
        if key in self._ended:
            raise OpenAIError(409, f"episode {self._ended[key]} has already ended", "episode_ended")
        raise OpenAIError(404, "no open episode has this key", "unknown_episode")


class RecordingBackend:
    """The proxy's backend for the OpenAI front: a call goes ahead only for an open episode, is
    sampled by ``policy`` (sharing its batches with every other agent's calls: nothing here
    waits on another call) and is recorded in ``book`` as sampled."""

    def __init__(self, policy: PolicyBackend, book: EpisodeBook):
        self.policy, self.book = policy, book
        self.model_name = policy.model_name

    async def chat(self, call: ChatCall) -> list[Completion]:
        return await self._recorded(call, lambda: self.policy.sample(call))

    async def complete(self, call: TextCall) -> list[Completion]:
        return await self._recorded(call, lambda: self.policy.sample_text(call))

    def token_text(self, token_id: int) -> str | None:
        return self.policy.token_text(token_id)

    def health(self) -> dict[str, Any]:
        return {**self.policy.health(), "episodes_open": self.book.open_count}

    async def _recorded(self, call: ChatCall | TextCall, sample: Callable[[], Awaitable[Sampled]]) -> list[Completion]:
        self.book.check(call.key)
        started, clock = time.time(), time.perf_counter()
        try:
            sampled = await sample()
        except BaseException as exc:  # cancelled too: the call no longer counts as being sampled
            self.book.record_error(call.key, exc)
            raise
        self.book.record(call.key, call, sampled, started, time.perf_counter() - clock)
        return sampled.completions


class _End(BaseModel):
    """``POST /ludus/episodes/KEY/end``: a reward, or a whole score, or neither (graded later)."""

    model_config = ConfigDict(extra="forbid")

    reward: float | None = None
    score: dict[str, Any] | None = None


def _score(body: _End | None) -> Score | None:
    if body is None or (body.reward is None and body.score is None):
        return None
    if body.reward is not None and body.score is not None:
        raise OpenAIError(400, "send a reward or a score, not both", "invalid_value", "reward")
    if body.score is not None:
        try:
            return Score.from_dict(body.score)
        except (TypeError, ValueError) as exc:
            raise OpenAIError(400, f"score: {exc}", "invalid_value", "score") from None
    try:
        return Score(body.reward, status=EXTERNAL, reason="the reward given when the episode ended")  # type: ignore[arg-type]
    except ValueError as exc:
        raise OpenAIError(400, str(exc), "invalid_value", "reward") from None


def proxy_app(
    policy: PolicyBackend,
    book: EpisodeBook,
    *,
    admin_token: str,
    allow_origins: tuple[str, ...] = (),
    allow_hosts: tuple[str, ...] = (),
    defaults: SamplingParams | None = None,
) -> FastAPI:
    """The OpenAI front over ``policy``, recording into ``book``, with the admin endpoints
    (``Authorization: Bearer ADMIN_TOKEN``): ``POST /ludus/episodes`` (a JSON object of metadata,
    optional) → ``{"key", "id"}``; ``GET /ludus/episodes/{key}`` → the calls so far; ``POST
    /ludus/episodes/{key}/end`` (``{"reward": R}``, ``{"score": {...}}`` or nothing) → the
    :class:`Trajectory`. Browser rules and sampling defaults as :func:`openai_app`'s."""
    token = checked_token(admin_token)
    if token is None:
        raise ValueError(
            "the proxy needs an admin token (--token-file or $LUDUS_PROXY_TOKEN): agents hold their episode "
            "keys, and only the token may open and end episodes"
        )
    app = openai_app(
        RecordingBackend(policy, book),
        allow_origins=allow_origins,
        allow_hosts=allow_hosts,
        lifespan=lambda app: policy.running(),
        defaults=defaults,
    )
    app.state.book = book

    async def admin(request: Request) -> None:  # a plain def would cost a thread hop per request (FastAPI)
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(credentials.strip().encode(), token):
            raise OpenAIError(
                401, "the episode endpoints need the proxy's token as 'Authorization: Bearer TOKEN'", "unauthorized"
            )

    @app.post("/ludus/episodes", dependencies=[Depends(admin)])
    async def open_episode(metadata: Annotated[dict[str, Any] | None, Body()] = None) -> dict[str, Any]:
        episode = book.open(metadata)
        return {"key": episode.key, "id": episode.id}

    @app.get("/ludus/episodes/{key}", dependencies=[Depends(admin)])
    async def show_episode(key: str) -> JSONResponse:
        return JSONResponse(book.view(key))

    @app.post("/ludus/episodes/{key}/end", dependencies=[Depends(admin)])
    async def end_episode(key: str, body: Annotated[_End | None, Body()] = None) -> Response:
        score = _score(body)
        trajectory = await asyncio.to_thread(book.end, key, score)  # the file is synced off the event loop
        return Response(trajectory.to_json(), media_type="application/json")

    return app


__all__ = ["Episode", "EpisodeBook", "RecordingBackend", "proxy_app"]
