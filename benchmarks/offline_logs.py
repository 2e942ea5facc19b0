"""Learning from logs on the embedded default: offline objectives, and replay mixed into online RL.

For each seed:

1. **The logging policy**: the embedded default's base model of that seed (the default recipe's
   warm start, cached), a weak policy (held-out greedy accuracy ~0.1-0.2 on two-digit sums).
2. **The log**: it samples ``--log-samples`` attempts at temperature 0.7 at each of ``--log-tasks``
   training tasks, graded by the environment (``ludus eval``'s ``evaluate``, written as an eval
   run's ``trajectories.jsonl``: token ids and behaviour log-probs recorded).
3. **Offline**: each objective trains from that same base on the log alone (``offline``) for
   ``--offline-steps`` steps; its held-out accuracy is compared with the logging policy's.
4. **Replay vs online**: the default recipe from the same base, alone and with the log mixed in
   (``replay``, ``--replay-ratio``), evaluated every ``--eval-every`` steps until held-out
   accuracy reaches ``--target`` or ``--online-steps`` steps: steps and minutes to the target.

Not a test: about 15 minutes per seed on an idle 2-core machine.

    python benchmarks/offline_logs.py --seeds 0 1 2
    python benchmarks/offline_logs.py --seeds 0 1 2 --skip-offline --online-steps 1500 --replay-steps 500
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from ludus.core.registry import make
from ludus.policies.base import SamplingParams
from ludus.policies.tiny import TinyPolicy
from ludus.rollout.engine import RolloutConfig
from ludus.rollout.evaluate import evaluate
from ludus.train.config import TrainConfig, load_config
from ludus.train.supervised import base_model_recipe, make_base_model
from ludus.train.trainer import Trainer

OBJECTIVES = ("filtered_bc", "reward_weighted", "importance_weighted")


def base_model(seed: int) -> Path:
    config = load_config(overrides={"seed": seed})
    env = make(config.env, **config.env_args)
    _, path, _ = make_base_model(env, base_model_recipe(config))
    return path


def make_log(base: Path, folder: Path, args: argparse.Namespace) -> Path:
    """The logging policy's graded attempts at training tasks, as an eval run folder."""
    config = TrainConfig()
    env = make(config.env, **config.env_args)
    tasks = env.task_source("train")
    started = time.perf_counter()
    summary = evaluate(
        TinyPolicy.load(base),
        lambda: make(config.env, **config.env_args),
        [tasks.get(i) for i in range(args.log_tasks)],
        folder,
        samples=args.log_samples,
        sampling=SamplingParams(temperature=0.7, max_tokens=config.max_tokens),
        config=RolloutConfig(max_batch=256),
    )
    print(
        f"  log: {args.log_tasks} tasks × {args.log_samples} attempts, sampled accuracy {summary.accuracy:.3f}, "
        f"mean reward {summary.mean_reward:.3f} ({time.perf_counter() - started:.0f} s)",
        flush=True,
    )
    return folder


def train(name: str, overrides: dict, args: argparse.Namespace, target: float | None = None) -> dict:
    """One run; with ``target``, stopped at the first evaluation that reaches it."""
    config = load_config(
        overrides={"time_limit_min": 0, "threads": args.threads, "runs_dir": args.runs, "name": name, **overrides}
    )
    trainer = Trainer.create(config, log=lambda _: None)
    reached: dict = {}

    def on_metrics(record: dict) -> None:
        if target is not None and record.get("eval/accuracy", -1) >= target and not reached:
            reached.update(step=record["step"], minutes=record["elapsed_s"] / 60)
            trainer.stop.requested = True

    result = trainer.run(on_metrics)
    curve = result.eval_accuracy
    return {
        "start": curve[0][2],
        "end": curve[-1][2],
        "best": max(acc for _, _, acc in curve),
        "steps": result.step,
        "minutes": result.elapsed_s / 60,
        "reached_step": reached.get("step"),
        "reached_min": reached.get("minutes"),
        "curve": [(step, round(elapsed / 60, 2), acc) for step, elapsed, acc in curve],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--log-tasks", type=int, default=1000)
    parser.add_argument("--log-samples", type=int, default=8)
    parser.add_argument("--offline-steps", type=int, default=600)
    parser.add_argument("--offline-lr", type=float, default=6e-4)
    parser.add_argument("--objectives", nargs="+", default=list(OBJECTIVES), choices=OBJECTIVES)
    parser.add_argument("--online-steps", type=int, default=600)
    parser.add_argument("--replay-ratio", type=float, default=0.5)
    parser.add_argument("--replay-steps", type=int, default=0, help="replay in the first so many steps (0: all)")
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-online", action="store_true", help="offline arms only")
    parser.add_argument("--skip-offline", action="store_true", help="replay vs online only")
    parser.add_argument("--out", help="write every number as JSON here")
    args = parser.parse_args()
    args.runs = tempfile.mkdtemp(prefix="ludus-offline-bench-")
    results: dict = {}
    for seed in args.seeds:
        print(f"seed {seed}", flush=True)
        base = base_model(seed)
        log = make_log(base, Path(args.runs) / f"log-{seed}", args)
        row: dict = {}
        for objective in [] if args.skip_offline else args.objectives:
            row[objective] = train(
                f"{objective}-{seed}",
                {
                    "seed": seed,
                    "model": str(base),
                    "offline": [str(log)],
                    "offline_objective": objective,
                    "steps": args.offline_steps,
                    "lr": args.offline_lr,
                    "eval_every": 50,
                },
                args,
            )
            r = row[objective]
            print(
                f"  offline {objective:<20} held-out {r['start']:.3f} -> {r['end']:.3f} (best {r['best']:.3f})",
                flush=True,
            )
        if not args.skip_online:
            online = {"seed": seed, "model": str(base), "steps": args.online_steps, "eval_every": args.eval_every}
            replay = {"replay": [str(log)], "replay_ratio": args.replay_ratio, "replay_steps": args.replay_steps}
            arms = {"online": online, "replay": {**online, **replay}}
            for arm, overrides in arms.items():
                row[arm] = r = train(f"{arm}-{seed}", overrides, args, target=args.target)
                when = (
                    f"reached {args.target} at step {r['reached_step']} ({r['reached_min']:.1f} min)"
                    if r["reached_step"] is not None
                    else f"did not reach {args.target} in {r['steps']} steps (best {r['best']:.3f})"
                )
                print(f"  {arm:<8} {when}", flush=True)
        results[seed] = row
    print("\nsummary")
    for objective in [] if args.skip_offline else args.objectives:
        ends = [results[s][objective]["end"] for s in args.seeds]
        starts = [results[s][objective]["start"] for s in args.seeds]
        above = all(e > s for e, s in zip(ends, starts, strict=True))
        print(
            f"  offline {objective:<20} logging policy {statistics.mean(starts):.3f} -> {statistics.mean(ends):.3f} "
            f"(per seed {', '.join(f'{e:.3f}' for e in ends)}); above the logging policy on every seed: {above}"
        )
    if not args.skip_online:
        for arm in ("online", "replay"):
            steps = [results[s][arm]["reached_step"] for s in args.seeds]
            minutes = [results[s][arm]["reached_min"] for s in args.seeds]
            print(f"  {arm:<8} steps to {args.target}: {steps}; minutes: {[m and round(m, 2) for m in minutes]}")
        sooner = all(
            results[s]["replay"]["reached_step"] is not None
            and (
                results[s]["online"]["reached_step"] is None
                or results[s]["replay"]["reached_step"] < results[s]["online"]["reached_step"]
            )
            for s in args.seeds
        )
        print(f"  replay reaches {args.target} in fewer steps than online RL on every seed: {sooner}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
