"""An OpenAI-compatible chat-completions server for any local :class:`Policy`.

``ludus serve-model`` puts the tiny model or a transformers checkpoint behind the API that vLLM
and OpenAI speak, so :class:`ludus.policies.openai.OpenAIPolicy` and other tools can use it. The
wire layer is the one every Ludus OpenAI server shares (``openai_front.py``); here is its
backend for a local policy, :class:`PolicyBackend`. Concurrent requests are micro-batched: one
background task gathers what is pending and runs it through ``policy.generate`` in a single
worker thread, so the model is never used by two threads at once and each forward pass is as
wide as the traffic allows.

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
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import torch

try:
    from fastapi import FastAPI
    from pydantic import BaseModel, Field
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(f"the model server needs FastAPI and uvicorn: pip install 'ludus[serve]' ({exc})") from exc

from ludus.core.types import Message, ToolSpec
from ludus.policies.base import Completion, Policy, SamplingParams
from ludus.serve.openai_front import ChatCall, OpenAIError, TextCall, openai_app

# Once a request is pending, wait this long for others to share its batch.
BATCH_WINDOW_S = 0.002


@dataclass(frozen=True)
class Sampled:
    """What one request got from the model: its completions, the weight version that sampled
    them (the policy's ``version`` as the batch began) and how many prompts shared that
    ``generate`` call."""

    completions: list[Completion]
    weight_version: int
    batch: int


# ---- micro-batching ----------------------------------------------------------------------------
@dataclass
class _Pending:
    conversations: list[list[Message]]
    tools: list[list[ToolSpec]]
    sampling: SamplingParams
    seed: int | None
    done: asyncio.Future[Sampled]
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

    async def submit(
        self,
        conversations: list[list[Message]],
        tools: list[list[ToolSpec]],
        sampling: SamplingParams,
        seed: int | None,
        prompt_ids: list[list[int]] | None = None,
    ) -> Sampled:
        done = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(conversations, tools, sampling, seed, done, prompt_ids))
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
        prompts = None if head.prompt_ids is None else [ids for p in group for ids in p.prompt_ids or []]
        try:
            version, completions = await asyncio.get_running_loop().run_in_executor(
                self._worker, self._generate, conversations, head.sampling, generator, tools, prompts
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
            _settle(pending, Sampled(completions[start : start + pending.size], version, len(completions)))
            start += pending.size

    def _generate(
        self,
        conversations: list[list[Message]],
        sampling: SamplingParams,
        generator: torch.Generator | None,
        tools: list[list[ToolSpec]],
        prompts: list[list[int]] | None = None,
    ) -> tuple[int, list[Completion]]:
        version = self.policy.version  # read before sampling: never newer than the weights that sample
        if prompts is not None:
            completions = self.policy.generate_from_ids(prompts, sampling, generator=generator)  # type: ignore[attr-defined]
        else:
            completions = self.policy.generate(conversations, sampling, tools=tools, generator=generator)
        asked = len(prompts) if prompts is not None else len(conversations)
        if len(completions) != asked:
            raise RuntimeError(f"the policy returned {len(completions)} completions for {asked} prompts")
        return version, completions


def _settle(pending: _Pending, outcome: Sampled | BaseException) -> None:
    if pending.done.done():
        return
    if isinstance(outcome, BaseException):
        pending.done.set_exception(outcome)
    else:
        pending.done.set_result(outcome)


# ---- the backend -------------------------------------------------------------------------------
class PolicyBackend:
    """A local :class:`Policy` behind the OpenAI front (:func:`ludus.serve.openai_front.openai_app`):
    requests micro-batched, at most ``max_batch`` prompts per ``generate`` call. :meth:`sample`
    and :meth:`sample_text` also tell the weight version and the batch; :meth:`chat` and
    :meth:`complete` are what the front calls. Start its batcher with :meth:`running` (the app's
    lifespan)."""

    def __init__(self, policy: Policy, model_name: str, max_batch: int = 32):
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.policy, self.model_name, self.max_batch = policy, model_name, max_batch
        self._batcher: _Batcher | None = None
        decode = getattr(getattr(policy, "tokenizer", None), "decode", None)
        self._decode: Callable[[list[int]], str] | None = decode if callable(decode) else None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The batcher's task on the running event loop, for as long as the block lasts."""
        batcher = _Batcher(self.policy, self.max_batch)
        task = asyncio.create_task(batcher.run())
        self._batcher = batcher
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            batcher.close()
            self._batcher = None

    @property
    def batcher(self) -> _Batcher:
        if self._batcher is None:
            raise RuntimeError("the policy backend is not running: serve its app (or enter backend.running())")
        return self._batcher

    async def sample(self, call: ChatCall) -> Sampled:
        """``call.n`` completions of the call's conversation, with the version that sampled them."""
        if call.n > self.max_batch:
            raise OpenAIError(
                400, f"n={call.n} exceeds this server's max batch of {self.max_batch}", "invalid_value", "n"
            )
        try:
            return await self.batcher.submit(
                [list(call.messages) for _ in range(call.n)], [list(call.tools)] * call.n, call.sampling, call.seed
            )
        except ValueError as exc:
            raise OpenAIError(400, str(exc), "invalid_prompt", "messages") from None

    async def sample_text(self, call: TextCall) -> Sampled:
        """``/v1/completions``: each prompt ``call.n`` times; completions carry their raw text."""
        tokenizer = getattr(self.policy, "tokenizer", None)
        if not callable(getattr(self.policy, "generate_from_ids", None)) or tokenizer is None:
            raise OpenAIError(
                400,
                f"{self.model_name} answers chat completions only (/v1/chat/completions); completions of token ids "
                "need a transformers model (--model hf:PATH)",
                "unsupported_value",
                "prompt",
            )
        eos = set(getattr(self.policy, "eos_ids", ()))
        if call.stop_token_ids and not set(call.stop_token_ids) <= eos:
            raise OpenAIError(
                400,
                f"this server stops at the model's end-of-sequence tokens {sorted(eos)} only; "
                f"got stop_token_ids {call.stop_token_ids}",
                "unsupported_value",
                "stop_token_ids",
            )
        if isinstance(call.prompt, str):
            prompts = [tokenizer.encode(call.prompt, add_special_tokens=call.add_special_tokens)]
        else:
            prompts = call.prompt
        prompts = [ids for ids in prompts for _ in range(call.n)]
        try:
            sampled = await self.batcher.submit([], [], call.sampling, call.seed, prompt_ids=prompts)
        except ValueError as exc:
            raise OpenAIError(400, str(exc), "invalid_prompt", "prompt") from None
        texts = [tokenizer.decode(c.completion_ids, skip_special_tokens=True) for c in sampled.completions]
        completions = [replace(c, text=text, tool_calls=[]) for c, text in zip(sampled.completions, texts, strict=True)]
        return replace(sampled, completions=completions)

    async def chat(self, call: ChatCall) -> list[Completion]:
        return (await self.sample(call)).completions

    async def complete(self, call: TextCall) -> list[Completion]:
        return (await self.sample_text(call)).completions

    def token_text(self, token_id: int) -> str | None:
        """A token's text through the policy's tokenizer; None without one."""
        return None if self._decode is None else self._decode([token_id])

    def health(self) -> dict[str, Any]:
        return {"queued": self.batcher.queued if self._batcher is not None else 0}


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
    backend = PolicyBackend(policy, model_name, max_batch)
    app = openai_app(
        backend,
        allow_origins=allow_origins,
        allow_hosts=allow_hosts,
        lifespan=lambda app: backend.running(),
    )
    if weight_updates:
        _add_weight_endpoints(app, backend)
    return app


class _RpcRequest(BaseModel):
    method: str
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    timeout: float | None = None


class _VersionRequest(BaseModel):
    new_version: str


def _add_weight_endpoints(app: FastAPI, backend: PolicyBackend) -> None:
    """vLLM's development-mode weight endpoints, as far as a trainer needs them."""
    state = {"weight_version": "default"}

    @app.post("/collective_rpc")
    async def collective_rpc(body: _RpcRequest) -> dict[str, Any]:
        if body.method != "reload_weights":
            raise OpenAIError(
                400,
                f"method {body.method!r} is not known here; this server runs reload_weights only",
                "unsupported_value",
                "method",
            )
        path = body.kwargs.get("weights_path")
        load = getattr(backend.policy, "load_weights", None)
        if not isinstance(path, str) or load is None:
            raise OpenAIError(
                400,
                "reload_weights needs kwargs.weights_path (a folder of safetensors) and a transformers model",
                "invalid_value",
                "kwargs.weights_path",
            )
        try:
            await backend.batcher.between_batches(lambda: load(path))
        except (OSError, ValueError) as exc:
            raise OpenAIError(
                400, f"cannot load weights from {path}: {exc}", "invalid_value", "kwargs.weights_path"
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
