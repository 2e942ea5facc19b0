"""The listening socket both servers start from: bound before uvicorn runs, so that the address
printed is the one served (``--port 0`` picks a free port) and a taken port is a clear error.
Also what bounds a client at the connection layer, for both servers: :class:`GuardedHttp`
(uvicorn's httptools protocol with limits on request heads, pipelining, slow and idle
connections, and their number), :class:`GuardedWebSocket` (replies left unread), and the
process's file descriptors, which connections and sessions share."""

from __future__ import annotations

import asyncio
import functools
import http
import json
import os
import resource
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httptools
import uvicorn
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol


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


def spare_descriptors(reserve: int) -> int:
    """File descriptors this process may still open once its soft limit is raised, less
    ``reserve`` for its own files."""
    return raise_descriptor_limit() - open_descriptors() - reserve


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
    """What all of one server's connections share: their limits, the connections waiting for a
    request, oldest first, and the WebSockets with no request in progress, longest idle first
    (either may be closed to make room for a new client).

    ``request_timeout_s`` bounds how long a connection may take to send a whole request (head
    and body) once the server waits for one, and how long it may leave the server's replies
    unread; ``max_pipelined`` bounds requests sent ahead of their replies; ``max_head_bytes``
    and ``max_headers`` bound a request's head (its line and headers together). Past
    ``max_connections`` a newcomer with no room made is still read, to answer ``GET
    health_path`` (and nothing else): the server can always say how it is."""

    max_connections: int
    request_timeout_s: float
    max_pipelined: int
    max_head_bytes: int = 64 << 10
    max_headers: int = 100
    health_path: bytes = b"/health"
    idle: dict[GuardedHttp, None] = field(default_factory=dict)
    idle_sockets: dict[object, tuple[float, Callable[[], None]]] = field(default_factory=dict)
    evicted: int = 0
    refused: int = 0
    timed_out: int = 0
    overflowed: int = 0
    heads_refused: int = 0
    sockets_closed_idle: int = 0

    def __post_init__(self) -> None:
        counts = (self.max_connections, self.max_pipelined, self.max_head_bytes, self.max_headers)
        if min(counts) < 1 or not self.request_timeout_s > 0:
            raise ValueError(f"connection limits must be positive: {self}")

    def make_room(self) -> bool:
        """Close the connection that has waited longest for a request, or else the WebSocket idle
        longest; False when none waits."""
        for connection in self.idle:
            del self.idle[connection]
            self.evicted += 1
            connection.transport.abort()  # close() would wait for replies the client may never read
            return True
        for key, (_, close) in self.idle_sockets.items():
            del self.idle_sockets[key]
            self.evicted += 1
            close()
            return True
        return False

    def socket_idle(self, key: object, close: Callable[[], None]) -> None:
        """WebSocket ``key`` has no request in progress from now; ``close`` closes it."""
        self.idle_sockets.pop(key, None)
        self.idle_sockets[key] = (time.monotonic(), close)  # newest last

    def socket_busy(self, key: object) -> None:
        """WebSocket ``key`` has a request in progress, or is gone: not to be closed for idling."""
        self.idle_sockets.pop(key, None)

    def close_idle_sockets(self, idle_s: float) -> None:
        """Close the WebSockets that have had no request in progress for ``idle_s`` seconds."""
        cutoff = time.monotonic() - idle_s
        while self.idle_sockets:
            key, (since, close) = next(iter(self.idle_sockets.items()))
            if since > cutoff:
                return
            del self.idle_sockets[key]
            self.sockets_closed_idle += 1
            close()


def guarded_server(app: Any) -> uvicorn.Server:
    """A uvicorn server for ``app`` behind serve-env's connection layer with its default limits
    (request heads, pipelining, slow clients, as many connections as descriptors allow): the
    model server, the proxy and the agent gateway all start from it."""
    guard = ConnectionGuard(max(16, spare_descriptors(64)), request_timeout_s=10.0, max_pipelined=32)
    return uvicorn.Server(uvicorn.Config(app, log_level="warning", **connection_options(guard)))


def connection_options(guard: ConnectionGuard) -> dict[str, Any]:
    """``uvicorn.Config`` options that put ``guard`` on every connection, HTTP and WebSocket."""
    return {
        "http": functools.partial(GuardedHttp, guard=guard),
        "ws": functools.partial(GuardedWebSocket, guard=guard),
    }


class _Stop(Exception):
    """Raised from a parser callback to stop parsing what a connection sent past a bound."""


class _StoppableParser(httptools.HttpRequestParser):
    def feed_data(self, data: bytes) -> None:
        try:
            super().feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if not isinstance(exc.__context__, _Stop):
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


class _ReadsItsReplies:
    """For a uvicorn protocol: replies left unread for the guard's ``request_timeout_s`` (the
    transport paused for writing that long) close the connection. ``close()`` would wait for
    them to be read; the connection is aborted instead."""

    guard: ConnectionGuard
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    _write_timer: asyncio.TimerHandle | None = None

    def pause_writing(self) -> None:
        super().pause_writing()  # type: ignore[misc]
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.guard.request_timeout_s, self._overdue)

    def resume_writing(self) -> None:
        super().resume_writing()  # type: ignore[misc]
        self._cancel_write_timer()

    def _overdue(self) -> None:
        self.guard.timed_out += 1
        self._forget()
        self.transport.abort()

    def _cancel_write_timer(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _forget(self) -> None:
        """Stop every timer of this connection and drop it from the guard's lists."""
        self._cancel_write_timer()


class GuardedHttp(_ReadsItsReplies, HttpToolsProtocol):
    """uvicorn's httptools protocol with bounds on what one client can make the server hold
    (``uvicorn.Config(**connection_options(guard))``):

    * heads: a request's line and headers are read up to ``max_head_bytes`` together and
      ``max_headers`` headers; past either the request is answered 431 (414 when most of the
      head is its URL) and the connection closed, before the rest is read;
    * pipelining: reading stops while a request waits behind the one being answered, and a
      connection that sends more than ``max_pipelined`` requests ahead is closed;
    * time: a request (head and body) must arrive within ``request_timeout_s`` of the server
      waiting for it, and replies must not sit unread for longer, or the connection is closed;
    * count: past ``max_connections`` the connection that has waited longest for a request (or
      else the WebSocket idle longest) is closed to make room; with none, the newcomer is read
      only to answer ``GET /health`` and gets 503 for anything else.
    """

    def __init__(self, *args: Any, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard = guard
        self.parser = _StoppableParser(self)
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)  # as uvicorn's own
        self._request_timer: asyncio.TimerHandle | None = None
        self._head_bytes: int | None = 0  # of the head being read; None while a body is
        self._heads = 0  # heads read whole
        self._upgraded = False
        self._over_cap = False  # no room was made for this connection

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.flow = _PipelineFlow(transport, self)
        self._over_cap = len(self.connections) > self.guard.max_connections and not self.guard.make_room()
        self._await_request()

    def connection_lost(self, exc: Exception | None) -> None:
        self._forget()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Parse what fits the head's bound; a head still unfinished there is refused before
        more of it is read (httptools would gather it without limit)."""
        while self._head_bytes is not None and len(data) > (room := self.guard.max_head_bytes - self._head_bytes):
            heads = self._heads
            self._head_bytes += room
            super().data_received(data[:room])
            if self._upgraded or self.transport.is_closing():
                return
            if self._heads == heads:
                url_bytes = len(getattr(self, "url", b""))
                status = 414 if url_bytes > self.guard.max_head_bytes // 2 else 431
                return self._refuse_head(
                    status, f"a request's line and headers are {self.guard.max_head_bytes} bytes at most"
                )
            data = data[room:]  # a head ended within: the rest is a body, or the next request
        if self._head_bytes is not None:
            self._head_bytes += len(data)
        super().data_received(data)

    def handle_websocket_upgrade(self) -> None:
        self._forget()  # the WebSocket protocol takes over the socket, with its own guard
        self._upgraded = True
        super().handle_websocket_upgrade()

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        if len(self.headers) > self.guard.max_headers:
            self._refuse_head(431, f"a request has {self.guard.max_headers} headers at most")
            raise _Stop

    def on_headers_complete(self) -> None:
        self._heads += 1
        self._head_bytes = None
        if self._over_cap and not self._asks_health():
            self.guard.refused += 1
            self._refuse(503, "too_many_connections", "every connection is busy: retry shortly")
            raise _Stop
        super().on_headers_complete()
        self.guard.idle.pop(self, None)  # a request is in progress: not to be closed for room
        if self._over_cap:
            self.cycle.keep_alive = False  # answered, then closed: it is over the count
        if len(self.pipeline) > self.guard.max_pipelined:  # a client not reading its replies
            self.guard.overflowed += 1
            self._forget()
            self.transport.abort()  # no reply: one may be half written on this connection
            raise _Stop

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._head_bytes = 0  # what comes next is the next request's head
        self._cancel_request_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.cycle.response_complete and not self.transport.is_closing():
            self._await_request()

    def _asks_health(self) -> bool:
        try:
            path = httptools.parse_url(self.url).path
        except httptools.HttpParserInvalidURLError:
            return False
        return self.parser.get_method() == b"GET" and path == self.guard.health_path

    def _await_request(self) -> None:
        self.guard.idle.pop(self, None)
        self.guard.idle[self] = None  # newest last
        self._cancel_request_timer()
        self._request_timer = self.loop.call_later(self.guard.request_timeout_s, self._overdue)

    def _cancel_request_timer(self) -> None:
        if self._request_timer is not None:
            self._request_timer.cancel()
            self._request_timer = None

    def _forget(self) -> None:
        super()._forget()
        self.guard.idle.pop(self, None)
        self._cancel_request_timer()

    def _refuse_head(self, status: int, message: str) -> None:
        self.guard.heads_refused += 1
        if self.cycle is not None and not self.cycle.response_complete:
            self._forget()
            self.transport.abort()  # a reply to an earlier request is under way: no room for this one
        else:
            self._refuse(status, "too_large", message)

    def _refuse(self, status: int, kind: str, message: str) -> None:
        """A JSON error written straight to the socket, then the connection closed."""
        body = json.dumps({"error": {"type": kind, "message": message}}).encode()
        retry = "retry-after: 1\r\n" if status == 503 else ""
        head = (
            f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n{retry}connection: close\r\n\r\n"
        )
        self._forget()
        self.transport.write(head.encode() + body)
        self.transport.close()


class GuardedWebSocket(_ReadsItsReplies, WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol, closed when its replies sit unread for the guard's
    ``request_timeout_s``: a client that stops reading cannot hold the connection (and what
    the server has written to it) for good."""

    def __init__(self, *args: Any, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard = guard

    def connection_lost(self, exc: Exception | None) -> None:
        self._forget()
        super().connection_lost(exc)
