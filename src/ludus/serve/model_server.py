"""An OpenAI-compatible chat-completions server for any local :class:`Policy`.

``ludus serve-model`` puts the tiny model or a transformers checkpoint behind the API that vLLM
and OpenAI speak, so :class:`ludus.policies.openai.OpenAIPolicy` and other tools can use it.
Concurrent requests are micro-batched: one background task gathers what is pending and runs it
through ``policy.generate`` in a single worker thread, so the model is never used by two threads
at once and each forward pass is as wide as the traffic allows.

For training with generation here (``ludus train --rollout-server``), a transformers model also
answers ``POST /v1/completions`` with a prompt of token ids (token in, token out: the sampled ids
and their log-probs come back with ``return_token_ids``), and, made with ``weight_updates=True``,
the weight endpoints vLLM has in its development mode: ``POST /collective_rpc`` with method
``reload_weights`` (new weights from a folder of safetensors, loaded between two generate
calls), ``POST /reset_prefix_cache`` (nothing is cached here), ``POST /update_weight_version``
and ``GET /weight_info`` (a version tag the trainer sets and checks).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import torch

try:
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from pydantic import BaseModel, Field
    from starlette.exceptions import HTTPException
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(f"the model server needs FastAPI and uvicorn: pip install 'ludus[serve]' ({exc})") from exc

from ludus.core.types import Message, ToolCall, ToolSpec
from ludus.policies.base import Completion, Policy, SamplingParams
from ludus.policies.openai import arguments_from_wire, tool_call_to_wire
from ludus.serve.browser import BrowserGuard, BrowserRules

# Once a request is pending, wait this long for others to share its batch.
BATCH_WINDOW_S = 0.002
# Log-probs JSON cannot carry -inf; vLLM sends this instead.
LOGPROB_FLOOR = -9999.0


# ---- the request -------------------------------------------------------------------------------
class _Function(BaseModel):
    name: str
    arguments: str | dict[str, Any] = "{}"


class _ToolCallIn(BaseModel):
    id: str = ""
    type: Literal["function"] = "function"
    function: _Function


class _TextPart(BaseModel):
    type: Literal["text"]
    text: str


class _MessageIn(BaseModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[_TextPart] | None = None
    tool_calls: list[_ToolCallIn] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    def to_message(self) -> Message:
        content = self.content if not isinstance(self.content, list) else "\n".join(p.text for p in self.content)
        calls = [
            ToolCall(c.function.name, arguments_from_wire(c.function.arguments), id=c.id) for c in self.tool_calls or []
        ]
        return Message(self.role, content or "", tool_calls=calls, tool_call_id=self.tool_call_id, name=self.name)


class _FunctionSpec(BaseModel):
    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class _ToolIn(BaseModel):
    type: Literal["function"] = "function"
    function: _FunctionSpec


class ChatRequest(BaseModel):
    """The fields this server reads; others (``tool_choice``, ``user``, ...) are ignored."""

    model: str | None = None
    messages: list[_MessageIn] = Field(min_length=1)
    tools: list[_ToolIn] | None = None
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    n: int | None = Field(None, ge=1)
    seed: int | None = Field(None, ge=0, lt=2**63)
    logprobs: bool | None = None
    return_tokens_as_token_ids: bool | None = None
    return_token_ids: bool | None = None
    stream: bool | None = None
    stop: str | list[str] | None = None


class CompletionRequest(BaseModel):
    """``/v1/completions`` as the rollout client sends it: a prompt of token ids, or several (one
    choice each, in order); or text, which the model's tokenizer encodes."""

    model: str | None = None
    prompt: list[int] | list[list[int]] | str = Field(min_length=1)
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    seed: int | None = Field(None, ge=0, lt=2**63)
    logprobs: int | None = Field(None, ge=0)
    return_token_ids: bool | None = None
    stop_token_ids: list[int] | None = None
    add_special_tokens: bool | None = None
    stream: bool | None = None


class _BadRequest(Exception):
    def __init__(self, message: str, code: str, param: str | None = None):
        super().__init__(message)
        self.code, self.param = code, param


# ---- micro-batching ----------------------------------------------------------------------------
@dataclass
class _Pending:
    conversations: list[list[Message]]
    tools: list[list[ToolSpec]]
    sampling: SamplingParams
    seed: int | None
    token_texts: bool  # decode each completion token (for log-probs) in the worker thread too
    done: asyncio.Future[list[tuple[Completion, list[str]]]]
    prompt_ids: list[list[int]] | None = None  # token-id prompts (/v1/completions) instead of conversations

    @property
    def size(self) -> int:
        return len(self.prompt_ids) if self.prompt_ids is not None else len(self.conversations)


class _Batcher:
    """Runs pending requests through the policy, one ``generate`` per group of compatible requests."""

    def __init__(self, policy: Policy, max_batch: int):
        self.policy, self.max_batch = policy, max_batch
        self._pending: deque[_Pending] = deque()
        self._wakeup = asyncio.Event()
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="ludus-model")
        self._decode = _token_decoder(policy)

    async def submit(
        self,
        conversations: list[list[Message]],
        tools: list[list[ToolSpec]],
        sampling: SamplingParams,
        seed: int | None,
        token_texts: bool,
        prompt_ids: list[list[int]] | None = None,
    ) -> list[tuple[Completion, list[str]]]:
        done = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(conversations, tools, sampling, seed, token_texts, done, prompt_ids))
        self._wakeup.set()
        return await done

    async def between_batches(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` in the model's thread, between two generate calls (a weight reload)."""
        return await asyncio.get_running_loop().run_in_executor(self._worker, fn)

    @property
    def queued(self) -> int:
        """Requests waiting for the model (not counting the batch it is working on)."""
        return len(self._pending)

    async def run(self) -> None:
        while True:
            await self._wakeup.wait()
            await asyncio.sleep(BATCH_WINDOW_S)
            self._wakeup.clear()
            while self._pending:
                await self._run_batch(self._take())

    def close(self) -> None:
        for pending in self._pending:
            if not pending.done.done():
                pending.done.set_exception(RuntimeError("the server is shutting down"))
        self._worker.shutdown(wait=True)

    def _take(self) -> list[_Pending]:
        batch = [self._pending.popleft()]
        size = batch[0].size
        while self._pending and size + self._pending[0].size <= self.max_batch:
            batch.append(self._pending.popleft())
            size += batch[-1].size
        return batch

    async def _run_batch(self, batch: list[_Pending]) -> None:
        groups: dict[object, list[_Pending]] = {}
        for pending in batch:
            if pending.done.done():  # the client hung up
                continue
            # Requests share a generate call when they sample alike; a seeded one samples alone,
            # so that its seed alone decides its tokens.
            key = (pending.sampling, pending.prompt_ids is None) if pending.seed is None else id(pending)
            groups.setdefault(key, []).append(pending)
        for group in groups.values():
            await self._run_group(group)

    async def _run_group(self, group: list[_Pending]) -> None:
        head = group[0]
        generator = None if head.seed is None else torch.Generator().manual_seed(head.seed)
        conversations = [c for p in group for c in p.conversations]
        tools = [t for p in group for t in p.tools]
        texts = any(p.token_texts for p in group)
        prompts = None if head.prompt_ids is None else [ids for p in group for ids in p.prompt_ids or []]
        try:
            results = await asyncio.get_running_loop().run_in_executor(
                self._worker, self._generate, conversations, head.sampling, generator, tools, texts, prompts
            )
        except ValueError as exc:  # the model refuses an input (a prompt too long for it)
            if len(group) > 1:  # find the request at fault; the others still get their answers
                for pending in group:
                    await self._run_group([pending])
                return
            _settle(head, exc)
            return
        except Exception as exc:  # the batcher must outlive any failure of the model
            for pending in group:
                _settle(pending, exc)
            return
        start = 0
        for pending in group:
            _settle(pending, results[start : start + pending.size])
            start += pending.size

    def _generate(
        self,
        conversations: list[list[Message]],
        sampling: SamplingParams,
        generator: torch.Generator | None,
        tools: list[list[ToolSpec]],
        texts: bool,
        prompts: list[list[int]] | None = None,
    ) -> list[tuple[Completion, list[str]]]:
        if prompts is not None:
            completions = self.policy.generate_from_ids(prompts, sampling, generator=generator)  # type: ignore[attr-defined]
        else:
            completions = self.policy.generate(conversations, sampling, tools=tools, generator=generator)
        asked = len(prompts) if prompts is not None else len(conversations)
        if len(completions) != asked:
            raise RuntimeError(f"the policy returned {len(completions)} completions for {asked} prompts")
        decode = self._decode if texts else None
        return [(c, [decode(i) for i in c.completion_ids] if decode else []) for c in completions]


def _settle(pending: _Pending, outcome: list[tuple[Completion, list[str]]] | BaseException) -> None:
    if pending.done.done():
        return
    if isinstance(outcome, BaseException):
        pending.done.set_exception(outcome)
    else:
        pending.done.set_result(outcome)


def _token_decoder(policy: Policy) -> Callable[[int], str] | None:
    """Token id → text through the policy's tokenizer, if it has one with ``decode``."""
    decode = getattr(getattr(policy, "tokenizer", None), "decode", None)
    return (lambda i: decode([i])) if callable(decode) else None


# ---- the response ------------------------------------------------------------------------------
def _choice(
    index: int, completion: Completion, texts: list[str], request: ChatRequest, with_logprobs: bool
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": completion.text if completion.text or not completion.tool_calls else None,
    }
    if completion.tool_calls:
        message["tool_calls"] = [tool_call_to_wire(c, i) for i, c in enumerate(completion.tool_calls)]
    choice: dict[str, Any] = {
        "index": index,
        "message": message,
        "logprobs": None,
        "finish_reason": completion.finish_reason,
    }
    if with_logprobs:
        content = []
        for k, (token_id, logprob) in enumerate(zip(completion.completion_ids, completion.logprobs, strict=False)):
            text = texts[k] if texts else None
            content.append(
                {
                    "token": f"token_id:{token_id}" if request.return_tokens_as_token_ids or text is None else text,
                    "logprob": logprob if math.isfinite(logprob) else LOGPROB_FLOOR,
                    "bytes": list(text.encode("utf-8")) if text is not None else None,
                    "top_logprobs": [],
                }
            )
        choice["logprobs"] = {"content": content}
    if request.return_token_ids:
        choice["token_ids"] = completion.completion_ids
    return choice


def _error(status: int, message: str, code: str, param: str | None = None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status)


_UNION_TAGS = {"str", "int", "float", "bool", "dict", "list"}


def _field(location: tuple[Any, ...]) -> str:
    """``messages.0.role`` from pydantic's location, without ``body`` and the names of union members."""
    parts = [str(p) for p in location[1:] if not (isinstance(p, str) and ("[" in p or p in _UNION_TAGS))]
    return ".".join(parts) or "body"


def _problem(error: dict[str, Any]) -> str:
    if error["type"] == "json_invalid":
        return f"the body is not valid JSON ({error.get('ctx', {}).get('error', error['msg'])})"
    return f"{_field(tuple(error['loc']))}: {error['msg']}"


# ---- the app -----------------------------------------------------------------------------------
def create_app(
    policy: Policy,
    model_name: str,
    *,
    max_batch: int = 32,
    weight_updates: bool = False,
    allow_origins: tuple[str, ...] = (),
    allow_hosts: tuple[str, ...] = (),
) -> FastAPI:
    """``GET /health``, ``GET /v1/models`` and ``POST /v1/chat/completions`` for ``policy``,
    served under ``model_name``; at most ``max_batch`` conversations share a ``generate`` call.
    A transformers model also answers ``POST /v1/completions``; ``weight_updates`` adds the
    weight endpoints (see the module docstring): anyone who reaches the server can then replace
    the model's weights with files on this machine. Browser pages are refused unless
    ``allow_origins`` names theirs, and DNS names other than localhost unless ``allow_hosts``
    does (:class:`ludus.serve.browser.BrowserGuard`, as serve-env): a page the user opens must
    not reach a server on their machine."""
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    rules = BrowserRules(allow_origins, allow_hosts)  # checked now: a bad flag stops the server at start

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        batcher = _Batcher(policy, max_batch)
        task = asyncio.create_task(batcher.run())
        app.state.batcher = batcher
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            batcher.close()

    app = FastAPI(title=f"ludus model server: {model_name}", lifespan=lifespan)
    app.add_middleware(BrowserGuard, rules=rules)
    created = int(time.time())

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = _field(tuple(errors[0]["loc"])) if errors and errors[0]["type"] != "json_invalid" else None
        return _error(400, "; ".join(map(_problem, errors)) or "invalid request", "invalid_value", first)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail), "not_found" if exc.status_code == 404 else "http_error")

    @app.exception_handler(_BadRequest)
    async def bad_request(request: Request, exc: _BadRequest) -> JSONResponse:
        return _error(404 if exc.code == "model_not_found" else 400, str(exc), exc.code, exc.param)

    @app.get("/health")
    async def health(request: Request) -> dict[str, Any]:
        return {"status": "ok", "model": model_name, "queued": request.app.state.batcher.queued}

    def refuse_unserved(body: ChatRequest | CompletionRequest) -> None:
        """What both endpoints refuse alike: another model's name, streaming."""
        if body.model is not None and body.model != model_name:
            raise _BadRequest(
                f"model {body.model!r} is not served here; this server serves {model_name!r}",
                "model_not_found",
                "model",
            )
        if body.stream:
            raise _BadRequest("streaming is not supported; send stream=false", "unsupported_value", "stream")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": model_name, "object": "model", "created": created, "owned_by": "ludus"}],
        }

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(body: ChatRequest, request: Request) -> dict[str, Any] | JSONResponse:
        refuse_unserved(body)
        if body.stop:
            raise _BadRequest("stop sequences are not supported; leave stop unset", "unsupported_value", "stop")
        n = body.n or 1
        if n > max_batch:
            raise _BadRequest(f"n={n} exceeds this server's max batch of {max_batch}", "invalid_value", "n")
        defaults = SamplingParams()
        sampling = SamplingParams(
            temperature=defaults.temperature if body.temperature is None else body.temperature,
            top_p=defaults.top_p if body.top_p is None else body.top_p,
            max_tokens=body.max_completion_tokens or body.max_tokens or defaults.max_tokens,
        )
        try:
            conversation = [m.to_message() for m in body.messages]
        except (ValueError, TypeError) as exc:
            raise _BadRequest(str(exc), "invalid_value", "messages") from None
        tools = [ToolSpec(t.function.name, t.function.description, t.function.parameters) for t in body.tools or []]
        with_logprobs = bool(body.logprobs)
        try:
            answers = await request.app.state.batcher.submit(
                [list(conversation) for _ in range(n)], [tools] * n, sampling, body.seed, with_logprobs
            )
        except ValueError as exc:
            raise _BadRequest(str(exc), "invalid_prompt", "messages") from None
        except Exception as exc:  # the model failed on good input: say so in the OpenAI format
            return _error(500, f"the model failed: {type(exc).__name__}: {exc}", "model_error")
        choices = [_choice(i, c, texts, body, with_logprobs) for i, (c, texts) in enumerate(answers)]
        prompt_ids = answers[0][0].prompt_ids
        completion_tokens = sum(len(c.completion_ids) for c, _ in answers)
        response: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": choices,
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": completion_tokens,
                "total_tokens": len(prompt_ids) + completion_tokens,
            },
        }
        if body.return_token_ids:
            response["prompt_token_ids"] = prompt_ids
        return response

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest, request: Request) -> dict[str, Any] | JSONResponse:
        tokenizer = getattr(policy, "tokenizer", None)
        if not callable(getattr(policy, "generate_from_ids", None)) or tokenizer is None:
            raise _BadRequest(
                f"{model_name} answers chat completions only (/v1/chat/completions); completions of token ids "
                "need a transformers model (--model hf:PATH)",
                "unsupported_value",
                "prompt",
            )
        refuse_unserved(body)
        eos = set(getattr(policy, "eos_ids", ()))
        if body.stop_token_ids and not set(body.stop_token_ids) <= eos:
            raise _BadRequest(
                f"this server stops at the model's end-of-sequence tokens {sorted(eos)} only; "
                f"got stop_token_ids {body.stop_token_ids}",
                "unsupported_value",
                "stop_token_ids",
            )
        if isinstance(body.prompt, str):
            prompts = [tokenizer.encode(body.prompt, add_special_tokens=body.add_special_tokens is not False)]
        elif body.prompt and isinstance(body.prompt[0], list):
            prompts = [list(p) for p in body.prompt]  # type: ignore[union-attr]
        else:
            prompts = [list(body.prompt)]  # type: ignore[arg-type]
        defaults = SamplingParams()
        sampling = SamplingParams(
            temperature=defaults.temperature if body.temperature is None else body.temperature,
            top_p=defaults.top_p if body.top_p is None else body.top_p,
            max_tokens=body.max_tokens or defaults.max_tokens,
        )
        try:
            answers = await request.app.state.batcher.submit([], [], sampling, body.seed, False, prompt_ids=prompts)
        except ValueError as exc:
            raise _BadRequest(str(exc), "invalid_prompt", "prompt") from None
        except Exception as exc:  # the model failed on good input: say so in the OpenAI format
            return _error(500, f"the model failed: {type(exc).__name__}: {exc}", "model_error")
        choices = []
        for index, (completion, _) in enumerate(answers):
            ids = completion.completion_ids
            choice: dict[str, Any] = {
                "index": index,
                "text": tokenizer.decode(ids, skip_special_tokens=True),
                "logprobs": None,
                "finish_reason": "length" if completion.finish_reason == "length" else "stop",
            }
            if body.logprobs is not None:
                choice["logprobs"] = {
                    "tokens": [f"token_id:{i}" for i in ids],
                    "token_logprobs": [lp if math.isfinite(lp) else LOGPROB_FLOOR for lp in completion.logprobs],
                    "text_offset": [],
                    "top_logprobs": [],
                }
            if body.return_token_ids:
                choice["token_ids"], choice["prompt_token_ids"] = ids, completion.prompt_ids
            choices.append(choice)
        prompt_tokens = sum(len(c.prompt_ids) for c, _ in answers)
        completion_tokens = sum(len(c.completion_ids) for c, _ in answers)
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    if weight_updates:
        _add_weight_endpoints(app, policy)
    return app


class _RpcRequest(BaseModel):
    method: str
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    timeout: float | None = None


class _VersionRequest(BaseModel):
    new_version: str


def _add_weight_endpoints(app: FastAPI, policy: Policy) -> None:
    """vLLM's development-mode weight endpoints, as far as a trainer needs them."""
    state = {"weight_version": "default"}

    @app.post("/collective_rpc")
    async def collective_rpc(body: _RpcRequest, request: Request) -> dict[str, Any]:
        if body.method != "reload_weights":
            raise _BadRequest(
                f"method {body.method!r} is not known here; this server runs reload_weights only",
                "unsupported_value",
                "method",
            )
        path = body.kwargs.get("weights_path")
        load = getattr(policy, "load_weights", None)
        if not isinstance(path, str) or load is None:
            raise _BadRequest(
                "reload_weights needs kwargs.weights_path (a folder of safetensors) and a transformers model",
                "invalid_value",
                "kwargs.weights_path",
            )
        try:
            await request.app.state.batcher.between_batches(lambda: load(path))
        except (OSError, ValueError) as exc:
            raise _BadRequest(
                f"cannot load weights from {path}: {exc}", "invalid_value", "kwargs.weights_path"
            ) from None
        return {"results": [None]}

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> dict[str, Any]:
        return {"success": True}  # nothing is cached between requests here

    @app.post("/update_weight_version")
    async def update_weight_version(body: _VersionRequest) -> dict[str, Any]:
        state["weight_version"] = body.new_version
        return {"success": True, "new_version": body.new_version}

    @app.get("/weight_info")
    async def weight_info() -> dict[str, Any]:
        return {"weight_version": state["weight_version"]}
