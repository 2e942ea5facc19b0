"""The loopback OpenAI endpoint that agents in training call: one per process, shared by every
:class:`~ludus.agents.AgentEnv` in it.

Each episode gets a line: a fresh secret key, which the agent uses as its API key. A chat call
made with that key is handed to the episode's environment (as the next observation) and waits
there until the policy's reply comes back from the rollout engine; calls with an unknown key, or
after the episode ended, are refused in OpenAI's error format and never reach an episode. The
model behind the endpoint is whatever the engine runs: the endpoint samples nothing itself, so
every token of the episode is the engine's, recorded as it was sampled.

Calls of one episode are answered one at a time, in the order they arrive (an episode is one
conversation with the policy); an agent that fans out in parallel gets its answers in turn.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import queue
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ludus.core.types import Message
from ludus.policies.base import Completion
from ludus.serve.openai_front import ChatCall, OpenAIError

MAX_WAITING_CALLS = 64  # an episode's calls queued behind the one being answered


@dataclass
class PendingCall:
    """A model call of the agent, waiting for the policy's reply."""

    call: ChatCall
    reply: concurrent.futures.Future[list[Completion]]
    arrived: float = field(default_factory=time.monotonic)

    def answer(self, message: Message) -> None:
        finish = "tool_calls" if message.tool_calls else "stop"
        completion = Completion(message.content, [], [], [], finish, tool_calls=list(message.tool_calls))
        if not self.reply.done():
            self.reply.set_result([completion])

    def refuse(self, error: OpenAIError) -> None:
        if not self.reply.done():
            self.reply.set_exception(error)


class EpisodeLine:
    """One episode's connection to the gateway: its key, and its agent's calls in arrival order
    (with anything else the environment waits for, in the same queue: ``events``)."""

    def __init__(self, gateway: AgentGateway):
        self.gateway = gateway
        self.key = "ludus-" + secrets.token_urlsafe(24)
        self.events: queue.Queue[Any] = queue.Queue()
        self.base_url = gateway.base_url
        self.closed: str | None = None  # why, once closed

    def close(self, reason: str) -> None:
        """Refuse this episode's calls from now on (and those still waiting) with ``reason``."""
        self.closed = reason
        self.gateway._lines.pop(self.key, None)
        while True:
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                return
            if isinstance(event, PendingCall):
                event.refuse(OpenAIError(403, reason, "episode_ended"))


class _Backend:
    """The front's backend: routes each chat call to the line its key names."""

    model_name = "ludus-policy"
    serves_any_model = True  # the agent keeps the model name it was written for

    def __init__(self, lines: dict[str, EpisodeLine]):
        self.lines = lines

    async def chat(self, call: ChatCall) -> list[Completion]:
        line = self.lines.get(call.key or "")
        if line is None:
            raise OpenAIError(
                401,
                "no running episode has this API key: use the key your episode was given "
                "(its OPENAI_API_KEY); an episode's key stops working when it ends",
                "invalid_api_key",
            )
        if call.n != 1:
            raise OpenAIError(400, f"n={call.n}: an episode's calls take one reply each (n=1)", "invalid_value", "n")
        if line.events.qsize() >= MAX_WAITING_CALLS:
            raise OpenAIError(
                429,
                f"{MAX_WAITING_CALLS} calls of this episode are already waiting: one conversation at a time",
                "busy",
            )
        pending = PendingCall(call, concurrent.futures.Future())
        line.events.put(pending)
        if line.closed is not None:  # closed from the episode's thread since it was looked up: no one takes it now
            pending.refuse(OpenAIError(403, line.closed, "episode_ended"))
        return await asyncio.wrap_future(pending.reply)


class AgentGateway:
    """The process's endpoint (started on first use, on 127.0.0.1, a free port)."""

    _shared: ClassVar[tuple[int, AgentGateway] | None] = None  # with the pid that started it
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:

        from ludus.serve.net import address, guarded_server, listen
        from ludus.serve.openai_front import openai_app

        self._lines: dict[str, EpisodeLine] = {}
        app = openai_app(_Backend(self._lines))
        self._sock = listen("127.0.0.1", 0)
        self.base_url = address(self._sock) + "/v1"
        self._server = guarded_server(app)
        started = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(started,), daemon=True, name="ludus-agent-gateway")
        self._thread.start()
        started.wait()
        if not self._server.started:
            raise RuntimeError("the agent gateway could not start on 127.0.0.1 (see the log above)")

    def _serve(self, started: threading.Event) -> None:
        async def serve() -> None:
            serving = asyncio.create_task(self._server.serve(sockets=[self._sock]))
            while not self._server.started and not serving.done():
                await asyncio.sleep(0.01)
            started.set()
            await serving

        try:
            asyncio.run(serve())
        finally:
            started.set()

    @classmethod
    def shared(cls) -> AgentGateway:
        with cls._lock:
            # a forked process (a Ray worker, an env server's) inherits the object, not its thread
            if cls._shared is None or cls._shared[0] != os.getpid():
                cls._shared = (os.getpid(), AgentGateway())
            return cls._shared[1]

    def open(self) -> EpisodeLine:
        """A new episode's line; its key is accepted from now until :meth:`EpisodeLine.close`."""
        line = EpisodeLine(self)
        self._lines[line.key] = line
        return line
