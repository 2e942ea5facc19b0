"""What the rollout engine and the trainer need from a model, and nothing more.

The trainer talks to :class:`TrainablePolicy`, never to a concrete model, so the embedded tiny
model and a transformers model train through the same code.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

import torch

from ludus.core.types import Message


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
    """One sampled reply with the exact tokens and their behaviour log-probs."""

    text: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" (end-of-sequence token) or "length" (hit max_tokens)


class Policy(ABC):
    """Anything that turns conversations into replies."""

    version: int = 0

    @abstractmethod
    def generate(
        self, conversations: list[list[Message]], sampling: SamplingParams, generator: torch.Generator | None = None
    ) -> list[Completion]:
        """One completion per conversation, sampled in one batch where the backend allows."""


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
    def save(self, path: str | Path) -> None:
        """Write weights and config to a folder that :meth:`load` reads back."""

    @classmethod
    @abstractmethod
    def load(cls, path: str | Path) -> TrainablePolicy:
        """Read a policy saved by :meth:`save`."""
