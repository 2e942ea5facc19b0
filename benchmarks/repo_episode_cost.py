"""The cost of one `repo` episode against a plain `cp -r` + `pytest` of the same repository (issue 6).

    python benchmarks/repo_episode_cost.py --tasks 18

For each procedural task (the eval split), one at a time, after one warm-up of each:

* Ludus — ``RepoEnv.reset`` (a fresh copy of the repository), the oracle's actions (the gold
  fix through ``edit_file``, then ``submit``: grading on a restored tree with the hidden tests,
  by pytest with the grader's configuration inside the bubblewrap sandbox), ``close``;
* plain — ``cp -r`` of the same repository (already on disk), the same fix applied, the hidden
  tests written, ``python -m pytest -q -p no:cacheprovider`` in a subprocess on the host: no
  isolation, no protection against any of the tricks the grader defends against.

Prints the mean wall time per episode of each, their ratio, and checks that both pass every
task. Not a test.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ludus.envs.repo.env import RepoEnv


def ludus_episode(env: RepoEnv, task) -> float:
    env.reset(task, seed=0)
    result = None
    for action in env.reference_actions(task):
        result = env.step(action)
        if result.done:
            break
    env.close()
    assert result is not None and result.score is not None
    return result.score.value


def plain_episode(source: Path, task, work: Path) -> float:
    target = work / "repo"
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run(["cp", "-r", str(source), str(target)], check=True)
    for edit in task.answer["gold_edits"]:
        path = target / edit["path"]
        path.write_text(path.read_text().replace(edit["search"], edit["replace"], 1))
    for name, text in task.answer["hidden_tests"].items():
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        (target / name).write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *task.answer["fail_to_pass"]],
        cwd=target,
        capture_output=True,
    )
    return 1.0 if done.returncode == 0 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=18)
    args = parser.parse_args()
    env = RepoEnv()
    source = env.task_source("eval")
    tasks = [source.get(i) for i in range(args.tasks)]
    work = Path(tempfile.mkdtemp(prefix="ludus-bench-"))
    sources = []
    for i, task in enumerate(tasks):
        root = work / f"src{i}"
        for name, text in task.answer["files"].items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        sources.append(root)
    ludus_episode(env, tasks[0])  # warm-up: the sandbox workers start
    plain_episode(sources[0], tasks[0], work)
    ludus_s, plain_s, ludus_ok, plain_ok = [], [], 0.0, 0.0
    for task, root in zip(tasks, sources, strict=True):
        t0 = time.perf_counter()
        ludus_ok += ludus_episode(env, task)
        t1 = time.perf_counter()
        plain_ok += plain_episode(root, task, work)
        t2 = time.perf_counter()
        ludus_s.append(t1 - t0)
        plain_s.append(t2 - t1)
    shutil.rmtree(work, ignore_errors=True)
    report = {
        "tasks": len(tasks),
        "ludus_ms": 1000 * statistics.mean(ludus_s),
        "plain_ms": 1000 * statistics.mean(plain_s),
        "ratio": statistics.mean(ludus_s) / statistics.mean(plain_s),
        "ludus_solved": ludus_ok,
        "plain_solved": plain_ok,
    }
    print(
        f"{len(tasks)} tasks: Ludus episode {report['ludus_ms']:.0f} ms (copy, fix, sandboxed grading), "
        f"plain cp -r + pytest {report['plain_ms']:.0f} ms; Ludus / plain = {report['ratio']:.2f}; "
        f"solved {ludus_ok:.0f} and {plain_ok:.0f} of {len(tasks)}"
    )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
