"""Relative rewards for a group (RULER-style): a judge scores the G replies of one prompt together.

Why: for open-ended tasks an absolute judge score is noisy and drifts, but GRPO only needs each
sample's standing within its group. Asking the judge to score the whole group in one call gives
it the comparison directly (ART's RULER). :meth:`~ludus.rewards.judge.Judge.rank` shows the group
in a seeded shuffle and its reverse, so a judge's taste for early or late positions cancels.

With ``group_judge: {model: URL, ...}`` in the training config, each step's groups are ranked
after sampling: every gradable episode's reward becomes its judged score, the environment's own
value is kept as the component ``env`` (logged as ``reward/env``). Episodes the environment
already failed hard on — ``infra_error`` (masked anyway) and ``honeypot`` (punished whatever the
reply) — keep their score and are not shown to the judge. A judge failure makes the group's
episodes ``infra_error``: masked, never a made-up ranking.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from ludus.core.types import InfraError, Score, Status, Trajectory
from ludus.rewards.judge import Judge

KEPT = (Status.INFRA_ERROR, Status.HONEYPOT)


def final_reply(trajectory: Trajectory) -> str:
    """What the judge reads: the episode's last assistant message."""
    replies = [m.content for m in trajectory.messages if m.role == "assistant"]
    return replies[-1] if replies else ""


def rank_groups(judge: Judge, groups: Sequence[Sequence[Trajectory]], *, rounds: int = 2, seed: int = 0) -> None:
    """Replace the rewards of ``groups`` by the judge's ranking of each (in place, see the module docstring)."""

    async def all_groups() -> None:
        await asyncio.gather(*(_rank(judge, group, rounds, seed + i) for i, group in enumerate(groups)))

    asyncio.run(all_groups())


async def _rank(judge: Judge, group: Sequence[Trajectory], rounds: int, seed: int) -> None:
    ranked = [t for t in group if t.score is not None and t.score.status not in KEPT and t.turns]
    if len(ranked) < 2:
        return
    try:
        scores = await judge.arank(ranked[0].task, [final_reply(t) for t in ranked], rounds=rounds, seed=seed)
    except InfraError as exc:
        for t in ranked:
            t.score = Score.zero(Status.INFRA_ERROR, f"the group judge failed: {exc}")
        return
    for t, score in zip(ranked, scores, strict=True):
        assert t.score is not None
        score.components = {**t.score.components, "env": t.score.value, "judge_rank": score.value}
        for turn in t.turns[:-1]:
            turn.reward = 0.0
        t.turns[-1].reward = score.value
        t.score = score


def group_judge(options: Mapping[str, Any]) -> tuple[Judge, int]:
    """The judge and its ``rounds`` from the config's ``group_judge`` mapping."""
    options = dict(options)
    rounds = int(options.pop("rounds", 2))
    if "model" not in options:
        raise ValueError("group_judge needs 'model': an OpenAI-compatible base URL such as http://127.0.0.1:8000/v1")
    return Judge(**options), rounds
