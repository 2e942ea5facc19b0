"""One GRPO step, top to bottom: from groups of trajectories to ``optimizer.step()``.

1. **Advantages** — one per turn, from the group's rewards (:func:`group_advantages`,
   :func:`turn_advantages`, :func:`advantages_per_turn`).
2. **The token batch** — policy turns with a non-zero advantage become :class:`Sample` s: the
   prompt and completion tokens, the *behaviour* log-probs recorded when they were sampled, and
   the advantage (:func:`build_samples`). The turns of an episode that form one token sequence
   are one sample, the environment's tokens between them masked out of the loss.
3. **The loss** — clipped ratios, KL to a reference, entropy bonus, importance weights for stale
   samples (:func:`policy_loss`).
4. **Reference log-probs** — under the frozen initial weights, for the KL term (:func:`reference_logprobs`).
5. **The update** — ``ppo_epochs`` passes of ``minibatches`` gradient steps (:func:`update`).

The trainer (``trainer.py``) owns the loop around it: sampling, evaluation, checkpoints, logging.
The step reads its settings from a :class:`~ludus.train.config.LossConfig` (``TrainConfig.loss()``),
never the whole training config.

Advantages (one reward per sample, ``G`` samples per prompt):

* ``scale="group"`` — GRPO (Shao et al., 2024, DeepSeekMath): ``(r - mean_group) / (std_group + eps)``.
* ``scale="batch"`` — centre per group, divide by the std of the whole batch (more robust
  when a group's std is tiny; the TRL ``scale_rewards="batch"`` option).
* ``scale="none"`` — Dr. GRPO (Liu et al., 2025, "Understanding R1-Zero-like training"):
  mean-centred only, which removes the bias towards easy/hard prompts that std scaling adds.

Multi-turn episodes (``turn_credit``): by default every turn of a sample is trained with the
advantage of its episode return. With ``"reward_to_go"`` turn ``k`` gets the return from turn
``k`` on instead, centred and scaled by the same group baseline and scale (:func:`turn_advantages`).

Token-exact multi-turn samples: the ids trained on are the ids sampled, never text tokenised again.
When turn ``k + 1``'s prompt ids begin with turn ``k``'s prompt and completion ids
(:func:`~ludus.core.types.chained_turns`), the two are one sequence: one sample whose completion
runs from the end of the first turn's prompt to the end of the last turn's reply, with a loss mask
that is 1 on the tokens the policy sampled and 0 on those the environment added between turns
(tool results, feedback). A turn whose prompt re-renders the history otherwise (a chat template
that drops earlier thinking blocks, an agent that edited its messages) starts a new sample with
the same advantage: merging it would train on ids the policy never saw as its context. Masked
tokens enter no term of the loss and no statistic (:func:`policy_loss`). One sample per run of
turns rather than one per turn scores the shared context once instead of once per turn, and its
gradient is the per-turn samples' (``loss_agg="token-mean"``); :func:`chaining_metrics` counts
merged and split turns.

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

Samples of an inference server (``rollout_server``) get the same objective even in lockstep
(``rollout_correction``, as TRL's and verl's vLLM-mismatch corrections): the server computes its
log-probs with other kernels, maybe another precision, so its π_behaviour is not quite the
learner's. ``importance_mode="mask"`` drops a token whose weight is past ``C`` instead of weighing
it by ``C`` (masked rather than truncated importance sampling). Whenever the proximal log-probs are
computed, the step logs how far the sampler's are from them (:func:`logprob_gap`), and a step whose
gap is past ``rollout_logprob_tolerance`` raises :class:`SamplerMismatch` before any update.

GSPO (``importance_ratio="sequence"``; Zheng et al., 2025, "Group Sequence Policy Optimization"):
one ratio per reply, the geometric mean of its tokens' ratios ``s = exp(mean_t(logp - logp_old))``,
clipped as a whole (the paper's range is ``1 - 3e-4 .. 1 + 4e-4``) and averaged per reply
(``loss_agg="seq-mean-token-mean"``). It is computed in the GSPO-token form, per-token ratios
``sg[s]·π_t/sg[π_t]``, whose values are all ``s`` and whose gradient is GSPO's. A token's ratio
is noisy; a reply's is the quantity the reward judges, and a sequence-level clip does not
silence single tokens of a long reply. Stale samples get one truncated weight per reply too,
``min(exp(mean_t(logp_prox - logp_behaviour)), C)``.

DAPO's length handling (Yu et al., 2025, "DAPO", §3.4): ``overlong_filter`` leaves turns cut off
at ``max_tokens`` (``finish_reason == "length"``) out of the loss — their rewards still count in
the group's baseline, as in DAPO, since they are what the policy did; and the soft overlong
punishment (``overlong_buffer`` = L_cache > 0) adds to an episode's reward, for each of its turns
of length ``|y|`` with ``L = max_tokens``::

    0                                    if |y| <= L - L_cache
    -penalty · (|y| - (L - L_cache)) / L_cache   otherwise (so -penalty at |y| = L)

:func:`shaped_rewards` is the one place rewards are read for learning: advantages and the
trainer's dynamic sampling both see these values.

Aggregation over tokens (``loss_agg``):

* ``"token-mean"`` — mean over every token of the batch (DAPO): long answers weigh more.
* ``"seq-mean-token-mean"`` — mean within each sequence, then over sequences (original GRPO).
* ``"seq-mean-token-sum-norm"`` — sum within each sequence divided by a constant (the batch's
  maximum length), then mean over sequences (Dr. GRPO): no length normalisation bias.

Only a sample's mask-1 tokens count: ``"token-mean"`` divides by the batch's sampled tokens,
``"seq-mean-token-mean"`` by each sample's. ``"seq-mean-token-sum-norm"``'s constant stays the
batch's longest completion, the environment's tokens of a merged sample included: a constant, so
the loss keeps no length bias either way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate, groupby
from typing import get_args

import torch

from ludus.core.types import Trajectory, Turn, chain_counts, chained_turns
from ludus.policies.base import TrainablePolicy
from ludus.train.config import ImportanceMode, ImportanceRatio, LossAgg, LossConfig, Scale

SCALES: tuple[str, ...] = get_args(Scale)
LOSS_AGGS: tuple[str, ...] = get_args(LossAgg)
IMPORTANCE_MODES: tuple[str, ...] = get_args(ImportanceMode)

# ---- 1. advantages ------------------------------------------------------------------------


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


def rewards_and_validity(groups: Sequence[Sequence[Trajectory]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Episode rewards ``[groups, G]`` and which of them measure the policy: not an infrastructure
    failure, and with a turn of the policy's (a game's other seat may have ended it first)."""
    rewards = torch.tensor([[t.reward for t in group] for group in groups])
    valid = torch.tensor(
        [[bool(t.turns) and not (t.score and t.score.is_infra_error) for t in group] for group in groups]
    )
    return rewards, valid


def overlong_penalty(length: int, config: LossConfig) -> float:
    """DAPO's soft overlong punishment of one turn of ``length`` completion tokens (≤ 0)."""
    buffer = config.overlong_buffer
    if not buffer:
        return 0.0
    excess = length - (config.max_tokens - buffer)
    return -config.overlong_penalty * min(1.0, max(0.0, excess / buffer))


def shaped_rewards(groups: Sequence[Sequence[Trajectory]], config: LossConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`rewards_and_validity` with the soft overlong punishment of every turn added (valid samples only)."""
    rewards, valid = rewards_and_validity(groups)
    if config.overlong_buffer:
        penalties = torch.tensor(
            [[sum(overlong_penalty(len(turn.completion_ids), config) for turn in t.turns) for t in g] for g in groups]
        )
        rewards = rewards + penalties * valid
    return rewards, valid


def has_signal(group: Sequence[Trajectory], config: LossConfig) -> bool:
    """Whether a group's measured (shaped) rewards differ: GRPO learns nothing from one where they do not."""
    rewards, valid = shaped_rewards([group], config)
    return len(set(rewards[valid].tolist())) > 1


def advantages_per_turn(groups: Sequence[Sequence[Trajectory]], config: LossConfig) -> list[list[float]]:
    """The advantage of every turn of every trajectory (groups flattened in order), by ``turn_credit``."""
    rewards, valid = shaped_rewards(groups, config)
    trajs = [t for group in groups for t in group]
    if config.turn_credit == "episode":
        adv = group_advantages(rewards, valid, config.scale_rewards).flatten().tolist()
        return [[a] * len(traj.turns) for traj, a in zip(trajs, adv, strict=True)]
    width = max(len(traj.turns) for traj in trajs)
    # the return from each turn on: the sums of the (shaped) turn rewards from the last turn backwards
    togo = [
        list(accumulate(t.reward + overlong_penalty(len(t.completion_ids), config) for t in reversed(traj.turns)))[::-1]
        for traj in trajs
    ]
    padded = torch.tensor([g + [0.0] * (width - len(g)) for g in togo]).view(*rewards.shape, width)
    rows = turn_advantages(padded, rewards, valid, config.scale_rewards).view(len(trajs), width).tolist()
    return [row[: len(traj.turns)] for traj, row in zip(trajs, rows, strict=True)]


# ---- 2. the token batch -------------------------------------------------------------------


@dataclass
class Sample:
    """One policy turn, or a run of turns that form one token sequence, with its advantage: the
    unit of the loss."""

    prompt_ids: list[int]
    completion_ids: list[int]
    behaviour_logprobs: list[float]  # the sampling policy's, recorded when it sampled the turn (0.0 where masked)
    advantage: float
    policy_version: int = 0  # the version of the weights that sampled it
    # per completion token, 1 where the policy sampled it and the loss reads it, 0 on the tokens the
    # environment added between merged turns (and on turns left out by overlong_filter); None: all 1
    loss_mask: list[int] | None = None

    def token_mask(self) -> torch.Tensor:
        """:attr:`loss_mask` as a bool tensor, one entry per completion token."""
        if self.loss_mask is None:
            return torch.ones(len(self.completion_ids), dtype=torch.bool)
        return torch.tensor(self.loss_mask, dtype=torch.bool)


def _run_sample(turns: Sequence[Turn], advantage: float, version: int, config: LossConfig) -> Sample | None:
    """One sample of chained ``turns`` (each one's prompt ids begin with the previous one's prompt
    and completion ids): the ids of the last turn's sequence, each turn's reply at the offset its
    own prompt ends at, what lies between taken from the next turn's prompt ids and masked. A turn
    left out by ``overlong_filter`` is masked, not cut out (later prompts contain it); masked tokens
    at either end go to the prompt or are dropped. None when no token is left to train."""
    start = len(turns[0].prompt_ids)
    ids = turns[-1].prompt_ids + turns[-1].completion_ids
    mask = [0] * (len(ids) - start)
    behaviour = [0.0] * len(mask)
    for turn in turns:
        if config.overlong_filter and turn.finish_reason == "length":
            continue
        at, n = len(turn.prompt_ids) - start, len(turn.completion_ids)
        mask[at : at + n] = [1] * n
        behaviour[at : at + n] = turn.logprobs
    if 1 not in mask:
        return None
    lo, hi = mask.index(1), len(mask) - mask[::-1].index(1)
    trained = mask[lo:hi]
    return Sample(
        ids[: start + lo],
        ids[start + lo : start + hi],
        behaviour[lo:hi],
        advantage,
        version,
        None if all(trained) else trained,
    )


def build_samples(groups: Sequence[Sequence[Trajectory]], config: LossConfig) -> list[Sample]:
    """The :class:`Sample` s of every trajectory: each run of :func:`chained_turns` is one sample
    (a single turn is a plain one); under ``turn_credit="reward_to_go"``, where turns' advantages
    differ, a run is cut where the advantage changes, since a sample has one. Left out: samples
    with advantage 0 when there is no KL term (no policy gradient, compute for nothing), the
    turns of infrastructure failures and, with ``overlong_filter``, turns cut off at ``max_tokens``."""
    trajs = [t for group in groups for t in group]
    valid = rewards_and_validity(groups)[1].flatten().tolist()
    samples: list[Sample] = []
    for traj, measured, advantages in zip(trajs, valid, advantages_per_turn(groups, config), strict=True):
        if measured:  # an infrastructure failure teaches nothing, not even through the KL term
            samples += episode_samples(traj, advantages, config)
    return samples


def episode_samples(traj: Trajectory, advantages: Sequence[float], config: LossConfig) -> list[Sample]:
    """One trajectory's samples given each turn's advantage (see :func:`build_samples`)."""
    samples = []
    for run in chained_turns(traj.turns):
        for a, same in groupby(run, key=advantages.__getitem__):
            if a == 0.0 and config.beta <= 0:
                continue
            sample = _run_sample([traj.turns[k] for k in same], a, traj.policy_version, config)
            if sample is not None:
                samples.append(sample)
    return samples


def chaining_metrics(groups: Sequence[Sequence[Trajectory]]) -> dict[str, int]:
    """How the step's multi-turn episodes became token sequences: later turns that continued the
    previous turn's ids (merged into its sample), later turns that did not (a new sample: the
    history was re-rendered or edited), and episodes that had such a split. Empty when no episode
    had a second turn, so single-turn runs log nothing new."""
    counts = [chain_counts(chained_turns(t.turns)) for group in groups for t in group if len(t.turns) > 1]
    if not counts:
        return {}
    return {
        "multiturn/merged_turns": sum(merged for merged, _ in counts),
        "multiturn/split_turns": sum(split for _, split in counts),
        "multiturn/split_episodes": sum(split > 0 for _, split in counts),
    }


def overlong_metrics(groups: Sequence[Sequence[Trajectory]], config: LossConfig) -> dict[str, float]:
    """The step's share of turns cut off at ``max_tokens`` and mean overlong penalty per episode."""
    turns = [turn for group in groups for t in group for turn in t.turns]
    penalties = [sum(overlong_penalty(len(turn.completion_ids), config) for turn in t.turns) for g in groups for t in g]
    return {
        "overlong/truncated_frac": round(sum(t.finish_reason == "length" for t in turns) / max(1, len(turns)), 4),
        "overlong/penalty": round(sum(penalties) / max(1, len(penalties)), 4),
    }


# ---- 3. the loss --------------------------------------------------------------------------


@dataclass
class LossStats:
    loss: float
    pg_loss: float
    kl: float
    clip_fraction: float
    ratio_mean: float
    importance_mean: float = 1.0  # mean importance weight, truncated or masked (1 for on-policy samples)
    importance_capped: float = 0.0  # fraction of tokens whose weight was past the cap


def policy_loss(
    logp: torch.Tensor,
    proximal_logp: torch.Tensor,
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
    importance_ratio: ImportanceRatio = "token",
    importance_mode: ImportanceMode = "truncate",
) -> tuple[torch.Tensor, LossStats]:
    """The clipped policy-gradient loss over ``[B, T]`` token tensors; ``advantages`` is ``[B]``.

    ``proximal_logp`` are the log-probs the ratio is taken against: those of the weights at the
    start of this update. For on-policy samples the behaviour policy *is* those weights, so they
    are the behaviour log-probs and ``behaviour_logp`` is ``None``; for stale samples, and a
    rollout server's, ``behaviour_logp`` holds the sampler's, which adds the importance weight,
    truncated at ``importance_cap`` or, with ``importance_mode="mask"``, 0 past it (see the
    module docstring).

    ``entropy`` (``[B, T]``, differentiable) with ``entropy_coef > 0`` adds the bonus ``-c·H``
    on the samples in the loss: it keeps their groups from going flat (a policy confidently wrong
    on some prompts samples the same answer G times, the group has zero variance, and those
    prompts never teach it anything again). It does not reach a group that is already flat: its
    samples are left out (:func:`build_samples`), since the bonus over every sampled token halved
    the default recipe's steps and did not revive such groups (docs/recipe.md)."""
    if loss_agg not in LOSS_AGGS:
        raise ValueError(f"loss_agg must be one of {LOSS_AGGS}, got {loss_agg!r}")
    if importance_mode not in IMPORTANCE_MODES:
        raise ValueError(f"importance_mode must be one of {IMPORTANCE_MODES}, got {importance_mode!r}")
    # Untrained positions (padding, the environment's tokens of a merged sample) hold placeholders
    # or log-probs of text the policy never chose: zeroed, so none reaches a term even as inf·0.
    untrained = ~mask.bool()
    logp, proximal_logp = logp.masked_fill(untrained, 0.0), proximal_logp.masked_fill(untrained, 0.0)
    ref_logp = None if ref_logp is None else ref_logp.masked_fill(untrained, 0.0)
    behaviour_logp = None if behaviour_logp is None else behaviour_logp.masked_fill(untrained, 0.0)
    mask = mask.to(logp.dtype)
    lengths = mask.sum(1).clamp(min=1)

    def per_reply(x: torch.Tensor) -> torch.Tensor:  # a reply's mean over its tokens, as [B, 1]
        return ((x * mask).sum(1) / lengths)[:, None]

    if importance_ratio == "sequence":  # GSPO-token: every token's ratio is the reply's s, with GSPO's gradient
        ratio = torch.exp(per_reply(logp - proximal_logp).detach() + logp - logp.detach())
    else:
        ratio = torch.exp(logp - proximal_logp)
    adv = advantages[:, None]
    unclipped = ratio * adv
    clipped = ratio.clamp(1 - eps_low, 1 + eps_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    weight = torch.ones_like(logp)
    past_cap = torch.zeros_like(mask)
    if behaviour_logp is not None:
        if not importance_cap >= 1.0:
            raise ValueError(f"importance_cap must be >= 1, got {importance_cap}")
        log_weight = proximal_logp - behaviour_logp
        if importance_ratio == "sequence":
            log_weight = per_reply(log_weight).expand_as(logp)
        raw = torch.exp(log_weight).detach()
        over = raw > importance_cap
        past_cap = over.to(mask.dtype)
        weight = raw.masked_fill(over, 0.0) if importance_mode == "mask" else raw.clamp(max=importance_cap)
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
            importance_capped=float((past_cap * mask).sum() / n),
        )
    return loss, stats


# ---- 4. reference log-probs ---------------------------------------------------------------


def reference_logprobs(
    reference: torch.nn.Module,
    policy: TrainablePolicy,
    prompt_ids: list[list[int]],
    completion_ids: list[list[int]],
    temperature: float,
) -> torch.Tensor:
    """Log-probs under the frozen reference weights, computed by swapping them into the policy."""
    live = policy.module
    policy.module = reference
    try:
        with torch.no_grad():
            logp, _ = policy.token_logprobs(prompt_ids, completion_ids, temperature)
    finally:
        policy.module = live
    return logp


# ---- 5. the update ------------------------------------------------------------------------


@dataclass
class Learner:
    """What an update reads and changes: the policy, its optimizer, the frozen reference weights
    (``beta > 0`` only) and the generator that shuffles minibatches."""

    policy: TrainablePolicy
    optimizer: torch.optim.Optimizer
    reference: torch.nn.Module | None
    generator: torch.Generator


def _proximal_logprobs(learner: Learner, samples: list[Sample], size: int, temperature: float) -> list[torch.Tensor]:
    """Every sample's log-probs under the current weights, before any update (no gradient)."""
    out: list[torch.Tensor] = []
    with torch.no_grad():
        for lo in range(0, len(samples), size):
            chunk = samples[lo : lo + size]
            logp, _ = learner.policy.token_logprobs(
                [s.prompt_ids for s in chunk], [s.completion_ids for s in chunk], temperature
            )
            out += [logp[row, : len(s.completion_ids)] for row, s in enumerate(chunk)]
    return out


# a token whose |Δ log p| is past this has a probability more than ~10 % off the learner's
GAP_BOUND = 0.1


class SamplerMismatch(RuntimeError):
    """The sampler's log-probs of the tokens it sampled are too far from the learner's for the
    same weights: the samples are not the learner's, and learning from them would mislead it."""

    def __init__(self, gap: dict[str, float], tolerance: float):
        self.gap, self.tolerance = gap, tolerance
        super().__init__(
            f"the sampler's log-probs differ from the learner's by {gap['logprob_gap/mean']:.3g} per token on "
            f"average (max {gap['logprob_gap/max']:.3g}), more than {tolerance}"
        )


def logprob_gap(samples: list[Sample], proximal: Sequence[torch.Tensor], version: int) -> dict[str, float]:
    """How far the behaviour log-probs are from the learner's (``proximal``) over the tokens of
    samples drawn by weights of ``version``, the learner's (the tokens they sampled, mask 1): mean
    and max |Δ log p| per token and the fraction of tokens past :data:`GAP_BOUND`. Empty when no
    sample is of that version (a staler one's gap is also the policy's own change, which the
    importance weights correct).

    In process the two are the same arithmetic (about 1e-7 apart); a rollout server holding the
    learner's weights in float32 is about 1e-6 apart. More means the sampler is not the learner."""
    deltas = [
        (p - torch.tensor(s.behaviour_logprobs, dtype=p.dtype, device=p.device)).abs()[s.token_mask().to(p.device)]
        for s, p in zip(samples, proximal, strict=True)
        if s.policy_version == version and s.completion_ids
    ]
    if not deltas:
        return {}
    gap = torch.cat(deltas)
    return {
        "logprob_gap/mean": float(f"{float(gap.mean()):.3g}"),
        "logprob_gap/max": float(f"{float(gap.max()):.3g}"),
        "logprob_gap/frac": round(float((gap > GAP_BOUND).float().mean()), 4),
    }


def padded(batch: Sequence[Sample], logp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch's loss mask and behaviour log-probs as ``logp``'s ``[B, T]`` shape (0 past each end)."""
    mask = torch.zeros_like(logp, dtype=torch.bool)
    behaviour = torch.zeros_like(logp)
    for row, s in enumerate(batch):
        mask[row, : len(s.completion_ids)] = s.token_mask()
        behaviour[row, : len(s.behaviour_logprobs)] = torch.tensor(s.behaviour_logprobs)
    return mask, behaviour


def optimizer_step(learner: Learner, loss: torch.Tensor, max_grad_norm: float) -> float:
    """Backpropagate ``loss``, clip the gradient's norm, step; the norm before clipping."""
    learner.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(learner.policy.module.parameters(), max_grad_norm)
    learner.optimizer.step()
    return float(grad_norm)


def update(learner: Learner, samples: list[Sample], config: LossConfig) -> dict[str, float]:
    """``ppo_epochs`` passes of ``minibatches`` clipped-ratio updates over ``samples``; the mean
    loss statistics of the updates and the step's :func:`logprob_gap`.

    On-policy (``max_staleness`` 0) in process the ratio is taken against the behaviour log-probs.
    Sampling ahead, or on a rollout server (with ``rollout_correction``), it is taken against the
    *proximal* log-probs — these weights, before this step's first update — and the behaviour
    log-probs only enter the importance weight. With one minibatch the first pass's own forward
    gives the proximal log-probs (no update has happened yet); with several, one extra forward
    pass computes them first. Either way all are known before the first optimizer step: a rollout
    server's samples whose gap is past ``rollout_logprob_tolerance`` raise :class:`SamplerMismatch`
    there, so nothing is learned from them."""
    c = config
    policy = learner.policy
    decoupled = bool(c.max_staleness or (c.rollout_server and c.rollout_correction) or c.replay_ratio)
    measured = decoupled or c.rollout_server  # the proximal log-probs are needed: ratio or gap
    totals = {"loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip_frac": 0.0, "grad_norm": 0.0}
    totals |= {"importance/mean": 0.0, "importance/capped": 0.0} if decoupled else {}
    if not samples:
        return {k: 0.0 for k in totals} | {"trained_samples": 0}
    policy.module.train()
    size = math.ceil(len(samples) / c.minibatches)
    proximal: list[torch.Tensor | None] = [None] * len(samples)
    if measured and c.minibatches > 1:
        proximal = [*_proximal_logprobs(learner, samples, size, c.temperature)]
    gap: dict[str, float] = {}
    n_updates = 0
    for _ in range(c.ppo_epochs):
        order = torch.randperm(len(samples), generator=learner.generator).tolist()
        for lo in range(0, len(samples), size):
            indices = order[lo : lo + size]
            batch = [samples[i] for i in indices]
            prompt_ids = [s.prompt_ids for s in batch]
            completion_ids = [s.completion_ids for s in batch]
            logp, entropy = policy.token_logprobs(prompt_ids, completion_ids, c.temperature)
            mask, behaviour = padded(batch, logp)
            if measured:
                for row, (i, s) in enumerate(zip(indices, batch, strict=True)):
                    if proximal[i] is None:
                        proximal[i] = logp[row, : len(s.completion_ids)].detach()
                if n_updates == 0:  # every sample's proximal log-probs are known, no update made yet
                    gap = logprob_gap(samples, proximal, policy.version)  # type: ignore[arg-type]
                    tolerance = c.rollout_logprob_tolerance
                    if c.rollout_server and tolerance and gap and gap["logprob_gap/mean"] > tolerance:
                        raise SamplerMismatch(gap, tolerance)
            if decoupled:
                proximal_logp = torch.zeros_like(logp)
                for row, (i, s) in enumerate(zip(indices, batch, strict=True)):
                    proximal_logp[row, : len(s.completion_ids)] = proximal[i]
            else:  # on-policy in process: the behaviour weights are the proximal ones
                proximal_logp, behaviour = behaviour, None
            ref = None
            if learner.reference is not None:
                ref = reference_logprobs(learner.reference, policy, prompt_ids, completion_ids, c.temperature)
            loss, st = policy_loss(
                logp,
                proximal_logp,
                torch.tensor([s.advantage for s in batch]),
                mask,
                eps_low=c.eps_low,
                eps_high=c.eps_high,
                ref_logp=ref,
                beta=c.beta,
                loss_agg=c.loss_agg,
                entropy=entropy,
                entropy_coef=c.entropy_coef,
                behaviour_logp=behaviour,
                importance_cap=c.importance_cap,
                importance_ratio=c.importance_ratio,
                importance_mode=c.importance_mode,
            )
            grad_norm = optimizer_step(learner, loss, c.max_grad_norm)
            n_updates += 1
            totals["loss"] += st.loss
            totals["kl"] += st.kl
            totals["clip_frac"] += st.clip_fraction
            totals["grad_norm"] += grad_norm
            totals["entropy"] += float((entropy.detach() * mask).sum() / mask.sum())
            if decoupled:
                totals["importance/mean"] += st.importance_mean
                totals["importance/capped"] += st.importance_capped
    return {k: round(v / n_updates, 5) for k, v in totals.items()} | gap | {"trained_samples": len(samples)}
