"""The floor under code_throughput.py: what two fresh processes per verification cost on this machine.

    python benchmarks/code_floor.py [--pairs N]

The code verifier gives every verification two fresh processes: the solution's (cloned into new
namespaces) and the test runner's (see docs/code.md). This script measures that design with
everything else stripped away — no pool, no worker bookkeeping, no host, no JSON requests —
inside one bubblewrap sandbox, on the same pairs as code_throughput.py, sequentially, in CPU
time (so that the figures add up and a busy machine does not skew them):

* ``two empty processes`` — the two clones, each exiting at once;
* ``two processes (Ludus's design)`` — the solution loads and serves calls, the tests call it
  over a socket (ludus's own inside.py and envs/code/harness.py);
* ``one process, tests in a long-lived runner`` — a design Ludus does not use (the runner would
  not be fresh per verification), measured to show what giving that up would buy;

and baseline (b) of code_throughput.py, ``python file.py`` per sample, in CPU time too.
``baseline (b) / design`` bounds the throughput ratio the design can reach here at equal
parallelism on saturated CPUs: the real verifier adds its bookkeeping on top. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from code_throughput import DATA, host_program, load_pairs

from ludus.envs.code.verifier import HARNESS, extract_code, parse_task, solution_program
from ludus.sandbox.backend import bwrap_args, interpreter, python_paths

SANDBOX = Path(__file__).resolve().parent.parent / "src" / "ludus" / "sandbox"

# Runs inside bubblewrap with ludus's shipped modules on its path; prints one JSON line.
INNER = r"""
import json, os, socket, sys, types
sys.path.insert(0, sys.argv[1])
import ludus_inside as inside
import ludus_code_harness as harness
for name in ("collections", "itertools", "functools", "math", "re", "heapq", "bisect", "string", "typing"):
    __import__(name)  # the workers' warm imports
inside._outer_ids = (os.getuid(), os.getgid())
jobs = json.load(open(os.path.join(sys.argv[1], "jobs.json")))

def solution(job, sock, work):
    inside._enter_namespaces(64)
    os.setsid()
    if work:
        namespace = types.ModuleType("solution").__dict__
        exec(compile(job["program"], "main.py", "exec"), namespace)
        inside.serve_calls(sock, namespace)

def tests(job, sock):
    harness.CALL_SOCKET_FD = sock.detach()  # the runner owns (and closes) the socket
    report = harness._run(job["payload"], lambda frame: None)
    return all(r["outcome"] == "passed" for r in report["results"].values())

def measure(design):
    before, passed = os.times(), 0
    for job in jobs:
        ours, theirs = socket.socketpair()
        pid = inside._spawn(isolated=True)
        if pid == 0:
            ours.close()
            solution(job, theirs, design != "empty")
            os._exit(0)
        theirs.close()
        if design == "runner":
            passed += tests(job, ours)
        else:
            runner = os.fork()
            if runner == 0:
                os._exit(0 if design == "empty" or tests(job, ours) else 1)
            passed += os.waitpid(runner, 0)[1] == 0
        ours.close()
        os.waitpid(pid, 0)
    after = os.times()
    return {"ms": 1000 * sum(after[i] - before[i] for i in range(4)) / len(jobs), "passed": passed}

print(json.dumps({d: measure(d) for d in ("empty", "two", "runner")}))
"""


def baseline_b_cpu_ms(pairs: list[dict]) -> tuple[float, int]:
    """CPU milliseconds per sample of ``python file.py`` (sequential), and how many passed."""
    passed = 0
    with tempfile.TemporaryDirectory(prefix="ludus-floor-") as scratch:
        before = os.times()
        for k, pair in enumerate(pairs):
            path = Path(scratch) / f"s{k}.py"
            path.write_text(host_program(pair))
            passed += subprocess.run([sys.executable, str(path)], capture_output=True).returncode == 0
        after = os.times()
    return 1000 * (after.children_user + after.children_system - before.children_user - before.children_system) / len(
        pairs
    ), passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=240)
    args = parser.parse_args()
    pairs = load_pairs(DATA, False, args.pairs, 0)
    with tempfile.TemporaryDirectory(prefix="ludus-floor-") as shipped:
        for name, source in (
            ("ludus_inside", SANDBOX / "inside.py"),
            ("ludus_plain", SANDBOX / "plain.py"),
            ("ludus_code_harness", HARNESS),
        ):
            (Path(shipped) / f"{name}.py").write_text(source.read_text())
        jobs = []
        for pair in pairs:
            task = parse_task(pair["task"])
            payload = {
                "runner": "statements",
                "tests": [{"id": t.id, "code": t.code} for t in task.tests],
                "setup": task.setup,
                "bind": {"candidate": task.entry_point},
                "call_timeout_s": 5.0,
                "load_timeout_s": 30.0,
            }
            jobs.append({"program": solution_program(task, extract_code(pair["completion"]) or ""), "payload": payload})
        (Path(shipped) / "jobs.json").write_text(json.dumps(jobs))
        command = [*bwrap_args(python_paths()), "--ro-bind", shipped, shipped, "--"]
        done = subprocess.run([*command, interpreter(), "-c", INNER, shipped], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the sandboxed measurement failed:\n{done.stderr[-3000:]}")
    inner = json.loads(done.stdout.strip().splitlines()[-1])
    base_ms, base_passed = baseline_b_cpu_ms(pairs)

    n = len(pairs)
    rows = [
        ("two empty processes", inner["empty"]),
        ("two processes (Ludus's design)", inner["two"]),
        ("one process, tests in a long-lived runner", inner["runner"]),
    ]
    print(f"{n} pairs, sequential, CPU time per verification (bubblewrap on; nothing but the design):")
    print(f"{'design':44} {'ms CPU':>7} {'passed':>7} {'baseline (b) /':>15}")
    for name, row in rows:
        print(f"{name:44} {row['ms']:7.2f} {row['passed']:7d} {base_ms / row['ms']:14.1f}×")
    print(f"{'baseline (b): python file.py':44} {base_ms:7.2f} {base_passed:7d}")
    print(
        f"\nat best {base_ms / inner['two']['ms']:.1f}× baseline (b) for Ludus's design on this machine "
        f"(target 3×), before any bookkeeping"
    )
    failures = [name for name, row in rows[1:] if row["passed"] != n] + (["baseline (b)"] if base_passed != n else [])
    if failures:
        raise SystemExit(f"pairs failed in: {', '.join(failures)}")


if __name__ == "__main__":
    main()
