"""The env server against hostile clients, at small scale (benchmarks/env_server_attacks.py
replays the same attacks at full scale): browser pages of other origins (a real Chromium),
pipelined floods, idle and slow connections, more sockets than file descriptors, deep ids,
hung environment calls, a drain held by an idle episode, and the token's rules."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from ludus.core.registry import make
from ludus.rollout.remote import Connection, RemoteEnv, RemoteEnvError
from ludus.serve.env_server import EnvServer, ServerLimits
from support import page_of_another_origin, results_in_chromium, serving

TOKEN = "a-token-of-twenty-chars"


def guarded(app: EnvServer) -> contextlib.AbstractContextManager[str]:
    """``app`` on 127.0.0.1 with its connection-layer limits, as ``serve`` runs it."""
    return serving(app, path="", **app.uvicorn_options())


def launch(*flags: str, env: str = "arithmetic", files: int | None = None) -> tuple[subprocess.Popen, str]:
    """``ludus serve-env`` in its own process (with at most ``files`` descriptors); its address."""
    cmd = [sys.executable, "-m", "ludus.cli", "serve-env", env, "--port", "0", *flags]

    def limit_files() -> None:
        if files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))

    proc = subprocess.Popen(
        cmd, stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "300"}, preexec_fn=limit_files
    )
    seen = ""
    while " at http" not in (line := proc.stderr.readline()):  # warnings may come first
        seen += line
        if not line:
            proc.kill()
            raise AssertionError(f"serve-env did not start: {seen}")
    proc.early_stderr = seen  # type: ignore[attr-defined]
    return proc, line.split(" at ", 1)[1].split()[0]


def stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait(timeout=30)


def arithmetic(**limits) -> EnvServer:
    return EnvServer(lambda: make("arithmetic"), limits=ServerLimits(**limits))


def read_until_closed(sock: socket.socket, bound_s: float = 20.0) -> bytes:
    """Everything the server sends until it closes the connection (fails past ``bound_s``)."""
    sock.settimeout(bound_s)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        raise AssertionError(f"the server kept the connection open for {bound_s} s") from None
    return data


# ---- cross-origin requests ------------------------------------------------------------------------
PAGE = """<!doctype html><body><iframe name=sink></iframe><script>
window.results = {};
const record = (name) => (value) => { window.results[name] = String(value); };
const servers = new URLSearchParams(location.search);
async function attack(server, name) {
  await fetch(server + "/reset", {method: "POST", headers: {"content-type": "application/json"},
    body: JSON.stringify({session_id: name + "-json"})}).then(r => r.status).then(record(name + ".json"), record(name + ".json"));
  // a "simple" request: the browser sends it without asking first, so only the server can refuse it
  await fetch(server + "/reset", {method: "POST", mode: "no-cors", headers: {"content-type": "text/plain"},
    body: JSON.stringify({session_id: name + "-simple"})}).then(r => r.type).then(record(name + ".simple"), record(name + ".simple"));
  await new Promise((done) => {
    const ws = new WebSocket(server.replace("http", "ws") + "/ws");
    ws.onopen = () => ws.send(JSON.stringify({id: 1, op: "reset", session_id: name + "-ws"}));
    ws.onmessage = (event) => { record(name + ".ws_reply")(event.data); ws.close(); };
    ws.onclose = (event) => { record(name + ".ws_close")(event.code); done(); };
  });
}
function withoutOrigin(server) {  // requests a page makes with no Origin header: Sec-Fetch-Site only
  new Image().src = server + "/tasks/train/100";
  const script = document.createElement("script"); script.src = server + "/tasks/train/101"; document.head.appendChild(script);
  const form = document.createElement("form"); form.method = "GET"; form.action = server + "/tasks/train/102";
  form.target = "sink"; document.body.appendChild(form); form.submit();
  return fetch(server + "/tasks/train/103", {mode: "no-cors"}).catch(() => null);
}
attack(servers.get("refusing"), "refusing").then(() => withoutOrigin(servers.get("refusing")))
  .then(() => attack(servers.get("allowing"), "allowing")).then(() => { window.done = true; });
</script>"""


def test_a_page_of_another_origin_cannot_drive_the_server_in_a_real_browser():
    with page_of_another_origin(PAGE) as origin:
        refusing, allowing = arithmetic(), arithmetic(allow_origins=(origin,))
        with guarded(refusing) as refusing_url, guarded(allowing) as allowing_url:
            query = urllib.parse.urlencode({"refusing": refusing_url, "allowing": allowing_url})
            [results] = results_in_chromium([(f"{origin}/?{query}", None)])
            deadline = time.monotonic() + 20  # the Origin-less GETs are not awaited by the page
            while refusing.counts["refused_origin"] < 3 + 4:
                assert time.monotonic() < deadline, f"{refusing.counts['refused_origin']} requests refused"
                time.sleep(0.05)
            assert not refusing.sessions and "op_task" not in refusing.counts  # nothing the page sent was done
            assert {"allowing-json", "allowing-simple", "allowing-ws"} <= set(allowing.sessions)
    assert results["refusing.json"].startswith("TypeError")  # the preflight was refused
    assert results["refusing.simple"] == "opaque" and "refusing.ws_reply" not in results
    assert results["refusing.ws_close"] == "1008"
    # an allowed origin is served, preflight and all, and its page may read the replies
    assert results["allowing.json"] == "200" and json.loads(results["allowing.ws_reply"])["ok"]


def test_requests_with_a_foreign_origin_header_are_refused_over_http_and_websocket():
    app = arithmetic(allow_origins=("https://trainer.example",))
    with guarded(app) as url:
        evil = {"origin": "http://localhost:9999"}
        for response in (
            httpx.post(f"{url}/reset", json={"session_id": "evil"}, headers=evil),
            httpx.get(f"{url}/info", headers=evil),
            httpx.get(f"{url}/health", headers=evil),
            httpx.options(f"{url}/reset", headers={**evil, "access-control-request-method": "POST"}),
            httpx.post(f"{url}/reset", json={}, headers={"origin": "null"}),  # sandboxed frames, file:// pages
        ):
            assert response.status_code == 403 and response.json()["error"]["type"] == "forbidden_origin"
            assert "access-control-allow-origin" not in response.headers
        assert not app.sessions
        good = {"origin": "https://trainer.example"}
        preflight = httpx.options(f"{url}/reset", headers={**good, "access-control-request-method": "POST"})
        assert preflight.status_code == 204 and preflight.headers["access-control-allow-origin"] == good["origin"]
        assert "authorization" in preflight.headers["access-control-allow-headers"]
        served = httpx.post(f"{url}/reset", json={"session_id": "good"}, headers=good)
        assert served.status_code == 200 and served.headers["access-control-allow-origin"] == good["origin"]
        assert httpx.post(f"{url}/reset", json={"session_id": "cli"}).status_code == 200  # no Origin: a program

        async def websocket(origin: str) -> tuple[int, str]:
            async with connect(url.replace("http", "ws") + "/ws", origin=origin) as ws:
                with pytest.raises(ConnectionClosed) as closed:  # on sending, or on the reply
                    await ws.send(json.dumps({"id": 1, "op": "reset", "session_id": "evil-ws"}))
                    await asyncio.wait_for(ws.recv(), 20)
                return closed.value.rcvd.code, closed.value.rcvd.reason

        code, reason = asyncio.run(websocket("http://localhost:9999"))
        assert code == 1008 and reason.startswith("forbidden_origin:")
        assert set(app.sessions) == {"good", "cli"}


def test_requests_for_a_dns_name_other_than_localhost_are_refused():
    """DNS rebinding points an attacker's name at 127.0.0.1, making its page same-origin with the
    server (no Origin on GETs): only IP addresses, localhost and --allow-host names are answered."""
    app = arithmetic(allow_hosts=("envs.internal",))
    with guarded(app) as url:
        port = int(url.rsplit(":", 1)[1])
        for host in ("rebind.example", "127.0.0.1.nip.io", "localhost.rebind.example"):
            for response in (
                httpx.get(f"{url}/health", headers={"host": f"{host}:{port}"}),
                httpx.get(f"{url}/info", headers={"host": host}),
                httpx.post(f"{url}/reset", json={"session_id": "rebound"}, headers={"host": f"{host}:{port}"}),
            ):
                assert response.status_code == 403 and response.json()["error"]["type"] == "forbidden_host"
        for host in ("127.0.0.1", f"localhost:{port}", "LOCALHOST", f"[::1]:{port}", "envs.internal", "ENVS.internal."):
            assert httpx.get(f"{url}/info", headers={"host": host}).status_code == 200, host
        assert not app.sessions and app.counts["refused_host"] == 9

        async def websocket(name: str) -> tuple[int, str] | bool:
            async with connect(f"ws://{name}:{port}/ws", host="127.0.0.1", port=port) as ws:
                try:
                    await ws.send(json.dumps({"id": 1, "op": "info"}))
                    return json.loads(await asyncio.wait_for(ws.recv(), 20))["ok"]
                except ConnectionClosed as closed:
                    return closed.rcvd.code, closed.rcvd.reason

        code, reason = asyncio.run(websocket("rebind.example"))
        assert code == 1008 and reason.startswith("forbidden_host:") and "--allow-host" in reason
        assert asyncio.run(websocket("envs.internal")) is True
    for bad in ("http://envs.internal", "envs.internal:8100", "*.internal", "Envs.Internal"):
        with pytest.raises(ValueError, match="--allow-host"):
            ServerLimits(allow_hosts=(bad,))


def test_origin_less_requests_from_other_sites_are_refused_by_sec_fetch_site():
    """<img>, <script>, GET forms and no-cors fetch carry no Origin but do carry Sec-Fetch-Site."""
    app = arithmetic(allow_origins=("https://trainer.example",))
    with guarded(app) as url:
        for site, served in (("cross-site", False), ("same-site", False), ("same-origin", True), ("none", True)):
            reply = httpx.get(f"{url}/tasks/train/0", headers={"sec-fetch-site": site})
            assert (reply.status_code == 200) == served, site
            if not served:
                assert reply.json()["error"]["type"] == "forbidden_origin"
        allowed = {"sec-fetch-site": "cross-site", "origin": "https://trainer.example"}
        assert httpx.get(f"{url}/tasks/train/0", headers=allowed).status_code == 200
    assert app.counts["refused_origin"] == 2 and app.counts["op_task"] == 3


@pytest.mark.parametrize(
    ("origin", "written"),
    [
        ("http://LOCALHOST:8000", "http://localhost:8000"),
        ("https://app.example:443", "https://app.example"),
        ("http://user@app.example", "http://app.example"),
        ("http://app.example?x", "http://app.example"),
        ("https://app.example/", "https://app.example"),
        ("http://*", None),
        ("null", None),
        ("app.example", None),
    ],
)
def test_allowed_origins_are_written_as_browsers_send_them(origin, written):
    """An origin written otherwise would never match: the page meant to be allowed would be
    refused without a word. The error says what to write."""
    with pytest.raises(ValueError, match="--allow-origin") as caught:
        ServerLimits(allow_origins=(origin,))
    if written is not None:
        assert f"write {written!r}" in str(caught.value)
        ServerLimits(allow_origins=(written,))  # what it says to write is taken


def test_a_refused_websocket_is_closed_with_1008_and_the_client_says_why():
    app = EnvServer(lambda: make("arithmetic"), token=TOKEN)
    with guarded(app) as url:

        async def refused() -> tuple[int, str]:
            async with connect(url.replace("http", "ws") + "/ws") as ws:  # accepted, then closed
                with pytest.raises(ConnectionClosed) as closed:
                    await asyncio.wait_for(ws.recv(), 20)
                return closed.value.rcvd.code, closed.value.rcvd.reason

        assert asyncio.run(refused()) == (
            1008,
            "unauthorized: send the server's token as 'Authorization: Bearer TOKEN'",
        )
        with pytest.raises(RemoteEnvError, match="refused the WebSocket") as caught:
            asyncio.run(Connection(url, token="wrong-wrong-wrong-wrong", retries=2).arequest("info"))
        assert caught.value.kind == "unauthorized"


# ---- the token ------------------------------------------------------------------------------------
def test_the_bearer_scheme_is_case_insensitive_and_short_tokens_are_refused(tmp_path):
    for weak in ("x", "fifteen-chars!!", "has a space in it ok"):
        with pytest.raises(ValueError, match="token"):
            EnvServer(lambda: make("arithmetic"), token=weak)
    app = EnvServer(lambda: make("arithmetic"), token=TOKEN)
    with guarded(app) as url:
        for scheme in ("Bearer", "bearer", "BEARER"):
            assert httpx.get(f"{url}/info", headers={"authorization": f"{scheme} {TOKEN}"}).status_code == 200
        assert httpx.get(f"{url}/info", headers={"authorization": f"Basic {TOKEN}"}).status_code == 401
        assert httpx.get(f"{url}/info", headers={"authorization": TOKEN}).status_code == 401
    (tmp_path / "token").write_text(TOKEN + "\n")
    proc, url = launch("--token-file", str(tmp_path / "token"))
    try:
        assert httpx.get(f"{url}/info").status_code == 401
        assert httpx.get(f"{url}/info", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert TOKEN not in " ".join(proc.args)  # nothing for ps to show
    finally:
        stop(proc)
    proc, _ = launch("--token", TOKEN)
    stop(proc)
    assert "--token is visible to other users" in proc.early_stderr  # type: ignore[attr-defined]
    short = subprocess.run(
        [sys.executable, "-m", "ludus.cli", "serve-env", "arithmetic", "--port", "0", "--token", "short"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert short.returncode == 2 and "at least 16" in short.stderr


# ---- connections --------------------------------------------------------------------------------
def test_a_client_that_pipelines_without_reading_is_cut_off_and_health_stays_up():
    app = arithmetic(max_pipelined=8)
    with guarded(app) as url:
        host, port = url.removeprefix("http://").split(":")
        flood = socket.create_connection((host, int(port)))
        flood.sendall(b"GET /info HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 300)  # and never reads
        assert httpx.get(f"{url}/health").status_code == 200
        replies = read_until_closed(flood).count(b"HTTP/1.1 200")
        assert replies <= 8 + 1  # the rest were never read, let alone queued
        fair = socket.create_connection((host, int(port)))  # a few pipelined requests are still served
        fair.sendall(
            b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 5
            + b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n"
        )
        assert read_until_closed(fair).count(b"HTTP/1.1 200") == 6
        assert 'event="connections_overflowed"} 1' in httpx.get(f"{url}/metrics").text


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 414),
        (b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: " + b"a" * 70_000 + b"\r\n\r\n", 431),
        (b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"a: b\r\n" * 101 + b"\r\n", 431),
    ],
    ids=["url", "header", "header-count"],
)
def test_a_request_head_past_its_bound_is_refused_and_the_connection_closed(head, status):
    """httptools gathers a head without limit (a client sent 68 MB of one, or a million small
    headers, within the request timeout): past 64 KiB or 100 headers the server answers and
    closes, having read no more, and a head within the bounds is served."""
    app = arithmetic()
    with guarded(app) as url:
        host, port = url.removeprefix("http://").split(":")
        sock = socket.create_connection((host, int(port)))
        sock.sendall(head[:40_000])  # in two reads, the first within the bound
        time.sleep(0.05)
        with contextlib.suppress(OSError):  # the server may close before it has it all
            sock.sendall(head[40_000:])
        assert read_until_closed(sock).startswith(f"HTTP/1.1 {status} ".encode())
        within = {"x-a": "a" * 60_000, **{f"x-{i}": "1" for i in range(90)}}  # with httpx's own: 95 headers
        assert httpx.get(f"{url}/health", headers=within).status_code == 200
        assert 'event="heads_refused"} 1' in httpx.get(f"{url}/metrics").text


def test_a_client_that_never_reads_its_replies_is_closed_after_the_request_timeout():
    app = arithmetic(request_timeout_s=0.5, max_pipelined=5000)  # only the unread replies can close it
    with guarded(app) as url:
        host, port = url.removeprefix("http://").split(":")
        deaf = socket.socket()
        deaf.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        deaf.connect((host, int(port)))
        deaf.sendall(b"GET /info HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 2000)  # about 1 MB of replies, never read
        deadline = time.monotonic() + 30
        while 'event="connections_timed_out"} 1' not in httpx.get(f"{url}/metrics").text:
            assert time.monotonic() < deadline, "the server kept writing to a client that does not read"
            time.sleep(0.1)
        deaf.close()


def test_idle_and_half_sent_requests_are_closed_after_the_request_timeout():
    app = arithmetic(request_timeout_s=0.3)
    with guarded(app) as url:
        host, port = url.removeprefix("http://").split(":")
        idle = socket.create_connection((host, int(port)))  # sends nothing
        half = socket.create_connection((host, int(port)))
        half.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # a head never finished
        slow_body = socket.create_connection((host, int(port)))
        slow_body.sendall(b"POST /reset HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{")
        kept_alive = socket.create_connection((host, int(port)))
        kept_alive.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # answered, then idle
        for sock in (idle, half, slow_body):
            assert b"200" not in read_until_closed(sock)
        assert read_until_closed(kept_alive).count(b"HTTP/1.1 200") == 1
        assert not app.sessions


def test_more_sockets_than_descriptors_lock_no_one_out_and_sessions_fit_the_descriptors():
    """``sql`` sessions hold a descriptor each: with 256 descriptors, idle sockets past the limit
    and sessions past what fits are refused cleanly instead of failing the server."""
    proc, url = launch("--threads", "4", env="sql", files=256)
    try:
        metrics = httpx.get(f"{url}/metrics").text
        max_sessions = int(metrics.split("ludus_env_max_sessions ")[1].split()[0])
        max_connections = int(metrics.split("ludus_env_max_connections ")[1].split()[0])
        assert "max_sessions 10000 lowered to" in proc.early_stderr  # type: ignore[attr-defined]
        assert 16 <= max_sessions and max_sessions + max_connections < 256
        host, port = url.removeprefix("http://").split(":")
        idle = [socket.create_connection((host, int(port))) for _ in range(300)]
        try:
            health = httpx.get(f"{url}/health", timeout=20)
            assert health.status_code == 200
        finally:
            for sock in idle:
                sock.close()
        with httpx.Client(timeout=20) as client:
            for i in range(max_sessions + 1):
                reply = client.post(f"{url}/reset", json={"session_id": f"s{i}"})
                if reply.status_code != 200:
                    break
            assert i == max_sessions and reply.status_code == 503  # never "unable to open database file"
            assert reply.json()["error"]["type"] == "too_many_sessions"
            assert client.get(f"{url}/health").json()["sessions"] == max_sessions
    finally:
        stop(proc)


# ---- WebSocket ids, hung calls, drain -------------------------------------------------------------
def test_websocket_ids_are_short_text_numbers_or_null():
    """An id is echoed in its reply: a deep one could not be sent back, a long one (1 MiB) would
    swell every reply a client leaves unread. Others get an error reply with id null."""
    with guarded(arithmetic()) as url:

        async def replies(ids: list[str]) -> list[dict]:
            async with connect(url.replace("http", "ws") + "/ws") as ws:
                for rid in ids:
                    await ws.send('{"id": ' + rid + ', "op": "info"}')
                return [json.loads(await asyncio.wait_for(ws.recv(), 20)) for _ in ids]

        refused = ["[" * 1000 + "]" * 1000, json.dumps("x" * 129), "true", '{"a": 1}', "[1]"]
        for reply in asyncio.run(replies(refused)):
            assert reply["id"] is None and reply["ok"] is False and reply["error"]["type"] == "bad_request"
            assert "128 characters" in reply["error"]["message"]
        echoed = [json.dumps("x" * 128), "7", "1.5", "null"]
        assert [r["id"] for r in asyncio.run(replies(echoed))] == ["x" * 128, 7, 1.5, None]


def raw_websocket(url: str, receive_buffer: int) -> socket.socket:
    """A WebSocket opened on a plain socket with a small receive buffer: a client that can stop
    reading without its library reading for it."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.connect((host, int(port)))
    sock.sendall(
        b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    sock.settimeout(20)
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def text_frame(text: str) -> bytes:
    """A client's WebSocket text frame of under 126 bytes, masked with a zero key (the payload
    travels as it is)."""
    data = text.encode()
    assert len(data) < 126
    return bytes([0x81, 0x80 | len(data)]) + b"\0\0\0\0" + data


def test_a_websocket_that_never_reads_stops_being_read_and_is_closed():
    """The window counts requests, not bytes: 300 requests for a 100 KB reply each, never read,
    made the server hold 30 MB. Past 4 MiB of replies waiting to be sent the server reads no more
    of the socket, and replies unread for the request timeout close it."""
    app = arithmetic(request_timeout_s=0.5)
    app.info["description"] = "x" * 100_000  # every info reply about 100 KB
    with guarded(app) as url:
        deaf = raw_websocket(url, receive_buffer=4096)
        deaf.sendall(text_frame('{"id": 1, "op": "info"}') * 300)  # and never reads
        deadline = time.monotonic() + 30
        while 'event="connections_timed_out"} 1' not in httpx.get(f"{url}/metrics").text:
            assert time.monotonic() < deadline, "the server kept a WebSocket that does not read"
            time.sleep(0.1)
        deaf.close()
        assert 0 < app.counts["op_info"] < 150  # the rest were never read, let alone answered


def test_an_idle_websocket_is_closed_but_not_while_a_request_runs():
    app = EnvServer(Hangs(seconds=1.0), limits=ServerLimits(ws_idle_timeout_s=0.3))
    with guarded(app) as url:

        async def episode() -> tuple[dict, int, str]:
            async with connect(url.replace("http", "ws") + "/ws") as ws:
                await ws.send(json.dumps({"id": 1, "op": "reset", "session_id": "s"}))
                await asyncio.wait_for(ws.recv(), 20)
                step = {"id": 2, "op": "step", "session_id": "s", "action": {"role": "assistant", "content": "hang"}}
                await ws.send(json.dumps(step))
                reply = json.loads(await asyncio.wait_for(ws.recv(), 20))  # 1 s of work: longer than the idle limit
                with pytest.raises(ConnectionClosed) as closed:
                    await asyncio.wait_for(ws.recv(), 20)  # nothing in progress: closed
                return reply, closed.value.rcvd.code, closed.value.rcvd.reason

        reply, code, reason = asyncio.run(episode())
        assert reply["ok"] and reply["result"]["terminated"]
        assert code == 1000 and reason.startswith("idle")
        assert 'event="websockets_closed_idle"} 1' in httpx.get(f"{url}/metrics").text
        env = RemoteEnv(url)  # a client reconnects on its next request
        assert asyncio.run(env.areset(env.task_source("train").get(0))).messages


def test_health_is_answered_when_every_connection_is_a_websocket():
    """At --max-connections an idle WebSocket is closed to make room, as idle HTTP connections
    are; with every connection busy, a newcomer is still read to answer GET /health, and refused
    anything else."""
    hangs = Hangs()
    app = EnvServer(hangs, limits=ServerLimits(max_connections=4, threads=4, call_timeout_s=60))
    hang = {"op": "step", "action": {"role": "assistant", "content": "hang"}}
    try:
        with guarded(app) as url:

            async def hold() -> tuple[int, int | None, int, int]:
                async def busy(name: str) -> Any:  # a WebSocket whose step is in progress
                    ws = await connect(url.replace("http", "ws") + "/ws")
                    await ws.send(json.dumps({"id": 0, "op": "reset", "session_id": name}))
                    await asyncio.wait_for(ws.recv(), 20)
                    await ws.send(json.dumps({**hang, "id": 1, "session_id": name}))
                    return ws

                get = functools.partial(httpx.get, timeout=20)
                sockets = [await busy(f"h{i}") for i in range(3)]
                idle = await connect(url.replace("http", "ws") + "/ws")
                try:
                    first = (await asyncio.to_thread(get, f"{url}/health")).status_code  # the idle one makes room
                    await asyncio.wait_for(idle.wait_closed(), 20)
                    sockets.append(await busy("h3"))  # every connection busy
                    health = (await asyncio.to_thread(get, f"{url}/health")).status_code
                    other = (await asyncio.to_thread(get, f"{url}/info")).status_code
                    return first, idle.close_code, health, other
                finally:
                    for ws in [*sockets, idle]:
                        await ws.close()

            assert asyncio.run(hold()) == (200, 1000, 200, 503)
            metrics = httpx.get(f"{url}/metrics").text
            assert 'event="connections_evicted"} 1' in metrics and 'event="connections_refused"} 1' in metrics
    finally:
        hangs.release.set()


class Hangs:
    """An environment factory whose "hang" steps wait until released (at most ``seconds``)."""

    def __init__(self, seconds: float | None = None) -> None:
        self.release, self.seconds = threading.Event(), seconds

    def __call__(self):
        from ludus.core import Score, SingleTurnEnv, Status

        release, seconds = self.release, self.seconds

        class Hanging(SingleTurnEnv):
            name = "hangs"

            def default_tasks(self, split="train"):
                return make("arithmetic").task_source(split)

            def score(self, task, completion):
                if completion == "hang":
                    release.wait(seconds)
                return Score.zero(Status.WRONG, "no")

        return Hanging()


def test_hung_calls_do_not_starve_new_resets():
    hangs = Hangs()
    app = EnvServer(hangs, limits=ServerLimits(threads=2, call_timeout_s=0.5))
    try:
        with guarded(app) as url:
            step = {"action": {"role": "assistant", "content": "hang"}}
            with httpx.Client(timeout=30) as client:
                for i in range(2):
                    assert client.post(f"{url}/reset", json={"session_id": f"h{i}"}).status_code == 200

                def hang(i: int) -> None:
                    client.post(f"{url}/step", json={**step, "session_id": f"h{i}"})

                hung = [threading.Thread(target=hang, args=(i,)) for i in range(2)]
                for thread in hung:
                    thread.start()
                for thread in hung:
                    thread.join()  # both steps timed out; their threads still hang
                fresh = client.post(f"{url}/reset", json={"session_id": "fresh"})
                assert fresh.status_code == 200, fresh.text
                assert 'event="threads_replaced"} 2' in client.get(f"{url}/metrics").text
    finally:
        hangs.release.set()


def test_sigterm_does_not_wait_for_an_episode_that_was_reset_and_left():
    proc, url = launch("--drain-timeout", "600", "--drain-idle", "0.5")
    try:
        assert httpx.post(f"{url}/reset", json={"session_id": "left"}).status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0  # not the 600 s of the drain limit
    finally:
        stop(proc)
