"""The warm worker that runs *inside* the sandbox and forks one isolated child per execution.

Standard library only: the host ships this file into the sandbox as source (it is not
imported from the ludus package there, so the package stays out of the sandbox's reach).

One worker serves one execution at a time, over a control socket (fd 3) to the host:

    host ──run request──▶ worker ──fork──▶ A ──unshare(user, mount, ipc, pid)──fork──▶ B (pid 1)
                                                                                      runs the code

* A (our code only) enters fresh namespaces, mounts a private tmpfs on /tmp and /dev/shm and
  hides /proc, then forks B, which is process 1 of a new PID namespace. When B exits or is
  killed, the kernel kills everything left in that namespace: nothing outlives an execution.
* B sets the resource limits, closes every inherited descriptor, and runs the program: Python
  code in-process (the warm path: the interpreter and its imports are already loaded) or any
  executable. Executions never share a writable file: each one has its own tmpfs.
* The worker reads B's stdout/stderr with caps, enforces the wall-clock deadline, and reports
  one JSON reply. The host may send ``{"op": "kill"}`` while an execution runs.

Isolation levels (``boot["isolate"]``; the worker reports the one it reached):

* ``namespaces`` — the above; the worker itself runs under bubblewrap.
* ``worker`` — bubblewrap, but this kernel or its security policy refuses nested namespaces:
  A becomes a child subreaper and kills B's leftover descendants, and /tmp and /dev/shm (the
  worker's own tmpfs) are emptied after every execution.
* ``none`` — the unisolated fallback (no bubblewrap): as ``worker``, with a private temporary
  directory instead of a private /tmp.
"""

from __future__ import annotations

import base64
import ctypes
import fcntl
import json
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

try:  # inside the sandbox the host installs the module under this name
    import ludus_plain as plain
except ImportError:  # pragma: no cover - imported on the host for its constants and frame helpers
    from ludus.sandbox import plain

HEADER = struct.Struct("!I")
MAX_FRAME = 256 * 1024 * 1024
EXIT_MEMORY = 204  # B's exit code after a MemoryError (only a hint: B is untrusted)
EXIT_SETUP = 205  # A or B could not set up; B's failure is only believed via the ready byte
READY_FD = 512

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 1, 2, 4, 16384, 1 << 18
PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 4, 36, 38
PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 28, 47, 4
SECURE_NO_CAPS = 0x2F  # NOROOT, NO_SETUID_FIXUP and KEEP_CAPS, each locked: exec never grants capabilities
WORKDIR = "/tmp/work"

_libc = ctypes.CDLL(None, use_errno=True)


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
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # no ptrace or /proc/<pid>/mem access to this process
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    for name in boot.get("warm_imports", []):
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - a missing optional module only costs speed
            pass
    level, detail = boot["isolate"], ""
    if level == "namespaces":
        detail = _probe_namespaces()
        if detail:
            level = "worker"
    boot["isolate"] = level
    send_frame(ctrl, {"ready": True, "pid": os.getpid(), "isolation": level, "detail": detail})
    while True:
        request, fds = recv_frame(ctrl)
        if request is None:
            return
        if request.get("op") == "kill":  # arrived after its execution had already ended
            continue
        try:
            reply = execute(ctrl, request, fds, boot)
        except Exception:  # noqa: BLE001 - report, never die: the host would see a dead worker
            reply = {"status": "infra_error", "reason": "worker error: " + traceback.format_exc(limit=3)}
        finally:
            for fd in fds:
                _close(fd)
        send_frame(ctrl, reply)


def _probe_namespaces() -> str:
    """'' when a child can enter fresh namespaces here, else why not."""
    r, w = os.pipe()
    pid = os.fork()
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
    _, status = os.waitpid(pid, 0)
    return "" if status == 0 else why or f"probe exited with status {status}"


def execute(ctrl: socket.socket, request: dict, fds: list[int], boot: dict) -> dict:
    limits = request["limits"]
    isolate = boot["isolate"]
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    status_r, status_w = os.pipe()
    started = time.monotonic()
    trusted = bool(request.get("trusted"))
    workdir = tempfile.mkdtemp(prefix="ludus-exec-") if trusted else ""
    a_pid = os.fork()
    if a_pid == 0:
        try:
            os.close(out_r), os.close(err_r), os.close(status_r)
            if trusted:  # our own code (e.g. a test runner): no namespaces, no second fork
                _child_b(request, fds, limits, workdir, out_w, err_w, status_w)
            _child_a(request, fds, limits, isolate, out_w, err_w, status_w)
        finally:
            os._exit(EXIT_SETUP)
    for fd in (out_w, err_w, status_w):
        os.close(fd)
    try:
        return _watch(ctrl, a_pid, out_r, err_r, status_r, limits, started, trusted)
    finally:
        for fd in (out_r, err_r, status_r):
            _close(fd)
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)


def _watch(ctrl, a_pid, out_r, err_r, status_r, limits, started, trusted) -> dict:
    """Collect output until the execution ends, enforcing the deadline and the output cap.

    Normally the child is A, which reports B's pid and B's end on the status pipe. A trusted
    execution has no A: the child runs the code itself and only writes its ready byte there."""
    cap = int(limits["output_bytes"])
    deadline = started + float(limits["wall_s"])
    outputs = {out_r: bytearray(), err_r: bytearray()}
    truncated = {out_r: False, err_r: False}
    sel = selectors.DefaultSelector()
    for fd in (out_r, err_r, status_r):
        sel.register(fd, selectors.EVENT_READ)
    sel.register(ctrl, selectors.EVENT_READ)
    status_text, b_pid, killed_by = b"", a_pid if trusted else None, None
    open_streams = {out_r, err_r, status_r}
    exited_at = None

    def kill(reason: str) -> None:
        nonlocal killed_by
        if killed_by is None:
            killed_by = reason
        if b_pid:
            _kill_tree(b_pid)

    while open_streams:
        now = time.monotonic()
        if exited_at is not None and now > exited_at + 1.0:
            break  # B is gone; a leftover writer (fallback mode only) must not hold us
        if now >= deadline:
            kill("wall")
            if now >= deadline + 5.0:
                break
        wake = deadline if exited_at is None else min(deadline, exited_at + 1.0)
        for key, _ in sel.select(timeout=max(0.01, wake - now)):
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
                continue
            if fd == status_r:
                status_text += chunk
                for line in status_text.split(b"\n")[:-1]:
                    if line.startswith(b"pid ") and b_pid is None:
                        b_pid = int(line[4:])
                        if killed_by:
                            _kill_tree(b_pid)
                    elif line.startswith(b"exit "):
                        exited_at = time.monotonic()
                continue
            room = cap - len(outputs[fd])
            outputs[fd] += chunk[: max(room, 0)]
            if len(chunk) > room:
                truncated[fd] = True
                kill("output")
    sel.close()
    if trusted:
        report = _wait_trusted(a_pid, deadline, kill, status_text)
        a_status = report.get("wait_status", 0)
    else:
        if b_pid and killed_by is None and exited_at is None:
            kill("host")
        if b_pid:
            _kill_tree(b_pid)
        if exited_at is None:  # A never reported B's end (e.g. stuck before forking): end A too
            _kill_tree(a_pid)
        _, a_status = os.waitpid(a_pid, 0)
        report = _parse_exit(status_text)
    _reap_orphans()
    wall = time.monotonic() - started
    reply = {
        "stdout": outputs[out_r].decode("utf-8", "replace"),
        "stderr": outputs[err_r].decode("utf-8", "replace"),
        "stdout_truncated": truncated[out_r],
        "stderr_truncated": truncated[err_r],
        "wall_s": round(wall, 4),
        "cpu_s": report.get("cpu_s", 0.0),
        "max_rss_mb": report.get("max_rss_mb", 0.0),
        "exit_code": None,
        "signal": None,
    }
    reply.update(_classify(report, killed_by, limits, os.waitstatus_to_exitcode(a_status)))
    return reply


def _wait_trusted(pid: int, deadline: float, kill, status_text: bytes) -> dict:
    """End of a trusted execution: its streams are closed; wait for it (killing it past the deadline)."""
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() >= deadline:
            kill("wall")
            _, status, usage = os.wait4(pid, 0)
            break
        time.sleep(0.002)
    _kill_tree(pid)  # its process group: anything it left behind
    if b"R" not in status_text:
        return {"setup_error": "the execution could not set itself up (limits, files or descriptors)"}
    cpu = usage.ru_utime + usage.ru_stime
    return {"wait_status": status, "cpu_s": round(cpu, 4), "max_rss_mb": round(usage.ru_maxrss / 1024, 1)}


def _parse_exit(status_text: bytes) -> dict:
    """A's report: B's wait status and usage, or the setup error that kept B from running."""
    lines = status_text.split(b"\n")
    for line in lines:
        if line.startswith(b"error "):
            return {"setup_error": line[6:].decode("utf-8", "replace")}
    for line in lines:
        if line.startswith(b"exit "):
            code, cpu, rss = line[5:].split()
            return {"wait_status": int(code), "cpu_s": round(float(cpu), 4), "max_rss_mb": round(int(rss) / 1024, 1)}
    return {}


def _classify(report: dict, killed_by: str | None, limits: dict, a_exit: int) -> dict:
    if "setup_error" in report:
        return {"status": "infra_error", "reason": "sandbox setup failed: " + report["setup_error"]}
    if "wait_status" not in report:
        return {"status": "infra_error", "reason": f"sandbox monitor ended without a report (exit {a_exit})"}
    code = os.waitstatus_to_exitcode(report["wait_status"])
    fields = {"exit_code": code if code >= 0 else None, "signal": -code if code < 0 else None}
    if killed_by == "wall":
        return fields | {"status": "timeout", "reason": f"wall-clock limit of {limits['wall_s']} s"}
    if killed_by == "output":
        return fields | {"status": "killed", "reason": f"output over the {limits['output_bytes']}-byte limit"}
    if killed_by == "host":
        return fields | {"status": "killed", "reason": "stopped by the host"}
    if code < 0 and (-code == signal.SIGXCPU or report["cpu_s"] >= float(limits["cpu_s"]) - 0.05):
        return fields | {"status": "timeout", "reason": f"CPU time limit of {limits['cpu_s']} s"}
    if code == EXIT_MEMORY:
        return fields | {"status": "memory", "reason": f"memory limit of {limits['memory_mb']} MiB"}
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        return fields | {"status": "killed", "reason": f"killed by {name}"}
    return fields | {"status": "ok", "reason": ""}


# ---- A: namespaces, then B ----


def _child_a(request, fds, limits, isolate, out_w, err_w, status_w) -> None:
    def report(text: str) -> None:
        os.write(status_w, text.encode() + b"\n")

    try:
        if isolate == "namespaces":
            _enter_namespaces(int(limits["disk_mb"]))
            workdir = WORKDIR
        else:
            _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
            workdir = tempfile.mkdtemp(prefix="ludus-exec-")
    except Exception as exc:  # noqa: BLE001
        report(f"error {type(exc).__name__}: {exc}")
        os._exit(EXIT_SETUP)
    ready_r, ready_w = os.pipe()
    b_pid = os.fork()
    if b_pid == 0:
        os.close(status_w)
        os.close(ready_r)
        _child_b(request, fds, limits, workdir, out_w, err_w, ready_w)
    for fd in [out_w, err_w, ready_w, *fds]:
        os.close(fd)
    report(f"pid {b_pid}")
    _, status, usage = os.wait4(b_pid, 0)
    set_up = os.read(ready_r, 1) == b"R"  # written by B before any untrusted code, which cannot forge it
    if not set_up:
        report("error the execution could not set itself up (limits, files or descriptors)")
    if isolate != "namespaces":
        _kill_descendants()
        shutil.rmtree(workdir, ignore_errors=True)
        if isolate == "worker":  # the worker's /tmp and /dev/shm are private to it: leave nothing behind
            for folder in ("/tmp", "/dev/shm"):
                _empty(folder)
    report(f"exit {status} {usage.ru_utime + usage.ru_stime:.4f} {usage.ru_maxrss}")
    os._exit(0)


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
    uid, gid = os.getuid(), os.getgid()
    # the worker is not dumpable, and a non-dumpable process cannot write its own uid_map
    _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
    if _libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID) != 0:
        raise OSError(ctypes.get_errno(), "unshare: " + os.strerror(ctypes.get_errno()))
    for path, text in (
        ("/proc/self/setgroups", "deny"),
        ("/proc/self/uid_map", f"0 {uid} 1"),
        ("/proc/self/gid_map", f"0 {gid} 1"),
    ):
        with open(path, "w") as fh:
            fh.write(text)
    _mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None)
    _mount(b"tmpfs", b"/tmp", b"tmpfs", MS_NOSUID | MS_NODEV, f"size={disk_mb}m,mode=1777".encode())
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


def _child_b(request, fds, limits, workdir, out_w, err_w, ready_w) -> None:
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
        _set_limits(limits)
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
        if path.startswith(("/", "..")):
            raise ValueError(f"file path {rel!r} leaves the working directory")
        if os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        data = base64.b64decode(content["b64"]) if isinstance(content, dict) else content.encode()
        with open(path, "wb") as fh:
            fh.write(data)


def _set_limits(limits: dict) -> None:
    def cap(which: int, soft: int, hard: int | None = None) -> None:
        _, current = resource.getrlimit(which)  # a hard limit can only be lowered here
        hard = soft if hard is None else hard
        if current != resource.RLIM_INFINITY:
            soft, hard = min(soft, current), min(hard, current)
        resource.setrlimit(which, (soft, hard))

    cpu = max(1, int(-(-float(limits["cpu_s"]) // 1)))
    cap(resource.RLIMIT_CPU, cpu, cpu + 1)
    cap(resource.RLIMIT_AS, int(limits["memory_mb"]) << 20)
    cap(resource.RLIMIT_NPROC, int(limits["processes"]))
    cap(resource.RLIMIT_FSIZE, int(limits["file_size_mb"]) << 20)
    cap(resource.RLIMIT_NOFILE, int(limits["open_files"]))
    cap(resource.RLIMIT_CORE, 0)
    stack = min(int(limits["memory_mb"]) << 19, 1 << 30)  # deep recursion needs C stack: half the memory, ≤ 1 GiB
    cap(resource.RLIMIT_STACK, stack)


def _max_fd() -> int:
    return max(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 1024)


def _run_python(request: dict, mode: str) -> int:
    """Run Python code (or one of the shipped functions, mode ``call``) in this process; the exit code."""
    sys.stdin = open(0, encoding="utf-8", errors="replace", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)
    sys.argv = ["main.py"]
    sys.setrecursionlimit(int(request["limits"].get("recursion", 100_000)))
    serve = request.get("serve", False)
    code = 0
    try:
        if mode == "call":
            module_name, function = request["call"].split(":")
            code = getattr(sys.modules[module_name], function)(request.get("payload"), 3) or 0
        else:
            module = types.ModuleType(request.get("module_name", "__main__"))
            module.__file__ = os.path.abspath("main.py")
            sys.modules[module.__name__] = module
            for name in [n for n in sys.modules if n.startswith("ludus_")]:
                sys.modules.pop(name)
            sock = socket.socket(fileno=3) if serve else None
            try:
                exec(compile(request["code"], "main.py", "exec"), module.__dict__)
            except BaseException as exc:  # noqa: BLE001
                if sock is None:
                    raise
                send_frame(sock, {"loaded": False, "error": _describe(exc)})
                return 1
            if sock is not None:
                serve_calls(sock, module.__dict__)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except MemoryError:
        code = EXIT_MEMORY
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    return code if 0 <= code < 256 else 1


def _describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()[-2000:]


def serve_calls(sock: socket.socket, namespace: dict) -> None:
    """Answer the grader's calls into the solution: ``{"call": name, "args", "kwargs"}`` or ``{"get": name}``.

    Arguments and results are plain values (see plain.py); an exception is reported by type
    name and message. Runs until the grader closes the socket.
    """
    names = {
        k: "callable" if callable(v) else "value"
        for k, v in list(namespace.items())[:10_000]
        if not k.startswith("__") and not isinstance(v, types.ModuleType)
    }
    send_frame(sock, {"loaded": True, "names": names})
    while True:
        request, _ = recv_frame(sock)
        if request is None:
            return
        name = request.get("call") or request.get("get")
        try:
            if name not in namespace:
                raise NameError(f"the solution defines no {name!r}")
            if "get" in request:
                value = namespace[name]
            else:
                args = plain.decode(request["args"])
                kwargs = plain.decode(request["kwargs"])
                value = namespace[name](*args, **kwargs)
            reply = {"ok": True, "value": plain.encode(value)}
        except MemoryError:
            reply = {"ok": False, "error_type": "MemoryError", "error": "out of memory"}
        except plain.NotPlain as exc:
            reply = {"ok": False, "error_type": "NotPlain", "error": str(exc)}
        except BaseException as exc:  # noqa: BLE001 - SystemExit too: exiting is not an answer
            reply = {"ok": False, "error_type": type(exc).__name__, "error": _describe(exc)}
        send_frame(sock, reply)


# ---- cleanup helpers ----


def _kill_tree(b_pid: int) -> None:
    """SIGKILL B; with namespaces that ends its whole PID namespace, else its process group too."""
    for target in (b_pid, -b_pid):
        try:
            os.kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _kill_descendants() -> None:
    """Fallback mode: kill every process reparented to this subreaper until none is left."""
    me = str(os.getpid())
    for _ in range(100):
        children = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as fh:
                        fields = fh.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if fields[1] == me:
                    children.append(int(entry))
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
