"""Faults end cleanly and lose nothing: a step that cannot finish checkpoints the last completed
step (never a half-applied update) and a resumed run continues as if it had not stopped; a resumed
run may move to servers at other addresses, recorded in its config.yaml, and nothing else; a run
whose start fails leaves no run folder, and a failed weight push no weights. A real rollout server
killed mid-run: tests/test_rollout_server.py."""

import json
from pathlib import Path
from typing import ClassVar

import pytest
import torch
import yaml

from ludus.cli import main
from ludus.core import Score, SingleTurnEnv, Status, Task, register
from ludus.policies.base import PolicyError
from ludus.policies.hf import HFPolicy
from ludus.policies.rollout_server import RolloutServerPolicy
from ludus.serve.model_server import create_app
from ludus.train.run_folder import RunFolder
from ludus.train.trainer import Trainer, TrainingHalted
from support import DigitMapEnv, DigitTasks, serving, start_env_server


class _OutageEnv(SingleTurnEnv):
    """The reply's first character graded against the digit; while ``down`` the grader fails
    (``infra_error``), as a dead grading service does."""

    name = "outage"
    description = "the digit task, graded by a service that can go down"
    down: ClassVar[bool] = False

    def default_tasks(self, split="train"):
        return DigitTasks(split)

    def score(self, task: Task, completion: str) -> Score:
        if self.down:
            return Score.zero(Status.INFRA_ERROR, "the grading service is down")
        if completion[:1] == task.answer:
            return Score(1.0, Status.CORRECT, "right digit")
        return Score.zero(Status.WRONG, f"expected {task.answer}")


register("outage", _OutageEnv)
register("digit-map", DigitMapEnv)

OUTAGE = {"env": "outage", "env_args": {}, "warmstart_steps": 0, "temperature": 1.0, "steps": 6}


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _params(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "final" / "pytorch_model.bin", weights_only=True)


def test_a_step_that_cannot_finish_checkpoints_the_last_one_and_resume_continues_exactly(small_config):
    straight = Trainer.create(small_config(name="straight", checkpoint_every=0, **OUTAGE), log=lambda _: None).run()

    def outage_after_step_2(record: dict) -> None:
        if record["step"] == 2 and "eval/accuracy" in record:
            _OutageEnv.down = True

    trainer = Trainer.create(small_config(name="outage", checkpoint_every=0, **OUTAGE), log=lambda _: None)
    try:
        with pytest.raises(TrainingHalted) as halt:
            trainer.run(outage_after_step_2)
    finally:
        _OutageEnv.down = False
    message = str(halt.value)
    assert "every sample of step 3 failed: the grading service is down" in message
    assert (
        f"A checkpoint of step 2 was written. Once that is fixed, `ludus train --resume {trainer.run_dir}`" in message
    )
    assert [p.name for p in RunFolder(trainer.run_dir).checkpoints()] == ["step_000002"]

    resumed = Trainer.resume_from(trainer.run_dir, log=lambda _: None).run()
    assert resumed.step == 6
    assert [r["step"] for r in _records(trainer.run_dir) if "reward/mean" in r] == [1, 2, 3, 4, 5, 6]
    # the failed step's tasks and random draws were given back: the same weights as a run that never stopped
    a, b = _params(straight.run_dir), _params(trainer.run_dir)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_a_dead_env_server_halts_training_with_a_checkpoint_and_the_run_resumes_on_another(small_config):
    config = small_config(name="remote", steps=4, checkpoint_every=0)
    server, url = start_env_server(env_args=config.env_args)
    try:

        def kill_after_step_2(record: dict) -> None:
            if record["step"] == 2 and "eval/accuracy" in record:
                server.kill()
                server.wait()

        config.env_server = url
        trainer = Trainer.create(config, log=lambda _: None)
        with pytest.raises(
            TrainingHalted,
            # the task (unless read before, as the context's sizing reads the first) or the episode fails
            match=rf"(the env server failed in step 3|every sample of step 3 failed): .*{url}.*A checkpoint of step 2 "
            "was written",
        ):
            trainer.run(kill_after_step_2)
        server, elsewhere = start_env_server(env_args=config.env_args)
        assert Trainer.resume_from(trainer.run_dir, {"env_server": elsewhere}, log=lambda _: None).run().step == 4
        train = [r for r in _records(trainer.run_dir) if "reward/mean" in r]
        assert [r["step"] for r in train] == [1, 2, 3, 4] and all(r["masked_infra_errors"] == 0 for r in train)
        assert yaml.safe_load((trainer.run_dir / "config.yaml").read_text())["env_server"] == elsewhere
    finally:
        server.kill()
        server.wait()


def test_a_halt_after_the_weights_moved_saves_no_checkpoint(small_config):
    """An error after step 3's update (here, in the metrics callback): the learner no longer holds
    step 2, so nothing is saved as step 2, and the error says the run continues from step 0. (The
    KL term, beta > 0, makes every step update the weights, whatever the rewards.)"""

    def broken_sink(record: dict) -> None:
        if record["step"] == 3 and "reward/mean" in record:
            raise OSError("the metrics sink is full")

    logs: list[str] = []
    trainer = Trainer.create(small_config(name="moved", checkpoint_every=0, beta=0.01, **OUTAGE), log=logs.append)
    with pytest.raises(OSError, match="metrics sink is full"):
        trainer.run(broken_sink)
    assert RunFolder(trainer.run_dir).checkpoints() == []
    assert f"stopped by an error at step 3. Once that is fixed, `ludus train --resume {trainer.run_dir}` " in logs[-1]
    assert "continues from step 0" in logs[-1]


def test_a_resumed_run_may_change_where_it_runs_and_how_often_it_reports_only(small_config, tmp_path, capsys):
    trainer = Trainer.create(small_config(name="moving", steps=4, eval_every=2), log=lambda _: None)

    def stop_at_2(record: dict) -> None:
        if record["step"] == 2 and "reward/mean" in record:
            trainer.stop.requested = True

    assert trainer.run(stop_at_2).interrupted
    run = str(trainer.run_dir)
    saved = (trainer.run_dir / "config.yaml").read_text()
    assert main(["train", "--resume", run, "--lr", "1", "--steps", "9", "--eval-every", "1"]) == 2
    err = capsys.readouterr().err
    assert "lr, steps would make it another run" in err and "rollout_server, rollout_weights_dir, env_server" in err
    (tmp_path / "more.yaml").write_text("eval_every: 1\n")
    assert main(["train", "--resume", run, "--config", str(tmp_path / "more.yaml")]) == 2
    assert "drop --config" in capsys.readouterr().err
    assert main(["train", "--resume", run, "--rollout-server", "http://127.0.0.1:9/v1"]) == 2  # tiny: no server
    assert (trainer.run_dir / "config.yaml").read_text() == saved  # refused or failed: nothing recorded

    assert main(["train", "--resume", run, "--eval-every", "1", "--env-threads", "4"]) == 0
    assert [r["step"] for r in _records(trainer.run_dir) if "eval/accuracy" in r] == [0, 2, 3, 4]
    recorded = yaml.safe_load((trainer.run_dir / "config.yaml").read_text())
    assert (recorded["eval_every"], recorded["env_threads"]) == (1, 4)  # a later plain --resume reads these
    assert {k: v for k, v in recorded.items() if k not in ("eval_every", "env_threads")} == {
        k: v for k, v in yaml.safe_load(saved).items() if k not in ("eval_every", "env_threads")
    }


@pytest.mark.slow
def test_a_run_whose_start_fails_leaves_no_run_folder_and_its_name_free(tiny_llama, tmp_path, capsys):
    runs = tmp_path / "runs"
    argv = [
        "train", "--model", f"hf:{tiny_llama}", "--env", "digit-map", "--env-args", "{}", "--steps", "1",
        "--prompts-per-step", "2", "--group-size", "2", "--max-tokens", "2", "--eval-size", "2",
        "--time-limit-min", "0", "--threads", "1", "--runs-dir", str(runs), "--name", "first",
    ]  # fmt: skip
    assert main([*argv, "--rollout-server", "http://127.0.0.1:9/v1"]) == 2  # nothing listens there
    assert "Check that the server is up" in capsys.readouterr().err
    assert not (runs / "first").exists()
    assert main([*argv, "--env-server", "http://127.0.0.1:9"]) == 2
    assert "config field 'env_server'" in capsys.readouterr().err
    assert not (runs / "first").exists()
    with serving(create_app(HFPolicy.load(tiny_llama), "tiny")) as url:  # no weight endpoints: the push fails
        assert main([*argv, "--rollout-server", url]) == 1
    err = " ".join(capsys.readouterr().err.split())  # rich wraps lines
    assert "cannot take this run's weights" in err and "no run folder was kept" in err
    assert not (runs / "first").exists()  # nor the weights written for the server
    with serving(create_app(HFPolicy.load(tiny_llama), "tiny", weight_updates=True)) as url:
        assert main([*argv, "--rollout-server", url]) == 0  # the name is free again
    assert yaml.safe_load((runs / "first" / "config.yaml").read_text())["rollout_server"] == url


@pytest.mark.slow
def test_a_failed_weight_push_leaves_no_weights_behind(tiny_llama, tmp_path):
    learner = HFPolicy.load(tiny_llama)
    weights = tmp_path / "weights"
    with serving(create_app(HFPolicy.load(tiny_llama), "tiny")) as url:  # no weight endpoints
        refused = RolloutServerPolicy(url, learner, weights_dir=weights)
        with pytest.raises(PolicyError):
            refused.sync(learner)
        refused.close()
    assert list(weights.iterdir()) == []
    with serving(create_app(HFPolicy.load(tiny_llama), "tiny", weight_updates=True)) as url:
        client = RolloutServerPolicy(url, learner, weights_dir=weights, backoff_s=0.01)
        client.sync(learner)
    learner.version = 1  # the server is gone: this push fails
    with pytest.raises(PolicyError):
        client.sync(learner)
    assert [p.name for p in weights.iterdir()] == [f"v000000-{client._session}"]  # the loaded ones: a reload needs them
    client.close()
    assert list(weights.iterdir()) == []
