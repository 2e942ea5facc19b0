"""Held-out accuracy vs. minutes for the default `ludus train` recipe, beside supervised training.

For each seed: the RL phase of the default config (base model from the cached warm-start,
then GRPO with verifier rewards only), and — in the same run, same time budget, same model —
supervised training on gold answers from the same base (the warm-start continued). Prints both curves, peak memory
and the ratio of final accuracies. Not a test: it takes about (2 × minutes × seeds) minutes.

    python benchmarks/recipe_curve.py --seeds 0 1 2 --minutes 10
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time

import torch

from ludus.core.registry import make
from ludus.policies import SamplingParams
from ludus.rollout.evaluate import evaluate
from ludus.train.config import load_config
from ludus.train.supervised import WARMSTART_TASK_OFFSET, base_model_recipe, make_base_model, supervised_steps
from ludus.train.trainer import Trainer


def rl_curve(seed: int, minutes: float) -> list[tuple[float, float]]:
    cfg = load_config(
        overrides={"seed": seed, "time_limit_min": minutes, "runs_dir": tempfile.mkdtemp(), "name": f"bench-rl-{seed}"}
    )
    result = Trainer.create(cfg, log=lambda _: None).run()
    if result.interrupted:  # Ctrl-C / SIGTERM ends the RL run gracefully; end the benchmark too
        raise SystemExit(130)
    return [(elapsed / 60, acc) for _, elapsed, acc in result.eval_accuracy]


def supervised_curve(seed: int, minutes: float, stop_at: float) -> list[tuple[float, float]]:
    """Continue the warm-start (its lr and batch, one optimizer) on fresh gold answers for the same
    wall time, evaluating as often as the RL run does; evaluation time counts, as it does for RL.
    Stops early once two evaluations in a row reach ``stop_at`` (nothing is left to learn)."""
    cfg = load_config(overrides={"seed": seed})
    torch.set_num_threads(cfg.threads or os.cpu_count() or 1)
    env = make(cfg.env, **cfg.env_args)
    recipe = base_model_recipe(cfg)
    policy, _, _ = make_base_model(env, recipe)
    eval_tasks = [env.task_source("eval").get(i) for i in range(cfg.eval_size)]

    def accuracy() -> float:
        greedy = SamplingParams(temperature=0.0, max_tokens=cfg.max_tokens)
        return evaluate(policy, lambda: make(cfg.env, **cfg.env_args), eval_tasks, sampling=greedy).accuracy

    optimizer = torch.optim.AdamW(policy.module.parameters(), lr=cfg.warmstart_lr, weight_decay=0.0)
    start, done = time.perf_counter(), 0
    curve = [(0.0, accuracy())]
    while (left := minutes * 60 - (time.perf_counter() - start)) > 0:
        done += supervised_steps(
            policy,
            env,
            steps=cfg.eval_every,
            batch=cfg.warmstart_batch,
            lr=cfg.warmstart_lr,
            start_index=WARMSTART_TASK_OFFSET * 2 + done * cfg.warmstart_batch,
            time_limit_s=left,
            optimizer=optimizer,
        )
        curve.append(((time.perf_counter() - start) / 60, accuracy()))
        if len(curve) > 2 and min(curve[-1][1], curve[-2][1]) >= stop_at:
            break
    return curve


def first_minute_at(curve: list[tuple[float, float]], accuracy: float) -> float | None:
    return next((m for m, a in curve if a >= accuracy), None)


def plot(report: dict[int, dict[str, list[tuple[float, float]]]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (seed, curves) in enumerate(sorted(report.items())):
        color = f"C{i}"
        ax.plot(*zip(*curves["rl"], strict=True), color=color, label=f"RL, seed {seed}")
        ax.plot(*zip(*curves["supervised"], strict=True), color=color, linestyle=":", label=f"supervised, seed {seed}")
    ax.axhline(0.8, color="grey", linewidth=0.8)
    ax.set(xlabel="minutes", ylabel="held-out greedy accuracy", ylim=(0, 1), title="ludus train defaults")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--plot", default="", help="write the curves to this PNG file")
    parser.add_argument("--target", type=float, default=0.95, help="final held-out accuracy every seed must reach")
    parser.add_argument(
        "--supervised-stop-at", type=float, default=0.99, help="end the supervised baseline once it holds this accuracy"
    )
    args = parser.parse_args()
    report = {}
    met = True
    for seed in args.seeds:
        rl = rl_curve(seed, args.minutes)
        sup = supervised_curve(seed, args.minutes, args.supervised_stop_at)
        report[seed] = {"rl": rl, "supervised": sup}
        print(f"seed {seed}: RL         " + " ".join(f"{m:.1f}m:{a:.2f}" for m, a in rl), flush=True)
        print(f"seed {seed}: supervised " + " ".join(f"{m:.1f}m:{a:.2f}" for m, a in sup), flush=True)
        reached, sup_reached = first_minute_at(rl, 0.8), first_minute_at(sup, 0.8)
        print(
            f"seed {seed}: base {rl[0][1]:.3f} -> RL {rl[-1][1]:.3f} (0.8 at {reached and f'{reached:.1f} min'}), "
            f"supervised {sup[-1][1]:.3f} (0.8 at {sup_reached and f'{sup_reached:.1f} min'}); "
            f"RL/supervised final = {rl[-1][1] / max(sup[-1][1], 1e-9):.2f}",
            flush=True,
        )
        met = met and rl[0][1] <= 0.2 and rl[-1][1] >= args.target
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory (max RSS) {peak_mib:.0f} MiB")
    verdict = met and peak_mib < 2048
    print(f"target (base <= 0.20, final >= {args.target:.2f} for every seed, peak < 2048 MiB): {verdict}")
    if args.plot:
        plot(report, args.plot)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
