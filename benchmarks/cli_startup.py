"""How long the ``ludus`` command takes to start, against Python starting and doing nothing.

    python benchmarks/cli_startup.py [--runs 21]

Each command runs ``--runs`` times as a fresh process, as a user's shell runs it: ``ludus`` is
the console script beside this interpreter. The anchor is ``python -c pass``, the floor every
Python command pays. The commands take turns, one round at a time, so that whatever else the
machine is doing weighs on all of them alike; a first round (compiling ``.pyc`` files, warming
the disk cache) is not counted. Prints each command's median wall time and its ratio to the
anchor. ``ludus envs`` includes rendering the table. Not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def ludus_command() -> list[str]:
    script = Path(sys.executable).with_name("ludus")
    return [str(script)] if script.exists() else [sys.executable, "-m", "ludus.cli"]


def wall_time(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=21, help="timed runs of each command (default 21)")
    args = parser.parse_args()
    ludus = ludus_command()
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "ludus --help": [*ludus, "--help"],
        "ludus envs": [*ludus, "envs"],
        "ludus train --help": [*ludus, "train", "--help"],
        "ludus verify --help": [*ludus, "verify", "--help"],
    }
    times: dict[str, list[float]] = {label: [] for label in commands}
    for round_number in range(args.runs + 1):
        for label, argv in commands.items():
            seconds = wall_time(argv)
            if round_number:
                times[label].append(seconds)
    anchor = statistics.median(times["python -c pass"])
    print(f"{args.runs} runs each, median wall time; Python {sys.version.split()[0]}, {os.cpu_count()} cores")
    print(f"{'command':<22} {'median':>9} {'× python -c pass':>17}")
    for label, samples in times.items():
        median = statistics.median(samples)
        print(f"{label:<22} {median * 1000:>6.1f} ms {median / anchor:>16.2f}")


if __name__ == "__main__":
    main()
