"""Asynchronous training: the staleness bound holds, nothing is dropped, stale samples are
reweighted, a run resumes, and a failing sampler stops the run with a clear error."""

import json
import random
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import torch

from ludus.core import Score, SingleTurnEnv, Status, Task, register
from ludus.core.env import Env
from ludus.core.types import Message, Observation, StepResult
from ludus.policies.base import SamplingParams
from ludus.policies.tiny import TinyConfig, TinyPolicy
from ludus.rollout.hosts import ThreadHost
from ludus.train.config import ConfigError, TrainConfig, load_config
from ludus.train.curriculum import Arm, TaskPicker
from ludus.train.grpo import policy_loss
from ludus.train.sampler import AheadSampler, StreamPosition, admits, pick_batch
from ludus.train.trainer import Trainer


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "ludus-sampler"]


# ---- the scheduling rules ----


def test_finished_groups_are_taken_in_finish_order_when_no_deadline_presses():
    unconsumed = {0: (5, 2), 1: (5, 0), 2: (5, None), 3: (5, 1)}
    assert pick_batch(unconsumed, step=0, size=2) == [1, 3]


def test_the_learner_waits_for_a_group_that_is_due_now():
    unconsumed = {0: (0, None), 1: (2, 0), 2: (2, 1)}
    assert pick_batch(unconsumed, step=0, size=2) is None
    unconsumed[0] = (0, 2)
    assert sorted(pick_batch(unconsumed, step=0, size=2)) == [0, 1]


def test_a_later_group_is_not_taken_when_it_would_make_earlier_ones_miss_their_deadline():
    # two groups due at step 2 still run; at step 1 (one group per step) taking the finished
    # group due at 3 would leave two groups for the single slot of step 2
    unconsumed = {0: (2, None), 1: (2, None), 3: (3, 0)}
    assert pick_batch(unconsumed, step=1, size=1) is None
    unconsumed[1] = (2, 1)
    assert pick_batch(unconsumed, step=1, size=1) == [1]


def test_admission_paces_sampling():
    # right after an update is synced (version = next step): (staleness + 1) steps' worth
    assert admits(5, deadline=3 + 1, next_step=3, groups_per_step=3)
    assert not admits(6, deadline=3 + 1, next_step=3, groups_per_step=3)
    # between taking step 3's batch and syncing its update: one step's worth less
    assert not admits(3, deadline=3 + 1, next_step=4, groups_per_step=3)


@pytest.mark.parametrize("seed", range(20))
def test_simulated_runs_meet_every_deadline_and_drop_nothing(seed):
    """Admission and batch rules together, with random durations: every group is trained on
    exactly once, no later than ``staleness`` updates after the weights that sampled it, and
    the learner never waits on a state that cannot progress."""
    rng = random.Random(seed)
    staleness, per_step, steps = rng.randint(1, 3), rng.randint(1, 4), 40
    now, version, next_step, admitted = 0.0, 0, 0, 0
    unconsumed: dict[int, tuple[int, int | None]] = {}
    versions: dict[int, int] = {}
    finish_at: dict[int, float] = {}
    finished = 0
    trained: list[int] = []

    def admit_all() -> None:
        nonlocal admitted
        while admits(len(unconsumed), version + staleness, next_step, per_step):
            unconsumed[admitted] = (version + staleness, None)
            versions[admitted] = version
            finish_at[admitted] = now + rng.lognormvariate(0, 1.5)  # heavy-tailed: stragglers
            admitted += 1

    def finish_until(t: float) -> None:
        nonlocal finished
        for group in sorted((g for g, (_, o) in unconsumed.items() if o is None), key=finish_at.get):
            if finish_at[group] <= t:
                unconsumed[group] = (unconsumed[group][0], finished)
                finished += 1

    admit_all()
    for step in range(steps):
        while (picked := pick_batch(unconsumed, step, per_step)) is None:
            running = [finish_at[g] for g, (_, o) in unconsumed.items() if o is None]
            assert running, f"step {step} waits with nothing running: {unconsumed}"
            now = min(running)
            finish_until(now)
        for group in picked:
            assert step - versions[group] <= staleness
            del unconsumed[group]
            trained.append(group)
        next_step = step + 1
        admit_all()  # between taking the batch and syncing the update
        now += 0.5  # the update
        finish_until(now)
        version = step + 1
        admit_all()
    assert len(trained) == len(set(trained)) == steps * per_step
    assert set(trained) | set(unconsumed) == set(range(admitted))


# ---- importance weights ----


def test_decoupled_loss_weights_each_token_by_the_truncated_importance_ratio():
    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    proximal = logp.detach().clone()
    behaviour = proximal - torch.tensor([[0.0, torch.log(torch.tensor(3.0)), torch.log(torch.tensor(0.5))]])
    adv, mask = torch.tensor([1.0]), torch.ones(1, 3, dtype=torch.bool)
    loss, stats = policy_loss(logp, proximal, adv, mask, behaviour_logp=behaviour, importance_cap=2.0)
    loss.backward()
    # ratio 1 at the proximal weights: the gradient of -w·ρ·A is -w·A per token, over 3 tokens
    assert torch.allclose(logp.grad, torch.tensor([[-1.0, -2.0, -0.5]]) / 3)
    assert stats.importance_mean == pytest.approx((1 + 2 + 0.5) / 3)
    assert stats.importance_capped == pytest.approx(1 / 3)


def test_decoupled_loss_equals_the_on_policy_loss_when_behaviour_is_proximal():
    g = torch.Generator().manual_seed(0)
    logp = torch.randn(4, 5, generator=g)
    old = logp + 0.3 * torch.randn(4, 5, generator=g)
    adv, mask = torch.randn(4, generator=g), torch.rand(4, 5, generator=g) > 0.2
    on, _ = policy_loss(logp, old, adv, mask, eps_high=0.28)
    decoupled, stats = policy_loss(logp, old, adv, mask, eps_high=0.28, behaviour_logp=old.clone())
    assert torch.allclose(on, decoupled) and stats.importance_mean == pytest.approx(1.0)


def test_importance_cap_below_one_is_refused():
    with pytest.raises(ValueError, match="importance_cap"):
        policy_loss(
            torch.zeros(1, 1),
            torch.zeros(1, 1),
            torch.ones(1),
            torch.ones(1, 1),
            behaviour_logp=torch.zeros(1, 1),
            importance_cap=0.5,
        )
    with pytest.raises(ConfigError, match="importance_cap"):
        load_config(overrides={"importance_cap": "0.9"})
    with pytest.raises(ConfigError, match="max_staleness"):
        load_config(overrides={"max_staleness": "-1"})


# ---- the sampler with real threads and a slow environment ----


class _CountTasks:
    size = None

    def get(self, index: int) -> Task:
        return Task(id=f"t{index}", prompt=str(index % 10), answer="1")


class _JitterEnv(Env):
    """One turn; the step sleeps a random 0–30 ms on an environment thread."""

    name = "jitter"

    def begin(self, task: Task) -> Observation:
        return Observation([Message("user", task.prompt)])

    def transition(self, action: Message) -> StepResult:
        time.sleep(random.random() * 0.03)
        return StepResult(Observation([]), reward=1.0, terminated=True, score=Score(1.0, Status.CORRECT))


def test_sampler_keeps_the_bound_with_real_threads_and_replays_what_a_checkpoint_left():
    policy = TinyPolicy(TinyConfig(d_model=16, n_layers=1, n_heads=2, max_len=24))
    host = ThreadHost(8)
    staleness, per_step, size = 2, 3, 2

    def sampler(first_step: int, first_group: int, replay: list[int]) -> AheadSampler:
        config = TrainConfig(prompts_per_step=per_step, group_size=size, max_staleness=staleness)
        start = StreamPosition(first_step, first_group, tuple(replay))
        picker = TaskPicker([([Arm("jitter", None, _JitterEnv, _CountTasks(), ())], 1.0)])
        return AheadSampler(policy, _JitterEnv, picker, SamplingParams(max_tokens=2), config, host, start)

    trained: list[int] = []
    first = sampler(0, 0, [])
    first.start()
    try:
        for step in range(6):
            groups = [group for _, group in first.take(step, timeout_s=60).kept]
            assert len(groups) == per_step and all(len(g) == size for g in groups)
            for group in groups:
                assert len({t.info["group"] for t in group}) == 1
                assert [t.info["key"].split("#")[1] for t in group] == ["0", "1"]
                assert all(step - t.policy_version <= staleness for t in group)
                trained.append(int(group[0].info["group"]))
            time.sleep(random.random() * 0.05)  # the update
            policy.version = step + 1
            first.advance(policy)
        position = first.position()
        next_group, unconsumed = position.next_group, list(position.replay)
    finally:
        first.close()
    assert not _sampler_threads()
    assert unconsumed and next_group == max(trained + unconsumed) + 1
    assert sorted(trained + unconsumed) == list(range(next_group))  # nothing skipped

    second = sampler(6, next_group, unconsumed)  # what a resumed run does
    second.start()
    try:
        for step in range(6, 9):
            trained += [int(g[0].info["group"]) for _, g in second.take(step, timeout_s=60).kept]
            policy.version = step + 1
            second.advance(policy)
    finally:
        second.close()
        host.shutdown()
    assert max(Counter(trained).values()) == 1  # nothing trained on twice
    assert set(unconsumed) <= set(trained)  # replayed first, so due within the next steps


# ---- the trainer ----


class _OddEnv(SingleTurnEnv):
    """Reward 1 when the reply starts with an odd byte: about half of a random model's samples."""

    name = "odd-first-byte"

    def default_tasks(self, split="train"):
        return _CountTasks()

    def score(self, task: Task, completion: str) -> Score:
        if completion and ord(completion[0]) % 2:
            return Score(1.0, Status.CORRECT)
        return Score.zero(Status.WRONG, "even or empty")


def test_async_training_logs_staleness_and_importance_and_resumes(small_config):
    register("odd-first-byte", _OddEnv)
    cfg = small_config(
        name="async", env="odd-first-byte", env_args={}, warmstart_steps=0, temperature=1.0, steps=6, max_staleness=2
    )
    trainer = Trainer.create(cfg, log=lambda _: None)

    def stop_at_3(record):
        if record.get("step") == 3 and "reward/mean" in record:
            trainer.stop.requested = True

    first = trainer.run(stop_at_3)
    assert first.interrupted and first.step == 3 and not _sampler_threads()
    train = [r for r in _records(first.run_dir) if "reward/mean" in r]
    assert train[0]["staleness/max"] == 0  # step 1 uses the starting weights' first groups
    assert train[0]["logprob_gap/mean"] < 1e-5  # the sampler's copy scores its tokens as the learner does
    # from step 2 on the batch must include groups sampled before the last update (see the
    # module docstring of ludus.train.sampler: their deadline forces them in)
    assert all(1 <= r["staleness/max"] <= 2 for r in train[1:])
    assert all(r["trained_samples"] > 0 and 0 < r["importance/mean"] <= 2.0 and "sampler_wait_s" in r for r in train)
    state = json.loads((first.run_dir / "checkpoints" / "step_000003" / "state.json").read_text())
    assert state["next_group"] > 3 * 4 and state["unconsumed_groups"]
    assert all(g < state["next_group"] for g in state["unconsumed_groups"])

    second = Trainer.resume_from(first.run_dir, log=lambda _: None).run()
    assert second.step == 6 and not second.interrupted and not _sampler_threads()
    steps = [r["step"] for r in _records(second.run_dir) if "reward/mean" in r]
    assert steps == [1, 2, 3, 4, 5, 6]
    samples = [json.loads(x) for x in (second.run_dir / "samples.jsonl").read_text().splitlines()]
    assert {s["step"] for s in samples} == set(range(1, 7))
    assert all(s["step"] - 1 - s["policy_version"] <= 2 for s in samples)


class _BrokenTasks:
    """A task source that fails at one index, as a corrupt dataset row would."""

    size = None

    def get(self, index: int) -> Task:
        if index == 9:
            raise ValueError("row 9 is corrupt")
        return Task(id=f"b{index}", prompt="1?", answer="1")


class _BrokenSourceEnv(SingleTurnEnv):
    name = "broken-source"

    def default_tasks(self, split="train"):
        return _BrokenTasks() if split == "train" else _CountTasks()

    def score(self, task: Task, completion: str) -> Score:
        return Score(1.0, Status.CORRECT) if completion[:1] == "1" else Score.zero(Status.WRONG, "not 1")


def test_a_failing_sampler_stops_training_with_its_error(small_config):
    register("broken-source", _BrokenSourceEnv)
    cfg = small_config(name="broken", env="broken-source", env_args={}, warmstart_steps=0, steps=20, max_staleness=1)
    with pytest.raises(RuntimeError, match="sampler failed.*row 9 is corrupt"):
        Trainer.create(cfg, log=lambda _: None).run()
    assert not _sampler_threads()
