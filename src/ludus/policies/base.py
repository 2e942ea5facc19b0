"""What the rollout engine and the trainer need from a model, and nothing more.

The trainer talks to :class:`TrainablePolicy`, never to a concrete model, so the embedded tiny
model and a transformers model train through the same code.
"""

from __future__ import annotations

import asyncio
import functools
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from ludus.core.types import Message, ToolCall, ToolSpec

# One list of tools per conversation (episodes in a batch may come from different environments).
Tools = Sequence[Sequence[ToolSpec]] | None


class ContextFull(ValueError):
    """A conversation too long for the model's context, with the room its completion asks for.
    Not an infrastructure failure once the policy has spoken: its own replies (and what they made
    the environment say) grew the conversation, so the rollout engine ends that episode as
    ``truncated`` — a zero reward the policy learns from, never a masked one."""


class PolicyError(RuntimeError):
    """The backend could not produce a completion: a dead or failing model server, errors that
    persisted through the retries. An infrastructure failure — the rollout engine records and
    masks it — never a statement about the policy's answer."""


@dataclass(frozen=True)
class SamplingParams:
    """``temperature == 0`` means greedy decoding. ``top_p`` keeps the smallest set of tokens
    whose probability reaches it. ``max_tokens`` caps each completion."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 16

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")


@dataclass
class Completion:
    """One sampled reply with the exact tokens and their behaviour log-probs.

    ``text`` is the reply's content without its tool calls, which are in ``tool_calls``.
    Token ids and log-probs are empty where a backend cannot report them (an HTTP server
    that does not return them); such completions can be evaluated but not trained on.
    """

    text: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" (end-of-sequence token), "length" (hit max_tokens) or "tool_calls"
    tool_calls: list[ToolCall] = field(default_factory=list)

    def message(self) -> Message:
        """The assistant message this completion adds to its conversation."""
        return Message("assistant", self.text, tool_calls=list(self.tool_calls))


class Policy(ABC):
    """Anything that turns conversations into replies.

    ``version`` counts weight updates; each trajectory records the version that sampled it.
    """

    version: int = 0

    @abstractmethod
    def generate(
        self,
        conversations: list[list[Message]],
        sampling: SamplingParams,
        *,
        tools: Tools = None,
        generator: torch.Generator | None = None,
    ) -> list[Completion]:
        """One completion per conversation, sampled in one batch where the backend allows.
        ``tools``, if given, holds the tools offered to each conversation."""

    async def agenerate(
        self,
        conversations: list[list[Message]],
        sampling: SamplingParams,
        *,
        tools: Tools = None,
        generator: torch.Generator | None = None,
    ) -> list[Completion]:
        """``generate`` for event loops: in a worker thread unless a backend is natively async."""
        return await asyncio.to_thread(
            functools.partial(self.generate, conversations, sampling, tools=tools, generator=generator)
        )

    def close(self) -> None:
        """Release connections, processes or memory the backend holds."""


class TrainablePolicy(Policy):
    """A policy whose weights the trainer can update."""

    module: torch.nn.Module

    @abstractmethod
    def token_logprobs(
        self, prompt_ids: list[list[int]], completion_ids: list[list[int]], temperature: float = 1.0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs and entropies of each completion token under the current weights.

        Returns two ``[batch, max_completion_len]`` tensors (padding positions are arbitrary;
        the caller masks them). Gradients flow through both.
        """

    @abstractmethod
    def turn_ids(
        self, messages: list[Message], reply: Message, tools: Sequence[ToolSpec] = ()
    ) -> tuple[list[int], list[int]]:
        """The prompt ids this policy renders for ``messages`` and the completion ids of ``reply``
        written by it, ending with its end-of-turn token: the tokens of a turn someone else sampled
        (a logged conversation), as if this policy had sampled it. Raises ``ValueError`` if the
        turn does not fit the model's context."""

    @abstractmethod
    def save(self, path: str | Path) -> None:
        """Write weights and config to a folder that :meth:`load` reads back."""

    @classmethod
    @abstractmethod
    def load(cls, path: str | Path) -> TrainablePolicy:
        """Read a policy saved by :meth:`save`."""


# ---- shared by the local backends (tiny, transformers) ----


def sample_tokens(
    logits: torch.Tensor, sampling: SamplingParams, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next token per row and its log-prob under the temperature-scaled distribution (before
    top-p): the behaviour log-prob that ``token_logprobs`` recomputes. Greedy decoding reports
    the log-prob at temperature 1."""
    logits = logits.float()
    if sampling.temperature == 0:
        token = logits.argmax(-1)
        return token, F.log_softmax(logits, dim=-1).gather(-1, token[:, None])[:, 0]
    logp = F.log_softmax(logits / sampling.temperature, dim=-1)
    probs = logp.exp()
    if sampling.top_p < 1.0:
        sorted_p, order = probs.sort(-1, descending=True)
        outside = sorted_p.cumsum(-1) - sorted_p >= sampling.top_p  # mass before this token already suffices
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p.masked_fill(outside, 0.0))
    if generator is not None and generator.device != probs.device:  # a CPU generator drives a GPU model
        token = torch.multinomial(probs.cpu(), 1, generator=generator)[:, 0].to(probs.device)
    else:
        token = torch.multinomial(probs, 1, generator=generator)[:, 0]
    return token, logp.gather(-1, token[:, None])[:, 0]


@contextmanager
def eval_mode(module: torch.nn.Module) -> Iterator[None]:
    """Sample with dropout off, then give the module back in the mode it was in (training)."""
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)
