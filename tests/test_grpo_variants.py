"""GSPO's sequence-level ratio and DAPO's overlong filtering and soft overlong punishment, against
values computed by hand, then in short training runs."""

import json
import math

import pytest
import torch

from ludus.core import Score, Status, Task
from ludus.core.types import Trajectory, Turn
from ludus.train.config import ConfigError, TrainConfig, load_config
from ludus.train.grpo import build_samples, has_signal, overlong_penalty, policy_loss, shaped_rewards
from ludus.train.trainer import Trainer

GSPO = {"eps_low": 3e-4, "eps_high": 4e-4}


def _loss(logp, prox, adv, **kw):
    logp = torch.tensor(logp, requires_grad=True)
    mask = torch.ones_like(logp, dtype=torch.bool)
    loss, stats = policy_loss(logp, torch.tensor(prox), torch.tensor(adv), mask, **kw)
    loss.backward()
    return loss.item(), logp.grad, stats


# ---- GSPO ----


def test_the_sequence_ratio_is_the_geometric_mean_of_the_token_ratios_with_gspos_gradient():
    # token log-ratios 0.2 and -0.4: s = exp(-0.1) = 0.904837; A = 1 leaves it unclipped (min takes s·A)
    loss, grad, stats = _loss(
        [[-1.0, -2.0]], [[-1.2, -1.6]], [1.0], importance_ratio="sequence", loss_agg="seq-mean-token-mean", **GSPO
    )
    assert loss == pytest.approx(-math.exp(-0.1), abs=1e-6)
    # d(-s)/d logp_t = -s · (1/|y|) for each of the 2 tokens
    assert grad[0].tolist() == pytest.approx([-math.exp(-0.1) / 2] * 2, abs=1e-6)
    assert stats.ratio_mean == pytest.approx(math.exp(-0.1), abs=1e-6)
    # A = -1: min(-s, -clip(s)) = -0.9997, the clipped bound: loss 0.9997 and no gradient
    loss, grad, stats = _loss(
        [[-1.0, -2.0]], [[-1.2, -1.6]], [-1.0], importance_ratio="sequence", loss_agg="seq-mean-token-mean", **GSPO
    )
    assert loss == pytest.approx(1 - 3e-4, abs=1e-7)
    assert grad.abs().sum() == 0 and stats.clip_fraction == 1.0


def test_gspo_token_form_has_the_gradient_of_the_sequence_objective():
    torch.manual_seed(0)
    logp = torch.randn(3, 5) - 2
    prox = logp + 0.01 * torch.randn(3, 5)
    adv = torch.tensor([1.0, -0.5, 2.0])
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1, 3:] = False  # a shorter reply
    ours = logp.clone().requires_grad_(True)
    loss, _ = policy_loss(
        ours, prox, adv, mask, importance_ratio="sequence", loss_agg="seq-mean-token-mean", eps_low=0.2, eps_high=0.2
    )
    loss.backward()
    paper = logp.clone().requires_grad_(True)  # J = mean_i min(s_i A_i, clip(s_i) A_i), s_i from the mean log-ratio
    m = mask.float()
    s = torch.exp(((paper - prox) * m).sum(1) / m.sum(1))
    objective = torch.minimum(s * adv, s.clamp(0.8, 1.2) * adv).mean()
    (-objective).backward()
    assert loss.item() == pytest.approx(-objective.item(), abs=1e-6)
    assert torch.allclose(ours.grad, paper.grad, atol=1e-6)
    token_level = logp.clone().requires_grad_(True)
    token_loss, _ = policy_loss(token_level, prox, adv, mask, loss_agg="seq-mean-token-mean")
    token_loss.backward()
    assert not torch.allclose(token_level.grad, paper.grad, atol=1e-4)  # the two objectives do differ


def test_stale_samples_get_one_importance_weight_per_reply():
    # proximal - behaviour log-ratios 0.3 and -0.1: w = exp(0.1) for both tokens; the ratio itself is 1
    loss, grad, stats = _loss(
        [[-1.2, -1.6]],
        [[-1.2, -1.6]],
        [1.0],
        importance_ratio="sequence",
        loss_agg="seq-mean-token-mean",
        behaviour_logp=torch.tensor([[-1.5, -1.5]]),
        **GSPO,
    )
    assert loss == pytest.approx(-math.exp(0.1), abs=1e-6)
    assert stats.importance_mean == pytest.approx(math.exp(0.1), abs=1e-6)
    assert grad[0].tolist() == pytest.approx([-math.exp(0.1) / 2] * 2, abs=1e-6)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"importance_ratio": "sequence", "eps_low": "3e-4", "eps_high": "4e-4"}, "loss_agg: seq-mean-token-mean"),
        ({"importance_ratio": "sequence", "loss_agg": "seq-mean-token-mean"}, "eps_low: 0.0003"),
        ({"importance_ratio": "sentence"}, "importance_ratio"),
        ({"overlong_buffer": "7"}, "at most max_tokens"),
        ({"overlong_penalty": "-1"}, "overlong_penalty"),
    ],
)
def test_bad_variant_settings_say_what_to_set(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(overrides=overrides)


# ---- DAPO's overlong handling ----


def test_soft_overlong_punishment_by_hand():
    config = TrainConfig(max_tokens=10, overlong_buffer=4).loss()
    assert [overlong_penalty(n, config) for n in (3, 6, 7, 8, 10)] == [0.0, 0.0, -0.25, -0.5, -1.0]
    assert overlong_penalty(9, TrainConfig(max_tokens=10, overlong_buffer=4, overlong_penalty=0.5).loss()) == -0.375
    assert overlong_penalty(10, TrainConfig(max_tokens=10).loss()) == 0.0  # off by default


def _traj(reward: float, length: int, finish: str = "stop", status: str = Status.CORRECT) -> Trajectory:
    turn = Turn([1], [7] * length, [-0.5] * length, reward=reward, finish_reason=finish)
    return Trajectory(Task("t", "p"), [], turns=[turn], score=Score(reward, status))


def test_shaped_rewards_add_the_penalty_and_can_give_a_group_signal():
    config = TrainConfig(max_tokens=10, overlong_buffer=4).loss()
    group = [_traj(1.0, 10, "length"), _traj(1.0, 5), _traj(0.0, 8, status=Status.INFRA_ERROR)]
    rewards, valid = shaped_rewards([group], config)
    assert rewards.tolist() == [[0.0, 1.0, 0.0]]  # 1 - 1; 1 - 0; the infra error untouched (and masked)
    assert valid.tolist() == [[True, True, False]]
    assert has_signal(group, config) and not has_signal(group, TrainConfig(max_tokens=10).loss())


def test_overlong_filter_masks_cut_off_turns_but_keeps_their_rewards_in_the_baseline():
    group = [_traj(1.0, 3), _traj(0.0, 6, "length"), _traj(0.0, 2), _traj(1.0, 4)]
    plain = build_samples([group], TrainConfig(max_tokens=6).loss())
    filtered = build_samples([group], TrainConfig(max_tokens=6, overlong_filter=True).loss())
    assert len(plain) == 4 and len(filtered) == 3
    assert [s.advantage for s in filtered] == [plain[0].advantage, plain[2].advantage, plain[3].advantage]
    # rewards 1, 0, 0, 1: mean 0.5, unbiased std 0.57735 → ±0.866 (within the 1e-4 eps)
    assert plain[0].advantage == pytest.approx(0.5 / (math.sqrt(1 / 3) + 1e-4), abs=1e-6)


def test_a_flat_group_trains_only_under_a_kl_term_and_an_infra_error_never():
    flat = [_traj(0.0, 3), _traj(0.0, 4), _traj(0.0, 2, status=Status.INFRA_ERROR)]
    varied = [_traj(1.0, 3), _traj(0.0, 4), _traj(1.0, 2, status=Status.INFRA_ERROR)]
    plain = build_samples([flat, varied], TrainConfig().loss())
    assert [len(s.completion_ids) for s in plain] == [3, 4] and all(s.advantage != 0 for s in plain)
    with_kl = build_samples([flat, varied], TrainConfig(beta=0.1).loss())
    assert [(len(s.completion_ids), s.advantage == 0) for s in with_kl] == [
        (3, True),
        (4, True),
        (3, False),
        (4, False),
    ]


# ---- short training runs ----


@pytest.mark.parametrize(
    "variant",
    [
        {"importance_ratio": "sequence", "loss_agg": "seq-mean-token-mean", **GSPO},
        {"overlong_filter": True, "overlong_buffer": 2, "max_staleness": 1},
    ],
    ids=["gspo", "overlong-ahead"],
)
def test_training_runs_with_each_variant(small_config, variant):
    result = Trainer.create(small_config(name="variant", steps=3, temperature=1.0, **variant), log=lambda _: None).run()
    train = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in train if "reward/mean" in r]
    assert len(train) == 3 and all(math.isfinite(r["loss"]) for r in train)
    if "overlong_buffer" in variant:
        assert all(-1 <= r["overlong/penalty"] <= 0 and 0 <= r["overlong/truncated_frac"] <= 1 for r in train)
