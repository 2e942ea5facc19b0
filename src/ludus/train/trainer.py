"""The training loop: sample groups, learn from them (grpo.py), evaluate, checkpoint, resume.

One RL step::

    tasks (prompts_per_step) ─▶ G rollouts each ─▶ rewards ─▶ grpo.build_samples ─▶ grpo.update
        ─▶ a metrics line

A step's groups come from a sampler (sampler.py). By default (``max_staleness: 0``) it samples
with the current weights, then the learner learns, in lockstep: seeded runs are reproducible and
resume exactly. With ``max_staleness: k`` it samples the next steps' groups in its own thread with
a copy of the weights while the learner updates: samples are up to ``k`` updates old, the loss
applies importance weights, and timing decides which groups a step gets, so runs are not
bit-reproducible. With
``rollout_server`` an inference server (vLLM, ``ludus serve-model``) samples instead of this
process — token ids in and out, the learner's weights pushed to it after every update
(policies/rollout_server.py) — in lockstep or ahead alike.

The run folder (run_folder.py) holds the config, metrics, samples, checkpoints and plot. A
checkpoint holds weights, optimizer state and every RNG state, so a resumed run continues
exactly as if it had never stopped. Ctrl-C or SIGTERM finish the current step, write a
checkpoint and exit; a second Ctrl-C stops at once. A step that cannot finish (every sample an
infrastructure failure: a dead server; a weight push that failed) stops the run with
``TrainingHalted`` after checkpointing the last completed step, never a half-applied update. A run
whose start fails leaves no run folder behind.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import json
import math
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np
import torch

from ludus import policies
from ludus.core import registry
from ludus.core.env import Env
from ludus.core.types import Score, Task, Trajectory
from ludus.policies.base import Policy, PolicyError, SamplingParams, TrainablePolicy
from ludus.policies.rollout_server import RolloutServerPolicy
from ludus.rollout.engine import RolloutConfig
from ludus.rollout.evaluate import env_counts, evaluate
from ludus.rollout.hosts import EnvHost
from ludus.rollout.placement import EnvArgsError, EnvPlacement
from ludus.rollout.remote import RemoteEnvError, UnusableEnvServer
from ludus.rollout.rescore import UntrustedTask, regrade
from ludus.train import grpo, logs, offline
from ludus.train.config import ConfigError, TrainConfig
from ludus.train.curriculum import Pick, TaskPicker, build_picker
from ludus.train.ranking import group_judge, rank_groups
from ludus.train.run_folder import CHECKPOINT_PREFIX, RunFolder
from ludus.train.sampler import AheadSampler, LockstepSampler, Sampler, StreamPosition
from ludus.train.selfplay import SelfPlay, seat_groups, win_rate
from ludus.train.supervised import base_policy, fit_context

if TYPE_CHECKING:
    from ludus.rewards.judge import Judge

Metrics = Callable[[dict[str, Any]], None]
LOGGED = "logged.jsonl"  # a run's imported logs (offline, replay), as it learns from them


class TrainingHalted(RuntimeError):
    """A step could not finish: it could not measure the policy at all (every sample an
    infrastructure failure), or its weights could not reach the rollout server."""


@dataclass
class RunResult:
    run_dir: Path
    step: int
    elapsed_s: float
    eval_accuracy: list[tuple[int, float, float]]  # (step, elapsed_s, accuracy)
    interrupted: bool


@dataclass(frozen=True)
class ResumePoint:
    """What a checkpoint of ``step`` holds besides the weights and the optimizer (state.json and
    the RNGs), taken after each step: a run that halts in the next step saves it, as long as the
    learner has not taken an optimizer step since (``updates``)."""

    step: int
    updates: int
    state: dict[str, Any]
    rngs: dict[str, Any]


class _StopFlag:
    """Turns the first SIGINT/SIGTERM into a request to stop at the next step boundary."""

    def __init__(self) -> None:
        self.requested = False

    @contextmanager
    def installed(self) -> Iterator[None]:
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


def default_threads() -> int:
    """Torch's CPU threads for ``threads: 0``: ``$OMP_NUM_THREADS`` where it is set (OpenMP's own
    setting, which a shared machine or a test suite running jobs side by side sets to 1: threads
    that outnumber the free cores spin-wait, and a step takes several times longer), else every core."""
    first = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(first) if first.isdigit() and int(first) > 0 else os.cpu_count() or 1


def env_placement(config: TrainConfig) -> EnvPlacement:
    """Where the run's environments run (threads here, env servers or Ray actors)."""
    return EnvPlacement(
        config.env_threads,
        env_servers=tuple(config.env_servers),
        ray=config.ray,
        ray_address=config.ray_address or None,
        ray_actors=config.ray_actors,
    )


def make_env_factory(config: TrainConfig) -> tuple[Callable[[], Env], Env | None]:
    """The environment of ``config.env``, checked to accept ``env_args`` by making one; with env
    servers, a :class:`RemoteEnv` on the first, checked to serve ``config.env`` with these
    ``env_args``. Returns the factory and the environment the check made, open (``build_picker``
    reads it), or ``None`` for a mixture, whose every entry ``build_picker`` makes and checks."""
    try:
        if config.envs and not config.env_servers:
            entry = config.envs[0]
            return registry.factory(entry["name"], entry.get("args", {})), None
        return env_placement(config).env_factory(config.env, config.env_args)
    except UnusableEnvServer as exc:
        raise ConfigError(f"config field 'env_server': {exc}") from None
    except EnvArgsError as exc:
        raise ConfigError(f"config field 'env_args': {exc}") from exc
    except (registry.UnknownEnvError, registry.EnvLoadError) as exc:
        raise ConfigError(f"config field {'envs' if config.envs else 'env'}: {exc}") from None


def warmstart_envs(config: TrainConfig, arm_envs: list[Env]) -> list[Env]:
    """The environments the tiny model's warm start reads reference answers from: those of the
    run's arms (every environment of a mixture, every level of a curriculum: ``build_picker``'s),
    or for an env server (whose answers stay there) the same environment made here."""
    if not (config.model == "tiny" and config.warmstart_steps):
        return []
    if not config.env_servers:
        return list(arm_envs)
    try:
        return [registry.make(config.env, **config.env_args)]
    except (registry.UnknownEnvError, registry.EnvLoadError, TypeError) as exc:
        raise ConfigError(
            f"the tiny model's warm start reads reference answers from {config.env!r} made here, which failed "
            f"({exc}); install that environment here, set warmstart_steps: 0, or train model: hf:PATH"
        ) from None


def close_start_envs(arm_envs: list[Env], warmstart: list[Env]) -> None:
    """Close what a run's start read from: the arms' environments and the warm start's, which are
    mostly the same ones (each closed once)."""
    for env in {id(env): env for env in [*arm_envs, *warmstart]}.values():
        env.close()


def load_trainable(config: TrainConfig, envs: list[Env], log: Callable[[str], None]) -> TrainablePolicy:
    """The policy to train: the embedded model's cached base (supervised.py), or a saved folder /
    ``hf:PATH`` checkpoint read by :func:`ludus.policies.load_policy` (the config has already
    refused model servers, whose weights are not here)."""
    if config.model == "tiny":
        return base_policy(config, envs, log)
    try:
        policy = policies.load_policy(config.model, **config.model_args)
    except (ValueError, OSError, ImportError) as exc:
        raise ConfigError(f"config field 'model' ({config.model!r}): {exc}") from exc
    if not isinstance(policy, TrainablePolicy):
        raise ConfigError(
            f"config field 'model' ({config.model!r}) loads a {type(policy).__name__}, which cannot be trained"
        )
    return policy


def sampling_params(config: TrainConfig) -> SamplingParams:
    return SamplingParams(temperature=config.temperature, top_p=config.top_p, max_tokens=config.max_tokens)


def step_metrics(step: int, groups: list[list[Trajectory]]) -> dict[str, Any]:
    """What a step's samples say about the policy (the update's own numbers come from grpo.update)."""
    trajs = [t for group in groups for t in group]
    rewards, valid = grpo.rewards_and_validity(groups)
    r = rewards[valid]
    grouped_std = torch.where(valid, rewards, torch.nan).nan_to_num(0).std(1)
    gradable = [t for t in trajs if t.score is not None and not t.score.is_infra_error]
    lengths = [len(turn.completion_ids) for t in trajs for turn in t.turns]
    staleness = [step - t.policy_version for t in trajs]
    return {
        "reward/mean": round(float(r.mean()) if r.numel() else 0.0, 4),
        "reward/std": round(float(r.std()) if r.numel() > 1 else 0.0, 4),
        "accuracy": round(sum(t.score.correct for t in gradable) / len(gradable), 4),  # type: ignore[union-attr]
        "zero_variance_frac": round(float((grouped_std == 0).float().mean()), 4),
        "masked_infra_errors": int((~valid).sum()),
        "completion_len/mean": round(sum(lengths) / len(lengths), 3) if lengths else 0.0,  # no turns: an
        "completion_len/max": max(lengths, default=0),  # opponent that forfeited before the learner moved
        "staleness/mean": round(sum(staleness) / len(staleness), 4),
        "staleness/max": max(staleness),
        **{f"env/{k}": round(v / len(trajs), 4) for k, v in env_counts(trajs).items()},  # per episode
        **{f"reward/{k}": v for k, v in component_means(gradable).items()},  # a rubric's criteria
        "_tokens": sum(lengths),
    }


def mixture_metrics(sampled: list[tuple[Pick, list[Trajectory]]]) -> dict[str, Any]:
    """Per environment of a mixture: groups sampled, mean reward and accuracy of measured samples,
    infrastructure failures (one environment's failures must not hide behind the others' numbers)."""
    by_label: dict[str, list[Trajectory]] = {}
    groups: dict[str, int] = {}
    for pick, group in sampled:
        by_label.setdefault(pick.arm.label, []).extend(group)
        groups[pick.arm.label] = groups.get(pick.arm.label, 0) + 1
    out: dict[str, Any] = {}
    for label, trajs in sorted(by_label.items()):
        measured = [t for t in trajs if t.score is not None and not t.score.is_infra_error]
        n = max(1, len(measured))
        out[f"mix/{label}/groups"] = groups[label]
        out[f"mix/{label}/reward"] = round(sum(t.reward for t in measured) / n, 4)
        out[f"mix/{label}/accuracy"] = round(sum(t.score.correct for t in measured) / n, 4)  # type: ignore[union-attr]
        out[f"mix/{label}/infra_errors"] = len(trajs) - len(measured)
    return out


def component_means(trajectories: list[Trajectory]) -> dict[str, float]:
    """Each score component's mean over the trajectories that have it (a rubric's criteria, measured
    ones included: the true metric logged beside a reward model's proxy)."""
    values: dict[str, list[float]] = {}
    for t in trajectories:
        for name, value in (t.score.components if t.score is not None else {}).items():
            values.setdefault(name, []).append(value)
    return {name: round(sum(v) / len(v), 4) for name, v in sorted(values.items())}


class Trainer:
    """``Trainer.create(config).run()`` trains; ``Trainer.resume_from(run_dir).run()`` continues."""

    def __init__(
        self,
        config: TrainConfig,
        folder: RunFolder,
        env_factory: Callable[[], Env],
        *,
        first_env: Env | None = None,
        resume: bool = False,
        log: Callable[[str], None] = print,
    ):
        """``first_env``: an environment ``env_factory`` made already (the config's check), which
        the run's start reads instead of making another; ``run`` closes it."""
        self.config, self.folder, self.env_factory, self.log = config, folder, env_factory, log
        self.first_env = first_env
        self.resume = resume
        self.resumed_with: dict[str, Any] = {}  # fields a resumed run changed (resume_from's overrides)
        self.updates = 0  # optimizer steps taken by this process
        self.stop = _StopFlag()
        # what a run holds, all built by _start (run() closes them)
        self.host: EnvHost | None = None  # where environments run, for the whole run, not per step
        self.ranker: tuple[Judge, int] | None = None  # RULER-style rewards (ranking.py)
        self.picker: TaskPicker
        self.learner: grpo.Learner
        self.inference_server: RolloutServerPolicy | None = None  # generation on vLLM / serve-model (rollout_server)
        self.sampler: Sampler | None = None  # none for offline training: nothing is sampled
        self.logged: offline.LoggedBatches | None = None  # the groups of offline's or replay's logs
        self.logged_weights: dict[int, float] = {}  # offline: each logged episode's weight
        self.unpushed: str | None = None  # why the last update's weights did not reach the inference server
        self.actors: dict[str, Policy] = {}  # the engine's other policies: config actors, self-play's pool
        self.self_play: SelfPlay | None = None  # the pool and the ratings of a self-play run
        self.scripted: dict[str, tuple[Callable[[], Env], tuple[Task, ...]]] = {}  # self-play: eval per player

    @property
    def run_dir(self) -> Path:
        return self.folder.path

    @property
    def policy(self) -> TrainablePolicy:
        """The policy being trained (made when the run starts)."""
        return self.learner.policy

    @classmethod
    def create(cls, config: TrainConfig, log: Callable[[str], None] = print) -> Trainer:
        """A new run. The config and the environment are checked first: nothing is written for a run
        that cannot start."""
        config.validate()
        env_factory, first = make_env_factory(config)
        config.name = config.name or f"{'mix' if config.envs else config.env}-{datetime.now():%Y%m%d-%H%M%S}"
        try:
            folder = RunFolder.create(config, config.name)
        except BaseException:
            if first is not None:
                first.close()
            raise
        return cls(config, folder, env_factory, first_env=first, log=log)

    @classmethod
    def resume_from(
        cls, run_dir: str | Path, overrides: dict[str, Any] | None = None, log: Callable[[str], None] = print
    ) -> Trainer:
        """The run in ``run_dir``, from its last checkpoint. ``overrides`` may change the fields of
        ``run_folder.RESUMABLE_FIELDS`` (a server back at another address), recorded in its
        config.yaml once the run has started with them."""
        folder = RunFolder.existing(run_dir)
        saved, config = folder.config(), folder.config(overrides)
        env_factory, first = make_env_factory(config)
        trainer = cls(config, folder, env_factory, first_env=first, resume=True, log=log)
        trainer.resumed_with = {k: v for k, v in config.to_dict().items() if v != getattr(saved, k)}
        return trainer

    # ---- the loop ----------------------------------------------------------------------

    def run(self, on_metrics: Metrics | None = None) -> RunResult:
        c = self.config
        try:
            step, elapsed = self._start()
            curve = self.folder.eval_curve()

            def emit(record: dict[str, Any]) -> None:
                self.folder.append_metrics(record)
                if on_metrics is not None:
                    on_metrics(record)

            def run_eval() -> None:
                record = {"step": step, "elapsed_s": round(elapsed, 3), **self._evaluate(step)}
                curve.append((step, elapsed, record["eval/accuracy"]))
                emit(record)
                self.folder.plot()

            if not curve or curve[-1][0] != step:
                try:
                    run_eval()
                except TrainingHalted:
                    if not self.resume:  # nothing was trained: like a run whose start failed, no folder
                        self.folder.discard()
                    raise
            if self.sampler is not None:
                self.sampler.start()
            interrupted = False
            with self.stop.installed():
                mark = self._mark(step, elapsed)  # what a step that cannot finish checkpoints
                try:
                    while step < c.steps and not self._out_of_time(elapsed):
                        record, dt = self._step(step, elapsed)
                        step, elapsed = step + 1, elapsed + dt
                        emit({"step": step, "elapsed_s": round(elapsed, 3), **record})
                        last = step >= c.steps or self._out_of_time(elapsed)
                        due = (c.eval_every and step % c.eval_every == 0) or last or self.stop.requested
                        if due and self.unpushed is None:
                            t_eval = time.perf_counter()
                            run_eval()
                            elapsed += time.perf_counter() - t_eval
                        mark = self._mark(step, elapsed)
                        if self.unpushed is not None:
                            raise TrainingHalted(self.unpushed)
                        if (c.checkpoint_every and step % c.checkpoint_every == 0) or last or self.stop.requested:
                            self._save_checkpoint(mark)
                        if self.stop.requested:
                            interrupted = True
                            self.log(f"stopped at step {step}; resume with `ludus train --resume {self.run_dir}`")
                            break
                except Exception as exc:
                    self._halt(mark, exc)
            self.learner.policy.save(self.folder.final)  # reward.png is already drawn: the last step evaluated
            return RunResult(self.run_dir, step, elapsed, curve, interrupted)
        finally:
            for part in (self.sampler, self.inference_server, self.ranker and self.ranker[0], *self.actors.values()):
                if part is not None:
                    part.close()
            if self.host is not None:
                self.host.shutdown()

    def _start(self) -> tuple[int, float]:
        """Everything before the first step, built once and in this order: the environments' host,
        the task picker (environments, levels, held-out tasks), the policy with its optimizer,
        reference weights and RNGs, the inference server's client, the checkpoint resumed from
        (which fills them), the sampler. Returns the step and elapsed seconds the run continues
        from. A new run whose start fails leaves no run folder (its name is free again); a resumed
        run records the fields it changed in its config.yaml once it has started with them."""
        c = self.config
        first, self.first_env = self.first_env, None  # made by the config's check: build_picker reads it
        try:
            self.host = env_placement(c).host()
            self.ranker = group_judge(c.group_judge) if c.group_judge else None
            torch.set_num_threads(c.threads or default_threads())
            self.picker, arm_envs = build_picker(c, self.env_factory, first)
            first = None  # the picker's now
            self.actors.update(self._load_actors())
            self._check_seats(arm_envs)
            if c.self_play:
                self._start_self_play(arm_envs[0])
            policy = self._load_policy(arm_envs)
            reference = copy.deepcopy(policy.module).eval().requires_grad_(False) if c.beta > 0 else None
            optimizer = torch.optim.AdamW(policy.module.parameters(), lr=c.lr, weight_decay=c.weight_decay)
            optimizer.register_step_post_hook(self._count_update)
            self.learner = grpo.Learner(policy, optimizer, reference, torch.Generator().manual_seed(c.seed))
            random.seed(c.seed)
            np.random.seed(c.seed % 2**32)
            self.inference_server = self._connect_inference_server(policy)
            self.logged = self._read_logs(policy)
            step, elapsed, position = self._restore()
            if self.inference_server is not None:
                self._check_inference_server(step)
            self.sampler = None if c.offline else self._make_sampler(position)
        except BaseException:
            if first is not None:
                first.close()
            if not self.resume:
                self.folder.discard()
            raise
        # everything made so far (modules, the model, the optimizer) lives for the whole run: keep
        # it out of the cyclic collector, whose full passes over it slowed rollouts by a quarter
        gc.collect()
        gc.freeze()
        if self.resumed_with:
            self.folder.write_config(c)
            changed = ", ".join(f"{name}: {value}" for name, value in self.resumed_with.items())
            self.log(f"resumed with {changed} (recorded in {self.run_dir / 'config.yaml'})")
        return step, elapsed

    def _load_policy(self, arm_envs: list[Env]) -> TrainablePolicy:
        """The policy to train, the embedded model's context first sized to the run's tasks as the
        arms' environments (``build_picker``'s, closed here) show them."""
        c = self.config
        warmstart = warmstart_envs(c, arm_envs)
        try:
            if fit_context(c, zip(self.picker.arms.values(), arm_envs, strict=True), warmstart, self.log):
                self.folder.write_config(c)  # a resumed run reads the context back
            return load_trainable(c, warmstart, self.log)
        finally:
            close_start_envs(arm_envs, warmstart)

    def _make_sampler(self, position: StreamPosition) -> Sampler:
        """Lockstep (``max_staleness: 0``; with the learner's generator, so that one seeded stream
        makes the run reproducible) or ahead of the learner (its own), on this process's policy or
        the inference server (sampler.py)."""
        c = self.config
        kind = AheadSampler if c.max_staleness > 0 else LockstepSampler
        return kind(
            self.learner.policy,
            self.env_factory,
            self.picker,
            sampling_params(c),
            c,
            self.host,  # type: ignore[arg-type] - made by _start before
            position,
            generator=None if c.max_staleness > 0 else self.learner.generator,
            behaviour=self.inference_server,
            actors=self.actors,
            task_of=None if self.self_play is None else self.self_play.task,
        )

    def _halt(self, mark: ResumePoint, exc: Exception) -> NoReturn:
        """A step could not finish: checkpoint the last completed step if the learner still holds it
        (no optimizer step since ``mark``: a half-applied update is never saved), and say where
        ``--resume`` continues. ``TrainingHalted`` (and a dead env server's error) is raised as
        ``TrainingHalted`` with that said; anything else is logged with it and raised again."""
        saved = max((int(p.name.removeprefix(CHECKPOINT_PREFIX)) for p in self.folder.checkpoints()), default=0)
        wrote = self.updates == mark.updates and mark.step > saved
        if wrote:
            self._save_checkpoint(mark)
            saved = mark.step
        resume = (
            f"{f'A checkpoint of step {saved} was written. ' if wrote else ''}Once that is fixed, `ludus train "
            f"--resume {self.run_dir}` continues from step {saved} (add --rollout-server URL or --env-server URL if "
            "a server came back at another address)"
        )
        if isinstance(exc, TrainingHalted):
            raise TrainingHalted(f"{exc}. {resume}") from None
        # an env server also serves the tasks: one that died fails the next task, not only the episodes
        env_server = next((e for e in (exc, exc.__cause__) if isinstance(e, RemoteEnvError)), None)
        if env_server is not None:
            raise TrainingHalted(f"the env server failed in step {mark.step + 1}: {env_server}. {resume}") from None
        self.log(f"stopped by an error at step {mark.step + 1}. {resume}")
        raise exc

    def _count_update(self, *_: Any) -> None:
        """After every optimizer step: the learner's weights have moved (see :meth:`_halt`)."""
        self.updates += 1

    def _out_of_time(self, elapsed_s: float) -> bool:
        return bool(self.config.time_limit_min) and elapsed_s >= self.config.time_limit_min * 60

    def _restore(self) -> tuple[int, float, StreamPosition]:
        """The checkpoint resumed from, if any, loaded into the learner and the picker; where the run
        continues: step, elapsed seconds and the task stream's position."""
        checkpoints = self.folder.checkpoints() if self.resume else []
        step, elapsed, state = 0, 0.0, {}
        if checkpoints:
            state = self._load_checkpoint(checkpoints[-1])
            step, elapsed = int(state["step"]), float(state["elapsed_s"])
            self.log(f"resuming {self.run_dir} from step {step}")
        self.learner.policy.version = step
        if self.resume:
            self.folder.forget_after(step)
        if "picker" in state:
            self.picker.load_state_dict(state["picker"])
        if self.self_play is not None and self.resume:
            missing = self.self_play.load_state_dict(state.get("self_play", {}), step)
            if missing:
                self.log(
                    f"self-play: the pool's {', '.join(missing)} are no longer on disk; the pool goes on without them"
                )
        next_group = int(state.get("next_group", step * self.config.prompts_per_step))
        return step, elapsed, StreamPosition(step, next_group, tuple(state.get("unconsumed_groups", ())))

    def _evaluate(self, step: int) -> dict[str, float]:
        """Greedy decoding on every arm's held-out tasks (rollout.evaluate's summary). With several
        arms each is reported as ``eval/<arm>/…``, and ``eval/accuracy`` is the mean over the
        environments of each one's target: its only arm, or a curriculum's hardest level. An
        evaluation that could grade no sample at all measured nothing: ``TrainingHalted``, never
        an accuracy of 0 (an arm of several that graded nothing is logged)."""
        self.learner.policy.module.eval()
        server = self.inference_server
        per_arm: dict[str, dict[str, float]] = {}
        ungraded: dict[str, str] = {}  # arms that graded no sample: why
        played: dict[tuple[str, ...], list[Trajectory]] = {}  # self-play: the games, by their tasks' ids
        for key, arm in self.picker.arms.items():
            size = max(1, len(arm.eval_tasks))  # greedy, every task in one lockstep batch
            # an ahead sampler may sample training replies meanwhile: only those count in rollout/*
            with server.uncounted() if server is not None else contextlib.nullcontext():
                summary = evaluate(
                    server or self.learner.policy,
                    arm.env,
                    list(arm.eval_tasks),
                    sampling=SamplingParams(temperature=0.0, max_tokens=self.config.max_tokens),
                    config=RolloutConfig(lockstep=True, max_batch=size, max_episodes=size),
                    host=self.host,
                    actors=self.actors,
                    on_trajectory=played.setdefault(tuple(t.id for t in arm.eval_tasks), []).append
                    if self.self_play
                    else None,
                )
            per_arm[key] = {
                "accuracy": summary.accuracy,
                "reward": summary.mean_reward,
                "infra_errors": summary.infra_errors,
            }
            if summary.samples == 0 and summary.infra_errors:
                ungraded[key] = summary.infra_reason
        if len(ungraded) == len(per_arm):
            raise TrainingHalted(
                f"the held-out evaluation at step {step} could not grade any of its samples (every one an "
                f"infra_error): {next(iter(ungraded.values()))}"
            )
        for key, reason in ungraded.items():
            self.log(f"the held-out evaluation of {key} at step {step} graded no sample (infra_error): {reason}")
        targets = [per_arm[ladder.arms[-1].key] for ladder in self.picker.ladders]
        record = {
            "eval/accuracy": round(sum(t["accuracy"] for t in targets) / len(targets), 4),
            "eval/reward": round(sum(t["reward"] for t in targets) / len(targets), 4),
            "eval/infra_errors": sum(t["infra_errors"] for t in per_arm.values()),
        }
        if len(per_arm) > 1:
            record |= {f"eval/{key}/{name}": v for key, values in per_arm.items() for name, v in values.items()}
        if self.self_play is not None:
            record |= self._evaluate_players(played)
        return record

    def _load_actors(self) -> dict[str, Policy]:
        """The config's ``actors``: each a policy that may play a seat of a game (``actor:NAME``)."""
        loaded = {}
        for name, spec in self.config.actors.items():
            try:
                loaded[name] = policies.load_policy(spec)
            except (ValueError, OSError, ImportError, PolicyError) as exc:
                raise ConfigError(f"config field 'actors': {name} ({spec!r}): {exc}") from exc
        return loaded

    def _check_seats(self, envs: list[Env]) -> None:
        """A game's other seat must be someone this run has: the learner plays both seats only in
        self-play (which trains each seat on its own result), and an actor must be loaded."""
        for env in envs:
            opponent = getattr(env, "opponent", None)  # a GameEnv's (envs/games/)
            if not isinstance(opponent, str) or getattr(env, "game", None) is None:
                continue
            if opponent == "self" and not self.config.self_play:
                raise ConfigError(
                    "env_args opponent 'self' plays the learner on both seats: train it with self_play: true, "
                    "which trains each seat on its own result (without it, one seat's result would pay the other's moves)"
                )
            actor = opponent.removeprefix("actor:")
            if opponent.startswith("actor:") and actor not in self.actors:
                known = ", ".join(sorted(self.actors)) or "none"
                raise ConfigError(
                    f"env_args opponent {opponent!r} names an actor this run does not have (config field 'actors': {known})"
                )

    def _start_self_play(self, env: Env) -> None:
        """Self-play's pool (under the run's ``pool/``) and each scripted player's held-out games:
        the game's own eval starts, against that player."""
        c = self.config
        game = getattr(env, "game", None)  # a GameEnv's (envs/games/), known here by its face alone
        if not callable(getattr(game, "players", None)):
            raise ConfigError(f"config field 'self_play' needs a two-player game (docs/games.md); {c.env!r} is not one")
        unknown = [p for p in c.pool_scripted if p not in game.players()]  # type: ignore[union-attr]
        if unknown:
            raise ConfigError(
                f"config field 'pool_scripted': {', '.join(map(repr, unknown))} is not a scripted player of "
                f"{c.env!r} ({', '.join(sorted(game.players()))})"  # type: ignore[union-attr]
            )
        self.self_play = SelfPlay(
            self.run_dir / "pool",
            every=c.pool_every,
            size=c.pool_size,
            sampling=c.pool_sampling,
            latest=c.self_play_latest,
            seed=c.seed,
            league=c.pool_scripted,
            model_args=c.model_args,
            actors=self.actors,
        )
        self.self_play.calibrate(env)
        for player in game.players():  # type: ignore[union-attr]
            make = registry.factory(c.env, {**c.env_args, "opponent": player})
            with contextlib.closing(make()) as scripted:
                source = scripted.task_source("eval")
                self.scripted[player] = (make, tuple(source.get(i) for i in range(c.eval_size)))

    def _evaluate_players(self, done: dict[tuple[str, ...], list[Trajectory]]) -> dict[str, float]:
        """Greedy games on held-out starts against each scripted player: win, draw and loss rates,
        and the ratings they move. ``done``: games the evaluation of the run's arm played, by their
        tasks; against the arm's own scripted opponent they are these games, not played twice."""
        assert self.self_play is not None
        record: dict[str, float] = {}
        played: dict[str, list[Trajectory]] = {}
        for player, (make, tasks) in self.scripted.items():
            games = done.get(tuple(t.id for t in tasks), [])
            if {g.task.id: g.task for g in games} != {t.id: t for t in tasks}:  # not these games: play them
                games, size = [], len(tasks)
                evaluate(
                    self.learner.policy,
                    make,
                    list(tasks),
                    sampling=SamplingParams(temperature=0.0, max_tokens=self.config.max_tokens),
                    config=RolloutConfig(lockstep=True, max_batch=size, max_episodes=size),
                    host=self.host,
                    on_trajectory=games.append,
                )
            played[player] = games
            record |= {f"eval/vs_{player}/{name}": value for name, value in win_rate(games).items()}
        self.self_play.record_eval(played)
        return record | self.self_play.elo.metrics()

    def _step(self, step: int, elapsed_s: float) -> tuple[dict[str, Any], float]:
        """One RL step: take the step's groups from the sampler (and the replayed logs), learn; its
        metrics and seconds. Offline: one step on logged groups (:meth:`_offline_step`)."""
        if self.sampler is None:
            return self._offline_step(step, elapsed_s)
        c, loss = self.config, self.config.loss()
        t0 = time.perf_counter()
        batch = self.sampler.take(step)
        groups = [group for _, group in batch.kept]
        sampled = [group for _, group in batch.sampled]
        if self.self_play is not None:  # GRPO per task and seat (SPIRAL's role-conditioned baseline)
            groups = [seat for group in groups for seat in seat_groups(group)]
        if self.ranker is not None:
            judge, judge_rounds = self.ranker
            rank_groups(judge, groups, rounds=judge_rounds, seed=c.seed * 1_000_003 + step)
        trajs = [t for group in sampled for t in group]
        if all(t.score is not None and t.score.is_infra_error for t in trajs):
            # nothing measured the policy: a model that cannot take the prompts, a dead environment
            # server. Going on would spend the run on steps that train nothing.
            raise TrainingHalted(f"every sample of step {step + 1} failed: {trajs[0].score.reason}")  # type: ignore[union-attr]
        lr = c.lr * lr_factor(c, step, elapsed_s)
        for group in self.learner.optimizer.param_groups:
            group["lr"] = lr
        record = step_metrics(step, sampled)
        if len(self.picker.ladders) > 1:
            record |= mixture_metrics(batch.sampled)
        record |= self.picker.metrics()
        if c.overlong_filter or c.overlong_buffer:
            record |= grpo.overlong_metrics(sampled, loss)
        record |= grpo.chaining_metrics(sampled)
        if c.dynamic_sampling:
            record |= {"dynamic/groups_sampled": len(sampled), "dynamic/groups_kept": len(groups)}
            record |= {"dynamic/rounds": batch.rounds} if batch.rounds else {}
        replaying = self.logged is not None and (not c.replay_steps or step < c.replay_steps)
        replayed = self.logged.take(step, offline.replay_size(c)) if replaying else []
        if replayed:
            record |= offline.replay_metrics(replayed)
        # dynamic sampling may keep no group; a logged group has the size the log gave it, so each
        # gets its advantages alone
        samples = grpo.build_samples(groups, loss) if groups else []
        samples += [sample for group in replayed for sample in grpo.build_samples([group], loss)]
        try:
            record |= {"lr": lr, **grpo.update(self.learner, samples, loss)}
        except grpo.SamplerMismatch as exc:
            raise TrainingHalted(
                f"step {step + 1}: the rollout server {c.rollout_server} no longer samples as the learner: {exc} "
                "(rollout_logprob_tolerance). It did not load the pushed weights (or lags a version), serves "
                "another model, or reports log-probs of another distribution (vLLM without --logprobs-mode "
                "processed_logprobs). Nothing was learned from this step"
            ) from None
        self.learner.policy.version = step + 1
        if self.self_play is not None:
            record |= self.self_play.record_training(sampled)
            self.self_play.maybe_add(step + 1, self.learner.policy)
        record |= self._advance_sampler(step + 1)
        if batch.wait_s is not None:
            record["sampler_wait_s"] = round(batch.wait_s, 4)
        self.folder.append_samples(step + 1, trajs if c.samples_per_step < 0 else trajs[: c.samples_per_step])
        dt = time.perf_counter() - t0
        tokens = record.pop("_tokens")
        return record | {"step_time_s": round(dt, 4), "tokens_per_s": round(tokens / dt, 1)}, dt

    def _offline_step(self, step: int, elapsed_s: float) -> tuple[dict[str, Any], float]:
        """One step of offline training: ``prompts_per_step`` logged groups, weighted fine-tuning."""
        c = self.config
        assert self.logged is not None
        t0 = time.perf_counter()
        groups = self.logged.take(step, c.prompts_per_step)
        lr = c.lr * lr_factor(c, step, elapsed_s)
        for group in self.learner.optimizer.param_groups:
            group["lr"] = lr
        samples = offline.build_samples(groups, self.logged_weights, c)
        record = offline.step_metrics(groups, self.logged_weights) | {"lr": lr}
        record |= offline.update(self.learner, samples, c)
        self.learner.policy.version = step + 1
        dt = time.perf_counter() - t0
        tokens = sum(len(s.completion_ids) for s in samples)
        return record | {"step_time_s": round(dt, 4), "tokens_per_s": round(tokens / dt, 1)}, dt

    def _read_logs(self, policy: TrainablePolicy) -> offline.LoggedBatches | None:
        """The logged groups of ``offline`` or ``replay``: read and tokenised, their missing behaviour
        log-probs computed by the start weights, and kept in the run folder (``logged.jsonl``), which a
        resumed run reads back, so that it learns from exactly the same episodes."""
        c = self.config
        paths = c.offline or c.replay
        if not paths:
            return None
        saved = self.run_dir / LOGGED
        if self.resume and saved.exists():
            with saved.open(encoding="utf-8") as lines:
                trajectories = [Trajectory.from_json(line) for line in lines if line.strip()]
        else:
            with self._log_grader() as grade:
                trajectories, report = logs.read_logs(paths, policy, temperature=c.temperature, grade=grade)
            self.log(report.summary())
            for error in report.errors[:5]:
                self.log(f"  {error}")
            (self.run_dir / "logged.json").write_text(json.dumps(report.to_dict(), indent=1))
            written = saved.with_name(saved.name + ".partial")  # renamed when whole: a resume reads all or nothing
            with written.open("w", encoding="utf-8") as out:
                for trajectory in trajectories:
                    out.write(trajectory.to_json() + "\n")
            written.replace(saved)
        groups = logs.grouped(trajectories)
        if c.replay:
            groups = offline.replay_groups(groups, c)
        if not groups:
            raise ConfigError(
                f"the logs {', '.join(paths)} hold no episode to learn from"
                + (" (replay needs tasks tried several times with different rewards)" if c.replay else "")
                + f"; see {self.run_dir / 'logged.json'}"
            )
        if c.offline:
            self.logged_weights = offline.episode_weights(groups, c)
        return offline.LoggedBatches(groups, c.seed)

    @contextmanager
    def _log_grader(self) -> Iterator[Callable[[Trajectory], Score]]:
        """What grades a logged episode that came without a reward: the run's environment, replaying
        its replies (``ludus.rollout.rescore.regrade``) on the task the line gives, or on the
        environment's own task of that id when it takes no such task from elsewhere."""
        c = self.config
        made: list[Env] = []

        def grade(trajectory: Trajectory) -> Score:
            if c.envs:
                raise logs.LogError("no reward: a run of several environments grades no log; give the line a reward")
            if trajectory.env and trajectory.env != c.env:
                raise logs.LogError(f"other environment: the line is of {trajectory.env!r}, the run grades {c.env!r}")
            if not made:
                made.append(self.env_factory())
            trajectory.env = c.env
            try:
                return regrade(made[0], trajectory, trust_task=c.trust_logged_tasks).score
            except UntrustedTask as refused:
                raise logs.LogError(
                    f"untrusted task: {refused}; if the logs are yours: trust_logged_tasks: true"
                ) from None

        try:
            yield grade
        finally:
            for env in made:
                env.close()

    def _advance_sampler(self, version: int) -> dict[str, Any]:
        """After an update: whatever samples gets the new weights (the sampler's copy, the
        inference server); the inference server's numbers for the step. A failed push does not
        raise here: the update is whole, so the step is logged and checkpointed before the
        run stops (``unpushed``)."""
        if self.sampler is None:
            return {}
        try:
            self.sampler.advance(self.learner.policy)
        except PolicyError as exc:
            self.unpushed = (
                f"the weights of step {version} could not be pushed to the rollout server: {exc}. Nothing was "
                "sampled from weights of unknown version; restart the server"
            )
            return {}
        server = self.inference_server
        if server is None:
            return {}
        stats = server.take_stats()
        return {"rollout/push_s": round(server.last_push_s, 4), **{f"rollout/{k}": v for k, v in stats.items()}}

    # ---- generation on an inference server (rollout_server) -----------------------------

    def _connect_inference_server(self, learner: TrainablePolicy) -> RolloutServerPolicy | None:
        """With ``rollout_server``, a client of that server that samples in place of the learner,
        sent the learner's token ids and weights (policies/rollout_server.py)."""
        c = self.config
        if not c.rollout_server:
            return None
        weights = Path(c.rollout_weights_dir) if c.rollout_weights_dir else self.run_dir / "rollout-weights"
        try:
            return RolloutServerPolicy(c.rollout_server, learner, weights_dir=weights)
        except PolicyError as exc:
            raise ConfigError(f"config field 'rollout_server': {exc}") from None

    def _check_inference_server(self, step: int) -> None:
        """The server gets the learner's weights (version ``step``), and probe replies show that
        it samples from them: its log-probs are the learner's, within ``rollout_logprob_tolerance``."""
        server = self.inference_server
        assert server is not None
        c = self.config
        try:
            push_s = server.sync(self.learner.policy)
            gap = server.logprob_gap(c.temperature)
        except PolicyError as exc:
            raise TrainingHalted(
                f"the rollout server {c.rollout_server} cannot take this run's weights: {exc}. It must be vLLM started "
                "with VLLM_SERVER_DEV_MODE=1 (its weight endpoints) or `ludus serve-model --weight-updates`, "
                "reachable from here and able to read the folder the weights are written to (docs/integrations.md)"
            ) from None
        if c.rollout_logprob_tolerance and (gap.mean > c.rollout_logprob_tolerance or gap.before_temperature):
            if gap.before_temperature:
                cause = (
                    f"its log-probs of replies sampled at temperature {c.temperature} are those of the untempered "
                    f"distribution (within {gap.untempered:.3g} per token): start vLLM with --logprobs-mode "
                    "processed_logprobs"
                )
            else:
                cause = (
                    "it samples from other weights or another model, or computes in a lower precision: start vLLM "
                    "with --logprobs-mode processed_logprobs and --dtype float32 on the model the learner loads, or "
                    "set rollout_logprob_tolerance to about 0.02 for a bfloat16 server (1e-3 to 1e-2 off)"
                )
            raise TrainingHalted(
                f"the rollout server's log-probs differ from the learner's by {gap.mean:.3g} per token on average "
                f"(max {gap.max:.3g}, {gap.tokens} probe tokens; rollout_logprob_tolerance "
                f"{c.rollout_logprob_tolerance}): {cause}"
            )
        self.log(
            f"rollout server {c.rollout_server}: weights of step {step} pushed in {push_s:.2f} s; its log-probs "
            f"match the learner's within {gap.mean:.2g} per token ({gap.tokens} probe tokens)"
        )

    # ---- checkpoints -------------------------------------------------------------------

    def _mark(self, step: int, elapsed_s: float) -> ResumePoint:
        """What a checkpoint of ``step`` written now would hold besides the weights and optimizer."""
        # the task stream resumes where the sampler was (offline: the log's order is the step's)
        position = self.sampler.position() if self.sampler is not None else StreamPosition(step)
        state: dict[str, Any] = {
            "step": step,
            "elapsed_s": elapsed_s,
            "next_group": position.next_group,
            "unconsumed_groups": list(position.replay),
            "picker": self.picker.state_dict(),
        }
        if self.self_play is not None:
            state["self_play"] = self.self_play.state_dict()
        rngs = {
            "generator": self.learner.generator.get_state(),
            "torch_rng": torch.get_rng_state(),
            "python_rng": random.getstate(),
            "numpy_rng": np.random.get_state(),
        }
        return ResumePoint(step, self.updates, state, rngs)

    def _save_checkpoint(self, point: ResumePoint) -> None:
        """The weights, optimizer and reference as they are, with ``point``'s state and RNGs. The
        weights are saved as the policy saves a model, so that a checkpoint folder is a model folder."""
        learner = self.learner

        def write(folder: Path) -> None:
            learner.policy.save(folder)
            torch.save(
                {
                    "optimizer": learner.optimizer.state_dict(),
                    **point.rngs,
                    "reference": None if learner.reference is None else learner.reference.state_dict(),
                },
                folder / "trainer.pt",
            )

        self.folder.save_checkpoint(point.step, write, point.state, self.config.keep_checkpoints)
        if self.self_play is not None:
            self.self_play.checkpointed()

    def _load_checkpoint(self, path: Path) -> dict[str, Any]:
        learner = self.learner
        # checkpoints written before a checkpoint folder was itself the model kept it in policy/
        weights = path / "policy" if (path / "policy").is_dir() else path
        saved = type(learner.policy).load(weights)
        learner.policy.module.load_state_dict(saved.module.state_dict())
        blob = torch.load(path / "trainer.pt", weights_only=False)
        learner.optimizer.load_state_dict(blob["optimizer"])
        learner.generator.set_state(blob["generator"])
        torch.set_rng_state(blob["torch_rng"])
        random.setstate(blob["python_rng"])
        np.random.set_state(blob["numpy_rng"])
        if learner.reference is not None and blob["reference"] is not None:
            learner.reference.load_state_dict(blob["reference"])
        return json.loads((path / "state.json").read_text())
