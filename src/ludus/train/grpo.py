"""GRPO-family advantages and loss, readable top to bottom.

Advantages (one reward per sample, ``G`` samples per prompt):

* ``scale="group"`` — GRPO (Shao et al., 2024, DeepSeekMath): ``(r - mean_group) / (std_group + eps)``.
* ``scale="batch"`` — centre per group, divide by the std of the whole batch (more robust
  when a group's std is tiny; the TRL ``scale_rewards="batch"`` option).
* ``scale="none"`` — Dr. GRPO (Liu et al., 2025, "Understanding R1-Zero-like training"):
  mean-centred only, which removes the bias towards easy/hard prompts that std scaling adds.

Multi-turn episodes (``turn_credit``): by default every turn of a sample is trained with the
advantage of its episode return. With ``"reward_to_go"`` turn ``k`` gets the return from turn
``k`` on instead, centred and scaled by the same group baseline and scale (:func:`turn_advantages`).

Per-token loss, with ratio ``ρ = exp(logp - logp_old)``::

    pg   = -min(ρ·A, clip(ρ, 1 - ε_low, 1 + ε_high)·A)      # PPO clip; ε_high > ε_low is DAPO's clip-higher
    kl   = exp(ref - logp) - (ref - logp) - 1               # k3 estimator (Schulman, 2020), ≥ 0, unbiased
    loss = pg + β·kl - c·H                                  # H: entropy of the token distribution
                                                            # (an exploration bonus, as in PPO; c = entropy_coef)

Stale samples (asynchronous training: sampled by weights some updates old) use the decoupled
objective (Hilton et al., 2021, "Batch size-invariance for policy optimization"; AReaL, Fu et al.,
2025): the ratio is taken against the *proximal* policy — the weights at the start of this update —
so the clip bounds the step from where the learner is, and each token is reweighted by the
truncated importance weight ``w = min(π_prox / π_behaviour, C)`` (``C = importance_cap``), which
corrects for the behaviour policy having sampled it::

    pg   = -w · min(ρ·A, clip(ρ, 1 - ε_low, 1 + ε_high)·A),   ρ = exp(logp - logp_prox)

Aggregation over tokens (``loss_agg``):

* ``"token-mean"`` — mean over every token of the batch (DAPO): long answers weigh more.
* ``"seq-mean-token-mean"`` — mean within each sequence, then over sequences (original GRPO).
* ``"seq-mean-token-sum-norm"`` — sum within each sequence divided by a constant (the batch's
  maximum length), then mean over sequences (Dr. GRPO): no length normalisation bias.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

Scale = Literal["group", "batch", "none"]
LossAgg = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
SCALES: tuple[str, ...] = ("group", "batch", "none")
LOSS_AGGS: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
TURN_CREDITS: tuple[str, ...] = ("episode", "reward_to_go")


def _baseline_and_scale(
    rewards: torch.Tensor, valid: torch.Tensor, scale: Scale, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each group's baseline (mean valid reward) and the divisor of its advantages, both
    ``[groups, 1]``, and which samples carry signal (``[groups, G]``, as the rewards' dtype):
    valid ones in groups whose valid rewards are not all equal. Equality is tested exactly,
    because a mean that float rounding moves off equal rewards (three 0.9s) is not a signal."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    v = valid.to(rewards.dtype)
    count = v.sum(1, keepdim=True).clamp(min=1)
    mean = (rewards * v).sum(1, keepdim=True) / count
    lowest = rewards.masked_fill(~valid, math.inf).amin(1, keepdim=True)
    highest = rewards.masked_fill(~valid, -math.inf).amax(1, keepdim=True)
    keep = (valid & (highest > lowest)).to(rewards.dtype)
    if scale == "none":
        return mean, torch.ones_like(mean), keep
    if scale == "group":
        # Unbiased std like torch.std (what GRPO implementations use); a group of one has std 0.
        centred = (rewards - mean) * v
        std = ((centred**2).sum(1, keepdim=True) / (count - 1).clamp(min=1)).sqrt()
        return mean, std + eps, keep
    flat = rewards[valid]
    std = flat.std() if flat.numel() > 1 else torch.zeros(())
    return mean, (std + eps).expand_as(mean), keep


def group_advantages(
    rewards: torch.Tensor, valid: torch.Tensor, scale: Scale = "group", eps: float = 1e-4
) -> torch.Tensor:
    """Advantages for ``rewards`` of shape ``[groups, G]``.

    ``valid`` (same shape, bool) excludes samples whose reward is not a measurement of the
    policy (infrastructure errors): they get advantage 0 and do not move their group's mean.
    A group whose valid rewards are all equal gets 0 everywhere: it carries no signal.
    """
    baseline, divisor, keep = _baseline_and_scale(rewards, valid, scale, eps)
    return (rewards - baseline) * keep / divisor


def turn_advantages(
    returns_to_go: torch.Tensor,
    rewards: torch.Tensor,
    valid: torch.Tensor,
    scale: Scale = "group",
    eps: float = 1e-4,
) -> torch.Tensor:
    """Per-turn advantages ``(G[i, k] - b) / s`` for ``returns_to_go`` of shape ``[groups, G, T]``.

    ``returns_to_go[g, i, k]`` is the sum of the rewards of turns ``k, k+1, ...`` of sample ``i``
    (entries past a sample's last turn are ignored); ``rewards`` (``[groups, G]``) are the episode
    returns, whose baseline ``b`` and scale ``s`` are exactly those of :func:`group_advantages`.
    Why reward-to-go: a turn cannot change the rewards earned before it, so leaving them out
    removes noise from its gradient without biasing it (causality, as in REINFORCE's
    reward-to-go), and the group baseline does not depend on the turn's action, so subtracting
    it stays unbiased too. Invalid samples, and every turn of a group whose valid episode returns
    are all equal, get 0: such a group carries no signal. With all reward on the last turn this
    equals :func:`group_advantages` for every turn.
    """
    baseline, divisor, keep = _baseline_and_scale(rewards, valid, scale, eps)
    return (returns_to_go - baseline[..., None]) * keep[..., None] / divisor[..., None]


@dataclass
class LossStats:
    loss: float
    pg_loss: float
    kl: float
    clip_fraction: float
    ratio_mean: float
    importance_mean: float = 1.0  # mean truncated importance weight (1 for on-policy samples)
    importance_capped: float = 0.0  # fraction of tokens whose weight hit the cap


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    ref_logp: torch.Tensor | None = None,
    beta: float = 0.0,
    loss_agg: LossAgg = "token-mean",
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    behaviour_logp: torch.Tensor | None = None,
    importance_cap: float = 2.0,
) -> tuple[torch.Tensor, LossStats]:
    """The clipped policy-gradient loss over ``[B, T]`` token tensors; ``advantages`` is ``[B]``.

    ``old_logp`` are the log-probs the ratio is taken against. For on-policy samples these are
    the behaviour log-probs and ``behaviour_logp`` is ``None``; for stale samples they are the
    proximal log-probs and ``behaviour_logp`` the sampler's, which adds the truncated
    importance weight (see the module docstring).

    ``entropy`` (``[B, T]``, differentiable) with ``entropy_coef > 0`` adds the bonus ``-c·H``:
    without it a policy that is confidently wrong on some prompts samples the same answer G
    times, the group has zero variance, and those prompts never teach it anything again."""
    if loss_agg not in LOSS_AGGS:
        raise ValueError(f"loss_agg must be one of {LOSS_AGGS}, got {loss_agg!r}")
    mask = mask.to(logp.dtype)
    ratio = torch.exp(logp - old_logp)
    adv = advantages[:, None]
    unclipped = ratio * adv
    clipped = ratio.clamp(1 - eps_low, 1 + eps_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    weight = torch.ones_like(logp)
    if behaviour_logp is not None:
        if not importance_cap >= 1.0:
            raise ValueError(f"importance_cap must be >= 1, got {importance_cap}")
        weight = torch.exp(old_logp - behaviour_logp).detach().clamp(max=importance_cap)
        per_token = weight * per_token
    pg_per_token = per_token
    kl_per_token = torch.zeros_like(logp)
    if beta > 0:
        if ref_logp is None:
            raise ValueError("beta > 0 needs ref_logp (log-probs under the reference policy)")
        delta = ref_logp - logp
        kl_per_token = torch.exp(delta) - delta - 1
        per_token = per_token + beta * kl_per_token
    if entropy_coef > 0:
        if entropy is None:
            raise ValueError("entropy_coef > 0 needs the per-token entropy")
        per_token = per_token - entropy_coef * entropy

    def aggregate(x: torch.Tensor) -> torch.Tensor:
        if loss_agg == "token-mean":
            return (x * mask).sum() / mask.sum().clamp(min=1)
        if loss_agg == "seq-mean-token-mean":
            return ((x * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()
        return ((x * mask).sum(1) / mask.shape[1]).mean()

    loss = aggregate(per_token)
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        was_clipped = (clipped < unclipped).to(mask.dtype)  # the clip bound, not the ratio, set the loss
        stats = LossStats(
            loss=float(loss),
            pg_loss=float(aggregate(pg_per_token)),
            kl=float((kl_per_token * mask).sum() / n),
            clip_fraction=float((was_clipped * mask).sum() / n),
            ratio_mean=float((ratio * mask).sum() / n),
            importance_mean=float((weight * mask).sum() / n),
            importance_capped=float(((weight >= importance_cap) * mask).sum() / n)
            if behaviour_logp is not None
            else 0.0,
        )
    return loss, stats
