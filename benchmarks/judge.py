"""LLM-judge throughput and position bias: ``ludus.rewards.judge.Judge`` against the scripted judge server.

The judge model is :class:`~ludus.rewards.scripted_judge.ScriptedJudgeServer` on 127.0.0.1 with
``delay`` seconds before every answer: a stand-in for a model's latency, not a model. What is
measured is therefore the client — how many requests it sends and how many it keeps in flight —
not any model's speed; with a real judge the same request counts hold and the latency differs.

Throughput, on a GRPO-like workload: N completions in groups of 8 (one prompt each), where a
group's completions repeat as they do early in training (drawn from a few distinct replies).

  (a) no cache, no sharing, concurrency 1: one call after another, per completion. The naive anchor — what
      a judge reward called once per rollout does when nothing overlaps the calls (verifiers'
      JudgeRubric awaits one judge call per rollout; how many rollouts it scores at once depends
      on its caller, so this is a floor for the pattern, not a measurement of verifiers).
  (b) no cache, no sharing, concurrency 16: the same calls, 16 in flight. (``Judge(cache=False)``
      still sends identical requests in flight once; that row, (b2), is printed too.)
  (c) cache and in-flight sharing, concurrency 16: repeated completions are asked once.
  (d) group ranking: ``rank`` scores a group's 8 completions in one request per order
      (rounds=2: the order and its reverse), instead of 8 per-completion calls.

Position bias, with ``bias=0.4`` (the judge prefers whoever it is shown first, by 0.4 of the
scale): over pairs of equal-quality replies, how often the first-shown wins when one order is
asked, and the mean P(first better) from ``compare`` (both orders); over groups of equal
replies, the spread of ``rank`` scores with rounds 1 and 2.

    python benchmarks/judge.py                 # about 30 s
    python benchmarks/judge.py --n 400 --delay 0.1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time

from ludus.core.types import Task
from ludus.rewards.judge import Judge
from ludus.rewards.scripted_judge import ScriptedJudgeServer

WORDS = (
    "amber birch cedar delta ember fjord grove heron iris juniper kelp lotus maple nectar otter pearl "
    "quartz raven sage tulip umber violet willow yarrow zephyr basil clover dune flint garnet"
).split()


def workload(n: int, group: int, distinct: int, seed: int) -> list[tuple[Task, list[str]]]:
    """``n // group`` prompts, each with ``group`` completions drawn from ``distinct`` replies."""
    rng = random.Random(seed)
    groups = []
    for g in range(n // group):
        points = rng.sample(WORDS, 3)
        task = Task(id=f"bench/{g}", prompt=f"Explain topic {g}.", answer="\n".join(f"- {p}" for p in points))
        pool = []
        for k in range(distinct):
            said = rng.sample(points, rng.randint(0, 3))
            pool.append(f"Reply {k}: " + (", ".join(said) if said else "no idea") + ".")
        groups.append((task, [rng.choice(pool) for _ in range(group)]))
    return groups


class UnsharedJudge(Judge):
    """A judge that asks every call afresh: no cache and no sharing of identical requests in
    flight (``Judge(cache=False)`` still shares those) — the naive client, for the anchors."""

    async def _verdict(self, messages, mode, ids, sample):
        return await self._ask(messages, mode, ids, self._key(messages, sample))


def per_completion(
    server: ScriptedJudgeServer, model: str, groups, *, concurrency: int, cache: bool, shared: bool = True
) -> dict:
    kind = Judge if shared else UnsharedJudge
    judge = kind(server.url, model_name=model, reference="answer", concurrency=concurrency, cache=cache)
    before = server.stats()["requests"]
    start = time.perf_counter()
    if concurrency == 1:
        for task, completions in groups:
            for completion in completions:
                judge.score(task, completion)
    else:

        async def all_at_once() -> None:
            await asyncio.gather(*(judge.ascore(task, c) for task, completions in groups for c in completions))

        asyncio.run(all_at_once())
    seconds = time.perf_counter() - start
    judge.close()
    scored = sum(len(c) for _, c in groups)
    return {"scored": scored, "seconds": seconds, "requests": server.stats()["requests"] - before}


def ranked(server: ScriptedJudgeServer, model: str, groups, *, rounds: int) -> dict:
    judge = Judge(server.url, model_name=model, reference="answer", concurrency=16, cache=False)
    before = server.stats()["requests"]
    start = time.perf_counter()

    async def all_groups() -> None:
        await asyncio.gather(*(judge.arank(task, completions, rounds=rounds) for task, completions in groups))

    asyncio.run(all_groups())
    seconds = time.perf_counter() - start
    judge.close()
    scored = sum(len(c) for _, c in groups)
    return {"scored": scored, "seconds": seconds, "requests": server.stats()["requests"] - before}


def position_bias(server: ScriptedJudgeServer, pairs: int, groups: int, seed: int) -> dict:
    model = f"scripted?bias=0.4&delay={0.0}"
    judge = Judge(server.url, model_name=model, reference="answer", concurrency=16)
    rng = random.Random(seed)
    first_wins_one_order, compare_first, decisive = 0, [], 0
    for i in range(pairs):
        points = rng.sample(WORDS, 3)
        task = Task(id=f"bias/{i}", prompt=f"Explain pair {i}.", answer="\n".join(f"- {p}" for p in points))
        a, b = (f"It is about {p}." for p in rng.sample(points, 2))  # one key point each: equal quality
        # one order, as a judge asked once sees it (the prompt Judge.compare sends for that order)
        [reply] = judge.policy.generate([judge._messages("pairwise", task, [a, b])], judge.sampling)
        winner = json.loads(reply.text)["winner"]
        first_wins_one_order += winner == "A"
        decisive += winner != "tie"
        compare_first.append(judge.compare(task, a, b).a_better)  # a is shown first in compare's first order
    spreads = {}
    for rounds in (1, 2):
        spread = []
        for g in range(groups):
            points = rng.sample(WORDS, 4)
            task = Task(id=f"rank/{g}", prompt=f"Explain group {g}.", answer="\n".join(f"- {p}" for p in points))
            equal = [f"It is about {p}." for p in points]  # four replies, one key point each
            values = [s.value for s in judge.rank(task, equal, rounds=rounds, seed=g)]
            spread.append(max(values) - min(values))
        spreads[rounds] = statistics.mean(spread)
    judge.close()
    return {
        "pairs": pairs,
        "first_wins_one_order": first_wins_one_order / pairs,
        "decisive_one_order": decisive / pairs,
        "compare_mean_p_first": statistics.mean(compare_first),
        "groups": groups,
        "rank_spread": spreads,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200, help="completions to judge (default 200)")
    parser.add_argument("--group", type=int, default=8, help="completions per prompt (default 8)")
    parser.add_argument("--distinct", type=int, default=4, help="distinct replies per prompt (default 4)")
    parser.add_argument("--delay", type=float, default=0.05, help="the stand-in model latency, seconds (default 0.05)")
    parser.add_argument("--pairs", type=int, default=200, help="equal-quality pairs for position bias (default 200)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    groups = workload(args.n, args.group, args.distinct, args.seed)
    distinct = sum(len(set(c)) for _, c in groups)
    model = f"scripted?delay={args.delay:g}"
    print(
        f"judge model: the scripted judge server on 127.0.0.1 with delay={args.delay:g} s per answer "
        "(a stand-in for a model's latency, not a model)"
    )
    print(
        f"workload: {args.n} completions in {len(groups)} groups of {args.group}, "
        f"{distinct} distinct (repeats within a group, as early in training)\n"
    )
    with ScriptedJudgeServer() as server:
        rows = {
            "(a) no cache, no sharing, concurrency 1 (naive anchor)": per_completion(
                server, model, groups, concurrency=1, cache=False, shared=False
            ),
            "(b) no cache, no sharing, concurrency 16": per_completion(
                server, model, groups, concurrency=16, cache=False, shared=False
            ),
            "(b2) Judge(cache=False), concurrency 16: in-flight sharing only": per_completion(
                server, model, groups, concurrency=16, cache=False
            ),
            "(c) cache + in-flight sharing, concurrency 16": per_completion(
                server, model, groups, concurrency=16, cache=True
            ),
            "(d) rank, one call per group and order (rounds=2), concurrency 16": ranked(
                server, model, groups, rounds=2
            ),
        }
        anchor = rows["(a) no cache, no sharing, concurrency 1 (naive anchor)"]
        print(f"{'configuration':<68} {'requests':>8} {'seconds':>8} {'scored/s':>9} {'vs (a)':>7}")
        for name, row in rows.items():
            rate = row["scored"] / row["seconds"]
            ratio = rate / (anchor["scored"] / anchor["seconds"])
            print(f"{name:<68} {row['requests']:>8} {row['seconds']:>8.2f} {rate:>9.1f} {ratio:>6.1f}x")
        b, _, c, d = (rows[k] for k in list(rows)[1:])
        print(
            f"\nrequests sent: (c)/(b) = {c['requests'] / b['requests']:.2f} (cache), "
            f"(d)/(b) = {d['requests'] / b['requests']:.2f} (group ranking)"
        )

        bias = position_bias(server, args.pairs, groups=50, seed=args.seed)
    print(f"\nposition bias (bias=0.4), {bias['pairs']} pairs of equal-quality replies:")
    print(
        f"  one order asked: the first-shown wins {bias['first_wins_one_order']:.0%} (decisive {bias['decisive_one_order']:.0%})"
    )
    print(
        f"  compare (both orders): mean P(first-shown better) = {bias['compare_mean_p_first']:.2f} (0.50 is unbiased)"
    )
    print(f"rank over {bias['groups']} groups of 4 equal replies: mean spread of scores (max - min, 0 is fair)")
    print(f"  rounds=1: {bias['rank_spread'][1]:.2f}    rounds=2: {bias['rank_spread'][2]:.2f}")
    print("  (what rounds=2 leaves is the scripted judge's rounding to integers: 2.5 + lean rounds half up)")


if __name__ == "__main__":
    main()
