"""The HTTP model backend and `ludus serve-model`, against real servers on 127.0.0.1.

The model server runs the tiny model (or a scripted policy) in uvicorn on a background thread;
the failure cases are small FastAPI apps that misbehave on purpose, and one is a subprocess
killed while it holds requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import threading
from typing import Any

import httpx
import pytest
import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from ludus.core.tools import parse_tool_calls
from ludus.core.types import Message, ToolCall, ToolSpec
from ludus.policies import load_policy
from ludus.policies.base import Completion, Policy, PolicyError, SamplingParams, Tools
from ludus.policies.openai import OpenAIPolicy
from ludus.policies.tiny import TinyConfig, TinyPolicy
from ludus.serve.model_server import create_app
from support import serving

CONVS = [[Message("user", "1+2=")], [Message("user", "13+24=")], [Message("user", "123+456=")]]
FAST = {"timeout_s": 5.0, "max_retries": 3, "backoff_s": 0.001}  # quick retries for failure tests


def chat_body(content: str | None = "hi", **choice: Any) -> dict[str, Any]:
    message = {"role": "assistant", "content": content}
    if "tool_calls" in choice:
        message["tool_calls"] = choice.pop("tool_calls")
    return {"choices": [{"index": 0, "message": message, "finish_reason": "stop", **choice}]}


def scripted_app(*answers: Response | dict[str, Any]) -> tuple[FastAPI, list[dict[str, Any]]]:
    """A chat server that gives ``answers`` in order (the last one from then on) and keeps the requests."""
    requests: list[dict[str, Any]] = []
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        requests.append(await request.json())
        answer = answers[min(len(requests), len(answers)) - 1]
        return answer if isinstance(answer, Response) else JSONResponse(answer)

    return app, requests


class ScriptedPolicy(Policy):
    """Answers every conversation with one fixed reply and remembers what it was asked."""

    def __init__(self, reply: str):
        self.reply = reply
        self.seen: list[tuple[list[list[Message]], Any]] = []

    def generate(
        self,
        conversations: list[list[Message]],
        sampling: SamplingParams,
        *,
        tools: Tools = None,
        generator: torch.Generator | None = None,
    ) -> list[Completion]:
        self.seen.append((conversations, tools))
        text, calls = parse_tool_calls(self.reply)
        finish = "tool_calls" if calls else "stop"
        return [Completion(text, [1, 2, 3], [4, 5], [-0.5, -0.25], finish, calls) for _ in conversations]


class GatedPolicy(ScriptedPolicy):
    """Its first ``generate`` waits for ``gate``, so that requests pile up behind it."""

    def __init__(self, reply: str):
        super().__init__(reply)
        self.started, self.gate = threading.Event(), threading.Event()

    def generate(
        self,
        conversations: list[list[Message]],
        sampling: SamplingParams,
        *,
        tools: Tools = None,
        generator: torch.Generator | None = None,
    ) -> list[Completion]:
        self.started.set()
        self.gate.wait(timeout=30)
        return super().generate(conversations, sampling, tools=tools, generator=generator)


# ---- the model server and the client together ---------------------------------------------------
def test_tiny_round_trip_text_token_ids_and_logprobs():
    policy = TinyPolicy(TinyConfig(d_model=32, n_layers=2, n_heads=2, max_len=48), seed=1)
    sampling = SamplingParams(temperature=1.0, max_tokens=8)
    with serving(create_app(policy, "tiny-test")) as url:
        client = OpenAIPolicy(url)
        assert client.model == "tiny-test"
        out = client.generate(CONVS, sampling, generator=torch.Generator().manual_seed(0))
        again = client.generate(CONVS, sampling, generator=torch.Generator().manual_seed(0))
        client.close()
        raw = httpx.post(
            f"{url}/chat/completions",
            json={
                "messages": [{"role": "user", "content": "1+2="}],
                "seed": 5,
                "n": 2,
                "max_tokens": 6,
                "logprobs": True,
                "return_tokens_as_token_ids": True,
                "return_token_ids": True,
            },
        ).json()
    for conv, c in zip(CONVS, out, strict=True):
        assert c.prompt_ids == policy.tokenizer.render(conv)
        assert 0 < len(c.completion_ids) == len(c.logprobs) <= 8
        assert c.text == policy.tokenizer.decode(c.completion_ids)
        assert c.finish_reason in ("stop", "length")
    logp, _ = policy.token_logprobs([c.prompt_ids for c in out], [c.completion_ids for c in out], 1.0)
    for i, c in enumerate(out):
        assert torch.allclose(logp[i, : len(c.completion_ids)], torch.tensor(c.logprobs), atol=1e-4)
    assert [c.completion_ids for c in again] == [c.completion_ids for c in out]  # seeded requests reproduce
    # A seed is the torch generator's seed for the request's own batch of n.
    local = policy.generate([CONVS[0]] * 2, SamplingParams(max_tokens=6), generator=torch.Generator().manual_seed(5))
    assert [ch["token_ids"] for ch in raw["choices"]] == [c.completion_ids for c in local]
    assert raw["prompt_token_ids"] == local[0].prompt_ids
    tokens = [item["token"] for item in raw["choices"][0]["logprobs"]["content"]]
    assert tokens == [f"token_id:{i}" for i in local[0].completion_ids]
    assert raw["usage"]["completion_tokens"] == sum(len(c.completion_ids) for c in local)


def test_tool_calls_round_trip_end_to_end():
    policy = ScriptedPolicy('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>')
    add = ToolSpec("add", "Add two integers.", {"type": "object", "properties": {"a": {"type": "integer"}}})
    conversation = [
        Message("system", "You can add."),
        Message("user", "1+2?"),
        Message("assistant", "", tool_calls=[ToolCall("add", {"a": 1, "b": 2}, id="call_7")]),
        Message("tool", "3", tool_call_id="call_7", name="add"),
        Message("user", "and again?"),
    ]
    with serving(create_app(policy, "scripted")) as url:
        client = OpenAIPolicy(url, "scripted")
        [c] = client.generate([conversation], SamplingParams(max_tokens=4), tools=[[add]])
        client.close()
    assert c.tool_calls == [ToolCall("add", {"a": 1, "b": 2}, id="call_0")]
    assert (c.text, c.finish_reason) == ("", "tool_calls")
    assert (c.prompt_ids, c.completion_ids, c.logprobs) == ([1, 2, 3], [4, 5], [-0.5, -0.25])
    [(seen, seen_tools)] = policy.seen  # the server handed the policy exactly what the client sent
    assert seen == [conversation] and seen_tools == [[add]]


def test_requests_waiting_for_the_model_share_one_generate_call():
    policy = GatedPolicy("ok")
    fine = {"messages": [{"role": "user", "content": "hi"}]}

    async def pile_up(url: str) -> list[httpx.Response]:
        async with httpx.AsyncClient() as http:
            first = asyncio.create_task(http.post(f"{url}/chat/completions", json=fine))
            await asyncio.to_thread(policy.started.wait, 30)
            rest = [asyncio.create_task(http.post(f"{url}/chat/completions", json={**fine, "n": 2})) for _ in range(5)]
            for _ in range(2000):  # a bound on a broken server, not a speed check
                if (await http.get(url.removesuffix("/v1") + "/health")).json()["queued"] == 5:
                    break
                await asyncio.sleep(0.005)
            policy.gate.set()
            return await asyncio.gather(first, *rest)

    with serving(create_app(policy, "gated")) as url:
        answers = asyncio.run(pile_up(url))
    assert [len(r.json()["choices"]) for r in answers] == [1, 2, 2, 2, 2, 2]
    assert [len(conversations) for conversations, _ in policy.seen] == [1, 10]


def test_load_policy_picks_the_model_the_server_lists():
    with serving(create_app(ScriptedPolicy("ok"), "the-model")) as url:
        policy = load_policy(url)
        assert isinstance(policy, OpenAIPolicy) and policy.model == "the-model"
        assert policy.generate(CONVS[:1], SamplingParams())[0].text == "ok"
        policy.close()
    empty = FastAPI()
    empty.get("/v1/models")(lambda: {"object": "list", "data": []})
    with serving(empty) as url, pytest.raises(PolicyError, match="no models"):
        OpenAIPolicy(url)


def test_bad_requests_answer_400_in_the_openai_format():
    policy = TinyPolicy(TinyConfig(d_model=32, n_layers=1, n_heads=2, max_len=32), seed=0)
    too_long = {"messages": [{"role": "user", "content": "x" * 40}], "max_tokens": 4}
    fine = {"messages": [{"role": "user", "content": "1+2="}], "max_tokens": 4}
    invalid = {
        "messages.0.role": {"messages": [{"role": "robot", "content": "x"}]},
        "temperature": {**fine, "temperature": -1},
        "top_p": {**fine, "top_p": 0},
        "n": {**fine, "n": 0},
        "messages": {"messages": []},
        "stop": {**fine, "stop": "\n"},  # stop sequences stay refused: the tokens sampled are what is answered
    }

    async def too_long_next_to_a_fine_one(url: str) -> list[httpx.Response]:
        async with httpx.AsyncClient() as client:
            return await asyncio.gather(*(client.post(f"{url}/chat/completions", json=b) for b in (too_long, fine)))

    with serving(create_app(policy, "tiny")) as url:
        bad, good = asyncio.run(too_long_next_to_a_fine_one(url))
        assert (bad.status_code, good.status_code) == (400, 200)  # one bad prompt fails only its request
        assert "context" in bad.json()["error"]["message"]
        for field, body in invalid.items():
            r = httpx.post(f"{url}/chat/completions", json=body)
            assert r.status_code == 400, field
            error = r.json()["error"]
            assert error["type"] == "invalid_request_error" and error["param"] == field, error
        r = httpx.post(f"{url}/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
        call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[" * 5000}}
        replayed = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
        r = httpx.post(f"{url}/chat/completions", json={"messages": replayed, "max_tokens": 4})
        assert r.status_code == 400 and "context" in r.json()["error"]["message"]  # read as the raw string it is
        client = OpenAIPolicy(url, "tiny", **FAST)
        with pytest.raises(PolicyError, match="HTTP 400.*context"):  # refused at once, not retried
            client.generate([[Message("user", "x" * 40)]], SamplingParams(max_tokens=4))
        client.close()


def test_serve_model_command_prints_its_url_and_serves():
    command = [sys.executable, "-m", "ludus.cli", "serve-model", "--port", "0", "--name", "cli-tiny"]
    # Ctrl-C must reach the server even when the tests themselves run with SIGINT ignored (a
    # background job inherits SIG_IGN, and Python then installs no KeyboardInterrupt handler)
    default_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint) as proc:
        try:
            line = proc.stderr.readline()
            assert "serving cli-tiny at http://127.0.0.1:" in line, line
            url = line.split(" at ", 1)[1].split()[0]
            client = OpenAIPolicy(url, timeout_s=30)
            [c] = client.generate(CONVS[:1], SamplingParams(max_tokens=4), generator=torch.Generator().manual_seed(1))
            client.close()
            assert client.model == "cli-tiny" and len(c.completion_ids) == len(c.logprobs) > 0
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=60) == 130  # stopped by Ctrl-C, after a graceful shutdown
            assert "Traceback" not in proc.stderr.read()
        finally:
            proc.kill()  # a no-op once it has exited


# ---- the client against servers that misbehave --------------------------------------------------
def test_concurrency_bound_holds_across_concurrent_calls():
    bound, state = 3, {"in_flight": 0, "peak": 0}
    reached = asyncio.Event()
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat() -> dict[str, Any]:
        state["in_flight"] += 1
        state["peak"] = max(state["peak"], state["in_flight"])
        if state["in_flight"] >= bound:
            reached.set()
        with contextlib.suppress(TimeoutError):  # hold the first requests until the bound is reached
            await asyncio.wait_for(reached.wait(), 1.0)
        state["in_flight"] -= 1
        return chat_body()

    async def two_calls(client: OpenAIPolicy) -> list[list[Completion]]:
        try:
            return await asyncio.gather(*(client.agenerate(CONVS * 3, SamplingParams()) for _ in range(2)))
        finally:
            await client.aclose()

    with serving(app) as url:
        results = asyncio.run(two_calls(OpenAIPolicy(url, "m", concurrency=bound)))
    assert [len(r) for r in results] == [9, 9]
    assert state["peak"] == bound


def test_transient_failures_are_retried_until_an_answer():
    app, requests = scripted_app(Response("overloaded", 500), Response("still", 503), chat_body("finally"))
    with serving(app) as url:
        client = OpenAIPolicy(url, "m", **FAST)
        assert client.generate(CONVS[:1], SamplingParams())[0].text == "finally"
        client.close()
    assert len(requests) == 3
    app, requests = scripted_app(Response("slow down", 429), Response("<html>"), {"choices": []}, chat_body("ok"))
    with serving(app) as url:  # a body that is not a chat completion is the server's fault too
        client = OpenAIPolicy(url, "m", **FAST)
        assert client.generate(CONVS[:1], SamplingParams())[0].text == "ok"
        client.close()
    assert len(requests) == 4


def test_persistent_failures_raise_policy_error_after_the_retries():
    app, requests = scripted_app(Response("boom", 500))
    with serving(app) as url:
        client = OpenAIPolicy(url, "m", **{**FAST, "max_retries": 2})
        with pytest.raises(PolicyError, match=r"/chat/completions failed 3 time.*HTTP 500: boom"):
            client.generate(CONVS[:1], SamplingParams())
        client.close()
    assert len(requests) == 3
    app, requests = scripted_app(JSONResponse({"error": {"message": "bad key"}}, 401))
    with serving(app) as url:
        client = OpenAIPolicy(url, "m", **FAST)
        with pytest.raises(PolicyError, match="HTTP 401.*bad key.*API key"):
            client.generate(CONVS[:1], SamplingParams())
        client.close()
    assert len(requests) == 1  # a refusal is not retried


def test_malformed_tool_call_json_is_the_models_answer_not_a_failure():
    arguments = '{"a": 1, "b": '
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": arguments}}
    logprobs = {"content": [{"token": "token_id:7", "logprob": -0.1}, {"token": "token_id:9", "logprob": -0.2}]}
    app, _ = scripted_app(chat_body(None, tool_calls=[call], logprobs=logprobs))
    with serving(app) as url:
        client = OpenAIPolicy(url, "m", **FAST)
        [c] = client.generate(CONVS[:1], SamplingParams())
        client.close()
    assert c.tool_calls == [ToolCall("add", arguments, id="c1")]  # the raw string, for the environment to answer
    assert (c.text, c.finish_reason) == ("", "tool_calls")
    assert (c.completion_ids, c.logprobs, c.prompt_ids) == ([7, 9], [-0.1, -0.2], [])


def test_server_refusing_token_id_fields_is_asked_again_without_them():
    requests: list[dict[str, Any]] = []
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        requests.append(await request.json())
        if "return_token_ids" in requests[-1]:
            return JSONResponse({"error": {"message": "Unrecognized request argument: return_token_ids"}}, 400)
        return JSONResponse(chat_body("plain"))

    with serving(app) as url:
        client = OpenAIPolicy(url, "m", **FAST)
        assert client.generate(CONVS[:1], SamplingParams())[0].text == "plain"
        assert client.generate(CONVS[:1], SamplingParams())[0].text == "plain"
        client.close()
    assert ["return_token_ids" in r for r in requests] == [True, False, False]  # and it remembers


def test_server_slower_than_the_timeout_raises_policy_error():
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat() -> dict[str, Any]:
        await asyncio.sleep(0.5)
        return chat_body()

    with serving(app) as url:
        client = OpenAIPolicy(url, "m", timeout_s=0.05, max_retries=1, backoff_s=0.001)
        with pytest.raises(PolicyError, match="no complete answer within timeout_s=0.05"):
            client.generate(CONVS[:1], SamplingParams())
        client.close()


HANGING_SERVER = """
import asyncio, socket
import uvicorn
from fastapi import FastAPI

app = FastAPI()

@app.post("/v1/chat/completions")
async def chat():
    print("request", flush=True)
    await asyncio.sleep(3600)

sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen()
print(sock.getsockname()[1], flush=True)
uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
"""


def test_server_killed_mid_run_raises_policy_error_without_leaks():
    threads = threading.active_count()
    with subprocess.Popen([sys.executable, "-c", HANGING_SERVER], stdout=subprocess.PIPE, text=True) as proc:
        try:
            port = int(proc.stdout.readline())
            client = OpenAIPolicy(f"http://127.0.0.1:{port}/v1", "m", timeout_s=30, max_retries=2, backoff_s=0.01)

            async def kill_while_waiting() -> None:
                task = asyncio.create_task(client.agenerate(CONVS, SamplingParams()))
                await asyncio.to_thread(proc.stdout.readline)  # the server holds a request
                proc.kill()
                try:
                    with pytest.raises(PolicyError, match="failed 3 time"):
                        await task
                finally:
                    await client.aclose()

            asyncio.run(kill_while_waiting())
        finally:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert threading.active_count() == threads


def test_generate_inside_an_event_loop_says_to_await_agenerate():
    client = OpenAIPolicy("http://127.0.0.1:9/v1", "m")  # a named model needs no request to construct

    async def call_sync() -> None:
        client.generate(CONVS[:1], SamplingParams())

    with pytest.raises(RuntimeError, match="await policy.agenerate"):
        asyncio.run(call_sync())
    client.close()


def test_calls_a_server_returns_as_text_are_read_in_the_models_tool_format():
    text = 'Let me check. [TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}}]'
    app, _ = scripted_app(chat_body(text))
    with serving(app) as url:
        mistral = OpenAIPolicy(url, "m", tool_format="mistral", **FAST)
        [c] = mistral.generate(CONVS[:1], SamplingParams())
        mistral.close()
        hermes = OpenAIPolicy(url, "m", **FAST)
        [plain] = hermes.generate(CONVS[:1], SamplingParams())
        hermes.close()
    assert (c.text, c.tool_calls, c.finish_reason) == (
        "Let me check.",
        [ToolCall("add", {"a": 1, "b": 2}, id="call_0")],
        "tool_calls",
    )
    assert plain.text == text and plain.tool_calls == []  # another format: plain content
    with pytest.raises(ValueError, match="unknown tool-call format 'xml'.*hermes"):
        OpenAIPolicy("http://127.0.0.1:9/v1", "m", tool_format="xml")


def test_a_lone_surrogate_escape_in_a_reply_is_replaced_so_the_next_turn_can_be_sent():
    """JSON may escape half a surrogate pair; such a string cannot be encoded, so sending the reply
    back would fail and the episode be masked as the server's fault — for what the model wrote."""
    call = r'{"id": "c1", "type": "function", "function": {"name": "add\udc00", "arguments": "{\"a\": \"\ud800\"}"}}'
    body = r'{"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", '
    body += r'"content": "x \ud800 y \ud83d\ude00", "tool_calls": [' + call + "]}}]}"
    app, requests = scripted_app(Response(body, media_type="application/json"), chat_body("next"))
    with serving(app) as url:
        client = OpenAIPolicy(url, "m", **FAST)
        [c] = client.generate(CONVS[:1], SamplingParams())
        assert c.text == "x \ufffd y \U0001f600"  # a valid pair is one character, kept
        assert c.tool_calls == [ToolCall("add\ufffd", {"a": "\ufffd"}, id="c1")]
        reply = Message("assistant", c.text, tool_calls=c.tool_calls)
        [after] = client.generate([[*CONVS[0], reply, Message("tool", "3", tool_call_id="c1")]], SamplingParams())
        client.close()
    assert after.text == "next"
    assert requests[1]["messages"][1]["content"] == "x \ufffd y \U0001f600"


def test_json_nested_past_the_recursion_limit_is_the_models_answer_or_the_servers_fault():
    deep = "[" * 100_000
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": deep}}
    app, _ = scripted_app(chat_body(None, tool_calls=[call]))
    with serving(app) as url:  # arguments the model nested too deeply stay its raw answer
        client = OpenAIPolicy(url, "m", **FAST)
        [c] = client.generate(CONVS[:1], SamplingParams())
        client.close()
    assert c.tool_calls == [ToolCall("add", deep, id="c1")]
    app, requests = scripted_app(Response('{"choices": ' + deep, media_type="application/json"))
    with serving(app) as url:  # a body nested too deeply is the server's: retried, then a PolicyError
        client = OpenAIPolicy(url, "m", **{**FAST, "max_retries": 1})
        with pytest.raises(PolicyError, match="malformed body"):
            client.generate(CONVS[:1], SamplingParams())
        client.close()
    assert len(requests) == 2
