"""A small HTTP/1.1 server on 127.0.0.1 for one episode's web application.

Each episode's app gets its own listening port, so one episode's browser context can only
reach its own app (the context's network filter allows that one origin and nothing else).
An app is any object with ``handle(request) -> Response``; it runs on the browser service's
event loop, so it must be quick (an in-memory SQLite query, a template) and never block.

Only what a browser sends to a plain HTML application is supported: GET and POST, form
bodies (``application/x-www-form-urlencoded``), cookies, keep-alive. Anything malformed gets a
400 and a closed connection; a bug in the app a 500 with no detail, logged here.
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol
from urllib.parse import parse_qs, unquote, urlsplit

logger = logging.getLogger("ludus.web")

MAX_HEADER_BYTES = 32 * 1024
MAX_BODY_BYTES = 1024 * 1024
_REASONS = {200: "OK", 302: "Found", 303: "See Other", 400: "Bad Request", 403: "Forbidden", 404: "Not Found"}


@dataclass
class Request:
    method: str  # "GET" or "POST"
    path: str  # decoded, without the query string
    query: dict[str, list[str]] = field(default_factory=dict)
    form: dict[str, list[str]] = field(default_factory=dict)  # a POSTed form's fields
    cookies: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names

    def arg(self, name: str, default: str = "") -> str:
        """The last value of ``name`` in the form, else in the query string, else ``default``."""
        values = self.form.get(name) or self.query.get(name)
        return values[-1] if values else default

    def args(self, name: str) -> list[str]:
        """Every value of ``name`` (checkbox groups), form first."""
        return self.form.get(name) or self.query.get(name) or []


@dataclass
class Response:
    body: str | bytes = ""
    status: int = 200
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)
    cookies: dict[str, str] = field(default_factory=dict)  # set with Path=/; HttpOnly; SameSite=Strict

    @classmethod
    def redirect(cls, location: str) -> Response:
        """A 303 to ``location`` (a path on the same app): the answer to a form POST."""
        return cls("", 303, headers={"Location": location})


class App(Protocol):
    def handle(self, request: Request) -> Response: ...


class StaticFiles:
    """Files of one folder, read-only (MiniWoB's task pages); nothing outside it is served."""

    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()

    def handle(self, request: Request) -> Response:
        if request.method != "GET":
            return Response("method not allowed", 405, "text/plain")
        path = (self.root / request.path.lstrip("/")).resolve()
        if not path.is_relative_to(self.root) or not path.is_file():
            return Response("not found", 404, "text/plain")
        kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        return Response(path.read_bytes(), 200, kind + ("; charset=utf-8" if kind.startswith("text/") else ""))


class LoopbackServer:
    """``app`` served on 127.0.0.1 on a free port; start and close it on one event loop."""

    def __init__(self, app: App):
        self.app = app
        self.port = 0
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> LoopbackServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=MAX_HEADER_BYTES)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._connections):
                writer.close()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                if isinstance(request, str):
                    await _write(writer, Response(request, 400, "text/plain"), close=True)
                    return
                try:
                    response = self.app.handle(request)
                except Exception:  # the app's bug: the page shows an error, the episode goes on
                    logger.exception("web app failed on %s %s", request.method, request.path)
                    response = Response("internal error", 500, "text/plain")
                close = request.headers.get("connection", "").lower() == "close"
                await _write(writer, response, close=close, head_only=request.method == "HEAD")
                if close:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return
        finally:
            self._connections.discard(writer)
            writer.close()


async def _read_request(reader: asyncio.StreamReader) -> Request | str | None:
    """The next request, a reason it is malformed, or ``None`` at a clean end of the connection."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        return None if not exc.partial.strip() else "incomplete request"
    except asyncio.LimitOverrunError:
        return "request head too large"
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return "malformed request line"
    method, target, _ = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, sep, value = line.partition(":")
            if not sep:
                return "malformed header"
            headers[name.strip().lower()] = value.strip()
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        return "bad Content-Length"
    if length < 0 or length > MAX_BODY_BYTES or "chunked" in headers.get("transfer-encoding", ""):
        return "unsupported body"
    body = await reader.readexactly(length) if length else b""
    url = urlsplit(target)
    form: dict[str, list[str]] = {}
    if method == "POST" and headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        form = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    cookies = {}
    for item in headers.get("cookie", "").split(";"):
        name, sep, value = item.strip().partition("=")
        if sep:
            cookies[name] = value
    return Request(
        method,
        unquote(url.path) or "/",
        parse_qs(url.query, keep_blank_values=True),
        form,
        cookies,
        headers,
    )


async def _write(writer: asyncio.StreamWriter, response: Response, *, close: bool, head_only: bool = False) -> None:
    body = response.body.encode() if isinstance(response.body, str) else response.body
    lines = [
        f"HTTP/1.1 {response.status} {_REASONS.get(response.status, 'Status')}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(body)}",
        "Cache-Control: no-store",
        "Connection: " + ("close" if close else "keep-alive"),
    ]
    lines += [f"{k}: {v}" for k, v in response.headers.items()]
    lines += [f"Set-Cookie: {k}={v}; Path=/; HttpOnly; SameSite=Strict" for k, v in response.cookies.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (b"" if head_only else body))
    await writer.drain()
