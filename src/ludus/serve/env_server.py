"""``ludus serve-env``: any registered environment over HTTP and WebSocket, graded on the server.

Trainers and agents that run elsewhere (TRL, verl, another machine's ``ludus train``) play
episodes here: the server holds one live environment per *session*, the client sends the
model's messages and receives only what the environment adds. Tasks are chosen by split and
index, so gold answers and hidden tests never leave this process. docs/serving.md is the
protocol; :class:`ludus.rollout.remote.RemoteEnv` and ``ServerHost`` are its clients.

Failure rules, the same as the rollout engine's:

* an exception or a hang inside an environment ends that episode with an ``infra_error``
  score (a hung call is abandoned on its thread and its session dropped), never a hang of the
  server or a reward;
* a dropped connection loses nothing: sessions belong to the server, not to a connection, and
  a step repeated with the same ``turn`` (a client retrying after a lost reply) returns the
  recorded reply instead of acting twice;
* load beyond the limits is refused at once with ``503`` and ``Retry-After`` (sessions, pending
  environment calls) or ``413`` (request size), never queued without bound;
* ``SIGTERM`` drains: new episodes are refused, running ones may finish (up to
  ``drain_timeout_s``), then the server exits;
* hostile clients are bounded below the protocol (``net.GuardedHttp``: request heads,
  pipelining, slow and idle connections, their number, from the file descriptors; WebSockets:
  ids, unsent replies, idle sockets), and browser pages are refused unless allowed
  (``browser.BrowserGuard``: Host, Origin, Sec-Fetch-Site): loopback is reachable from any page
  a user opens.

It is a bare ASGI application (no framework between the socket and the environment): uvicorn
serves it, ``httptools`` parses HTTP and ``websockets`` speaks WebSocket.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import json
import math
import re
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ludus.core.env import Env, EnvStateError
from ludus.core.types import Message, Observation, Score, Status, StepResult, Task
from ludus.rollout.hosts import EnvCalls, ThreadHost
from ludus.rollout.remote import redacted_env_args
from ludus.serve.browser import BrowserGuard, BrowserRules

if TYPE_CHECKING:
    from ludus.serve.net import ConnectionGuard

try:  # JSON in and out is a tenth of a request's server time with the standard library
    import orjson
except ImportError:  # pragma: no cover - the serve extra brings it
    orjson = None  # type: ignore[assignment]

PROTOCOL = 1
LOOPBACK = ("127.0.0.1", "::1", "localhost")
_SESSION_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MAX_ID_CHARS = 128  # a WebSocket message's id, echoed in its reply
WINDOW = 256  # requests in progress on one WebSocket: past it, reading waits
MAX_UNSENT = 4 << 20  # bytes of replies waiting to be sent on one WebSocket: past it, reading waits
MIN_TOKEN_CHARS = 16
_SPLITS = ("train", "eval")
MAX_INDEX = 2**63 - 1  # a task index past it is refused: no source needs more, and JSON clients lose precision

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class ServerLimits:
    """What one server accepts before it refuses, and how long it waits.

    ``max_pending`` bounds environment calls running or queued for a thread: past it a request
    is refused with ``503`` instead of waiting in an unbounded queue."""

    max_sessions: int = 10_000
    max_pending: int = 4_096
    max_request_bytes: int = 1 << 20
    idle_timeout_s: float = 600.0
    call_timeout_s: float = 300.0
    drain_timeout_s: float = 30.0
    # scores go out with their graders' reasons and extracted answers, which can name the gold
    # answer ("expected 42, got 41"); off (the default), with status and value only
    show_reasons: bool = False
    # reset takes a whole ``task`` from a client, checked by ``Env.client_task``; off (the
    # default), tasks are the server's own, picked by split and index
    allow_client_tasks: bool = False
    threads: int = 32
    # browser pages whose requests are served (``https://app.example``), and DNS names the server
    # answers to besides localhost and IP addresses (browser.BrowserRules): a page must not drive
    # sessions through a user's browser
    allow_origins: tuple[str, ...] = ()
    allow_hosts: tuple[str, ...] = ()
    # the connection layer (net.GuardedHttp): open connections at most (None: what the file
    # descriptors allow, see serve()), seconds a client has to send a whole request or to read
    # its replies, and requests one connection may send ahead of their replies
    max_connections: int | None = None
    request_timeout_s: float = 10.0
    max_pipelined: int = 32
    # on SIGTERM, an episode with no call in progress keeps the drain waiting only if its last
    # request is this recent (a client between turns); one reset and left is not waited for
    drain_idle_s: float = 10.0
    # a WebSocket with no request in progress for this long is closed (its client reconnects)
    ws_idle_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        for name in ("max_sessions", "max_pending", "max_request_bytes", "threads", "max_pipelined"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_connections is not None and self.max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {self.max_connections}")
        timeouts = ("idle_timeout_s", "call_timeout_s", "drain_timeout_s", "request_timeout_s", "drain_idle_s")
        for name in (*timeouts, "ws_idle_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        self.browser_rules()  # a bad origin or host name stops the server at start

    def browser_rules(self) -> BrowserRules:
        return BrowserRules(self.allow_origins, self.allow_hosts)


class Refusal(Exception):
    """A request the server will not carry out: an HTTP status, a machine-readable ``kind`` and
    a sentence saying what to do."""

    def __init__(self, status: int, kind: str, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.status, self.kind, self.retry_after = status, kind, retry_after

    def body(self) -> dict[str, Any]:
        return {"error": {"type": self.kind, "message": str(self)}}


@dataclass(eq=False)
class _ClientSession:
    """A client's session: its environment on this server and the state of its episode."""

    id: str
    env: Any  # the environment as the ThreadHost runs it (a HostedEnv); ``.env`` is the Env itself
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    turn: int = 0  # steps completed in the current episode
    running: bool = False  # an episode is under way
    replay: tuple[int, dict[str, Any]] | None = None  # (turn, reply) of the last step, for retries
    last_used: float = field(default_factory=time.monotonic)
    busy: int = 0  # requests being served

    async def __aenter__(self) -> None:
        """``async with session``: one request at a time on it; ``busy`` keeps the reaper off."""
        self.busy += 1
        try:
            await self.lock.acquire()
        except BaseException:
            self.busy -= 1
            raise

    async def __aexit__(self, *exc: object) -> None:
        self.lock.release()
        self.busy -= 1
        self.last_used = time.monotonic()


def public_task(task: Task) -> dict[str, Any]:
    """What a client may know of a task: no ``answer``, no ``info`` (hidden tests live there)."""
    return {"id": task.id, "prompt": task.prompt, "source": task.source}


class EnvServer:
    """The ASGI application: ``uvicorn.run(EnvServer(factory))``. ``factory`` makes one
    environment per session; ``token``, when set, is required as ``Authorization: Bearer``;
    ``env_args``, when given, are reported in ``/info`` so that clients can check they train on
    the environment they configured. Served by :func:`serve`, or by ``uvicorn.Config(app,
    **app.uvicorn_options())`` to keep the connection-layer limits. ``on_warning`` (default:
    stderr) hears of splits left out or empty."""

    def __init__(
        self,
        factory: Callable[[], Env],
        *,
        token: str | None = None,
        limits: ServerLimits | None = None,
        env_args: dict[str, Any] | None = None,
        on_warning: Callable[[str], None] | None = None,
    ):
        from ludus.serve.net import ConnectionGuard

        self.factory, self.limits = factory, limits or ServerLimits()
        self._token = checked_token(token)
        warn = on_warning or _warn
        probe = factory()  # the environment's description, and a clear error now rather than per session
        try:
            self.info = {
                **_describe(probe),
                "env_args": None if env_args is None else redacted_env_args(env_args),
                "max_request_bytes": self.limits.max_request_bytes,
            }
            self._client_task = probe.client_task  # checks data only: the probe being closed is no matter
            self._sources: dict[str, Any] = {}
            sizes: dict[str, int | None] = {}
            for split in _SPLITS:
                try:
                    source = probe.task_source(split)
                    sizes[split] = source.size
                except NotImplementedError:
                    continue
                except Exception as exc:  # noqa: BLE001 - one split's failure leaves the others served
                    warn(f"the {split} split is left out: its task source failed ({_describe_exc(exc)})")
                    continue
                if sizes[split] == 0:
                    warn(f"the {split} split has no tasks: every request for one is refused (404 unknown_task)")
                self._sources[split] = source
            self.info["splits"] = sizes
            self._quick_lookup = probe.quick  # procedural sources: a task costs less than a thread hop
        finally:
            probe.close()
        self._host: ThreadHost | None = None
        self.sessions: dict[str, _ClientSession] = {}
        self.pending = 0
        self.draining = False
        self.counts: Counter[str] = Counter()
        self.started = time.time()
        self.loop_lag_s = 0.0
        self.max_loop_lag_s = 0.0
        self._background: list[asyncio.Task[None]] = []
        # call time limits, counted in ticks of the sweep in _expire
        self._tick, self._tick_s = 0, min(1.0, self.limits.call_timeout_s / 20)
        self._ticks_allowed = math.ceil(self.limits.call_timeout_s / self._tick_s)
        self._deadlines: dict[asyncio.Task[Any], int] = {}
        self._expired: dict[asyncio.Task[Any], bool] = {}
        limits = self.limits
        self.guard = ConnectionGuard(  # the connection layer's limits (uvicorn_options) and WebSockets' idling
            limits.max_connections or max(16, _spare_descriptors(limits.threads)),
            limits.request_timeout_s,
            limits.max_pipelined,
        )
        self._guarded = BrowserGuard(self._serve, rules=limits.browser_rules(), counts=self.counts)

    # ---- the operations, shared by HTTP and WebSocket -----------------------------------------
    async def op_reset(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.draining:
            raise Refusal(503, "draining", "the server is shutting down: start new episodes on another server", 1.0)
        sid = body.get("session_id") or uuid.uuid4().hex
        if not isinstance(sid, str) or not _SESSION_ID.fullmatch(sid):
            raise Refusal(400, "bad_request", "session_id must be 1-64 characters of A-Z a-z 0-9 _ . -")
        seed = body.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise Refusal(400, "bad_request", f"seed must be an integer, got {_shown(seed)}")
        task = self._task_for(body, seed)  # before any session: a refused reset builds none
        session = self.sessions.get(sid)
        created = session is None
        if session is None:
            if len(self.sessions) >= self.limits.max_sessions:
                raise Refusal(
                    503, "too_many_sessions", f"all {self.limits.max_sessions} sessions are in use: close some", 1.0
                )
            env = await self._call(self.host.open(self.factory), "environment construction")
            session = self.sessions.setdefault(sid, _ClientSession(sid, env))
            created = session.env is env
            if not created:  # a concurrent retry created it first
                await env.close()
        async with session:
            try:
                obs: Observation = await self._call(
                    session.env.reset(task, seed), "reset", quick=session.env.calls is EnvCalls.QUICK
                )
            except Refusal as refusal:
                if refusal.kind == "timeout" or created:
                    await self._drop(session)  # its thread may never come back; a new session holds no episode
                raise
            except Exception as exc:  # noqa: BLE001 - the environment's failure, reported as such
                await self._drop(session)
                raise Refusal(500, "env_error", f"reset failed in the environment: {_describe_exc(exc)}") from None
            session.turn, session.running, session.replay = 0, True, None
            self.counts["episodes"] += 1
            return {"session_id": sid, "observation": obs.to_dict(), "task": public_task(session.env.env.task)}

    async def op_step(self, body: dict[str, Any]) -> dict[str, Any]:
        session = self._session(body)
        try:
            action = Message.from_dict(body["action"])
        except (KeyError, TypeError, ValueError) as exc:
            raise Refusal(400, "bad_request", f"step needs an 'action' message object ({exc})") from None
        turn = body.get("turn")
        async with session:
            if session.replay is not None and turn == session.replay[0]:
                self.counts["replays"] += 1
                return session.replay[1]  # the reply to this very step was lost on its way: send it again
            if not session.running:
                raise Refusal(409, "no_episode", "this session has no running episode: reset it first")
            if turn is not None and turn != session.turn:
                raise Refusal(409, "wrong_turn", f"the episode is at turn {session.turn}, the request says {turn}")
            try:
                result: StepResult = await self._call(
                    session.env.step(action), "step", quick=session.env.calls is EnvCalls.QUICK
                )
            except (EnvStateError, TypeError) as exc:
                raise Refusal(400, "bad_request", str(exc)) from None
            except Refusal as refusal:
                if refusal.kind != "timeout":
                    raise
                await self._drop(session)  # its thread may never come back
                result = _failed(str(refusal))
            except Exception as exc:  # noqa: BLE001 - an environment bug: the episode's infra_error
                result = _failed(f"the environment raised {_describe_exc(exc)}")
            if not self.limits.show_reasons and result.score is not None:
                result.score.reason, result.score.extracted = result.score.status, None
            reply = {"result": result.to_dict()}
            session.replay = (session.turn, reply)
            session.turn += 1
            session.running = not result.done
            self.counts["steps"] += 1
            return reply

    async def op_close(self, body: dict[str, Any]) -> dict[str, Any]:
        session = self.sessions.get(_session_id(body))
        if session is not None:
            await self._drop(session)
        return {"closed": session is not None}

    async def op_tools(self, body: dict[str, Any]) -> dict[str, Any]:
        session = self._session(body)
        return {"tools": [t.to_dict() for t in session.env.env.tools()]}

    async def op_task(self, body: dict[str, Any]) -> dict[str, Any]:
        task = self._loader(body.get("split", "train"), body.get("index"))
        if not isinstance(task, Task):
            task = await self._call(self.host.run(task), "task lookup")
        return {"task": public_task(task)}

    async def op_info(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.info

    OPS = {"reset": op_reset, "step": op_step, "close": op_close, "tools": op_tools, "task": op_task, "info": op_info}

    async def dispatch(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        handler = self.OPS.get(op)
        if handler is None:
            raise Refusal(404, "unknown_op", f"no operation {op!r}; there are {', '.join(self.OPS)}")
        self.counts[f"op_{op}"] += 1
        return await handler(self, body)

    # ---- helpers -------------------------------------------------------------------------------
    @property
    def host(self) -> ThreadHost:
        if self._host is None:
            self._host = ThreadHost(self.limits.threads)
        return self._host

    def _session(self, body: dict[str, Any]) -> _ClientSession:
        session = self.sessions.get(_session_id(body))
        if session is None:
            raise Refusal(
                404, "unknown_session", "no such session (closed, idle too long, or the server restarted): reset"
            )
        return session

    def _task_for(self, body: dict[str, Any], seed: int) -> Task | Callable[[], Task]:
        if body.get("task") is not None:
            if not self.limits.allow_client_tasks:
                raise Refusal(
                    403,
                    "client_tasks_off",
                    "this server plays its own tasks, chosen by split and index; to send whole tasks, "
                    "start it with --allow-client-tasks",
                )
            try:
                return self._client_task(body["task"])
            except ValueError as exc:
                raise Refusal(400, "bad_request", f"'task' is refused: {exc}") from None
        index = body.get("index")
        return self._loader(body.get("split", "train"), seed if index is None else index)

    def _loader(self, split: Any, index: Any) -> Task | Callable[[], Task]:
        """Task ``index`` of ``split``, or, when its source may do I/O, a function that loads it
        (called on the environment thread that runs the reset: no extra hop)."""
        source = self._sources.get(split) if isinstance(split, str) else None
        if source is None:
            raise Refusal(
                404, "unknown_split", f"this environment has no {_shown(split)} split; it has {list(self._sources)}"
            )
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index <= MAX_INDEX:
            raise Refusal(400, "bad_request", f"index must be an integer from 0 to 2**63 - 1, got {_shown(index)}")
        if source.size is not None and index >= source.size:
            raise Refusal(404, "unknown_task", f"the {split} split has {source.size} tasks; index {index} is past it")
        load = functools.partial(_load_task, source, split, index)
        return load() if self._quick_lookup else load

    async def _call(self, call: Awaitable[Any], what: str, quick: bool = False) -> Any:
        """An environment call under the pending-calls bound and the call time limit."""
        if quick:
            return await call
        if self.pending >= self.limits.max_pending:
            with contextlib.suppress(Exception):
                call.close()  # type: ignore[attr-defined]  # a coroutine never awaited
            self.counts["refused_busy"] += 1
            raise Refusal(503, "busy", f"{self.pending} environment calls are pending: retry shortly", 0.5)
        self.pending += 1
        task = asyncio.current_task()
        assert task is not None
        self._deadlines[task] = self._tick + self._ticks_allowed
        try:
            return await call
        except asyncio.CancelledError:
            if task not in self._expired:
                raise
            self.counts["timeouts"] += 1
            self.counts["threads_replaced"] += self.host.replace_abandoned()  # new calls must not wait on it
            limit = self.limits.call_timeout_s
            raise Refusal(504, "timeout", f"the environment's {what} did not finish within {limit} s") from None
        finally:
            self.pending -= 1
            self._deadlines.pop(task, None)
            if self._expired.pop(task, False):
                task.uncancel()  # the cancellation was the time limit's: the request goes on to answer

    async def _expire(self) -> None:
        """The call time limit: a sweep cancels the requests whose environment call has run past
        it. Cheaper than a timer per call (``asyncio.timeout``), at the price of a limit kept to
        within a twentieth of itself."""
        while True:
            await asyncio.sleep(self._tick_s)
            self._tick += 1
            for task, deadline in list(self._deadlines.items()):
                if deadline < self._tick and not self._expired.get(task):
                    self._expired[task] = True
                    task.cancel()

    async def _drop(self, session: _ClientSession) -> None:
        if self.sessions.get(session.id) is session:
            del self.sessions[session.id]
            session.running = False
            await session.env.close()  # queued on a thread: returns at once

    # ---- background work: idle sessions, event-loop lag, draining ------------------------------
    async def start(self) -> None:
        jobs = (self._reap, self._watch_loop, self._expire, self._close_idle_sockets)
        self._background = [asyncio.create_task(job()) for job in jobs]

    async def stop(self) -> None:
        for task in self._background:
            task.cancel()
        for session in list(self.sessions.values()):
            await self._drop(session)
        if self._host is not None:
            self._host.shutdown()

    async def _reap(self) -> None:
        period = min(self.limits.idle_timeout_s / 4, 30.0)
        while True:
            await asyncio.sleep(period)
            cutoff = time.monotonic() - self.limits.idle_timeout_s
            for session in [s for s in self.sessions.values() if not s.busy and s.last_used < cutoff]:
                self.counts["sessions_reaped"] += 1
                await self._drop(session)

    async def _close_idle_sockets(self) -> None:
        idle_s = self.limits.ws_idle_timeout_s
        while True:
            await asyncio.sleep(min(idle_s / 4, 5.0))
            self.guard.close_idle_sockets(idle_s)

    async def _watch_loop(self) -> None:
        loop, period = asyncio.get_running_loop(), 0.05
        while True:
            before = loop.time()
            await asyncio.sleep(period)
            self.loop_lag_s = max(0.0, loop.time() - before - period)
            self.max_loop_lag_s = max(self.max_loop_lag_s, self.loop_lag_s)

    async def drain(self) -> None:
        """Refuse new episodes; return once no call is in progress and no running episode has
        had a request within ``drain_idle_s`` (one reset and left must not hold the exit), or at
        the drain time limit. Sessions are closed either way."""
        self.draining = True
        deadline = time.monotonic() + self.limits.drain_timeout_s
        while (now := time.monotonic()) < deadline and (
            self.pending
            or any(
                s.busy or (s.running and now - s.last_used < self.limits.drain_idle_s) for s in self.sessions.values()
            )
        ):
            await asyncio.sleep(0.05)
        for session in list(self.sessions.values()):
            await self._drop(session)

    def uvicorn_options(self) -> dict[str, Any]:
        """``uvicorn.Config`` options that bound clients at the connection layer
        (:class:`ludus.serve.net.GuardedHttp`, ``GuardedWebSocket``); counters go to ``/metrics``."""
        from ludus.serve.net import connection_options

        return {**connection_options(self.guard), "ws_max_size": self.limits.max_request_bytes}

    def metrics(self) -> str:
        """Prometheus text format."""
        lines = [
            f"ludus_env_sessions {len(self.sessions)}",
            f"ludus_env_max_sessions {self.limits.max_sessions}",
            f"ludus_env_running_episodes {sum(s.running for s in self.sessions.values())}",
            f"ludus_env_pending_calls {self.pending}",
            f"ludus_env_draining {int(self.draining)}",
            f"ludus_env_event_loop_lag_seconds {self.loop_lag_s:.6f}",
            f"ludus_env_event_loop_lag_max_seconds {self.max_loop_lag_s:.6f}",
            f"ludus_env_uptime_seconds {time.time() - self.started:.1f}",
        ]
        guard = self.guard
        lines.append(f"ludus_env_max_connections {guard.max_connections}")
        lines.append(f"ludus_env_idle_connections {len(guard.idle)}")
        lines.append(f"ludus_env_idle_websockets {len(guard.idle_sockets)}")
        events = {"connections_evicted": guard.evicted, "connections_refused": guard.refused}
        events |= {"connections_timed_out": guard.timed_out, "connections_overflowed": guard.overflowed}
        events |= {"heads_refused": guard.heads_refused, "websockets_closed_idle": guard.sockets_closed_idle}
        lines += [f'ludus_env_events_total{{event="{k}"}} {v}' for k, v in events.items()]
        lines += [f'ludus_env_events_total{{event="{k}"}} {v}' for k, v in sorted(self.counts.items())]
        return "\n".join(lines) + "\n"

    # ---- ASGI ------------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        else:
            await self._guarded(scope, receive, send)  # browser pages refused, then _serve

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self._websocket(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _authorized(self, scope: Scope) -> bool:
        """``Authorization: Bearer TOKEN``, the scheme's case aside (RFC 6750 follows RFC 7235)."""
        if self._token is None:
            return True
        scheme, _, credentials = (_header(scope, b"authorization") or b"").partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(credentials.strip(b" "), self._token)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        method, path = scope["method"], scope["path"]
        try:
            if path == "/health" and method == "GET":
                status = "draining" if self.draining else "ok"
                body = {"status": status, "env": self.info["env"], "sessions": len(self.sessions)}
                return await _respond(send, 503 if self.draining else 200, body)
            if not self._authorized(scope):
                raise Refusal(401, "unauthorized", "send the server's token as 'Authorization: Bearer TOKEN'")
            if path == "/metrics" and method == "GET":
                return await _respond_bytes(send, 200, self.metrics().encode(), b"text/plain; version=0.0.4")
            if path == "/info" and method == "GET":
                return await _respond(send, 200, self.info)
            if path.startswith("/tasks/") and method == "GET":
                split, _, index = path[len("/tasks/") :].partition("/")
                body = {"split": split, "index": _path_index(index)}
                return await _respond(send, 200, await self.dispatch("task", body))
            op = path[1:]
            if method != "POST" or op not in self.OPS:
                raise Refusal(404, "not_found", f"no route {method} {path}; see docs/serving.md")
            body = await self._read_json(scope, receive)
            await _respond(send, 200, await self.dispatch(op, body))
        except Refusal as refusal:
            await _respond(send, refusal.status, refusal.body(), refusal.retry_after)

    async def _read_json(self, scope: Scope, receive: Receive) -> dict[str, Any]:
        limit = self.limits.max_request_bytes
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise Refusal(413, "too_large", f"the request is {int(declared)} bytes; the limit is {limit}")
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise Refusal(400, "disconnected", "the client went away")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise Refusal(413, "too_large", f"the request is over the {limit}-byte limit")
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        return _parse(b"".join(chunks))

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One JSON request per message, ``{"id", "op", ...}``; replies carry the same ``id``
        and may come out of order. A connection may drive many sessions; dropping it ends none.
        What it may make the server hold is bounded: ``WINDOW`` requests in progress, and no
        message read while more than ``MAX_UNSENT`` bytes of replies wait to be sent."""
        if (await receive())["type"] != "websocket.connect":
            return
        await send({"type": "websocket.accept"})  # refusals below are close codes, which clients can read
        if not self._authorized(scope):
            reason = "unauthorized: send the server's token as 'Authorization: Bearer TOKEN'"
            await send({"type": "websocket.close", "code": 1008, "reason": reason})
            return
        socket = _Socket(send, self.guard, self.limits.ws_idle_timeout_s)
        pending: set[asyncio.Task[None]] = set()
        try:
            while socket.open:  # what a client sent before it went away is not carried out
                await socket.room.wait()
                await socket.window.acquire()
                message = await receive()
                if message["type"] == "websocket.disconnect":
                    break
                socket.begin()
                task = asyncio.create_task(self._answer(socket, message.get("text") or message.get("bytes") or b""))
                pending.add(task)
                task.add_done_callback(pending.discard)
                if len(pending) >= 16:  # those started run to their replies (counted in unsent) before more is read
                    await asyncio.sleep(0)
        finally:
            socket.end()  # running requests finish (their sessions record the replies); nothing is cancelled

    async def _answer(self, socket: _Socket, raw: str | bytes) -> None:
        """One WebSocket request carried out and its reply sent (or, the client gone, dropped)."""
        try:
            try:
                request: Any = _decode(raw)
            except ValueError:
                request = None
            rid = request.get("id") if isinstance(request, dict) else None
            try:
                if not _is_id(rid):  # one that could not be sent back, or would swell every reply
                    rid = None
                    raise Refusal(
                        400,
                        "bad_request",
                        f"a message's id is a string of {MAX_ID_CHARS} characters at most, a number or null",
                    )
                if not isinstance(request, dict) or not isinstance(request.get("op"), str):
                    raise Refusal(400, "bad_request", 'each message is a JSON object with an "op"')
                reply = {"id": rid, "ok": True, **(await self.dispatch(request["op"], request))}
            except Refusal as refusal:
                reply = {"id": rid, "ok": False, "status": refusal.status, **refusal.body()}
                if refusal.retry_after is not None:
                    reply["retry_after"] = refusal.retry_after
            try:
                data = _encode(reply)
            except Refusal as refusal:
                data = _encode({"id": rid, "ok": False, "status": refusal.status, **refusal.body()})
            await socket.reply(data)
        finally:
            socket.done()


class _Socket:
    """One WebSocket's share of the server: replies go out one at a time; ``window`` bounds
    requests in progress and ``room`` is cleared while more than ``MAX_UNSENT`` bytes of replies
    wait to be sent (reading stops, so a client that does not read cannot make the server hold
    more; ``GuardedWebSocket`` closes it once its replies sit unread for the request timeout).
    With no request in progress it is idle in the guard's list, to be closed after
    ``idle_s`` or to make room for a new connection."""

    def __init__(self, send: Send, guard: ConnectionGuard, idle_s: float) -> None:
        self._send, self.guard, self.idle_s = send, guard, idle_s
        self.sending = asyncio.Lock()
        self.window = asyncio.Semaphore(WINDOW)
        self.room = asyncio.Event()
        self.room.set()
        self.unsent = 0
        self.in_progress = 0
        self.open = True
        self.closing: asyncio.Task[None] | None = None
        guard.socket_idle(self, self.close)

    def begin(self) -> None:
        self.in_progress += 1
        self.guard.socket_busy(self)

    def done(self) -> None:
        self.window.release()
        self.in_progress -= 1
        if not self.in_progress and self.open:
            self.guard.socket_idle(self, self.close)

    def end(self) -> None:
        self.open = False
        self.guard.socket_busy(self)

    async def reply(self, data: bytes) -> None:
        self.unsent += len(data)
        if self.unsent > MAX_UNSENT:
            self.room.clear()
        try:
            if self.open:
                async with self.sending:
                    try:
                        await self._send({"type": "websocket.send", "text": data.decode()})
                    except Exception:  # noqa: BLE001 - the client left; the session keeps the reply
                        self.open = False
        finally:
            self.unsent -= len(data)
            if self.unsent <= MAX_UNSENT:
                self.room.set()

    def close(self) -> None:
        """Close the socket for idling (its client reconnects when it needs to)."""
        reason = f"idle: no request for {self.idle_s:g} s (or its connection was needed); reconnect to go on"
        self.closing = asyncio.ensure_future(self._close(reason))

    async def _close(self, reason: str) -> None:
        async with self.sending:
            with contextlib.suppress(Exception):  # already closed
                await self._send({"type": "websocket.close", "code": 1000, "reason": reason[:123]})


def _is_id(rid: Any) -> bool:
    """A WebSocket message's id: short text, a number or null."""
    if isinstance(rid, str):
        return len(rid) <= MAX_ID_CHARS
    return rid is None or (isinstance(rid, int | float) and not isinstance(rid, bool))


def _header(scope: Scope, name: bytes) -> bytes | None:
    return next((v for k, v in scope["headers"] if k == name), None)


def _encode(obj: Any) -> bytes:
    """``obj`` as JSON; a value that has no JSON form (an environment's ``info`` holding an
    object, say) is the environment's failure, refused with its reason rather than dropped."""
    if orjson is not None:
        with contextlib.suppress(TypeError):  # integers past 64 bits: the standard library's rules
            return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS)
    try:
        return json.dumps(obj).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        raise Refusal(500, "env_error", f"the environment's reply has no JSON form ({exc})") from None


def _decode(raw: str | bytes) -> Any:
    try:
        return orjson.loads(raw) if orjson is not None else json.loads(raw)
    except RecursionError:  # the standard library's parser on deep nesting (orjson stops at 1,024)
        raise ValueError("nested too deep") from None


def _parse(raw: bytes) -> dict[str, Any]:
    try:
        body = _decode(raw) if raw else {}
    except ValueError as exc:
        raise Refusal(400, "bad_request", f"the body is not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise Refusal(400, "bad_request", "the body must be a JSON object")
    return body


async def _respond(send: Send, status: int, body: dict[str, Any], retry_after: float | None = None) -> None:
    extra = [] if retry_after is None else [(b"retry-after", str(max(1, math.ceil(retry_after))).encode())]
    await _respond_bytes(send, status, _encode(body), b"application/json", extra)


async def _respond_bytes(
    send: Send, status: int, data: bytes, content_type: bytes, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(data)).encode()), *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def checked_token(token: str | None) -> bytes | None:
    """The token as the bytes a request must carry; refused now if it is guessable or could not
    travel in a header."""
    if not token:
        return None
    if len(token) < MIN_TOKEN_CHARS:
        raise ValueError(
            f"the token is {len(token)} characters; use at least {MIN_TOKEN_CHARS} random ones "
            "(openssl rand -hex 16 makes 32)"
        )
    if not (token.isascii() and token.isprintable()) or " " in token:
        raise ValueError("the token must be printable ASCII without spaces (it travels in an HTTP header)")
    return token.encode()


def _describe(env: Env) -> dict[str, Any]:
    return {
        "protocol": PROTOCOL,
        "env": env.name or type(env).__name__,
        "description": env.description,
        "reward_range": list(env.reward_range),
        "max_turns": env.max_turns,
    }


def _load_task(source: Any, split: str, index: int) -> Task:
    try:
        return source.get(index)
    except Exception as exc:  # noqa: BLE001 - the task source's failure, reported as such
        raise Refusal(500, "env_error", f"task {split}/{index} failed to load: {_describe_exc(exc)}") from None


def _session_id(body: dict[str, Any]) -> str:
    """The session a request names; a missing or non-text id names none (never the session "None")."""
    sid = body.get("session_id")
    if not isinstance(sid, str):
        raise Refusal(400, "bad_request", f"session_id must be a string, got {_shown(sid)}")
    return sid


def _path_index(text: str) -> int | str:
    """A task index from a URL: ASCII digits, short enough to be an index; anything else stays text
    for ``_loader`` to refuse (``int`` would take '²' and fail, or spend time on 5,000 digits)."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 19 else text


def _shown(value: Any) -> str:
    """A client's value quoted in an error message, cut short."""
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "…"


def _describe_exc(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:1000]


def _failed(reason: str) -> StepResult:
    return StepResult(Observation([]), 0.0, terminated=True, score=Score.zero(Status.INFRA_ERROR, reason))


def serve(
    factory: Callable[[], Env],
    *,
    host: str = "127.0.0.1",
    port: int = 8100,
    token: str | None = None,
    limits: ServerLimits | None = None,
    env_args: dict[str, Any] | None = None,
    on_ready: Callable[[str], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM; the first drains (see :meth:`EnvServer.drain`), a second exits
    at once. ``on_ready`` gets the address once the socket listens; ``on_warning`` (default:
    stderr) hears of limits lowered to fit the file descriptors (:func:`fit_to_descriptors`)."""
    import uvicorn

    from ludus.serve.net import address, listen

    if host not in LOOPBACK and not token:
        raise ValueError(
            f"serving on {host} reaches other machines: set a token (--token-file or LUDUS_ENV_TOKEN) so that "
            "only your trainers can play, or bind 127.0.0.1"
        )
    checked_token(token)  # a weak token is refused before any environment is built
    limits = fit_to_descriptors(factory, limits or ServerLimits(), on_warning or _warn)
    app = EnvServer(factory, token=token, limits=limits, env_args=env_args, on_warning=on_warning)
    sock = listen(host, port)
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5, **app.uvicorn_options())

    class DrainingServer(uvicorn.Server):
        """The first exit signal drains the environment server, then stops uvicorn."""

        def handle_exit(self, sig: int, frame: Any) -> None:
            if app.draining or self.loop is None:
                super().handle_exit(sig, frame)
            else:
                app.draining = True
                self.loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self.drain_then_exit()))

        async def drain_then_exit(self) -> None:
            await app.drain()
            self.should_exit = True

        async def serve(self, sockets: Any = None) -> None:
            self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            await super().serve(sockets)

    server = DrainingServer(config)
    server.loop = None
    if on_ready is not None:
        on_ready(address(sock))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


def fit_to_descriptors(factory: Callable[[], Env], limits: ServerLimits, warn: Callable[[str], None]) -> ServerLimits:
    """``limits`` with as many sessions and connections as the process's file descriptors hold
    together. The soft limit is raised to the hard one; a reserve stays for the server's own
    files and for calls in progress (64 + 4 per environment thread); what one session holds is
    measured on two probe environments, each made and reset; sessions get at most half of the
    rest, connections the remainder. Limits set above what fits are lowered, with a warning."""
    from ludus.serve.net import raise_descriptor_limit

    allowed = raise_descriptor_limit()
    per_session = descriptors_per_session(factory)
    spare = _spare_descriptors(limits.threads)
    if spare < 16:
        raise ValueError(
            f"this process may open {allowed} files (ulimit -n), too few to serve: raise the limit or lower --threads"
        )
    sessions = limits.max_sessions
    if per_session and sessions * per_session > spare // 2:
        sessions = max(1, spare // 2 // per_session)
        warn(
            f"max_sessions {limits.max_sessions} lowered to {sessions}: a session holds {per_session} file "
            f"descriptor(s) and this process may open {allowed} (ulimit -n)"
        )
    fit = spare - sessions * per_session
    connections = limits.max_connections or fit
    if connections > fit:
        warn(f"max_connections {connections} lowered to {fit} to fit {allowed} file descriptors (ulimit -n)")
        connections = fit
    return replace(limits, max_sessions=sessions, max_connections=connections)


def descriptors_per_session(factory: Callable[[], Env]) -> int:
    """File descriptors one more session holds: counted around a second probe environment, made
    and reset (the first may open what all sessions share, a pool or a browser)."""
    from ludus.serve.net import open_descriptors

    probes: list[Env] = []
    try:
        counts = [open_descriptors()]
        for _ in range(2):
            probes.append(factory())
            task = _first_task(probes[-1])
            if task is not None:
                with contextlib.suppress(Exception):  # a failing reset is the server's to report, per session
                    probes[-1].reset(task, 0)
            counts.append(open_descriptors())
        return max(0, counts[2] - counts[1])
    finally:
        for probe in probes:
            with contextlib.suppress(Exception):
                probe.close()


def _spare_descriptors(threads: int) -> int:
    """File descriptors this process may still open, less a reserve for the server's own files
    and for environment calls in progress (pipes to a sandbox, a database opened for a step)."""
    from ludus.serve.net import spare_descriptors

    return spare_descriptors(64 + 4 * threads)


def _first_task(env: Env) -> Task | None:
    for split in _SPLITS:
        with contextlib.suppress(Exception):  # a split that gives no task (EnvServer reports it): the next
            return env.task_source(split).get(0)
    return None


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


__all__ = ["EnvServer", "Refusal", "ServerLimits", "checked_token", "fit_to_descriptors", "public_task", "serve"]
