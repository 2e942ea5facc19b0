"""Red team: a hostile or broken OpenAI-compatible server, and hostile model output passed through
it, against ``OpenAIPolicy`` and the rollout engine — real FastAPI servers on 127.0.0.1.

The line to hold (docs/models.md, "What counts as an infrastructure failure"): what the *server*
does wrong ends, after the retries, in a ``PolicyError`` the engine masks as ``infra_error``; what
the *model* wrote reaches the environment and gets a verdict, never a masked episode.

Each finding (fixed) is a test with a comment saying what it was; the last tests are attacks that
already held.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ludus.core import registry
from ludus.core.env import Env
from ludus.core.types import Message, Observation, Score, Status, StepResult, Task, ToolCall
from ludus.policies.base import Completion, ContextFull, Policy, PolicyError, SamplingParams
from ludus.policies.openai import OpenAIPolicy
from ludus.policies.rollout_server import _token_completions
from ludus.policies.tiny import TinyPolicy
from ludus.rollout.engine import RolloutConfig, RolloutEngine, requests
from ludus.serve.model_server import create_app
from support import serving

FAST = {"timeout_s": 5.0, "max_retries": 1, "backoff_s": 0.001}
ONE = [[Message("user", "1+2=")]]


def chat_body(content: Any = "hi", tool_calls: Any = None, **choice: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {"choices": [{"index": 0, "message": message, "finish_reason": "stop", **choice}]}


def call(name: str, arguments: Any, id: str = "c1") -> dict[str, Any]:
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


def raw_json(text: str) -> Response:
    return Response(text, media_type="application/json")


def vllm_like_app(
    *replies: Response | dict[str, Any], refuses_malformed: bool = False
) -> tuple[FastAPI, list[dict[str, Any]]]:
    """A chat server that answers ``replies[k]`` to a conversation holding ``k`` assistant turns
    (the last one from then on), and first reads the history as vLLM 0.32 (the version
    scripts/vllm-venv pins) does before rendering it: each assistant tool call's ``arguments``
    string goes through ``json.loads`` (vllm/renderers/chat_utils.py, ``_postprocess_messages``:
    malformed JSON or a value that is not an object becomes ``{}``; an exception it does not
    expect, such as ``RecursionError``, is a 500 in vllm/entrypoints/serve/exception_handling),
    and the rendered prompt must be text the tokenizer can encode (else 400). Keeps the requests.
    ``refuses_malformed``: as vLLM up to 0.25, whose unguarded ``json.loads`` made malformed JSON a 400."""
    seen: list[dict[str, Any]] = []
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        body = await request.json()
        seen.append(json.loads(json.dumps(body)))
        for message in body["messages"]:
            for item in message.get("tool_calls") or []:
                function = item["function"]
                try:
                    parsed = json.loads(function["arguments"]) if function["arguments"] else {}
                except json.JSONDecodeError as exc:
                    if refuses_malformed:
                        return JSONResponse({"error": {"message": str(exc), "type": "BadRequestError"}}, 400)
                    parsed = {}
                except RecursionError as exc:
                    return JSONResponse({"error": {"message": repr(exc), "type": "InternalServerError"}}, 500)
                function["arguments"] = parsed if isinstance(parsed, dict) else {}
        try:
            json.dumps(body["messages"], ensure_ascii=False).encode("utf-8")  # what the tokenizer is given
        except UnicodeEncodeError as exc:
            return JSONResponse({"error": {"message": str(exc), "type": "BadRequestError"}}, 400)
        turn = sum(m["role"] == "assistant" for m in body["messages"])
        answer = replies[min(turn, len(replies) - 1)]
        return answer if isinstance(answer, Response) else JSONResponse(answer)

    return app, seen


def run_episode(app: FastAPI, env_name: str, **policy_options: Any):
    """One episode of ``env_name``'s first training task, with an ``OpenAIPolicy`` on ``app``."""
    task = registry.make(env_name).task_source("train").get(0)
    with serving(app) as url:
        policy = OpenAIPolicy(url, "m", **{**FAST, **policy_options})
        engine = RolloutEngine(
            policy, lambda: registry.make(env_name), SamplingParams(max_tokens=4), RolloutConfig(infra_retries=1)
        )
        (trajectory,) = engine.run(requests([task]))
        policy.close()
    return trajectory


def assert_judged(trajectory) -> None:
    """The model's answer got a verdict: not masked, at the first attempt, no reward unearned."""
    score = trajectory.score
    assert not score.is_infra_error, f"masked: {score.reason}"
    assert score.value <= 0.0 and score.reason and trajectory.info["attempts"] == 1


# ---- findings (fixed) ---------------------------------------------------------------------------

# found by the red team (session 28, fixed): a model's tool call that writes the escape \ud800 in its
# arguments reaches the client as the text `{"q": "\ud800"}` inside the arguments string (a server
# passes the model's JSON through); arguments_from_wire (src/ludus/policies/openai.py) decoded it to a
# lone surrogate, which _well_formed (the outer body only) never saw: the next turn's request could not
# be encoded (UnicodeEncodeError out of httpx) -> infra_error on every attempt. Keys held the same hole.
SURROGATE_ARGUMENTS = {  # the JSON text the model wrote, as a server passes it on; or parsed, as some send it
    "value": chat_body(None, [call("listProducts", '{"q": "\\ud800"}')]),
    "key": chat_body(None, [call("listProducts", '{"\\udc00": "x"}')]),
    "key-of-an-object": raw_json(json.dumps(chat_body(None, [call("listProducts", {"\udc00": "x"})]))),
}


@pytest.mark.parametrize("where", sorted(SURROGATE_ARGUMENTS))
def test_a_lone_surrogate_escape_inside_tool_call_arguments_does_not_break_the_next_turn(where):
    app, seen = vllm_like_app(SURROGATE_ARGUMENTS[where], chat_body("done"))
    trajectory = run_episode(app, "synth-shop")
    assert_judged(trajectory)
    [sent] = next(m for m in trajectory.messages if m.tool_calls).tool_calls
    assert sent.arguments in ({"q": "\ufffd"}, {"\ufffd": "x"})  # as a decoder replaces invalid bytes
    assert len(seen) == 2 and "\ufffd" in seen[1]["messages"][-2]["tool_calls"][0]["function"]["arguments"]


# found by the red team (session 28, fixed): the client sent a tool call's raw arguments (the text the
# model wrote when it is not a JSON object) back unchanged in the next turn's history (message_to_wire,
# src/ludus/policies/openai.py). vLLM json.loads every historical arguments string before rendering:
# text nested past the recursion limit is a 500 there, and an unreadable call holding a surrogate escape
# decodes to text its tokenizer cannot encode (400) — so the model's broken call masked its episode
# (infra_error, on every retry). vLLM up to 0.25 answered 400 to any arguments not JSON.
def _hermes(arguments: str) -> str:
    return '<tool_call>{"name": "listProducts", "arguments": ' + arguments + "}</tool_call>"


BROKEN_CALLS = {
    "nested-arguments-on-the-wire": chat_body(None, [call("listProducts", "[" * 100_000)]),
    "nested-call-in-text": chat_body(_hermes("[" * 5000)),
    "surrogate-escape-in-an-unreadable-call": chat_body(_hermes('{"q": "\\ud800"}')),
    "arguments-not-json": chat_body(None, [call("listProducts", '{"q": ')]),
    # found at review (session 28, fixed): an object nested a few hundred deep is JSON to the client, but
    # vLLM reads it again deep in its own stack (RecursionError, a 500): past MAX_CALL_DEPTH it is no call
    "object-nested-past-max-call-depth": chat_body(
        None, [call("listProducts", '{"q": ' + "[" * 100 + "]" * 100 + "}")]
    ),
    "call-in-text-nested-past-max-call-depth": chat_body(_hermes('{"q": ' + "[" * 100 + "]" * 100 + "}")),
}


@pytest.mark.parametrize("reply", sorted(BROKEN_CALLS))
def test_a_broken_tool_call_goes_back_as_history_a_vllm_server_reads(reply):
    app, seen = vllm_like_app(BROKEN_CALLS[reply], chat_body("done"), refuses_malformed=reply == "arguments-not-json")
    trajectory = run_episode(app, "synth-shop")
    assert_judged(trajectory)
    assert len(seen) == 2  # the second turn was answered at once
    [wire] = seen[1]["messages"][-2]["tool_calls"]
    [sent] = trajectory.messages[-3].tool_calls
    assert isinstance(sent.arguments, str) and json.loads(wire["function"]["arguments"]) == sent.arguments


class Growing(Env):
    """Three turns; each reply of the environment adds the task's ``info["grow"]`` bytes."""

    name = "growing"
    reward_range = (0.0, 1.0)
    max_turns = 3

    def begin(self, task: Task) -> Observation:
        return Observation([Message("user", task.prompt)])

    def transition(self, action: Message) -> StepResult:
        if self.turn < 2:
            return StepResult(Observation([Message("user", "z" * self.task.info["grow"])]))
        return StepResult(Observation([]), 1.0, terminated=True, score=Score(1.0))


# found by the red team (session 28, fixed): a server refuses a conversation longer than its model's
# context with HTTP 400; the client raised a plain PolicyError, so (1) an episode whose own replies grew
# the conversation past the context was masked (infra_error, retried) where a local model's ContextFull
# ends it as truncated — a losing policy could escape its zero by talking past the context — and (2) the
# first such refusal failed the whole generate call: every other episode batched with it was masked too.
def test_a_conversation_grown_past_the_servers_context_is_truncated_and_fails_only_its_episode():
    tasks = [
        Task("fits", "a", info={"grow": 1}),
        Task("grows", "b", info={"grow": 60}),
        Task("opening", "c" * 80, info={"grow": 1}),
    ]
    with serving(create_app(TinyPolicy(), "tiny")) as url:  # a context of 64 tokens
        policy = OpenAIPolicy(url, "tiny", **FAST)
        engine = RolloutEngine(policy, Growing, SamplingParams(max_tokens=4), RolloutConfig(infra_retries=2))
        fits, grows, opening = engine.run(requests(tasks))
        policy.close()
    assert fits.score.status == Status.CORRECT and len(fits.turns) == 3 and fits.info["attempts"] == 1
    assert grows.score.status == Status.TRUNCATED and grows.score.value == 0.0 and grows.info["attempts"] == 1
    assert "outgrew the model's context" in grows.score.reason and len(grows.turns) == 1
    assert opening.score.is_infra_error and opening.info["attempts"] == 1  # the same prompt would not fit again


# found at review (session 28, fixed): any other 400 the server gives one conversation (a chat template
# that raises on it, a field it refuses) was a plain PolicyError for the whole generate call: every
# episode batched with the refused one was masked with it.
def test_a_request_the_server_refuses_masks_only_its_own_episode():
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        if "refuse me" in json.dumps(await request.json()):
            return JSONResponse({"error": {"message": "the template raised", "type": "BadRequestError"}}, 400)
        return JSONResponse(chat_body("ok"))

    tasks = [Task("fine", "a", info={"grow": 1}), Task("refused", "refuse me", info={"grow": 1})]
    with serving(app) as url:
        policy = OpenAIPolicy(url, "m", **FAST)
        engine = RolloutEngine(policy, Growing, SamplingParams(max_tokens=4), RolloutConfig(infra_retries=2))
        fine, refused = engine.run(requests(tasks))
        policy.close()
    assert fine.score.status == Status.CORRECT and fine.info["attempts"] == 1
    assert refused.score.is_infra_error and "HTTP 400" in refused.score.reason


# found at review (session 28, fixed): the rollout-server client (vLLM's /v1/completions, token in and
# token out) took log-probs with float() and ids with int(): a NaN log-prob became a scored turn.
@pytest.mark.parametrize(
    "choice",
    [
        {"token_ids": [1], "logprobs": {"token_logprobs": [float("nan")]}},
        {"token_ids": [1], "logprobs": {"token_logprobs": [True]}},
        {"token_ids": "1", "logprobs": {"token_logprobs": [-0.5]}},
        {"token_ids": [-1], "logprobs": {"token_logprobs": [-0.5]}},
        {"token_ids": [1], "logprobs": {"token_logprobs": [-0.5]}, "prompt_token_ids": [0.5]},
    ],
)
def test_a_rollout_servers_unusable_ids_and_logprobs_are_malformed(choice):
    with pytest.raises(ValueError, match="not a completion"):
        _token_completions({"choices": [{"index": 0, **choice}]}, 1)
    assert _token_completions({"choices": [{"index": 0, "token_ids": [1], "logprobs": {"token_logprobs": [-0.5]}}]}, 1)


# how servers word the refusal (vLLM before and after 0.10, OpenAI, SGLang, llama.cpp's server)
CONTEXT_REFUSALS = [
    "This model's maximum context length is 2048 tokens. However, you requested 2100 tokens "
    "(2000 in the messages, 100 in the completion). Please reduce the length of the messages or completion.",
    "'max_tokens' or 'max_completion_tokens' is too large: 100. This model's maximum context length is 2048 "
    "tokens and your request has 2000 input tokens (100 > 2048 - 2000).",
    "The decoder prompt (length 5000) is longer than the maximum model length of 2048. Make sure that "
    "`max_model_len` is no smaller than the number of text tokens.",
    "The input (5000 tokens) is longer than the model's context length (2048 tokens).",
    "the request exceeds the available context size, try increasing it",
]


@pytest.mark.parametrize("message", CONTEXT_REFUSALS)
def test_a_servers_context_refusal_is_context_full(message):
    app, seen = vllm_like_app(JSONResponse({"error": {"message": message, "type": "BadRequestError"}}, 400))
    with serving(app) as url:
        client = OpenAIPolicy(url, "m", **FAST)
        with pytest.raises(ContextFull) as refused:
            client.generate(ONE, SamplingParams())
        client.close()
    assert isinstance(refused.value, PolicyError) and "HTTP 400" in str(refused.value)
    assert len(seen) == 1  # a refusal, not retried


# found by the red team (session 28, fixed): the client read a body whole, however long, so a server
# (or a proxy) streaming without end grew the client's memory at the line's rate until timeout_s
# (~0.5 GB/s on loopback: tens of GB within the default 120 s) instead of failing at once.
def test_a_body_past_max_body_bytes_is_cut_off_not_read_until_the_timeout():
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat() -> StreamingResponse:
        async def endless():
            yield b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "'
            for _ in range(5000):
                yield b"x" * 65536
                await asyncio.sleep(0.002)

        return StreamingResponse(endless(), media_type="application/json")

    with serving(app) as url:
        client = OpenAIPolicy(url, "m", timeout_s=120.0, max_retries=0)
        client.max_body_bytes = 1 << 20
        with pytest.raises(PolicyError, match="max_body_bytes"):  # not the timeout's message
            client.generate(ONE, SamplingParams())
        client.close()


# found by the red team (session 28, fixed): a body its content-encoding header does not describe (gzip
# claimed, plain sent) raised httpx.DecodingError out of generate: not retried and not a PolicyError.
def test_a_body_its_content_encoding_misdescribes_is_retried_then_a_policy_error():
    lie = Response(json.dumps(chat_body("x")).encode(), media_type="application/json", headers={"content-encoding": "gzip"})  # fmt: skip
    app, seen = vllm_like_app(lie)
    with serving(app) as url:
        client = OpenAIPolicy(url, "m", **FAST)
        with pytest.raises(PolicyError, match="DecodingError"):
            client.generate(ONE, SamplingParams())
        client.close()
    assert len(seen) == 2


# found by the red team (session 28, fixed): token ids and log-probs were taken with int()/float() and no
# check, so a broken server's NaN or infinite log-probs, ids that are a string ("123" became [1, 2, 3]),
# negative, past int64, floats or booleans, as many ids as log-probs or not, and a finish reason that is
# no string went into the trajectory as a scored turn: what Ludus's own record reader refuses
# (rollout/records.py, malformed) and the trainer cannot use (a NaN behaviour log-prob makes the loss NaN).
def _with_logprobs(*values: Any) -> dict[str, Any]:
    items = [{"token": f"token_id:{i}", "logprob": v} for i, v in enumerate(values)]
    return chat_body("hi", logprobs={"content": items})


UNUSABLE = {
    "logprob-nan-literal": raw_json(json.dumps(_with_logprobs(-0.5)).replace("-0.5", "NaN")),
    "logprob-nan-string": _with_logprobs("NaN"),
    "logprob-minus-infinity": _with_logprobs("-Infinity"),
    "logprob-bool": _with_logprobs(True),
    "token-ids-a-string": chat_body("hi", token_ids="123"),
    "token-ids-negative": chat_body("hi", token_ids=[-1]),
    "token-ids-past-int64": chat_body("hi", token_ids=[2**64]),
    "token-ids-floats": chat_body("hi", token_ids=[1.5]),
    "token-ids-booleans": chat_body("hi", token_ids=[True]),
    "token-ids-and-logprobs-disagree": {
        **_with_logprobs(-0.5),
        "choices": [{**_with_logprobs(-0.5)["choices"][0], "token_ids": [1, 2, 3]}],
    },  # fmt: skip
    "prompt-ids-negative": {**chat_body("hi"), "prompt_token_ids": [-3]},
    # found at review (session 28, fixed): vLLM ends a request its engine dropped with finish_reason
    # "abort" (or "error"): a partial text, scored as the model's answer
    "finish-reason-abort": {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "4"}, "finish_reason": "abort"}]
    },
    "finish-reason-a-number": {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": 5}]
    },  # fmt: skip
}


@pytest.mark.parametrize("body", sorted(UNUSABLE))
def test_token_ids_and_logprobs_no_trainer_can_use_are_the_servers_fault(body):
    app, seen = vllm_like_app(UNUSABLE[body])
    with serving(app) as url:
        client = OpenAIPolicy(url, "m", **FAST)
        with pytest.raises(PolicyError, match="malformed body"):
            client.generate(ONE, SamplingParams())
        client.close()
    assert len(seen) == 2  # retried: the server's fault


def test_a_nan_logprob_masks_the_episode_instead_of_scoring_it():
    trajectory = run_episode(vllm_like_app(_with_logprobs("NaN"))[0], "arithmetic")
    assert trajectory.score.is_infra_error and trajectory.turns == []


# ---- attacks that held (regression tests) -------------------------------------------------------


class Recording(Policy):
    """A stand-in model behind ``ludus serve-model``: it keeps the conversations it is given."""

    def __init__(self) -> None:
        self.seen: list[list[Message]] = []

    def generate(self, conversations, sampling, *, tools=None, generator=None):
        self.seen += conversations
        return [Completion("ok", [1], [2], [-0.5], "stop") for _ in conversations]


def test_raw_arguments_replayed_to_ludus_serve_model_reach_its_model_unchanged():
    """The other end of the wire: ``ludus serve-model`` reads the raw arguments the client sends
    back in a JSON string as that very text (arguments_from_wire decodes a JSON string)."""
    raw = '{"a": 1, "b": ' + "[" * 3000
    called = Message("assistant", "", tool_calls=[ToolCall("add", raw, id="c1")])
    backend = Recording()
    with serving(create_app(backend, "rec")) as url:
        client = OpenAIPolicy(url, "rec", **FAST)
        [out] = client.generate([[*ONE[0], called, Message("tool", "error", tool_call_id="c1")]], SamplingParams())
        client.close()
    assert out.text == "ok" and backend.seen[0][1] == called


def _stalling_app() -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat() -> StreamingResponse:
        async def headers_then_nothing():
            yield b'{"choices": '
            await asyncio.sleep(30)

        return StreamingResponse(headers_then_nothing(), media_type="application/json")

    return app


SERVER_FAULTS = {
    "content-a-number": chat_body(5),
    "choices-empty": {"choices": []},
    "body-null": raw_json("null"),
    "tool-calls-a-dict": chat_body(None, {"name": "listProducts"}),
    "tool-call-name-a-number": chat_body(None, [call(7, "{}")]),  # type: ignore[arg-type]
    "event-stream-to-a-plain-request": Response(
        "data: " + json.dumps(chat_body("x")) + "\n\ndata: [DONE]\n\n", media_type="text/event-stream"
    ),
    "closed-mid-body": Response(b'{"choices": [', media_type="application/json", headers={"content-length": "99"}),
}


@pytest.mark.parametrize("fault", [*sorted(SERVER_FAULTS), "headers-then-stall"])
def test_server_faults_end_as_infra_error_after_the_retries(fault):
    app = _stalling_app() if fault == "headers-then-stall" else vllm_like_app(SERVER_FAULTS[fault])[0]
    trajectory = run_episode(app, "synth-shop", timeout_s=0.5)
    assert trajectory.score.status == Status.INFRA_ERROR and trajectory.info["attempts"] == 2
    assert "model backend" in trajectory.score.reason


MODEL_FAULTS = {
    "nul-bytes": chat_body("\x00<answer>\x00</answer>"),
    "bidi-and-zero-width": chat_body("<answer>\u202e\u200b1\ufeff</answer>"),
    "one-megabyte": chat_body("a" * 1_000_000),
    "another-formats-call": chat_body('[TOOL_CALLS][{"name": "listProducts", "arguments": {}}]'),
    "unknown-tool": chat_body(None, [call("drop_database", "{}")]),
    "empty-name": chat_body(None, [call("", "{}")]),
    "colliding-ids": chat_body(None, [call("listProducts", '{"q": "a"}'), call("listProducts", '{"q": "b"}')]),
    "ten-thousand-calls": chat_body(None, [call("listProducts", "{}", id=f"c{i}") for i in range(10_000)]),
}


@pytest.mark.parametrize("reply", sorted(MODEL_FAULTS))
def test_what_the_model_wrote_gets_a_verdict(reply):
    assert_judged(run_episode(vllm_like_app(MODEL_FAULTS[reply], chat_body("done"))[0], "synth-shop"))
