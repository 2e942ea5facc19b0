"""Where a running program's time goes, read from the kernel's scheduler statistics in /proc.

A program's wall-clock time splits three ways: on a CPU (its CPU time); runnable but waiting
for a CPU (run-queue wait: other programs had the cores, the machine's load and nobody's
doing); and neither (asleep, blocked on a lock or on I/O: its own doing). A limit that decides
a verdict must not depend on how busy the machine is, so it counts CPU time, and *own time*
(wall-clock time minus run-queue wait) where it would have counted wall-clock time.

Linux reports both per thread in /proc/<pid>/task/<tid>/schedstat (nanoseconds on a CPU,
nanoseconds waiting on a run queue, timeslices) where it keeps scheduler statistics
(CONFIG_SCHED_INFO, on in the usual distribution kernels). Where it does not,
``TreeClock.available`` stays False and own time is wall-clock time, as if the machine were idle.

Standard library only: shipped into the sandbox as source (``ludus_load``), and used on the
host as ``ludus.sandbox.load``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")  # the unit of the CPU times in /proc/<pid>/stat
OVERLOAD_FACTOR = 20  # see backstop_s


def _read(path: str) -> bytes | None:
    """A /proc file's contents, or None if the process or the file is gone (or never existed)."""
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def threads(pid: int) -> list[int]:
    """The thread ids of a process (none once it is gone)."""
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``: one read per thread of /proc/<pid>/task/<tid>/children,
    or, where the kernel lacks that file, a scan of every process's parent."""
    found: list[int] = []
    for tid in threads(pid):
        listed = _read(f"/proc/{pid}/task/{tid}/children")
        if listed is None:
            if os.path.exists(f"/proc/{pid}/task/{tid}"):
                return _children_by_scan(pid)
            continue
        found += [int(child) for child in listed.split()]
    return found


def _children_by_scan(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _read(f"/proc/{entry}/stat")
            if stat is not None and int(stat.rsplit(b")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def descendants(roots: Iterable[int]) -> list[int]:
    """``roots`` and every process below them."""
    found, todo, seen = [], list(roots), set()
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            found.append(pid)
            todo += children(pid)
    return found


def process_cpu_s(pid: int) -> float | None:
    """The CPU time of a process: all its threads (ended ones too) and the children it has reaped
    (utime, stime, cutime and cstime of /proc/<pid>/stat); None once it is gone."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    fields = stat.rsplit(b")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) * TICK_S


def schedstat(pid: int, tid: int) -> tuple[int, int] | None:
    """(nanoseconds on a CPU, nanoseconds runnable but waiting for one) of a thread, or None.

    The kernel adds a wait to the second number only when the thread gets a CPU again: a
    thread waiting right now shows none of its current wait (see ``Times.uncounted_s``)."""
    stat = _read(f"/proc/{pid}/task/{tid}/schedstat")
    if stat is None:
        return None
    ran, waited, *_ = stat.split()
    return int(ran), int(waited)


def runnable(pid: int, tid: int) -> bool:
    """Whether a thread is running or ready to run (state R), rather than asleep, blocked or stopped."""
    stat = _read(f"/proc/{pid}/task/{tid}/stat")
    return stat is not None and stat.rsplit(b")", 1)[1].split()[0] == b"R"


def crowds_itself(tids: Iterable[int]) -> bool:
    """Whether, for one of these threads (all ready to run), those that may share a CPU with it
    outnumber the CPUs it may use: it then waits at least partly for the others, the program's
    own doing, whatever the machine's load."""
    allowed = []
    for tid in tids:
        try:
            allowed.append(os.sched_getaffinity(tid))
        except OSError:  # it has ended meanwhile
            pass
    return any(sum(1 for other in allowed if other & cpus) > len(cpus) for cpus in allowed)


@dataclass(frozen=True)
class Times:
    """A clock's reading: CPU time and run-queue wait since it started, in seconds.

    ``uncounted_s`` bounds the wait the kernel has not reported yet: a thread ready to run now
    may have been waiting since it last ran (at most since the reading before the one that saw
    it run); a thread asleep waits for nothing. So the own time is certain only down to
    ``own_s(wall) - uncounted_s``, and a limit on it is judged on that."""

    cpu_s: float
    waited_s: float
    uncounted_s: float = 0.0

    def own_s(self, wall_s: float) -> float:
        """Of ``wall_s`` elapsed, the time the machine did not hold the program back (as far as known)."""
        return max(0.0, wall_s - self.waited_s)

    def overran(self, limit_s: float, wall_s: float) -> bool:
        """The program surely used ``limit_s`` of CPU or of own time: its doing, whatever the load."""
        return self.cpu_s >= limit_s or self.own_s(wall_s) - self.uncounted_s >= limit_s

    def describe(self, wall_s: float) -> str:
        return (
            f"{self.cpu_s:.2f} s of CPU, {self.own_s(wall_s):.2f} s of own time, "
            f"{self.waited_s:.2f} s waiting for a CPU, in {wall_s:.2f} s"
        )


def backstop_s(limit_s: float) -> float:
    """The wall-clock backstop of a limit counted in CPU or own time: a program still running
    then was held back by a machine over ``OVERLOAD_FACTOR`` times oversubscribed, which says
    nothing about the program (callers report ``infra_error``)."""
    return float(limit_s) * OVERLOAD_FACTOR


class TreeClock:
    """The CPU time and run-queue wait of a changing set of processes (``roots``, a list of pids
    or a function giving them, and everything below them), counted from the clock's creation.
    A process's records vanish once it is reaped, so ``sample`` it every so often while it runs.

    ``cpu_s`` counts threads and reaped children too, and is the largest seen (a process reaped
    by a parent outside the set is not forgotten). ``waited_s`` adds up, reading by reading,
    the largest new wait of any one thread (exactly the wait of a single-threaded program;
    for several threads, about the time at least one of them waited), never past the time
    elapsed: the time the machine held the program back. A reading that finds more of the
    program's threads ready to run than CPUs they may use (``crowds_itself``) adds no wait: a
    program that crowds its own CPU (a core kept busy by processes whose CPU time the kernel
    never adds to anyone's, children reaped unseen with SIGCHLD ignored) would otherwise run on
    to the backstop on an idle machine.

    With ``summed``, ``waited_s`` adds up the new waits of every thread instead: more than the
    time the program was held back when its threads wait at once, never less however seldom it
    is read. For programs whose threads and processes hand work on to one another (a browser
    and its driver), each wait delaying the next, read only when a call has timed out; such
    programs crowd their CPUs by design, and crowding is not checked.
    """

    def __init__(
        self, roots: Iterable[int] | Callable[[], Iterable[int]], now: float | None = None, *, summed: bool = False
    ):
        self.roots = roots if callable(roots) else lambda pids=tuple(roots): pids
        self.summed = summed
        self.started = self.last = time.monotonic() if now is None else now
        self.available = False  # schedstat was readable and counting here
        self._times = Times(0.0, 0.0)
        self._cpu_before: float | None = None
        # (pid, tid): ns on a CPU, ns waited, and a time before which it last ran
        self._threads: dict[tuple[int, int], tuple[int, int, float]] = {}
        self.sample(self.started)

    def sample(self, now: float | None = None) -> Times:
        now = time.monotonic() if now is None else now
        cpu, rise, uncounted, seen, ready = 0.0, 0, 0.0, {}, []
        for pid in descendants(self.roots()):
            cpu += process_cpu_s(pid) or 0.0
            for tid in threads(pid):
                stat = schedstat(pid, tid)
                if stat is None:
                    continue
                ran, waited = stat
                self.available = self.available or ran > 0
                # a thread first seen was born since the last reading: all of its wait is new
                # (at the first reading nothing is new: the elapsed time bounds it below)
                ran_before, waited_before, ran_since = self._threads.get((pid, tid), (0, 0, self.last))
                if ran != ran_before:
                    ran_since = self.last
                seen[pid, tid] = (ran, waited, ran_since)
                if self.summed:
                    rise += waited - waited_before
                else:
                    rise = max(rise, waited - waited_before)
                if runnable(pid, tid):
                    uncounted = uncounted + now - ran_since if self.summed else max(uncounted, now - ran_since)
                    ready.append(tid)
        if not self.summed and crowds_itself(ready):
            rise, uncounted = 0, 0.0  # its threads wait for one another: no wait of this reading is the machine's
        if self._cpu_before is None:
            self._cpu_before = cpu
        self._times = Times(
            max(self._times.cpu_s, cpu - self._cpu_before),
            # no thread waited longer than the time elapsed (so the first reading counts nothing)
            min((now - self.started) * (len(seen) if self.summed else 1), self._times.waited_s + rise / 1e9),
            uncounted if self.available else 0.0,
        )
        self.last, self._threads = now, seen
        return self._times

    @property
    def times(self) -> Times:
        """The last reading."""
        return self._times
