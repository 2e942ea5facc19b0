"""Ludus's math verifier vs. Hugging Face Math-Verify on the same labeled items, in one run.

    pip install -e '.[bench]'
    python benchmarks/math_verify_vs_ludus.py [--data benchmarks/data/math_labeled.jsonl]
        [--regression benchmarks/data/math_regression.jsonl]

Each item is (completion, gold, equivalent?). Both verifiers see the same completion and gold;
Math-Verify is called the way its README shows (``verify(parse("$gold$"), parse(completion))``).
Both run one item at a time in one worker process with a 30 s watchdog, so a hang in either
is counted instead of stopping the benchmark, and the per-item pipe overhead is the same for
both. Prints accuracy, false-positive and false-negative rates, timeouts, items/second and
per-category confusion for both, and the ratios. Then the same for the regression corpus of real
answer notation (``--regression``; cases taken from other graders' test suites and documented
rules, each with its ``source``), by category; ``--regression ''`` skips it. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from ludus.core.types import Status
from ludus.envs.math.guard import GuardedPool
from ludus.envs.math.verifier import MathVerifier

ROOT = Path(__file__).resolve().parent.parent
WATCHDOG_S = 30.0


def math_verify_judge(completion: str, gold: str) -> bool:
    """Math-Verify as documented; runs in the watchdog's worker process."""
    from math_verify import parse, verify

    return bool(verify(parse(f"${gold}$"), parse(completion)))


def run_math_verify(items: list[dict]) -> tuple[list[str], list[float]]:
    verdicts, seconds = [], []
    with GuardedPool("benchmarks.math_verify_vs_ludus:math_verify_judge", workers=1, memory_mb=4096) as pool:
        pool.call("\\boxed{1}", "1", timeout_s=WATCHDOG_S)  # start-up and imports are not timed
        for item in items:
            start = time.perf_counter()
            outcome = pool.call(item["completion"], item["gold"], timeout_s=WATCHDOG_S)
            seconds.append(time.perf_counter() - start)
            verdicts.append(("correct" if outcome.value else "wrong") if outcome.kind == "ok" else outcome.kind)
    return verdicts, seconds


def run_ludus(items: list[dict]) -> tuple[list[str], list[float]]:
    verifier = MathVerifier(workers=1, timeout_s=5.0)
    verifier.score("\\boxed{1}", "1")
    verdicts, seconds = [], []
    for item in items:
        start = time.perf_counter()
        verdicts.append(verifier.score(item["completion"], item["gold"]).status)
        seconds.append(time.perf_counter() - start)
    return verdicts, seconds


def summarise(name: str, items: list[dict], verdicts: list[str], times: list[float]) -> dict:
    positives = sum(item["equivalent"] for item in items)
    negatives = len(items) - positives
    fp = sum(v == Status.CORRECT and not i["equivalent"] for i, v in zip(items, verdicts, strict=True))
    fn = sum(v != Status.CORRECT and i["equivalent"] for i, v in zip(items, verdicts, strict=True))
    timeouts = sum(v in (Status.TIMEOUT, "timeout") for v in verdicts)
    crashes = sum(v in ("crash", "memory", Status.INFRA_ERROR) for v in verdicts)
    return {
        "verifier": name,
        "accuracy": 1 - (fp + fn) / len(items),
        "false_positive_rate": fp / max(1, negatives),
        "false_negative_rate": fn / max(1, positives),
        "false_positives": fp,
        "false_negatives": fn,
        "timeouts": timeouts,
        "crashes": crashes,
        "items_per_s": len(items) / sum(times),
        "median_ms": statistics.median(times) * 1000,
        "max_s": max(times),
        "seconds": sum(times),
    }


def per_category(items: list[dict], verdicts: dict[str, list[str]]) -> list[str]:
    table: dict[str, Counter] = defaultdict(Counter)
    for k, item in enumerate(items):
        for name, v in verdicts.items():
            said = v[k] == Status.CORRECT
            table[item["category"]][
                f"{name}:{'TP' if said and item['equivalent'] else 'FP' if said else 'FN' if item['equivalent'] else 'TN'}"
            ] += 1
    names = list(verdicts)
    width = max(18, *(len(c) for c in table))
    header = f"{'category':{width}} {'n':>4} " + " ".join(f"{n + ' TP/FP/TN/FN':>26}" for n in names)
    lines = [header]
    for category in sorted(table):
        c = table[category]
        n = sum(c[f"{names[0]}:{k}"] for k in ("TP", "FP", "TN", "FN"))
        cells = " ".join(f"{'/'.join(str(c[f'{name}:{k}']) for k in ('TP', 'FP', 'TN', 'FN')):>26}" for name in names)
        lines.append(f"{category:{width}} {n:4d} {cells}")
    return lines


def print_table(rows: list[dict]) -> None:
    print(
        f"\n{'verifier':12} {'accuracy':>9} {'FP rate':>8} {'FN rate':>8} {'FP':>4} {'FN':>4} {'timeouts':>9} "
        f"{'crashes':>8} {'items/s':>8} {'median ms':>10} {'slowest s':>10}"
    )
    for r in rows:
        print(
            f"{r['verifier']:12} {r['accuracy']:9.3f} {r['false_positive_rate']:8.3f} {r['false_negative_rate']:8.3f} "
            f"{r['false_positives']:4d} {r['false_negatives']:4d} {r['timeouts']:9d} {r['crashes']:8d} "
            f"{r['items_per_s']:8.1f} {r['median_ms']:10.2f} {r['max_s']:10.2f}"
        )


def regression(path: str) -> dict:
    """The regression corpus: both verifiers, by category; items marked ``known_miss`` are counted apart."""
    items = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    print(
        f"\n== regression corpus {Path(path).name}: {len(items)} items "
        f"({sum(i['equivalent'] for i in items)} equivalent, {sum(bool(i.get('known_miss')) for i in items)} "
        "marked known_miss)",
        flush=True,
    )
    ludus, ludus_times = run_ludus(items)
    mv, mv_times = run_math_verify(items)
    rows = [summarise("ludus", items, ludus, ludus_times), summarise("math-verify", items, mv, mv_times)]
    print_table(rows)
    print("\nper category (TP/FP/TN/FN):")
    print("\n".join(per_category(items, {"ludus": ludus, "math-verify": mv})))
    return {"ludus": rows[0], "math_verify": rows[1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(ROOT / "benchmarks" / "data" / "math_labeled.jsonl"))
    parser.add_argument("--regression", default=str(ROOT / "benchmarks" / "data" / "math_regression.jsonl"))
    parser.add_argument("--show", type=int, default=15, help="print up to this many of Math-Verify's false positives")
    args = parser.parse_args()
    os.chdir(ROOT)  # the watchdog's worker imports this file as benchmarks.math_verify_vs_ludus
    sys.path.insert(0, str(ROOT))
    items = [json.loads(line) for line in Path(args.data).read_text().splitlines() if line.strip()]
    print(f"{len(items)} labeled items ({sum(i['equivalent'] for i in items)} equivalent)", flush=True)

    ludus, ludus_times = run_ludus(items)
    mv, mv_times = run_math_verify(items)
    rows = [summarise("ludus", items, ludus, ludus_times), summarise("math-verify", items, mv, mv_times)]
    print_table(rows)
    lu, mvr = rows
    print(
        f"\nratios (ludus / math-verify): throughput {lu['items_per_s'] / mvr['items_per_s']:.2f}x, "
        f"median latency {mvr['median_ms'] / lu['median_ms']:.2f}x lower, "
        f"false positives {lu['false_positives']}/{mvr['false_positives']}, "
        f"false negatives {lu['false_negatives']}/{mvr['false_negatives']}"
    )
    print("\nper category (TP/FP/TN/FN):")
    print("\n".join(per_category(items, {"ludus": ludus, "math-verify": mv})))
    shown = [i for i, v in zip(items, mv, strict=True) if v == "correct" and not i["equivalent"]][: args.show]
    if shown:
        print("\nsome of Math-Verify's false positives (gold | answer tail):")
        for item in shown:
            print(f"  {item['id']:24} {item['gold'][:30]!r:34} {item['completion'][-60:]!r}")
    results = {"ludus": lu, "math_verify": mvr}
    if args.regression:
        results["regression"] = regression(args.regression)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
