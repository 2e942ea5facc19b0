"""Uniform levels vs the adaptive curriculum vs dynamic sampling: held-out accuracy at the hardest level.

One environment with difficulty levels, the embedded model, the same time budget per run. Three
ways to spend it, each from the same warm-started base (it is warm-started on every level):

* ``uniform``   every level equally often (a mixture of the levels);
* ``curriculum`` the adaptive curriculum (train/curriculum.py) over the same levels;
* ``dynamic``   uniform, with DAPO dynamic sampling (only groups with reward variance train).

Prints, per seed, the hardest level's held-out greedy accuracy at the end of each run and the
curriculum's margin over uniform. Not a test: it takes 3 × minutes × seeds.

    python benchmarks/curriculum.py --env-args '{"digit_credit": 0.5}' --levels 1 2 3 --minutes 3
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from typing import Any

from ludus.train.config import load_config
from ludus.train.trainer import Trainer

ARMS = ("uniform", "curriculum", "dynamic")


def arm_config(
    arm: str, env: str, args: dict[str, Any], levels: list[int], seed: int, minutes: float, runs: str, threads: int
) -> dict[str, Any]:
    """The overrides of one run; everything else is the default recipe."""
    common: dict[str, Any] = {"seed": seed, "time_limit_min": minutes, "runs_dir": runs, "name": f"{arm}-{seed}"}
    common["threads"] = threads
    mixture = [{"name": env, "args": args | {"difficulty": lv}, "label": f"L{lv}"} for lv in levels]
    if arm == "curriculum":
        return common | {"env": env, "env_args": args, "curriculum": True, "curriculum_levels": levels}
    return common | {"envs": mixture, "dynamic_sampling": arm == "dynamic"}


def hardest_accuracy(record: dict[str, Any], arm: str, env: str, levels: list[int]) -> float:
    key = f"eval/{env}/L{levels[-1]}/accuracy" if arm == "curriculum" else f"eval/L{levels[-1]}/accuracy"
    return record[key]


def run(
    arm: str, env: str, args: dict[str, Any], levels: list[int], seed: int, minutes: float, threads: int
) -> dict[str, Any]:
    runs = tempfile.mkdtemp(prefix="ludus-curriculum-")
    config = load_config(overrides=arm_config(arm, env, args, levels, seed, minutes, runs, threads))
    started = time.perf_counter()
    result = Trainer.create(config, log=lambda _: None).run()
    if result.interrupted:  # Ctrl-C / SIGTERM ends the run gracefully; end the benchmark too
        raise SystemExit(130)
    records = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if "eval/accuracy" in r]
    train = [r for r in records if "reward/mean" in r]
    curve = [(round(r["elapsed_s"] / 60, 2), hardest_accuracy(r, arm, env, levels)) for r in evals]
    out = {"final": curve[-1][1], "best": max(a for _, a in curve), "steps": result.step, "curve": curve}
    out["wall_min"] = round((time.perf_counter() - started) / 60, 2)
    if arm == "curriculum":
        out["levels"] = [r[f"curriculum/{env}/level"] for r in train[:: max(1, len(train) // 12)]]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="arithmetic")
    parser.add_argument("--env-args", default="{}", help="JSON arguments every level shares, e.g. reward shaping")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--minutes", type=float, default=4.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    parser.add_argument("--threads", type=int, default=0, help="torch threads per run (0: all cores)")
    parser.add_argument("--json", help="write every result here")
    args = parser.parse_args()
    print(
        f"{args.env} {args.env_args} levels {args.levels}, {args.minutes} min per run, {os.cpu_count()} cores, seeds {args.seeds}"
    )
    results: dict[int, dict[str, dict[str, Any]]] = {}
    for seed in args.seeds:
        results[seed] = {}
        for arm in args.arms:
            r = results[seed][arm] = run(
                arm, args.env, json.loads(args.env_args), args.levels, seed, args.minutes, args.threads
            )
            extra = f"  levels over time {r['levels']}" if "levels" in r else ""
            print(
                f"seed {seed} {arm:>10}: hardest level {r['final']:.3f} (best {r['best']:.3f}), {r['steps']} steps{extra}"
            )
    print("\nheld-out accuracy at the hardest level, end of run")
    print("| seed | " + " | ".join(args.arms) + " | curriculum − uniform |")
    print("|---|" + "---|" * (len(args.arms) + 1))
    for seed, by_arm in results.items():
        margin = (
            by_arm["curriculum"]["final"] - by_arm["uniform"]["final"]
            if {"curriculum", "uniform"} <= set(by_arm)
            else None
        )
        cells = " | ".join(f"{by_arm[a]['final']:.3f}" for a in args.arms)
        print(f"| {seed} | {cells} | {'' if margin is None else f'{margin:+.3f}'} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
