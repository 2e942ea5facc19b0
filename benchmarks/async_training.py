"""Asynchronous training (``max_staleness`` ≥ 1) against lockstep, same recipe, same run (issue 5).

    python benchmarks/async_training.py                        # ~2 × 2 × 3 min
    python benchmarks/async_training.py --latency-ms 0 50 --staleness 0 1 2 --minutes 5

The default `ludus train` recipe (arithmetic, the embedded model), once per environment latency
and per ``max_staleness``. A latency above 0 makes every verification sleep a log-normal time
(that median, sigma 1, cut at 20 × the median): what a sandboxed test run or a remote
environment server costs, without using this machine's CPU. In lockstep the learner waits for
every step's slowest environments; sampling ahead, the update runs while they finish.

Prints, per run: RL steps per minute, held-out greedy accuracy at the end, the learner's wait
for samples, mean staleness and importance weight; then each asynchronous run's ratio to
lockstep at the same latency. Not a test: the figures depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import tempfile
import time

from ludus.core.registry import env_class, register
from ludus.core.types import Message, StepResult
from ludus.train.config import load_config
from ludus.train.trainer import Trainer


def slow_arithmetic(median_s: float) -> str:
    """Register the arithmetic environment with a sleeping verifier; return its name."""
    base = env_class("arithmetic")

    class SlowArithmetic(base):  # type: ignore[misc, valid-type]
        name = f"arithmetic-slow-{int(median_s * 1000)}ms"
        quick = False  # it blocks: the engine runs it on environment threads

        def transition(self, action: Message) -> StepResult:
            assert self.task is not None
            rng = random.Random(f"{self.task.id}:{self.turn}")
            time.sleep(min(20 * median_s, median_s * math.exp(rng.gauss(0.0, 1.0))))
            return super().transition(action)

    register(SlowArithmetic.name, SlowArithmetic)
    return SlowArithmetic.name


def train(env: str, staleness: int, minutes: float, seed: int) -> dict[str, float]:
    defaults = load_config()
    cfg = load_config(
        overrides={
            "env": env,
            "env_args": defaults.env_args,
            "seed": seed,
            "time_limit_min": minutes,
            "max_staleness": staleness,
            "runs_dir": tempfile.mkdtemp(),
            "name": f"bench-{env}-{staleness}",
        }
    )
    records: list[dict] = []
    result = Trainer.create(cfg, log=lambda _: None).run(records.append)
    if result.interrupted:
        raise SystemExit(130)
    train_records = [r for r in records if "reward/mean" in r]
    n = max(1, len(train_records))
    return {
        "steps": result.step,
        "steps_per_min": result.step / (result.elapsed_s / 60),
        "accuracy": result.eval_accuracy[-1][2],
        "wait_frac": sum(r.get("sampler_wait_s", 0.0) for r in train_records) / result.elapsed_s,
        "staleness": sum(r["staleness/mean"] for r in train_records) / n,
        "importance": sum(r.get("importance/mean", 1.0) for r in train_records) / n,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.0, 50.0])
    parser.add_argument("--staleness", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    report: dict[str, dict[int, dict[str, float]]] = {}
    for latency_ms in args.latency_ms:
        env = "arithmetic" if latency_ms == 0 else slow_arithmetic(latency_ms / 1000)
        runs = report.setdefault(f"{latency_ms:g} ms", {})
        for staleness in args.staleness:
            r = runs[staleness] = train(env, staleness, args.minutes, args.seed)
            print(
                f"latency {latency_ms:g} ms, max_staleness {staleness}: {r['steps']} steps "
                f"({r['steps_per_min']:.0f}/min), accuracy {r['accuracy']:.3f}, learner waiting "
                f"{100 * r['wait_frac']:.0f} %, staleness {r['staleness']:.2f}, importance {r['importance']:.3f}",
                flush=True,
            )
        if 0 in runs:
            for staleness, r in runs.items():
                if staleness:
                    print(
                        f"latency {latency_ms:g} ms: max_staleness {staleness} vs lockstep: "
                        f"{r['steps_per_min'] / runs[0]['steps_per_min']:.2f}x steps/min, "
                        f"accuracy {r['accuracy']:.3f} vs {runs[0]['accuracy']:.3f}",
                        flush=True,
                    )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
