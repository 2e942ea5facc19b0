"""A busy machine on demand: busy processes that crowd one CPU, for tests of verdicts under load.

Each busy process runs in its own session, as other jobs on a shared machine do (the scheduler
shares a CPU between sessions), and is pinned to one CPU: a process pinned there too gets a
predictable sliver of it, however many cores the machine has. Every busy process is killed on
the way out."""

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

from ludus.sandbox.load import descendants, threads


@contextlib.contextmanager
def crowded(cpu: int | None, busy: int) -> Iterator[None]:
    """``busy`` busy loops pinned to ``cpu`` (or free to run anywhere: None) while the block runs."""
    loops: list[subprocess.Popen] = []
    try:
        for _ in range(busy):
            loop = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
            loops.append(loop)
            if cpu is not None:
                os.sched_setaffinity(loop.pid, {cpu})
        yield
    finally:
        for loop in loops:
            loop.kill()
        for loop in loops:
            loop.wait()


def a_cpu() -> int:
    """One of the CPUs this process may run on."""
    return max(os.sched_getaffinity(0))


@contextlib.contextmanager
def pinned(cpu: int) -> Iterator[None]:
    """Run this thread, and the processes it starts meanwhile, on ``cpu`` only."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


@contextlib.contextmanager
def pinned_children(cpu: int) -> Iterator[None]:
    """Run every process this one has started (a sandbox's warm workers, say; what they start
    meanwhile inherits it) on ``cpu`` only."""
    me = os.getpid()
    tasks = [tid for pid in descendants([me]) if pid != me for tid in threads(pid)]
    before = {}
    for tid in tasks:
        with contextlib.suppress(OSError):
            before[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, {cpu})
    try:
        yield
    finally:
        for tid, cpus in before.items():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, cpus)


def processes_named(marker: str) -> list[int]:
    """Our own processes: those whose command line holds ``marker``, a token made for one test."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if marker.encode() in fh.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found
