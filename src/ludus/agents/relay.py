"""The sandbox side of an agent command run in the sandbox (``AgentEnv(command=..., sandbox=True)``).

Shipped into the sandbox as module ``ludus_agent_relay`` by :mod:`ludus.agents.sandboxed`, which
calls :func:`run`. Standard library only: the ludus package is not in the sandbox.

The sandbox has no network, only a loopback device of its own. :func:`run` listens on
127.0.0.1 there, gives the agent that address as ``OPENAI_BASE_URL``, and hands every connection
the agent opens, as a descriptor, to the host over descriptor 3: the host joins it to the agent
gateway, byte for byte. Nothing here reads the agent's requests, so streaming, keep-alive and
parallel calls work as they do outside, and the gateway's rules (keys, refusals, limits) stay
the gateway's. The agent holds neither descriptor 3 nor 4.

The agent's stdout is the execution's (its answer); of its stderr only the tail is kept. When it
ends, the files of its ``$LUDUS_WORKDIR`` go to the host as a tar archive on descriptor 4, and a
last frame on descriptor 3 gives its exit status and the archive's size (no archive when it
would pass the host's cap). A relay that fails sends no such frame.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading

try:
    import ludus_inside as inside
except ImportError:  # pragma: no cover - imported on the host only to be read
    from ludus.sandbox import inside

LINK_FD, FILES_FD = 3, 4
STDERR_TAIL_BYTES = 4000


def run(payload: dict, _fd: int) -> int:
    """Run the agent's command (``payload``: ``argv``, ``env``, ``task``, ``shared``); see the module doc."""
    link = socket.socket(fileno=LINK_FD)
    sending = threading.Lock()
    listener = socket.create_server(("127.0.0.1", 0))
    root = os.getcwd()  # the execution's working directory, holding the files the host sent
    workdir = tempfile.mkdtemp(prefix="ludus-agent-")
    task = payload["task"]
    for key, relative in payload["shared"].items():  # files of the task's info, copied in by the host
        task["info"][key] = os.path.join(root, relative)
    task_json = json.dumps(task, ensure_ascii=False).encode("utf-8")
    task_file = os.path.join(workdir, ".ludus_task.json")
    with open(task_file, "wb") as fh:
        fh.write(task_json)
    env = {
        **payload["env"],
        "HOME": tempfile.mkdtemp(prefix="home-"),
        "OPENAI_BASE_URL": f"http://127.0.0.1:{listener.getsockname()[1]}/v1",
        "LUDUS_TASK_FILE": task_file,
        "LUDUS_WORKDIR": workdir,
    }
    argv = [part.replace("{task_file}", task_file).replace("{workdir}", workdir) for part in payload["argv"]]
    threading.Thread(target=_hand_over, args=(listener, link, sending), daemon=True).start()
    try:
        agent = subprocess.Popen(
            argv, cwd=root, env=env, stdin=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
    except OSError as exc:
        sys.stderr.write(f"cannot execute {argv[0]!r}: {exc}\n")
        code = 127
    else:
        tail = bytearray()
        reader = threading.Thread(target=_keep_tail, args=(agent.stderr, tail), daemon=True)
        reader.start()
        threading.Thread(target=_feed, args=(agent.stdin, task_json), daemon=True).start()
        code = agent.wait()
        _kill_the_rest(agent.pid)  # what it left running goes with it, and lets go of its stderr
        reader.join()
        sys.stderr.write(tail.decode("utf-8", "replace"))
        sys.stderr.flush()
    files_bytes = _send_files(workdir, int(payload["files_cap"]))
    with sending:
        inside.send_frame(link, {"exit_code": code, "files_bytes": files_bytes})
    return 0


def _hand_over(listener: socket.socket, link: socket.socket, sending: threading.Lock) -> None:
    """Each connection the agent opens, to the host (which joins it to the gateway)."""
    while True:
        connection, _ = listener.accept()
        try:
            with sending:
                inside.send_frame(link, {"connection": True}, [connection.fileno()])
        finally:
            connection.close()


def _feed(stream, data: bytes) -> None:
    try:
        stream.write(data)
        stream.close()
    except OSError:
        pass  # an agent that does not read its stdin


def _keep_tail(stream, tail: bytearray) -> None:
    """Read all of the agent's stderr (it never blocks on a full pipe); keep its end."""
    while chunk := stream.read1(65536):
        tail += chunk
        del tail[: max(0, len(tail) - STDERR_TAIL_BYTES)]


def _kill_the_rest(pgid: int) -> None:
    """Everything the agent started. Process 1 of its own PID namespace reaches them all."""
    try:
        if os.getpid() == 1:
            os.kill(-1, signal.SIGKILL)
        else:
            os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _send_files(workdir: str, cap: int) -> int:
    """The agent's working directory as a tar archive (regular files and folders, nothing else),
    unless it would be larger than ``cap`` bytes; its size either way."""
    size = 0
    for folder, _, names in os.walk(workdir):
        for name in names:
            path = os.path.join(folder, name)
            size += 1024 + (os.path.getsize(path) if os.path.isfile(path) and not os.path.islink(path) else 0)
    if size <= cap:
        with os.fdopen(os.dup(FILES_FD), "wb") as out, tarfile.open(fileobj=out, mode="w") as archive:
            archive.add(workdir, arcname=".", filter=lambda entry: entry if entry.isfile() or entry.isdir() else None)
    return size
