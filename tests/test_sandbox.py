"""The sandbox, on real bubblewrap: isolation, limits, statuses, cleanup."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from load_support import a_cpu, crowded, processes_named
from ludus.sandbox import Limits, Sandbox, UnisolatedWarning, WorkerSpec, detect
from ludus.sandbox import backend as sandbox_backend
from ludus.sandbox.load import TreeClock


@pytest.fixture(scope="module")
def box():
    assert detect().backend == "bwrap", f"these tests need bubblewrap: {detect().reason}"
    with Sandbox(Limits(wall_s=10, processes=32), workers=2, backend_name="bwrap") as sandbox:
        yield sandbox


def test_runs_python_with_stdin_and_files(box):
    result = box.run(
        "import sys; data = open('data.txt').read(); print(input()[::-1], data, file=sys.stdout)",
        stdin="abc\n",
        files={"data.txt": "xyz"},
    )
    assert result.ok, result
    assert result.stdout == "cba xyz\n"


def test_runs_executables_and_reports_exit_codes(box):
    result = box.run(argv=["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.status, result.exit_code, result.stdout, result.stderr) == ("ok", 3, "out\n", "err\n")
    assert not result.ok
    missing = box.run(argv=["no-such-program"])
    assert missing.exit_code == 127 and "cannot execute" in missing.stderr


def test_reaches_per_execution_namespaces(box):
    assert box.level == "namespaces"


def test_no_network(box):
    result = box.run(
        "import socket\ntry:\n    socket.create_connection(('10.0.0.1', 80), timeout=2)\nexcept OSError as e:\n    print(type(e).__name__, e.errno)"
    )
    assert "101" in result.stdout or "Network is unreachable" in result.stdout, result


def test_system_is_read_only_and_host_files_are_absent(box):
    source = Path(__file__).resolve().parents[1] / "src"
    code = f"""
import os
for path in ['/usr/evil', '/etc/evil', '/evil', '/dev/evil', os.__file__]:
    try:
        open(path, 'a').write('x')
        print('WROTE', path)
    except OSError as e:
        print('denied', e.errno)
print(sorted(os.listdir('/')))
print(os.path.exists('{source}'), os.path.exists('/root/.ssh'), os.listdir('/proc'))
"""
    result = box.run(code)
    assert result.ok, result
    assert "WROTE" not in result.stdout
    last = result.stdout.strip().splitlines()[-1]
    assert last == "False False []"  # no source checkout, no home, no /proc of other processes


def test_ludus_is_not_importable_inside(box):
    result = box.run("import ludus; print(ludus.__path__)")
    assert result.exit_code != 0 and "ModuleNotFoundError" in result.stderr


def test_each_execution_has_its_own_scratch_space(box):
    first = box.run("open('/tmp/left', 'w').write('x'); open('mine', 'w').write('y'); print('ok')")
    assert first.ok
    for _ in range(4):  # whichever worker runs it, nothing from before is there
        later = box.run("import os; print(os.path.exists('/tmp/left'), os.path.exists('mine'), os.listdir('/dev/shm'))")
        assert later.stdout.strip() == "False False []"


def test_sysv_shared_memory_does_not_cross_executions(box):
    make = box.run("import ctypes; libc = ctypes.CDLL(None); print(libc.shmget(0x1d5, 4096, 0o1666))")
    assert int(make.stdout) >= 0
    for _ in range(4):
        probe = box.run("import ctypes; libc = ctypes.CDLL(None); print(libc.shmget(0x1d5, 4096, 0o666))")
        assert probe.stdout.strip() == "-1"


def test_background_processes_die_with_the_execution(box):
    marker = f"ludus-orphan-{os.getpid()}-{time.time_ns()}"
    code = f"""
import os, subprocess, sys
subprocess.Popen(['sh', '-c', 'sleep 300 # {marker}'], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    os.execvp('sleep', ['sleep', '301', '{marker}'])
print('started')
"""
    result = box.run(code)
    assert result.ok and result.stdout == "started\n"
    deadline = time.monotonic() + 5
    while processes_named(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_named(marker) == []


def test_wall_clock_limit(box):
    result = box.run("import time; time.sleep(30)", limits=Limits(wall_s=0.5))
    assert result.status == "timeout" and "wall" in result.reason
    assert result.wall_s < 10


def test_cpu_limit(box):
    result = box.run("while True: pass", limits=Limits(cpu_s=1, wall_s=20))
    assert result.status == "timeout" and "CPU" in result.reason


def test_cpu_limit_counts_all_the_programs_processes_together(box):
    """RLIMIT_CPU is per process: four forked spinners would each get the whole limit, die of it
    one by one, and leave their parent to finish ``ok``. The limit is the program's."""
    code = (
        "import os\nfor _ in range(4):\n    if os.fork() == 0:\n        while True:\n            pass\n"
        "for _ in range(4):\n    os.wait()\nprint('survived')\n"
    )
    result = box.run(code, limits=Limits(cpu_s=1, wall_s=60))
    assert result.status == "timeout" and "CPU" in result.reason, result
    assert result.stdout == "" and 1 <= result.cpu_s < 2, result


def _pinned(cpu: int, code: str) -> str:
    """``code``, run on CPU ``cpu`` only (the program pins itself, so the busy loops there starve it)."""
    return f"import os\nos.sched_setaffinity(0, {{{cpu}}})\n{code}"


def test_time_limits_count_the_programs_doing_not_the_machines_load(box):
    """Four busy processes share the program's CPU: 0.4 s of CPU take ~2 s of wall-clock time, past
    a 1 s wall limit that counted the wall clock (the verdict depended on the load). The limit
    counts the program's own time, wall-clock time less its wait for a CPU; a program that
    sleeps is still stopped at it, however busy the machine."""
    cpu = a_cpu()
    with crowded(cpu, busy=4):
        burn = (
            "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end:\n    pass\nprint('done')\n"
        )
        starved = box.run(_pinned(cpu, burn), limits=Limits(wall_s=1, cpu_s=5))
        sleeper = box.run(_pinned(cpu, "import time\ntime.sleep(30)\n"), limits=Limits(wall_s=1, cpu_s=5))
    assert (starved.status, starved.stdout) == ("ok", "done\n"), starved
    assert starved.wall_s > 1 and starved.cpu_wait_s > 0.5, starved  # it did wait for the CPU, past 1 s
    assert sleeper.status == "timeout" and "wall-clock limit of 1" in sleeper.reason, sleeper
    assert sleeper.cpu_s < 1, sleeper


def test_a_program_starved_past_the_backstop_is_an_infra_error_never_a_timeout(box):
    """Forty busy processes on its CPU leave a spinning program ~1/40 of it: at the 2 s backstop
    (20x its 0.1 s limits) it has used neither its CPU nor its own time. That is the machine's
    doing: ``infra_error`` (retried, then masked), never ``timeout``."""
    cpu = a_cpu()
    limits = Limits(wall_s=0.1, cpu_s=0.1)
    assert limits.backstop_s == 2.0
    with crowded(cpu, busy=40):
        result = box.run(_pinned(cpu, "while True:\n    pass\n"), limits=limits)
    assert result.status == "infra_error" and "overloaded" in result.reason, result
    assert result.cpu_s < 0.1 and result.wall_s >= 2, result


# Its CPU time hidden in children the kernel reaps unseen (SIGCHLD ignored: their CPU time is
# added to no one), a program keeps 24 threads ready to run on one CPU, a core busy throughout.
CROWDS_ITS_OWN_CPU = """
import hashlib, os, signal, threading, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
DATA = bytes(1 << 20)
def hash_for(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        hashlib.sha256(DATA).digest()  # releases the interpreter lock: every thread is ready to run
while True:
    child = os.fork()
    if child == 0:
        crowd = [threading.Thread(target=hash_for, args=(0.1,)) for _ in range(24)]
        for thread in crowd:
            thread.start()
        for thread in crowd:
            thread.join()
        os._exit(0)
    try:
        os.waitpid(child, 0)  # returns once the kernel has reaped it
    except ChildProcessError:
        pass
"""


def test_a_program_that_crowds_its_own_cpu_is_a_timeout_not_starved(box):
    """Its threads wait for the CPU almost all the time, but for one another, not for other
    programs: on an idle machine. Credited as the machine's load, that wait let it run to the
    backstop (10 s here, 600 s at the code grader's limits) and end as ``infra_error``, retried
    and masked. A reading where the program has more threads ready to run than CPUs they may
    use credits no wait."""
    result = box.run(CROWDS_ITS_OWN_CPU, limits=Limits(wall_s=0.5, cpu_s=0.5, processes=32))
    assert result.status == "timeout", result


def test_tree_clock_tells_waiting_for_a_cpu_from_running_and_sleeping():
    """The host-side clock other graders use (ludus.sandbox.load): a process asleep has used its
    own time; one spinning on a CPU shared with four busy processes has used about a fifth of the
    time elapsed, the rest waiting for the CPU, and has not."""
    cpu = a_cpu()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    spinner = subprocess.Popen([sys.executable, "-c", _pinned(cpu, "while True:\n    pass\n")])
    try:
        with crowded(cpu, busy=4):
            clocks = {p: TreeClock([p.pid]) for p in (sleeper, spinner)}
            time.sleep(1.0)
            times = {p: clock.sample() for p, clock in clocks.items()}
            wall = time.monotonic() - clocks[spinner].started
    finally:
        for process in (sleeper, spinner):
            process.kill()
            process.wait()
    assert clocks[spinner].available
    assert times[sleeper].cpu_s < 0.1 and times[sleeper].overran(0.5, wall), times[sleeper].describe(wall)
    assert times[spinner].waited_s > 0.5 and not times[spinner].overran(0.5, wall), times[spinner].describe(wall)


def test_memory_limit(box):
    result = box.run("x = bytearray(3 * 1024**3)", limits=Limits(memory_mb=256))
    assert result.status == "memory"


def test_output_limit(box):
    result = box.run("import sys\nwhile True: sys.stdout.write('x' * 65536)", limits=Limits(output_bytes=10_000))
    assert result.status == "killed" and "output" in result.reason
    assert len(result.stdout) == 10_000 and result.stdout_truncated


def test_process_limit_stops_a_fork_bomb(box):
    code = """
import os, time
made = 0
try:
    for _ in range(500):
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        made += 1
except OSError:
    pass
print(made)
"""
    result = box.run(code, limits=Limits(processes=16))
    assert result.ok
    assert int(result.stdout) < 40


def test_total_memory_of_many_processes_is_capped_when_root(box):
    if os.geteuid() != 0:
        pytest.skip("non-root: RLIMIT_NPROC x RLIMIT_AS bounds the total; the cgroup cap is for root")
    code = """
import os, time
kids = []
for i in range(6):
    pid = os.fork()
    if pid == 0:
        b = bytearray(700 * 1024 * 1024)
        for j in range(0, len(b), 4096):
            b[j] = 1
        time.sleep(3)
        os._exit(0)
    kids.append(pid)
print(sum(os.waitstatus_to_exitcode(os.waitpid(k, 0)[1]) == 0 for k in kids))
"""
    result = box.run(code, limits=Limits(memory_mb=1024, wall_s=20))
    assert result.ok and int(result.stdout) <= 2  # 6 x 700 MiB; the worker's group holds about 1.5 GiB
    assert box.run("print('alive')").stdout == "alive\n"


MEMFD_TO_THE_LIMIT = """
import os
if os.fork() == 0:  # a child fills memory files until the worker's group is full and it is killed
    while True:
        fd = os.memfd_create("hog")  # each under the file size limit
        for _ in range(16):
            os.write(fd, b"x" * (1 << 20))
os.execv("/bin/sleep", ["sleep", "60"])  # smaller than the child: the OOM killer's choice is the child
"""


def test_a_worker_killed_after_its_group_ran_out_of_memory_is_the_executions_memory_not_infra(box):
    """Memory in memfds is charged to the worker's group but to no process, so the kernel's OOM
    killer can end the worker itself (seen under load). A worker that dies after the execution
    filled its group is the execution's ``memory``; one that dies without that stays
    ``infra_error``. The worker is killed here by the test, at the moment the OOM killer could."""
    if os.geteuid() != 0:
        pytest.skip("non-root: no per-worker memory cgroup")
    limits = Limits(wall_s=30, cpu_s=30)

    def killed_worker_verdict(code: str, wait_for_hit: bool) -> tuple[str, str]:
        running = box.start(code, limits=limits)
        worker, before = running._worker, running._memory_limit_hits
        time.sleep(1)
        while wait_for_hit and worker.memory_limit_hits() == before:
            time.sleep(0.05)
        os.killpg(worker.process.pid, signal.SIGKILL)
        result = running.wait()
        return result.status, result.reason

    status, reason = killed_worker_verdict(MEMFD_TO_THE_LIMIT, wait_for_hit=True)
    assert status == "memory" and f"{box.limits.memory_mb + 512} MiB" in reason, reason
    status, reason = killed_worker_verdict("import time\ntime.sleep(60)", wait_for_hit=False)
    assert status == "infra_error", reason  # this execution never filled its group: the earlier one does not count
    assert box.run("print('alive')").stdout == "alive\n"


def test_file_size_limit(box):
    result = box.run(
        "f = open('big', 'wb')\ntry:\n    f.write(b'x' * (8 << 20)); f.flush()\nexcept OSError as e:\n    print('EFBIG', e.errno)",
        limits=Limits(file_size_mb=1),
    )
    assert "EFBIG 27" in result.stdout


def test_open_files_limit(box):
    result = box.run(
        "fs = []\ntry:\n    while True: fs.append(open('/dev/null'))\nexcept OSError:\n    print(len(fs))",
        limits=Limits(open_files=50),
    )
    assert int(result.stdout) < 50


def test_capabilities_are_dropped_and_exec_does_not_regain_them(box):
    capget = (
        "import ctypes\nh=(ctypes.c_uint32*2)(0x20080522,0)\nd=(ctypes.c_uint32*6)()\n"
        "ctypes.CDLL(None).capget(h,d)\nprint(list(d))"
    )
    assert box.run(capget).stdout.strip() == "[0, 0, 0, 0, 0, 0]"
    assert box.run(argv=["python3", "-c", capget]).stdout.strip() == "[0, 0, 0, 0, 0, 0]"


def test_threads_and_deep_recursion_work(box):
    code = """
import threading, sys
def depth(n): return 0 if n == 0 else 1 + depth(n - 1)
out = []
threads = [threading.Thread(target=lambda: out.append(sum(range(10**5)))) for _ in range(8)]
[t.start() for t in threads]; [t.join() for t in threads]
print(len(out), depth(30000))
"""
    assert box.run(code, limits=Limits(recursion=40_000)).stdout == "8 30000\n"  # a relaxation, asked for
    own = box.run("import sys\nsys.setrecursionlimit(40000)\n" + code)  # or the program's own, as in python
    assert own.stdout == "8 30000\n", own.stderr


# ---- semantics: an execution is a plain `python main.py` ----

PLAIN_PROBE = """
import os, resource, sys
def deepest(n):
    try:
        return deepest(n + 1)
    except RecursionError:
        return n
print("depth", deepest(1), sys.getrecursionlimit())
print("name", __name__, os.path.basename(__file__), sys.argv)
print("path0", sys.path[0] == os.path.dirname(os.path.abspath(__file__)))
print("source", open(__file__).read() == SOURCE)
print("hash", hash("ludus"), hash(b"ludus"))
print("streams", sys.stdin.encoding, sys.stdin.errors, sys.stdout.errors, sys.stderr.errors)
print("dunder", sys.__stdout__ is sys.stdout, sys.__stdin__ is sys.stdin)
print("stdin", repr(sys.stdin.read()))
print("exit", type(exit).__name__, type(quit).__name__)
"""


def _plain_python(source: str, stdin: bytes = b"", hash_seed: str = "0") -> subprocess.CompletedProcess[str]:
    """Our own probe (never model code) under the host's plain `python main.py`, in the
    sandbox's locale (C.UTF-8)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "main.py"
        path.write_text(source)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "PYTHONHASHSEED": hash_seed}
        done = subprocess.run([sys.executable, "main.py"], cwd=folder, input=stdin, capture_output=True, env=env)
        return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())


def test_python_code_runs_as_a_plain_python_script(box):
    source = f"SOURCE = {PLAIN_PROBE!r}\n{PLAIN_PROBE}"
    plain = _plain_python(source, stdin=b"in put\n")
    assert plain.returncode == 0, plain.stderr
    result = box.run(source, stdin="in put\n")
    assert result.ok, result.stderr
    assert result.stdout == plain.stdout  # recursion depth, __name__, __file__, sys.path[0], hashes, streams
    assert "depth 999 1000" in result.stdout or sys.getrecursionlimit() != 1000
    stack = box.run("import resource; print(resource.getrlimit(resource.RLIMIT_STACK)[0])")
    assert stack.stdout == f"{8 << 20}\n"  # the usual `ulimit -s`


def test_recursion_past_pythons_limit_fails_unless_a_deeper_limit_is_asked_for(box):
    code = "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\nprint(depth(1500))\n"
    default = box.run(code)
    assert default.exit_code == 1 and "RecursionError" in default.stderr
    assert default.stderr.startswith('Traceback (most recent call last):\n  File "/tmp/work/main.py"')
    relaxed = box.run(code, limits=Limits(recursion=2000))
    assert relaxed.ok and relaxed.stdout == "1500\n"
    deep = box.run(
        "import resource; print(resource.getrlimit(resource.RLIMIT_STACK)[0])", limits=Limits(recursion=2000)
    )
    assert int(deep.stdout) > 8 << 20  # and a C stack to match
    assert box.run("import sys; print(sys.getrecursionlimit())", limits=Limits(recursion=2000)).stdout == "2000\n"
    assert box.run("import sys\nsys.setrecursionlimit(0)").exit_code == 1  # refused, as in python


def test_hash_seed_is_fixed_and_matches_pythonhashseed(box):
    probe = "print(hash('ludus'), list({'a', 'b', 'c', 'd', 'e'}))"
    runs = {box.run(probe).stdout for _ in range(6)}  # both workers, many executions: one value
    assert runs == {_plain_python(probe).stdout}  # that of PYTHONHASHSEED=0 python
    with Sandbox(workers=1, backend_name="bwrap", spec=WorkerSpec(hash_seed=12345)) as other:
        assert other.run(probe).stdout == _plain_python(probe, hash_seed="12345").stdout
    # an interpreter the program starts itself is a plain one: randomised per run
    fresh = {box.run(argv=["python3", "-c", "print(hash('ludus'))"]).stdout for _ in range(3)}
    assert len(fresh) == 3
    with pytest.raises(ValueError, match="hash_seed"):
        WorkerSpec(hash_seed=-1)


def test_the_interpreters_exit_steps_run_as_in_python(box):
    late_thread = (
        "import threading, time\n"
        "def main():\n    time.sleep(0.2)\n    print('answer')\n"
        "if __name__ == '__main__':\n    threading.Thread(target=main).start()\n"
    )
    assert box.run(late_thread).stdout == "answer\n"  # non-daemon threads are waited for
    assert box.run("import atexit\natexit.register(print, 'bye')\nprint('hi')").stdout == "hi\nbye\n"
    assert box.run("print('x')\nexit()").ok  # site's exit() exists
    assert box.run("import sys\nsys.exit(256)").exit_code == 0  # modulo 256, as the kernel has it
    assert box.run("raise SystemExit('message')").exit_code == 1
    assert box.run("import sys\nprint(sys.stdin.buffer.read())", stdin=b"\xff\x00").stdout == "b'\\xff\\x00'\n"
    undecodable = "import sys\ntry:\n    print(ascii(input()))\nexcept UnicodeDecodeError:\n    print('refused')\n"
    plain = _plain_python(undecodable, stdin=b"\xff\n")
    assert plain.returncode == 0 and box.run(undecodable, stdin=b"\xff\n").stdout == plain.stdout


def test_warm_starts_every_worker_at_once():
    with Sandbox(workers=2, backend_name="bwrap") as sandbox:
        sandbox.warm()
        started = {worker.process.pid for worker in sandbox._workers}
        assert len(started) == 2 and all(worker.alive() for worker in sandbox._workers)
        sandbox.warm()  # nothing left to start
        assert {worker.process.pid for worker in sandbox._workers} == started
        assert [sandbox.run(f"print({i})").stdout for i in range(4)] == [f"{i}\n" for i in range(4)]
        assert {worker.process.pid for worker in sandbox._workers} == started


def test_concurrent_executions_from_threads_and_asyncio(box):
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda i: box.run(f"print({i} * 2)"), range(12)))
    assert [r.stdout for r in results] == [f"{i * 2}\n" for i in range(12)]

    async def many():
        return await asyncio.gather(*(box.arun(f"print({i})") for i in range(6)))

    assert [r.stdout for r in asyncio.run(many())] == [f"{i}\n" for i in range(6)]


def test_kill_stops_a_running_execution(box):
    running = box.start("import time; time.sleep(30)")
    time.sleep(0.3)
    running.kill()
    result = running.wait()
    assert result.status == "killed" and "host" in result.reason


def test_a_dead_worker_is_an_infra_error_and_is_replaced(box):
    running = box.start("import time; time.sleep(30)")
    time.sleep(0.3)
    os.killpg(running._worker.process.pid, signal.SIGKILL)
    result = running.wait()
    assert result.status == "infra_error"
    assert box.run("print('still serving')").stdout == "still serving\n"


def test_invalid_requests_are_refused_early(box):
    with pytest.raises(ValueError):
        box.run("print(1)", argv=["true"])
    with pytest.raises(ValueError):
        Limits(wall_s=0)
    with pytest.raises(ValueError, match="trusted"):
        box.run("print(1)", trusted=True)  # model code never skips the namespaces
    with pytest.raises(ValueError, match="inside the execution's working directory"):
        box.run("print(1)", files={"../escape": "x"})


def test_closing_leaves_no_worker_behind():
    with Sandbox(workers=1, backend_name="bwrap") as sandbox:
        sandbox.run("print(1)")
        pid = next(iter(sandbox._workers)).process.pid
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


def test_process_backend_warns_loudly_and_still_enforces_limits():
    with pytest.warns(UnisolatedWarning):
        sandbox = Sandbox(workers=1, backend_name="process")
    with sandbox:
        assert sandbox.level == "none"
        assert sandbox.run("print(sum(range(10)))").stdout == "45\n"
        assert sandbox.run("while True: pass", limits=Limits(cpu_s=1)).status == "timeout"


def test_process_limit_note_names_the_mechanism():
    note = sandbox_backend.process_limit_note()
    assert "RLIMIT_NPROC" in note or "cgroup" in note


def test_an_interpreter_path_through_dotdot_still_starts_the_sandbox(tmp_path):
    """``../.venv/bin/python`` no longer resolves inside the sandbox, where only bound folders exist."""
    import subprocess
    import sys

    via_dotdot = os.path.relpath(sys.executable, tmp_path)  # ../../.. from a folder the sandbox does not bind
    program = (
        "from ludus.sandbox import Sandbox\n"
        "with Sandbox(workers=1, backend_name='bwrap') as box:\n"
        "    print(box.run('print(6 * 7)').stdout.strip())\n"
    )
    done = subprocess.run([via_dotdot, "-c", program], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "42"


def test_file_names_are_checked_before_the_execution_and_dotted_names_are_fine():
    with Sandbox(workers=1) as box:
        for bad in ("/etc/x", "../x", "a/../../x", "..", ""):
            with pytest.raises(ValueError, match="inside the execution's working directory"):
                box.run("pass", files={bad: "x"})
        result = box.run("print(open('..foo').read(), open('d/..bar').read())", files={"..foo": "1", "d/..bar": "2"})
    assert result.status == "ok" and result.stdout.strip() == "1 2"
