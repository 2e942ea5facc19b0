"""The env server against hostile clients, at small scale (benchmarks/env_server_attacks.py
replays the same attacks at full scale): browser pages of other origins (a real Chromium),
pipelined floods, idle and slow connections, more sockets than file descriptors, deep ids,
hung environment calls, a drain held by an idle episode, and the token's rules."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from ludus.core.registry import make
from ludus.rollout.remote import Connection, RemoteEnvError
from ludus.serve.env_server import EnvServer, ServerLimits
from support import serving

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
PAGE = """<!doctype html><script>
window.results = {};
const record = (name) => (value) => { window.results[name] = String(value); };
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
attack(REFUSING, "refusing").then(() => attack(ALLOWING, "allowing")).then(() => { window.done = true; });
</script>"""


def test_a_page_of_another_origin_cannot_drive_the_server_in_a_real_browser():
    from playwright.sync_api import sync_playwright

    from ludus.envs.web.browser import find_chromium, launch_args

    page_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    origin = f"http://localhost:{page_server.server_address[1]}"  # another origin than 127.0.0.1:PORT
    refusing, allowing = arithmetic(), arithmetic(allow_origins=(origin,))
    with guarded(refusing) as refusing_url, guarded(allowing) as allowing_url:
        page = PAGE.replace("REFUSING", json.dumps(refusing_url)).replace("ALLOWING", json.dumps(allowing_url))

        class Page(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/html")
                self.end_headers()
                self.wfile.write(page.encode())

            def log_message(self, *args: object) -> None:
                pass

        page_server.RequestHandlerClass = Page
        threading.Thread(target=page_server.serve_forever, daemon=True).start()
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=find_chromium(), args=launch_args())
                tab = browser.new_page()
                tab.goto(origin + "/")
                tab.wait_for_function("window.done === true", timeout=60_000)
                results = tab.evaluate("window.results")
                browser.close()
        finally:
            page_server.shutdown()
            page_server.server_close()
        assert not refusing.sessions  # nothing the page sent was carried out
        assert results["refusing.json"].startswith("TypeError")  # the preflight was refused
        assert results["refusing.simple"] == "opaque" and "refusing.ws_reply" not in results
        assert results["refusing.ws_close"] == "1008"
        assert refusing.counts["refused_origin"] >= 3  # preflight, simple POST, WebSocket
        # an allowed origin is served, preflight and all, and its page may read the replies
        assert results["allowing.json"] == "200" and json.loads(results["allowing.ws_reply"])["ok"]
        assert {"allowing-json", "allowing-simple", "allowing-ws"} <= set(allowing.sessions)


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
        flood.sendall(b"GET /info HTTP/1.1\r\nHost: x\r\n\r\n" * 300)  # and never reads
        assert httpx.get(f"{url}/health").status_code == 200
        replies = read_until_closed(flood).count(b"HTTP/1.1 200")
        assert replies <= 8 + 1  # the rest were never read, let alone queued
        fair = socket.create_connection((host, int(port)))  # a few pipelined requests are still served
        fair.sendall(
            b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" * 5 + b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n"
        )
        assert read_until_closed(fair).count(b"HTTP/1.1 200") == 6
        assert 'event="connections_overflowed"} 1' in httpx.get(f"{url}/metrics").text


def test_a_client_that_never_reads_its_replies_is_closed_after_the_request_timeout():
    app = arithmetic(request_timeout_s=0.5, max_pipelined=5000)  # only the unread replies can close it
    with guarded(app) as url:
        host, port = url.removeprefix("http://").split(":")
        deaf = socket.socket()
        deaf.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        deaf.connect((host, int(port)))
        deaf.sendall(b"GET /info HTTP/1.1\r\nHost: x\r\n\r\n" * 2000)  # about 1 MB of replies, never read
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
        half.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # a head never finished
        slow_body = socket.create_connection((host, int(port)))
        slow_body.sendall(b"POST /reset HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        kept_alive = socket.create_connection((host, int(port)))
        kept_alive.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")  # answered, then idle
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
def test_a_message_whose_id_cannot_be_sent_back_gets_an_error_reply():
    with guarded(arithmetic()) as url:

        async def deep_id() -> dict:
            async with connect(url.replace("http", "ws") + "/ws") as ws:
                deep = "[" * 1000 + "]" * 1000
                await ws.send('{"id": ' + deep + ', "op": "info"}')
                return json.loads(await asyncio.wait_for(ws.recv(), 20))

        reply = asyncio.run(deep_id())
        assert reply["id"] is None and reply["ok"] is False and reply["error"]["type"] == "bad_request"


class Hangs:
    """An environment factory whose "hang" steps never finish until released."""

    release = threading.Event()

    def __call__(self):
        from ludus.core import Score, SingleTurnEnv, Status

        release = self.release

        class Hanging(SingleTurnEnv):
            name = "hangs"

            def default_tasks(self, split="train"):
                return make("arithmetic").task_source(split)

            def score(self, task, completion):
                if completion == "hang":
                    release.wait()
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
