"""Generation on an inference server for a model that learns in this process: token ids in,
token ids and log-probs out, and the learner's weights pushed to the server after every update.

    learner (HFPolicy, here)                         server (vLLM, ludus serve-model)
      renders the prompt, tokenises it ──token ids──▶ POST /v1/completions {"prompt": [ids]}
      reads the reply from the ids    ◀─token ids, log-probs── samples with its copy of the weights
      sync(): save_weights(folder) ───▶ POST /collective_rpc reload_weights(weights_path=folder)
                                        POST /reset_prefix_cache, POST /update_weight_version

**Token in, token out.** The server never sees text: the prompt is the learner's own token ids
and the reply comes back as the sampled token ids with their log-probs, which become the
behaviour log-probs the loss uses — exactly the tokens that were sampled, never a re-tokenised
version of their text. A later turn of the same episode is the earlier turn's prompt and reply
ids followed by the tokens of what came after (the environment's answer, the next generation
prompt): the reply is not re-tokenised between turns. Where the learner's rendering of the
conversation does not continue the earlier turn's text (a chat template that rewrites past
replies), the prompt is rendered afresh and counted (``prefix_divergent``). Every reply is also
checked for what a text-based pipeline would get wrong: whether the learner, tokenising the
reply's text, would get other ids than those sampled (``retokenize_divergent``).

**Weight versions.** ``version`` is the version of the weights the server holds. A push
(:meth:`RolloutServerPolicy.sync`) waits for the requests in flight to end and holds new ones
back until the new weights are loaded, so every reply is sampled by one version of the weights,
never a mixture; an episode is tagged with the version at its start, which is never newer than
the weights that sampled any of its turns. After each push the server is told a version tag
(vLLM's ``/update_weight_version``), and after each batch it is asked for it back
(``/weight_info``): a server that restarted (and so lost the pushed weights) or that another
client changed answers another tag, that batch fails as an infrastructure error (masked from
training, retried by the rollout engine), and the last pushed weights are loaded again before
anything else is sampled. A failed push leaves the server's weights unknown: nothing is sampled
until a push succeeds.

vLLM needs ``VLLM_SERVER_DEV_MODE=1`` (the weight endpoints) and ``--logprobs-mode
processed_logprobs`` (log-probs of the temperature-scaled distribution, which the learner
scores): docs/integrations.md has the command. :meth:`RolloutServerPolicy.logprob_gap` is the
start-up probe that checks the server's log-probs are the learner's.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import shutil
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ludus.core.types import Message, ToolSpec
from ludus.policies.base import Completion, PolicyError, SamplingParams, Tools, TrainablePolicy
from ludus.policies.openai import (
    OpenAIPolicy,
    _all_or_first_error,
    _Connection,
    _head,
    _ids,
    _logprob,
    _Malformed,
    _per_conversation,
    _run_blocking,
)

if TYPE_CHECKING:
    from ludus.policies.hf import HFPolicy

# earlier turns remembered so that a later turn continues their token ids (per policy, least recently used out)
PREFIX_CACHE_SIZE = 8192
STAT_KEYS = ("replies", "continued_turns", "prefix_divergent", "retokenize_divergent", "prompt_mismatch")


_COUNTED = contextvars.ContextVar("ludus_rollout_counted", default=True)  # see RolloutServerPolicy.uncounted


def _key(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> str:
    return json.dumps([[m.to_dict() for m in messages], [t.name for t in tools]], sort_keys=True, ensure_ascii=False)


class RolloutServerPolicy(OpenAIPolicy):
    """Samples for ``learner`` on the OpenAI-compatible server at ``base_url`` (ending in ``/v1``).

    ``weights_dir`` is where :meth:`sync` writes the weights for the server to read: a folder
    both this process and the server can reach (the same machine, or a shared file system).
    Conversations go ``prompts_per_request`` to a request; the other options are
    :class:`~ludus.policies.openai.OpenAIPolicy`'s (``concurrency`` bounds requests). Nothing is sampled
    before the first :meth:`sync`, which makes the server's weights the learner's.
    """

    def __init__(
        self,
        base_url: str,
        learner: HFPolicy,
        *,
        weights_dir: str | Path,
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        concurrency: int = 16,
        prompts_per_request: int = 64,
    ):
        if prompts_per_request < 1:
            raise ValueError(f"prompts_per_request must be >= 1, got {prompts_per_request}")
        if not base_url.rstrip("/").endswith("/v1"):
            raise ValueError(
                f"the rollout server's URL must end in /v1 (its OpenAI-compatible API), e.g. "
                f"http://127.0.0.1:8000/v1; got {base_url!r}"
            )
        super().__init__(
            base_url,
            model,
            api_key=api_key,
            timeout_s=timeout_s,
            max_retries=max_retries,
            backoff_s=backoff_s,
            concurrency=concurrency,
        )
        self.root = self.base_url.removesuffix("/v1")
        self.learner = learner
        self.weights_dir = Path(weights_dir)
        self.version = -1  # no weights pushed yet
        self._session = uuid.uuid4().hex[:12]  # tells this client's pushes from anyone else's
        self._pushed: Path | None = None  # the folder of the weights the server should hold
        self._stale: str | None = None  # why the server's weights are not known to be ``version``
        self._gate = threading.Condition()
        self._in_flight = 0
        self._pushing = False
        self._turns: OrderedDict[str, tuple[str, list[int]]] = OrderedDict()
        self._stats = dict.fromkeys(STAT_KEYS, 0)
        self._stats_lock = threading.Lock()
        self.last_push_s = 0.0
        self.prompts_per_request = prompts_per_request

    # ---- weights --------------------------------------------------------------------------
    def sync(self, policy: TrainablePolicy) -> float:
        """Make the server's weights ``policy``'s (version ``policy.version``); the seconds it took.

        Waits for the requests in flight, holds new ones back until the server has loaded the
        weights, then lets them through. Raises :class:`PolicyError` if the server cannot load
        them; until a later push succeeds, nothing is sampled. A push that fails leaves no weights
        behind (a whole model, for a real one)."""
        save = getattr(policy, "save_weights", None)
        if save is None:
            raise TypeError(f"a rollout server loads transformers weights; {type(policy).__name__} has no save_weights")
        start = time.perf_counter()
        folder = self.weights_dir / f"v{policy.version:06d}-{self._session}"
        with self._exclusive():
            loaded = False
            try:
                save(folder)
                _run_blocking(self._load(folder, policy.version))
                loaded = True
            except PolicyError as exc:
                self._stale = f"the push of the weights of version {policy.version} failed: {exc}"
                raise
            finally:
                if not loaded and folder != self._pushed:  # the last pushed weights stay: a reload needs them
                    shutil.rmtree(folder, ignore_errors=True)
            previous, self._pushed = self._pushed, folder
            self.version, self._stale = policy.version, None
        if previous is not None and previous != folder:
            shutil.rmtree(previous, ignore_errors=True)
        self.last_push_s = time.perf_counter() - start
        return self.last_push_s

    async def _load(self, folder: Path, version: int) -> None:
        """The server loads the weights in ``folder``, forgets cached prefixes and takes the version
        tag. Until the last call succeeds its tag is one no version has, so a push that fails
        half-way is never taken for the weights of one version or the other."""
        async with self._client() as client:
            loading = {"new_version": f"ludus-{self._session}-loading"}
            await self._call(client, "POST", f"{self.root}/update_weight_version", loading, _ok)
            await self._call(
                client,
                "POST",
                f"{self.root}/collective_rpc",
                {"method": "reload_weights", "kwargs": {"weights_path": str(folder.resolve())}},
                _ok,
            )
            await self._call(client, "POST", f"{self.root}/reset_prefix_cache", None, _reset_done)
            await self._call(
                client, "POST", f"{self.root}/update_weight_version", {"new_version": self._tag(version)}, _ok
            )

    def _tag(self, version: int) -> str:
        return f"ludus-{self._session}-{version}"

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        """No request in flight while inside: waits for those running, holds new ones back."""
        with self._gate:
            self._gate.wait_for(lambda: not self._pushing)
            self._pushing = True
            self._gate.wait_for(lambda: self._in_flight == 0)
        try:
            yield
        finally:
            with self._gate:
                self._pushing = False
                self._gate.notify_all()

    async def _enter(self) -> None:
        """A batch of requests may start: no push is under way (and, if the server lost the
        pushed weights, they have been loaded again)."""
        while True:
            with self._gate:
                if not self._pushing:
                    if self._stale is None or self._pushed is None:
                        self._in_flight += 1
                        return
            if self._stale is not None and self._pushed is not None:
                await self._reload()
            else:
                await asyncio.to_thread(self._wait_for_push)

    def _wait_for_push(self) -> None:
        with self._gate:
            self._gate.wait_for(lambda: not self._pushing)

    def _leave(self) -> None:
        with self._gate:
            self._in_flight -= 1
            self._gate.notify_all()

    async def _reload(self) -> None:
        """Load the last pushed weights again (the server restarted); PolicyError if it cannot."""
        exclusive = self._exclusive()
        await asyncio.to_thread(exclusive.__enter__)
        try:
            if self._stale is None or self._pushed is None:
                return  # another batch reloaded them meanwhile
            try:
                await self._load(self._pushed, self.version)
            except PolicyError as exc:
                raise PolicyError(
                    f"{self._stale}; loading the weights of version {self.version} again failed: {exc}"
                ) from None
            self._stale = None
        finally:
            await asyncio.to_thread(exclusive.__exit__, None, None, None)

    async def _check_version(self, connection: _Connection) -> None:
        """The server still holds the pushed weights (asked after a batch was sampled)."""
        tag = await self._call(connection.client, "GET", f"{self.root}/weight_info", None, _weight_version)
        if tag != self._tag(self.version):
            self._stale = (
                f"the rollout server at {self.root} holds weights tagged {tag!r}, not version {self.version} "
                "pushed by this run: it restarted or another client changed them"
            )
            raise PolicyError(f"{self._stale}; this batch is discarded and the weights are loaded again")

    # ---- sampling -------------------------------------------------------------------------
    async def _agenerate(
        self,
        conversations: list[list[Message]],
        sampling: SamplingParams,
        tools: Tools,
        seeds: list[int] | None,
    ) -> list[Completion]:
        if self._pushed is None:
            raise PolicyError(
                "nothing is sampled before the first sync(learner): until then the rollout server's weights are unknown"
            )
        offered = _per_conversation(tools, len(conversations))
        await self._enter()
        try:
            if self._stale is not None:
                raise PolicyError(self._stale)
            prompts = [self._prompt(c, t) for c, t in zip(conversations, offered, strict=True)]
            connection = self._connection()
            size = self.prompts_per_request
            batches = await _all_or_first_error(
                self._sample(connection, [ids for ids, _ in prompts[lo : lo + size]], sampling)
                for lo in range(0, len(prompts), size)
            )
            replies = [reply for batch in batches for reply in batch]
            await self._check_version(connection)
        finally:
            self._leave()
        completions = []
        for conversation, tool_list, (prompt_ids, text), (ids, logprobs, served) in zip(
            conversations, offered, prompts, replies, strict=True
        ):
            if served and served != prompt_ids:  # the server conditioned on other tokens: keep its
                self._count("prompt_mismatch")
                prompt_ids = served
            completion = self.learner.completion(prompt_ids, ids, logprobs)
            self._remember(conversation, tool_list, completion, text)
            completions.append(completion)
        return completions

    async def _sample(
        self, connection: _Connection, prompts: list[list[int]], sampling: SamplingParams
    ) -> list[tuple[list[int], list[float], list[int]]]:
        """One ``/v1/completions`` request for several prompts of token ids (one HTTP request,
        not one per prompt: a third of the time here): each one's sampled ids, their log-probs
        and the prompt ids the server used.

        No per-request seed, whatever ``generator`` says: vLLM's CPU build kills its engine when a
        seeded request's prompt is split by chunked prefill ("CPU Generator does not use offset"),
        and a server's batching makes its samples unreproducible anyway."""
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompts,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "logprobs": 0,  # the sampled token's own log-prob
            "return_token_ids": True,
            "stop_token_ids": list(self.learner.eos_ids),
            "add_special_tokens": False,
        }
        async with connection.limit:
            return await self._call(
                connection.client, "POST", "/completions", body, lambda b: _token_completions(b, len(prompts))
            )

    def _prompt(self, conversation: list[Message], tools: Sequence[ToolSpec]) -> tuple[list[int], str]:
        """The prompt's token ids, continuing the ids of the latest earlier turn of this
        conversation where its text continues; and the prompt's text."""
        encode = self.learner.tokenizer.encode
        text = self.learner.render(conversation, tools)
        for k in range(len(conversation) - 1, 0, -1):
            if conversation[k - 1].role != "assistant":
                continue
            with self._stats_lock:
                earlier = self._turns.get(_key(conversation[:k], tools))
            if earlier is None:
                continue
            earlier_text, earlier_ids = earlier
            if text.startswith(earlier_text):
                self._count("continued_turns")
                return earlier_ids + encode(text[len(earlier_text) :], add_special_tokens=False), text
            self._count("prefix_divergent")
            break
        return encode(text, add_special_tokens=False), text

    def _remember(
        self, conversation: list[Message], tools: Sequence[ToolSpec], completion: Completion, text: str
    ) -> None:
        tokenizer = self.learner.tokenizer
        ids = completion.completion_ids
        body = ids[:-1] if ids and ids[-1] in self.learner.eos_ids else ids
        sampled_text = tokenizer.decode(ids, skip_special_tokens=False)
        self._count("replies")
        if tokenizer.encode(tokenizer.decode(body, skip_special_tokens=False), add_special_tokens=False) != body:
            self._count("retokenize_divergent")
        key = _key([*conversation, completion.message()], tools)
        with self._stats_lock:
            self._turns[key] = (text + sampled_text, completion.prompt_ids + ids)
            self._turns.move_to_end(key)
            while len(self._turns) > PREFIX_CACHE_SIZE:
                self._turns.popitem(last=False)

    def _count(self, name: str) -> None:
        if not _COUNTED.get():
            return
        with self._stats_lock:
            self._stats[name] += 1

    @contextmanager
    def uncounted(self) -> Iterator[None]:
        """Replies sampled inside this block (by this thread, the asyncio tasks it starts and
        the threads those hand work to) leave the counters alone: an evaluation, or a probe,
        while a sampler in another thread samples the training replies :meth:`take_stats` reports."""
        token = _COUNTED.set(False)
        try:
            yield
        finally:
            _COUNTED.reset(token)

    def close(self) -> None:
        """Close the connections and delete the weights written for the server (it has them loaded)."""
        super().close()
        if self._pushed is not None:
            shutil.rmtree(self._pushed, ignore_errors=True)

    def take_stats(self) -> dict[str, int]:
        """The token counters since the last call (see the module docstring), reset to zero."""
        with self._stats_lock:
            stats, self._stats = self._stats, dict.fromkeys(STAT_KEYS, 0)
        return stats

    # ---- the start of a run ---------------------------------------------------------------
    def logprob_gap(self, temperature: float) -> ProbeGap:
        """How far the server's log-probs of its own replies to :data:`PROBE_CONVERSATIONS` are
        from the learner's for the same tokens: greedy replies, and :data:`PROBE_SAMPLES` sampled
        at ``temperature`` per prompt, of up to :data:`PROBE_TOKENS` tokens each. About 1e-6 per
        token when the server holds the learner's weights in float32 and reports log-probs of the
        temperature-scaled distribution, as the learner scores them."""
        conversations = [list(c) for c in PROBE_CONVERSATIONS]
        with self.uncounted():  # the probe is no training reply
            greedy = self.generate(conversations, SamplingParams(temperature=0.0, max_tokens=PROBE_TOKENS))
            sampled = self.generate(
                [c for c in conversations for _ in range(PROBE_SAMPLES)],
                SamplingParams(temperature=temperature, max_tokens=PROBE_TOKENS),
            )
        greedy_gap = self._gaps(greedy, 0.0)
        sampled_gap = self._gaps(sampled, temperature)
        every = torch.cat([greedy_gap, sampled_gap])
        return ProbeGap(
            mean=float(every.mean()),
            max=float(every.max()),
            tokens=every.numel(),
            sampled=float(sampled_gap.mean()),
            untempered=float(self._gaps(sampled, 1.0).mean()) if temperature not in (0.0, 1.0) else None,
        )

    def _gaps(self, replies: list[Completion], temperature: float) -> torch.Tensor:
        """|Δ log p| of every token of ``replies`` between the server and the learner scoring at ``temperature``."""
        with torch.no_grad():
            logp, _ = self.learner.token_logprobs(
                [r.prompt_ids for r in replies], [r.completion_ids for r in replies], temperature
            )
        logp = logp.float().cpu()
        return torch.cat(
            [(logp[i, : len(r.completion_ids)] - torch.tensor(r.logprobs)).abs() for i, r in enumerate(replies)]
        )


# what the start-up probe asks: a few kinds of prompt, so that one reply's luck decides nothing
PROBE_CONVERSATIONS: tuple[tuple[Message, ...], ...] = (
    (Message("user", "Say something."),),
    (Message("system", "Be brief."), Message("user", "What is 12 + 30? Answer with the number only.")),
    (Message("user", "Write two sentences about the sea."),),
    (Message("user", "List five colours, separated by commas."),),
)
PROBE_SAMPLES = 4  # sampled replies per probe prompt, besides the greedy one
PROBE_TOKENS = 32  # tokens per probe reply at most
UNTEMPERED_MARGIN = 4  # how many times nearer the untempered log-probs must be to call a server's log-probs those


@dataclass(frozen=True)
class ProbeGap:
    """:meth:`RolloutServerPolicy.logprob_gap`: mean |Δ log p| per token between the server and
    the learner, over every probe token (``mean``, ``max``, ``tokens``) and the sampled ones
    (``sampled``); ``untempered`` is the sampled tokens' gap to the learner's log-probs at
    temperature 1 (``None`` when the run samples at 1)."""

    mean: float
    max: float
    tokens: int
    sampled: float
    untempered: float | None

    @property
    def before_temperature(self) -> bool:
        """The server's log-probs of sampled tokens are far nearer the untempered distribution's than
        those of the distribution it sampled from: vLLM started without ``--logprobs-mode
        processed_logprobs``. (A server with other weights is about as far from both.)"""
        return self.untempered is not None and self.untempered * UNTEMPERED_MARGIN < self.sampled


# ---- parsing the server's answers ----------------------------------------------------------
def _ok(body: Any) -> Any:
    return body


def _reset_done(body: Any) -> bool:
    if isinstance(body, dict) and body.get("success") is False:
        raise _Malformed("the server could not reset its prefix cache (requests still hold blocks)")
    return True


def _weight_version(body: Any) -> str:
    try:
        return str(body["weight_version"])
    except (KeyError, TypeError) as exc:
        raise _Malformed(f"not a weight_info answer: {_head(body)}") from exc


def _token_completions(body: Any, count: int) -> list[tuple[list[int], list[float], list[int]]]:
    """For each of ``count`` prompts, in order: the sampled token ids, their log-probs and the
    prompt ids the server used, from a ``/v1/completions`` answer with ``return_token_ids`` and
    ``logprobs``."""
    try:
        choices = sorted(body["choices"], key=lambda c: int(c["index"]))
        if [int(c["index"]) for c in choices] != list(range(count)):
            raise ValueError(f"{len(choices)} choices for {count} prompts")
        out = []
        for choice in choices:
            ids = choice.get("token_ids")
            if ids is None:
                raise PolicyError(
                    "the rollout server returned no token ids (return_token_ids): it must be vLLM or "
                    "`ludus serve-model`, which sample token in, token out"
                )
            logprobs = [_logprob(x) for x in (choice.get("logprobs") or {}).get("token_logprobs") or []]
            if len(logprobs) != len(ids):
                raise ValueError(f"{len(ids)} token ids but {len(logprobs)} log-probs")
            prompt_ids = _ids(choice.get("prompt_token_ids") or [], "prompt_token_ids")
            out.append((_ids(ids, "the choice's token_ids"), logprobs, prompt_ids))
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise _Malformed(f"not a completion ({type(exc).__name__}: {exc}): {_head(body)}") from exc
    return out
