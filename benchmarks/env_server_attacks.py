"""Hostile clients against a live ``ludus serve-env`` on 127.0.0.1: each attack of issue 28,
replayed at full scale, with the server's memory and ``/health`` latency under it.

    python benchmarks/env_server_attacks.py            # about 3 minutes (an unprotected server: 5)
    PYTHONPATH=/tmp/before/src python benchmarks/env_server_attacks.py   # another checkout's server

Every server runs in its own process (this script, ``--serve``), started afresh per attack
through ``ludus.serve.env_server.serve`` with uvicorn's defaults, so that the code under test
is whatever ``ludus`` the interpreter imports. The attacks, all bounded in count and time:

* pipelining: 20 connections each send up to 100,000 ``GET /health`` requests back to back
  (35 bytes each) and never read a reply; they stay open for 20 s, then close.
* idle sockets: a server limited to 1,024 file descriptors gets 1,100 connections that send
  nothing, then 1,100 more; a new client asks ``/health`` throughout. Then: how many idle
  sockets the server has closed 15 s later.
* descriptors: ``sql`` sessions (one database file open each) under the same 1,024-descriptor
  limit, opened until the server refuses one.
* cross-origin: ``POST /reset`` and a WebSocket ``reset`` carrying ``Origin:
  http://localhost:9999``, as a page served from another port would send them.
* deep ids: a WebSocket message whose ``id`` nests 1,000 deep.
* hung calls: 6 steps that hang for 20 s on a server of 4 threads (call limit 2 s), then a
  reset every 0.5 s for 10 s.
* drain: one session reset and never stepped, then SIGTERM (drain limit 30 s).

Each line says whether the attack was refused or survived (``ok``) or not (``FAILED``), with
its figures; the exit code is the number of failures. Not a test: tests/test_env_server_attacks.py
replays the same attacks at small scale.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from ludus.core import Score, SingleTurnEnv, Status, Task

EVIL = "http://localhost:9999"


class SlowGrader(SingleTurnEnv):
    """Replies "hang" take 20 s to grade (a call that outlives the server's 2 s limit)."""

    name, description = "slow-grader", "a grader that sometimes takes 20 s"

    def default_tasks(self, split: str = "train") -> Any:
        return Tasks()

    def score(self, task: Task, completion: str) -> Score:
        if completion == "hang":
            time.sleep(20)
        return Score.zero(Status.WRONG, "no")


class Tasks:
    size = None

    def get(self, index: int) -> Task:
        return Task(f"t/{index}", f"{index}+1=", answer=str(index + 1))


# ---- the server, in its own process ---------------------------------------------------------------
def serve_main(env: str, files: int | None, limits: dict[str, Any]) -> None:
    from ludus.core.registry import factory
    from ludus.serve.env_server import ServerLimits, serve

    if files is not None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))
    known = ServerLimits.__dataclass_fields__
    chosen = ServerLimits(**{k: v for k, v in limits.items() if k in known})  # another checkout may lack some
    make = SlowGrader if env == "slow-grader" else factory(env, {})
    serve(make, port=0, limits=chosen, on_ready=lambda url: print(url, flush=True))


@dataclass
class Server:
    proc: subprocess.Popen[str]
    url: str

    @property
    def host_port(self) -> tuple[str, int]:
        host, port = self.url.removeprefix("http://").split(":")
        return host, int(port)

    def rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as status:
            kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
        return kb / 1024

    def health(self, timeout: float = 30.0) -> tuple[int | None, float]:
        """``/health`` on a new connection: its status (None: no answer) and seconds taken."""
        start = time.perf_counter()
        try:
            status: int | None = httpx.get(f"{self.url}/health", timeout=timeout).status_code
        except httpx.HTTPError:
            status = None
        return status, time.perf_counter() - start


@contextmanager
def server(env: str = "arithmetic", files: int | None = None, **limits: Any) -> Iterator[Server]:
    cmd = [sys.executable, __file__, "--serve", env, "--limits", json.dumps(limits)]
    if files is not None:
        cmd += ["--files", str(files)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()  # type: ignore[union-attr]
        if not url.startswith("http"):
            raise RuntimeError(f"the server did not start (exit {proc.wait()})")
        yield Server(proc, url)
    finally:
        proc.kill()
        proc.wait()


# ---- the attacks --------------------------------------------------------------------------------
@dataclass
class Report:
    lines: list[tuple[str, bool, str]] = field(default_factory=list)

    def add(self, attack: str, ok: bool, figures: str) -> None:
        self.lines.append((attack, ok, figures))
        print(f"{'ok    ' if ok else 'FAILED'} {attack:<14} {figures}", flush=True)


class HealthWatch:
    """``/health`` from a new connection every 0.25 s in a thread: the slowest answer, and how
    many got none within 30 s."""

    def __init__(self, srv: Server):
        self.srv, self.worst, self.failed, self.asked = srv, 0.0, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            status, seconds = self.srv.health()
            self.asked += 1
            self.worst = max(self.worst, seconds)
            self.failed += status != 200

    def __enter__(self) -> HealthWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def figures(self) -> str:
        return f"/health: {self.asked - self.failed}/{self.asked} answered, slowest {self.worst * 1000:.0f} ms"


async def flood(host: str, port: int, requests: int, deadline: float) -> int:
    """Pipelined requests on one connection, never reading, until ``deadline`` (monotonic);
    the connection stays open until then. How many requests the socket took."""
    reader, writer = await asyncio.open_connection(host, port)
    batch, sent = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 1000, 0
    try:
        while sent < requests and time.monotonic() < deadline:
            writer.write(batch)
            await asyncio.wait_for(writer.drain(), max(0.1, deadline - time.monotonic()))
            sent += 1000
    except (TimeoutError, OSError):
        pass  # the server stopped reading, or closed the connection
    await asyncio.sleep(deadline - time.monotonic())  # held open, replies unread
    writer.transport.abort()
    return sent


def attack_pipelining(report: Report) -> None:
    with server() as srv:
        base = srv.rss_mb()
        peak = [base]

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], srv.rss_mb())
                done.wait(0.2)

        done = threading.Event()
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        with HealthWatch(srv) as watch:

            async def all_floods() -> list[int]:
                deadline = time.monotonic() + 20
                return await asyncio.gather(*(flood(*srv.host_port, 100_000, deadline) for _ in range(20)))

            sent = sum(asyncio.run(all_floods()))
            time.sleep(3)  # after the floods: does the memory come back, does /health answer
        done.set()
        sampler.join()
        after = srv.rss_mb()
        ok = peak[0] - base < 200 and watch.failed == 0 and after - base < 100
        report.add(
            "pipelining",
            ok,
            f"20 connections sent {sent:,} requests; RSS {base:.0f} -> peak {peak[0]:.0f} -> {after:.0f} MB "
            f"3 s after; {watch.figures()}",
        )


def idle_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    opened = []
    for _ in range(count):
        sock = socket.socket()
        sock.settimeout(5)
        try:
            sock.connect((host, port))
        except OSError:
            sock.close()
            continue
        opened.append(sock)
    return opened


def closed_by_server(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(4096) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def attack_idle(report: Report) -> None:
    with server(files=1024) as srv:
        host, port = srv.host_port
        idle = idle_sockets(host, port, 1100)
        first = srv.health(10)
        idle += idle_sockets(host, port, 1100)
        second = srv.health(10)
        time.sleep(15)
        third = srv.health(10)
        closed = sum(closed_by_server(sock) for sock in idle)
        for sock in idle:
            sock.close()
        answered = [s for s, _ in (first, second, third)]
        ok = answered == [200, 200, 200] and closed == len(idle)
        report.add(
            "idle sockets",
            ok,
            f"{len(idle):,} idle connections (limit 1,024 descriptors); /health after 1,100: {first[0]} in "
            f"{first[1] * 1000:.0f} ms, after 2,200: {second[0]} in {second[1] * 1000:.0f} ms, 15 s later: "
            f"{third[0]}; {closed:,} closed by the server 15 s later",
        )


def attack_descriptors(report: Report) -> None:
    with server("sql", files=1024) as srv, httpx.Client(timeout=30) as client:
        opened, last = 0, None
        for i in range(3000):
            last = client.post(f"{srv.url}/reset", json={"session_id": f"s{i}"})
            if last.status_code != 200:
                break
            opened += 1
        error = last.json().get("error", {}) if last is not None and last.status_code != 200 else {}
        health = srv.health(10)[0]
        ok = error.get("type") == "too_many_sessions" and health == 200
        report.add(
            "descriptors",
            ok,
            f"sql under 1,024 descriptors: {opened:,} sessions, then HTTP {last.status_code if last else None} "
            f"{error.get('type')}: {str(error.get('message'))[:70]!r}; /health {health}",
        )


def attack_origin(report: Report) -> None:
    with server() as srv:
        http = httpx.post(f"{srv.url}/reset", json={"session_id": "evil"}, headers={"origin": EVIL})

        async def websocket() -> str:
            try:
                async with connect(srv.url.replace("http", "ws") + "/ws", origin=EVIL) as ws:  # type: ignore[arg-type]
                    await ws.send(json.dumps({"id": 1, "op": "reset", "session_id": "evil-ws"}))
                    return f"replied {json.loads(await asyncio.wait_for(ws.recv(), 10)).get('ok')}"
            except ConnectionClosed as exc:
                return f"closed {exc.rcvd.code if exc.rcvd else None}"
            except InvalidStatus as exc:
                return f"handshake HTTP {exc.response.status_code}"

        ws = asyncio.run(websocket())
        sessions = httpx.get(f"{srv.url}/health").json()["sessions"]
        ok = http.status_code == 403 and ws == "closed 1008" and sessions == 0
        report.add("cross-origin", ok, f"POST /reset: HTTP {http.status_code}; WebSocket: {ws}; sessions {sessions}")


def attack_deep_id(report: Report) -> None:
    with server() as srv:

        async def deep() -> str:
            async with connect(srv.url.replace("http", "ws") + "/ws") as ws:
                await ws.send('{"id": ' + "[" * 1000 + "]" * 1000 + ', "op": "info"}')
                try:
                    reply = json.loads(await asyncio.wait_for(ws.recv(), 10))
                except TimeoutError:
                    return "no reply in 10 s"
                return f"reply ok={reply.get('ok')} {reply.get('error', {}).get('type')}"

        got = asyncio.run(deep())
        report.add("deep id", got.startswith("reply"), got)


def attack_hung(report: Report) -> None:
    with server("slow-grader", threads=4, call_timeout_s=2.0) as srv, httpx.Client(timeout=30) as client:
        for i in range(6):
            client.post(f"{srv.url}/reset", json={"session_id": f"h{i}"})
        step = {"action": {"role": "assistant", "content": "hang"}}
        threads = [
            threading.Thread(
                target=client.post, args=(f"{srv.url}/step",), kwargs={"json": {**step, "session_id": f"h{i}"}}
            )
            for i in range(6)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        statuses: list[int] = []
        start = time.monotonic()
        while time.monotonic() - start < 10:
            statuses.append(client.post(f"{srv.url}/reset", json={}).status_code)
            time.sleep(0.5)
        refused = sum(s != 200 for s in statuses)
        report.add(
            "hung calls",
            refused == 0,
            f"after 6 hung steps (4 threads): {len(statuses) - refused}/{len(statuses)} resets in the next 10 s "
            f"answered 200, {statuses.count(504)} got 504",
        )


def attack_drain(report: Report) -> None:
    with server(drain_timeout_s=30.0) as srv:
        httpx.post(f"{srv.url}/reset", json={"session_id": "left"})
        start = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        try:
            code: int | None = srv.proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            code = None
        took = time.monotonic() - start
        report.add("drain", code == 0 and took < 15, f"one idle episode: SIGTERM to exit {took:.1f} s (exit {code})")


ATTACKS: dict[str, Callable[[Report], None]] = {
    "pipelining": attack_pipelining,
    "idle": attack_idle,
    "descriptors": attack_descriptors,
    "origin": attack_origin,
    "deep-id": attack_deep_id,
    "hung": attack_hung,
    "drain": attack_drain,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", choices=list(ATTACKS), help="run these attacks only")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--files", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--limits", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve_main(args.serve, args.files, json.loads(args.limits))
        return 0
    import ludus

    print(f"ludus from {os.path.dirname(ludus.__file__)}; {os.cpu_count()} cores", flush=True)
    report = Report()
    for name in args.only or ATTACKS:
        ATTACKS[name](report)
    failed = sum(not ok for _, ok, _ in report.lines)
    print(f"{len(report.lines) - failed} passed, {failed} failed")
    return failed


if __name__ == "__main__":
    sys.exit(main())
