"""What a web browser on this machine may ask of a Ludus server: one ASGI guard for ``ludus
serve-env`` and ``ludus serve-model``.

Loopback is no boundary against the browser: any page a user opens can send requests to
``127.0.0.1``. :class:`BrowserGuard` refuses, before the application sees them:

* a ``Host`` that is a DNS name other than ``localhost`` (IP literals pass, any port), unless
  allowed: DNS rebinding points an attacker's name at 127.0.0.1, which makes its page
  same-origin with the server, and needs a name to do it;
* an ``Origin`` that is not allowed: browsers add it to cross-origin requests and WebSocket
  handshakes, programmatic clients send none;
* ``Sec-Fetch-Site: cross-site`` or ``same-site`` without an allowed ``Origin``: the requests a
  page makes with ``<img>``, ``<script>``, prefetch, GET forms or no-cors ``fetch`` carry no
  ``Origin`` but do carry this (``same-origin`` and ``none``, a typed address, pass; so does a
  missing header: programmatic clients).

Pages of allowed origins get CORS: a preflight is answered and replies carry
``Access-Control-Allow-Origin``. Pure ASGI, no framework: it wraps the env server's bare
application and serve-model's FastAPI alike (``app.add_middleware(BrowserGuard, rules=...)``).
"""

from __future__ import annotations

import ipaddress
import json
import re
import urllib.parse
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
_HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*")
_CROSS_SITE = (b"cross-site", b"same-site")

# what an allowed page may send: the routes' methods, a token and a JSON body
_PREFLIGHT = [
    (b"access-control-allow-methods", b"GET, POST"),
    (b"access-control-allow-headers", b"authorization, content-type"),
    (b"access-control-max-age", b"600"),
]
# each short enough for a WebSocket close reason (123 bytes with its "KIND: ")
_HOST_REFUSED = "ask by IP address or localhost, or start the server with --allow-host NAME"
_ORIGIN_REFUSED = "requests from browser pages are refused unless --allow-origin names theirs"
_SITE_REFUSED = "requests from other sites' pages are refused unless --allow-origin names theirs"


def checked_origin(origin: str) -> str:
    """``origin`` if it is written as browsers send it (``scheme://host[:port]`` in lower case,
    without a default port, user, path, query or fragment): one written otherwise would never
    match, and the page meant to be allowed would be refused without a word. ValueError says
    what to write."""
    if origin == "null" or "*" in origin:
        raise ValueError(
            f"--allow-origin {origin!r} names no one page ('null' is any sandboxed page, and there are no "
            "wildcards): name each origin, as in https://app.example"
        )
    try:
        parts = urllib.parse.urlsplit(origin)
        host, port = parts.hostname, parts.port
        scheme = parts.scheme.lower()
        if not host or not _SCHEME.fullmatch(scheme):
            raise ValueError("no scheme or host")
        host = host.encode("idna").decode("ascii")  # browsers send international names in punycode
    except (ValueError, UnicodeError) as exc:
        raise ValueError(f"--allow-origin {origin!r} is not scheme://host[:port] ({exc})") from None
    written = f"{scheme}://{f'[{host}]' if ':' in host else host}"
    if port is not None and port != _DEFAULT_PORTS.get(scheme):
        written += f":{port}"
    if origin != written:
        raise ValueError(
            f"--allow-origin {origin!r} is not an origin as browsers send it (lower case, no default port, "
            f"no user, path, query or fragment): write {written!r}"
        )
    return origin


def checked_host(name: str) -> str:
    """``name`` if it is a DNS name as a ``Host`` header is compared with it: lower case, no
    scheme, port or wildcard."""
    if not _HOST_NAME.fullmatch(name):
        raise ValueError(
            f"--allow-host takes a DNS name in lower case without scheme, port or wildcard (as in "
            f"envs.internal), got {name!r}"
        )
    return name


def host_name(host: str) -> str | None:
    """The DNS name a ``Host`` header names, lower case, without its port and final dot; None
    for an IP address (or an empty header), which no rebinding can make."""
    name, colon, port = host.rpartition(":")
    if not colon or not port.isdigit() or (name.count(":") and not name.startswith("[")):
        name = host  # no port (an unbracketed IPv6 address is all colons)
    name = name.removeprefix("[").removesuffix("]").lower().removesuffix(".")
    if not name:
        return None
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return name
    return None


@dataclass(frozen=True)
class BrowserRules:
    """Which browser pages and host names a server answers; checked when made, so that a bad
    flag stops the server at start."""

    allow_origins: tuple[str, ...] = ()
    allow_hosts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for origin in self.allow_origins:
            checked_origin(origin)
        for name in self.allow_hosts:
            checked_host(name)

    def refusal(self, headers: list[tuple[bytes, bytes]]) -> tuple[str, str] | None:
        """``(kind, message)`` for a request these rules refuse; None to serve it."""
        host = origin = site = None
        for name, value in headers:
            if name == b"host":
                host = value
            elif name == b"origin":
                origin = value
            elif name == b"sec-fetch-site":
                site = value
        if host is not None:
            name = host_name(host.decode("latin-1"))
            if name is not None and name != "localhost" and name not in self.allow_hosts:
                return "forbidden_host", _HOST_REFUSED
        if origin is not None:
            if origin.decode("latin-1") not in self.allow_origins:
                return "forbidden_origin", _ORIGIN_REFUSED
        elif site in _CROSS_SITE:
            return "forbidden_origin", _SITE_REFUSED
        return None


class BrowserGuard:
    """ASGI middleware applying :class:`BrowserRules` to HTTP requests and WebSocket handshakes.
    A refused request gets 403 with ``{"error": {"type", "message"}}``; a refused WebSocket is
    accepted and closed at once with code 1008 and the reason ``KIND: message`` (a close code is
    what a client can read). ``counts`` hears of each refusal as ``refused_host`` or
    ``refused_origin``."""

    def __init__(self, app: App, *, rules: BrowserRules, counts: Counter[str] | None = None) -> None:
        self.app, self.rules = app, rules
        self.counts: Counter[str] = Counter() if counts is None else counts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        refusal = self.rules.refusal(scope["headers"])
        if refusal is not None:
            kind, message = refusal
            self.counts["refused_" + kind.removeprefix("forbidden_")] += 1
            if scope["type"] == "http":
                return await _respond(send, 403, {"error": {"type": kind, "message": message}})
            if (await receive())["type"] == "websocket.connect":
                await send({"type": "websocket.accept"})
                await send({"type": "websocket.close", "code": 1008, "reason": f"{kind}: {message}"})
            return None
        origin = next((v for k, v in scope["headers"] if k == b"origin"), None)
        if origin is None or scope["type"] == "websocket":
            return await self.app(scope, receive, send)
        send = _with_cors(send, origin)
        if scope["method"] == "OPTIONS":  # a preflight: no token comes with it
            return await _respond(send, 204, None, _PREFLIGHT)
        return await self.app(scope, receive, send)


def _with_cors(send: Send, origin: bytes) -> Send:
    """``send`` for a request of an allowed origin: its page may read the reply."""

    async def send_with_cors(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            cors = [(b"access-control-allow-origin", origin), (b"vary", b"origin")]
            message = {**message, "headers": [*message.get("headers", []), *cors]}
        await send(message)

    return send_with_cors


async def _respond(
    send: Send, status: int, body: dict[str, Any] | None, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    """A whole reply: ``body`` as JSON (none for None)."""
    data = b"" if body is None else json.dumps(body).encode()
    headers = [(b"content-length", str(len(data)).encode()), *(extra or [])]
    if body is not None:
        headers.insert(0, (b"content-type", b"application/json"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


__all__ = ["BrowserGuard", "BrowserRules", "checked_host", "checked_origin", "host_name"]
