"""``ludus serve-model`` against web pages and hostile clients, on real servers on 127.0.0.1: the
browser guard it shares with serve-env (Host names against DNS rebinding, Origin,
Sec-Fetch-Site), FastAPI's refusal of bodies without a JSON content type, the connection layer's
bound on request heads, and a real Chromium rebinding a name to both servers and posting
type-less bodies from another origin."""

from __future__ import annotations

import functools
import json
import socket
import time
import urllib.parse
from typing import Any

import httpx
import pytest

from ludus.cli import build_parser
from ludus.core.registry import make
from ludus.policies.base import Completion, Policy
from ludus.serve import model_server, openai_front
from ludus.serve.env_server import EnvServer
from ludus.serve.net import ConnectionGuard, connection_options
from support import page_of_another_origin, results_in_chromium, serving

RPC = {"method": "reload_weights", "kwargs": {"weights_path": "/tmp/attacker-weights"}}
CHAT = {"messages": [{"role": "user", "content": "hi"}]}


class RecordingPolicy(Policy):
    """A stand-in model: it records generations and weight reloads."""

    def __init__(self) -> None:
        self.generated = 0
        self.loaded: list[str] = []

    def generate(self, conversations: Any, sampling: Any, *, tools: Any = None, generator: Any = None) -> Any:
        self.generated += len(conversations)
        return [Completion("hello", [1], [2], [0.0], "stop") for _ in conversations]

    def load_weights(self, path: str) -> None:
        self.loaded.append(path)


def test_serve_model_answers_programs_and_allowed_pages_only():
    policy = RecordingPolicy()
    app = model_server.create_app(
        policy, "m", weight_updates=True, allow_origins=("https://app.example",), allow_hosts=("models.internal",)
    )
    guard = ConnectionGuard(64, request_timeout_s=10.0, max_pipelined=32)  # the connection layer, as the CLI runs it
    with serving(app, path="", **connection_options(guard)) as url, httpx.Client(timeout=30) as client:
        port = int(url.rsplit(":", 1)[1])
        rebound = {"host": f"rebind.example:{port}", "origin": f"http://rebind.example:{port}"}
        for headers, kind in (
            (rebound, "forbidden_host"),  # a rebound page is same-origin: only the Host tells
            ({"host": "rebind.example"}, "forbidden_host"),
            ({"origin": "http://localhost:9999"}, "forbidden_origin"),
            ({"sec-fetch-site": "cross-site"}, "forbidden_origin"),  # <img>, forms, no-cors fetch
        ):
            for path, body in (("/collective_rpc", RPC), ("/v1/chat/completions", CHAT)):
                refused = client.post(url + path, json=body, headers=headers)
                assert refused.status_code == 403 and refused.json()["error"]["type"] == kind, (headers, path)
            assert client.get(f"{url}/weight_info", headers=headers).status_code == 403
        # no JSON content type, as a page's type-less Blob sends: FastAPI 0.132 and later refuse the body
        assert client.post(f"{url}/collective_rpc", content=json.dumps(RPC)).status_code in (400, 415, 422)
        assert not policy.loaded and policy.generated == 0
        allowed = {"origin": "https://app.example", "host": f"models.internal:{port}"}
        preflight = client.options(
            f"{url}/v1/chat/completions", headers={**allowed, "access-control-request-method": "POST"}
        )
        assert preflight.status_code == 204 and preflight.headers["access-control-allow-origin"] == allowed["origin"]
        served = client.post(f"{url}/v1/chat/completions", json=CHAT, headers=allowed)
        assert served.status_code == 200 and served.headers["access-control-allow-origin"] == allowed["origin"]
        assert client.post(f"{url}/collective_rpc", json=RPC).status_code == 200  # a program: the trainer
        assert policy.loaded == [RPC["kwargs"]["weights_path"]] and policy.generated == 1
        head = socket.create_connection(("127.0.0.1", port))  # a head past 64 KiB: refused, closed
        head.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: " + b"a" * 70_000 + b"\r\n\r\n")
        head.settimeout(20)
        assert head.recv(4096).startswith(b"HTTP/1.1 431 ")
        head.close()


def test_serve_model_refuses_origins_no_browser_sends_before_loading_the_model():
    args = build_parser().parse_args(["serve-model", "--port", "0", "--allow-origin", "https://app.example:443"])
    with pytest.raises(ValueError, match="write 'https://app.example'"):
        args.run(args)
    with pytest.raises(ValueError, match="--allow-host"):
        model_server.create_app(RecordingPolicy(), "m", allow_hosts=("models.internal:8000",))


# a page of another origin posting bodies without a type (no Content-Type: "simple" requests, sent
# without a preflight); the weights' version last, as a beacon
BLOB_PAGE = """<!doctype html><script>
const model = new URLSearchParams(location.search).get("model");
const blob = (o) => new Blob([JSON.stringify(o)]);
const post = (path, o) => fetch(model + path, {method: "POST", mode: "no-cors", body: blob(o)}).catch(() => null);
Promise.all([
  post("/collective_rpc", {method: "reload_weights", kwargs: {weights_path: "/tmp/attacker-weights"}}),
  post("/v1/chat/completions", {messages: [{role: "user", content: "hi"}]}),
]).then(() => {
  window.results = {beacon: navigator.sendBeacon(model + "/update_weight_version", blob({new_version: "page"}))};
  window.done = true;
});
</script>"""

# run in a page of rebind.test, a name pointed at 127.0.0.1 (DNS rebinding): same-origin with the server
REBIND_JS = """async () => {
  const status = (promise) => promise.then(r => r.status, e => String(e));
  const post = (path, body) => fetch(path, {method: "POST", headers: {"content-type": "application/json"},
    body: JSON.stringify(body)});
  return {
    info: await status(fetch("/info")),
    task: await status(fetch("/tasks/train/0")),
    chat: await status(post("/v1/chat/completions", {messages: [{role: "user", content: "hi"}]})),
    reload: await status(post("/collective_rpc", {method: "reload_weights", kwargs: {weights_path: "/tmp/x"}})),
    version: await status(post("/update_weight_version", {new_version: "rebound"})),
  };
}"""


def test_pages_in_a_real_browser_cannot_drive_serve_model_or_read_a_rebound_server(monkeypatch):
    """The Origin rule alone stops type-less posts: the app is built as FastAPI before 0.132 built
    it, parsing JSON whatever the Content-Type. A rebound name is refused by the Host rule."""
    monkeypatch.setattr(openai_front, "FastAPI", functools.partial(openai_front.FastAPI, strict_content_type=False))
    policy = RecordingPolicy()
    model = model_server.create_app(policy, "m", weight_updates=True)
    posted: list[str] = []

    async def recording(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            posted.append(scope["path"])
        await model(scope, receive, send)

    env = EnvServer(lambda: make("arithmetic"))
    rebind = ("--host-resolver-rules=MAP rebind.test 127.0.0.1", "--proxy-bypass-list=rebind.test")
    with serving(recording, path="") as model_url, serving(env, path="", **env.uvicorn_options()) as env_url:
        with page_of_another_origin(BLOB_PAGE) as origin:
            port = {name: url.rsplit(":", 1)[1] for name, url in (("model", model_url), ("env", env_url))}
            pages = [
                (f"{origin}/?{urllib.parse.urlencode({'model': model_url})}", None),
                (f"http://rebind.test:{port['model']}/health", REBIND_JS),
                (f"http://rebind.test:{port['env']}/health", REBIND_JS),
            ]
            blob, rebound_model, rebound_env = results_in_chromium(pages, rebind)
        deadline = time.monotonic() + 20
        while posted.count("/update_weight_version") < 2:  # the beacon, and the rebound page's post
            assert time.monotonic() < deadline, f"the server saw {posted}"
            time.sleep(0.05)
        version = httpx.get(f"{model_url}/weight_info").json()["weight_version"]
    assert blob == {"beacon": True}
    assert not policy.loaded and policy.generated == 0 and version == "default"
    assert {rebound_model[k] for k in ("chat", "reload", "version")} == {403}
    assert {rebound_env[k] for k in ("info", "task")} == {403} and env.counts["refused_host"] >= 3
