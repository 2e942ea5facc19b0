"""Ludus's environment server (``ludus serve-env``) against OpenEnv's, same machine, same load.

    python benchmarks/env_server.py            # about 8-10 minutes; --quick: under a minute
    python benchmarks/env_server.py --inline   # environments that run on the event loop (see below)

One trivial single-step environment, written twice: "what is a + b?" for task number ``i``,
reward 1 for the right number. As a Ludus :class:`~ludus.core.env.SingleTurnEnv` it is served
by ``ludus.serve.env_server.serve``; as an OpenEnv ``Environment`` (with its own ``Action`` and
``Observation`` models) by ``openenv.core.env_server.create_app`` under ``uvicorn.run``. Each
server runs alone in its own process on 127.0.0.1, one uvicorn worker, uvicorn's defaults
(loop, HTTP and WebSocket implementations resolve alike for both: uvloop, httptools,
websockets-sansio when installed) except ``log_level="warning"`` for both (Ludus's own
setting; uvicorn's default would print an access-log line per request). OpenEnv needs
``max_concurrent_envs`` raised from its default of 1 (and ``SUPPORTS_CONCURRENT_SESSIONS`` on
the environment) to hold more than one WebSocket session; both servers get a limit of 20,000
sessions, above the largest level, and Ludus's ``max_pending`` is raised to the same (its
default, 4,096 calls waiting, answers calls past it with 503 and ``Retry-After``, which this
load would count as failures; OpenEnv has no such bound). A server is started afresh for every
level, so that its loop-lag maximum belongs to that level.

What one request means on each server:

* Ludus HTTP — ``POST /reset`` with a ``session_id`` opens (first time) or reuses that
  session's environment and starts an episode on task ``index``; ``POST /step`` grades the
  answer in that session. Stateful: the server keeps the episode between the two requests.
* OpenEnv HTTP — ``POST /reset`` and ``POST /step`` are *stateless*: each request builds a new
  environment with the factory, calls it once and closes it (``http_server.py``,
  ``reset_handler``/``step_handler``). A step therefore cannot see its reset; the action
  carries the task number so that the step can still be graded.
* WebSocket, both — one connection per session: reset and step on the environment that
  session holds. OpenEnv's ``/ws`` is one session per connection, requests one at a time; Ludus's
  ``/ws`` may carry many sessions and requests at once, but is driven here the same way.

By default the environment is an ordinary synchronous one on both servers: Ludus runs its
calls on the server's environment threads (``quick = False``), OpenEnv on its thread pool
(HTTP) or the session's own one-thread executor (WebSocket). ``--inline`` runs them on the
event loop instead (Ludus ``quick = True``; OpenEnv ``reset_async``/``step_async`` overridden).

The load comes from another process (asyncio, uvloop when installed): ``sessions`` concurrent
sessions, each with its own connection (a hand-written keep-alive HTTP/1.1 client on asyncio,
or ``websockets`` without compression), each playing reset + step episodes back to back. After
every session is connected and a warm-up, requests completing in the next ``--duration``
seconds are counted: requests/s, p50/p99 latency, success (HTTP 200 or a non-error reply, and
the step's reward 1; a request over ``--timeout`` s fails). The server's CPU time over the same
window comes from /proc; its event-loop lag from Ludus's ``/metrics``
(``ludus_env_event_loop_lag_max_seconds``) and, for OpenEnv, from the same 50 ms watcher added
to its app by this script. ``--pin`` pins the server to core 0 and the client to core 1 (off by
default: on a machine shared with other work, a pinned server waits behind whatever else runs
on its core).

"Held" sessions: the highest level at which ≥ 99 % of requests succeed. Sessions per core:
held sessions / cores the server process used at that level. Targets: Ludus ≥ 2× OpenEnv's
requests/s and ≥ 2× its sessions per core. Not a test (tests/test_env_server_benchmark.py
runs the load function briefly so that the script keeps working).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ludus.core.env import SingleTurnEnv
from ludus.core.types import Score, Status, Task

try:  # the client's JSON: the same library for both servers
    import orjson

    _dumps: Callable[[Any], bytes] = orjson.dumps
    _loads: Callable[[bytes | str], Any] = orjson.loads
except ImportError:  # pragma: no cover - orjson comes with the bench extra

    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    _loads = json.loads

HERE = os.path.abspath(__file__)
LEVELS = (32, 128, 512, 1024, 2048, 4096, 8192, 16384)  # 16,384 connections: within 20,000 open files
QUICK_LEVELS = (32, 512)
HELD = 0.99
MAX_SESSIONS = 20_000  # both servers' session limit, above the largest level
TARGET_RPS, TARGET_PER_CORE = 2.0, 2.0


# ---- the environment, once per framework -------------------------------------------------------
def numbers(index: int) -> tuple[int, int]:
    return index % 1000, (index * 7919) % 1000


def prompt(index: int) -> str:
    a, b = numbers(index)
    return f"What is {a} + {b}? Answer with the number only."


def answer(index: int) -> str:
    return str(sum(numbers(index)))


class SumTasks:
    """Task ``i`` is "what is a + b?", endless and deterministic."""

    size = None

    def get(self, index: int) -> Task:
        return Task(id=f"sum/{index}", prompt=prompt(index), answer=answer(index), source="sum")


class LudusSum(SingleTurnEnv):
    name = "bench-sum"
    description = "a + b, one step: the environment server benchmark's"

    def default_tasks(self, split="train"):  # type: ignore[no-untyped-def]
        return SumTasks()

    def score(self, task: Task, completion: str) -> Score:
        if completion.strip() == task.answer:
            return Score(1.0)
        return Score.zero(Status.WRONG, f"expected {task.answer}")


class LudusSumInline(LudusSum):
    quick = True  # pure Python that never blocks: the server calls it on its event loop


def openenv_app(inline: bool = False, max_sessions: int = MAX_SESSIONS) -> Any:
    """The same environment as an OpenEnv ``Environment``, in OpenEnv's FastAPI app, plus a
    50 ms event-loop lag watcher (Ludus's own algorithm) at ``GET /bench/lag``."""
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State

    class SumAction(Action):
        answer: str
        index: int = 0  # read only when the environment has no episode: OpenEnv's stateless HTTP step

    class SumObservation(Observation):
        prompt: str = ""

    class OpenEnvSum(Environment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            super().__init__()
            self._state = State()
            self._index: int | None = None

        def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> SumObservation:
            self._index = seed or 0
            self._state = State(episode_id=episode_id, step_count=0)
            return SumObservation(prompt=prompt(self._index))

        def step(self, action: SumAction, timeout_s: float | None = None, **kwargs: Any) -> SumObservation:  # type: ignore[override]
            index = action.index if self._index is None else self._index
            self._state.step_count += 1
            self._index = None
            correct = action.answer.strip() == answer(index)
            return SumObservation(done=True, reward=1.0 if correct else 0.0)

        @property
        def state(self) -> State:
            return self._state

    class OpenEnvSumInline(OpenEnvSum):
        async def reset_async(self, seed=None, episode_id=None, **kwargs):  # type: ignore[no-untyped-def]
            return self.reset(seed, episode_id, **kwargs)

        async def step_async(self, action, timeout_s=None, **kwargs):  # type: ignore[no-untyped-def]
            return self.step(action, timeout_s, **kwargs)

    env_cls = OpenEnvSumInline if inline else OpenEnvSum
    app = create_app(env_cls, SumAction, SumObservation, env_name="bench-sum", max_concurrent_envs=max_sessions)
    lag = {"max": 0.0, "now": 0.0}

    async def watch() -> None:
        loop, period = asyncio.get_running_loop(), 0.05
        while True:
            before = loop.time()
            await asyncio.sleep(period)
            lag["now"] = max(0.0, loop.time() - before - period)
            lag["max"] = max(lag["max"], lag["now"])

    watchers: list[asyncio.Task[None]] = []

    async def start_watch() -> None:
        watchers.append(asyncio.create_task(watch()))

    app.router.on_startup.append(start_watch)

    @app.get("/bench/lag")
    async def bench_lag() -> dict[str, float]:
        return lag

    return app


def serve_main(kind: str, port: int, inline: bool) -> None:
    """The server process: ``python benchmarks/env_server.py _serve KIND PORT``."""
    if kind == "ludus":
        from ludus.serve.env_server import ServerLimits, serve

        # every session may have a call waiting, as on OpenEnv (Ludus's default max_pending, 4,096,
        # answers calls past it with 503 + Retry-After, which this load counts as failures)
        limits = ServerLimits(max_sessions=MAX_SESSIONS, max_pending=MAX_SESSIONS)
        serve(LudusSumInline if inline else LudusSum, host="127.0.0.1", port=port, limits=limits)
    else:
        import uvicorn

        uvicorn.run(openenv_app(inline), host="127.0.0.1", port=port, log_level="warning")


# ---- the requests: the only thing that differs between the servers -------------------------------
@dataclass(frozen=True)
class Shape:
    """How one server spells reset and step, and what a good reply looks like."""

    reset: Callable[[str, int], tuple[str, dict[str, Any]]]  # (session, task) -> (HTTP path, body)
    step: Callable[[str, int], tuple[str, dict[str, Any]]]
    reset_ok: Callable[[Any], bool]
    step_ok: Callable[[Any], bool]


def shape(kind: str, transport: str) -> Shape:
    if kind == "ludus":

        def reset(sid: str, k: int) -> tuple[str, dict[str, Any]]:
            return "/reset", {"session_id": sid, "seed": k, "split": "train", "index": k}

        def step(sid: str, k: int) -> tuple[str, dict[str, Any]]:
            return "/step", {"session_id": sid, "turn": 0, "action": {"role": "assistant", "content": answer(k)}}

        if transport == "ws":  # the same bodies with an ``op`` and an ``id``
            http_reset, http_step = reset, step

            def reset(sid: str, k: int) -> tuple[str, dict[str, Any]]:
                return "/ws", {"id": k, "op": "reset", **http_reset(sid, k)[1]}

            def step(sid: str, k: int) -> tuple[str, dict[str, Any]]:
                return "/ws", {"id": k, "op": "step", **http_step(sid, k)[1]}

        def reset_ok(r: Any) -> bool:
            return r.get("ok", True) and "observation" in r

        def step_ok(r: Any) -> bool:
            return r.get("ok", True) and r["result"]["reward"] == 1.0 and r["result"]["terminated"]

        return Shape(reset, step, reset_ok, step_ok)
    if kind != "openenv":
        raise ValueError(f"no server {kind!r}")
    if transport == "http":
        return Shape(
            lambda sid, k: ("/reset", {"seed": k}),
            lambda sid, k: ("/step", {"action": {"index": k, "answer": answer(k)}}),
            lambda r: "observation" in r and r["done"] is False,
            lambda r: r["reward"] == 1.0 and r["done"] is True,
        )
    return Shape(
        lambda sid, k: ("/ws", {"type": "reset", "data": {"seed": k}}),
        lambda sid, k: ("/ws", {"type": "step", "data": {"index": k, "answer": answer(k)}}),
        lambda r: r["type"] == "observation" and r["data"]["done"] is False,
        lambda r: r["type"] == "observation" and r["data"]["reward"] == 1.0 and r["data"]["done"] is True,
    )


# ---- the client: one connection per session, the same code for both servers ----------------------
class HTTPFailure(Exception):
    pass


class _HTTP(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection, one request at a time: the leanest client asyncio allows."""

    def __init__(self, host: bytes) -> None:
        self.host, self.buf, self.transport = host, bytearray(), None
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.closed = False

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(HTTPFailure(f"connection lost: {exc}"))

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.waiter is None or self.waiter.done():
            return
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(self.buf[:end]).lower()
        status, start = int(head[9:12]), end + 4
        at = head.find(b"\r\ncontent-length:")
        if at >= 0:
            eol = head.find(b"\r\n", at + 2)
            n = int(head[at + 17 : eol if eol >= 0 else len(head)])
            if len(self.buf) < start + n:
                return
            body = bytes(self.buf[start : start + n])
            del self.buf[: start + n]
        else:  # chunked
            parts, pos = [], start
            while True:
                eol = self.buf.find(b"\r\n", pos)
                if eol < 0:
                    return
                size = int(self.buf[pos:eol], 16)
                if len(self.buf) < eol + 2 + size + 2:
                    return
                if size == 0:
                    pos = eol + 4
                    break
                parts.append(bytes(self.buf[eol + 2 : eol + 2 + size]))
                pos = eol + 2 + size + 2
            body = b"".join(parts)
            del self.buf[:pos]
        self.waiter.set_result((status, body))

    async def request(self, path: str, body: bytes | None) -> tuple[int, bytes]:
        """``POST path`` with ``body``, or ``GET path`` when it is ``None``."""
        if self.closed:
            raise HTTPFailure("connection closed")
        self.waiter = asyncio.get_running_loop().create_future()
        if body is None:
            self.transport.write(b"GET %s HTTP/1.1\r\nhost: %s\r\n\r\n" % (path.encode(), self.host))  # type: ignore[union-attr]
        else:
            self.transport.write(  # type: ignore[union-attr]
                b"POST %s HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                % (path.encode(), self.host, len(body), body)
            )
        return await self.waiter

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class _Conn:
    """A session's connection: ``call(path, body) -> reply``; raises on a transport failure."""

    def __init__(self, transport: str, host: str, port: int) -> None:
        self.transport, self.host, self.port = transport, host, port
        self.http: _HTTP | None = None
        self.ws: Any = None

    async def open(self) -> None:
        if self.transport == "http":
            loop = asyncio.get_running_loop()
            hostport = f"{self.host}:{self.port}".encode()
            _, self.http = await loop.create_connection(lambda: _HTTP(hostport), self.host, self.port)
        else:
            from websockets.asyncio.client import connect

            self.ws = await connect(
                f"ws://{self.host}:{self.port}/ws", compression=None, ping_interval=None, max_size=1 << 20
            )

    async def call(self, path: str, payload: dict[str, Any]) -> Any:
        """The reply, ``None`` for an HTTP error status; raises when the connection is gone."""
        data = _dumps(payload)
        if self.http is not None:
            status, body = await self.http.request(path, data)
            return _loads(body) if status == 200 else None
        await self.ws.send(data.decode(), text=True)
        return _loads(await self.ws.recv())

    def close(self) -> None:
        if self.http is not None:
            self.http.close()
        if self.ws is not None:
            with contextlib.suppress(Exception):
                self.ws.transport.abort()


def proc_cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads), from /proc."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


async def run_load(
    kind: str,
    transport: str,
    port: int,
    sessions: int,
    duration_s: float,
    *,
    host: str = "127.0.0.1",
    warmup_s: float = 1.0,
    timeout_s: float = 5.0,
    ramp_timeout_s: float = 90.0,
    server_pid: int | None = None,
    connect_concurrency: int = 256,
) -> dict[str, Any]:
    """``sessions`` sessions playing reset + step episodes on one server, one connection each.

    Every session connects first (at most ``connect_concurrency`` handshakes at once, for at
    most ``ramp_timeout_s``; an HTTP connection counts once it answered ``GET /health``), then
    all start together: uvicorn on uvloop accepts one connection per event-loop turn, so
    connections still in the accept queue when the load starts would wait there for seconds
    and measure the accept queue, not the server. After ``warmup_s``, the figures of the next
    ``duration_s`` seconds."""
    messages = shape(kind, transport)
    window = [float("inf"), float("inf")]
    latencies: list[float] = []
    outcome = {"ok": 0, "failed": 0, "timeouts": 0, "connect_failures": 0, "reconnects": 0}
    go = asyncio.Event()
    gate = asyncio.Semaphore(connect_concurrency)
    conns: list[_Conn] = []
    now = time.perf_counter

    def record(t0: float, ok: bool) -> None:
        t1 = now()
        if window[0] <= t1 <= window[1]:
            if ok:
                outcome["ok"] += 1
                latencies.append(t1 - t0)
            else:
                outcome["failed"] += 1

    async def connect(until: float) -> _Conn | None:
        """A connection, retried until ``until``; each failed attempt in the window is a failed request."""
        while not stopping and now() < until:
            t0 = now()
            conn = _Conn(transport, host, port)
            try:
                async with gate:  # a bounded number of handshakes at once: no backlog overflow
                    async with asyncio.timeout(timeout_s * 2):
                        await conn.open()
                        if conn.http is not None:  # the kernel completed the handshake; has the server accepted it?
                            await conn.http.request("/health", None)
            except Exception:  # noqa: BLE001 - a refused or timed-out connection
                conn.close()
                outcome["connect_failures"] += 1
                record(t0, False)
                await asyncio.sleep(0.2)
                continue
            conns.append(conn)
            return conn
        return None

    async def request(conn: _Conn, path: str, body: dict[str, Any], check: Callable[[Any], bool]) -> bool | None:
        """True/False for a good/bad reply, None when the connection broke or timed out."""
        t0 = now()
        try:
            async with asyncio.timeout(timeout_s):
                reply = await conn.call(path, body)
            ok = reply is not None and bool(check(reply))
        except TimeoutError:
            if window[0] <= now() <= window[1]:
                outcome["timeouts"] += 1
            record(t0, False)
            return None
        except Exception:  # noqa: BLE001 - a broken connection, or a reply of the wrong shape
            record(t0, False)
            return None
        record(t0, ok)
        return ok

    async def session(n: int, conn: _Conn | None) -> None:
        sid, k = f"b{n}", n * 1_000_000
        await go.wait()
        while not stopping:
            if conn is None:
                outcome["reconnects"] += 1
                conn = await connect(float("inf"))
                if conn is None:
                    return
            path, body = messages.reset(sid, k)
            ok = await request(conn, path, body, messages.reset_ok)
            if ok:
                path, body = messages.step(sid, k)
                ok = await request(conn, path, body, messages.step_ok)
            if ok is None:  # the connection is gone or stuck: open another
                conn.close()
                conn = None
            if not ok:
                await asyncio.sleep(0.1)  # back off instead of spinning on failures
            k += 1

    stopping = False
    started = now()
    monitor = _Monitor(kind, host, port)
    await monitor.open()
    deadline = started + ramp_timeout_s
    opened = await asyncio.gather(*(connect(deadline) for _ in range(sessions)))
    connected = sum(c is not None for c in opened)
    ramp_s = now() - started
    tasks = [asyncio.create_task(session(n, conn)) for n, conn in enumerate(opened)]
    polling = asyncio.create_task(monitor.poll())
    go.set()
    await asyncio.sleep(warmup_s)
    cpu0, mine0, w0 = proc_cpu_s(server_pid), _own_cpu_s(), now()
    window[0], window[1] = w0, w0 + duration_s
    await asyncio.sleep(duration_s)
    cpu1, mine1, w1 = proc_cpu_s(server_pid), _own_cpu_s(), now()
    window[1] = w1
    lag = await monitor.read()  # on the monitor's open connection, while the load still runs
    stopping = True
    async with monitor.lock:  # not in the middle of a poll
        polling.cancel()
    for task in tasks:
        task.cancel()
    await asyncio.gather(polling, *tasks, return_exceptions=True)
    for conn in conns:
        conn.close()
    monitor.close()
    await asyncio.sleep(0)
    latencies.sort()
    total = outcome["ok"] + outcome["failed"]
    wall = w1 - w0
    return {
        "server": kind,
        "transport": transport,
        "sessions": sessions,
        "connected": connected,
        "ramp_s": ramp_s,
        "window_s": wall,
        "requests": total,
        **outcome,
        "rps": outcome["ok"] / wall,
        "success": outcome["ok"] / total if total else 0.0,
        "p50_ms": _percentile(latencies, 0.50) * 1e3,
        "p99_ms": _percentile(latencies, 0.99) * 1e3,
        "server_cores": (cpu1 - cpu0) / wall if server_pid else None,
        "server_cpu_us_per_request": (cpu1 - cpu0) / outcome["ok"] * 1e6 if server_pid and outcome["ok"] else None,
        "client_cores": (mine1 - mine0) / wall,
        "loop_lag_max_ms": None if lag is None else lag * 1e3,
    }


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


class _Monitor:
    """The server's largest event-loop lag since it started, on a keep-alive connection opened
    before the load (a new one would wait in the accept queue) and polled every second (uvicorn
    closes keep-alive connections idle for 5 s)."""

    def __init__(self, kind: str, host: str, port: int) -> None:
        self.kind, self.host, self.port = kind, host, port
        self.path = "/metrics" if kind == "ludus" else "/bench/lag"
        self.conn: _HTTP | None = None
        self.last: float | None = None
        self.lock = asyncio.Lock()  # one request at a time on the connection

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        hostport = f"{self.host}:{self.port}".encode()
        with contextlib.suppress(OSError, TimeoutError):
            _, self.conn = await asyncio.wait_for(
                loop.create_connection(lambda: _HTTP(hostport), self.host, self.port), 10
            )

    async def read(self) -> float | None:
        async with self.lock:
            if self.conn is None or self.conn.closed:
                await self.open()
            if self.conn is None:
                return self.last
            try:
                status, body = await asyncio.wait_for(self.conn.request(self.path, None), 30)
            except (HTTPFailure, OSError, TimeoutError):
                self.conn.close()
                self.conn = None
                return self.last
        text = body.decode(errors="replace")
        if self.kind == "ludus":
            for line in text.splitlines():
                if line.startswith("ludus_env_event_loop_lag_max_seconds "):
                    self.last = float(line.split()[1])
        elif status == 200:
            self.last = float(json.loads(text)["max"])
        return self.last

    async def poll(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            await self.read()

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def load_main(args: argparse.Namespace) -> None:
    """The client process: runs one level and prints its figures as one JSON line."""
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    result = asyncio.run(
        run_load(
            args.server,
            args.transport,
            args.port,
            args.sessions,
            args.duration,
            warmup_s=args.warmup,
            timeout_s=args.timeout,
            server_pid=args.server_pid,
        )
    )
    print(json.dumps(result), flush=True)


# ---- the orchestration -----------------------------------------------------------------------------
def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 16
    if soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pinned(cpu: int | None) -> list[str]:
    return [] if cpu is None else ["--cpu", str(cpu)]


def start_server(kind: str, port: int, *, inline: bool = False, cpu: int | None = None) -> subprocess.Popen[bytes]:
    """The server in a process of its own; returns once ``/health`` answers."""
    cmd = [sys.executable, HERE, "_serve", kind, str(port), *_pinned(cpu)] + (["--inline"] if inline else [])
    log = tempfile.TemporaryFile()  # OpenEnv logs a traceback per connection the load drops at the end
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    proc.log = log  # type: ignore[attr-defined]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            tail = log.read()[-3000:].decode(errors="replace")
            raise RuntimeError(f"the {kind} server exited with {proc.returncode} before it was ready:\n{tail}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as response:
                if response.status == 200:
                    return proc
        except OSError:
            time.sleep(0.05)
    stop_server(proc)
    raise RuntimeError(f"the {kind} server did not answer /health within 60 s")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """Killed outright: a draining Ludus server would wait for the episodes the load left open."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    with contextlib.suppress(AttributeError):
        proc.log.close()  # type: ignore[attr-defined]


def run_level(kind: str, transport: str, sessions: int, args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    pin = (os.cpu_count() or 1) > 1 and args.pin
    server = start_server(kind, port, inline=args.inline, cpu=0 if pin else None)
    try:
        cmd = [
            sys.executable, HERE, "_load", kind, transport, str(port), str(sessions),
            "--duration", str(args.duration), "--warmup", str(args.warmup), "--timeout", str(args.timeout),
            "--server-pid", str(server.pid), *_pinned(1 if pin else None),
        ]  # fmt: skip
        limit = args.duration + args.warmup + 30 + 2 * args.timeout + 60
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=limit)
        if done.returncode != 0:
            raise RuntimeError(f"the load process failed:\n{done.stderr[-3000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        stop_server(server)


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None or value != value else format(value, spec)


def summarize(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for key in sorted({(r["server"], r["transport"]) for r in rows}):
        mine = [r for r in rows if (r["server"], r["transport"]) == key]
        held = [r for r in mine if r["success"] >= HELD]
        top = max(held, key=lambda r: r["sessions"]) if held else None
        best = max(held, key=lambda r: r["rps"]) if held else None
        cores = top["server_cores"] if top else None
        cpu_s = sum((r["server_cores"] or 0.0) * r["window_s"] for r in mine)
        served = sum(r["ok"] for r in mine)
        out[key] = {
            "held_sessions": top["sessions"] if top else 0,
            "cores_at_held": cores,
            "sessions_per_core": top["sessions"] / cores if top and cores else 0.0,
            "rps_per_core_at_held": top["rps"] / cores if top and cores else 0.0,
            "peak_rps": best["rps"] if best else 0.0,
            "peak_at": best["sessions"] if best else None,
            "cpu_us_per_request": cpu_s / served * 1e6 if served and cpu_s else None,  # every level together
        }
    return out


def _ratio(a: float | None, b: float | None) -> float:
    return a / b if a and b else float("nan")


def report(rows: list[dict[str, Any]], transports: list[str], levels: list[int]) -> None:
    print()
    print(
        f"{'server':<8} {'transport':<9} {'sessions':>8} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'success':>8} {'lag max ms':>10} {'srv cores':>9} {'µs CPU/req':>10} {'cli cores':>9} {'ramp s':>6}"
    )
    for r in rows:
        print(
            f"{r['server']:<8} {r['transport']:<9} {r['sessions']:>8} {r['rps']:>8.0f} {_fmt(r['p50_ms'], '.1f'):>8} "
            f"{_fmt(r['p99_ms'], '.1f'):>8} {r['success'] * 100:>7.2f}% {_fmt(r['loop_lag_max_ms'], '.0f'):>10} "
            f"{_fmt(r['server_cores'], '.2f'):>9} {_fmt(r['server_cpu_us_per_request'], '.0f'):>10} "
            f"{r['client_cores']:>9.2f} {r['ramp_s']:>6.1f}"
        )
    summary = summarize(rows)
    print()
    print(
        f"{'server':<8} {'transport':<9} {'held (≥99%)':>11} {'cores':>6} {'sessions/core':>13} "
        f"{'req/s/core':>10} {'peak req/s':>10} {'at':>5} {'µs CPU/req':>10}"
    )
    for (kind, transport), s in summary.items():
        print(
            f"{kind:<8} {transport:<9} {s['held_sessions']:>11} {_fmt(s['cores_at_held'], '.2f'):>6} "
            f"{s['sessions_per_core']:>13.0f} {s['rps_per_core_at_held']:>10.0f} {s['peak_rps']:>10.0f} "
            f"{s['peak_at'] or '—':>5} {_fmt(s['cpu_us_per_request'], '.0f'):>10}"
        )
    print(
        "(held: the most sessions with ≥ 99 % success; cores, sessions/core and req/s/core at that level; "
        "µs CPU/req: the server's CPU time over every level's window / the requests it served)"
    )
    print()
    for transport in transports:
        lu, oe = summary.get(("ludus", transport)), summary.get(("openenv", transport))
        if not lu or not oe:
            continue
        rps = _ratio(lu["peak_rps"], oe["peak_rps"])
        per_core = _ratio(lu["sessions_per_core"], oe["sessions_per_core"])
        print(
            f"Ludus / OpenEnv, {transport}: peak req/s {rps:.2f}× (target ≥ {TARGET_RPS:.0f}×: "
            f"{'met' if rps >= TARGET_RPS else 'NOT met'}); sessions per core {per_core:.2f}× (target ≥ "
            f"{TARGET_PER_CORE:.0f}×: {'met' if per_core >= TARGET_PER_CORE else 'NOT met'}); req/s per server core "
            f"at the held level {_ratio(lu['rps_per_core_at_held'], oe['rps_per_core_at_held']):.2f}×; server CPU "
            f"per request {_ratio(oe['cpu_us_per_request'], lu['cpu_us_per_request']):.2f}× less"
        )
        per_level = []
        for level in levels:
            a, b = (
                next((r for r in rows if (r["server"], r["transport"], r["sessions"]) == (k, transport, level)), None)
                for k in ("ludus", "openenv")
            )
            if a and b and b["rps"]:
                per_level.append(f"{level}: {a['rps'] / b['rps']:.2f}×")
        if per_level:
            print(f"  req/s ratio per level — {', '.join(per_level)}")
        if lu["held_sessions"] == oe["held_sessions"]:
            print(
                f"  both held every level up to {lu['held_sessions']} sessions: sessions per core then compares only "
                "the CPU each server used at that level (a stalled server uses less); req/s per core and CPU per "
                "request compare the work"
            )


def implementations() -> str:
    """What uvicorn's "auto" resolves to here: the same for both servers."""
    import importlib.util

    def has(name: str) -> bool:
        return importlib.util.find_spec(name) is not None

    loop = "uvloop" if has("uvloop") else "asyncio"
    http = "httptools" if has("httptools") else "h11"
    ws = "websockets-sansio" if has("websockets") else ("wsproto" if has("wsproto") else "none")
    versions = []
    for dist in ("uvicorn", "uvloop", "httptools", "websockets", "fastapi", "pydantic", "openenv-core"):
        with contextlib.suppress(Exception):
            from importlib.metadata import version

            versions.append(f"{dist} {version(dist)}")
    return f"loop={loop} http={http} ws={ws}; " + ", ".join(versions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"levels {QUICK_LEVELS}, 1.5 s windows: under a minute")
    parser.add_argument("--levels", type=int, nargs="+", help=f"concurrent sessions (default {LEVELS})")
    parser.add_argument("--servers", nargs="+", default=["ludus", "openenv"], choices=["ludus", "openenv"])
    parser.add_argument("--transports", nargs="+", default=["http", "ws"], choices=["http", "ws"])
    parser.add_argument("--duration", type=float, help="seconds measured per level (default 6; --quick 1.5)")
    parser.add_argument("--warmup", type=float, help="seconds of load before the window (default 1; --quick 0.3)")
    parser.add_argument("--timeout", type=float, default=5.0, help="a request slower than this fails (default 5 s)")
    parser.add_argument("--inline", action="store_true", help="environment calls on the event loop, not threads")
    parser.add_argument("--pin", action="store_true", help="pin the server to core 0 and the client to core 1")
    parser.add_argument("--json", help="also write every level's figures to this file")
    parser.add_argument(
        "--report", metavar="JSON", help="print the tables of an earlier run's --json file; run nothing"
    )
    args = parser.parse_args()
    if args.report:
        with open(args.report) as f:
            rows = json.load(f)
        report(rows, sorted({r["transport"] for r in rows}), sorted({r["sessions"] for r in rows}))
        return
    args.levels = args.levels or list(QUICK_LEVELS if args.quick else LEVELS)
    args.duration = args.duration or (1.5 if args.quick else 6.0)
    args.warmup = args.warmup if args.warmup is not None else (0.3 if args.quick else 1.0)
    nofile = raise_nofile()
    print(
        f"{os.cpu_count()} cores, Python {sys.version.split()[0]}, open files {nofile}, load average "
        f"{os.getloadavg()[0]:.2f}; {implementations()}; environment calls "
        f"{'on the event loop (--inline)' if args.inline else 'on threads'}; "
        f"{'server pinned to core 0, client to core 1' if args.pin else 'not pinned to cores'}; "
        f"{args.duration:g} s windows after {args.warmup:g} s warm-up",
        flush=True,
    )
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    given_up: set[tuple[str, str]] = set()
    for transport in args.transports:
        for level in args.levels:
            for kind in args.servers:  # the servers take turns level by level: both see the same machine
                if (kind, transport) in given_up:
                    continue
                row = run_level(kind, transport, level, args)
                rows.append(row)
                print(
                    f"  {kind:<7} {transport:<4} {level:>5} sessions: {row['rps']:7.0f} req/s, success "
                    f"{row['success'] * 100:6.2f}%, p99 {_fmt(row['p99_ms'], '.0f')} ms, server "
                    f"{_fmt(row['server_cores'], '.2f')} cores, load average {os.getloadavg()[0]:.1f} "
                    f"({time.monotonic() - started:.0f} s)",
                    flush=True,
                )
                if row["success"] < 0.5:
                    print(f"  {kind} {transport}: under 50 % success; its higher levels are skipped", flush=True)
                    given_up.add((kind, transport))
    rows.sort(key=lambda r: (args.servers.index(r["server"]), args.transports.index(r["transport"]), r["sessions"]))
    report(rows, args.transports, args.levels)
    print(f"\nload average {os.getloadavg()[0]:.2f}; total {time.monotonic() - started:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


def _entry() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("_serve", "_load"):
        parser = argparse.ArgumentParser()
        parser.add_argument("role")
        parser.add_argument("server", choices=["ludus", "openenv"])
        if sys.argv[1] == "_serve":
            parser.add_argument("port", type=int)
            parser.add_argument("--inline", action="store_true")
        else:
            parser.add_argument("transport", choices=["http", "ws"])
            parser.add_argument("port", type=int)
            parser.add_argument("sessions", type=int)
            parser.add_argument("--duration", type=float, default=6.0)
            parser.add_argument("--warmup", type=float, default=1.0)
            parser.add_argument("--timeout", type=float, default=5.0)
            parser.add_argument("--server-pid", type=int)
        parser.add_argument("--cpu", type=int)
        args = parser.parse_args()
        if args.cpu is not None and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {args.cpu})
        raise_nofile()
        if args.role == "_serve":
            serve_main(args.server, args.port, args.inline)
        else:
            load_main(args)
        return
    main()


if __name__ == "__main__":
    _entry()
