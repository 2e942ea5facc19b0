"""The listening socket both servers start from: bound before uvicorn runs, so that the address
printed is the one served (``--port 0`` picks a free port) and a taken port is a clear error.
Also what bounds a client at the connection layer: :class:`GuardedHttp` (uvicorn's httptools
protocol with limits on pipelining, slow and idle connections, and their number) and the
process's file descriptors, which connections and sessions share."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import socket
from dataclasses import dataclass, field
from typing import Any

import httptools
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


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


# ---- file descriptors ---------------------------------------------------------------------------
def raise_descriptor_limit() -> int:
    """Raise the soft limit on open files to the hard one (a process may, without privileges)
    and return it: every connection and many environments' sessions hold one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):  # a kernel cap below the hard limit (nr_open): keep the soft one
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def open_descriptors() -> int:
    """How many file descriptors this process holds now."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder)) - 1  # listing the folder opens one
        except OSError:
            continue
    raise OSError("cannot count open file descriptors: neither /proc/self/fd nor /dev/fd is readable")


# ---- the connection layer ------------------------------------------------------------------------
@dataclass
class ConnectionGuard:
    """What all of one server's connections share: their limits, and the connections waiting
    for a request, oldest first (those may be closed to make room for a new client).

    ``request_timeout_s`` bounds how long a connection may take to send a whole request (head
    and body) once the server waits for one, and how long it may leave the server's replies
    unread; ``max_pipelined`` bounds requests sent ahead of their replies."""

    max_connections: int
    request_timeout_s: float
    max_pipelined: int
    idle: dict[GuardedHttp, None] = field(default_factory=dict)
    evicted: int = 0
    refused: int = 0
    timed_out: int = 0
    overflowed: int = 0

    def __post_init__(self) -> None:
        if self.max_connections < 1 or self.max_pipelined < 1 or not self.request_timeout_s > 0:
            raise ValueError(f"connection limits must be positive: {self}")

    def make_room(self) -> bool:
        """Close the connection that has waited longest for a request; False when none waits."""
        for connection in self.idle:
            del self.idle[connection]
            self.evicted += 1
            connection.transport.abort()  # close() would wait for replies the client may never read
            return True
        return False


class _PipelineStop(Exception):
    """Raised from a parser callback to stop parsing what a connection sent past its bound."""


class _StoppableParser(httptools.HttpRequestParser):
    def feed_data(self, data: bytes) -> None:
        try:
            super().feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if not isinstance(exc.__context__, _PipelineStop):
                raise


class _PipelineFlow(FlowControl):
    """uvicorn's read flow control, except that reading resumes only once no request waits
    behind the one being answered: uvicorn resumes on every body read and every reply, which let a
    client that never reads its replies queue requests without bound."""

    def __init__(self, transport: asyncio.Transport, protocol: GuardedHttp) -> None:
        super().__init__(transport)
        self._protocol = protocol

    def resume_reading(self) -> None:
        if not self._protocol.pipeline:
            super().resume_reading()


class GuardedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol with bounds on what one client can make the server hold
    (``uvicorn.Config(http=functools.partial(GuardedHttp, guard=...))``):

    * pipelining: reading stops while a request waits behind the one being answered, and a
      connection that sends more than ``max_pipelined`` requests ahead is closed;
    * time: a request (head and body) must arrive within ``request_timeout_s`` of the server
      waiting for it, and replies must not sit unread for longer, or the connection is closed;
    * count: past ``max_connections`` the connection that has waited longest for a request is
      closed to make room; with none waiting, the newcomer gets 503 and is closed.
    """

    def __init__(self, *args: Any, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard = guard
        self.parser = _StoppableParser(self)
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)  # as uvicorn's own
        self._request_timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.flow = _PipelineFlow(transport, self)
        if len(self.connections) > self.guard.max_connections and not self.guard.make_room():
            self.guard.refused += 1
            self._refuse("too_many_connections", "every connection is busy: retry shortly")
            return
        self._await_request()

    def connection_lost(self, exc: Exception | None) -> None:
        self._forget()
        super().connection_lost(exc)

    def handle_websocket_upgrade(self) -> None:
        self._forget()  # the WebSocket protocol takes over the socket, with its own pings
        super().handle_websocket_upgrade()

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self.guard.idle.pop(self, None)  # a request is in progress: not to be closed for room
        if len(self.pipeline) > self.guard.max_pipelined:  # a client not reading its replies
            self.guard.overflowed += 1
            self._forget()
            self.transport.abort()  # no reply: one may be half written on this connection
            raise _PipelineStop

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._cancel_request_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.cycle.response_complete and not self.transport.is_closing():
            self._await_request()

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.guard.request_timeout_s, self._overdue)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _await_request(self) -> None:
        self.guard.idle.pop(self, None)
        self.guard.idle[self] = None  # newest last
        self._cancel_request_timer()
        self._request_timer = self.loop.call_later(self.guard.request_timeout_s, self._overdue)

    def _overdue(self) -> None:
        """No whole request in time, or replies left unread: close (a request reading its body
        sees the client gone)."""
        self.guard.timed_out += 1
        self._forget()
        self.transport.abort()

    def _cancel_request_timer(self) -> None:
        if self._request_timer is not None:
            self._request_timer.cancel()
            self._request_timer = None

    def _forget(self) -> None:
        self.guard.idle.pop(self, None)
        self._cancel_request_timer()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _refuse(self, kind: str, message: str) -> None:
        """A 503 with a JSON error written straight to the socket, then the connection closed."""
        body = json.dumps({"error": {"type": kind, "message": message}}).encode()
        head = (
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nretry-after: 1\r\nconnection: close\r\n\r\n"
        )
        self._forget()
        self.transport.write(head.encode() + body)
        self.transport.close()
