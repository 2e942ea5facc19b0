"""The async rollout engine vs. a synchronous loop, on slow heavy-tailed environments (issue 5).

    python benchmarks/rollout_overlap.py            # --quick: a smoke run at a quarter of the scale

A synthetic multi-turn environment whose every step takes a log-normal time (median 0.2 s,
sigma 1.2: p99 ≈ 3.3 s) cut at the environment's own time limit (5 s: real environments have
one, and without it a single 15-second straggler, not the engine, sets the wall time), and a
generator with a fixed cost per decoding step: a call costs
``max_tokens × cost_per_token`` whatever its batch size up to ``max_batch`` — a GPU decodes a
batch at once. Both sleep rather than compute, so the figures do not depend on this CPU. Every
latency is a function of (task, turn), so both graders wait on exactly the same environments.

* engine — ``RolloutEngine`` with ``max_batch`` conversations per generate call,
  ``--workers`` environment threads and ``--in-flight`` episodes;
* synchronous loop — chunks of ``--sync-batch`` episodes (default: one generator call's worth):
  generate every live episode's turn, then run every environment step (``--workers``
  threads), repeat until the chunk is done, then the next chunk;
* the physical bound — max(total generation time, total environment time / workers).

Targets: engine ≥ 3× the synchronous loop, ≥ 90 % of the bound, generator busy ≥ 90 % of the
engine's wall time. Not a test.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from concurrent.futures import ThreadPoolExecutor

from ludus.core.env import Env
from ludus.core.types import Message, Observation, Score, StepResult, Task
from ludus.policies.base import Completion, Policy, SamplingParams
from ludus.rollout.engine import RolloutConfig, RolloutEngine, requests

TARGET_SPEEDUP, TARGET_BOUND, TARGET_BUSY = 3.0, 0.90, 0.90


def latency(task_id: str, turn: int, median_s: float, sigma: float, cap_s: float) -> float:
    rng = random.Random(f"{task_id}:{turn}")
    return min(cap_s, median_s * math.exp(sigma * rng.gauss(0.0, 1.0)))


class SlowEnv(Env):
    """``turns`` turns; each step sleeps its log-normal latency, then answers or ends with reward 1."""

    name = "slow"
    reward_range = (0.0, 1.0)

    def __init__(self, turns: int, median_s: float, sigma: float, cap_s: float):
        super().__init__()
        self.turns, self.median_s, self.sigma, self.cap_s = turns, median_s, sigma, cap_s
        self.max_turns = turns

    def begin(self, task: Task) -> Observation:
        return Observation([Message("user", task.prompt)])

    def transition(self, action: Message) -> StepResult:
        assert self.task is not None
        time.sleep(latency(self.task.id, self.turn, self.median_s, self.sigma, self.cap_s))
        if self.turn + 1 < self.turns:
            return StepResult(Observation([Message("user", f"turn {self.turn + 1}")]))
        return StepResult(Observation([]), reward=1.0, terminated=True, score=Score(1.0))


class TimedGenerator(Policy):
    """A call sleeps ``max_tokens × cost_per_token`` (one decoding step per token for the whole batch)."""

    def __init__(self, cost_per_token_s: float, max_batch: int):
        self.cost_per_token_s, self.max_batch = cost_per_token_s, max_batch
        self.busy_s = 0.0

    def generate(self, conversations, sampling, *, tools=None, generator=None) -> list[Completion]:
        if len(conversations) > self.max_batch:
            raise ValueError(f"batch of {len(conversations)} is over the generator's {self.max_batch}")
        started = time.monotonic()
        time.sleep(sampling.max_tokens * self.cost_per_token_s)
        self.busy_s += time.monotonic() - started
        return [Completion("ok", [], [], [], "stop") for _ in conversations]


def synchronous(policy: TimedGenerator, make_env, tasks: list[Task], sampling, batch: int, workers: int) -> float:
    started = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        for first in range(0, len(tasks), batch):
            chunk = tasks[first : first + batch]
            envs = [make_env() for _ in chunk]
            for env, task in zip(envs, chunk, strict=True):
                env.reset(task)
            live = list(envs)
            while live:
                replies: list[Completion] = []
                for i in range(0, len(live), policy.max_batch):
                    replies += policy.generate([e.messages for e in live[i : i + policy.max_batch]], sampling)
                results = list(pool.map(lambda pair: pair[0].step(pair[1].message()), zip(live, replies, strict=True)))
                live = [env for env, result in zip(live, results, strict=True) if not result.done]
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=1536)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--median-s", type=float, default=0.2)
    parser.add_argument("--sigma", type=float, default=1.2)
    parser.add_argument("--cap-s", type=float, default=5.0, help="the environment's time limit per step")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--cost-per-token-ms", type=float, default=10.0)
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--workers", type=int, default=64, help="environment threads (both graders)")
    parser.add_argument("--in-flight", type=int, default=256, help="the engine's episodes in flight")
    parser.add_argument("--sync-batch", type=int, default=None, help="the loop's chunk (default: --max-batch)")
    parser.add_argument("--quick", action="store_true", help="a quarter of the episodes, a quarter of the times")
    args = parser.parse_args()
    if args.quick:
        args.episodes //= 4
        args.median_s /= 4
        args.cap_s /= 4
        args.cost_per_token_ms /= 4
    sync_batch = args.sync_batch or args.max_batch

    tasks = [Task(f"t{i}", f"task {i}") for i in range(args.episodes)]
    sampling = SamplingParams(max_tokens=args.tokens)

    def make_env() -> SlowEnv:
        return SlowEnv(args.turns, args.median_s, args.sigma, args.cap_s)

    latencies = [latency(t.id, k, args.median_s, args.sigma, args.cap_s) for t in tasks for k in range(args.turns)]
    calls = math.ceil(args.episodes / args.max_batch) * args.turns
    generation_total = calls * args.tokens * args.cost_per_token_ms / 1000
    env_total = sum(latencies)
    bound = max(generation_total, env_total / args.workers)
    ordered = sorted(latencies)
    print(
        f"{args.episodes} episodes × {args.turns} turns; step latency median {ordered[len(ordered) // 2]:.3f} s, "
        f"p99 {ordered[int(0.99 * len(ordered))]:.2f} s, max {ordered[-1]:.2f} s (limit {args.cap_s} s); "
        f"generation {args.tokens} tokens × {args.cost_per_token_ms} ms per call of ≤ {args.max_batch}",
        flush=True,
    )
    print(
        f"bound: max(generation {generation_total:.1f} s, environments {env_total:.0f} s / {args.workers} workers "
        f"= {env_total / args.workers:.1f} s) = {bound:.1f} s",
        flush=True,
    )

    policy = TimedGenerator(args.cost_per_token_ms / 1000, args.max_batch)
    config = RolloutConfig(
        max_batch=args.max_batch, max_episodes=args.in_flight, env_concurrency=args.workers, step_timeout_s=None
    )
    engine = RolloutEngine(policy, make_env, sampling, config)
    done = engine.run(requests(tasks))
    engine_s = engine.stats["wall_s"]
    busy = policy.busy_s / engine_s
    scored = sum(t.score is not None and t.score.value == 1.0 for t in done)
    print(
        f"  engine: {engine_s:.1f} s ({scored}/{len(tasks)} episodes scored 1), generator busy {busy:.0%}", flush=True
    )

    policy_sync = TimedGenerator(args.cost_per_token_ms / 1000, args.max_batch)
    sync_s = synchronous(policy_sync, make_env, tasks, sampling, sync_batch, args.workers)
    print(
        f"  synchronous loop (chunks of {sync_batch}): {sync_s:.1f} s, generator busy {policy_sync.busy_s / sync_s:.0%}",
        flush=True,
    )

    speedup, of_bound = sync_s / engine_s, bound / engine_s
    verdicts = {
        "speedup": speedup >= TARGET_SPEEDUP,
        "bound": of_bound >= TARGET_BOUND,
        "busy": busy >= TARGET_BUSY,
    }
    print(
        f"\nengine vs synchronous loop: {speedup:.2f}× (target ≥ {TARGET_SPEEDUP:.0f}×: "
        f"{'PASS' if verdicts['speedup'] else 'MISS'})\n"
        f"engine vs the bound: {of_bound:.0%} (target ≥ {TARGET_BOUND:.0%}: {'PASS' if verdicts['bound'] else 'MISS'})\n"
        f"generator busy: {busy:.0%} of the engine's wall time (target ≥ {TARGET_BUSY:.0%}: "
        f"{'PASS' if verdicts['busy'] else 'MISS'})"
    )
    print(
        json.dumps(
            {
                "engine_s": engine_s,
                "sync_s": sync_s,
                "bound_s": bound,
                "speedup": speedup,
                "of_bound": of_bound,
                "generator_busy": busy,
                "all_scored": scored == len(tasks),
            }
        )
    )
    if scored != len(tasks):
        raise SystemExit(f"only {scored} of {len(tasks)} episodes finished with reward 1")


if __name__ == "__main__":
    main()
