"""The listening socket both servers start from: bound before uvicorn runs, so that the address
printed is the one served (``--port 0`` picks a free port) and a taken port is a clear error."""

from __future__ import annotations

import socket


def listen(host: str, port: int) -> socket.socket:
    if not 0 <= port <= 65535:
        raise ValueError(f"--port must be in 0..65535 (0 picks a free one), got {port}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # inherited by accepted connections: a response's head and body leave at once instead of the
    # body waiting for the client's delayed ACK of the head (milliseconds per request otherwise)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
        sock.listen(4096)  # from here on, connections wait in the backlog instead of being refused
    except OSError as exc:
        sock.close()
        raise ValueError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; choose another --port (0 picks a free one)"
        ) from exc
    return sock


def address(sock: socket.socket) -> str:
    """``http://HOST:PORT`` of a listening socket."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if sock.family == socket.AF_INET6 else f"http://{host}:{port}"
