"""Runs an agent command as its child and kills everything the command leaves running, when it
ends or when this reaper is told to stop (SIGTERM): ``python -I -S reaper.py COMMAND...``.

A process group is not enough: a daemon the command starts (``setsid``, a double fork) leaves
its group and session, outlives the episode, and holds the command's stdout open, so that the
command's answer never arrives. The reaper is a child subreaper, so every such orphan becomes
its child rather than init's, and is found (``ludus.sandbox.load``'s reading of /proc), stopped
(a stopped process forks no more) and killed with the rest. It then exits as the command did:
its exit status, or the signal that killed it.

Started by :class:`ludus.agents.runner.CommandRun`. Standard library only: it runs without the
ludus package or site-packages, and reads ``load.py`` from the sandbox folder beside it.
"""

import ctypes
import os
import resource
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sandbox"))
import load  # noqa: E402 - ludus/sandbox/load.py, by path

PR_SET_CHILD_SUBREAPER = 36


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def kill_descendants() -> None:
    """Stop every process below this one until no new one appears, then kill them all and reap."""
    me, stopped = os.getpid(), set()
    while fresh := set(load.descendants([me])) - stopped - {me}:
        for pid in fresh:
            _signal(pid, signal.SIGSTOP)
        stopped |= fresh
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def die_by(signum: int) -> None:
    """End this process by ``signum`` (without a core file), as the command ended."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # a signal whose default is not to end a process


def stop(signum: int, frame: object) -> None:
    kill_descendants()
    die_by(signum)


def main(command: list[str]) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    signal.signal(signal.SIGTERM, stop)
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        os.write(2, f"cannot run {command[0]!r}: {exc.strerror or exc}\n".encode())
        os._exit(127)  # as a shell says it
    while True:  # orphans that end before the command are reaped on the way
        pid, status = os.waitpid(-1, 0)
        if pid == child.pid:
            break
    kill_descendants()
    if os.WIFSIGNALED(status):
        die_by(os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main(sys.argv[1:])
