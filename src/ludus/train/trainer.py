"""The GRPO training loop: sample groups, score them, update, evaluate, checkpoint, resume.

One RL step::

    tasks (prompts_per_step) ─▶ G rollouts each ─▶ rewards ─▶ group advantages
        ─▶ ppo_epochs × minibatches of clipped-ratio updates ─▶ metrics line

By default (``max_staleness: 0``) a step samples with the current weights, then learns, in
lockstep: seeded runs are reproducible and resume exactly. With ``max_staleness: k`` a sampler
thread samples the next steps' groups with a copy of the weights while the learner updates
(train/sampler.py): samples are up to ``k`` updates old, the loss applies importance weights,
and timing decides which groups a step gets, so runs are not bit-reproducible.

Run folder ``<runs_dir>/<name>/``: ``config.yaml``, ``metrics.jsonl`` (schema in
docs/metrics.md), ``samples.jsonl`` (a few trajectories per step), ``checkpoints/step_NNNNNN/``
and ``reward.png``. A checkpoint holds weights, optimizer state and every RNG state, so a
resumed run continues exactly as if it had never stopped. Ctrl-C or SIGTERM finish the
current step, write a checkpoint and exit; a second Ctrl-C stops at once.
"""

from __future__ import annotations

import copy
import gc
import json
import math
import os
import random
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from itertools import accumulate
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from ludus import policies
from ludus.core import registry
from ludus.core.env import Env
from ludus.core.types import Status, Task, Trajectory
from ludus.policies.base import SamplingParams, TrainablePolicy
from ludus.policies.tiny import TinyConfig, TinyPolicy
from ludus.rollout.engine import EpisodeRequest, RolloutConfig, RolloutEngine
from ludus.rollout.evaluate import env_counts
from ludus.rollout.hosts import EnvHost, ThreadHost
from ludus.train.config import ConfigError, TrainConfig, load_config
from ludus.train.grpo import group_advantages, policy_loss, turn_advantages
from ludus.train.sampler import AheadSampler, train_task
from ludus.train.supervised import base_model_recipe, make_base_model

CHECKPOINT_PREFIX = "step_"


class TrainingHalted(RuntimeError):
    """A step could not measure the policy at all (every sample an infrastructure failure)."""


@dataclass
class Sample:
    """One policy turn with its advantage: the unit of the loss."""

    prompt_ids: list[int]
    completion_ids: list[int]
    old_logprobs: list[float]  # the behaviour policy's, recorded when it sampled the turn
    advantage: float


@dataclass
class RunResult:
    run_dir: Path
    step: int
    elapsed_s: float
    eval_accuracy: list[tuple[int, float, float]]  # (step, elapsed_s, accuracy)
    interrupted: bool


class _StopFlag:
    """Turns the first SIGINT/SIGTERM into a request to stop at the next step boundary."""

    def __init__(self) -> None:
        self.requested = False

    @contextmanager
    def installed(self) -> Iterator[None]:
        import threading

        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum: int, frame: Any) -> None:
            if self.requested and signum == signal.SIGINT:
                raise KeyboardInterrupt
            self.requested = True

        old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)


def lr_factor(config: TrainConfig, step: int, elapsed_s: float = 0.0) -> float:
    """Learning-rate multiplier at RL step ``step`` (0-based): linear warm-up, then the schedule
    (``constant``, ``cosine`` or ``linear`` decay to 0, or ``wsd``: constant, then linear decay to 0
    over the last ``lr_decay_frac`` of the run).

    The schedule's progress is the larger of steps done / ``steps`` and, with a time limit,
    elapsed / ``time_limit_min``: it anneals toward whichever budget ends the run, so a
    10-minute run ends annealed on a slow laptop and a fast server alike."""
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    if config.lr_schedule == "constant":
        return 1.0
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    if config.time_limit_min:
        progress = max(progress, elapsed_s / (config.time_limit_min * 60))
    progress = min(1.0, progress)
    if config.lr_schedule == "linear":
        return 1.0 - progress
    if config.lr_schedule == "wsd":  # warmup-stable-decay (MiniCPM, 2024): fast while learning, stable at the end
        return min(1.0, (1.0 - progress) / config.lr_decay_frac)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def make_env_factory(config: TrainConfig) -> Callable[[], Env]:
    cls = registry.env_class(config.env)
    try:
        cls(**config.env_args)
    except TypeError as exc:
        raise ConfigError(f"config field 'env_args' does not fit environment {config.env!r}: {exc}") from exc
    return lambda: cls(**config.env_args)


def load_policy(config: TrainConfig, env: Env, log: Callable[[str], None]) -> TrainablePolicy:
    """The policy to train: the embedded tiny model (warm-started into a cached base model), or a
    saved folder / ``hf:PATH`` checkpoint read through :func:`ludus.policies.load_policy`."""
    if config.model != "tiny":
        return _load_trainable(config.model, config.model_args)
    try:
        TinyConfig(**config.tiny)
    except TypeError as exc:
        raise ConfigError(f"config field 'tiny' has an unknown model setting: {exc}") from exc
    if config.warmstart_steps == 0:
        return TinyPolicy(TinyConfig(**config.tiny), seed=config.seed)
    recipe = base_model_recipe(
        config.env,
        config.env_args,
        config.tiny,
        config.seed,
        config.warmstart_steps,
        config.warmstart_batch,
        config.warmstart_lr,
    )
    policy, path, created = make_base_model(env, recipe)
    log(f"{'created' if created else 'loaded cached'} base model {path}")
    return policy


def _load_trainable(spec: str, options: dict[str, Any]) -> TrainablePolicy:
    try:
        policy = policies.load_policy(spec, **options)
    except (ValueError, OSError, ImportError) as exc:
        raise ConfigError(f"config field 'model' ({spec!r}): {exc}") from exc
    if not isinstance(policy, TrainablePolicy):  # e.g. a model server, which holds no weights here
        policy.close()
        raise ConfigError(f"config field 'model' ({spec!r}) loads a {type(policy).__name__}, which cannot be trained")
    if options and isinstance(policy, TinyPolicy):
        raise ConfigError(f"config field 'model_args' applies to transformers models; {spec!r} is a tiny model")
    return policy


def rollout(
    policy: TrainablePolicy,
    env_factory: Callable[[], Env],
    tasks: list[Task],
    sampling: SamplingParams,
    host: EnvHost | None = None,
    seeds: list[int] | None = None,
    generator: torch.Generator | None = None,
) -> list[Trajectory]:
    """One trajectory per task, in order, on the rollout engine in lockstep: every turn is one
    batch of all live episodes in task order, so a seeded generator makes a step reproducible
    (resume continues exactly) however the environments' threads are scheduled."""
    seeds = seeds if seeds is not None else list(range(len(tasks)))
    config = RolloutConfig(lockstep=True, max_batch=max(1, len(tasks)), max_episodes=max(1, len(tasks)))
    engine = RolloutEngine(policy, env_factory, sampling, config, host=host, generator=generator)
    return engine.run(
        [EpisodeRequest(t, seed, key=str(i)) for i, (t, seed) in enumerate(zip(tasks, seeds, strict=True))]
    )


def evaluate(
    policy: TrainablePolicy,
    env_factory: Callable[[], Env],
    tasks: list[Task],
    max_tokens: int,
    host: EnvHost | None = None,
) -> dict[str, float]:
    """Greedy decoding on held-out tasks: accuracy (status ``correct``) and mean reward."""
    trajs = rollout(policy, env_factory, tasks, SamplingParams(temperature=0.0, max_tokens=max_tokens), host)
    scores = [t.score for t in trajs]
    n = len(trajs)
    return {
        "eval/accuracy": sum(s is not None and s.status == Status.CORRECT for s in scores) / n,
        "eval/reward": sum(t.reward for t in trajs) / n,
        "eval/infra_errors": sum(s is not None and s.is_infra_error for s in scores),
    }


class Trainer:
    def __init__(self, config: TrainConfig, run_dir: Path, *, resume: bool = False, log: Callable[[str], None] = print):
        self.config, self.run_dir, self.log = config, run_dir, log
        self.resume = resume
        self.stop = _StopFlag()

    # ---- setup -------------------------------------------------------------------------
    @classmethod
    def create(cls, config: TrainConfig, log: Callable[[str], None] = print) -> Trainer:
        name = config.name or f"{config.env}-{datetime.now():%Y%m%d-%H%M%S}"
        run_dir = Path(config.runs_dir) / name
        if (run_dir / "config.yaml").exists():
            raise ConfigError(
                f"run folder {run_dir} already exists; resume it with `ludus train --resume {run_dir}` "
                "or choose another --name"
            )
        run_dir.mkdir(parents=True, exist_ok=True)
        config.name = name
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
        return cls(config, run_dir, log=log)

    @classmethod
    def resume_from(cls, run_dir: str | Path, log: Callable[[str], None] = print) -> Trainer:
        run_dir = Path(run_dir)
        if not (run_dir / "config.yaml").exists():
            raise ConfigError(f"{run_dir} is not a run folder (no config.yaml)")
        return cls(load_config(run_dir / "config.yaml"), run_dir, resume=True, log=log)

    # ---- checkpoints -------------------------------------------------------------------
    def _checkpoints(self) -> list[Path]:
        root = self.run_dir / "checkpoints"
        return (
            sorted(p for p in root.glob(f"{CHECKPOINT_PREFIX}*") if (p / "state.json").exists())
            if root.exists()
            else []
        )

    def _save_checkpoint(self, step: int, elapsed_s: float) -> None:
        root = self.run_dir / "checkpoints"
        final = root / f"{CHECKPOINT_PREFIX}{step:06d}"
        tmp = root / f".tmp-{step:06d}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        self.policy.save(tmp / "policy")
        torch.save(
            {
                "optimizer": self.optimizer.state_dict(),
                "generator": self.generator.get_state(),
                "torch_rng": torch.get_rng_state(),
                "python_rng": random.getstate(),
                "numpy_rng": np.random.get_state(),
                "reference": None if self.reference is None else self.reference.state_dict(),
            },
            tmp / "trainer.pt",
        )
        state: dict[str, Any] = {"step": step, "elapsed_s": elapsed_s}
        if self.sampler is not None:  # the task stream resumes where the sampler was
            state["next_group"], state["unconsumed_groups"] = self.sampler.position()
        (tmp / "state.json").write_text(json.dumps(state))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)  # a checkpoint exists whole or not at all
        for old in self._checkpoints()[: -self.config.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)

    def _load_checkpoint(self, path: Path) -> dict[str, Any]:
        state = json.loads((path / "state.json").read_text())
        saved = type(self.policy).load(path / "policy")
        self.policy.module.load_state_dict(saved.module.state_dict())
        blob = torch.load(path / "trainer.pt", weights_only=False)
        self.optimizer.load_state_dict(blob["optimizer"])
        self.generator.set_state(blob["generator"])
        torch.set_rng_state(blob["torch_rng"])
        random.setstate(blob["python_rng"])
        np.random.set_state(blob["numpy_rng"])
        if self.reference is not None and blob["reference"] is not None:
            self.reference.load_state_dict(blob["reference"])
        return state

    @staticmethod
    def _truncate_jsonl(path: Path, step: int) -> None:
        """Drop lines written after the checkpoint we resume from, so nothing is counted twice."""
        if not path.exists():
            return
        kept = [
            line for line in path.read_text().splitlines() if line.strip() and json.loads(line).get("step", 0) <= step
        ]
        path.write_text("".join(line + "\n" for line in kept))

    # ---- the loop ----------------------------------------------------------------------
    def run(self, on_metrics: Callable[[dict[str, Any]], None] | None = None) -> RunResult:
        self.host = ThreadHost(self.config.env_threads)  # environment threads for the whole run, not per step
        self.sampler: AheadSampler | None = None
        try:
            return self._run(on_metrics)
        finally:
            if self.sampler is not None:
                self.sampler.close()
            self.host.shutdown()

    def _run(self, on_metrics: Callable[[dict[str, Any]], None] | None) -> RunResult:
        c = self.config
        torch.set_num_threads(c.threads or os.cpu_count() or 1)
        self.env_factory = make_env_factory(c)
        env = self.env_factory()
        self.policy = load_policy(c, env, self.log)
        self.reference = copy.deepcopy(self.policy.module).eval() if c.beta > 0 else None
        if self.reference is not None:
            self.reference.requires_grad_(False)
        self.optimizer = torch.optim.AdamW(self.policy.module.parameters(), lr=c.lr, weight_decay=c.weight_decay)
        self.generator = torch.Generator().manual_seed(c.seed)
        random.seed(c.seed)
        np.random.seed(c.seed % 2**32)
        # everything made so far (modules, the model, the optimizer) lives for the whole run: keep
        # it out of the cyclic collector, whose full passes over it slowed rollouts by a quarter
        gc.collect()
        gc.freeze()
        train_tasks = env.task_source("train")
        eval_source = env.task_source("eval")
        eval_tasks = [
            eval_source.get(i)
            for i in range(c.eval_size if eval_source.size is None else min(c.eval_size, eval_source.size))
        ]

        step, elapsed, state = 0, 0.0, {}
        metrics_path, samples_path = self.run_dir / "metrics.jsonl", self.run_dir / "samples.jsonl"
        checkpoints = self._checkpoints() if self.resume else []
        if checkpoints:
            state = self._load_checkpoint(checkpoints[-1])
            step, elapsed = int(state["step"]), float(state["elapsed_s"])
            self.log(f"resuming {self.run_dir} from step {step}")
        self.policy.version = step
        if self.resume:
            self._truncate_jsonl(metrics_path, step)
            self._truncate_jsonl(samples_path, step)
        curve: list[tuple[int, float, float]] = [
            (m["step"], m["elapsed_s"], m["eval/accuracy"]) for m in _read_jsonl(metrics_path) if "eval/accuracy" in m
        ]

        def emit(record: dict[str, Any]) -> None:
            with metrics_path.open("a") as f:
                f.write(json.dumps(record) + "\n")
            if on_metrics is not None:
                on_metrics(record)

        def run_eval() -> None:
            self.policy.module.eval()
            record = {
                "step": step,
                "elapsed_s": round(elapsed, 3),
                **evaluate(self.policy, self.env_factory, eval_tasks, c.max_tokens, self.host),
            }
            curve.append((step, elapsed, record["eval/accuracy"]))
            emit(record)
            plot_run(self.run_dir)

        if not curve or curve[-1][0] != step:
            run_eval()
        if c.max_staleness > 0:
            self.sampler = AheadSampler(
                self.policy,
                self.env_factory,
                train_tasks,
                self._sampling(),
                groups_per_step=c.prompts_per_step,
                group_size=c.group_size,
                max_staleness=c.max_staleness,
                host=self.host,
                first_step=step,
                first_group=int(state.get("next_group", step * c.prompts_per_step)),
                replay=state.get("unconsumed_groups", []),
                seed=c.seed + step,
            )
            self.sampler.start()
        interrupted = False
        with self.stop.installed():
            while step < c.steps and not (c.time_limit_min and elapsed >= c.time_limit_min * 60):
                t0 = time.perf_counter()
                groups = self._lockstep_groups(step, train_tasks) if self.sampler is None else self.sampler.take(step)
                t_sampled = time.perf_counter()
                record, trajs = self._rl_step(step, elapsed, groups)
                step += 1
                self.policy.version = step
                if self.sampler is not None:
                    self.sampler.advance(self.policy)
                    record["sampler_wait_s"] = round(t_sampled - t0, 4)
                dt = time.perf_counter() - t0
                elapsed += dt
                tokens = record.pop("_tokens")
                record = {
                    "step": step,
                    "elapsed_s": round(elapsed, 3),
                    **record,
                    "step_time_s": round(dt, 4),
                    "tokens_per_s": round(tokens / dt, 1),
                }
                emit(record)
                with samples_path.open("a") as f:
                    for traj in trajs[: c.samples_per_step]:
                        traj.info["step"] = step
                        f.write(json.dumps({"step": step, **traj.to_dict()}) + "\n")
                last = step >= c.steps or (c.time_limit_min and elapsed >= c.time_limit_min * 60)
                if (c.eval_every and step % c.eval_every == 0) or last or self.stop.requested:
                    t_eval = time.perf_counter()
                    run_eval()
                    elapsed += time.perf_counter() - t_eval
                if (c.checkpoint_every and step % c.checkpoint_every == 0) or last or self.stop.requested:
                    self._save_checkpoint(step, elapsed)
                if self.stop.requested:
                    interrupted = True
                    self.log(f"stopped at step {step}; resume with `ludus train --resume {self.run_dir}`")
                    break
        self.policy.save(self.run_dir / "final")
        plot_run(self.run_dir)
        return RunResult(self.run_dir, step, elapsed, curve, interrupted)

    def _sampling(self) -> SamplingParams:
        c = self.config
        return SamplingParams(temperature=c.temperature, top_p=c.top_p, max_tokens=c.max_tokens)

    def _lockstep_groups(self, step: int, train_tasks: Any) -> list[list[Trajectory]]:
        """This step's groups, sampled now with the current weights."""
        c = self.config
        self.policy.module.eval()
        base = step * c.prompts_per_step
        tasks = [train_task(train_tasks, base + j) for j in range(c.prompts_per_step)]
        group_tasks = [t for t in tasks for _ in range(c.group_size)]
        seeds = [base * c.group_size + k for k in range(len(group_tasks))]
        trajs = rollout(self.policy, self.env_factory, group_tasks, self._sampling(), self.host, seeds, self.generator)
        return [trajs[i : i + c.group_size] for i in range(0, len(trajs), c.group_size)]

    def _rl_step(
        self, step: int, elapsed_s: float, groups: list[list[Trajectory]]
    ) -> tuple[dict[str, Any], list[Trajectory]]:
        c = self.config
        trajs = [t for group in groups for t in group]
        if all(t.score is not None and t.score.is_infra_error for t in trajs):
            # nothing measured the policy: a model that cannot take the prompts, a dead environment
            # server. Going on would spend the run on steps that train nothing.
            raise TrainingHalted(f"every sample of step {step + 1} failed: {trajs[0].score.reason}")  # type: ignore[union-attr]
        rewards = torch.tensor([t.reward for t in trajs]).view(len(groups), c.group_size)
        valid = torch.tensor([not (t.score and t.score.is_infra_error) for t in trajs]).view_as(rewards)
        samples = [
            Sample(turn.prompt_ids, turn.completion_ids, turn.logprobs, a)
            for traj, advantages in zip(trajs, self._turn_advantages(trajs, rewards, valid), strict=True)
            for turn, a in zip(traj.turns, advantages, strict=True)
            if a != 0.0 or c.beta > 0  # zero advantage and no KL term: no gradient, so skip the compute
        ]
        lr = c.lr * lr_factor(c, step, elapsed_s)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        stats = self._update(samples)

        r = rewards[valid]
        grouped_std = torch.where(valid, rewards, torch.nan).nan_to_num(0).std(1)
        lengths = [len(turn.completion_ids) for t in trajs for turn in t.turns]
        staleness = [step - t.policy_version for t in trajs]
        counts = {f"env/{k}": round(v / len(trajs), 4) for k, v in env_counts(trajs).items()}  # per episode
        return {
            "reward/mean": round(float(r.mean()) if r.numel() else 0.0, 4),
            "reward/std": round(float(r.std()) if r.numel() > 1 else 0.0, 4),
            "accuracy": round(
                sum(t.score is not None and t.score.status == Status.CORRECT for t in trajs) / len(trajs), 4
            ),
            "zero_variance_frac": round(float((grouped_std == 0).float().mean()), 4),
            "masked_infra_errors": int((~valid).sum()),
            "completion_len/mean": round(sum(lengths) / len(lengths), 3),
            "completion_len/max": max(lengths),
            "lr": lr,
            "staleness/mean": round(sum(staleness) / len(staleness), 4),
            "staleness/max": max(staleness),
            **counts,
            **stats,
            "_tokens": sum(lengths),
        }, trajs

    def _turn_advantages(
        self, trajs: list[Trajectory], rewards: torch.Tensor, valid: torch.Tensor
    ) -> list[list[float]]:
        """The advantage of each turn of each trajectory, by ``turn_credit`` (grpo.py)."""
        c = self.config
        if c.turn_credit == "episode":
            adv = group_advantages(rewards, valid, c.scale_rewards).flatten().tolist()
            return [[a] * len(traj.turns) for traj, a in zip(trajs, adv, strict=True)]
        width = max(len(traj.turns) for traj in trajs)
        # the return from each turn on: the sums of the turn rewards from the last turn backwards
        togo = [list(accumulate(turn.reward for turn in reversed(traj.turns)))[::-1] for traj in trajs]
        padded = torch.tensor([g + [0.0] * (width - len(g)) for g in togo]).view(*rewards.shape, width)
        adv_rows = turn_advantages(padded, rewards, valid, c.scale_rewards).view(len(trajs), width).tolist()
        return [row[: len(traj.turns)] for traj, row in zip(trajs, adv_rows, strict=True)]

    def _update(self, samples: list[Sample]) -> dict[str, float]:
        """``ppo_epochs`` passes of ``minibatches`` clipped-ratio updates. Sampling ahead
        (``max_staleness`` > 0), the ratio is taken against the *proximal* log-probs — these
        weights, before this step's first update — and the behaviour log-probs only enter the
        truncated importance weight (the decoupled objective in grpo.py)."""
        c = self.config
        totals = {"loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip_frac": 0.0, "grad_norm": 0.0}
        totals |= {"importance/mean": 0.0, "importance/capped": 0.0} if c.max_staleness else {}
        if not samples:
            return {k: 0.0 for k in totals} | {"trained_samples": 0}
        self.policy.module.train()
        size = math.ceil(len(samples) / c.minibatches)
        # proximal log-probs: with one minibatch, the first pass's own forward gives them (no
        # update has happened yet); with several, one extra forward pass before the first update
        proximal: list[torch.Tensor | None] = [None] * len(samples)
        if c.max_staleness and c.minibatches > 1:
            with torch.no_grad():
                for lo in range(0, len(samples), size):
                    chunk = samples[lo : lo + size]
                    logp, _ = self.policy.token_logprobs(
                        [s.prompt_ids for s in chunk], [s.completion_ids for s in chunk], c.temperature
                    )
                    for row, s in enumerate(chunk):
                        proximal[lo + row] = logp[row, : len(s.completion_ids)]
        n_updates = 0
        for _ in range(c.ppo_epochs):
            order = torch.randperm(len(samples), generator=self.generator).tolist()
            for lo in range(0, len(samples), size):
                indices = order[lo : lo + size]
                batch = [samples[i] for i in indices]
                prompt_ids = [s.prompt_ids for s in batch]
                completion_ids = [s.completion_ids for s in batch]
                logp, entropy = self.policy.token_logprobs(prompt_ids, completion_ids, c.temperature)
                mask = torch.zeros_like(logp, dtype=torch.bool)
                old = torch.zeros_like(logp)
                for i, s in enumerate(batch):
                    mask[i, : len(s.completion_ids)] = True
                    old[i, : len(s.old_logprobs)] = torch.tensor(s.old_logprobs)
                behaviour = None
                if c.max_staleness:
                    behaviour, old = old, torch.zeros_like(logp)
                    for row, (i, s) in enumerate(zip(indices, batch, strict=True)):
                        if proximal[i] is None:
                            proximal[i] = logp[row, : len(s.completion_ids)].detach()
                        old[row, : len(s.completion_ids)] = proximal[i]
                ref = None
                if self.reference is not None:
                    with torch.no_grad():
                        ref = _reference_logprobs(
                            self.reference, self.policy, prompt_ids, completion_ids, c.temperature
                        )
                adv = torch.tensor([s.advantage for s in batch])
                loss, st = policy_loss(
                    logp,
                    old,
                    adv,
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
                )
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.module.parameters(), c.max_grad_norm)
                self.optimizer.step()
                n_updates += 1
                totals["loss"] += st.loss
                totals["kl"] += st.kl
                totals["clip_frac"] += st.clip_fraction
                totals["grad_norm"] += float(grad_norm)
                totals["entropy"] += float((entropy.detach() * mask).sum() / mask.sum())
                if c.max_staleness:
                    totals["importance/mean"] += st.importance_mean
                    totals["importance/capped"] += st.importance_capped
        return {k: round(v / n_updates, 5) for k, v in totals.items()} | {"trained_samples": len(samples)}


def _reference_logprobs(
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
        logp, _ = policy.token_logprobs(prompt_ids, completion_ids, temperature)
    finally:
        policy.module = live
    return logp


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot_run(run_dir: Path) -> None:
    """``reward.png``: training reward per step and held-out greedy accuracy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = _read_jsonl(run_dir / "metrics.jsonl")
    train = [r for r in records if "reward/mean" in r]
    evals = [r for r in records if "eval/accuracy" in r]
    fig, ax = plt.subplots(figsize=(7, 4))
    if train:
        ax.plot(
            [r["step"] for r in train], [r["reward/mean"] for r in train], label="train reward (sampled)", alpha=0.6
        )
    if evals:
        ax.plot(
            [r["step"] for r in evals], [r["eval/accuracy"] for r in evals], "o-", label="held-out accuracy (greedy)"
        )
    ax.set_xlabel("RL step")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title(run_dir.name)
    fig.tight_layout()
    fig.savefig(run_dir / "reward.png", dpi=100)
    plt.close(fig)
