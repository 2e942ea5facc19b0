"""The math verifier's in-process cost per item, this tree against an earlier revision, in one run.

    python benchmarks/math_cost.py --baseline a60874e [--repeat 3]

Both versions judge the same items (``benchmarks/data/math_labeled.jsonl`` and ``math_regression.jsonl``
of this tree, less those that take the verifier's time limit) with ``judge`` in one process each (no worker pool, no time limit: the verifier's own work),
alternating, ``--repeat`` times; the baseline runs from ``git worktree`` of ``--baseline``. Prints CPU ms
per item for each (the best of the repeats) and the ratio. Issue 34's limit: the new rules may cost at
most 20 % more per item. Not a test.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPORA = [ROOT / "benchmarks" / "data" / "math_labeled.jsonl", ROOT / "benchmarks" / "data" / "math_regression.jsonl"]

# run in a fresh interpreter whose ``ludus`` is the tree given first: CPU seconds to judge every item once
MEASURE = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from ludus.envs.math.verifier import judge
items = [json.loads(line) for path in sys.argv[2:] for line in open(path) if line.strip()]
# items that take the verifier's time limit (power towers, "hang") have no cost to compare without one
items = [i for i in items if not str(i.get("expected_status", "")).startswith("timeout") and i["category"] != "hang"]
for item in items[:50]:
    judge(item["completion"], item["gold"])  # imports and caches warm
started = time.process_time()
for item in items:
    judge(item["completion"], item["gold"])
print(json.dumps({"items": len(items), "cpu_s": time.process_time() - started}))
"""


def measure(source: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, str(source), *map(str, CORPORA)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="the git revision to compare with")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ludus-math-cost-") as folder:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", folder, args.baseline], check=True)
        try:
            runs: dict[str, list[float]] = {"baseline": [], "this tree": []}
            for _ in range(args.repeat):
                for name, source in (("baseline", Path(folder) / "src"), ("this tree", ROOT / "src")):
                    result = measure(source)
                    runs[name].append(result["cpu_s"] / result["items"] * 1000)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", folder], check=True)
    best = {name: min(ms) for name, ms in runs.items()}
    print(f"{result['items']} items (labeled + regression corpora), CPU ms per item, best of {args.repeat}:")
    for name, ms in best.items():
        print(f"  {name:<10} {ms:7.3f}   (runs: {', '.join(f'{m:.3f}' for m in runs[name])})")
    print(f"  ratio this tree / baseline: {best['this tree'] / best['baseline']:.3f}")


if __name__ == "__main__":
    main()
