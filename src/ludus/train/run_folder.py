"""A training run's folder, ``<runs_dir>/<name>/``: what is in it and how it is written.

    config.yaml        the run's whole TrainConfig (``ludus train --resume`` reads it back)
    metrics.jsonl      one line per step and per evaluation (schema: docs/metrics.md)
    samples.jsonl      whole trajectories, samples_per_step of each step (-1: every one)
    checkpoints/step_NNNNNN/   the policy as a model folder (what `final/` holds), trainer state
                       (torch) and state.json: `--model` and `from_pretrained` read it as it is
    final/             the policy at the end
    reward.png         training reward and held-out accuracy

A checkpoint exists whole or not at all (written to a temporary folder, then renamed). On
resume, lines written after the checkpoint are dropped, so nothing is counted twice. A run whose
start fails leaves no folder behind (:meth:`RunFolder.discard`): its name is free again.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from ludus.core.types import Trajectory
from ludus.train.config import ConfigError, TrainConfig, load_config

CHECKPOINT_PREFIX = "step_"
# The config fields a resumed run may change (`ludus train --resume RUN --rollout-server URL`): where
# its parts run and how often it reports, never what it learns from or how, so that it stays the
# same run. Servers that come back at another address, another machine's cores.
RESUMABLE_FIELDS = (
    "rollout_server",
    "rollout_weights_dir",
    "env_server",
    "ray_address",
    "threads",
    "env_threads",
    "eval_every",
    "checkpoint_every",
    "keep_checkpoints",
    "samples_per_step",
)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class RunFolder:
    def __init__(self, path: Path):
        self.path = path
        self.metrics = path / "metrics.jsonl"
        self.samples = path / "samples.jsonl"
        self.checkpoint_root = path / "checkpoints"
        self.final = path / "final"

    @classmethod
    def create(cls, config: TrainConfig, name: str) -> RunFolder:
        """A new folder for ``config``, which it records; an existing run is never overwritten."""
        folder = cls(Path(config.runs_dir) / name)
        if (folder.path / "config.yaml").exists():
            raise ConfigError(
                f"run folder {folder.path} already exists; resume it with `ludus train --resume {folder.path}` "
                "or choose another --name"
            )
        if folder.path.exists() and any(folder.path.iterdir()):  # discard() may remove what the run made only
            raise ConfigError(f"{folder.path} holds files but no run (no config.yaml); choose another --name")
        folder.path.mkdir(parents=True, exist_ok=True)
        folder.write_config(config)
        return folder

    @classmethod
    def existing(cls, path: str | Path) -> RunFolder:
        folder = cls(Path(path))
        if not (folder.path / "config.yaml").exists():
            raise ConfigError(f"{folder.path} is not a run folder (no config.yaml)")
        return folder

    def config(self, overrides: dict[str, Any] | None = None) -> TrainConfig:
        """The run's config, with ``overrides`` (flag values) of :data:`RESUMABLE_FIELDS` only."""
        overrides = {name.replace("-", "_"): value for name, value in (overrides or {}).items()}
        refused = sorted(set(overrides) - set(RESUMABLE_FIELDS))
        if refused:
            raise ConfigError(
                f"a resumed run keeps its config.yaml; {', '.join(refused)} would make it another run. It may change "
                f"only where its parts run and how often it reports: {', '.join(RESUMABLE_FIELDS)}"
            )
        return load_config(self.path / "config.yaml", overrides)

    def write_config(self, config: TrainConfig) -> None:
        """Record ``config`` in config.yaml, whole or not at all (``--resume`` reads it back)."""
        tmp = self.path / ".config.yaml.tmp"
        tmp.write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
        os.replace(tmp, self.path / "config.yaml")

    def discard(self) -> None:
        """Remove the folder of a run whose start failed, so that its name is free again; a folder
        holding a checkpoint is never removed."""
        if not self.checkpoints():
            shutil.rmtree(self.path, ignore_errors=True)

    # ---- logs ----

    def append_metrics(self, record: dict[str, Any]) -> None:
        with self.metrics.open("a") as f:
            f.write(json.dumps(record) + "\n")

    def append_samples(self, step: int, trajectories: Iterable[Trajectory]) -> None:
        with self.samples.open("a") as f:
            for trajectory in trajectories:
                trajectory.info["step"] = step
                f.write(json.dumps({"step": step, **trajectory.to_dict()}) + "\n")

    def eval_curve(self) -> list[tuple[int, float, float]]:
        """(step, elapsed_s, held-out accuracy) of every evaluation logged so far."""
        return [
            (m["step"], m["elapsed_s"], m["eval/accuracy"]) for m in read_jsonl(self.metrics) if "eval/accuracy" in m
        ]

    def forget_after(self, step: int) -> None:
        """Drop log lines written after ``step`` (the checkpoint a run resumes from)."""
        for path in (self.metrics, self.samples):
            if path.exists():
                kept = [
                    line
                    for line in path.read_text().splitlines()
                    if line.strip() and json.loads(line).get("step", 0) <= step
                ]
                path.write_text("".join(line + "\n" for line in kept))

    # ---- checkpoints ----

    def checkpoints(self) -> list[Path]:
        """Complete checkpoints, oldest first."""
        if not self.checkpoint_root.exists():
            return []
        return sorted(p for p in self.checkpoint_root.glob(f"{CHECKPOINT_PREFIX}*") if (p / "state.json").exists())

    def save_checkpoint(self, step: int, write: Callable[[Path], None], state: dict[str, Any], keep: int) -> None:
        """``write(folder)`` fills a checkpoint with the weights and trainer state; ``state``
        (JSON) goes beside them. Only the newest ``keep`` checkpoints are kept."""
        final = self.checkpoint_root / f"{CHECKPOINT_PREFIX}{step:06d}"
        tmp = self.checkpoint_root / f".tmp-{step:06d}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        write(tmp)
        (tmp / "state.json").write_text(json.dumps(state))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)  # a checkpoint exists whole or not at all
        for old in self.checkpoints()[:-keep]:
            shutil.rmtree(old, ignore_errors=True)

    # ---- the plot ----

    def plot(self) -> None:
        """``reward.png``: training reward per step and held-out greedy accuracy."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        records = read_jsonl(self.metrics)
        train = [r for r in records if "reward/mean" in r]
        evals = [r for r in records if "eval/accuracy" in r]
        fig, ax = plt.subplots(figsize=(7, 4))
        if train:
            ax.plot(
                [r["step"] for r in train], [r["reward/mean"] for r in train], label="train reward (sampled)", alpha=0.6
            )
        if evals:
            ax.plot(
                [r["step"] for r in evals],
                [r["eval/accuracy"] for r in evals],
                "o-",
                label="held-out accuracy (greedy)",
            )
        ax.set_xlabel("RL step")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
        ax.set_title(self.path.name)
        fig.tight_layout()
        fig.savefig(self.path / "reward.png", dpi=100)
        plt.close(fig)
