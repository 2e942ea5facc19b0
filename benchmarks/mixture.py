"""A two-environment mixture against each environment trained alone, in the same total time.

Each environment is trained alone for ``--minutes``; the mixture (equal weights) gets the sum,
``2 × minutes``, the same total compute. Target: in the mixture each environment's held-out
greedy accuracy is within 0.05 of (or above) its accuracy alone. The embedded model, the
default recipe otherwise. Not a test: it takes 4 × minutes × seeds.

All three runs of a seed start from one base model: the embedded model warm-started on both
environments (what the mixture run itself would make). A run of one environment would
otherwise warm-start on that environment only, and the embedded model's short warm start sits
near a phase change (on seed 0 it leaves ``add`` at 0.175 alone but 0.08 mixed), so the
comparison would measure two bases rather than the mixture; a real LLM has one base whatever
it is trained on next.

The budget must let each run finish learning: the recipe's learning rate decays over the last
half of the time limit, and ``add`` learns in a jump whose moment varies from run to run (about
1-2 minutes in), so a budget that ends near the jump compares luck, not mixtures.

    python benchmarks/mixture.py --minutes 4 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from typing import Any

from ludus.core.registry import make
from ludus.train.config import load_config
from ludus.train.supervised import base_model_recipe, make_base_model
from ludus.train.trainer import Trainer

PAIR = (
    {"name": "arithmetic", "args": {"digits": 2, "ops": "+", "digit_credit": 0.5}, "label": "add"},
    {"name": "sorting", "args": {"difficulty": 1}, "label": "sort"},
)


def final_eval(overrides: dict[str, Any]) -> dict[str, float]:
    config = load_config(overrides=overrides | {"runs_dir": tempfile.mkdtemp(prefix="ludus-mixture-")})
    result = Trainer.create(config, log=lambda _: None).run()
    if result.interrupted:  # Ctrl-C / SIGTERM ends the run gracefully; end the benchmark too
        raise SystemExit(130)
    records = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if "eval/accuracy" in r][-1] | {"steps": result.step}


def shared_base(seed: int) -> str:
    """The folder of the base model the mixture run warm-starts (cached), for every run of the seed."""
    envs = [make(e["name"], **e["args"]) for e in PAIR]
    try:
        _, path, _ = make_base_model(envs, base_model_recipe(load_config(overrides={"envs": list(PAIR), "seed": seed})))
    finally:
        for env in envs:
            env.close()
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=4.0, help="per environment alone; the mixture gets twice")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threads", type=int, default=0, help="torch threads per run (0: all cores)")
    args = parser.parse_args()
    print(
        f"{[e['label'] for e in PAIR]}: {args.minutes} min alone each, {2 * args.minutes} min mixed, "
        f"{os.cpu_count()} cores"
    )
    rows = []
    for seed in args.seeds:
        base = shared_base(seed)
        alone = {
            e["label"]: final_eval(
                {
                    "env": e["name"],
                    "env_args": e["args"],
                    "model": base,
                    "seed": seed,
                    "threads": args.threads,
                    "time_limit_min": args.minutes,
                    "name": f"alone-{e['label']}-{seed}",
                }
            )["eval/accuracy"]
            for e in PAIR
        }
        mixed_record = final_eval(
            {
                "envs": list(PAIR),
                "model": base,
                "seed": seed,
                "threads": args.threads,
                "time_limit_min": 2 * args.minutes,
                "name": f"mixed-{seed}",
            }
        )
        mixed = {e["label"]: mixed_record[f"eval/{e['label']}/accuracy"] for e in PAIR}
        rows.append((seed, alone, mixed))
        print(f"seed {seed}: alone {alone}, mixed {mixed} ({mixed_record['steps']} steps)", flush=True)
    print("\n| seed | " + " | ".join(f"{e['label']} alone | {e['label']} mixed | Δ" for e in PAIR) + " | within 0.05 |")
    print("|---|" + "---|---|---|" * len(PAIR) + "---|")
    for seed, alone, mixed in rows:
        cells = " | ".join(
            f"{alone[e['label']]:.3f} | {mixed[e['label']]:.3f} | {mixed[e['label']] - alone[e['label']]:+.3f}"
            for e in PAIR
        )
        ok = all(mixed[k] >= alone[k] - 0.05 for k in alone)
        print(f"| {seed} | {cells} | {'yes' if ok else 'no'} |")


if __name__ == "__main__":
    main()
