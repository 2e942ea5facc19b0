"""GRPO advantages and losses against values computed by hand."""

import math

import pytest
import torch

from ludus.train.config import ConfigError, load_config
from ludus.train.grpo import GAP_BOUND, SCALES, Sample, group_advantages, logprob_gap, policy_loss, turn_advantages

REWARDS = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
ALL = torch.ones_like(REWARDS, dtype=torch.bool)


def test_grpo_group_scaling_divides_by_the_unbiased_group_std():
    adv = group_advantages(REWARDS, ALL, "group", eps=0.0 + 1e-12)
    std = math.sqrt(4 * 0.25 / 3)  # rewards 1,0,0,1: mean 0.5, unbiased variance 1/3
    assert adv[0].tolist() == pytest.approx([0.5 / std, -0.5 / std, -0.5 / std, 0.5 / std])
    assert adv[1].tolist() == [0.0, 0.0, 0.0, 0.0]  # a group of equal rewards carries no signal


def test_dr_grpo_only_centres():
    adv = group_advantages(REWARDS, ALL, "none")
    assert adv.tolist() == [[0.5, -0.5, -0.5, 0.5], [0.0, 0.0, 0.0, 0.0]]


def test_batch_scaling_uses_the_std_of_all_rewards():
    adv = group_advantages(REWARDS, ALL, "batch", eps=0.0)
    std = REWARDS.flatten().std().item()  # six ones and two zeros
    assert adv[0].tolist() == pytest.approx([0.5 / std, -0.5 / std, -0.5 / std, 0.5 / std])


def test_invalid_samples_get_zero_advantage_and_do_not_move_the_mean():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    valid = torch.tensor([[True, True, False, False]])  # two infrastructure errors
    adv = group_advantages(rewards, valid, "none")
    assert adv.tolist() == [[0.5, -0.5, 0.0, 0.0]]


def test_unknown_scale_is_rejected():
    with pytest.raises(ValueError, match="scale"):
        group_advantages(REWARDS, ALL, "sometimes")  # type: ignore[arg-type]


# Reward-to-go: one group of two 2-turn samples, turn rewards [0.5, 0.5] and [0, 0].
TOGO = torch.tensor([[[1.0, 0.5], [0.0, 0.0]]])  # the return from each turn on
RETURNS = torch.tensor([[1.0, 0.0]])  # the episode returns (turn 0's return to go)
BOTH = torch.ones_like(RETURNS, dtype=torch.bool)


def test_a_group_of_equal_rewards_gets_exactly_zero_even_when_its_float_mean_is_not_exact():
    rewards = torch.tensor([[0.9, 0.9, 0.9], [0.3] * 3])  # float32 means 0.9000001, 0.30000001
    for scale in SCALES:
        assert torch.equal(
            group_advantages(rewards, torch.ones_like(rewards, dtype=torch.bool), scale), torch.zeros(2, 3)
        )


def test_reward_to_go_centres_each_turn_on_the_episode_baseline():
    # baseline 0.5: the second turn of the first sample earns no more than the average episode, so 0
    assert turn_advantages(TOGO, RETURNS, BOTH, "none").tolist() == [[[0.5, 0.0], [-0.5, -0.5]]]


def test_reward_to_go_divides_by_the_episode_returns_group_std():
    adv = turn_advantages(TOGO, RETURNS, BOTH, "group", eps=1e-4)
    s = math.sqrt(0.5) + 1e-4  # returns 1, 0: mean 0.5, unbiased variance 0.5
    assert adv.tolist() == [[pytest.approx([0.5 / s, 0.0]), pytest.approx([-0.5 / s, -0.5 / s])]]


def test_reward_to_go_batch_scaling_uses_the_std_of_all_episode_returns():
    togo = torch.cat([TOGO, torch.tensor([[[1.0, 1.0], [1.0, 1.0]]])])  # a second group of two returns of 1
    returns = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    adv = turn_advantages(togo, returns, torch.ones_like(returns, dtype=torch.bool), "batch", eps=0.0)
    s = returns.flatten().std().item()  # three ones and a zero
    assert adv[0].tolist() == [pytest.approx([0.5 / s, 0.0]), pytest.approx([-0.5 / s, -0.5 / s])]
    assert adv[1].tolist() == [[0.0, 0.0], [0.0, 0.0]]


def test_reward_to_go_masks_infra_errors_out_of_the_baseline():
    togo = torch.tensor([[[1.0, 0.5], [0.0, 0.0], [9.0, 9.0]]])  # the third sample is an infra error
    returns = torch.tensor([[1.0, 0.0, 9.0]])
    valid = torch.tensor([[True, True, False]])
    assert turn_advantages(togo, returns, valid, "none").tolist() == [[[0.5, 0.0], [-0.5, -0.5], [0.0, 0.0]]]


def test_reward_to_go_group_with_equal_returns_carries_no_signal():
    # turn rewards [1, 0] and [0, 1]: both episodes return 1, though the second turns' returns differ
    togo = torch.tensor([[[1.0, 0.0], [1.0, 1.0]]])
    returns = torch.tensor([[1.0, 1.0]])
    for scale in ("group", "batch", "none"):
        assert turn_advantages(togo, returns, BOTH, scale).tolist() == [[[0.0, 0.0], [0.0, 0.0]]], scale
    # three returns of 0.9, whose float mean is not exactly 0.9: still no signal, not (0.45 - 0.9) / eps
    togo = torch.tensor([[[0.9, 0.45], [0.9, 0.9], [0.9, 0.0]]])
    returns = torch.full((1, 3), 0.9)
    assert turn_advantages(togo, returns, torch.ones_like(returns, dtype=torch.bool), "group").abs().max() == 0


def test_reward_to_go_equals_episode_advantages_when_reward_is_only_on_the_last_turn():
    generator = torch.Generator().manual_seed(0)
    returns = torch.randint(0, 5, (3, 4), generator=generator).float() / 4
    returns[2] = 0.5  # a group of equal rewards
    valid = torch.rand(3, 4, generator=generator) > 0.2
    togo = returns[..., None].expand(3, 4, 5)  # every turn's return to go is the last turn's reward
    for scale in ("group", "batch", "none"):
        episode = group_advantages(returns, valid, scale)
        assert torch.equal(turn_advantages(togo, returns, valid, scale), episode[..., None].expand(3, 4, 5)), scale


def test_reward_to_go_rejects_an_unknown_scale():
    with pytest.raises(ValueError, match="scale"):
        turn_advantages(TOGO, RETURNS, BOTH, "sometimes")  # type: ignore[arg-type]


def _tokens():
    # two sequences: lengths 2 and 1 (second position padded)
    old = torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5]]))
    new = torch.log(torch.tensor([[0.8, 0.5], [0.25, 0.9]]))  # ratios 1.6, 1.0 | 0.5, (pad)
    mask = torch.tensor([[True, True], [True, False]])
    adv = torch.tensor([1.0, -1.0])
    return new, old, adv, mask


def test_clipped_loss_token_mean_by_hand():
    new, old, adv, mask = _tokens()
    loss, stats = policy_loss(new, old, adv, mask, eps_low=0.2, eps_high=0.28, loss_agg="token-mean")
    # seq 1 (A=+1): ratio 1.6 -> min(1.6, 1.28) = 1.28; ratio 1.0 -> 1.0
    # seq 2 (A=-1): ratio 0.5 -> min(-0.5, -0.8) = -0.8 (clipped at 1 - 0.2)
    per_token = [-1.28, -1.0, 0.8]
    assert loss.item() == pytest.approx(sum(per_token) / 3, rel=1e-5)
    assert stats.clip_fraction == pytest.approx(2 / 3)


def test_sequence_mean_aggregation_by_hand():
    new, old, adv, mask = _tokens()
    loss, _ = policy_loss(new, old, adv, mask, eps_low=0.2, eps_high=0.28, loss_agg="seq-mean-token-mean")
    assert loss.item() == pytest.approx(((-1.28 - 1.0) / 2 + 0.8) / 2, rel=1e-5)


def test_dr_grpo_aggregation_divides_by_a_constant_length():
    new, old, adv, mask = _tokens()
    loss, _ = policy_loss(new, old, adv, mask, eps_low=0.2, eps_high=0.28, loss_agg="seq-mean-token-sum-norm")
    assert loss.item() == pytest.approx(((-1.28 - 1.0) / 2 + 0.8 / 2) / 2, rel=1e-5)


def test_k3_kl_penalty_by_hand():
    logp = torch.log(torch.tensor([[0.5]]))
    ref = torch.log(torch.tensor([[0.25]]))
    loss, stats = policy_loss(logp, logp.clone(), torch.tensor([0.0]), torch.tensor([[True]]), ref_logp=ref, beta=0.1)
    kl = 0.5 - math.log(0.5) - 1  # exp(ref - logp) - (ref - logp) - 1 with ref - logp = log(1/2)
    assert stats.kl == pytest.approx(kl, rel=1e-5)
    assert loss.item() == pytest.approx(0.1 * kl, rel=1e-5)


def test_entropy_bonus_by_hand():
    logp = torch.log(torch.tensor([[0.5, 0.25]]))
    entropy = torch.tensor([[0.7, 0.3]])
    mask = torch.tensor([[True, True]])
    loss, _ = policy_loss(logp, logp.clone(), torch.tensor([1.0]), mask, entropy=entropy, entropy_coef=0.1)
    assert loss.item() == pytest.approx(-1.0 - 0.1 * 0.5, rel=1e-5)  # pg = -ρ·A = -1 per token; mean H = 0.5
    with pytest.raises(ValueError, match="entropy"):
        policy_loss(logp, logp.clone(), torch.tensor([1.0]), mask, entropy_coef=0.1)


def test_kl_needs_reference_logprobs():
    new, old, adv, mask = _tokens()
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss(new, old, adv, mask, beta=0.1)


def test_gradient_pushes_up_positive_advantage_tokens():
    logits = torch.zeros(1, 1, requires_grad=True)
    logp = torch.nn.functional.logsigmoid(logits)
    loss, _ = policy_loss(logp, logp.detach(), torch.tensor([1.0]), torch.tensor([[True]]))
    loss.backward()
    assert logits.grad is not None and logits.grad.item() < 0  # descending the loss raises logp


# ---- importance weights for a sampler that is not the learner ----


def test_masked_importance_weights_drop_tokens_past_the_cap_where_truncated_ones_weigh_them_by_it():
    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    proximal = logp.detach().clone()
    behaviour = proximal - torch.log(torch.tensor([[1.0, 3.0, 0.5]]))  # weights π_prox / π_behaviour: 1, 3, 0.5
    adv, mask = torch.tensor([1.0]), torch.ones(1, 3, dtype=torch.bool)
    grads = {}
    for mode in ("truncate", "mask"):
        x = logp.detach().clone().requires_grad_(True)
        loss, stats = policy_loss(x, proximal, adv, mask, behaviour_logp=behaviour, importance_mode=mode)
        loss.backward()
        grads[mode] = x.grad
        assert stats.importance_capped == pytest.approx(1 / 3)
    # ratio 1 at the proximal weights: each token's gradient is -w·A over 3 tokens
    assert torch.allclose(grads["truncate"], -torch.tensor([[1.0, 2.0, 0.5]]) / 3)
    assert torch.allclose(grads["mask"], -torch.tensor([[1.0, 0.0, 0.5]]) / 3)
    with pytest.raises(ValueError, match="importance_mode"):
        policy_loss(logp, proximal, adv, mask, behaviour_logp=behaviour, importance_mode="clip")
    with pytest.raises(ConfigError, match="importance_mode"):
        load_config(overrides={"importance_mode": "clip"})


def test_the_logprob_gap_counts_the_tokens_of_the_learners_own_version_only():
    fresh = Sample([1], [2, 3, 4], [-1.0, -2.0, -3.0], 1.0, policy_version=5)
    stale = Sample([1], [2], [-9.0], 1.0, policy_version=4)  # its gap is also the policy's change
    learner = [torch.tensor([-1.0, -2.5, -2.95]), torch.tensor([-1.0])]
    gap = logprob_gap([fresh, stale], learner, version=5)
    assert gap["logprob_gap/mean"] == pytest.approx((0 + 0.5 + 0.05) / 3, rel=1e-2)  # 3 significant digits
    assert gap["logprob_gap/max"] == pytest.approx(0.5, rel=1e-3)
    assert gap["logprob_gap/frac"] == pytest.approx(1 / 3, abs=1e-4) and 0.05 < GAP_BOUND < 0.5
    assert logprob_gap([stale], learner[1:], version=5) == {}
