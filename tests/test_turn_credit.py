"""``turn_credit``: the trainer trains each turn of a multi-turn episode with its own advantage."""

import json

import pytest
import torch

from ludus.core import Env, Message, Observation, Score, Status, StepResult, Task, register
from ludus.train import grpo
from ludus.train.config import ConfigError, LossConfig, load_config
from ludus.train.grpo import Sample
from ludus.train.trainer import Trainer

PAID = (0.25, 0.25, 0.5)  # what an even-seeded episode earns on each of its three turns; odd seeds earn nothing


class _Prompts:
    size = None

    def get(self, index: int) -> Task:
        return Task(id=str(index), prompt="go")


class _StepRewardEnv(Env):
    """Three turns whatever the model writes, paying ``PAID`` along the way when the episode seed is even."""

    name = "step-rewards"
    max_turns = 3
    quick = True

    def default_tasks(self, split="train"):
        return _Prompts()

    def reset(self, task: Task | None = None, seed: int | None = None) -> Observation:
        self.paid = PAID if (seed or 0) % 2 == 0 else (0.0, 0.0, 0.0)
        return super().reset(task, seed)

    def begin(self, task: Task) -> Observation:
        return Observation([Message("user", task.prompt)])

    def transition(self, action: Message) -> StepResult:
        reward = self.paid[self.turn]
        if self.turn < self.max_turns - 1:
            return StepResult(Observation([Message("user", "go")]), reward)
        total = sum(self.paid)
        return StepResult(Observation([]), reward, terminated=True, score=Score(total, Status.PARTIAL))


def _trained_samples(small_config, monkeypatch, turn_credit: str) -> tuple[list[Sample], list[dict]]:
    """One RL step on two episodes of one prompt (seeds 0 and 1): the samples it trained on and
    the trajectories it sampled."""
    register("step-rewards", _StepRewardEnv)
    seen: list[Sample] = []
    update = grpo.update

    def recording(learner: grpo.Learner, samples: list[Sample], config: LossConfig) -> dict[str, float]:
        seen.extend(samples)
        return update(learner, samples, config)

    monkeypatch.setattr(grpo, "update", recording)
    config = small_config(
        name=turn_credit,
        env="step-rewards",
        env_args={},
        turn_credit=turn_credit,
        scale_rewards="none",  # advantages are returns minus the group mean: easy to compute by hand
        warmstart_steps=0,
        steps=1,
        prompts_per_step=1,
        group_size=2,
        eval_size=1,
        tiny={"d_model": 32, "n_layers": 1, "n_heads": 2, "max_len": 48},
    )
    run = Trainer.create(config, log=lambda _: None).run().run_dir
    trajs = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    return seen, trajs


@pytest.mark.parametrize(
    ("turn_credit", "even", "odd"),
    [
        # episode returns 1 and 0, baseline 0.5: every turn carries its episode's advantage
        ("episode", [0.5, 0.5, 0.5], [-0.5, -0.5, -0.5]),
        # returns from each turn on, [1, 0.75, 0.5] and [0, 0, 0], minus 0.5: the even episode's last
        # turn earns exactly the baseline, so it has advantage 0 and is not trained on (beta 0)
        ("reward_to_go", [0.5, 0.25, 0.0], [-0.5, -0.5, -0.5]),
    ],
)
def test_trainer_trains_each_turn_with_its_advantage(small_config, monkeypatch, turn_credit, even, odd):
    samples, trajs = _trained_samples(small_config, monkeypatch, turn_credit)
    assert [t["seed"] for t in trajs] == [0, 1]
    assert [[turn["reward"] for turn in t["turns"]] for t in trajs] == [list(PAID), [0.0, 0.0, 0.0]]

    # chained turns merge into one sample (the environment's tokens between them masked), and under
    # reward_to_go a run is cut where the advantage changes: each turn's sampled tokens are trained
    # exactly once, in the completion of a sample carrying that turn's advantage
    def trained_in(sample, turn) -> bool:
        whole = sample.prompt_ids + sample.completion_ids
        start, end = len(turn["prompt_ids"]), len(turn["prompt_ids"]) + len(turn["completion_ids"])
        mask = sample.loss_mask or [1] * len(sample.completion_ids)
        offset = len(sample.prompt_ids)
        return (
            whole[:end] == turn["prompt_ids"] + turn["completion_ids"]
            and start >= offset
            and all(mask[start - offset : end - offset])
        )

    expected_tokens = 0
    for traj, advantages in zip(trajs, [even, odd], strict=True):
        for turn, advantage in zip(traj["turns"], advantages, strict=True):
            carriers = [s for s in samples if trained_in(s, turn)]
            if advantage == 0.0:
                assert carriers == []
                continue
            assert [s.advantage for s in carriers] == [advantage]
            expected_tokens += len(turn["completion_ids"])
    assert sum(int(s.token_mask().sum()) for s in samples) == expected_tokens


def test_reward_to_go_trains_single_turn_episodes_exactly_like_episode_credit(small_config):
    """All reward on the last (only) turn: the two settings give the same weights, bit for bit."""
    params = []
    for turn_credit in ("episode", "reward_to_go"):
        config = small_config(name=turn_credit, turn_credit=turn_credit, steps=2, eval_every=0, checkpoint_every=0)
        run = Trainer.create(config, log=lambda _: None).run().run_dir
        params.append(torch.load(run / "final" / "pytorch_model.bin", weights_only=True))
    assert params[0].keys() == params[1].keys()
    for key in params[0]:
        assert torch.equal(params[0][key], params[1][key]), key


def test_turn_credit_defaults_to_episode_and_rejects_unknown_values(tmp_path):
    assert load_config().turn_credit == "episode"
    assert load_config(overrides={"turn_credit": "reward_to_go"}).turn_credit == "reward_to_go"
    path = tmp_path / "bad.yaml"
    path.write_text("turn_credit: per_turn\n")
    with pytest.raises(
        ConfigError, match=r"'turn_credit' \(from .*bad.yaml\) must be one of 'episode', 'reward_to_go'"
    ):
        load_config(path)
