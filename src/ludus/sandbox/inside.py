"""The warm worker that runs *inside* the sandbox and forks one isolated child per execution.

Standard library only: the host ships this file into the sandbox as source (it is not
imported from the ludus package there, so the package stays out of the sandbox's reach).

One worker serves one execution at a time, over a control socket to the host:

    host ──run request──▶ worker ──descriptors──▶ template ──clone(new user, mount, IPC, PID
                             ▲                              namespaces, parent = the worker)
                             └────── watches and reaps ──────────▶ child (pid 1): runs the code

* The template was forked before the worker saw any request and never receives one, so no
  execution inherits memory that held another's code or output (see _start_template).

* The child (still running our code) maps its user, mounts a private tmpfs on /tmp and
  /dev/shm, hides /proc, sets the resource limits, drops every capability and closes every
  inherited descriptor; it then tells the worker it is ready (a byte on a pipe it closes
  before running anything untrusted) and runs the program: Python code in-process (the warm
  path: the interpreter and its imports are already loaded) or any executable.
* It is process 1 of its PID namespace: when it exits or is killed, the kernel kills
  everything left in that namespace, so nothing outlives an execution. Executions never
  share a writable file: each one has its own tmpfs.
* The worker reads the child's stdout/stderr with caps, enforces the time limits (see _watch),
  and reports one JSON reply. The host may send ``{"op": "kill"}`` while an execution runs.

Isolation levels (``boot["isolate"]``; the worker reports the one it reached):

* ``namespaces`` — the above; the worker itself runs under bubblewrap.
* ``worker`` — bubblewrap, but this kernel or its security policy refuses nested namespaces:
  the child is a plain fork in its own process group; the worker (a child subreaper) kills
  whatever it left behind, and empties /tmp and /dev/shm (its own tmpfs) after every execution.
* ``none`` — the unisolated fallback (no bubblewrap): as ``worker``, with a private temporary
  directory instead of a private /tmp.
"""

from __future__ import annotations

import base64
import builtins
import ctypes
import fcntl
import json
import operator
import os
import resource
import selectors
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
import traceback
import types

try:  # inside the sandbox the host installs the modules under these names
    import ludus_load as load
    import ludus_plain as plain
except ImportError:  # pragma: no cover - imported on the host for its constants and frame helpers
    from ludus.sandbox import load, plain

HEADER = struct.Struct("!I")
MAX_FRAME = 256 * 1024 * 1024
EXIT_MEMORY = 204  # the exit code after a MemoryError (only a hint: the program could fake it, to its loss)
EXIT_SETUP = 205  # the child could not set up (told apart from the program by the ready byte, not this code)
READY_FD = 512
SAMPLE_S = 0.05  # how often a running execution's CPU time and run-queue wait are read
KILL_GRACE_S = 5.0  # how long a killed execution may take to end before the worker stops waiting

CLONE_PARENT = 0x00008000
CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 4096, 16384, 1 << 18
PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 4, 36, 38
PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 28, 47, 4
SECURE_NO_CAPS = 0x2F  # NOROOT, NO_SETUID_FIXUP and KEEP_CAPS, each locked: exec never grants capabilities
WORKDIR = "/tmp/work"

_libc = ctypes.CDLL(None, use_errno=True)
_outer_ids = (0, 0)
_keep_in_tmp: list[str] = []  # bound folders under /tmp (boot["keep_in_tmp"])
_template_pid = 0
_streams: tuple = ()  # the executions' sys.stdin/stdout/stderr, made once (see _make_streams)
_shipped: list[str] = []  # our own modules, which executed code must not find in sys.modules
_default_recursion = 0  # a fresh interpreter's recursion limit, read at boot (see main)
_exec_cost = 0  # recursion depth that exec() itself takes on this interpreter (see _measure_exec_cost)
_recursion_offset = 0  # our frames under the program's (see _plain_recursion)
_real_recursion: list = []  # sys's own get/setrecursionlimit, once _plain_recursion has replaced them


# ---- framing: a 4-byte length, then JSON; descriptors ride on the first byte ----


def send_frame(sock: socket.socket, obj, fds=()) -> None:
    data = json.dumps(obj).encode()
    payload = HEADER.pack(len(data)) + data
    if fds:
        sent = socket.send_fds(sock, [payload[:1]], list(fds))
        payload = payload[sent:]
    sock.sendall(payload)


def recv_frame(sock: socket.socket, max_size: int = MAX_FRAME):
    """(message, descriptors), or (None, []) at end of stream. Raises ValueError on a bad frame."""
    head, fds = b"", []
    while len(head) < HEADER.size:
        chunk, new_fds, _flags, _addr = socket.recv_fds(sock, HEADER.size - len(head), 8)
        fds.extend(new_fds)
        if not chunk:
            for fd in fds:
                os.close(fd)
            if head:
                raise ValueError("stream ended inside a frame header")
            return None, []
        head += chunk
    (size,) = HEADER.unpack(head)
    if size > max_size:
        raise ValueError(f"frame of {size} bytes is over the {max_size}-byte limit")
    body = bytearray()
    while len(body) < size:
        chunk = sock.recv(min(size - len(body), 1 << 20))
        if not chunk:
            raise ValueError("stream ended inside a frame")
        body += chunk
    return json.loads(body), fds


# ---- the worker loop ----


def main(ctrl: socket.socket, boot: dict) -> None:
    """Serve run requests on ``ctrl`` until the host closes it."""
    global _default_recursion
    _default_recursion = sys.getrecursionlimit()  # nothing has changed it yet: the interpreter's default
    _measure_exec_cost()
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # no ptrace or /proc/<pid>/mem access to this process
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    _plain_builtins()
    for name in boot.get("warm_imports", []):
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - a missing optional module only costs speed
            pass
    level, detail = boot["isolate"], ""
    global _outer_ids, _keep_in_tmp
    _outer_ids = (os.getuid(), os.getgid())
    _keep_in_tmp = [
        p for p in boot.get("keep_in_tmp", []) if os.path.isdir(p)
    ]  # inside a fresh user namespace they read as 65534 until mapped
    if level == "namespaces":
        detail = _probe_namespaces()
        if detail:
            level = "worker"
    boot["isolate"] = level
    _make_streams()
    template = _start_template()
    send_frame(ctrl, {"ready": True, "pid": os.getpid(), "isolation": level, "detail": detail})
    while True:
        request, fds = recv_frame(ctrl)
        if request is None:
            return
        if request.get("op") == "kill":  # arrived after its execution had already ended
            continue
        try:
            reply = execute(ctrl, template, request, fds, boot)
        except Exception:  # noqa: BLE001 - report, never die: the host would see a dead worker
            reply = {"status": "infra_error", "reason": "worker error: " + traceback.format_exc(limit=3)}
        finally:
            for fd in fds:
                _close(fd)
        send_frame(ctrl, reply)


def _plain_builtins() -> None:
    """What ``site`` gives a plain ``python`` and the worker, started with -S, lacks: ``exit``
    and ``quit`` (programs call ``exit()`` all the time), ``help``, ``copyright`` and friends."""
    import site  # noqa: PLC0415 - under -S importing site adds nothing by itself

    site.setquit()
    site.setcopyright()
    site.sethelper()


def _make_streams() -> None:
    """Text streams on descriptors 0, 1 and 2, made before the template is forked: a child
    dups its pipes onto those numbers, so it inherits working (still empty) streams instead
    of building three of its own. Every object a fresh child creates or touches costs it
    page faults, and those are most of an execution's price. They are configured as this
    interpreter configured its own at start-up (encoding and error handlers follow the locale;
    none of the three is a terminal), so a program sees the streams of a plain ``python``."""
    global _streams, _shipped
    _streams = tuple(
        open(  # noqa: SIM115 - they live as long as we do
            fd,
            mode,
            encoding=getattr(like, "encoding", None) or "utf-8",
            errors=getattr(like, "errors", None) or default_errors,
            buffering=1 if getattr(like, "line_buffering", False) else -1,
            closefd=False,
        )
        for fd, mode, like, default_errors in (
            (0, "r", sys.__stdin__, "strict"),
            (1, "w", sys.__stdout__, "strict"),
            (2, "w", sys.__stderr__, "backslashreplace"),
        )
    )
    _shipped = [name for name in sys.modules if name.startswith("ludus_")]


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _probe_namespaces() -> str:
    """'' when a child can be cloned into fresh namespaces here, else why not."""
    r, w = os.pipe()
    pid = _spawn(isolated=True)
    if pid == 0:
        os.close(r)
        try:
            _enter_namespaces(1)
            os._exit(0)
        except BaseException:  # noqa: BLE001
            os.write(w, traceback.format_exc().encode()[-800:])
            os._exit(1)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        why = fh.read().decode("utf-8", "replace")
    if pid < 0:
        return why or "clone into new namespaces failed: " + os.strerror(-pid)
    _, status = os.waitpid(pid, 0)
    return "" if status == 0 else why or f"probe exited with status {status}"


_pyapi = ctypes.pythonapi
_syscall = ctypes.PyDLL(None, use_errno=True).syscall  # PyDLL: the GIL stays held, as in os.fork
_syscall.restype = ctypes.c_long
SYS_CLONE = {"x86_64": 56, "aarch64": 220}.get(os.uname().machine)


def _spawn(isolated: bool, parent: bool = False) -> int:
    """Fork; with ``isolated``, straight into new user, mount, IPC and PID namespaces (one
    clone call, so the child is process 1 of its PID namespace and needs no helper parent);
    with ``parent``, the child becomes our parent's child (CLONE_PARENT).
    Returns 0 in the child, the pid in the parent, or -errno if the clone failed."""
    flags = signal.SIGCHLD | (CLONE_PARENT if parent else 0)
    if isolated:
        flags |= CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID
    if flags == signal.SIGCHLD:
        return os.fork()
    if SYS_CLONE is None:
        return -38  # ENOSYS: an architecture whose clone() argument order we do not know
    _pyapi.PyOS_BeforeFork()
    pid = _syscall(SYS_CLONE, ctypes.c_ulong(flags), None, None, None, None)
    if pid == 0:
        _pyapi.PyOS_AfterFork_Child()
        return 0
    errno = ctypes.get_errno()
    _pyapi.PyOS_AfterFork_Parent()
    return pid if pid > 0 else -errno


# ---- the template: executions are cloned from a process that never held a request ----
# A fork copies its parent's memory, freed parts included. The worker has held earlier
# requests and replies (a previous sample's code, its output), so an execution forked from
# the worker could scan its own memory for them — in a GRPO group, another sample's correct
# solution to the same task. The template is forked once at start-up, before any request;
# it only ever receives descriptors and clones executions (as the worker's children, so the
# worker waits on them). Each execution reads its own request from a memfd.


def _start_template() -> socket.socket:
    global _template_pid
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:
        ours.close()
        try:
            _template_loop(theirs)
        finally:
            os._exit(0)
    theirs.close()
    _template_pid = pid
    return ours


def _template_loop(sock: socket.socket) -> None:
    while True:
        order, fds = recv_frame(sock)  # {"isolated", "workdir"}; fds: request, stdout, stderr, ready, passed...
        if order is None:
            return
        pid = _spawn(bool(order["isolated"]), parent=True)
        if pid == 0:
            sock.close()
            try:
                _execution(order, fds)
            finally:
                os._exit(EXIT_SETUP)
        for fd in fds:
            os.close(fd)
        send_frame(sock, {"pid": pid})


def _execution(order: dict, fds: list[int]) -> None:
    """In the cloned child: read the request, enter the namespaces, set up, run (never returns)."""
    request_fd, out_w, err_w, ready_w, *passed = fds
    chunks = []
    while chunk := os.read(request_fd, 1 << 20):
        chunks.append(chunk)
    os.close(request_fd)
    request = json.loads(b"".join(chunks))
    limits = request["limits"]
    _first_to_die()
    if order["isolated"]:
        _enter_namespaces(int(limits["disk_mb"]))
    _child(request, passed, limits, order["workdir"], out_w, err_w, ready_w)


def execute(ctrl: socket.socket, template: socket.socket, request: dict, fds: list[int], boot: dict) -> dict:
    """One execution: a child (cloned into fresh namespaces unless ``trusted`` or the worker
    cannot), watched until it ends, then everything it started is gone."""
    limits = request["limits"]
    level = "trusted" if request.get("trusted") else boot["isolate"]
    isolated = level == "namespaces"
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    ready_r, ready_w = os.pipe()
    request_fd = os.memfd_create("request")
    os.write(request_fd, json.dumps(request).encode())
    os.lseek(request_fd, 0, os.SEEK_SET)
    workdir = WORKDIR if isolated else tempfile.mkdtemp(prefix="ludus-exec-")
    started = time.monotonic()
    try:
        send_frame(template, {"isolated": isolated, "workdir": workdir}, [request_fd, out_w, err_w, ready_w, *fds])
        answer, _ = recv_frame(template)
    except OSError as exc:
        answer = None
        os.write(2, f"the template process is gone ({exc})\n".encode())
    for fd in (request_fd, out_w, err_w, ready_w):
        os.close(fd)
    pid = answer["pid"] if answer else -32  # EPIPE
    try:
        if answer is None:
            raise SystemExit("the template process is gone")  # the host replaces this worker
        if pid < 0:
            return {"status": "infra_error", "reason": "could not start the execution: " + os.strerror(-pid)}
        reply = _watch(ctrl, pid, out_r, err_r, ready_r, limits, started, float(request.get("stop_grace_s") or 0))
    finally:
        for fd in (out_r, err_r, ready_r):
            _close(fd)
        if not isolated:
            _kill_descendants()  # this worker is their subreaper: whatever the execution left behind
            shutil.rmtree(workdir, ignore_errors=True)
            if level == "worker":  # the worker's /tmp and /dev/shm are private to it: leave nothing behind
                for folder in ("/tmp", "/dev/shm"):
                    _empty(folder)
    return reply


def _first_to_die() -> None:
    """Under memory pressure the kernel must kill the execution, never the worker: memory such
    as a memfd is charged to nobody's resident size, so without this the worker looks largest."""
    _write("/proc/self/oom_score_adj", "1000")


def _execution_processes() -> list[int]:
    """The running execution's processes that are our children: the child itself and, without
    namespaces, whatever it orphaned (this worker is their subreaper); never the template."""
    return [pid for pid in load.children(os.getpid()) if pid != _template_pid]


def _watch(ctrl, pid, out_r, err_r, ready_r, limits, started, stop_grace_s=0.0) -> dict:
    """Collect output until the child ends, enforcing the time limits and the output cap; the reply.

    The limits count what the program did, never how busy the machine was (see load.py): its
    CPU time (all its processes together), and its own time (wall-clock time less the time it
    waited for a CPU) against ``wall_s``. A starved program gets more wall-clock time, up to
    the backstop; one still running then is ``infra_error``.

    With ``stop_grace_s``, a program at its CPU or own-time limit gets SIGTERM and that long to
    end by itself (a runner reporting what its command left behind) before SIGKILL."""
    cap = int(limits["output_bytes"])
    wall_s, cpu_s = float(limits["wall_s"]), float(limits["cpu_s"])
    backstop = started + float(limits["backstop_s"])
    clock = load.TreeClock(_execution_processes, started)
    outputs = {out_r: bytearray(), err_r: bytearray()}
    truncated = {out_r: False, err_r: False}
    sel = selectors.DefaultSelector()
    for fd in (out_r, err_r, ready_r):
        sel.register(fd, selectors.EVENT_READ)
    sel.register(ctrl, selectors.EVENT_READ)
    open_streams = {out_r, err_r, ready_r}
    ready, killed_by, killed_at, ended = b"", None, 0.0, None  # ended: (wait status, rusage, when)
    program_started = None  # its own time starts once its setup (ours, trusted) is done

    def kill(reason: str) -> None:
        nonlocal killed_by, killed_at
        if killed_by is None:
            killed_by, killed_at = reason, time.monotonic()
            if stop_grace_s and reason in ("cpu", "wall"):
                _signal(pid, signal.SIGTERM)
                return
        _kill_tree(pid)

    while open_streams or ended is None:
        now = time.monotonic()
        if ended is None:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                ended = (status, usage, now)
        if ended is not None and (not open_streams or now > ended[2] + 0.5):
            break  # a process it left behind (only without namespaces) must not hold us
        if killed_by is None and ended is None:
            # a setup held up by a starved worker is not the program's time: before it is
            # done only the backstop applies (a setup that never ends is infra_error)
            own_wall = now - program_started if program_started is not None else 0.0
            if now >= clock.last + SAMPLE_S or clock.times.overran(wall_s, own_wall):
                clock.sample(now)  # the wait so far, before its own time is judged
            if program_started is not None and clock.times.cpu_s >= cpu_s:
                kill("cpu")
            elif program_started is not None and clock.times.overran(wall_s, own_wall):
                kill("wall")
            elif now >= backstop:
                kill("backstop")
        graceful = stop_grace_s if killed_by in ("cpu", "wall") else 0.0
        if graceful and now >= killed_at + graceful:
            _kill_tree(pid)  # its grace is over
        if killed_by is not None and now >= killed_at + graceful + KILL_GRACE_S:
            break
        if not open_streams:  # the child closed its output and is about to be reaped (or is stuck)
            time.sleep(0.0005)
            continue
        wake = killed_at + KILL_GRACE_S if killed_by else min(clock.last + SAMPLE_S, backstop)
        for key, _ in sel.select(timeout=min(SAMPLE_S, max(0.001, wake - now))):
            fd = key.fd
            if fd == ctrl.fileno():
                message, extra = recv_frame(ctrl)
                for extra_fd in extra:
                    os.close(extra_fd)
                if message is None or message.get("op") == "kill":
                    kill("host")
                if message is None:
                    sel.unregister(ctrl)
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                sel.unregister(fd)
                open_streams.discard(fd)
            elif fd == ready_r:
                ready += chunk
                if ready == b"R":
                    program_started = time.monotonic()
            else:
                room = cap - len(outputs[fd])
                outputs[fd] += chunk[: max(room, 0)]
                if len(chunk) > room:
                    truncated[fd] = True
                    kill("output")
    sel.close()
    _kill_tree(pid)
    if ended is None:
        _, status, usage = os.wait4(pid, 0)
        ended = (status, usage, time.monotonic())
    _reap_orphans()
    status, usage, _ = ended
    times = clock.times
    reply = {
        "stdout": outputs[out_r].decode("utf-8", "replace"),
        "stderr": outputs[err_r].decode("utf-8", "replace"),
        "stdout_truncated": truncated[out_r],
        "stderr_truncated": truncated[err_r],
        "wall_s": round(time.monotonic() - started, 4),
        "cpu_s": round(max(usage.ru_utime + usage.ru_stime, times.cpu_s), 4),
        "cpu_wait_s": round(times.waited_s, 4),
        "max_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "exit_code": None,
        "signal": None,
    }
    if ready != b"R":  # the child never finished its (trusted) setup: nothing the program did
        return reply | {"status": "infra_error", "reason": "the execution could not set itself up"}
    return reply | _classify(status, reply, killed_by, limits, clock.available)


def _classify(wait_status: int, reply: dict, killed_by: str | None, limits: dict, measured_wait: bool) -> dict:
    code = os.waitstatus_to_exitcode(wait_status)
    cpu_s, waited = reply["cpu_s"], reply["cpu_wait_s"]
    by_rlimit = killed_by is None and code < 0 and (-code == signal.SIGXCPU or cpu_s >= float(limits["cpu_s"]) - 0.05)
    fields = {
        "exit_code": code if code >= 0 else None,
        "signal": -code if code < 0 else None,
        "stopped_by": "cpu" if by_rlimit else killed_by or "",
    }
    if killed_by == "cpu" or by_rlimit:
        return fields | {"status": "timeout", "reason": f"CPU time limit of {limits['cpu_s']} s"}
    if killed_by == "wall":
        if not measured_wait:
            why = "this kernel keeps no scheduler statistics, so time spent waiting for a CPU counts too"
        else:
            why = f"not counting {waited:.2f} s spent waiting for a CPU"
        return fields | {"status": "timeout", "reason": f"wall-clock limit of {limits['wall_s']} s ({why})"}
    if killed_by == "backstop":
        return fields | {
            "status": "infra_error",
            "reason": (
                f"the machine was overloaded: in {reply['wall_s']:.1f} s the program waited {waited:.1f} s for a "
                f"CPU and used {cpu_s:.2f} s of its {limits['cpu_s']} s CPU limit; stopped at the "
                f"{limits['backstop_s']:g} s backstop"
            ),
        }
    if killed_by == "output":
        return fields | {"status": "killed", "reason": f"output over the {limits['output_bytes']}-byte limit"}
    if killed_by == "host":
        return fields | {"status": "killed", "reason": "stopped by the host"}
    if code == EXIT_MEMORY:
        return fields | {"status": "memory", "reason": f"memory limit of {limits['memory_mb']} MiB"}
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        return fields | {"status": "killed", "reason": f"killed by {name}"}
    return fields | {"status": "ok", "reason": ""}


def _empty(folder: str) -> None:
    try:
        entries = os.listdir(folder)
    except OSError:
        return
    for name in entries:
        path = os.path.join(folder, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass


def _enter_namespaces(disk_mb: int) -> None:
    """In a child just cloned into new namespaces: map our user, then private mounts."""
    # the worker is not dumpable, and a non-dumpable process cannot write its own uid_map
    _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
    uid, gid = _outer_ids
    for path, text in (
        ("/proc/self/setgroups", "deny"),
        ("/proc/self/uid_map", f"0 {uid} 1"),
        ("/proc/self/gid_map", f"0 {gid} 1"),
    ):
        _write(path, text)
    _mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None)
    # read-only folders the worker sees under /tmp (a virtual environment there, say) must
    # survive the fresh /tmp: hold them by descriptor, then bind them back on top of it
    kept = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in _keep_in_tmp]
    _mount(b"tmpfs", b"/tmp", b"tmpfs", MS_NOSUID | MS_NODEV, f"size={disk_mb}m,mode=1777".encode())
    for path, fd in kept:
        os.makedirs(path, exist_ok=True)
        # a bind copies the mount's flags, so it stays read-only (and that flag is locked here)
        _mount(f"/proc/self/fd/{fd}".encode(), path.encode(), None, MS_BIND | MS_REC, None)
        os.close(fd)
    if os.path.isdir("/dev/shm"):
        _mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV, b"size=16m,mode=1777")
    # /proc of the worker would show the worker and its other children; hide it entirely
    _mount(b"tmpfs", b"/proc", b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, b"size=4k")
    os.mkdir(WORKDIR)


def _mount(source, target, fstype, flags, data) -> None:
    if _libc.mount(source, target, fstype, flags, data) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {target.decode()}: {os.strerror(errno)}")


# ---- B: limits, files, descriptors, then the program ----


def _child(request, fds, limits, workdir, out_w, err_w, ready_w) -> None:
    try:
        os.setsid()
        _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        os.chdir(workdir)
        _write_files(request.get("files") or {})
        stdin_fd = os.memfd_create("stdin")
        os.write(stdin_fd, base64.b64decode(request.get("stdin_b64") or ""))
        os.lseek(stdin_fd, 0, os.SEEK_SET)
        os.dup2(stdin_fd, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        ready = fcntl.fcntl(ready_w, fcntl.F_DUPFD, READY_FD)  # out of the way of the renumbering below
        parked = [fcntl.fcntl(fd, fcntl.F_DUPFD, READY_FD + 1) for fd in fds]
        keep = 3
        for fd in parked:  # passed descriptors (e.g. the grader's call socket) become 3, 4, ...
            os.dup2(fd, keep, inheritable=True)
            keep += 1
        os.closerange(keep, ready)
        os.closerange(ready + 1, _max_fd())
        _drop_capabilities()
        _set_limits(limits, request.get("stack_bytes") or 8 << 20)
        os.write(ready, b"R")
        os.close(ready)  # before any untrusted code: after this, nothing B does can claim a setup failure
    except BaseException:  # noqa: BLE001
        os._exit(EXIT_SETUP)
    mode = request["mode"]
    if mode == "argv":
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "LANG": "C.UTF-8", "TMPDIR": "/tmp"}
        try:
            os.execvpe(request["argv"][0], request["argv"], env)
        except OSError as exc:
            os.write(2, f"cannot execute {request['argv'][0]!r}: {exc}\n".encode())
            os._exit(127)
    os._exit(_run_python(request, mode))


def _drop_capabilities() -> None:
    """Give up every capability for good (B is root of its own user namespace, and in the
    ``worker`` level, of the worker's): empty bounding, ambient, effective and permitted sets."""
    _libc.prctl(PR_SET_SECUREBITS, SECURE_NO_CAPS, 0, 0, 0)  # fails harmlessly where we hold no CAP_SETPCAP
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:  # EINVAL: past the last cap
            break
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable for both 32-bit halves: all zero
    if _libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def _write_files(files: dict) -> None:
    for rel, content in files.items():
        path = os.path.normpath(rel)
        if path.startswith("/") or path == ".." or path.startswith("../"):
            raise ValueError(f"file path {rel!r} leaves the working directory")
        if os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        data = base64.b64decode(content["b64"]) if isinstance(content, dict) else content.encode()
        with open(path, "wb") as fh:
            fh.write(data)


def _set_limits(limits: dict, stack: int) -> None:
    def cap(which: int, soft: int, hard: int | None = None) -> None:
        _, current = resource.getrlimit(which)  # a hard limit can only be lowered here
        hard = soft if hard is None else hard
        if current != resource.RLIM_INFINITY:
            soft, hard = min(soft, current), min(hard, current)
        resource.setrlimit(which, (soft, hard))

    # the worker stops the program when all its processes together reach cpu_s (see _watch);
    # RLIMIT_CPU, per process, is a second line a second later, so a forked child never dies
    # of it first and lets its parent carry on as if nothing had happened
    cpu = max(1, int(-(-float(limits["cpu_s"]) // 1))) + 1
    cap(resource.RLIMIT_CPU, cpu, cpu + 1)
    cap(resource.RLIMIT_AS, int(limits["memory_mb"]) << 20)
    cap(resource.RLIMIT_NPROC, int(limits["processes"]))
    cap(resource.RLIMIT_FSIZE, int(limits["file_size_mb"]) << 20)
    cap(resource.RLIMIT_NOFILE, int(limits["open_files"]))
    cap(resource.RLIMIT_CORE, 0)
    cap(resource.RLIMIT_STACK, int(stack))  # 8 MiB, as `ulimit -s`, unless a deeper recursion was asked for


def _max_fd() -> int:
    return max(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 1024)


def _run_python(request: dict, mode: str) -> int:
    """Run Python code (or one of the shipped functions, mode ``call``) in this process; the exit code.

    Code runs as ``python main.py`` would run it: module ``__main__`` (unless the grader serves
    the module's functions under another name), ``main.py`` on disk in the working directory,
    which heads ``sys.path``; the standard streams of a plain interpreter; its recursion limit
    (see _plain_recursion); and at the end, as the interpreter's own shutdown, a wait for
    non-daemon threads, then the ``atexit`` functions, then a flush of the streams."""
    sys.stdin, sys.stdout, sys.stderr = _streams
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = _streams
    sys.argv = ["main.py"]
    _plain_recursion(request["limits"].get("recursion"))
    serve = request.get("serve", False)
    code = 0
    try:
        if mode == "call":
            module_name, function = request["call"].split(":")
            code = getattr(sys.modules[module_name], function)(request.get("payload"), 3) or 0
        else:
            source = request["code"]
            if not os.path.exists("main.py"):  # tracebacks show its lines; open(__file__) works
                with open("main.py", "w", encoding="utf-8") as fh:
                    fh.write(source)
            sys.path.insert(0, os.getcwd())
            module = types.ModuleType(request.get("module_name", "__main__"))
            module.__file__ = os.path.abspath("main.py")
            module.__builtins__ = builtins
            sys.modules[module.__name__] = module
            for name in _shipped:
                sys.modules.pop(name, None)
            sock = socket.socket(fileno=3) if serve else None
            try:
                exec(compile(source, module.__file__, "exec"), module.__dict__)
            except BaseException as exc:  # noqa: BLE001
                if sock is None:
                    raise
                send_frame(sock, {"loaded": False, "error": _describe(exc)})
                return 1
            if sock is not None:
                _serve_recursion()
                serve_calls(sock, module.__dict__, request.get("call_cpu_s"))
    except SystemExit as exc:
        code = _exit_status(exc)
    except MemoryError:
        code = EXIT_MEMORY
    except BaseException:  # noqa: BLE001
        _report_uncaught()
        code = 1
    if mode == "python" and not serve:
        code = _shut_down(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    return code


def _exit_status(exc: SystemExit) -> int:
    """The exit status ``python`` gives ``SystemExit(code)``: None is 0, an int is taken modulo
    256 (as the kernel does), anything else is printed to stderr and is 1."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    try:
        print(exc.code, file=sys.stderr)
    except Exception:  # noqa: BLE001
        pass
    return 1


def _report_uncaught() -> None:
    """An uncaught exception, printed as the interpreter prints it (through ``sys.excepthook``)."""
    kind, value, tb = sys.exc_info()
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith("<ludus_"):
        tb = tb.tb_next  # our frames under the program's: a script's traceback starts at its module
    if value is not None:
        value.__traceback__ = tb
    try:
        sys.excepthook(kind, value, tb)
    except BaseException:  # noqa: BLE001 - a broken hook: the interpreter falls back to the default
        traceback.print_exception(kind, value, tb)


def _shut_down(code: int) -> int:
    """What the interpreter does when a program's main module ends: wait for its non-daemon
    threads (``threading.Thread(target=main).start()`` is a common idiom), then run ``atexit``
    functions. A ``SystemExit`` raised there sets the status, as it does in ``python``."""
    try:
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()
        import atexit  # noqa: PLC0415

        atexit._run_exitfuncs()
    except SystemExit as exc:
        code = _exit_status(exc)
    except MemoryError:
        code = EXIT_MEMORY
    except BaseException:  # noqa: BLE001
        _report_uncaught()
    return code


def _plain_recursion(asked: int | None) -> None:
    """The recursion limit of a plain ``python main.py``: ``asked``, else the default this
    interpreter started with. Our own frames (the worker's, the template's, this module's) lie
    under the program's on the stack, so the real limit is raised by their number (see
    _recursion_offset): the module body gets the headroom it has as a script, and a function
    the grader calls, the headroom of one called from the module's top level.
    ``sys.getrecursionlimit`` and ``setrecursionlimit`` are replaced by equivalents that show
    and take the program's view of the limit."""
    global _recursion_offset
    _recursion_offset = _depth() + _exec_cost
    real_get, real_set = sys.getrecursionlimit, sys.setrecursionlimit
    real_set(int(asked or _default_recursion) + _recursion_offset)

    def getrecursionlimit() -> int:
        """Return the current value of the recursion limit."""
        return real_get() - _recursion_offset

    def setrecursionlimit(limit: int, /) -> None:
        """Set the maximum depth of the Python interpreter stack to n."""
        limit = operator.index(limit)
        if limit < 1:
            raise ValueError("recursion limit must be greater or equal than 1")
        real_set(limit + _recursion_offset)

    sys.getrecursionlimit, sys.setrecursionlimit = getrecursionlimit, setrecursionlimit
    _real_recursion[:] = [real_get, real_set]


def _serve_recursion() -> None:
    """Before serve_calls. It sits where the module body sat (one call above _run_python) but
    calls the grader's functions with plain Python calls, without exec's extra count: dropping
    that count from the offset gives those functions the headroom of a script's top-level
    ``f()`` (depth 2)."""
    global _recursion_offset
    if _real_recursion and _exec_cost:
        real_get, real_set = _real_recursion
        _recursion_offset -= _exec_cost
        real_set(real_get() - _exec_cost)


_PROBE = "def f(n):\n    try:\n        return f(n + 1)\n    except RecursionError:\n        return n\nreached = f(1)\n"


def _measure_exec_cost() -> None:
    """How much deeper than its frames exec() counts on this interpreter (3.11 counts its C
    call too). As a script, the probe's f(1) runs at depth 2 and reaches ``limit - 1``."""
    global _exec_cost
    namespace: dict = {}
    frames = _depth(1)  # the frames from here down; the probe's module body runs just above them
    exec(compile(_PROBE, "<probe>", "exec"), namespace)
    reached_as_script = sys.getrecursionlimit() - 1
    _exec_cost = max(0, reached_as_script - frames - namespace["reached"])


def _depth(skip: int = 2) -> int:
    """How many frames are on the stack from ``skip`` frames above this one down to the bottom
    (by default: the caller's caller and everything under it)."""
    frame, depth = sys._getframe(skip), 0
    while frame is not None:
        depth += 1
        frame = frame.f_back
    return depth


def _describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()[-2000:]


class CallTimedOut(BaseException):
    """Raised once into a call that used its CPU time (a BaseException: ``except Exception``
    in the solution does not catch it; a solution that swallows it anyway spins on until the
    execution's own CPU limit stops it)."""


_in_call = False  # the CPU timer may interrupt the solution's code, never ours
_call_overran = False  # the call used its CPU time: a timeout, whatever it answers after catching that


def _call_timer_fired(signum, frame) -> None:
    global _in_call, _call_overran
    if _in_call:
        _in_call, _call_overran = False, True
        raise CallTimedOut


def _cpu_time() -> float:
    """This process's CPU time: all its threads, and the children it has waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def serve_calls(sock: socket.socket, namespace: dict, call_cpu_s: float | None = None) -> None:
    """Answer the grader's calls into the solution: ``{"call": name, "args", "kwargs"}`` or ``{"get": name}``.

    With ``"method": m``, the call goes to method ``m`` of a fresh instance of class ``name``
    (``Solution().twoSum(...)``, as LeetCode-style tasks are called). Arguments and results are
    plain values (see plain.py); an exception is reported by type name and message. Runs until
    the grader closes the socket.

    A call that uses ``call_cpu_s`` of CPU time (a profiling timer: CPU, so the verdict does
    not depend on the machine's load) is answered ``{"ok": False, "timeout": True}``. The timer
    is within the solution's reach (it can disarm, ignore or block it, or work in a forked child,
    which has no timer), so a call's CPU time is also checked when it returns.
    """
    global _in_call, _call_overran
    names = {
        k: "callable" if callable(v) else "value"
        for k, v in list(namespace.items())[:10_000]
        if not k.startswith("__") and not isinstance(v, types.ModuleType)
    }
    send_frame(sock, {"loaded": True, "names": names})
    if call_cpu_s:
        signal.signal(signal.SIGPROF, _call_timer_fired)
    while True:
        request, _ = recv_frame(sock)
        if request is None:
            return
        name = request.get("call") or request.get("get")
        try:
            if call_cpu_s:
                _in_call, _call_overran, cpu_at_start = True, False, _cpu_time()
                signal.setitimer(signal.ITIMER_PROF, call_cpu_s)
            try:
                if name not in namespace:
                    raise NameError(f"the solution defines no {name!r}")
                if "get" in request:
                    value = namespace[name]
                else:
                    args = plain.decode(request["args"])
                    kwargs = plain.decode(request["kwargs"])
                    target = namespace[name]
                    if "method" in request:
                        target = getattr(target(), str(request["method"]))
                    value = target(*args, **kwargs)
                reply = {"ok": True, "value": plain.encode(value)}
            finally:
                _in_call = False
                if call_cpu_s:
                    signal.setitimer(signal.ITIMER_PROF, 0)
                    _call_overran = _call_overran or _cpu_time() - cpu_at_start >= call_cpu_s
        except MemoryError:
            reply = {"ok": False, "error_type": "MemoryError", "error": "out of memory"}
        except plain.NotPlain as exc:
            reply = {"ok": False, "error_type": "NotPlain", "error": str(exc)}
        except BaseException as exc:  # noqa: BLE001 - SystemExit too: exiting is not an answer
            reply = {"ok": False, "error_type": type(exc).__name__, "error": _describe(exc)}
        if _call_overran:  # whatever the call answered after the timer stopped it
            reply = {"ok": False, "timeout": True, "error": f"the call used more than {call_cpu_s:g} s of CPU time"}
        send_frame(sock, reply)


# ---- cleanup helpers ----


def _kill_tree(b_pid: int) -> None:
    """SIGKILL B; with namespaces that ends its whole PID namespace, else its process group too."""
    for target in (b_pid, -b_pid):
        _signal(target, signal.SIGKILL)


def _signal(target: int, signum: int) -> None:
    try:
        os.kill(target, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_descendants() -> None:
    """Without namespaces: kill every child of this subreaper but the template, until none is
    left (an orphaned grandchild becomes our child, so repeating reaches every descendant)."""
    for _ in range(100):
        children = _execution_processes()
        if not children:
            return
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


def _reap_orphans() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
