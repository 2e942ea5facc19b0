"""Run a batch of episodes with one policy, turn by turn, generating for all live episodes at once.

This is the synchronous core of rollout: every live episode contributes its conversation to
one batched ``generate`` call per turn, so single-turn and multi-turn environments share one
code path and the policy always samples in the largest batch available.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ludus.core.env import Env
from ludus.core.types import Score, Status, Task, Trajectory, Turn
from ludus.policies.base import Policy, SamplingParams


def run_episodes(
    env_factory: Callable[[], Env],
    tasks: Sequence[Task],
    policy: Policy,
    sampling: SamplingParams,
    *,
    seeds: Sequence[int] | None = None,
    generator: torch.Generator | None = None,
) -> list[Trajectory]:
    """One trajectory per task (pass a task several times for a GRPO group), in input order."""
    seeds = list(seeds) if seeds is not None else list(range(len(tasks)))
    envs = [env_factory() for _ in tasks]
    trajectories: list[Trajectory] = []
    for env, task, seed in zip(envs, tasks, seeds, strict=True):
        obs = env.reset(task, seed=seed)
        trajectories.append(
            Trajectory(
                task=task,
                messages=list(obs.messages),
                tools=obs.tools,
                env=env.name,
                seed=seed,
                policy_version=policy.version,
            )
        )
    live = list(range(len(tasks)))
    try:
        while live:
            tools = [trajectories[i].tools for i in live]
            completions = policy.generate([trajectories[i].messages for i in live], sampling, generator, tools)
            still_live = []
            for i, completion in zip(live, completions, strict=True):
                traj = trajectories[i]
                result = envs[i].step(completion.message())
                traj.turns.append(
                    Turn(
                        completion.prompt_ids,
                        completion.completion_ids,
                        completion.logprobs,
                        result.reward,
                        completion.finish_reason,
                    )
                )
                traj.messages = list(envs[i].messages)
                if result.done:
                    traj.score = result.score or Score.zero(Status.INFRA_ERROR, "episode ended without a score")
                else:
                    still_live.append(i)
            live = still_live
    finally:
        for env in envs:
            env.close()
    return trajectories
