"""Environments on env servers (``ludus serve-env``), used as if they were in this process.

* :class:`RemoteEnv` — one environment on one server, an :class:`~ludus.core.env.Env` with the
  usual sync and async twins, for code that drives environments itself (TRL, verl, a notebook);
* :class:`ServerHost` — an :class:`~ludus.rollout.hosts.EnvHost` for the rollout engine that
  spreads sessions over one or several servers (``ludus eval|train --env-server URL …``);
* :class:`RemoteTasks` — a server's task split, as public views: id and prompt, never the
  answer. Resetting with one of these tasks sends its split and index, and the server grades
  with the task it keeps.

Every request is safe to repeat: the client names its sessions and numbers its steps, so a
retry after a dropped connection, a timeout or a busy server returns the reply of the step
already taken instead of taking it twice. What still fails after the retries raises
:class:`RemoteEnvError` (from ``reset``) or ends the episode with an ``infra_error`` score
(from ``step``), as a failing local environment does.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import re
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from ludus.core.env import Env, Split
from ludus.core.types import Message, Observation, Score, Status, StepResult, Task, ToolSpec
from ludus.rollout.hosts import EnvCalls

REMOTE_KEY = "ludus_remote"  # Task.info key of a task that the server holds: {"split", "index"}
REDACTED = "<redacted>"  # what /info shows for a secret or a seed in env_args
# env_args keys whose values /info never shows, at any depth (case-insensitive, anywhere in the key):
# what makes a seed (a procedural environment's golds follow from it) and what names a credential.
# Deny-leaning: a harmless value hidden costs only the view, since clients compare redacted forms.
_SECRET = (
    r"seed|salt|rng|random|nonce|pass|pwd|secret|token|key|auth|cookie|credential|signature|session|dsn|cert"
    r"|private"
)
_SECRET_KEY = re.compile(_SECRET, re.IGNORECASE)
# a text value that is or carries a credential, whatever its key
_CREDENTIAL = re.compile(
    rf"""
    [a-z][a-z0-9+.-]*://[^/?#\s]*@             # a URL with userinfo (scheme://user:pw@host)
    | [a-z][a-z0-9+.-]*://[^\s?#]*\?           # a URL with a query string (signed URLs, ?key=, ?pwd=)
    | hooks\.slack\.com | /webhooks?/           # webhook URLs: the address is the credential
    | \b(?:bearer|basic)\s+\S                  # an Authorization value
    | \b(?:sk|rk)[-_]\w | \b(?:hf|ghp|gho|ghu|ghs|ghr|npm)_\w | \bgithub_pat_ | \bglpat-
    | \bxox[a-z]-\w | \b(?:AKIA|ASIA)[A-Z0-9]{{12,}} | \bAIza[\w-]{{20,}} | \bya29\. | \beyJ[\w-]+\.
    | -----BEGIN                                # known token prefixes, JWTs, PEM keys
    | (?:{_SECRET})\w*\s*[=:]                    # a secret-named setting inside it (a DSN's password=)
    """,
    re.IGNORECASE | re.VERBOSE,
)
_TOKEN_LIKE = re.compile(r"[A-Za-z0-9_-]{24,}")  # a run as long as a random token


def redacted_env_args(value: Any, key: str = "") -> Any:
    """``env_args`` as an env server's ``/info`` shows them: every seed and secret replaced by
    :data:`REDACTED`, at any depth — by key (``_SECRET``), and any text that looks like a
    credential (:func:`looks_secret`). A client checks a server by comparing this with its own
    ``env_args`` redacted: equal values, and the same keys hidden on both sides."""
    if _SECRET_KEY.search(key):
        return REDACTED
    if isinstance(value, dict):
        return {k: redacted_env_args(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redacted_env_args(v) for v in value]
    if isinstance(value, str) and looks_secret(value):
        return REDACTED
    return value


def looks_secret(text: str) -> bool:
    """Whether ``text`` is or carries a credential: a URL with userinfo or a query string, a
    webhook, an Authorization value, a known token prefix (``sk-``, ``hf_``, ``ghp_``, ``xox…-``,
    ``AKIA…``, a JWT, a PEM key), a secret-named setting, or a run of 24+ letters, digits, ``_``
    and ``-`` that mixes classes (upper, lower, digits) as random tokens do."""
    if _CREDENTIAL.search(text):
        return True
    for run in _TOKEN_LIKE.findall(text):
        if sum((any(c.isupper() for c in run), any(c.islower() for c in run), any(c.isdigit() for c in run))) >= 2:
            return True
    return False


class RemoteEnvError(RuntimeError):
    """The server refused a request or could not be reached. ``kind`` is the server's error type
    (``unknown_session``, ``draining``, ``busy``, …) or ``unreachable``."""

    def __init__(self, kind: str, message: str, status: int | None = None):
        super().__init__(message)
        self.kind, self.status = kind, status


class UnusableEnvServer(ValueError):
    """An env server that cannot stand in for the environment asked for: unreachable, refusing,
    serving another environment or other ``env_args``."""


class Connection:
    """One server: its address, its token, and requests with retries. Sync requests go over
    HTTP (thread-safe); async ones share one WebSocket per event loop, many requests in flight
    on it at once, matched to replies by id — a fraction of an HTTP request's cost each."""

    RETRIED = frozenset({"busy", "too_many_sessions"})

    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 360.0, retries: int = 4):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"an env server address starts with http:// or https://, got {url!r}")
        self.url, self.retries, self.timeout_s = url.rstrip("/"), retries, timeout_s
        self._headers = {"authorization": f"Bearer {token}"} if token else {}
        self._client: httpx.Client | None = None
        self._channels: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Channel] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self.max_request_bytes: int | None = None  # the server's, once info() has asked

    def info(self) -> dict[str, Any]:
        """The server's ``/info``; also learns its request size limit, so that an oversized
        WebSocket message is refused here (the server would close the socket on it)."""
        info = self.request("info")
        self.max_request_bytes = info.get("max_request_bytes")
        return info

    def request(self, op: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """``op`` (reset, step, close, tools, task, info) over HTTP."""
        body = body or {}
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(headers=self._headers, timeout=httpx.Timeout(self.timeout_s, connect=10.0))
        for attempt in range(self.retries + 1):
            try:
                outcome = self._outcome(self._http_reply(self._http(self._client, op, body)), attempt)
            except httpx.TransportError as exc:
                outcome = self._unreachable(exc, attempt)
            if isinstance(outcome, dict):
                return outcome
            time.sleep(outcome)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def arequest(self, op: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """``op`` over this event loop's WebSocket to the server."""
        loop = asyncio.get_running_loop()
        channel = self._channels.get(loop)
        if channel is None:
            channel = self._channels[loop] = _Channel(self)
        for attempt in range(self.retries + 1):
            try:
                outcome = self._outcome(await channel.request(op, body or {}), attempt)
            except (OSError, TimeoutError, EOFError, _Closed) as exc:
                outcome = self._unreachable(exc, attempt)
            if isinstance(outcome, dict):
                return outcome
            await asyncio.sleep(outcome)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _http(self, client: httpx.Client, op: str, body: dict[str, Any]) -> httpx.Response:
        if op == "info":
            return client.get(f"{self.url}/info")
        if op == "task":
            return client.get(f"{self.url}/tasks/{body.get('split')}/{body.get('index')}")
        return client.post(f"{self.url}/{op}", json=body)

    @staticmethod
    def _http_reply(response: httpx.Response) -> dict[str, Any]:
        """An HTTP answer in the WebSocket's shape: ``{"ok": …}`` plus the body."""
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            data = {"error": {"type": "bad_reply", "message": f"HTTP {response.status_code}: {response.text[:200]!r}"}}
        if response.status_code == 200:
            return {"ok": True, **data}
        retry_after = response.headers.get("retry-after")
        return {"ok": False, "status": response.status_code, "retry_after": retry_after, **data}

    def _outcome(self, reply: dict[str, Any], attempt: int) -> dict[str, Any] | float:
        """The reply, or how long to wait before the next attempt; raises when there is none."""
        if reply.get("ok") is True:
            return reply
        error = reply.get("error")
        if not isinstance(error, dict):
            error = {"type": "bad_reply", "message": f"not an env server reply: {str(reply)[:200]}"}
        kind, message = str(error.get("type")), str(error.get("message"))
        if kind in self.RETRIED and attempt < self.retries:
            return max(float(reply.get("retry_after") or 0), self._backoff(attempt))
        raise RemoteEnvError(kind, f"{self.url}: {message}", reply.get("status"))

    def _unreachable(self, exc: BaseException, attempt: int) -> float:
        if attempt < self.retries:
            return self._backoff(attempt)
        raise RemoteEnvError("unreachable", f"{self.url}: {type(exc).__name__}: {exc}") from exc

    @staticmethod
    def _backoff(attempt: int) -> float:
        return min(5.0, 0.2 * 2**attempt) * (0.5 + random.random())

    def close(self) -> None:
        """Close the HTTP client and the WebSockets (those of a loop still running close on it)."""
        if self._client is not None:
            self._client.close()
            self._client = None
        for loop, channel in list(self._channels.items()):
            if loop.is_running():
                loop.call_soon_threadsafe(channel.close)
            elif not loop.is_closed():
                channel.close()
        self._channels.clear()


class _Closed(Exception):
    """The WebSocket closed with requests in flight; they are sent again on a new one."""


class _Channel:
    """One WebSocket to a server for one event loop. Requests carry ids; a reader task hands each
    reply to its waiting request; a dropped socket fails those in flight (to be retried) and the
    next request reconnects."""

    def __init__(self, connection: Connection):
        self.connection = connection
        base = connection.url.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
        self.address = f"{base}/ws"
        self.ws: Any = None
        self.reader: asyncio.Task[None] | None = None
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.ids = itertools.count()
        self.connecting = asyncio.Lock()

    async def request(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        ws = await self._socket()
        rid = next(self.ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[rid] = future
        message = json.dumps({**body, "id": rid, "op": op})
        limit = self.connection.max_request_bytes
        if limit is not None and len(message) > limit:  # ASCII JSON: characters are bytes
            raise RemoteEnvError(
                "too_large", f"the {op} request is {len(message)} bytes; the server takes {limit}", 413
            )
        try:
            await ws.send(message)
            async with asyncio.timeout(self.connection.timeout_s):
                return await future
        except ConnectionClosed as exc:
            raise self._refusal(exc) or _Closed(str(exc)) from None
        finally:
            self.waiting.pop(rid, None)

    async def _socket(self) -> Any:
        async with self.connecting:
            if self.ws is None:
                try:
                    self.ws = await connect(
                        self.address,
                        additional_headers=self.connection._headers,
                        max_size=None,
                        open_timeout=10,
                        ping_interval=20,
                        ping_timeout=60,
                    )
                except InvalidStatus as exc:  # refused before the socket opened (servers before close code 1008)
                    status = exc.response.status_code
                    raise RemoteEnvError(
                        "unauthorized" if status in (401, 403) else "bad_reply",
                        (f"{self.connection.url} refused the WebSocket (HTTP {status}): check the token"),
                        status,
                    ) from None
                self.reader = asyncio.create_task(self._read(self.ws))
            return self.ws

    async def _read(self, ws: Any) -> None:
        failure: Exception = _Closed("the WebSocket closed")
        try:
            async for message in ws:
                reply = json.loads(message)
                future = self.waiting.pop(reply.pop("id", None), None) if isinstance(reply, dict) else None
                if future is not None and not future.done():
                    future.set_result(reply)
        except ConnectionClosed as exc:
            failure = self._refusal(exc) or failure
        except (ValueError, RecursionError):  # not JSON, or nested past Python's limit: the server is broken
            pass
        finally:
            if self.ws is ws:
                self.ws = None
            for future in list(self.waiting.values()):
                if not future.done():
                    future.set_exception(failure)

    def _refusal(self, exc: ConnectionClosed) -> RemoteEnvError | None:
        """The server's refusal of this WebSocket (close code 1008, ``KIND: why``: a wrong token, a
        refused origin), which no retry will change; None for any other close."""
        if exc.rcvd is None or exc.rcvd.code != 1008:
            return None
        kind, _, why = exc.rcvd.reason.partition(": ")
        return RemoteEnvError(
            kind or "unauthorized", f"{self.connection.url} refused the WebSocket (close code 1008): {why or kind}"
        )

    def close(self) -> None:
        if self.ws is not None:
            asyncio.ensure_future(self.ws.close())
            self.ws = None


class RemoteTasks:
    """A server's split: ``get(i)`` is task ``i`` as the server shows it (id, prompt, source)."""

    def __init__(self, connection: Connection, split: Split, size: int | None):
        self.connection, self.split, self.size = connection, split, size
        self._cache: dict[int, Task] = {}

    def get(self, index: int) -> Task:
        if index not in self._cache:
            reply = self.connection.request("task", {"split": self.split, "index": index})
            self._cache[index] = remote_task(reply["task"], self.split, index)
        return self._cache[index]


def remote_task(view: dict[str, Any], split: str, index: int) -> Task:
    return Task(id=view["id"], prompt=view["prompt"], source=view.get("source", ""), info={REMOTE_KEY: [split, index]})


def reset_body(session_id: str, task: Task, seed: int) -> dict[str, Any]:
    """A task the server holds goes by its split and index; any other goes whole, which a server
    takes only when started with ``--allow-client-tasks`` (else ``client_tasks_off``)."""
    where = task.info.get(REMOTE_KEY)
    if where is not None:
        return {"session_id": session_id, "seed": seed, "split": where[0], "index": where[1]}
    return {"session_id": session_id, "seed": seed, "task": task.to_dict()}


def step_result(reply: dict[str, Any]) -> StepResult:
    return StepResult.from_dict(reply["result"])


def failed_step(exc: RemoteEnvError) -> StepResult:
    """What a step the server did not carry out gives the episode: an ``infra_error``, except for
    an action over the server's request size limit, which is the policy's doing (a reply too long
    to send) and scores 0 as a ``format_error``, as bad model output does in any environment."""
    if exc.kind == "too_large":
        score = Score.zero(Status.FORMAT_ERROR, f"the action is too large for the env server: {exc}"[:1000])
    else:
        score = Score.zero(Status.INFRA_ERROR, f"the env server failed: {exc}"[:1000])
    return StepResult(Observation([]), 0.0, terminated=True, score=score)


class RemoteEnv(Env):
    """An environment living on an env server, driven like a local one.

        env = RemoteEnv("http://127.0.0.1:8100")
        obs = env.reset(env.task_source("eval").get(0))
        result = env.step("42")

    ``name``, ``description``, ``reward_range``, ``max_turns`` and ``env_args`` are the server's. ``close()``
    ends the server-side session. ``reference`` is ``None``: answers stay on the server."""

    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 360.0, retries: int = 4) -> None:
        super().__init__(tasks=None)
        self.connection = Connection(url, token=token, timeout_s=timeout_s, retries=retries)
        info = self.connection.info()
        self.name = info["env"]  # type: ignore[misc]
        self.description = info.get("description", "")  # type: ignore[misc]
        self.reward_range = tuple(info["reward_range"])  # type: ignore[misc,assignment]
        self.max_turns = int(info["max_turns"])
        self._splits: dict[str, int | None] = info.get("splits", {})
        # what the server built it with, if it says, seeds and secrets redacted (redacted_env_args)
        self.env_args: dict[str, Any] | None = info.get("env_args")
        self.session_id = uuid.uuid4().hex
        self._tools: list[ToolSpec] = []
        self._opened = False

    def default_tasks(self, split: Split = "train") -> RemoteTasks:
        if split not in self._splits:
            raise NotImplementedError(f"the server's {self.name} has no {split!r} split")
        return RemoteTasks(self.connection, split, self._splits[split])

    def tools(self) -> list[ToolSpec]:
        return list(self._tools)

    def begin(self, task: Task) -> Observation:
        return self._begun_remotely(
            self.connection.request("reset", reset_body(self.session_id, task, self.episode_seed))
        )

    async def abegin(self, task: Task) -> Observation:
        body = reset_body(self.session_id, task, self.episode_seed)
        return self._begun_remotely(await self.connection.arequest("reset", body))

    def transition(self, action: Message) -> StepResult:
        try:
            return step_result(self.connection.request("step", self._step_body(action)))
        except RemoteEnvError as exc:
            return failed_step(exc)

    async def atransition(self, action: Message) -> StepResult:
        try:
            return step_result(await self.connection.arequest("step", self._step_body(action)))
        except RemoteEnvError as exc:
            return failed_step(exc)

    def _begun_remotely(self, reply: dict[str, Any]) -> Observation:
        self._opened = True
        obs = Observation.from_dict(reply["observation"])
        self._tools = obs.tools
        return obs

    def _step_body(self, action: Message) -> dict[str, Any]:
        return {"session_id": self.session_id, "turn": self.turn, "action": action.to_dict()}

    def close(self) -> None:
        if self._opened:
            self._opened = False
            try:
                self.connection.request("close", {"session_id": self.session_id})
            except RemoteEnvError:
                pass  # the server is gone: so is the session
        self.connection.close()


def env_server_factory(
    url: str, name: str, env_args: Mapping[str, Any] | None, *, token: str | None = None
) -> tuple[Callable[[], RemoteEnv], RemoteEnv]:
    """``(factory, first)``: :class:`RemoteEnv` makers on ``url``, checked by making the first,
    which the caller uses and closes. The server must serve ``name``; ``env_args`` ``None`` takes
    the server's, a mapping must equal them as :func:`redacted_env_args` shows both (seeds and
    secrets are hidden on the server: those must be set on both sides or on neither). Raises
    :class:`UnusableEnvServer` saying what to change."""
    try:
        first = RemoteEnv(url, token=token)
    except RemoteEnvError as exc:
        raise UnusableEnvServer(f"cannot use the env server: {exc}") from exc
    served, wanted = first.env_args, None if env_args is None else redacted_env_args(dict(env_args))
    if first.name != name or (wanted is not None and served is not None and served != wanted):
        first.close()
        if first.name != name:
            raise UnusableEnvServer(f"the env server at {url} serves {first.name!r}, not {name!r}")
        raise UnusableEnvServer(
            f"the env server at {url} serves {name} with env_args {served}, not {wanted}: start the server with "
            f"--env-args '{json.dumps(dict(env_args or {}))}' or use the server's env_args ({REDACTED}: a seed or "
            "secret, set on both sides or on neither)"
        )
    return (lambda: RemoteEnv(url, token=token)), first


class ServerHost:
    """The rollout engine's environments on env servers: each new episode opens a session on the
    reachable server with the fewest open sessions; a server that fails is avoided for a while.

        host = ServerHost(["http://10.0.0.5:8100", "http://10.0.0.6:8100"], token=...)
        engine = RolloutEngine(policy, env_factory, sampling, host=host)

    A finished episode's session is kept for the next episode on that server (a reset there
    reuses the environment instead of building one). The servers build their own environments:
    ``open``'s factory is not called; the engine's factory still names the environment and its
    tasks, which a :class:`RemoteEnv` does."""

    KEEP_IDLE = 1024  # finished sessions kept per server for reuse

    def __init__(self, urls: Sequence[str], *, token: str | None = None, timeout_s: float = 360.0, retries: int = 4):
        if not urls:
            raise ValueError("ServerHost needs at least one env server address")
        self.servers = [_Server(Connection(u, token=token, timeout_s=timeout_s, retries=retries)) for u in urls]
        names = {s.connection.url: s.connection.info()["env"] for s in self.servers}
        if len(set(names.values())) > 1:
            raise ValueError(f"the env servers serve different environments: {names}")
        self.name = next(iter(names.values()))

    async def open(self, factory: Callable[[], Env] | None = None) -> _ServerEnv:
        return _ServerEnv(self)

    def opens_quickly(self, factory: Callable[[], Env] | None = None) -> bool:
        return True  # opening makes nothing and sends nothing: the server session starts at reset

    def pick(self, avoid: _Server | None = None) -> _Server:
        now = time.monotonic()
        others = [s for s in self.servers if s is not avoid] or self.servers
        return min([s for s in others if s.down_until <= now] or others, key=lambda s: s.open)

    def shutdown(self) -> None:
        """Close the kept sessions (best effort: a gone server has closed them already)."""
        for server in self.servers:
            for sid in server.idle:
                try:
                    server.connection.request("close", {"session_id": sid})
                except RemoteEnvError:
                    break
            server.idle.clear()
            server.connection.close()


class _Server:
    def __init__(self, connection: Connection):
        self.connection, self.open, self.down_until = connection, 0, 0.0
        self.idle: list[str] = []  # ids of finished sessions, ready for another episode


class _ServerEnv:
    """An environment on an env server, as the engine runs it: a server session, on the server
    chosen at reset (another is tried if that fails); its calls are requests, awaited."""

    calls = EnvCalls.ASYNC

    def __init__(self, host: ServerHost):
        self.host, self.name = host, host.name
        self.server: _Server | None = None
        self.id, self.turn, self.healthy = "", 0, True

    async def reset(self, task: Task, seed: int) -> Observation:
        server = self.host.pick()
        for attempt in range(len(self.host.servers)):
            sid = server.idle.pop() if server.idle else uuid.uuid4().hex
            server.open += 1
            try:
                reply = await server.connection.arequest("reset", reset_body(sid, task, seed))
            except RemoteEnvError as exc:
                server.open -= 1
                if exc.kind not in ("unreachable", "draining", "busy", "too_many_sessions"):
                    raise
                server.down_until = time.monotonic() + 5.0
                if attempt + 1 == len(self.host.servers):
                    raise
                server = self.host.pick(avoid=server)
                continue
            self.server, self.id, self.turn = server, sid, 0
            return Observation.from_dict(reply["observation"])
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def step(self, action: Message) -> StepResult:
        if self.server is None:
            raise RemoteEnvError("no_episode", "step() before a successful reset()")
        try:
            reply = await self.server.connection.arequest(
                "step", {"session_id": self.id, "turn": self.turn, "action": action.to_dict()}
            )
        except RemoteEnvError as exc:
            if exc.kind == "too_large":  # never sent: the session is fine, the reply was too long
                return failed_step(exc)
            self.healthy = False
            raise
        self.turn += 1
        return step_result(reply)

    async def close(self) -> None:
        if self.server is None:
            return
        server, self.server = self.server, None
        server.open -= 1
        if self.healthy and len(server.idle) < self.host.KEEP_IDLE:
            server.idle.append(self.id)  # kept for the next episode: no request now
            return
        try:
            await server.connection.arequest("close", {"session_id": self.id})
        except RemoteEnvError:
            pass  # gone with its server


__all__ = [
    "Connection",
    "RemoteEnv",
    "RemoteEnvError",
    "RemoteTasks",
    "ServerHost",
    "UnusableEnvServer",
    "REDACTED",
    "REMOTE_KEY",
    "env_server_factory",
    "redacted_env_args",
]
