"""Evaluation: any environment × any policy → mean reward, pass@k, best-of-N, per category.

Used by ``ludus eval``. Episodes run on the rollout engine and stream to
``<run dir>/trajectories.jsonl``; a rerun with ``resume`` skips what the file already holds,
and the report always covers every trajectory in it.

Metrics count only gradable samples: an ``infra_error`` says nothing about the policy, so it
is reported on its own line and left out of every mean (a task with no gradable sample is
left out too).
"""

from __future__ import annotations

import asyncio
import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ludus.core.env import Env
from ludus.core.types import Status, Task, Trajectory
from ludus.policies.base import Policy, SamplingParams
from ludus.rollout.engine import JsonlSink, RolloutConfig, RolloutEngine, is_number, requests
from ludus.rollout.hosts import EnvHost

TRAJECTORIES = "trajectories.jsonl"
SUMMARY = "summary.json"


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of pass@k from ``n`` samples of which ``c`` are correct:
    1 - C(n-c, k) / C(n, k), the chance that k samples drawn without replacement include a correct one."""
    if not 0 <= c <= n or k < 1:
        raise ValueError(f"pass@k needs 0 <= c <= n and k >= 1, got n={n}, c={c}, k={k}")
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per task, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass
class Summary:
    """What an evaluation found. ``accuracy`` is the fraction of samples graded correct
    (:attr:`Score.correct`, the one definition Ludus uses, also in training); ``pass_at`` maps k
    to pass@k by the same test; ``best_of_n`` is the mean over tasks of the best reward among a
    task's samples (the verifier picking the best)."""

    tasks: int
    samples: int
    mean_reward: float
    accuracy: float  # fraction of samples graded correct
    pass_at: dict[int, float]
    best_of_n: float
    infra_errors: int
    statuses: dict[str, int]
    infra_reason: str = ""  # the commonest reason among the infra errors: why samples could not be graded
    categories: dict[str, dict[str, float]] = field(default_factory=dict)
    # what environments counted over every sample (tool_calls, tool_errors, tool_cache_hits, …): totals
    env_counts: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["pass_at"] = {str(k): v for k, v in self.pass_at.items()}
        return out


def category_of(task: Task) -> str:
    """A task's category for the breakdown: ``info["category"]``, else its ``source``, else ``-``."""
    value = task.info.get("category") if isinstance(task.info, dict) else None
    return str(value) if value not in (None, "") else (task.source or "-")


def summarize(trajectories: Sequence[Trajectory], ks: Sequence[int] = (1,)) -> Summary:
    """Metrics over trajectories (any order; samples of one task share its id)."""
    statuses = Counter(t.score.status if t.score else Status.INFRA_ERROR for t in trajectories)
    gradable = [t for t in trajectories if t.score is not None and not t.score.is_infra_error]
    by_task: dict[str, list[Trajectory]] = defaultdict(list)
    for t in gradable:
        by_task[t.task.id].append(t)
    fewest = min((len(v) for v in by_task.values()), default=0)
    usable_ks = sorted({k for k in ks if 1 <= k <= fewest})

    def stats(groups: dict[str, list[Trajectory]]) -> dict[str, Any]:
        samples = [t for g in groups.values() for t in g]
        rewards = [t.score.value for t in samples]  # type: ignore[union-attr]
        return {
            "tasks": len(groups),
            "samples": len(samples),
            "mean_reward": sum(rewards) / len(rewards) if rewards else 0.0,
            "accuracy": _mean([t.score.correct for t in samples]),  # type: ignore[union-attr]
            "best_of_n": _mean([max(t.score.value for t in g) for g in groups.values()]),  # type: ignore[union-attr]
            "pass_at": {
                k: _mean([pass_at_k(len(g), sum(t.score.correct for t in g), k) for g in groups.values()])  # type: ignore[union-attr]
                for k in usable_ks
            },
        }

    overall = stats(by_task)
    per_category: dict[str, dict[str, list[Trajectory]]] = defaultdict(dict)
    for task_id, group in by_task.items():
        per_category[category_of(group[0].task)][task_id] = group
    categories = {}
    if len(per_category) > 1:
        for name, groups in sorted(per_category.items()):
            s = stats(groups)
            categories[name] = {"tasks": s["tasks"], "samples": s["samples"], "mean_reward": s["mean_reward"]} | {
                f"pass@{k}": v for k, v in s["pass_at"].items()
            }
    return Summary(
        tasks=overall["tasks"],
        samples=overall["samples"],
        mean_reward=overall["mean_reward"],
        accuracy=overall["accuracy"],
        pass_at=overall["pass_at"],
        best_of_n=overall["best_of_n"],
        infra_errors=statuses.get(Status.INFRA_ERROR, 0),
        statuses=dict(statuses),
        infra_reason=infra_reason(trajectories),
        categories=categories,
        env_counts=env_counts(trajectories),
    )


def infra_reason(trajectories: Sequence[Trajectory]) -> str:
    """The commonest reason among the trajectories' infrastructure failures ("" without any)."""
    reasons = Counter(
        t.score.reason if t.score is not None else "no score"
        for t in trajectories
        if t.score is None or t.score.is_infra_error
    )
    return reasons.most_common(1)[0][0] if reasons else ""


def env_counts(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """The numbers environments reported (the engine's ``info["env"]``), summed over trajectories."""
    totals: Counter[str] = Counter()
    for t in trajectories:
        for key, value in (t.info.get("env") or {}).items():
            if is_number(value):
                totals[key] += value
    return dict(sorted(totals.items()))


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def evaluate(
    policy: Policy,
    env_factory: Callable[[], Env],
    tasks: Sequence[Task],
    run_dir: str | Path | None = None,
    *,
    samples: int = 1,
    sampling: SamplingParams | None = None,
    ks: Sequence[int] = (1,),
    resume: bool = False,
    config: RolloutConfig | None = None,
    on_trajectory: Callable[[Trajectory], None] | None = None,
    host: EnvHost | None = None,
    actors: Mapping[str, Policy] | None = None,
) -> Summary:
    """Run ``samples`` episodes per task and summarise them: ``ludus eval``, the trainer's held-out
    evaluation and the benchmarks all measure through here.

    With a ``run_dir``, trajectories stream to its file and the summary covers every trajectory
    in it: without ``resume`` an existing file is an error (it would mix two runs); with it, the
    episodes already there are skipped. Without one, nothing is written. ``host`` runs the
    environments (a ``RayHost``, say; the caller shuts it down); by default threads of this process.
    ``actors``: other policies by name, for the seats an environment hands to them (a game's opponent)."""
    engine = RolloutEngine(policy, env_factory, sampling or SamplingParams(), config, host, actors=actors)
    if run_dir is None:
        done = engine.run(requests(tasks, samples))
        if on_trajectory is not None:
            for trajectory in done:
                on_trajectory(trajectory)
        return summarize(done, ks)
    run_dir = Path(run_dir)
    path = run_dir / TRAJECTORIES
    if path.exists() and path.stat().st_size > 0 and not resume:
        raise FileExistsError(
            f"{path} already holds trajectories: pass --resume to continue that run, or pick a new --name"
        )
    with JsonlSink(path) as sink:
        earlier = sink.trajectories()
        for trajectory in earlier:
            if on_trajectory:
                on_trajectory(trajectory)

        async def run() -> list[Trajectory]:
            new = []
            async for trajectory in engine.stream(requests(tasks, samples), sink):
                new.append(trajectory)
                if on_trajectory:
                    on_trajectory(trajectory)
            return new

        new = asyncio.run(run())
    wanted = {f"{t.id}#{k}" for t in tasks for k in range(samples)}
    everything = [t for t in [*earlier, *new] if t.info.get("key") in wanted]
    summary = summarize(everything, ks)
    (run_dir / SUMMARY).write_text(json.dumps(summary.to_dict(), indent=2) + "\n")
    return summary
