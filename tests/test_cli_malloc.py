"""``ludus train`` and ``ludus eval`` cap glibc's malloc arenas (cli/common.py: fewer_malloc_arenas)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc arenas are glibc's")

THREADS_ALLOCATE = """
import ctypes, sys, threading
from ludus.cli.common import fewer_malloc_arenas
if sys.argv[1] == "capped":
    fewer_malloc_arenas()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
start = threading.Barrier(8)
def work():
    start.wait()  # all at once: contention is what makes glibc hand out new arenas
    for _ in range(2000):
        libc.free(ctypes.c_void_p(libc.malloc(4096)))
threads = [threading.Thread(target=work) for _ in range(8)]
[t.start() for t in threads]
[t.join() for t in threads]
libc.malloc_stats()  # one "Arena N:" line per arena, on stderr
"""


def arenas(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", THREADS_ALLOCATE, mode], capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stderr.count("Arena ")


def test_threads_share_two_arenas_when_capped() -> None:
    assert arenas("capped") <= 2
    assert arenas("default") > 2  # the same threads without the cap: the test can tell the difference
