"""Episodes per second of environments under the scripted oracle, on the rollout engine (issue 6).

    python benchmarks/env_throughput.py sql repo --tasks 64
    python benchmarks/env_throughput.py sql --env-args '{"difficulty": 3}' --workers 8

For each environment: ``--tasks`` tasks of its eval split, played by ``OraclePolicy`` (each
task's reference actions: the gold solution, tool calls included) twice — ``oracle-cold``
includes one-time costs such as loading databases into PostgreSQL (``--env-args '{"engine":
"postgres"}'``), ``oracle`` is the same episodes again — and by ``NothingPolicy``, with
``--workers`` environment threads. The model costs nothing here, so the figure is what the
environment itself sustains: resets, tool calls, verification. Prints episodes per second,
mean reward (the oracle should reach 1, the floor 0) and the statuses. Not a test.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter

from ludus.core.registry import env_class
from ludus.policies.base import Policy, SamplingParams
from ludus.rollout.engine import RolloutConfig, RolloutEngine, requests
from ludus.rollout.scripted import NothingPolicy, OraclePolicy


def measure(name: str, env_args: dict, tasks: int, workers: int) -> dict[str, dict]:
    cls = env_class(name)
    source = cls(**env_args).task_source("eval")
    chosen = [source.get(i) for i in range(tasks if source.size is None else min(tasks, source.size))]

    def factory():
        return cls(**env_args)

    report = {}
    oracle = OraclePolicy(factory, requests(chosen))
    runs: list[tuple[str, Policy]] = [("oracle-cold", oracle), ("oracle", oracle), ("nothing", NothingPolicy())]
    for label, policy in runs:
        engine = RolloutEngine(policy, factory, SamplingParams(max_tokens=1), RolloutConfig(env_concurrency=workers))
        started = time.perf_counter()
        trajectories = engine.run(requests(chosen))
        wall = time.perf_counter() - started
        report[label] = {
            "episodes": len(trajectories),
            "episodes_per_s": len(trajectories) / wall,
            "mean_reward": sum(t.reward for t in trajectories) / len(trajectories),
            "statuses": dict(Counter(t.score.status if t.score else "none" for t in trajectories)),
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("envs", nargs="+")
    parser.add_argument("--env-args", default="{}", help="JSON keyword arguments, the same for every environment")
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    results = {}
    for name in args.envs:
        results[name] = measure(name, json.loads(args.env_args), args.tasks, args.workers)
        for label, r in results[name].items():
            print(
                f"{name:>12} {label:>8}: {r['episodes']} episodes, {r['episodes_per_s']:.1f}/s, "
                f"mean reward {r['mean_reward']:.3f}, {r['statuses']}",
                flush=True,
            )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
