"""A client for OpenAI-compatible chat-completions servers: vLLM, SGLang, Ollama, OpenAI, ``ludus serve-model``.

One request per conversation, sent concurrently under a bound. Failures of the *server* — no
connection, timeouts, 429 and 5xx answers, bodies that are not a chat completion — are retried
with exponential back-off and then raised as :class:`PolicyError`, which the rollout engine
masks as an infrastructure failure. What the *model* wrote is returned as it is, however
broken (tool-call arguments that are not JSON): that is the policy's answer, for the
environment to judge.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import math
import re
import threading
from collections.abc import Callable, Coroutine, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import torch

from ludus.core.tools import MAX_CALL_DEPTH, ToolCallFormat, nested_deeper, tool_call_format
from ludus.core.types import Message, ToolCall, ToolSpec
from ludus.policies.base import Completion, ContextFull, Policy, PolicyError, SamplingParams, Tools

T = TypeVar("T")

# vLLM's request fields that return the exact sampled token ids; other servers may refuse them.
TOKEN_ID_FIELDS: dict[str, Any] = {"return_tokens_as_token_ids": True, "return_token_ids": True}
_TOKEN_ID = re.compile(r"token_id:(\d+)")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # json.loads joins valid pairs: what is left is lone
# how servers refuse a conversation longer than the model's context: vLLM ("maximum context length",
# "maximum model length"), OpenAI, SGLang ("context length"), llama.cpp ("context size"), Ludus's own
# serve-model ("exceeds the tiny model's context of", "exceeds the context of")
_CONTEXT_REFUSAL = re.compile(
    r"context[ _](length|size|window)|maximum model length|model's context|exceeds the context", re.I
)
MAX_BODY_BYTES = 256 << 20  # far above any chat completion's answer (a token's log-prob entry is ~100 bytes)


class _Malformed(ValueError):
    """A successful status with a body that is not what was asked for: the server's fault, retried."""


class _Retryable(Exception):
    """One attempt failed in a way another attempt may not (the reason is the message)."""


class _Refused(PolicyError, ValueError):
    """The server refused one conversation's request as it is (400, 413, 422): a ``ValueError``, so
    that the rollout engine asks the other conversations of its batch again alone and masks only
    this one's episode, not every episode that happened to share its call."""


class _ContextRefused(ContextFull, PolicyError):
    """The server refused a conversation longer than its model's context. A :class:`ContextFull`,
    as a local model raises it, so that the rollout engine fails only that conversation's episode
    (a ``ValueError`` in a batch: the others are asked again alone) and, once the policy has
    replied, ends it as ``truncated`` rather than masking it: a losing policy must not escape its
    zero by talking past the context. Still a :class:`PolicyError` for callers that catch those."""


# ---- the OpenAI wire format, shared with ludus.serve.model_server ------------------------------
def arguments_from_wire(raw: str | dict[str, Any]) -> dict[str, Any] | str:
    """Tool-call arguments as a dict when they are a JSON object; a JSON string is the text it
    holds (what :func:`message_to_wire` sends for raw arguments, and the value the model gave
    ``"arguments"``); anything else stays the raw string the model wrote, so the environment can
    tell the model what is wrong with it. Lone surrogate escapes in the decoded JSON become U+FFFD
    (see :func:`_well_formed`): the escape ``\\ud800`` the model wrote inside its arguments is
    text on the wire, out of reach of the body's own clean-up, and would fail the next turn."""
    if isinstance(raw, dict):
        return raw
    try:
        value = _well_formed(json.loads(raw))
    except (ValueError, RecursionError):  # RecursionError: nested past Python's limit
        return raw
    if isinstance(value, dict) and nested_deeper(value, MAX_CALL_DEPTH):  # no call: see MAX_CALL_DEPTH
        return raw
    return value if isinstance(value, dict | str) else raw


def arguments_to_wire(arguments: Any) -> str:
    """The JSON string OpenAI messages carry; a raw string the model wrote goes back unchanged."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def tool_call_to_wire(call: ToolCall, index: int) -> dict[str, Any]:
    return {
        "id": call.id or f"call_{index}",
        "type": "function",
        "function": {"name": call.name, "arguments": arguments_to_wire(call.arguments)},
    }


def message_to_wire(message: Message) -> dict[str, Any]:
    """A message of a request's history. A call whose arguments are the raw text the model wrote
    (not a JSON object) goes back as that text in a JSON string: servers ``json.loads`` each
    historical call's arguments before rendering the prompt, and the raw text would fail the
    request — vLLM up to 0.25 refuses any that is not JSON (400), vLLM 0.32 answers 500 to one
    nested past Python's recursion limit, and an unreadable call holding a surrogate escape
    decodes to text no tokenizer encodes — masking the episode for what the model wrote."""
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [tool_call_to_wire(c, i) for i, c in enumerate(message.tool_calls)]
        for wire, c in zip(out["tool_calls"], message.tool_calls, strict=True):
            if isinstance(c.arguments, str):
                wire["function"]["arguments"] = json.dumps(c.arguments, ensure_ascii=False)
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        out["name"] = message.name
    return out


def _tool_call_from_wire(data: dict[str, Any], index: int) -> ToolCall:
    function = data["function"]
    name, raw = function["name"], function.get("arguments") or "{}"
    if not isinstance(name, str) or not isinstance(raw, (str, dict)):
        raise _Malformed(f"tool call {index} has no string name or arguments: {data!r:.200}")
    return ToolCall(name, arguments_from_wire(raw), id=str(data.get("id") or f"call_{index}"))


def _ids(value: Any, what: str) -> list[int]:
    """``value`` if it is a list of token ids a tensor can hold (integers in ``[0, 2**63)``); else
    the body is malformed: ``int()`` would take ``"123"`` for ``[1, 2, 3]``, floats, booleans and
    negative ids, which the trainer (and Ludus's record reader) cannot use."""
    if not isinstance(value, list) or not all(type(i) is int and 0 <= i < 2**63 for i in value):
        raise _Malformed(f"{what} are not token ids: {value!r:.200}")
    return value


def _logprob(value: Any) -> float:
    """A log-prob as a finite float; NaN, infinities (``"-Infinity"`` too) or a boolean are the
    server's fault: one NaN behaviour log-prob makes a training step's loss NaN."""
    if type(value) not in (int, float) or not math.isfinite(value):
        raise _Malformed(f"a log-prob is not a finite number: {value!r:.100}")
    return float(value)


def _token_ids(choice: dict[str, Any], logprob_items: list[dict[str, Any]]) -> list[int]:
    """vLLM's ``token_ids`` on the choice, else ids spelled ``token_id:N`` in the log-prob tokens."""
    if choice.get("token_ids"):
        return _ids(choice["token_ids"], "the choice's token_ids")
    matches = [_TOKEN_ID.fullmatch(str(item.get("token", ""))) for item in logprob_items]
    return _ids([int(m.group(1)) for m in matches], "the log-prob tokens") if matches and all(matches) else []


def _parse_completion(body: Any, form: ToolCallFormat) -> Completion:
    choice = body["choices"][0]
    message = _well_formed(choice["message"])  # the text and calls, not every log-prob entry
    content = message.get("content") or ""
    if not isinstance(content, str):
        raise _Malformed(f"message content is not a string: {content!r:.200}")
    calls = [_tool_call_from_wire(c, i) for i, c in enumerate(message.get("tool_calls") or [])]
    if not calls:  # a server without a tool parser returns the calls as text, as local models write them
        content, calls = form.parse(content)
    items = (choice.get("logprobs") or {}).get("content") or []
    finish = choice.get("finish_reason") or "stop"
    if not isinstance(finish, str):
        raise _Malformed(f"finish_reason is not a string: {finish!r:.100}")
    if finish in ("abort", "error"):  # vLLM: the engine dropped the request; the text is not the model's whole answer
        raise _Malformed(f"the server ended the request with finish_reason {finish!r}")
    completion_ids, logprobs = _token_ids(choice, items), [_logprob(item["logprob"]) for item in items]
    if completion_ids and logprobs and len(completion_ids) != len(logprobs):  # the trainer pairs them up
        raise _Malformed(f"{len(completion_ids)} token ids but {len(logprobs)} log-probs")
    return Completion(
        text=content,
        prompt_ids=_ids(body.get("prompt_token_ids") or choice.get("prompt_token_ids") or [], "prompt_token_ids"),
        completion_ids=completion_ids,
        logprobs=logprobs,
        finish_reason="tool_calls" if calls and finish == "stop" else finish,
        tool_calls=calls,
    )


def _well_formed(value: Any) -> Any:
    """``value`` with each lone surrogate escape (``"\\ud800"``) in its strings replaced by U+FFFD, as a
    decoder replaces invalid bytes: such a string cannot be encoded, so the next turn's request
    would fail and the episode be masked as the server's fault — for text the model wrote."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_well_formed(v) for v in value]
    if isinstance(value, dict):  # keys too: {"\\ud800": 1} is as unsendable as a value
        return {_well_formed(k): _well_formed(v) for k, v in value.items()}
    return value


def _head(body: Any) -> str:
    """The start of a body for an error message (a body nested past the limit has none to show)."""
    try:
        return json.dumps(body)[:200]
    except (ValueError, RecursionError):
        return "(nested too deeply to show)"


def _completion(body: Any, form: ToolCallFormat) -> Completion:
    try:
        return _parse_completion(body, form)
    except (KeyError, IndexError, TypeError, AttributeError, ValueError, RecursionError) as exc:
        raise _Malformed(f"not a chat completion ({type(exc).__name__}: {exc}): {_head(body)}") from exc


def _model_ids(body: Any) -> list[str]:
    try:
        return [str(m["id"]) for m in body["data"]]
    except (KeyError, TypeError) as exc:
        raise _Malformed(f"not a model list: {_head(body)}") from exc


def _snippet(body: bytes) -> str:
    return " ".join(body[:4096].decode("utf-8", "replace").split())[:300] or "(empty body)"


def _run_blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to its end from synchronous code, even if this thread runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(1) as pool:  # asyncio.run needs a thread without a loop; the caller's context goes along
        return pool.submit(contextvars.copy_context().run, asyncio.run, coroutine).result()


@dataclass
class _Connection:
    """What belongs to one event loop: httpx connections and asyncio locks cannot cross loops."""

    client: httpx.AsyncClient
    limit: asyncio.Semaphore
    keeper: asyncio.Task[None]  # closes the client when cancelled


async def _close_when_cancelled(client: httpx.AsyncClient) -> None:
    """Keeps ``client`` open for the life of its event loop. ``asyncio.run`` cancels every task
    as it ends, so the connections close with the loop even if nobody calls ``aclose``."""
    try:
        await asyncio.get_running_loop().create_future()
    finally:
        await client.aclose()


def _per_conversation(tools: Tools, count: int) -> list[Sequence[ToolSpec]]:
    """The tools offered to each of ``count`` conversations (none when ``tools`` is ``None``)."""
    if tools is None:
        return [()] * count
    if len(tools) != count:
        raise ValueError(f"got {len(tools)} tool lists for {count} conversations")
    return list(tools)


async def _all_or_first_error(coroutines: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """The coroutines' results in order; the first failure cancels the others and is raised as
    itself, not wrapped in an ``ExceptionGroup``."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(coroutine) for coroutine in coroutines]
    except ExceptionGroup as failures:
        raise failures.exceptions[0] from None
    return [task.result() for task in tasks]


def _seeds(generator: torch.Generator | None, n: int) -> list[int] | None:
    """One request seed per conversation, drawn from ``generator``: seeded sampling on a server."""
    return None if generator is None else torch.randint(0, 2**31 - 1, (n,), generator=generator).tolist()


class OpenAIPolicy(Policy):
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    ``base_url`` ends in ``/v1`` (``http://127.0.0.1:8000/v1``). ``model=None`` asks the
    server's ``/models`` and uses the first one. ``concurrency`` bounds the requests in flight
    from this policy in one event loop (across concurrent ``agenerate`` calls). Each attempt has
    ``timeout_s`` in all; a failing server is retried ``max_retries`` times, waiting
    ``backoff_s``, then twice that, and so on, before :class:`PolicyError` is raised.
    ``tool_format`` reads tool calls a server without a tool parser returns as text. A body
    longer than ``max_body_bytes`` (an attribute, 256 MiB) is a failed attempt, not read on.
    """

    max_body_bytes: int = MAX_BODY_BYTES

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        concurrency: int = 16,
        tool_format: str = "hermes",
    ):
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if timeout_s <= 0 or max_retries < 0 or backoff_s < 0 or concurrency < 1:
            raise ValueError(
                "OpenAIPolicy needs timeout_s > 0, max_retries >= 0, backoff_s >= 0 and concurrency >= 1; got "
                f"{timeout_s=}, {max_retries=}, {backoff_s=}, {concurrency=}"
            )
        self.base_url = base_url.rstrip("/")
        self.timeout_s, self.max_retries, self.backoff_s = timeout_s, max_retries, backoff_s
        self.concurrency = concurrency
        self.tool_format = tool_call_format(tool_format)  # for calls a server returns as text
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.send_token_id_fields = True  # cleared for good once the server refuses them
        self._connections: dict[asyncio.AbstractEventLoop, _Connection] = {}
        self._lock = threading.Lock()
        self.model = model or self._first_model()

    # ---- Policy ------------------------------------------------------------------------------
    def generate(
        self,
        conversations: list[list[Message]],
        sampling: SamplingParams,
        *,
        tools: Tools = None,
        generator: torch.Generator | None = None,
    ) -> list[Completion]:
        """Blocking ``agenerate``; with a ``generator``, each request carries a ``seed`` drawn from it."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            seeds = _seeds(generator, len(conversations))
            return asyncio.run(self._agenerate(conversations, sampling, tools, seeds))  # closes its connections
        raise RuntimeError(
            "OpenAIPolicy.generate was called inside a running event loop, which it would block; "
            "use `await policy.agenerate(...)` there instead"
        )

    async def agenerate(
        self,
        conversations: list[list[Message]],
        sampling: SamplingParams,
        *,
        tools: Tools = None,
        generator: torch.Generator | None = None,
    ) -> list[Completion]:
        return await self._agenerate(conversations, sampling, tools, _seeds(generator, len(conversations)))

    async def aclose(self) -> None:
        """``close`` for code inside an event loop: closes this loop's connections and waits for it."""
        with self._lock:
            connection = self._connections.pop(asyncio.get_running_loop(), None)
        if connection is not None:
            connection.keeper.cancel()
            await asyncio.wait([connection.keeper])

    def close(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, {}
        for loop, connection in connections.items():
            if not loop.is_closed():  # the loop may run in another thread: ask it, do not wait
                loop.call_soon_threadsafe(connection.keeper.cancel)

    # ---- requests ----------------------------------------------------------------------------
    async def _agenerate(
        self,
        conversations: list[list[Message]],
        sampling: SamplingParams,
        tools: Tools,
        seeds: list[int] | None,
    ) -> list[Completion]:
        offered = _per_conversation(tools, len(conversations))
        connection = self._connection()
        return await _all_or_first_error(
            self._complete(connection, conversation, offered[i], sampling, seeds[i] if seeds is not None else None)
            for i, conversation in enumerate(conversations)
        )

    async def _complete(
        self,
        connection: _Connection,
        conversation: list[Message],
        tools: Sequence[ToolSpec],
        sampling: SamplingParams,
        seed: int | None,
    ) -> Completion:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [message_to_wire(m) for m in conversation],
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "logprobs": True,
            **TOKEN_ID_FIELDS,
        }
        if tools:
            body["tools"] = [t.to_openai() for t in tools]
        if seed is not None:
            body["seed"] = seed
        async with connection.limit:
            return await self._call(
                connection.client, "POST", "/chat/completions", body, lambda b: _completion(b, self.tool_format)
            )

    def _connection(self) -> _Connection:
        loop = asyncio.get_running_loop()
        with self._lock:
            for stale in [other for other in self._connections if other.is_closed()]:
                del self._connections[stale]
            if loop not in self._connections:
                client = self._client()
                keeper = loop.create_task(_close_when_cancelled(client))
                self._connections[loop] = _Connection(client, asyncio.Semaphore(self.concurrency), keeper)
            return self._connections[loop]

    def _client(self) -> httpx.AsyncClient:
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        return httpx.AsyncClient(headers=self._headers, timeout=self.timeout_s, limits=limits)

    def _first_model(self) -> str:
        async def ask() -> list[str]:
            async with self._client() as client:
                return await self._call(client, "GET", "/models", None, _model_ids)

        names = _run_blocking(ask())
        if not names:
            raise PolicyError(
                f"{self.base_url}/models lists no models; start the server with a model or pass model=... explicitly"
            )
        return names[0]

    async def _call(
        self,
        client: httpx.AsyncClient,
        method: str,
        path: str,
        payload: dict[str, Any] | None,
        parse: Callable[[Any], T],
    ) -> T:
        """One request, retried with exponential back-off while the failure may be passing.
        ``path`` is below the base URL (``/chat/completions``), or a whole URL."""
        url = path if path.startswith(("http://", "https://")) else self.base_url + path
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                return await self._attempt(client, method, url, payload, parse)
            except _Retryable as exc:
                last = str(exc)
        raise PolicyError(
            f"{method} {url} failed {self.max_retries + 1} time(s); last: {last}. Check that the server is up "
            "and reachable at that address (and read its log); raise timeout_s if it is only slow"
        )

    async def _attempt(
        self,
        client: httpx.AsyncClient,
        method: str,
        url: str,
        payload: dict[str, Any] | None,
        parse: Callable[[Any], T],
    ) -> T:
        try:
            async with asyncio.timeout(self.timeout_s):
                status, body = await self._send(client, method, url, payload)
                if status == 400 and self._refuses_token_id_fields(body, payload):
                    self.send_token_id_fields = False
                    status, body = await self._send(client, method, url, payload)
        except TimeoutError:
            raise _Retryable(f"no complete answer within timeout_s={self.timeout_s:g} s") from None
        except httpx.RequestError as exc:  # a transport failure, or a body its content-encoding misdescribes
            raise _Retryable(f"{type(exc).__name__}: {exc}") from None
        if status == 429 or status >= 500:
            raise _Retryable(f"HTTP {status}: {_snippet(body)}")
        if not 200 <= status < 300:
            refused = f"{method} {url} was refused with HTTP {status}: {_snippet(body)}"
            if status == 400 and _CONTEXT_REFUSAL.search(body[:4096].decode("utf-8", "replace")):
                raise _ContextRefused(f"{refused}. The conversation is longer than the model's context")
            raise (_Refused if status in (400, 413, 422) else PolicyError)(
                f"{refused}. Check the base URL (it ends in /v1), the model name, the API key and the request; "
                "retrying would not help"
            )
        try:
            return parse(json.loads(body))
        except (ValueError, RecursionError) as exc:  # not JSON (or nested past the limit), or not the JSON asked for
            raise _Retryable(f"HTTP {status} with a malformed body: {exc}") from None

    async def _send(
        self, client: httpx.AsyncClient, method: str, url: str, payload: dict[str, Any] | None
    ) -> tuple[int, bytes]:
        """One request's status and (decoded) body, read up to :attr:`max_body_bytes`: a server that
        streams without end would otherwise grow this process's memory at the line's rate until
        ``timeout_s`` (half a gigabyte a second on loopback), and a gzip body can unpack a thousandfold."""
        async with client.stream(method, url, json=self._on_wire(payload)) as response:
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > self.max_body_bytes:
                    raise _Retryable(
                        f"HTTP {response.status_code} with a body past max_body_bytes={self.max_body_bytes}"
                    )
            return response.status_code, bytes(body)

    def _on_wire(self, payload: dict[str, Any] | None) -> dict[str, Any] | None:
        if payload is None or self.send_token_id_fields:
            return payload
        return {k: v for k, v in payload.items() if k not in TOKEN_ID_FIELDS}

    def _refuses_token_id_fields(self, body: bytes, payload: dict[str, Any] | None) -> bool:
        """A 400 that names vLLM's token-id fields: the server is not vLLM; ask again without them."""
        sent = payload is not None and self.send_token_id_fields and TOKEN_ID_FIELDS.keys() <= payload.keys()
        return sent and b"return_token" in body
