"""``ludus proxy`` with the real ``openai`` client against real servers on 127.0.0.1: episodes
opened and ended by the admin, every call of an agent recorded token-exactly, tool loops merged
into one chain (or split when the agent rewrites its history), streaming with the sync and async
clients, refusals as the client's typed exceptions, 64 agents sharing the model's batches, and
the command itself sampling on a rollout server with its episodes written to ``--out``.

Two proxies serve the module: one over a scripted agent model (the embedded model's chat
template, replies chosen by the conversation: a call to ``add``, then the sum), one over the
real tiny model."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import torch

from ludus.cli import main
from ludus.core.tools import parse_tool_calls
from ludus.core.types import Message, ToolSpec, Trajectory
from ludus.policies.base import Completion, Policy, SamplingParams, Tools
from ludus.policies.hf import HFPolicy
from ludus.policies.tiny import EOS, ByteTokenizer, TinyConfig, TinyPolicy
from ludus.serve.model_server import PolicyBackend, create_app
from ludus.serve.net import ConnectionGuard, connection_options
from ludus.serve.proxy import EpisodeBook, proxy_app
from support import CALL, serving

TOKEN = "proxy-admin-token-0123456789abcdef"
ADMIN = {"authorization": f"Bearer {TOKEN}"}
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}
JSON = {"content-type": "application/json"}
QUESTION = [{"role": "system", "content": "You add."}, {"role": "user", "content": "What is 1+2?"}]


class ScriptedAgentModel(Policy):
    """The embedded model's chat template with scripted replies: a question gets a call to
    ``add``, a tool's answer gets the sum, a request for something long gets 100 000 characters.
    Its first ``generate`` after :attr:`release` is cleared waits for it (``entered`` set)."""

    def __init__(self) -> None:
        self.tokenizer = ByteTokenizer()
        self.entered, self.release = threading.Event(), threading.Event()
        self.release.set()

    def reply(self, conversation: list[Message]) -> str:
        last = conversation[-1]
        if last.role == "tool":
            return f"The sum is {last.content}."
        return "x" * 100_000 if "long" in last.content else CALL

    def generate(
        self,
        conversations: list[list[Message]],
        sampling: SamplingParams,
        *,
        tools: Tools = None,
        generator: torch.Generator | None = None,
    ) -> list[Completion]:
        self.entered.set()
        self.release.wait()
        replies = []
        for conversation in conversations:
            raw = self.reply(conversation)
            ids = [*self.tokenizer.encode(raw), EOS]
            text, calls = parse_tool_calls(raw)
            prompt = self.tokenizer.render(conversation)
            replies.append(Completion(text, prompt, ids, [-0.5] * len(ids), "tool_calls" if calls else "stop", calls))
        return replies


@pytest.fixture(scope="module")
def scripted() -> Iterator[tuple[str, ScriptedAgentModel]]:
    """The proxy over the scripted model, with the connection layer the command runs and small
    kernel send buffers (a client that stops reading soon holds the proxy's writes); yields its
    /v1 URL and the model."""
    model = ScriptedAgentModel()
    app = proxy_app(PolicyBackend(model, "scripted", max_batch=64), EpisodeBook(), admin_token=TOKEN)
    guard = ConnectionGuard(256, request_timeout_s=10.0, max_pipelined=32)
    try:
        with serving(app, send_buffer=4096, **connection_options(guard)) as url:
            yield url, model
    finally:
        model.release.set()


@pytest.fixture(scope="module")
def tiny() -> Iterator[tuple[str, TinyPolicy]]:
    policy = TinyPolicy(TinyConfig(d_model=32, n_layers=2, n_heads=2, max_len=64), seed=1)
    with serving(proxy_app(PolicyBackend(policy, "tiny"), EpisodeBook(), admin_token=TOKEN)) as url:
        yield url, policy


def root(url: str) -> str:
    return url.removesuffix("/v1")


def open_episode(url: str, **metadata: Any) -> str:
    reply = httpx.post(f"{root(url)}/ludus/episodes", json=metadata, headers=ADMIN)
    assert reply.status_code == 200, reply.text
    return reply.json()["key"]


def episode_calls(url: str, key: str) -> list[dict[str, Any]]:
    reply = httpx.get(f"{root(url)}/ludus/episodes/{key}", headers=ADMIN)
    assert reply.status_code == 200, reply.text
    return reply.json()["calls"]


def end_episode(url: str, key: str, **body: Any) -> Trajectory:
    reply = httpx.post(f"{root(url)}/ludus/episodes/{key}/end", json=body, headers=ADMIN)
    assert reply.status_code == 200, reply.text
    return Trajectory.from_dict(reply.json())


def render(messages: list[dict[str, Any]]) -> list[int]:
    """The embedded model's rendering of an OpenAI conversation."""
    return ByteTokenizer().render([Message(m["role"], m.get("content") or "") for m in messages])


# ---- episodes -------------------------------------------------------------------------------------
def test_a_tool_loop_of_an_openai_client_is_one_merged_chain_and_ends_as_a_trajectory(scripted):
    url, _ = scripted
    key = open_episode(url, task_id="add-1", split="eval")
    client = openai.OpenAI(base_url=url, api_key=key)
    assert [m.id for m in client.models.list()] == ["scripted"]
    messages: list[Any] = list(QUESTION)
    first = client.chat.completions.create(model="scripted", messages=messages, tools=[ADD], tool_choice="auto")
    [call] = first.choices[0].message.tool_calls
    assert (first.choices[0].finish_reason, call.function.name, json.loads(call.function.arguments)) == (
        "tool_calls",
        "add",
        {"a": 1, "b": 2},
    )
    messages += [first.choices[0].message, {"role": "tool", "tool_call_id": call.id, "content": "3"}]
    second = client.chat.completions.create(model="scripted", messages=messages, tools=[ADD], max_tokens=64)
    assert second.choices[0].message.content == "The sum is 3."
    calls = episode_calls(url, key)
    assert [c["turns"] for c in calls] == [[0], [1]]
    assert calls[0]["asked"] == {"tool_choice": "auto"} and calls[1]["asked"] == {"max_tokens": 64}
    assert calls[0]["applied"] == {"temperature": 1.0, "top_p": 1.0, "max_tokens": 16, "n": 1, "seed": None}
    assert calls[0]["tool_calls"] == [[first.choices[0].message.tool_calls[0].model_dump()]]
    assert {c["weight_version"] for c in calls} == {0} and all(c["wall_s"] >= 0 for c in calls)

    trajectory = end_episode(url, key, score={"value": 1.0, "status": "correct", "reason": "3"})
    assert Trajectory.from_dict(json.loads(trajectory.to_json())) == trajectory
    assert (trajectory.task.id, trajectory.task.prompt, trajectory.info["metadata"]) == (
        "add-1",
        "What is 1+2?",
        {"task_id": "add-1", "split": "eval"},
    )
    first_turn, second_turn = trajectory.turns
    assert first_turn.prompt_ids == render(QUESTION)  # the policy's own rendering, as sampled
    assert first_turn.completion_ids == [*CALL.encode(), EOS] and first_turn.logprobs == [-0.5] * (len(CALL) + 1)
    assert second_turn.prompt_ids[: len(first_turn.prompt_ids) + len(first_turn.completion_ids)] == (
        first_turn.prompt_ids + first_turn.completion_ids
    )
    assert trajectory.info["chains"] == {"runs": [[0, 1]], "merged": 1, "split": 0}
    assert (first_turn.reward, second_turn.reward, trajectory.score.correct) == (0.0, 1.0, True)
    assert [m.role for m in trajectory.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert trajectory.messages[-1].content == "The sum is 3." and trajectory.tools[0].name == "add"


def test_an_agent_that_rewrites_its_history_is_split_and_a_bare_reward_is_no_verdict(scripted):
    url, _ = scripted
    key = open_episode(url)
    client = openai.OpenAI(base_url=url, api_key="not-the-key", default_headers={"X-Ludus-Episode": key})
    first = client.chat.completions.create(model="scripted", messages=QUESTION, tools=[ADD])
    call = first.choices[0].message.tool_calls[0]
    edited = {"role": "assistant", "content": "Let me add.", "tool_calls": [call.model_dump()]}  # not what it said
    tool = {"role": "tool", "tool_call_id": call.id, "content": "3"}
    client.chat.completions.create(model="scripted", messages=[*QUESTION, edited, tool])
    trajectory = end_episode(url, key, reward=0.5)
    assert trajectory.info["chains"] == {"runs": [[0], [1]], "merged": 0, "split": 1}
    assert (trajectory.score.value, trajectory.score.status, trajectory.score.correct) == (0.5, "external", False)
    assert trajectory.task.id == trajectory.info["episode"]  # no task id given: the episode's own


def test_seeded_calls_record_what_the_policy_samples_itself(tiny):
    url, policy = tiny
    key = open_episode(url)
    client = openai.OpenAI(base_url=url, api_key=key)
    conversation = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "1+2="}]
    answer = client.chat.completions.create(model="tiny", messages=conversation, max_tokens=8, seed=7, n=2)
    trajectory = end_episode(url, key)
    local = policy.generate(
        [[Message("system", "Be brief."), Message("user", "1+2=")]] * 2,
        SamplingParams(max_tokens=8),
        generator=torch.Generator().manual_seed(7),
    )
    assert [t.prompt_ids for t in trajectory.turns] == [c.prompt_ids for c in local]
    assert trajectory.turns[0].prompt_ids == policy.tokenizer.render([Message("user", "1+2=")])
    assert [t.completion_ids for t in trajectory.turns] == [c.completion_ids for c in local]
    assert [t.logprobs for t in trajectory.turns] == [c.logprobs for c in local]  # exactly: the sampler's own
    assert [c.message.content for c in answer.choices] == [c.text for c in local]
    assert trajectory.info["calls"][0]["turns"] == [0, 1] and trajectory.score is None
    # the tiny model answers no completions of token ids: refused in OpenAI's format, not recorded
    key = open_episode(url)
    with pytest.raises(openai.BadRequestError, match="chat completions only"):
        openai.OpenAI(base_url=url, api_key=key).completions.create(model="tiny", prompt="1+2=")
    assert end_episode(url, key).turns == []


def test_a_transformers_model_records_chat_and_completions_streamed_or_not(tiny_llama):
    policy = HFPolicy.load(tiny_llama)
    with serving(proxy_app(PolicyBackend(policy, "llama"), EpisodeBook(), admin_token=TOKEN)) as url:
        key = open_episode(url)
        client = openai.OpenAI(base_url=url, api_key=key)
        client.chat.completions.create(model="llama", messages=QUESTION, tools=[ADD], max_tokens=4)
        text = client.completions.create(model="llama", prompt="What is", max_tokens=4, logprobs=0)
        streamed = client.completions.create(
            model="llama", prompt=[[5, 6, 7]], max_tokens=4, n=2, stream=True, stream_options={"include_usage": True}
        )
        chunks = list(streamed)
        trajectory = end_episode(url, key)
    conversation = [Message("system", "You add."), Message("user", "What is 1+2?")]
    add = ToolSpec.from_dict(ADD)
    chat, plain, *token_ids = trajectory.turns
    assert chat.prompt_ids == policy.encode_prompt(conversation, [add])
    assert plain.prompt_ids == policy.tokenizer.encode("What is")
    assert text.choices[0].logprobs.token_logprobs == plain.logprobs
    assert text.choices[0].text == policy.tokenizer.decode(plain.completion_ids, skip_special_tokens=True)
    assert [t.prompt_ids for t in token_ids] == [[5, 6, 7]] * 2
    assert [c.usage.completion_tokens for c in chunks if c.usage] == [sum(len(t.completion_ids) for t in token_ids)]
    texts = ["", ""]
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.text
    assert texts == [policy.tokenizer.decode(t.completion_ids, skip_special_tokens=True) for t in token_ids]
    assert [c["endpoint"] for c in trajectory.info["calls"]] == ["chat/completions", "completions", "completions"]


# ---- streaming ----------------------------------------------------------------------------------------
def test_streamed_tool_calls_reassemble_in_the_sync_and_async_clients(scripted):
    url, _ = scripted
    key = open_episode(url)
    client = openai.OpenAI(base_url=url, api_key=key)
    with client.chat.completions.stream(model="scripted", messages=QUESTION, tools=[ADD]) as stream:
        final = stream.get_final_completion()
    [call] = final.choices[0].message.tool_calls
    assert (call.function.name, call.function.parsed_arguments, final.choices[0].finish_reason) == (
        "add",
        {"a": 1, "b": 2},
        "tool_calls",
    )
    names, arguments, finish = [], "", []
    for chunk in client.chat.completions.create(model="scripted", messages=QUESTION, tools=[ADD], stream=True):
        for delta_call in chunk.choices[0].delta.tool_calls or []:
            names += [delta_call.function.name] if delta_call.function.name else []
            arguments += delta_call.function.arguments or ""
        finish += [chunk.choices[0].finish_reason] if chunk.choices[0].finish_reason else []
    assert (names, json.loads(arguments), finish) == (["add"], {"a": 1, "b": 2}, ["tool_calls"])

    async def answer_in_a_stream() -> tuple[str, list[Any]]:
        async with openai.AsyncOpenAI(base_url=url, api_key=key) as agent:
            tool = {"role": "tool", "tool_call_id": call.id, "content": "3"}
            stream = await agent.chat.completions.create(
                model="scripted",
                messages=[*QUESTION, final.choices[0].message.model_dump(exclude_none=True), tool],
                stream=True,
                stream_options={"include_usage": True},
                logprobs=True,
            )
            content, usage = "", []
            async for chunk in stream:
                usage += [chunk.usage] if chunk.usage else []
                content += "".join(c.delta.content or "" for c in chunk.choices)
                logprobs = [c.logprobs for c in chunk.choices if c.logprobs]
                if logprobs:
                    assert [t.logprob for t in logprobs[0].content] == [-0.5] * (len("The sum is 3.") + 1)
            return content, usage

    content, [usage] = asyncio.run(answer_in_a_stream())
    trajectory = end_episode(url, key)
    assert content == "The sum is 3." and usage.completion_tokens == len(content) + 1
    assert len(trajectory.turns) == 3 and trajectory.info["chains"]["runs"][-1] == [1, 2]


def test_a_client_that_hangs_up_mid_stream_leaves_the_proxy_serving(scripted):
    url, _ = scripted
    key = open_episode(url)
    port = int(root(url).rsplit(":", 1)[1])
    body = json.dumps({"messages": [{"role": "user", "content": "something long"}], "n": 8, "stream": True})
    hasty = socket.socket()
    hasty.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the server soon waits for it to read
    hasty.connect(("127.0.0.1", port))
    hasty.sendall(
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode()
    )
    assert hasty.recv(4096).startswith(b"HTTP/1.1 200 ")
    hasty.close()  # 8 replies of 100 000 characters each: the proxy is still sending them
    answer = openai.OpenAI(base_url=url, api_key=key).chat.completions.create(model="scripted", messages=QUESTION)
    assert answer.choices[0].message.tool_calls[0].function.name == "add"
    assert httpx.get(f"{root(url)}/health").json()["status"] == "ok"
    # the hasty call was sampled under the episode, so it is recorded: 8 turns, then the next call
    assert [c["turns"] for c in episode_calls(url, key)] == [list(range(8)), [8]]
    end_episode(url, key)


# ---- refusals ------------------------------------------------------------------------------------------
def test_refusals_are_the_clients_typed_errors_and_never_recorded(scripted):
    url, _ = scripted
    key = open_episode(url)
    agent = openai.OpenAI(base_url=url, api_key=key, max_retries=0)
    stranger = openai.OpenAI(base_url=url, api_key="ep-made-up", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as unknown:
        stranger.chat.completions.create(model="scripted", messages=QUESTION)
    assert unknown.value.code == "invalid_api_key"
    keyless = httpx.post(f"{url}/chat/completions", json={"messages": QUESTION})
    assert keyless.status_code == 401 and keyless.json()["error"]["code"] == "invalid_api_key"
    for bad in (
        {"messages": []},
        {"messages": [{"role": "robot", "content": "hi"}]},
        {"messages": QUESTION, "temperature": -1},
        {"messages": QUESTION, "stop": ["\n"]},
    ):
        with pytest.raises(openai.BadRequestError):
            agent.chat.completions.create(model="scripted", **bad)
    with pytest.raises(openai.NotFoundError) as wrong_model:
        agent.chat.completions.create(model="gpt-4o", messages=QUESTION)
    assert wrong_model.value.code == "model_not_found"
    malformed = httpx.post(
        f"{url}/chat/completions", content=b"{not json", headers={"authorization": f"Bearer {key}", **JSON}
    )
    assert malformed.status_code == 400 and "not valid JSON" in malformed.json()["error"]["message"]
    # the admin endpoints want the proxy's token: not none, not a wrong one, not the agent's own key
    for headers in ({}, {"authorization": "Bearer wrong-token-0123456789"}, {"authorization": f"Bearer {key}"}):
        for method, path in (("POST", "/ludus/episodes"), ("GET", f"/ludus/episodes/{key}")):
            refused = httpx.request(method, root(url) + path, headers=headers)
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
        ended = httpx.post(f"{root(url)}/ludus/episodes/{key}/end", json={"reward": 1}, headers=headers)
        assert ended.status_code == 401
    # a page: cross-site, with an Origin, or through a DNS name rebound to 127.0.0.1
    port = root(url).rsplit(":", 1)[1]
    for page in ({"sec-fetch-site": "cross-site"}, {"origin": "http://localhost:9"}, {"host": f"evil.test:{port}"}):
        as_agent = {**page, "authorization": f"Bearer {key}"}
        assert httpx.post(f"{url}/chat/completions", json={"messages": QUESTION}, headers=as_agent).status_code == 403
        assert httpx.post(f"{root(url)}/ludus/episodes", headers={**page, **ADMIN}).status_code == 403
    assert episode_calls(url, key) == []  # nothing of the above was recorded
    bad_ends = ({"reward": 1, "score": {"value": 1}}, {"score": {"status": "correct"}}, {"rewards": 1})
    for body in bad_ends:
        assert httpx.post(f"{root(url)}/ludus/episodes/{key}/end", json=body, headers=ADMIN).status_code == 400
    end_episode(url, key)
    with pytest.raises(openai.AuthenticationError, match="has ended") as after:
        agent.chat.completions.create(model="scripted", messages=QUESTION)
    assert after.value.code == "episode_ended"
    again = httpx.post(f"{root(url)}/ludus/episodes/{key}/end", headers=ADMIN)
    assert again.status_code == 409 and again.json()["error"]["code"] == "episode_ended"
    assert httpx.get(f"{root(url)}/ludus/episodes/ep-made-up", headers=ADMIN).status_code == 404


def test_an_episode_ended_while_its_call_is_sampled_records_nothing(scripted):
    url, model = scripted
    key = open_episode(url)
    model.entered.clear()
    model.release.clear()
    results: list[httpx.Response] = []
    with httpx.Client(timeout=None) as http:
        pending = threading.Thread(
            target=lambda: results.append(
                http.post(f"{url}/chat/completions", json={"messages": QUESTION}, headers={"x-ludus-episode": key})
            )
        )
        pending.start()
        try:
            model.entered.wait()
            trajectory = end_episode(url, key)
        finally:
            model.release.set()
            pending.join()
    [late] = results
    assert late.status_code == 401 and late.json()["error"]["code"] == "episode_ended"
    assert trajectory.turns == [] and trajectory.info["calls"] == []


# ---- many agents ---------------------------------------------------------------------------------------
def test_64_agents_share_the_models_batches(scripted):
    """While the model answers one agent, the 63 others' calls wait for it together, and go in one
    generate call: the proxy holds no call back for another."""
    url, model = scripted
    keys = [open_episode(url, task_id=f"agent-{i}") for i in range(64)]

    async def agents() -> list[Any]:
        clients = [openai.AsyncOpenAI(base_url=url, api_key=key, max_retries=0) for key in keys]
        first = asyncio.create_task(clients[0].chat.completions.create(model="scripted", messages=QUESTION))
        await asyncio.to_thread(model.entered.wait)
        rest = [
            asyncio.create_task(c.chat.completions.create(model="scripted", messages=QUESTION)) for c in clients[1:]
        ]
        async with httpx.AsyncClient() as http:
            for _ in range(4000):  # a bound on a broken proxy, not a speed check
                if (await http.get(f"{root(url)}/health")).json()["queued"] == 63:
                    break
                await asyncio.sleep(0.005)
        model.release.set()
        answers = await asyncio.gather(first, *rest)
        for client in clients:
            await client.close()
        return answers

    model.entered.clear()
    model.release.clear()
    try:
        answers = asyncio.run(agents())
    finally:
        model.release.set()
    assert all(a.choices[0].message.tool_calls[0].function.name == "add" for a in answers)
    batches = [[c["batch"] for c in episode_calls(url, key)] for key in keys]
    assert batches == [[1]] + [[63]] * 63
    assert {end_episode(url, key).task.id for key in keys} == {f"agent-{i}" for i in range(64)}


# ---- the command ---------------------------------------------------------------------------------------
def test_the_command_needs_an_admin_token_and_a_model_it_loads(monkeypatch, capsys):
    monkeypatch.delenv("LUDUS_PROXY_TOKEN", raising=False)
    assert main(["proxy", "--port", "0"]) == 2
    assert "needs an admin token" in capsys.readouterr().err
    monkeypatch.setenv("LUDUS_PROXY_TOKEN", "short")
    assert main(["proxy", "--port", "0"]) == 2
    assert "at least 16" in capsys.readouterr().err
    monkeypatch.setenv("LUDUS_PROXY_TOKEN", TOKEN)
    assert main(["proxy", "--port", "0", "--model", "http://127.0.0.1:9/v1"]) == 2
    assert "--rollout-server" in capsys.readouterr().err


def test_the_command_samples_on_a_rollout_server_and_writes_each_ended_episode(tiny_llama, tmp_path):
    token_file = tmp_path / "proxy.token"
    token_file.write_text(TOKEN + "\n")
    out, weights = tmp_path / "episodes", tmp_path / "weights"
    learner = HFPolicy.load(tiny_llama)
    with serving(create_app(HFPolicy.load(tiny_llama), "tiny", weight_updates=True)) as server:
        command = [
            *(sys.executable, "-m", "ludus.cli", "proxy", "--model", f"hf:{tiny_llama}", "--name", "llama"),
            *("--rollout-server", server, "--weights-dir", str(weights), "--port", "0"),
            *("--out", str(out), "--token-file", str(token_file)),
        ]
        default_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731 - as test_openai_backend
        env = {k: v for k, v in os.environ.items() if k != "LUDUS_PROXY_TOKEN"}
        with subprocess.Popen(command, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint, env=env) as proc:
            try:
                lines = [proc.stderr.readline()]
                while "serving llama at" not in lines[-1] and lines[-1]:
                    lines.append(proc.stderr.readline())
                assert "serving llama at http://127.0.0.1:" in lines[-1], lines
                url = lines[-1].split(" at ", 1)[1].split()[0]
                key = open_episode(url, task_id="t")
                client = openai.OpenAI(base_url=url, api_key=key)
                client.chat.completions.create(model="llama", messages=QUESTION, max_tokens=4, temperature=0)
                trajectory = end_episode(url, key, reward=1.0)
                written = (out / "episodes.jsonl").read_text().splitlines()  # while the proxy still runs
                proc.send_signal(signal.SIGINT)
                assert proc.wait(timeout=120) == 130
                assert "Traceback" not in proc.stderr.read()
            finally:
                proc.kill()  # a no-op once it has exited
    [turn] = trajectory.turns
    conversation = [Message("system", "You add."), Message("user", "What is 1+2?")]
    assert turn.prompt_ids == learner.encode_prompt(conversation)
    assert trajectory.info["calls"][0]["weight_version"] == 0 == trajectory.policy_version
    assert [Trajectory.from_json(line) for line in written] == [trajectory]
    assert list(weights.iterdir()) == []  # the weights pushed were deleted when the proxy stopped
