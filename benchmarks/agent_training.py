"""An unmodified `openai`-client agent trained by Ludus: held-out success before and after.

The agent is examples/agents/sql_agent.py — its own tool loop, the real `openai` client, nothing
of Ludus in it — run by `AgentEnv` on the procedural `sql` tasks (difficulty 1), every model call
answered by the embedded model through the agent gateway. Beside it, with the same base model and
the same settings, the `sql` environment trained directly (its own tool loop, no agent): the agent
should learn as the environment does.

Both arms start from one base model: the embedded model warm-started (supervised, the default
recipe's way) for ``--warmstart-steps`` steps on the `sql` reference answers, seed 0, made once
and cached. Each seed then trains each arm for ``--steps`` RL steps, with greedy held-out accuracy
on the eval split (``--eval-size`` tasks) at the start and every ``--eval-every`` steps, and
counts how the episodes became token sequences (turns merged, turns split).

The RL settings differ from the default recipe (tuned for 6-token sums) where 60-byte SQL replies
need it: no entropy bonus (a bonus per token over 60 tokens keeps replies from settling), a lower
learning rate, and `max_tokens` 80.

Not a test: each arm takes 10-20 minutes per seed on a 2-core machine; `--arms agent` runs one.

    python benchmarks/agent_training.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the agent is imported by name: examples.agents.sql_agent:solve

from ludus.core.registry import make  # noqa: E402
from ludus.train.config import load_config  # noqa: E402
from ludus.train.supervised import base_model_recipe, make_base_model  # noqa: E402
from ludus.train.trainer import Trainer  # noqa: E402

SQL_ARGS = {"difficulty": 1}
ARMS = {
    "agent": (
        "agent",
        {"agent": "examples.agents.sql_agent:solve", "env": "sql", "env_args": SQL_ARGS, "share_info": ["db"]},
    ),
    "sql": ("sql", SQL_ARGS),
}
CONTEXT = {"max_len": 2048}  # room for a few tool results, should the model call tools


def base_model(steps: int) -> Path:
    config = load_config(overrides={"env": "sql", "env_args": SQL_ARGS, "warmstart_steps": steps, "tiny": CONTEXT})
    started = time.perf_counter()
    _, path, created = make_base_model(make("sql", **SQL_ARGS), base_model_recipe(config))
    print(f"base model {path} ({'made in %.1f min' % ((time.perf_counter() - started) / 60) if created else 'cached'})")
    return path


def train(arm: str, base: Path, seed: int, args: argparse.Namespace) -> dict:
    env, env_args = ARMS[arm]
    runs = tempfile.mkdtemp(prefix="ludus-agent-bench-")
    config = load_config(
        overrides={
            "env": env,
            "env_args": env_args,
            "model": str(base),
            "seed": seed,
            "steps": args.steps,
            "time_limit_min": 0,
            "eval_every": args.eval_every,
            "eval_size": args.eval_size,
            "max_tokens": 80,
            "lr": args.lr,
            "entropy_coef": 0.0,
            "threads": args.threads,
            "runs_dir": runs,
            "name": f"{arm}-{seed}",
        }
    )
    started = time.perf_counter()
    result = Trainer.create(config, log=lambda _: None).run()
    if result.interrupted:
        raise SystemExit(130)
    metrics = [json.loads(line) for line in (Path(runs) / config.name / "metrics.jsonl").open()]
    curve = [(step, acc) for step, _, acc in result.eval_accuracy]
    return {
        "curve": curve,
        "start": curve[0][1],
        "end": curve[-1][1],
        "best": max(acc for _, acc in curve),
        "steps": curve[-1][0],
        "minutes": (time.perf_counter() - started) / 60,
        "merged": sum(m.get("multiturn/merged_turns", 0) for m in metrics),
        "split": sum(m.get("multiturn/split_turns", 0) for m in metrics),
        "multiturn": sum(1 for m in metrics if "multiturn/merged_turns" in m),
        "run": str(Path(runs) / config.name),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--arms", nargs="+", choices=sorted(ARMS), default=["agent", "sql"])
    parser.add_argument("--warmstart-steps", type=int, default=400)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--eval-size", type=int, default=200)
    parser.add_argument("--threads", type=int, default=0, help="torch threads per run (0: all cores)")
    args = parser.parse_args()
    base = base_model(args.warmstart_steps)
    rows = []
    for seed in args.seeds:
        for arm in args.arms:
            out = train(arm, base, seed, args)
            rows.append((arm, seed, out))
            curve = " ".join(f"{step}:{acc:.3f}" for step, acc in out["curve"])
            print(
                f"{arm:5} seed {seed}: held-out {out['start']:.3f} -> {out['end']:.3f} (best {out['best']:.3f}) "
                f"in {out['steps']} steps, {out['minutes']:.1f} min; steps with multi-turn episodes "
                f"{out['multiturn']}, turns merged {out['merged']}, split {out['split']}; curve {curve}; {out['run']}",
                flush=True,
            )
    print("\n| arm | seeds | held-out at start | at end | best | rise (mean) |")
    print("|---|---|---|---|---|---|")
    for arm in args.arms:
        outs = [o for a, _, o in rows if a == arm]
        mean = statistics.mean
        print(
            f"| {arm} | {len(outs)} | {mean(o['start'] for o in outs):.3f} | {mean(o['end'] for o in outs):.3f} | "
            f"{mean(o['best'] for o in outs):.3f} | {mean(o['end'] - o['start'] for o in outs):+.3f} |"
        )


if __name__ == "__main__":
    main()
