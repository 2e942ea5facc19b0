"""Learning from logged, rewarded episodes: ``ludus train --offline LOGS``, and logged groups replayed
beside fresh ones in online RL (``replay``).

The logs are read by ``logs.py`` (Ludus trajectories, OpenAI-format conversations) and grouped by
task (``logs.grouped``): attempts at one task are compared with each other, as GRPO compares a
group's samples.

**Offline** (``offline: [LOGS]``). Each step takes ``prompts_per_step`` logged groups
(:class:`LoggedBatches`: a seeded shuffle of the log, epoch after epoch, so a resumed run takes the
same groups) and fine-tunes on their episodes, each weighted (:func:`episode_weights`):

* ``filtered_bc`` — behaviour cloning of the episodes whose reward is at least
  ``offline_min_reward``, all others left out: supervised fine-tuning on the logger's successes
  (rejection-sampling fine-tuning). The baseline: it ignores how good each success was relative to
  the other attempts and learns nothing from failures.
* ``reward_weighted`` (the default) — every episode, weighted by ``exp(A / β)`` (``β = offline_beta``), ``A``
  its reward minus its group's mean reward (the whole log's mean for a task tried once):
  reward-weighted regression (Peters & Schaal, 2007; AWR, Peng et al., 2019). The weights are
  normalised to mean 1 over the log, then truncated at ``offline_weight_cap``, so that a few
  lucky episodes cannot dominate a step.
* ``importance_weighted`` — the same weights, and each token's log-likelihood
  also weighted by its truncated importance ratio ``min(π_θ / π_β, C)`` (``C = importance_cap``,
  ``π_β`` the logging policy's log-prob: recorded in the log, or the start weights' where it was
  recomputed). As the learner moves away from the logger, what the logger did that the learner
  would no longer do counts less: an off-policy policy gradient of the reward-weighted objective
  rather than imitation of the logger (DRIFT-style importance-weighted fine-tuning).

The loss, over a minibatch's trained tokens (``ρ_t`` detached; 1 but for ``importance_weighted``)::

    loss = -Σ_samples Σ_t  w_episode · ρ_t · log π_θ(y_t | context)  /  Σ tokens

**Replay** (``replay: [LOGS]``, ``replay_ratio``). Online RL as usual, and each step also learns
from logged groups whose rewards differ: ``replay_ratio`` of the step's groups are logged, the rest
sampled now. Logged groups get GRPO advantages within their group like fresh ones, and the loss
treats them as stale samples (train/grpo.py's decoupled objective): the ratio against the learner's
weights at the step's start, each token weighted by ``min(π_prox / π_β, importance_cap)``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ludus.core.types import Trajectory
from ludus.train import grpo
from ludus.train.config import TrainConfig

# ---- which groups a step gets ----------------------------------------------------------------


@dataclass
class LoggedBatches:
    """Logged groups handed out ``size`` per step: epoch after epoch, each epoch a shuffle seeded by
    the run's seed and the epoch's number, so that step ``s`` gets the same groups in a resumed run."""

    groups: list[list[Trajectory]]
    seed: int
    _epoch: int = field(default=-1, init=False)
    _order_of_epoch: list[int] = field(default_factory=list, init=False)

    def take(self, step: int, size: int) -> list[list[Trajectory]]:
        n = len(self.groups)
        picked = []
        for position in range(step * size, (step + 1) * size):
            epoch, k = divmod(position, n)
            picked.append(self.groups[self._order(epoch)[k]])
        return picked

    def _order(self, epoch: int) -> list[int]:
        if self._epoch != epoch:
            self._order_of_epoch = list(range(len(self.groups)))
            random.Random(self.seed * 1_000_003 + epoch).shuffle(self._order_of_epoch)
            self._epoch = epoch
        return self._order_of_epoch


def replay_groups(groups: Sequence[list[Trajectory]], config: TrainConfig) -> list[list[Trajectory]]:
    """The logged groups replay can learn from: those whose (shaped) rewards differ."""
    loss = config.loss()
    return [g for g in groups if len(g) > 1 and grpo.has_signal(g, loss)]


def replay_size(config: TrainConfig) -> int:
    """Logged groups per step, so that they are ``replay_ratio`` of the step's groups."""
    if not config.replay_ratio:
        return 0
    return max(1, round(config.prompts_per_step * config.replay_ratio / (1 - config.replay_ratio)))


# ---- the weights ---------------------------------------------------------------------------


def episode_weights(groups: Sequence[Sequence[Trajectory]], config: TrainConfig) -> dict[int, float]:
    """Each logged episode's weight (by ``id``), over the whole log (see the module docstring)."""
    episodes = [t for g in groups for t in g]
    if config.offline_objective == "filtered_bc":
        return {id(t): float(t.reward >= config.offline_min_reward) for t in episodes}
    overall = sum(t.reward for t in episodes) / max(1, len(episodes))
    raw: dict[int, float] = {}
    for group in groups:
        baseline = sum(t.reward for t in group) / len(group) if len(group) > 1 else overall
        for t in group:
            raw[id(t)] = math.exp(min(50.0, (t.reward - baseline) / config.offline_beta))
    mean = sum(raw.values()) / max(1, len(raw))
    return {k: min(v / mean, config.offline_weight_cap) for k, v in raw.items()}


def build_samples(
    groups: Sequence[Sequence[Trajectory]], weights: dict[int, float], config: TrainConfig
) -> list[grpo.Sample]:
    """The step's samples, each carrying its episode's weight (in ``Sample.advantage``); episodes
    of weight 0 (filtered out) left out."""
    loss = config.loss()
    samples = []
    for t in (t for g in groups for t in g):
        w = weights[id(t)]
        if w > 0:
            samples += grpo.episode_samples(t, [w] * len(t.turns), loss)
    return samples


# ---- the update ----------------------------------------------------------------------------


def weighted_nll(
    logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    weights: torch.Tensor,
    mask: torch.Tensor,
    *,
    importance: bool,
    cap: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The offline loss over ``[B, T]`` token tensors (``weights``: ``[B]``, the episodes')."""
    mask = mask.to(logp.dtype)
    logp = logp.masked_fill(mask == 0, 0.0)
    ratio = torch.ones_like(logp)
    if importance:
        ratio = torch.exp(logp.detach() - behaviour_logp.masked_fill(mask == 0, 0.0)).clamp(max=cap)
    per_token = -(weights[:, None] * ratio * logp)
    loss = (per_token * mask).sum() / mask.sum().clamp(min=1)
    n = mask.sum().clamp(min=1)
    return loss, {
        "nll": float(-(logp.detach() * mask).sum() / n),
        "importance/mean": float((ratio * mask).sum() / n),
        "importance/capped": float(((ratio >= cap) * mask).sum() / n) if importance else 0.0,
    }


def update(learner: grpo.Learner, samples: list[grpo.Sample], config: TrainConfig) -> dict[str, float]:
    """One pass of ``minibatches`` gradient steps over the step's samples."""
    if not samples:
        return {"loss": 0.0, "nll": 0.0, "grad_norm": 0.0, "trained_samples": 0}
    policy = learner.policy
    policy.module.train()
    size = math.ceil(len(samples) / config.minibatches)
    order = torch.randperm(len(samples), generator=learner.generator).tolist()
    totals: dict[str, float] = {}
    updates = 0
    for lo in range(0, len(samples), size):
        batch = [samples[i] for i in order[lo : lo + size]]
        logp, _ = policy.token_logprobs(
            [s.prompt_ids for s in batch], [s.completion_ids for s in batch], config.temperature
        )
        mask, behaviour = grpo.padded(batch, logp)
        loss, stats = weighted_nll(
            logp,
            behaviour,
            torch.tensor([s.advantage for s in batch]),
            mask,
            importance=config.offline_objective == "importance_weighted",
            cap=config.importance_cap,
        )
        grad_norm = grpo.optimizer_step(learner, loss, config.max_grad_norm)
        updates += 1
        for name, value in {"loss": float(loss.detach()), "grad_norm": grad_norm, **stats}.items():
            totals[name] = totals.get(name, 0.0) + value
    return {k: round(v / updates, 5) for k, v in totals.items()} | {"trained_samples": len(samples)}


def step_metrics(groups: Sequence[Sequence[Trajectory]], weights: dict[int, float]) -> dict[str, float]:
    """What a step's logged groups held: their mean reward and the share of episodes trained on."""
    episodes = [t for g in groups for t in g]
    return {
        "logged/reward": round(sum(t.reward for t in episodes) / len(episodes), 4),
        "logged/episodes": len(episodes),
        "logged/weighted_frac": round(sum(weights[id(t)] > 0 for t in episodes) / len(episodes), 4),
    }


def replay_metrics(groups: Sequence[Sequence[Trajectory]]) -> dict[str, float]:
    """What a step's replayed groups held (``replay/…``; the step's other numbers are the fresh groups')."""
    episodes = [t for g in groups for t in g]
    return {
        "replay/groups": len(groups),
        "replay/reward": round(sum(t.reward for t in episodes) / len(episodes), 4),
    }
