"""``ludus proxy`` and the OpenAI front it shares with the agent gateway, attacked on real servers
on 127.0.0.1 with the real ``openai`` client, raw sockets and a real Chromium: web pages of
another origin and rebound names; bodies too large, too deep, or JSON no reader takes (NaN,
half a surrogate pair); sampling settings no sampler can use; an agent sending calls faster than
its episode's budget; episodes ended under a flood of calls; keys looked for in logs, errors and
records; and slow, idle and never-reading clients. Each attack that once worked is named in the
test that now stops it."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from ludus.agents.gateway import AgentGateway
from ludus.policies.tiny import TinyConfig, TinyPolicy
from ludus.serve import openai_front
from ludus.serve.model_server import PolicyBackend
from ludus.serve.net import guarded_server, listen
from ludus.serve.openai_front import MAX_JSON_DEPTH, MAX_REQUEST_BYTES, ChatCall
from ludus.serve.proxy import EpisodeBook, proxy_app
from support import page_of_another_origin, results_in_chromium, serving
from test_proxy import ADMIN, QUESTION, TOKEN, ScriptedAgentModel

JSON = {"content-type": "application/json"}


def root(url: str) -> str:
    return url.removesuffix("/v1")


def as_agent(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}", **JSON}


def strictly_parsed(text: str) -> Any:
    """``text`` as JSON that every reader takes (no NaN or Infinity)."""

    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in a reply or a record: not JSON")

    return json.loads(text, parse_constant=refuse)


@contextlib.contextmanager
def proxy(policy: Any, book: EpisodeBook) -> Iterator[str]:
    with serving(proxy_app(PolicyBackend(policy, "scripted", max_batch=64), book, admin_token=TOKEN)) as url:
        yield url


# ---- web pages -----------------------------------------------------------------------------------------
# a page of another origin that knows a live episode key and the admin token (the worst case: both
# leaked) and sends what a page can without a preflight: no-cors fetches (their Authorization header
# is dropped), a CORS fetch (a preflight first), a form in an iframe whose text body is JSON, a beacon
PAGE = """<!doctype html><body><iframe name="sink"></iframe><script>
const q = new URLSearchParams(location.search);
const [proxy, gateway, key, token] = ["proxy", "gateway", "key", "token"].map((k) => q.get(k));
const chat = JSON.stringify({messages: [{role: "user", content: "hi"}]});
const noCors = (url, body, auth) => fetch(url, {method: "POST", mode: "no-cors", body,
  headers: {"content-type": "text/plain", authorization: "Bearer " + auth}}).catch(() => null);
const cors = (url, body, auth) => fetch(url, {method: "POST", body,
  headers: {"content-type": "application/json", authorization: "Bearer " + auth}}).catch(() => null);
const form = (url) => new Promise((done) => {
  const f = document.createElement("form");
  f.method = "POST"; f.enctype = "text/plain"; f.action = url; f.target = "sink";
  const field = document.createElement("input");  // the body reads as JSON: name=value
  field.name = '{"messages": [{"role": "user", "content": "hi"}], "x": "'; field.value = '"}';
  f.appendChild(field); document.body.appendChild(f);
  document.querySelector("iframe").onload = () => done(null);
  f.submit();
});
(async () => {
  for (const [url, body, auth] of [
    [proxy + "/v1/chat/completions", chat, key],
    [proxy + "/ludus/episodes", "{}", token],
    [proxy + "/ludus/episodes/" + key + "/end", '{"reward": 1}', token],
    [gateway + "/v1/chat/completions", chat, key],
  ]) {
    await noCors(url, body, auth);
    await cors(url, body, auth);
  }
  await form(proxy + "/v1/chat/completions");
  await form(gateway + "/v1/chat/completions");
  window.results = {beacon: navigator.sendBeacon(proxy + "/ludus/episodes/" + key + "/end", '{"reward": 1}')};
  window.done = true;
})();
</script>"""

# run in a page of rebind.test, a name pointed at 127.0.0.1: same-origin with the server, so it may
# send any header; only the Host rule tells it from the agent. KEYS: the key and the token, leaked
REBOUND = """async () => {
  const [key, token] = KEYS;
  const post = (path, body, auth) => fetch(path, {method: "POST", body: JSON.stringify(body),
    headers: {"content-type": "application/json", authorization: "Bearer " + auth}}).then(r => r.status, String);
  return [
    await post("/v1/chat/completions", {messages: [{role: "user", content: "hi"}]}, key),
    await post("/ludus/episodes", {}, token),
    await post("/ludus/episodes/" + key + "/end", {reward: 1}, token),
  ];
}"""


def test_pages_in_a_real_browser_reach_neither_the_proxy_nor_the_agent_gateway(monkeypatch):
    """FastAPI since 0.132 refuses bodies without a JSON type by itself; the proxy is built here
    as before it, parsing JSON whatever the type, so that the browser guard alone must stop the
    page. A rebound page may send every header: the Host rule stops it."""
    monkeypatch.setattr(openai_front, "FastAPI", functools.partial(openai_front.FastAPI, strict_content_type=False))
    book = EpisodeBook()
    app = proxy_app(PolicyBackend(ScriptedAgentModel(), "scripted"), book, admin_token=TOKEN)
    arrived: list[str] = []

    async def recording(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            arrived.append(scope["path"])
        await app(scope, receive, send)

    gateway = AgentGateway.shared()
    line = gateway.open()
    episode = book.open({"task_id": "victim"})
    rebind = ("--host-resolver-rules=MAP rebind.test 127.0.0.1", "--proxy-bypass-list=rebind.test")
    try:
        with serving(recording) as url, page_of_another_origin(PAGE) as origin:
            query = {"proxy": root(url), "gateway": root(gateway.base_url), "key": episode.key, "token": TOKEN}
            proxy_port, gateway_port = (urllib.parse.urlsplit(u).port for u in (url, gateway.base_url))
            pages: list[tuple[str, str | None]] = [(f"{origin}/?{urllib.parse.urlencode(query)}", None)]
            rebound = REBOUND.replace("KEYS", json.dumps([episode.key, TOKEN]))
            pages += [(f"http://rebind.test:{port}/health", rebound) for port in (proxy_port, gateway_port)]
            page, rebound_proxy, rebound_gateway = results_in_chromium(pages, rebind)
            for _ in range(4000):  # a bound on a lost request, not a speed check: the beacon is not awaited
                if arrived.count(f"/ludus/episodes/{episode.key}/end") >= 3:  # no-cors, CORS preflight, beacon
                    break
                threading.Event().wait(0.005)
            events_before_close = line.events.qsize()
    finally:
        line.close("the test is over")
    assert page == {"beacon": True}
    assert arrived.count("/v1/chat/completions") >= 3  # the page's requests did reach the server
    assert rebound_proxy == rebound_gateway == [403, 403, 403]
    assert events_before_close == 0  # no call reached the gateway's episode
    assert book.open_count == 1 and book.counts["opened"] == 1 and "ended" not in book.counts
    assert book.view(episode.key)["calls"] == [] and book.view(episode.key)["errors"] == []


def test_dns_rebinding_host_names_are_refused_by_the_proxy_and_the_gateway():
    book = EpisodeBook()
    episode = book.open()
    gateway = AgentGateway.shared()
    line = gateway.open()
    try:
        with proxy(ScriptedAgentModel(), book) as url, httpx.Client() as client:
            for base, key in ((url, episode.key), (gateway.base_url, line.key)):
                port = urllib.parse.urlsplit(base).port
                for host in (
                    f"rebind.test:{port}",
                    "rebind.test",
                    f"LOCALHOST.evil.test:{port}",
                    f"127.0.0.1.nip.io:{port}",
                ):
                    refused = client.post(
                        f"{base}/chat/completions", json={"messages": QUESTION}, headers={**as_agent(key), "host": host}
                    )
                    assert refused.status_code == 403 and refused.json()["error"]["type"] == "forbidden_host", host
                for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"):  # names no rebinding makes
                    assert client.get(f"{root(base)}/health", headers={"host": host}).status_code == 200, host
            opened = client.post(f"{root(url)}/ludus/episodes", headers={**ADMIN, "host": "rebind.test"})
            assert opened.status_code == 403
    finally:
        line.close("the test is over")
    assert line.events.empty()
    assert book.open_count == 1 and book.view(episode.key)["calls"] == []


# ---- what a body may hold ------------------------------------------------------------------------------
def nested(depth: int) -> str:
    """A tool whose parameters nest objects ``depth`` deep, as JSON text."""
    return '{"type": "function", "function": {"name": "f", "parameters": ' + '{"a": ' * depth + "1" + "}" * depth + "}}"


def chat_body(**fields: str) -> bytes:
    """A chat request with ``fields`` written as raw JSON text."""
    parts = [f'"messages": {json.dumps(QUESTION)}'] + [f'"{name}": {text}' for name, text in fields.items()]
    return ("{" + ", ".join(parts) + "}").encode()


# bodies that Python's json module reads but no strict reader does, or that no model can encode:
# once recorded, GET /ludus/episodes/KEY failed with a 500 (Starlette's JSONResponse refuses NaN),
# /end wrote NaN into episodes.jsonl, and half a surrogate pair failed every call batched with it
NOT_DATA = {
    "NaN": chat_body(temperature="NaN"),
    "Infinity in an extra field": chat_body(user_score="Infinity"),
    "-Infinity in a tool": chat_body(
        tools='[{"type": "function", "function": {"name": "f", "parameters": {"x": -Infinity}}}]'
    ),
    "a number too large for a float": chat_body(extra="1e999"),
    "a lone high surrogate": chat_body(user='"\\ud800"'),
    "a lone low surrogate in a message": json.dumps({"messages": [{"role": "user", "content": "a\udc00b"}]}).encode(),
    "a lone surrogate in a key": chat_body(metadata='{"\\udbff": 1}'),
    "nesting past the bound": chat_body(tools=f"[{nested(MAX_JSON_DEPTH)}]"),
    "nesting past Python's parser": chat_body(tools=f"[{nested(50_000)}]"),
    "bytes that are not UTF-8": b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}',
}


@pytest.mark.parametrize("name", list(NOT_DATA))
def test_json_that_no_strict_reader_takes_is_refused_and_the_records_stay_json(name):
    book = EpisodeBook()
    with proxy(ScriptedAgentModel(), book) as url, httpx.Client(timeout=60) as client:
        key = book.open().key
        refused = client.post(f"{url}/chat/completions", content=NOT_DATA[name], headers=as_agent(key))
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["message"].startswith("the body is not valid JSON (")
        # an emoji written as the surrogate pair clients that escape non-ASCII send: text, answered
        pair = chat_body(tools=f"[{nested(MAX_JSON_DEPTH - 8)}]", user='"\\ud83d\\ude00"')
        assert client.post(f"{url}/chat/completions", content=pair, headers=as_agent(key)).status_code == 200
        shown = client.get(f"{root(url)}/ludus/episodes/{key}", headers=ADMIN)
        ended = client.post(f"{root(url)}/ludus/episodes/{key}/end", headers=ADMIN)
    assert shown.status_code == 200 and ended.status_code == 200
    [call] = strictly_parsed(shown.text)["calls"]
    assert call["asked"]["user"] == "\U0001f600"
    assert strictly_parsed(ended.text)["info"]["errors"] == []


def test_bodies_past_the_limit_are_refused_before_they_are_read():
    book = EpisodeBook()
    with proxy(ScriptedAgentModel(), book) as url:
        key = book.open().key
        port = urllib.parse.urlsplit(url).port
        with socket.create_connection(("127.0.0.1", port)) as declared:  # a head announcing 1 GB, and no more
            declared.sendall(
                f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {1 << 30}\r\n\r\n{{".encode()
            )
            declared.settimeout(60)  # a bound on a broken server, not a speed check
            assert declared.recv(4096).startswith(b"HTTP/1.1 413 ")

        def chunks() -> Iterator[bytes]:  # no length announced: counted as it arrives
            yield b'{"messages": [{"role": "user", "content": "'
            for _ in range(MAX_REQUEST_BYTES >> 20):
                yield b"x" * (1 << 20)
            yield b'"}]}'

        streamed = httpx.post(f"{url}/chat/completions", content=chunks(), headers=as_agent(key), timeout=60)
        assert streamed.status_code == 413 and streamed.json()["error"]["code"] == "too_large"
        assert httpx.get(f"{root(url)}/health").json()["status"] == "ok"
    assert book.view(key)["calls"] == [] and book.view(key)["errors"] == []


def test_sampling_settings_out_of_range_are_the_agents_errors_never_the_models():
    """A top_p or temperature below float32's range made the sampler fail: a 500, which the
    episode's errors blame on the model (``infra_error`` for whoever grades it)."""
    policy = TinyPolicy(TinyConfig(d_model=16, n_layers=1, n_heads=2, max_len=64), seed=0)
    book = EpisodeBook()
    with serving(proxy_app(PolicyBackend(policy, "tiny", max_batch=8), book, admin_token=TOKEN)) as url:
        key = book.open().key
        agent = openai.OpenAI(base_url=url, api_key=key, max_retries=0)
        for bad in (
            {"top_p": 1e-300},
            {"temperature": 1e-40},
            {"max_tokens": 10**30},  # past the context: refused before sampling
            {"max_tokens": 0},
            {"max_tokens": "many"},
            {"n": 10**30},
            {"n": 9},  # past --max-batch
            {"seed": 2**64},
            {"temperature": "hot"},
        ):
            with pytest.raises(openai.BadRequestError):
                agent.chat.completions.create(model="tiny", messages=QUESTION, **bad)
        many = {
            "messages": [{"role": "user", "content": "a"}] * 100_000
        }  # too long for the model (raw: the client takes a minute)
        refused = httpx.post(f"{url}/chat/completions", json=many, headers=as_agent(key), timeout=120)
        assert refused.status_code == 400 and "context" in refused.json()["error"]["message"]
        served = agent.chat.completions.create(model="tiny", messages=QUESTION, top_p=1e-20, temperature=1e-20)
        assert served.choices[0].finish_reason in ("stop", "length")
    errors = book.view(key)["errors"]
    assert all(error["status"] == 400 for error in errors) and len(book.view(key)["calls"]) == 1


# ---- an episode's limits -------------------------------------------------------------------------------
def test_an_agent_sending_its_calls_at_once_gets_no_more_than_max_calls():
    """Every call was checked against the calls recorded so far, before its sampling: a burst let
    through together was recorded whole, past ``max_calls``."""
    model = ScriptedAgentModel()
    book = EpisodeBook(max_open=4, max_calls=3)
    with proxy(model, book) as url:
        key = book.open().key
        model.entered.clear()
        model.release.clear()
        refused: list[openai.BadRequestError] = []

        async def burst() -> list[Any]:
            async with openai.AsyncOpenAI(base_url=url, api_key=key, max_retries=0) as agent:

                async def call() -> Any:
                    try:
                        return await agent.chat.completions.create(model="scripted", messages=QUESTION)
                    except openai.BadRequestError as exc:
                        refused.append(exc)
                        return exc

                calls = [asyncio.create_task(call()) for _ in range(12)]
                for _ in range(4000):  # a bound on a broken proxy (which lets them all wait), not a speed check
                    if len(refused) == 9:
                        break
                    await asyncio.sleep(0.005)
                model.release.set()
                return await asyncio.gather(*calls)

        try:
            answers = asyncio.run(burst())
        finally:
            model.release.set()
        assert len(refused) == 9 and {exc.code for exc in refused} == {"too_many_calls"}
        assert len([a for a in answers if not isinstance(a, Exception)]) == 3
        assert len(book.view(key)["calls"]) == 3
        # the book holds max_open episodes; /health still answers past it
        keys = [book.open().key for _ in range(3)]
        flood = httpx.post(f"{root(url)}/ludus/episodes", headers=ADMIN)
        assert flood.status_code == 503 and flood.json()["error"]["code"] == "too_many_episodes"
        assert httpx.get(f"{root(url)}/health").json()["episodes_open"] == 4
        httpx.post(f"{root(url)}/ludus/episodes/{keys[0]}/end", headers=ADMIN).raise_for_status()
        assert httpx.post(f"{root(url)}/ludus/episodes", headers=ADMIN).status_code == 200


def test_an_episode_ended_under_a_flood_of_its_calls_records_exactly_the_calls_answered():
    book = EpisodeBook()
    with proxy(ScriptedAgentModel(), book) as url:
        key = book.open().key

        async def flood_and_end() -> tuple[list[Any], httpx.Response, httpx.Response]:
            async with (
                openai.AsyncOpenAI(base_url=url, api_key=key, max_retries=0) as agent,
                httpx.AsyncClient() as admin,
            ):
                calls = [
                    asyncio.create_task(agent.chat.completions.create(model="scripted", messages=QUESTION))
                    for _ in range(32)
                ]
                await asyncio.sleep(0)
                ended, again = await asyncio.gather(
                    admin.post(f"{root(url)}/ludus/episodes/{key}/end", headers=ADMIN),
                    admin.post(f"{root(url)}/ludus/episodes/{key}/end", headers=ADMIN),
                )
                return await asyncio.gather(*calls, return_exceptions=True), ended, again

        outcomes, *ends = asyncio.run(flood_and_end())
    assert sorted(end.status_code for end in ends) == [200, 409]  # a second end, at the same time
    trajectory = next(end for end in ends if end.status_code == 200).json()
    answered = [o for o in outcomes if not isinstance(o, Exception)]
    late = [o for o in outcomes if isinstance(o, Exception)]
    assert all(isinstance(o, openai.AuthenticationError) and o.code == "episode_ended" for o in late), late
    assert len(trajectory["info"]["calls"]) == len(answered) == len(trajectory["turns"])


# ---- keys ----------------------------------------------------------------------------------------------
class FailingModel(ScriptedAgentModel):
    """The scripted model, failing on conversations that say "fail"."""

    def generate(self, conversations: Any, sampling: Any, **kwargs: Any) -> Any:
        if any("fail" in c[-1].content for c in conversations):
            raise RuntimeError("the model broke")
        return super().generate(conversations, sampling, **kwargs)


def test_episode_keys_appear_in_no_log_error_health_or_record(capfd):
    book = EpisodeBook()
    with proxy(FailingModel(), book) as url, httpx.Client(timeout=60) as client:
        mine, other = book.open({"task_id": "a"}), book.open({"task_id": "b"})
        agent = openai.OpenAI(base_url=url, api_key=mine.key, max_retries=0)
        agent.chat.completions.create(model="scripted", messages=QUESTION)
        replies = [
            client.post(
                f"{url}/chat/completions",
                json={"messages": [{"role": "user", "content": "fail"}]},
                headers=as_agent(mine.key),
            ),
            client.post(f"{url}/chat/completions", json={"messages": QUESTION, "n": 99}, headers=as_agent(mine.key)),
            client.post(
                f"{url}/chat/completions", json={"messages": QUESTION, "model": "gpt"}, headers=as_agent(mine.key)
            ),
            client.post(f"{url}/chat/completions", json={"messages": QUESTION}, headers=as_agent(other.key[:-1])),
            client.post(f"{url}/chat/completions", content=b"{", headers=as_agent(mine.key)),
            client.post(f"{root(url)}/ludus/episodes", headers=as_agent(mine.key)),  # its own key as the token
            client.get(f"{root(url)}/ludus/episodes/{other.key}", headers=as_agent(mine.key)),
            client.get(f"{root(url)}/health"),
            client.get(f"{url}/models", headers=as_agent(mine.key)),
        ]
        assert [r.status_code for r in replies] == [500, 400, 404, 401, 400, 401, 401, 200, 200]
        seen = [r.text for r in replies]
        seen.append(client.get(f"{root(url)}/ludus/episodes/{mine.key}", headers=ADMIN).text)
        seen += [client.post(f"{root(url)}/ludus/episodes/{k}/end", headers=ADMIN).text for k in (mine.key, other.key)]
        with pytest.raises(openai.AuthenticationError) as after:
            agent.chat.completions.create(model="scripted", messages=QUESTION)
        seen.append(str(after.value))
    printed = capfd.readouterr()
    seen += [printed.out, printed.err, repr(mine), repr(other)]
    seen.append(repr(ChatCall([], [], None, 1, None, mine.key, {})))  # type: ignore[arg-type]
    assert "the model broke" in printed.err + "".join(seen)  # the failure was told, without the key
    for text in seen:
        assert mine.key not in text and other.key not in text and mine.key[3:20] not in text


# ---- slow, idle and never-reading clients ----------------------------------------------------------------
@contextlib.contextmanager
def as_the_command_serves(app: Any) -> Iterator[str]:
    """``app`` served as ``ludus proxy`` serves it (``guarded_server`` on a socket of ``listen``),
    with a small kernel send buffer: a client that stops reading soon holds the server's writes."""
    sock = listen("127.0.0.1", 0)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    server = guarded_server(app)
    server.config.timeout_graceful_shutdown = 1
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(2000):  # a bound on a broken start-up, not a speed check
            if server.started or not thread.is_alive():
                break
            threading.Event().wait(0.005)
        assert server.started
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        server.should_exit = True
        thread.join()
        sock.close()


def closed_by_the_server(conn: socket.socket) -> bool:
    """Read what the server sends until it closes the connection (True), within a bound on a
    broken guard (False): its limit on slow and unread connections is ten seconds."""
    conn.settimeout(120)
    try:
        while conn.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def slow_clients(port: int, key: str) -> list[socket.socket]:
    """A head sent halfway, a body sent a tenth, and a streamed answer of 800 000 characters never
    read (its receive buffer small)."""
    head = socket.create_connection(("127.0.0.1", port))
    head.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-")
    body = socket.create_connection(("127.0.0.1", port))
    body.sendall(
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
        'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"messages": '.encode()
    )
    unread = socket.socket()
    unread.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    unread.connect(("127.0.0.1", port))
    stream = json.dumps({"messages": [{"role": "user", "content": "something long"}], "n": 8, "stream": True})
    unread.sendall(
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(stream)}\r\n\r\n{stream}".encode()
    )
    return [head, body, unread]


def test_slow_idle_and_unread_clients_leave_the_proxy_serving_other_episodes():
    book = EpisodeBook()
    app = proxy_app(PolicyBackend(ScriptedAgentModel(), "scripted"), book, admin_token=TOKEN)
    with as_the_command_serves(app) as url:
        port = urllib.parse.urlsplit(url).port
        slow_key, key = book.open().key, book.open().key
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(1000)]
        slow = slow_clients(port, slow_key)
        try:
            answer = openai.OpenAI(base_url=url, api_key=key, max_retries=0).chat.completions.create(
                model="scripted", messages=QUESTION
            )
            assert answer.choices[0].message.tool_calls[0].function.name == "add"
            assert httpx.get(f"{root(url)}/health").json()["status"] == "ok"
            assert all(closed_by_the_server(conn) for conn in [*slow, idle[0], idle[-1]])
        finally:
            for conn in [*idle, *slow]:
                conn.close()
        assert [c["turns"] for c in book.view(slow_key)["calls"]] == [list(range(8))]  # sampled, so recorded
