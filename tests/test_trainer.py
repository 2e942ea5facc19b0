"""The training loop end to end: it learns, it logs, and it resumes exactly."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ludus.core import Score, SingleTurnEnv, Status, Task, register
from ludus.train.trainer import Trainer, default_threads, lr_factor
from support import DigitTasks


def _params(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "final" / "pytorch_model.bin", weights_only=True)


def test_run_folder_and_metrics_schema(small_config):
    result = Trainer.create(small_config(name="schema", steps=4), log=lambda _: None).run()
    run = result.run_dir
    for name in ["config.yaml", "metrics.jsonl", "samples.jsonl", "reward.png", "final/pytorch_model.bin"]:
        assert (run / name).exists(), name
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all("step" in r and "elapsed_s" in r for r in records)
    evals = [r for r in records if "eval/accuracy" in r]
    assert [r["step"] for r in evals] == [0, 2, 4]  # before, during and after training
    train = [r for r in records if "reward/mean" in r]
    assert [r["step"] for r in train] == [1, 2, 3, 4]
    for key in [
        "reward/std",
        "zero_variance_frac",
        "kl",
        "entropy",
        "clip_frac",
        "completion_len/mean",
        "step_time_s",
        "tokens_per_s",
        "accuracy",
        "lr",
        "grad_norm",
    ]:
        assert key in train[0], key
    sample = json.loads((run / "samples.jsonl").read_text().splitlines()[0])
    assert sample["step"] == 1 and sample["turns"][0]["completion_ids"]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_000002", "step_000004"]


def test_a_checkpoint_folder_and_final_are_models_wherever_a_model_is_read(small_config, tmp_path):
    """``runs/NAME/checkpoints/step_000002`` and ``runs/NAME/final`` as docs/models.md names them:
    ``ludus eval --model``, ``model:`` of another run, a reward model's backbone and transformers."""
    from transformers import AutoModelForCausalLM

    from ludus.cli import main
    from ludus.policies import load_policy
    from ludus.rewards.reward_model import RewardModel

    run = Trainer.create(small_config(name="paths", steps=2), log=lambda _: None).run().run_dir
    checkpoint, final = run / "checkpoints" / "step_000002", run / "final"
    trained = load_policy(str(final)).module.state_dict()
    for folder in (checkpoint, final):
        loaded = load_policy(str(folder)).module.state_dict()
        assert all(torch.equal(loaded[name], value) for name, value in trained.items())
        model = AutoModelForCausalLM.from_pretrained(folder)
        assert torch.equal(model.get_input_embeddings().weight, trained["tok.weight"])
        assert RewardModel.create(str(folder)).backbone == "tiny"
    flags = ["--env-args", "{digits: 1, ops: '+'}", "--tasks", "4", "--max-tokens", "3", "--runs", str(tmp_path)]
    assert main(["eval", "arithmetic", "--model", str(checkpoint), "--name", "e", *flags]) == 0
    summary = json.loads((tmp_path / "e" / "summary.json").read_text())
    assert summary["samples"] == 4 and summary["infra_errors"] == 0
    again = Trainer.create(small_config(name="again", model=str(checkpoint), steps=1), log=lambda _: None).run()
    assert again.step == 1
    with pytest.raises(ValueError, match="training run's folder: its model is .*final"):
        load_policy(str(run))
    (checkpoint / "policy").mkdir()  # as checkpoints were written before they were model folders
    for name in ("config.json", "pytorch_model.bin"):
        (checkpoint / name).rename(checkpoint / "policy" / name)
    logs: list[str] = []
    assert Trainer.resume_from(run, log=logs.append).run().step == 2 and any("from step 2" in m for m in logs)


def test_existing_run_folder_is_not_overwritten(small_config):
    Trainer.create(small_config(name="taken", steps=1), log=lambda _: None)
    with pytest.raises(ValueError, match="already exists"):
        Trainer.create(small_config(name="taken", steps=1), log=lambda _: None)


def test_resume_after_stop_gives_the_same_parameters(small_config):
    straight = Trainer.create(small_config(name="straight", steps=6), log=lambda _: None).run()

    trainer = Trainer.create(small_config(name="stopped", steps=6), log=lambda _: None)

    def stop_at_3(record):
        if record.get("step") == 3 and "reward/mean" in record:
            trainer.stop.requested = True  # what the SIGINT/SIGTERM handler sets

    first = trainer.run(stop_at_3)
    assert first.interrupted and first.step == 3
    second = Trainer.resume_from(first.run_dir, log=lambda _: None).run()
    assert second.step == 6 and not second.interrupted

    a, b = _params(straight.run_dir), _params(second.run_dir)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    lines = [json.loads(x) for x in (second.run_dir / "metrics.jsonl").read_text().splitlines()]
    train_steps = [r["step"] for r in lines if "reward/mean" in r]
    assert train_steps == [1, 2, 3, 4, 5, 6]  # nothing duplicated or lost across the restart


@pytest.mark.slow
def test_sigint_checkpoints_and_resume_matches_uninterrupted_run(tmp_path):
    """A real Ctrl-C to a real `ludus train` process, then `--resume`."""
    env = {**os.environ, "LUDUS_CACHE": str(tmp_path / "cache")}
    flags = [
        "--runs-dir",
        str(tmp_path / "runs"),
        "--steps",
        "40",
        "--env-args",
        '{digits: 1, ops: "+"}',
        "--tiny",
        "{d_model: 32, n_layers: 1, n_heads: 2, max_len: 24}",
        "--warmstart-steps",
        "5",
        "--prompts-per-step",
        "4",
        "--group-size",
        "4",
        "--max-tokens",
        "3",
        "--eval-size",
        "8",
        "--eval-every",
        "0",
        "--checkpoint-every",
        "0",
        "--time-limit-min",
        "0",
        "--threads",
        "1",
    ]
    cli = [sys.executable, "-m", "ludus.cli", "train"]
    subprocess.run([*cli, *flags, "--name", "whole"], env=env, check=True, capture_output=True, timeout=300)

    proc = subprocess.Popen([*cli, *flags, "--name", "cut"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    metrics = tmp_path / "runs" / "cut" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not metrics.exists() or metrics.read_text().count("reward/mean") < 3):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130, proc.stderr.read().decode() if proc.stderr else ""
    saved = list((tmp_path / "runs" / "cut" / "checkpoints").iterdir())
    assert len(saved) == 1 and 3 <= int(saved[0].name.split("_")[1]) < 40

    subprocess.run(
        [sys.executable, "-m", "ludus.cli", "train", "--resume", str(tmp_path / "runs" / "cut")],
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    a, b = _params(tmp_path / "runs" / "whole"), _params(tmp_path / "runs" / "cut")
    for key in a:
        assert torch.equal(a[key], b[key]), key


class _FirstCharEnv(SingleTurnEnv):
    name = "first-char"
    description = "reward 1 when the reply starts with the right digit"

    def default_tasks(self, split="train"):
        return DigitTasks(split)

    def score(self, task: Task, completion: str) -> Score:
        if completion[:1] == task.answer:
            return Score(1.0, Status.CORRECT, "right digit")
        return Score.zero(Status.WRONG, f"expected {task.answer}")


@pytest.mark.slow
def test_short_seeded_training_improves_reward(small_config):
    """GRPO from random weights, verifier reward only: greedy accuracy must rise well above chance."""
    register("first-char", _FirstCharEnv)
    cfg = small_config(
        name="learn",
        env="first-char",
        env_args={},
        warmstart_steps=0,
        steps=300,
        eval_every=300,
        eval_size=50,
        prompts_per_step=16,
        group_size=8,
        lr=1e-3,
        lr_schedule="constant",
        temperature=1.0,
        max_tokens=2,
        checkpoint_every=0,
        tiny={"d_model": 32, "n_layers": 1, "n_heads": 2, "max_len": 16},
    )
    result = Trainer.create(cfg, log=lambda _: None).run()
    before, after = result.eval_accuracy[0][2], result.eval_accuracy[-1][2]
    train = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    rewards = [r["reward/mean"] for r in train if "reward/mean" in r]
    assert sum(rewards[-50:]) / 50 > sum(rewards[:50]) / 50 + 0.05
    assert after >= before + 0.4, (before, after)


def test_lr_schedule_warms_up_then_anneals_over_steps(small_config):
    cfg = small_config(steps=100, warmup_steps=10, lr_schedule="cosine")
    assert [lr_factor(cfg, s) for s in (0, 4, 9)] == [0.1, 0.5, 1.0]
    assert lr_factor(cfg, 10) == 1.0
    assert lr_factor(cfg, 55) == pytest.approx(0.5)
    assert lr_factor(cfg, 100) == pytest.approx(0.0)
    linear = small_config(steps=100, lr_schedule="linear")
    assert lr_factor(linear, 25) == pytest.approx(0.75)
    assert lr_factor(small_config(steps=100, lr_schedule="constant"), 99) == 1.0
    wsd = small_config(steps=100, lr_schedule="wsd", lr_decay_frac=0.2)
    assert [lr_factor(wsd, s) for s in (0, 80)] == pytest.approx([1.0, 1.0])
    assert lr_factor(wsd, 90) == pytest.approx(0.5)
    assert lr_factor(wsd, 100) == pytest.approx(0.0)


def test_lr_schedule_follows_the_time_limit_when_it_ends_the_run_first(small_config):
    cfg = small_config(steps=1000, time_limit_min=10, lr_schedule="linear")
    assert lr_factor(cfg, 100, elapsed_s=300) == pytest.approx(0.5)  # half the time, a tenth of the steps
    assert lr_factor(cfg, 900, elapsed_s=60) == pytest.approx(0.1)  # the step budget ends first
    assert lr_factor(cfg, 100, elapsed_s=900) == 0.0  # past the limit: never negative


def test_a_run_that_cannot_start_writes_nothing(tmp_path):
    """An unknown environment or arguments it does not take fail before the run folder is made."""
    from ludus.cli import main

    runs = tmp_path / "runs"
    assert main(["train", "--env", "no-such-env", "--runs-dir", str(runs)]) == 2
    assert main(["train", "--env", "sorting", "--env-args", "{no_such_arg: 1}", "--runs-dir", str(runs)]) == 2
    assert not runs.exists()


@pytest.mark.parametrize(
    ("omp", "threads"), [("3", 3), ("4,2", 4), (None, os.cpu_count()), ("0", os.cpu_count()), ("x", os.cpu_count())]
)
def test_threads_0_takes_openmps_setting_else_every_core(monkeypatch, omp, threads):
    if omp is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", omp)
    assert default_threads() == threads
