"""An agent command run inside the sandbox: ``AgentEnv(command=..., sandbox=True)`` (docs/agents.md).

Each episode is one sandbox execution of :mod:`ludus.agents.relay` (shipped in as
``ludus_agent_relay``), which runs the command there. The sandbox has no network; the relay
listens on the sandbox's own 127.0.0.1 and passes each connection the agent opens to this side
as a descriptor (SCM_RIGHTS over a socket pair, descriptor 3 of the execution), where it is
joined byte for byte to the process's agent gateway. The agent reaches the gateway and nothing
else: no other port of the host, no other machine. Every rule of the gateway applies as it does
to an agent outside.

Limits: the sandbox counts the agent's CPU time (``AgentEnv.cpu_limit_s``, status ``timeout``)
and its memory, processes and output (``sandbox_limits``). The sandbox's own-time limit would
count the time the agent waits for the model, so it is only a backstop, far past anything
``AgentEnv`` allows, and reaching it is ``infra_error``; hangs are ``AgentEnv``'s own rule
(``timeout_s`` between two calls), as for a command outside.
"""

from __future__ import annotations

import os
import socket
import tarfile
import tempfile
import threading
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from ludus.agents.runner import STDERR_TAIL_BYTES, AgentContext, AgentOutcome, AgentRun, ended_with
from ludus.sandbox import Execution, Limits, Running, Sandbox, SandboxUnavailable, WorkerSpec, detect
from ludus.sandbox.backend import interpreter
from ludus.sandbox.inside import recv_frame
from ludus.sandbox.pool import DEFAULT_WARM_IMPORTS, shipped

RELAY = Path(__file__).with_name("relay.py")
AGENT_SLOTS = 64  # episodes sandboxed at once per process and configuration; more wait for a slot
MAX_CONNECTIONS = 64  # an episode's connections to the gateway open at once; more are closed
FILES_BYTES = 64 << 20  # the agent's files ($LUDUS_WORKDIR) brought back to be graded, at most
COPIED_BYTES = 256 << 20  # the files copied in (sandbox_files, the task's shared files), at most
MODEL_WAIT_BACKSTOP_S = 3 * 3600.0  # the model's share of the sandbox's own-time backstop
STOP_WAIT_S = 30.0  # how long stopping an episode waits for its execution to be gone
SHARED_DIR = ".ludus_shared"  # where the task's shared files go, in the execution's directory


def check_sandbox() -> None:
    """Refuse at once where the sandbox cannot run: every episode would be ``infra_error``."""
    found = detect()
    if found.backend != "bwrap":
        raise SandboxUnavailable(f"AgentEnv(sandbox=True) needs bubblewrap: {found.reason}")


def agent_limits(asked: Mapping[str, Any] | None, *, cpu_s: float, timeout_s: float, max_turns: int) -> Limits:
    """The execution's limits: ``asked`` (fields of :class:`~ludus.sandbox.Limits`: memory,
    processes, output, disk…), the agent's CPU limit, and an own-time backstop. Own time counts
    the waits for the model, so it decides nothing: between two calls the agent has ``timeout_s``
    (else ``AgentEnv`` ends it), at most ``max_turns + 1`` times, and the model's share adds
    ``MODEL_WAIT_BACKSTOP_S``."""
    asked = dict(asked or {})
    known = {f.name for f in fields(Limits)}
    if "cpu_s" in asked or "wall_s" in asked:
        raise ValueError(
            "sandbox_limits sets neither cpu_s nor wall_s: the agent's CPU time is cpu_limit_s, and its time "
            "between two model calls timeout_s"
        )
    unknown = sorted(set(asked) - known)
    if unknown:
        raise ValueError(f"sandbox_limits: unknown fields {unknown}; known: {sorted(known - {'cpu_s', 'wall_s'})}")
    wall_s = (max_turns + 1) * timeout_s + MODEL_WAIT_BACKSTOP_S
    return Limits(**asked, cpu_s=cpu_s, wall_s=wall_s)


def read_files(paths: Sequence[str], cwd: Path) -> dict[str, bytes]:
    """``sandbox_files``: files and folders relative to ``cwd``, by the same relative paths."""
    found: dict[str, Path] = {}
    for name in paths:
        relative = os.path.normpath(name) if isinstance(name, str) and name else ""
        if not relative or os.path.isabs(relative) or relative == ".." or relative.startswith("../"):
            raise ValueError(
                f"sandbox_files: {name!r} must be a path inside the directory the environment is made in ({cwd})"
            )
        path = cwd / relative
        if not path.exists():
            raise ValueError(f"sandbox_files: {name!r} is no file or folder in {cwd}")
        found |= {str(p.relative_to(cwd)): p for p in [path, *sorted(path.rglob("*"))] if p.is_file()}
    total = sum(p.stat().st_size for p in found.values())
    if total > COPIED_BYTES:
        raise ValueError(f"sandbox_files come to {total} bytes, over the {COPIED_BYTES} copied into each episode")
    return {relative: path.read_bytes() for relative, path in found.items()}


_pools: dict[tuple[int, Limits], Sandbox] = {}
_pools_lock = threading.Lock()


def agent_sandbox(limits: Limits) -> Sandbox:
    """The process's pool of warm workers for these limits (they size a worker's cgroups), with
    the relay shipped in; its workers start on first use."""
    key = (os.getpid(), limits)  # a forked process starts its own: its parent's workers are not its children
    with _pools_lock:
        if key not in _pools:
            warm = (*DEFAULT_WARM_IMPORTS, "json", "socket", "subprocess", "tarfile", "tempfile", "threading")
            spec = WorkerSpec(modules=(shipped("ludus_agent_relay", RELAY),), warm_imports=warm)
            _pools[key] = Sandbox(limits, workers=AGENT_SLOTS, backend_name="bwrap", spec=spec)
        return _pools[key]


class SandboxedCommandRun(AgentRun):
    """An agent as a command, run in the sandbox (see the module docstring). The command starts
    in the execution's directory, which holds ``files`` at their relative paths; a file the task
    shares (an ``info`` value that is the absolute path of a file here, such as ``sql``'s
    database) is copied in and the agent's task names the copy. Everything else is as for
    :class:`~ludus.agents.runner.CommandRun`; the files the agent leaves in ``$LUDUS_WORKDIR``
    come back to ``context.workdir`` before it is graded.

    The sandbox measures the agent's CPU time and stops it at its limit; :meth:`cpu_s` knows the
    total once the run has ended."""

    def __init__(
        self,
        command: Sequence[str],
        context: AgentContext,
        on_end: Callable[[AgentOutcome], None],
        files: Mapping[str, bytes],
        limits: Limits,
    ):
        self._command, self._context, self._on_end = list(command), context, on_end
        self._files, self._limits = dict(files), limits
        gateway = urllib.parse.urlsplit(context.base_url)
        self._gateway = (gateway.hostname or "127.0.0.1", gateway.port or 80)
        self._lock = threading.Lock()
        self._running: Running | None = None
        self._stopped = False
        self._open: set[socket.socket] = set()  # both ends of every joined connection
        self._report: dict[str, Any] | None = None  # the relay's last frame
        self._cpu = 0.0
        self._done = threading.Event()
        threading.Thread(target=self._main, daemon=True, name="ludus-agent-sandboxed").start()

    def cpu_s(self) -> float:
        return self._cpu

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            running, joined = self._running, list(self._open)
        for sock in joined:
            _shut(sock)
        if running is not None:  # else it waits for a slot, and is killed as soon as it has one
            running.kill()
            self._done.wait(STOP_WAIT_S)  # its processes are gone when the sandbox reports its end

    # ---- the run, on its own thread -------------------------------------------------------------
    def _main(self) -> None:
        try:
            try:
                with tempfile.TemporaryFile() as returned:  # the agent's files, from the relay
                    outcome = self._outcome(self._execute(returned), returned)
            except Exception as exc:  # noqa: BLE001 - the sandbox failed, not the agent
                error = f"the agent's sandbox failed: {type(exc).__name__}: {exc}"
                outcome = AgentOutcome(None, error, self._context.workdir, infra_failure=True)
            self._on_end(outcome)
        finally:
            self._done.set()

    def _execute(self, returned: Any) -> Execution:
        """Start the relay, serve its connections, wait for its end."""
        files = dict(self._files)
        task = {**self._context.task, "info": dict(self._context.task.get("info", {}))}
        shared = {}
        for index, (key, value) in enumerate(task["info"].items()):
            if isinstance(value, str) and os.path.isabs(value) and os.path.isfile(value):
                shared[key] = f"{SHARED_DIR}/{index}/{os.path.basename(value)}"
                files[shared[key]] = Path(value).read_bytes()
        copied = sum(map(len, files.values()))
        if copied > COPIED_BYTES:
            raise ValueError(f"the files to copy into the sandbox come to {copied} bytes, over {COPIED_BYTES}")
        payload = {
            "argv": self._command,
            "task": task,
            "shared": shared,
            "files_cap": FILES_BYTES,
            "env": {
                "PATH": f"{os.path.dirname(interpreter())}:/usr/local/bin:/usr/bin:/bin",
                "LANG": "C.UTF-8",
                "TMPDIR": "/tmp",
                "PYTHONDONTWRITEBYTECODE": "1",
                "OPENAI_API_KEY": self._context.api_key,
            },
        }
        link, inside_link = socket.socketpair()
        with link:
            try:
                running = agent_sandbox(self._limits).start(
                    call="ludus_agent_relay:run",
                    payload=payload,
                    files=files,
                    limits=self._limits,
                    pass_fds=[inside_link.fileno(), returned.fileno()],
                )
            finally:
                inside_link.close()
            with self._lock:
                self._running, stopped = running, self._stopped
            if stopped:  # the episode ended while it waited for a slot
                running.kill()
            reader = threading.Thread(target=self._read_link, args=(link,), daemon=True)
            reader.start()
            execution = running.wait()
            reader.join()  # the worker let go of its end before it reported (or died, or was replaced)
        return execution

    def _read_link(self, link: socket.socket) -> None:
        """The relay's frames: a connection of the agent (one descriptor) to join to the gateway,
        or its last report. Anything else is closed and ignored."""
        while True:
            try:
                message, fds = recv_frame(link, max_size=4096)
            except (OSError, ValueError):
                return
            if message is None:
                return
            if message == {"connection": True} and len(fds) == 1:
                threading.Thread(target=self._join, args=(fds[0],), daemon=True).start()
                continue
            for fd in fds:
                os.close(fd)
            if isinstance(message, dict) and "exit_code" in message:
                self._report = message

    def _join(self, fd: int) -> None:
        """Join the agent's connection to the gateway until either side closes it."""
        try:
            agent = socket.socket(fileno=fd)
        except OSError:
            os.close(fd)
            return
        if agent.family not in (socket.AF_INET, socket.AF_INET6) or agent.type != socket.SOCK_STREAM:
            agent.close()
            return
        with agent:
            with self._lock:
                if self._stopped or len(self._open) >= 2 * MAX_CONNECTIONS:
                    return
                self._open.add(agent)
            try:
                upstream = socket.create_connection(self._gateway)
            except OSError:
                with self._lock:
                    self._open.discard(agent)
                return
            with upstream:
                with self._lock:
                    self._open.add(upstream)
                    stopped = self._stopped
                if not stopped:
                    back = threading.Thread(target=_copy, args=(upstream, agent), daemon=True)
                    back.start()
                    _copy(agent, upstream)
                    back.join()
                with self._lock:
                    self._open -= {agent, upstream}

    def _outcome(self, execution: Execution, returned: Any) -> AgentOutcome:
        """How the run ended, and who is to blame for it."""
        workdir, report = self._context.workdir, self._report
        self._cpu = execution.cpu_s
        cpu = execution.cpu_s

        def agent_failed(error: str) -> AgentOutcome:
            return AgentOutcome(None, error, workdir, cpu_s=cpu)

        def infra(error: str) -> AgentOutcome:
            return AgentOutcome(None, error, workdir, cpu_s=cpu, infra_failure=True)

        if execution.stopped_by == "cpu":
            return AgentOutcome(None, f"the agent used its {self._limits.cpu_s:g} s of CPU time", workdir,
                                cpu_s=cpu, timed_out=True)  # fmt: skip
        if execution.stopped_by == "host":
            return agent_failed("the agent was stopped: its episode ended")
        if execution.status == "memory" or execution.stopped_by == "output":
            return agent_failed(f"the sandbox stopped the agent: {execution.reason}")
        if execution.status != "ok" or report is None:
            # the own-time backstop, a failed sandbox or relay, or a signal from outside: the relay
            # is process 1 of the execution's PID namespace, which the agent cannot signal
            detail = execution.reason or execution.stderr[-STDERR_TAIL_BYTES:].strip() or f"exit {execution.exit_code}"
            return infra(f"the agent's sandbox failed ({execution.status}): {detail}")
        code = report.get("exit_code")
        if not isinstance(code, int):
            return infra(f"the agent's sandbox sent a malformed report: {report!r}"[:STDERR_TAIL_BYTES])
        tail = execution.stderr[-STDERR_TAIL_BYTES:].strip()
        if code != 0:
            return AgentOutcome(execution.stdout.strip(), ended_with(code, tail), workdir, exit_code=code, cpu_s=cpu)
        files_bytes = report.get("files_bytes")
        size = os.fstat(returned.fileno()).st_size
        if not isinstance(files_bytes, int) or files_bytes > FILES_BYTES or size > FILES_BYTES + (1 << 20):
            return agent_failed(f"the agent's files in $LUDUS_WORKDIR come to more than the {FILES_BYTES} bytes kept")
        with self._lock:
            if self._stopped:  # its working directory is being removed
                return agent_failed("the agent was stopped: its episode ended")
            try:
                returned.seek(0)
                _unpack(returned, workdir)
            except (tarfile.TarError, OSError, ValueError) as exc:
                return agent_failed(f"the agent's files in $LUDUS_WORKDIR could not be brought back: {exc}")
        return AgentOutcome(execution.stdout.strip(), None, workdir, exit_code=0, cpu_s=cpu)


def _unpack(archive_file: Any, into: Path) -> None:
    """The relay's archive of the agent's files, into ``into``: regular files and folders inside
    it, written afresh (no link, no device, no mode of the archive's)."""
    with tarfile.open(fileobj=archive_file, mode="r:") as archive:
        for entry in archive:
            relative = os.path.normpath(entry.name)
            if os.path.isabs(relative) or relative == ".." or relative.startswith("../"):
                raise ValueError(f"{entry.name!r} is outside its working directory")
            if entry.isdir():
                (into / relative).mkdir(parents=True, exist_ok=True)
            elif entry.isfile():
                (into / relative).parent.mkdir(parents=True, exist_ok=True)
                content = archive.extractfile(entry)
                assert content is not None  # a regular file's
                (into / relative).write_bytes(content.read())


def _copy(source: socket.socket, target: socket.socket) -> None:
    """Bytes from ``source`` to ``target`` until ``source`` ends; a failure ends both."""
    try:
        while data := source.recv(1 << 16):
            target.sendall(data)
        target.shutdown(socket.SHUT_WR)
    except OSError:
        _shut(source)
        _shut(target)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
