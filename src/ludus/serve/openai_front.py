"""The OpenAI wire layer that ``ludus serve-model``, ``ludus proxy`` and the agent gateway share:
request models and their validation errors in OpenAI's format, the browser guard, ``GET
/health``, ``GET /v1/models``, ``POST /v1/chat/completions`` and ``POST /v1/completions``,
streamed or not, in front of a pluggable :class:`ChatBackend`.

A backend sees each request as a :class:`ChatCall` (or :class:`TextCall`) and answers with
:class:`~ludus.policies.base.Completion` objects, or refuses with :class:`OpenAIError`. The
front owns everything else: it checks the model name, fills in the server's sampling defaults,
renders choices, log-probs and usage, and streams. Generation is not incremental here: a
streamed answer is the finished completion sent as ``chat.completion.chunk`` (or
``text_completion``) events — the role, the content in one delta, each tool call, the finish
reason, the usage when asked, then ``[DONE]`` — which every OpenAI client reassembles.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Protocol

try:
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, Response, StreamingResponse
    from fastapi.routing import APIRoute
    from pydantic import AfterValidator, BaseModel, ConfigDict, Field
    from starlette.exceptions import HTTPException
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        f"the OpenAI-compatible servers need FastAPI and uvicorn: pip install 'ludus[serve]' ({exc})"
    ) from exc

from ludus.core.tools import nested_deeper
from ludus.core.types import Message, ToolCall, ToolSpec
from ludus.policies.base import Completion, SamplingParams
from ludus.policies.openai import arguments_from_wire, tool_call_to_wire
from ludus.serve.browser import BrowserGuard, BrowserRules

# Log-probs JSON cannot carry -inf; vLLM sends this instead.
LOGPROB_FLOOR = -9999.0
EPISODE_HEADER = "x-ludus-episode"  # the episode key, for agents whose API key is not theirs to set
# What a request may hold. Bodies: a rollout client's batch of token-id prompts fits many times
# over; past it, refused (413) before more is read. Nesting: tool schemas and arguments need a
# fraction of it; Python's own parsers and serialisers stop near 1000.
MAX_REQUEST_BYTES = 64 << 20
MAX_JSON_DEPTH = 64
# Sampling settings below this (other than a temperature of 0) underflow the samplers' float32.
MIN_SAMPLING = 1e-30


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
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[_TextPart] | None = None
    tool_calls: list[_ToolCallIn] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    def to_message(self) -> Message:
        content = self.content if not isinstance(self.content, list) else "\n".join(p.text for p in self.content)
        calls = [
            ToolCall(c.function.name, arguments_from_wire(c.function.arguments), id=c.id) for c in self.tool_calls or []
        ]
        role = "system" if self.role == "developer" else self.role  # OpenAI's newer name for the system role
        return Message(role, content or "", tool_calls=calls, tool_call_id=self.tool_call_id, name=self.name)


class _FunctionSpec(BaseModel):
    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class _ToolIn(BaseModel):
    type: Literal["function"] = "function"
    function: _FunctionSpec


class _StreamOptions(BaseModel):
    include_usage: bool | None = None


def _samplable(value: float | None) -> float | None:
    if value is not None and 0 < value < MIN_SAMPLING:
        raise ValueError(
            f"{value:g} is below {MIN_SAMPLING:g}: too small to sample with (a temperature of 0 is greedy)"
        )
    return value


_Temperature = Annotated[float | None, Field(ge=0), AfterValidator(_samplable)]
_TopP = Annotated[float | None, Field(gt=0, le=1), AfterValidator(_samplable)]


class ChatRequest(BaseModel):
    """The fields this server reads. Others (``tool_choice``, ``user``, ...) are kept as sent,
    for a backend's records (:attr:`ChatCall.asked`), and otherwise ignored."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[_MessageIn] = Field(min_length=1)
    tools: list[_ToolIn] | None = None
    temperature: _Temperature = None
    top_p: _TopP = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    n: int | None = Field(None, ge=1)
    seed: int | None = Field(None, ge=0, lt=2**63)
    logprobs: bool | None = None
    return_tokens_as_token_ids: bool | None = None
    return_token_ids: bool | None = None
    stream: bool | None = None
    stream_options: _StreamOptions | None = None
    stop: str | list[str] | None = None


class CompletionRequest(BaseModel):
    """``/v1/completions`` as the rollout client sends it: a prompt of token ids, or several (``n``
    choices each, in order); or text, which the backend's tokenizer encodes."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    prompt: list[int] | list[list[int]] | str = Field(min_length=1)
    temperature: _Temperature = None
    top_p: _TopP = None
    max_tokens: int | None = Field(None, ge=1)
    n: int | None = Field(None, ge=1)
    seed: int | None = Field(None, ge=0, lt=2**63)
    logprobs: int | None = Field(None, ge=0)
    return_token_ids: bool | None = None
    stop_token_ids: list[int] | None = None
    add_special_tokens: bool | None = None
    stream: bool | None = None
    stream_options: _StreamOptions | None = None


# ---- what a backend sees and answers ---------------------------------------------------------------
class OpenAIError(Exception):
    """A refusal in OpenAI's format: ``{"error": {"message", "type", "param", "code"}}`` with HTTP
    ``status``, which the ``openai`` client raises as its typed exception (400
    ``BadRequestError``, 401 ``AuthenticationError``, 404 ``NotFoundError``, ...)."""

    def __init__(self, status: int, message: str, code: str, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param

    def response(self) -> JSONResponse:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        body = {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}
        return JSONResponse(body, self.status)


@dataclass(frozen=True)
class ChatCall:
    """One ``/v1/chat/completions`` request as a backend sees it. ``sampling`` is as asked, with
    the server's defaults filled in; ``asked`` holds the request's fields other than the
    conversation exactly as sent (``temperature``, ``max_tokens``, ``seed``, ``n``,
    ``tool_choice``, ...), for records. ``key`` comes from ``X-Ludus-Episode`` or else
    ``Authorization: Bearer KEY``; a backend that needs it checks it itself."""

    messages: list[Message]
    tools: list[ToolSpec]
    sampling: SamplingParams
    n: int
    seed: int | None
    key: str | None = field(repr=False)  # a secret: never in a log line
    asked: dict[str, Any]


@dataclass(frozen=True)
class TextCall:
    """One ``/v1/completions`` request: ``prompt`` is text or prompts of token ids, each sampled
    ``n`` times (choices in that order); the rest as in :class:`ChatCall`."""

    prompt: str | list[list[int]]
    sampling: SamplingParams
    n: int
    seed: int | None
    key: str | None = field(repr=False)
    asked: dict[str, Any]
    stop_token_ids: list[int] = field(default_factory=list)
    add_special_tokens: bool = True


class ChatBackend(Protocol):
    """What the front serves. Optional, found by name: ``async complete(TextCall) ->
    list[Completion]`` (``/v1/completions``; without it the front refuses them), ``token_text(id)
    -> str | None`` (a token's text, for log-probs), ``health() -> dict`` (added to ``/health``),
    ``serves_any_model`` (true: requests naming another model are answered, not refused 404)."""

    model_name: str

    async def chat(self, call: ChatCall) -> list[Completion]:
        """``call.n`` completions of ``call.messages``; raise :class:`OpenAIError` to refuse."""
        ...


# ---- the response ------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Show:
    """What a request asked to see besides the reply."""

    logprobs: bool
    token_ids_as_text: bool  # return_tokens_as_token_ids
    token_ids: bool  # return_token_ids
    usage_chunk: bool  # stream_options.include_usage


def _usage(completions: Sequence[Completion], prompt_tokens: int) -> dict[str, int]:
    completion_tokens = sum(len(c.completion_ids) for c in completions)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _logprob(value: float) -> float:
    return value if math.isfinite(value) else LOGPROB_FLOOR


def _chat_logprobs(completion: Completion, texts: list[str | None], show: _Show) -> dict[str, Any]:
    content = []
    for token_id, logprob, text in zip(completion.completion_ids, completion.logprobs, texts, strict=False):
        content.append(
            {
                "token": f"token_id:{token_id}" if show.token_ids_as_text or text is None else text,
                "logprob": _logprob(logprob),
                "bytes": list(text.encode("utf-8")) if text is not None else None,
                "top_logprobs": [],
            }
        )
    return {"content": content}


def _chat_choice(index: int, completion: Completion, texts: list[str | None], show: _Show) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": completion.text if completion.text or not completion.tool_calls else None,
    }
    if completion.tool_calls:
        message["tool_calls"] = [tool_call_to_wire(c, i) for i, c in enumerate(completion.tool_calls)]
    choice: dict[str, Any] = {
        "index": index,
        "message": message,
        "logprobs": _chat_logprobs(completion, texts, show) if show.logprobs else None,
        "finish_reason": completion.finish_reason,
    }
    if show.token_ids:
        choice["token_ids"] = completion.completion_ids
    return choice


def _chat_chunks(
    head: dict[str, Any], completions: list[Completion], texts: list[list[str | None]], show: _Show
) -> list[dict[str, Any]]:
    """A finished chat answer as OpenAI streams one: per choice the role, the content, each tool
    call (its name, then its arguments), the finish reason with the log-probs; then the usage."""
    usage = {"usage": None} if show.usage_chunk else {}

    def chunk(index: int, delta: dict[str, Any], **extra: Any) -> dict[str, Any]:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": None, **extra}
        return {**head, "object": "chat.completion.chunk", "choices": [choice], **usage}

    chunks = []
    for i, completion in enumerate(completions):
        first = chunk(i, {"role": "assistant", "content": ""})
        if i == 0 and show.token_ids:
            first["prompt_token_ids"] = completion.prompt_ids
        chunks.append(first)
        if completion.text:
            chunks.append(chunk(i, {"content": completion.text}))
        for k, call in enumerate(completion.tool_calls):
            wire = tool_call_to_wire(call, k)
            named = {"index": k, "id": wire["id"], "type": "function", "function": {"name": call.name, "arguments": ""}}
            chunks.append(chunk(i, {"tool_calls": [named]}))
            chunks.append(
                chunk(i, {"tool_calls": [{"index": k, "function": {"arguments": wire["function"]["arguments"]}}]})
            )
        last: dict[str, Any] = {"finish_reason": completion.finish_reason}
        if show.logprobs:
            last["logprobs"] = _chat_logprobs(completion, texts[i], show)
        if show.token_ids:
            last["token_ids"] = completion.completion_ids
        chunks.append(chunk(i, {}, **last))
    if show.usage_chunk:
        prompt_tokens = len(completions[0].prompt_ids) if completions else 0
        chunks.append(
            {**head, "object": "chat.completion.chunk", "choices": [], "usage": _usage(completions, prompt_tokens)}
        )
    return chunks


def _text_choice(index: int, completion: Completion, show: _Show) -> dict[str, Any]:
    ids = completion.completion_ids
    choice: dict[str, Any] = {
        "index": index,
        "text": completion.text,
        "logprobs": None,
        "finish_reason": "length" if completion.finish_reason == "length" else "stop",
    }
    if show.logprobs:
        choice["logprobs"] = {
            "tokens": [f"token_id:{i}" for i in ids],
            "token_logprobs": [_logprob(lp) for lp in completion.logprobs],
            "text_offset": [],
            "top_logprobs": [],
        }
    if show.token_ids:
        choice["token_ids"], choice["prompt_token_ids"] = ids, completion.prompt_ids
    return choice


def _text_chunks(head: dict[str, Any], completions: list[Completion], show: _Show) -> list[dict[str, Any]]:
    usage = {"usage": None} if show.usage_chunk else {}
    chunks = []
    for i, completion in enumerate(completions):
        choice = _text_choice(i, completion, show)
        finish = choice.pop("finish_reason")
        chunks.append({**head, "choices": [{**choice, "finish_reason": None}], **usage})
        chunks.append(
            {**head, "choices": [{"index": i, "text": "", "logprobs": None, "finish_reason": finish}], **usage}
        )
    if show.usage_chunk:
        prompt_tokens = sum(len(c.prompt_ids) for c in completions)
        chunks.append({**head, "choices": [], "usage": _usage(completions, prompt_tokens)})
    return chunks


def _event_stream(chunks: list[dict[str, Any]]) -> StreamingResponse:
    """Server-sent events, one chunk each, then ``[DONE]``. A client that hangs up mid-stream
    costs nothing: the answer was finished before the first event."""

    async def events() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream", headers={"cache-control": "no-cache"})


# ---- validation errors -------------------------------------------------------------------------------
_UNION_TAGS = {"str", "int", "float", "bool", "dict", "list"}


def _field(location: tuple[Any, ...]) -> str:
    """``messages.0.role`` from pydantic's location, without ``body`` and the names of union members."""
    parts = [str(p) for p in location[1:] if not (isinstance(p, str) and ("[" in p or p in _UNION_TAGS))]
    return ".".join(parts) or "body"


def _problem(error: dict[str, Any]) -> str:
    if error["type"] == "json_invalid":
        return f"the body is not valid JSON ({error.get('ctx', {}).get('error', error['msg'])})"
    return f"{_field(tuple(error['loc']))}: {error['msg']}"


class _NotData(json.JSONDecodeError):
    """A body that parses as Python's JSON but is no data every reader takes."""

    def __init__(self, problem: str):
        super().__init__(problem, "", 0)


def _no_constant(name: str) -> Any:
    raise _NotData(f"{name} is no JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _NotData(f"{text} is too large for a number")
    return value


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # a UTF-16 surrogate written as an escape


def _strict_json(body: bytes) -> Any:
    """``body`` parsed as JSON that every reader takes, or :class:`json.JSONDecodeError` naming
    what it is not: ``NaN``, ``Infinity`` and numbers too large for a float (a record or a reply
    holding one is not JSON: ``JSONResponse`` refuses it), text with half a UTF-16 surrogate pair
    (no model can encode it: it would fail the batch it is sampled in), nesting deeper than
    :data:`MAX_JSON_DEPTH`."""
    try:
        value = json.loads(body, parse_constant=_no_constant, parse_float=_finite)
    except UnicodeDecodeError as exc:
        raise _NotData(f"it is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise _NotData(f"it nests lists and objects more than {MAX_JSON_DEPTH} deep") from None
    if nested_deeper(value, MAX_JSON_DEPTH):
        raise _NotData(f"it nests lists and objects more than {MAX_JSON_DEPTH} deep")
    if _SURROGATE_ESCAPE.search(body):  # clients that escape what is not ASCII write pairs; half of one is no text
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise _NotData(
                "a string holds half of a UTF-16 surrogate pair (\\ud800-\\udfff alone), which is no text"
            ) from None
    return value


class _StrictRequest(Request):
    """A request whose body is read up to :data:`MAX_REQUEST_BYTES` (413 past it, before the rest
    is read) and parsed by :func:`_strict_json`."""

    async def body(self) -> bytes:
        if not hasattr(self, "_body"):
            declared = self.headers.get("content-length", "")
            too_large = HTTPException(413, f"a request's body is {MAX_REQUEST_BYTES} bytes at most")
            if declared.isdigit() and int(declared) > MAX_REQUEST_BYTES:
                raise too_large
            chunks, size = [], 0
            async for chunk in self.stream():
                size += len(chunk)
                if size > MAX_REQUEST_BYTES:
                    raise too_large
                chunks.append(chunk)
            self._body = b"".join(chunks)
        return self._body

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = _strict_json(await self.body())
        return self._json


class _StrictRoute(APIRoute):
    """A route whose endpoint reads its request as a :class:`_StrictRequest`."""

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        handle = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handle(_StrictRequest(request.scope, request.receive))

        return strict


def _key(request: Request) -> str | None:
    """The episode key a request carries: ``X-Ludus-Episode``, or else ``Authorization: Bearer``."""
    header = request.headers.get(EPISODE_HEADER)
    if header:
        return header.strip()
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    return (credentials.strip() or None) if scheme.lower() == "bearer" else None


def _asked(body: BaseModel, *conversation: str) -> dict[str, Any]:
    """The request's fields as sent, without the conversation itself."""
    sent = {**body.model_dump(exclude_unset=True, mode="json"), **(body.model_extra or {})}
    return {k: v for k, v in sent.items() if k not in ("model", *conversation)}


def _sampling(
    defaults: SamplingParams, temperature: float | None, top_p: float | None, max_tokens: int | None
) -> SamplingParams:
    return SamplingParams(
        temperature=defaults.temperature if temperature is None else temperature,
        top_p=defaults.top_p if top_p is None else top_p,
        max_tokens=max_tokens or defaults.max_tokens,
    )


async def _answer(backend: ChatBackend, work: Awaitable[list[Completion]], asked: int) -> list[Completion]:
    """A backend's completions, its failures turned into OpenAI errors: a refusal as the backend
    worded it, anything else a 500 that names the failure."""
    try:
        completions = await work
    except OpenAIError:
        raise
    except Exception as exc:  # the model failed on good input: say so in the OpenAI format
        raise OpenAIError(500, f"the model failed: {type(exc).__name__}: {exc}", "model_error") from None
    if len(completions) != asked:
        raise OpenAIError(500, f"the backend returned {len(completions)} completions for {asked} asked", "model_error")
    return completions


# ---- the app -------------------------------------------------------------------------------------
def openai_app(
    backend: ChatBackend,
    *,
    allow_origins: tuple[str, ...] = (),
    allow_hosts: tuple[str, ...] = (),
    lifespan: Callable[[FastAPI], AbstractAsyncContextManager[None]] | None = None,
    defaults: SamplingParams | None = None,
) -> FastAPI:
    """``GET /health``, ``GET /v1/models``, ``POST /v1/chat/completions`` and ``POST
    /v1/completions`` for ``backend``, under its ``model_name``. ``defaults`` fill in the sampling
    fields a request leaves out. Browser pages are refused unless ``allow_origins`` names theirs,
    and DNS names other than localhost unless ``allow_hosts`` does
    (:class:`ludus.serve.browser.BrowserGuard`, as serve-env): a page the user opens must not
    reach a server on their machine. ``lifespan`` starts and stops what the backend runs.
    Request bodies, here and on routes added to the app later, are read up to
    :data:`MAX_REQUEST_BYTES` and parsed by :func:`_strict_json`."""
    rules = BrowserRules(allow_origins, allow_hosts)  # checked now: a bad flag stops the server at start
    defaults = defaults or SamplingParams()
    name = backend.model_name
    app = FastAPI(title=f"ludus: {name}", lifespan=lifespan)
    app.router.route_class = _StrictRoute
    app.add_middleware(BrowserGuard, rules=rules)
    created = int(time.time())
    token_text: Callable[[int], str | None] | None = getattr(backend, "token_text", None)
    complete: Callable[[TextCall], Awaitable[list[Completion]]] | None = getattr(backend, "complete", None)
    health_of: Callable[[], dict[str, Any]] | None = getattr(backend, "health", None)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = _field(tuple(errors[0]["loc"])) if errors and errors[0]["type"] != "json_invalid" else None
        return OpenAIError(
            400, "; ".join(map(_problem, errors)) or "invalid request", "invalid_value", first
        ).response()

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        code = {404: "not_found", 413: "too_large"}.get(exc.status_code, "http_error")
        return OpenAIError(exc.status_code, str(exc.detail), code).response()

    @app.exception_handler(OpenAIError)
    async def refused(request: Request, exc: OpenAIError) -> JSONResponse:
        return exc.response()

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": name, **(health_of() if health_of else {})}

    def check_model(model: str | None) -> None:
        # an agent trained as it is names the model it was written for: a backend may answer to any name
        if model is not None and model != name and not getattr(backend, "serves_any_model", False):
            raise OpenAIError(
                404, f"model {model!r} is not served here; this server serves {name!r}", "model_not_found", "model"
            )

    def head(kind: str, prefix: str) -> dict[str, Any]:
        return {"id": f"{prefix}-{uuid.uuid4().hex}", "object": kind, "created": int(time.time()), "model": name}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": name, "object": "model", "created": created, "owned_by": "ludus"}]}

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(body: ChatRequest, request: Request) -> JSONResponse | StreamingResponse:
        check_model(body.model)
        if body.stop:  # cutting a reply short after sampling would no longer be the tokens sampled
            raise OpenAIError(400, "stop sequences are not supported; leave stop unset", "unsupported_value", "stop")
        try:
            conversation = [m.to_message() for m in body.messages]
        except (ValueError, TypeError) as exc:
            raise OpenAIError(400, str(exc), "invalid_value", "messages") from None
        n = body.n or 1
        call = ChatCall(
            messages=conversation,
            tools=[ToolSpec(t.function.name, t.function.description, t.function.parameters) for t in body.tools or []],
            sampling=_sampling(defaults, body.temperature, body.top_p, body.max_completion_tokens or body.max_tokens),
            n=n,
            seed=body.seed,
            key=_key(request),
            asked=_asked(body, "messages", "tools"),
        )
        completions = await _answer(backend, backend.chat(call), n)
        show = _Show(
            bool(body.logprobs),
            bool(body.return_tokens_as_token_ids),
            bool(body.return_token_ids),
            bool(body.stream and body.stream_options and body.stream_options.include_usage),
        )
        texts: list[list[str | None]] = [[None] * len(c.completion_ids) for c in completions]
        if show.logprobs and token_text is not None and not show.token_ids_as_text:
            decode = token_text
            texts = await asyncio.to_thread(lambda: [[decode(i) for i in c.completion_ids] for c in completions])
        if body.stream:
            return _event_stream(_chat_chunks(head("chat.completion.chunk", "chatcmpl"), completions, texts, show))
        response: dict[str, Any] = {
            **head("chat.completion", "chatcmpl"),
            "choices": [_chat_choice(i, c, texts[i], show) for i, c in enumerate(completions)],
            "usage": _usage(completions, len(completions[0].prompt_ids)),
        }
        if show.token_ids:
            response["prompt_token_ids"] = completions[0].prompt_ids
        return JSONResponse(response)  # as it is: FastAPI's encoder would walk every token id again

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest, request: Request) -> JSONResponse | StreamingResponse:
        if complete is None:
            raise OpenAIError(
                400, f"{name} answers chat completions only (/v1/chat/completions)", "unsupported_value", "prompt"
            )
        check_model(body.model)
        if isinstance(body.prompt, str):
            prompt: str | list[list[int]] = body.prompt
        elif body.prompt and isinstance(body.prompt[0], list):
            prompt = [list(p) for p in body.prompt]  # type: ignore[union-attr]
        else:
            prompt = [list(body.prompt)]  # type: ignore[arg-type]
        n = body.n or 1
        call = TextCall(
            prompt=prompt,
            sampling=_sampling(defaults, body.temperature, body.top_p, body.max_tokens),
            n=n,
            seed=body.seed,
            key=_key(request),
            asked=_asked(body, "prompt"),
            stop_token_ids=list(body.stop_token_ids or []),
            add_special_tokens=body.add_special_tokens is not False,
        )
        answers = await _answer(backend, complete(call), n * (1 if isinstance(prompt, str) else len(prompt)))
        show = _Show(
            body.logprobs is not None,
            True,
            bool(body.return_token_ids),
            bool(body.stream and body.stream_options and body.stream_options.include_usage),
        )
        if body.stream:
            return _event_stream(_text_chunks(head("text_completion", "cmpl"), answers, show))
        return JSONResponse(
            {
                **head("text_completion", "cmpl"),
                "choices": [_text_choice(i, c, show) for i, c in enumerate(answers)],
                "usage": _usage(answers, sum(len(c.prompt_ids) for c in answers)),
            }
        )

    return app


__all__ = [
    "EPISODE_HEADER",
    "MAX_JSON_DEPTH",
    "MAX_REQUEST_BYTES",
    "ChatBackend",
    "ChatCall",
    "ChatRequest",
    "CompletionRequest",
    "OpenAIError",
    "TextCall",
    "openai_app",
]
