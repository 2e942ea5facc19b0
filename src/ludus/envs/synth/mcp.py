"""``McpEnv``: a tool environment over a user's MCP server (``ludus synth --mcp``, docs/synth.md).

The server is the backend. Every tool it listed when ``ludus synth`` ran is offered to the policy
as the server describes it (``tools.json``, a snapshot); each episode starts a server process of
its own over stdio (so the state is the process's, fresh each episode) and forwards the policy's
calls to it; after the final reply the user's rubric grades the episode: checks that call the
server's own tools on that same process, and optionally the reply's ``<answer>``. Tasks come from
the rubric too: each names a tool, and its arguments are drawn from the tool's input schema.

This is the weaker guarantee of the two ``ludus synth`` sources: the state lives in the user's
server, and grading is only as good as their rubric. What this module makes sure of is the rest:
a server that hangs, dies or writes junk on stdout ends the episode as ``infra_error`` (never a
crash, a hang or a reward), each call and each start has a time-out, and no process of a server
outlives its episode (it runs in a process group of its own, which is killed whole).

The SDK is async (anyio); the environment API is synchronous: each environment runs one event
loop on a thread of its own (an anyio blocking portal) and waits on it with a time-out.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import itertools
import json
import os
import random
import re
import signal
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from ludus.core.env import Split, ToolEnv
from ludus.core.tools import Tool, ToolError
from ludus.core.types import InfraError, Message, Observation, Score, Status, Task, ToolCall, ToolSpec
from ludus.envs.synth.data import value
from ludus.envs.synth.env import oracle_turn
from ludus.envs.synth.resources import merged
from ludus.envs.synth.store import invalid, unreadable
from ludus.envs.synth.tasks import _same_answer, answer_text, canonical_json
from ludus.tasks.answers import final_answer
from ludus.tasks.procedural import check_split, in_eval_bucket

START_TIMEOUT = 30.0  # seconds a server has to answer initialize and list its tools
CALL_TIMEOUT = 30.0  # seconds a server has to answer one tool call
KILL_GRACE = 1.0  # seconds between SIGTERM to a server's process group and SIGKILL
SLACK = 5.0  # seconds the caller waits past a time-out the event loop enforces itself
MAX_SERVER_REQUESTS = 1_000  # requests a server sends the client on one connection (a flood is junk)
MAX_LINE = 32_000_000  # bytes of one line on a server's stdout
STDERR_KEPT = 4_000  # bytes of a server's stderr kept, to quote when it fails
MAX_REPLY = 16_000  # characters of a tool's reply shown to the policy
MAX_TOOLS = 200  # tools offered at most (a prompt holds their schemas)
MAX_PAGES = 50  # pages of a tool listing read
MAX_SCHEMA_CHARS = 100_000  # characters of one tool's input schema, as JSON
MAX_SCHEMA_NODES = 20_000  # schema nodes once references are inlined
MAX_REF_DEPTH = 4  # a recursive reference is unrolled this deep, then any value
MAX_RUBRIC_BYTES = 1_000_000
PROBE_DRAWS = 8  # draws of a task's arguments whose checks synth runs on a fresh server (all must fail)
TRIES = 50  # draws of a task's arguments before its schema is declared impossible to fill
MAX_LISTED = 10_000  # tools read from a listing at most (what is past them is never offered)
MAX_SCHEMA_DEPTH = 64  # arrays and objects within each other in one tool's input schema
MAX_SERVER_NAME = 200  # characters of the name (and version) a server gives itself
MAX_LEFT_OUT_SHOWN = 50  # tools left out that SYNTH.md lists one by one
MARK = "LUDUS_MCP_SERVER"  # in each server's environment: its token, which its descendants inherit
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what OpenAI-compatible chat APIs accept
FIELD = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")  # a template's {argument}, its escaped braces, a lone brace
WHOLE = re.compile(r"\{([^{}]+)\}")
EXPECT_KEYS = ("contains", "not_contains", "equals", "is_error")
STARTING = "while starting (initialize, tools/list)"


class ServerError(InfraError):
    """The MCP server could not be started, did not answer in time, exited, or broke the
    protocol: the message is one sentence saying which (and what the server said on stderr)."""


class RubricError(ValueError):
    """A rubric that cannot grade (an unknown key, a template naming an argument the tool does
    not take, a check calling a tool the server does not list, checks that pass on their own)."""


# ---- the server process and its session -------------------------------------------------------


_STUCK: list[Any] = []  # the portals of loops that did not stop: kept, never collected (that would wait on them)


class _Loop:
    """An event loop on a daemon thread of its own (anyio's blocking portal)."""

    def __init__(self) -> None:
        from anyio.from_thread import start_blocking_portal

        self._cm = start_blocking_portal(name="ludus-mcp")
        self.portal = self._cm.__enter__()

    def run(self, fn: Callable[..., Any], *args: Any, timeout: float) -> Any:
        """``await fn(*args)`` on the loop; ``concurrent.futures.TimeoutError`` past ``timeout``."""
        future = self.portal.start_task_soon(fn, *args)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def close(self) -> None:
        try:  # a loop that does not stop in time is left to its (daemon) thread rather than waited on
            self.portal.start_task_soon(self.portal.stop, True).result(SLACK)
        except RuntimeError:  # stopped already
            pass
        except Exception:  # noqa: BLE001 - stuck: joining its thread would hang, and so would collecting it
            _STUCK.append(self._cm)
            return
        with contextlib.suppress(Exception):
            self._cm.__exit__(None, None, None)


@dataclass
class CallResult:
    """A tool call's outcome: its text (text contents joined; the structured content as JSON
    when there is no text), whether the server flagged it an error, and its structured content."""

    text: str
    is_error: bool
    structured: Any = None

    def reply(self) -> str:
        text = self.text if len(self.text) <= MAX_REPLY else self.text[:MAX_REPLY] + " … (cut)"
        return text

    def json_value(self) -> Any:
        """What ``equals`` compares: the structured content when the server sends one, else the
        text read as JSON, else the text."""
        if self.structured is not None:
            return self.structured
        try:
            return json.loads(self.text)
        except (ValueError, RecursionError):
            return self.text


def _group_runs(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (a zombie has ended: only its parent's wait
    is left). Where ``/proc`` cannot tell, whether the group has any process at all."""
    try:
        os.killpg(pgid, 0)
    except OSError:
        return False  # no process in the group, zombies included
    if not os.path.isdir("/proc"):
        return True
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"{entry.path}/stat", encoding="utf-8", errors="replace") as stat:
                    state, _, group = stat.read().rsplit(")", 1)[1].split()[:3]
            except (OSError, ValueError, IndexError):
                continue
            if group == str(pgid) and state != "Z":
                return True
    return False


_tokens = itertools.count()


def _marked(token: str) -> list[int]:
    """The processes whose environment holds ``MARK=token``: a server and its descendants, those
    that left its process group and session (a daemon's double fork and ``setsid``) included, as
    long as they keep the environment they were started with. Empty where ``/proc`` cannot tell."""
    needle = f"\0{MARK}={token}\0".encode()
    found = []
    try:
        entries = list(os.scandir("/proc"))
    except OSError:
        return found
    for entry in entries:
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                with open(f"{entry.path}/environ", "rb") as environ:
                    data = environ.read()
            except OSError:  # gone, or another user's
                continue
            if needle in b"\0" + data:
                found.append(int(entry.name))
    return found


def _kill_marked(token: str, rounds: int = 20) -> list[int]:
    """SIGKILL every process :func:`_marked` finds, again until none is left (one that forks
    while it is killed leaves a child that a second look finds); what is still found at the end."""
    for _ in range(rounds):
        found = _marked(token)
        if not found:
            return []
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)
    return _marked(token)


def _kill_groups(pids: dict[int, str]) -> None:
    """Kill what is left of each server in ``pids`` (its process group, and whatever carries its
    token): a finalizer, so an environment never closed, or an interpreter exiting, leaves no
    server behind."""
    for pid, token in list(pids.items()):
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        _kill_marked(token)
        pids.pop(pid, None)


class Server:
    """One MCP server process over stdio, driven synchronously through ``loop``.

    ``launch`` spawns it in a new session (its own process group) and, on the loop, initializes
    it and lists its tools without waiting; ``ready`` waits for that (``start`` does both);
    ``call`` forwards one tool call; ``close`` ends the whole group. Every failure is a
    :class:`ServerError` saying what happened, never a hang: each wait has a time-out."""

    def __init__(
        self,
        loop: _Loop,
        argv: list[str],
        cwd: str | None,
        *,
        start_timeout: float = START_TIMEOUT,
        call_timeout: float = CALL_TIMEOUT,
        pids: dict[int, str] | None = None,
    ):
        self.loop, self.argv, self.cwd = loop, list(argv), cwd
        self.start_timeout, self.call_timeout = start_timeout, call_timeout
        self.pids = pids if pids is not None else {}  # process group -> token, of the servers not yet ended
        self.token = f"{os.getpid()}.{next(_tokens)}.{random.SystemRandom().getrandbits(64):016x}"
        self.pid: int | None = None
        self.process: Any = None
        self.junk: str | None = None  # what it wrote on stdout that ended the connection (or why it ended)
        self.junk_is_line = True  # junk is a line it wrote (else the protocol rule it broke)
        self.stderr = bytearray()
        self.session: Any = None
        self.info: dict[str, Any] = {}
        self.used = False  # a call was sent: its state is no longer the one it started with
        self.checked = False  # its tools were compared with the snapshot
        self._listed: concurrent.futures.Future[list[dict[str, Any]]] = concurrent.futures.Future()
        self._ended = threading.Event()
        self._scope: Any = None
        self._stderr_read: Any = None  # set once its stderr has been read to the end
        self._stopping = False
        self._launched = False
        self._eof = False  # its stdout ended, junk ended the reading, or its stdin closed: the connection is closed

    # -- the synchronous face --
    def launch(self) -> None:
        """Start the server in the background: ``ready`` waits for it."""
        if not self._launched:
            self._launched = True
            self.loop.portal.start_task_soon(self._run)

    def ready(self) -> list[dict[str, Any]]:
        """Wait until the server has started; its tools as listed (``name``, ``description``,
        ``inputSchema``)."""
        self.launch()
        try:
            return self._listed.result(self.start_timeout + SLACK)
        except concurrent.futures.TimeoutError:
            raise ServerError(f"the MCP server did not answer within {self.start_timeout:g} s {STARTING}") from None

    def start(self) -> list[dict[str, Any]]:
        """``launch`` and ``ready``; the server is closed if it does not start."""
        try:
            return self.ready()
        except BaseException:
            self.close()
            raise

    def call(self, name: str, arguments: dict[str, Any], timeout: float | None = None) -> CallResult:
        """Call tool ``name``; a tool error is a result (``is_error``), a server that fails is a
        :class:`ServerError`."""
        self.ready()
        self.used = True
        timeout = self.call_timeout if timeout is None else timeout
        what = f"on tools/call {name}"
        try:
            return self.loop.run(self._call, name, arguments, timeout, timeout=timeout + SLACK)
        except concurrent.futures.TimeoutError:
            raise ServerError(f"the MCP server did not answer within {timeout:g} s {what}") from None
        except concurrent.futures.CancelledError:
            raise ServerError(f"the MCP server's connection was shut down {what}") from None

    def close(self) -> None:
        """End the server's process group; returns once it is gone (a few seconds at most)."""
        if self._launched and not self._ended.is_set():
            try:  # never a wait without an end: a loop that cannot run it is passed over
                self.loop.portal.start_task_soon(self._request_stop).result(SLACK)
            except Exception:  # noqa: BLE001 - the loop is gone or stuck: the kill below is all there is
                pass
            else:
                self._ended.wait(KILL_GRACE + 2 * SLACK)
        if self.pid is not None and self.pid in self.pids:  # the loop could not: kill it from here
            _kill_groups({self.pid: self.pids.pop(self.pid)})

    @property
    def broken(self) -> bool:
        """It failed to start, or it ended (exited, or wrote junk) before anyone asked it anything."""
        failed = self._listed.done() and self._listed.exception() is not None
        return failed or self._gone()

    # -- on the loop --
    def _request_stop(self) -> None:
        self._stopping = True
        if self._scope is not None:
            self._scope.cancel()

    async def _run(self) -> None:
        """Holds the process and the session open until ``close``."""
        import anyio

        self._scope = anyio.CancelScope()
        if self._stopping:  # closed before it began: nothing to start
            self._listed.set_exception(ServerError("the MCP server was stopped before it started"))
            self._ended.set()
            return
        try:
            with self._scope:
                async with self._stdio() as (read, write), _session_class()(read, write) as session:
                    self.session = session
                    self._listed.set_result(await self._initialize())
                    await anyio.sleep_forever()
        except Exception as exc:  # noqa: BLE001 - the reason the server did not start, for ``ready``
            if not self._listed.done():
                self._listed.set_exception(self._start_error(exc))
        finally:
            self.session = None
            if not self._listed.done():
                self._listed.set_exception(ServerError("the MCP server was stopped before it started"))
            self._ended.set()

    def _start_error(self, exc: BaseException) -> ServerError:
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
        if isinstance(exc, ServerError):
            return exc
        if isinstance(exc, OSError) and self.process is None:
            return ServerError(f"the MCP server {self.argv[0]!r} could not be started: {exc.strerror or exc}")
        return ServerError(self.describe(exc, STARTING, self.start_timeout))

    async def _initialize(self) -> list[dict[str, Any]]:
        import anyio
        import mcp.types as types

        tools: list[dict[str, Any]] = []
        try:
            with anyio.fail_after(self.start_timeout):
                init = await self.session.initialize()
                cursor = None
                for _ in range(MAX_PAGES):
                    params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                    page = await self.session.list_tools(params=params)
                    # kept as they are listed, descriptions cut: a listing of pages of megabytes is not held whole
                    tools += [
                        {
                            "name": t.name,
                            "description": (t.description or "")[:2000],
                            "inputSchema": t.input_schema or {},
                            **_hints(t),
                        }
                        for t in page.tools
                    ]
                    cursor = page.next_cursor
                    if not cursor or len(tools) >= MAX_LISTED:
                        break
        except Exception as exc:  # noqa: BLE001 - every failure becomes one sentence
            raise await self._failure(exc, STARTING, self.start_timeout) from None
        info = getattr(init, "server_info", None)
        # its name goes into every prompt (and the package's name): of sane length, whatever the server sends
        self.info = {k: str(getattr(info, k, "") or "")[:MAX_SERVER_NAME] for k in ("name", "version")}
        return tools[:MAX_LISTED]

    async def _call(self, name: str, arguments: dict[str, Any], timeout: float) -> CallResult:
        import anyio
        from mcp import MCPError

        try:
            with anyio.fail_after(timeout):
                result = await self.session.call_tool(name, arguments)
        except MCPError as exc:
            # the SDK says a closed connection with -32000, which a server may answer too (JSON-RPC's
            # "server error" range): closed is what the reading of its stdout saw
            if self._eof or self._gone():
                raise await self._failure(exc, f"on tools/call {name}", timeout) from None
            return CallResult(f"{exc.error.message}"[:MAX_REPLY], True)  # a JSON-RPC error answer: the call's
        except Exception as exc:  # noqa: BLE001 - a timeout, a result that breaks the protocol
            raise await self._failure(exc, f"on tools/call {name}", timeout) from None
        return _result(result)

    def _gone(self) -> bool:
        return self.junk is not None or (self.process is not None and self.process.returncode is not None)

    async def _failure(self, exc: BaseException, what: str, timeout: float) -> ServerError:
        import anyio

        if not isinstance(exc, TimeoutError) and self.junk is None:  # a closed connection: see the process exit
            with anyio.move_on_after(1.0):
                while self.process is not None and self.process.returncode is None:
                    await anyio.sleep(0.01)
        if self._stderr_read is not None and self._gone():  # and read what it said last
            with anyio.move_on_after(0.5):
                await self._stderr_read.wait()
        return ServerError(self.describe(exc, what, timeout))

    def describe(self, exc: BaseException, what: str, timeout: float) -> str:
        """The one sentence saying why the server failed ``what``."""
        from ludus.envs.synth.package import printable

        said = (
            printable(self.stderr.decode("utf-8", "replace").strip().splitlines()[-1][-300:])
            if self.stderr.strip()
            else ""
        )
        said = f"; its last line on stderr: {said!r}" if said else ""
        if self.junk is not None and not self.junk_is_line:
            return f"the MCP server broke the protocol {what}: {printable(self.junk)}"
        if self.junk is not None:
            return (f"the MCP server wrote a line to stdout that is not JSON-RPC {what} ({printable(self.junk)!r}): a "
                    "server over stdio may write only protocol messages there (log to stderr)")  # fmt: skip
        code = self.process.returncode if self.process is not None else None
        if code is not None:
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            return f"the MCP server {how} {what}{said}"
        if isinstance(exc, TimeoutError):
            return f"the MCP server did not answer within {timeout:g} s {what}{said}"
        told = " ".join(str(exc).split())[:300]  # a pydantic error's lines, on one
        return printable(f"the MCP server failed {what}: {type(exc).__name__}: {told}{said}")

    @contextlib.asynccontextmanager
    async def _stdio(self) -> Any:
        """The process's stdio as the session's streams: one JSON-RPC message a line; a line
        that is not one ends the connection (``junk``); stderr is kept (its end) for messages."""
        import anyio
        import mcp_types
        from mcp.shared.message import SessionMessage

        with anyio.CancelScope(shield=True):  # a spawn cancelled halfway would leave a process no one ends
            env = {**os.environ, MARK: self.token}
            process = await anyio.open_process(self.argv, cwd=self.cwd, env=env, start_new_session=True)
            self.process, self.pid = process, process.pid
            self.pids[process.pid] = self.token
        self._stderr_read = anyio.Event()
        read_send, read_recv = anyio.create_memory_object_stream[Any](0)
        write_send, write_recv = anyio.create_memory_object_stream[Any](0)
        closed = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError)

        async def read_stdout() -> None:
            buffer = bytearray()  # grown and cut in place: a long line costs its length, not its square
            asked = 0  # requests from the server (sampling, roots, elicitation, ping): each is refused or answered
            try:
                with contextlib.suppress(*closed):
                    async with read_send:
                        async for chunk in process.stdout:
                            start = len(buffer)  # what is before it holds no line break
                            buffer += chunk
                            while (end := buffer.find(b"\n", start)) >= 0:
                                line, start = bytes(buffer[:end]), 0
                                del buffer[: end + 1]
                                if not line.strip():
                                    continue
                                message = _message(line)
                                if isinstance(message, mcp_types.JSONRPCRequest):  # each is a task of the SDK's
                                    asked += 1
                                    if asked > MAX_SERVER_REQUESTS:
                                        message = _Broke(f"it sent the client more than {MAX_SERVER_REQUESTS} requests")
                                if isinstance(message, str):  # a line that is no message, or a _Broke
                                    self.junk, self.junk_is_line = str(message), not isinstance(message, _Broke)
                                    return  # closing the stream ends the session's requests
                                await read_send.send(SessionMessage(message))
                            if len(buffer) > MAX_LINE:
                                self.junk, self.junk_is_line = f"it wrote a line of more than {MAX_LINE} bytes", False
                                return
            finally:
                self._eof = True

        async def write_stdin() -> None:
            try:
                async with write_recv:
                    async for item in write_recv:
                        data = item.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                        await process.stdin.send(data.encode())
            except closed:
                self._eof = True  # its stdin is closed: so is the connection
                with contextlib.suppress(*closed):
                    await read_send.aclose()

        async def read_stderr() -> None:
            try:
                with contextlib.suppress(*closed):
                    async for chunk in process.stderr:
                        self.stderr += chunk
                        del self.stderr[:-STDERR_KEPT]
            finally:
                self._stderr_read.set()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(read_stdout)
            tasks.start_soon(write_stdin)
            tasks.start_soon(read_stderr)
            try:
                yield read_recv, write_send
            finally:
                with anyio.CancelScope(shield=True):
                    await self._end(process)
                    for stream in (read_recv, write_send):
                        await stream.aclose()
                tasks.cancel_scope.cancel()

    async def _end(self, process: Any) -> None:
        """SIGTERM to the group, a grace period, SIGKILL to the group (its children too), then
        SIGKILL to whatever still carries the server's token (its descendants that left the group)."""
        import anyio

        with contextlib.suppress(Exception):
            await process.stdin.aclose()
        for sig, wait in ((signal.SIGTERM, KILL_GRACE), (signal.SIGKILL, 2.0)):
            with contextlib.suppress(OSError):
                os.killpg(process.pid, sig)
            with anyio.move_on_after(wait):
                while process.returncode is None:
                    await anyio.sleep(0.01)
        with anyio.move_on_after(2.0):  # the children of the group die of the SIGKILL: see them gone
            while _group_runs(process.pid):
                await anyio.sleep(0.01)
        # and those that left the group (a daemon: fork, setsid, fork) by the token they inherited
        escaped = await anyio.to_thread.run_sync(_kill_marked, self.token)
        for stream in (process.stdout, process.stderr):
            with contextlib.suppress(Exception):
                await stream.aclose()
        # asyncio's transport of the process, closed while its loop runs (the SDK's stdio client does
        # the same): left to the garbage collector, it closes itself on a loop that may be gone
        transport = getattr(getattr(process, "_process", None), "_transport", None)
        with contextlib.suppress(Exception):
            transport.close()
        if process.returncode is not None and not escaped:
            self.pids.pop(process.pid, None)


class _Broke(str):
    """Why a server's output ended its connection, when no line of it is to blame."""


def _message(line: bytes) -> Any:
    """The JSON-RPC message ``line`` holds; else the line (cut), or :class:`_Broke` saying why."""
    import mcp_types

    try:
        return mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError as exc:
        if "recursion limit" in str(exc):  # the SDK reads JSON nested some 200 deep at most
            return _Broke(f"it wrote a JSON message nested too deep to read ({line[:80].decode('utf-8', 'replace')}…)")
        return line[:200].decode("utf-8", "replace")


@functools.cache
def _session_class() -> type:
    """The SDK's client session, less its check of tool results against the tools' output
    schemas: nothing here relies on it, and a server's schema could make it run for ever (a
    ``pattern`` Python's ``re`` backtracks on holds the interpreter's lock: the whole process
    would stop, time-outs included). Requests from the server (sampling, roots, elicitation)
    are refused, as the SDK's defaults do."""
    from mcp import ClientSession

    class Session(ClientSession):
        async def validate_tool_result(self, name: str, result: Any) -> None:
            return None

    return Session


def _result(result: Any) -> CallResult:
    parts = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource":
            resource = block.resource
            parts.append(getattr(resource, "text", None) or f"[resource {resource.uri}]")
        elif kind == "resource_link":
            parts.append(f"[resource link {block.uri}]")
        else:
            parts.append(f"[{kind} content{', ' + block.mime_type if getattr(block, 'mime_type', None) else ''}]")
    structured = result.structured_content
    text = "\n".join(parts)
    if not parts and structured is not None:
        text = json.dumps(structured, ensure_ascii=False)
    return CallResult(text, bool(result.is_error), structured)


# ---- tools: what the listing offers ----------------------------------------------------------


def snapshot(listed: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """The tools a policy can be offered (``tools.json``), and those left out with the reason."""
    kept: list[dict[str, Any]] = []
    left: list[tuple[str, str]] = []
    names: set[str] = set()
    for tool in listed:
        name, schema = tool["name"], tool["inputSchema"]
        why = None
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            why = "its name is not one chat APIs accept (letters, digits, '_' and '-', at most 64)"
        elif name in names:
            why = "a second tool of that name"
        elif not isinstance(schema, dict) or schema.get("type", "object") != "object":
            why = "its input schema is not an object schema"
        elif _too_long(schema):
            why = f"its input schema is longer than {MAX_SCHEMA_CHARS:,} characters as JSON, or nests too deep"
        elif len(kept) >= MAX_TOOLS:
            why = f"more than {MAX_TOOLS} tools: a prompt cannot hold them all"
        if why:
            left.append((f"tool {str(name)[:80]!r}", why))
            continue
        names.add(name)
        kept.append({"name": name, "description": str(tool["description"])[:2000], "inputSchema": schema})
        if isinstance(tool.get("annotations"), dict):
            kept[-1]["annotations"] = tool["annotations"]
    return kept, left


def _hints(tool: Any) -> dict[str, Any]:
    """The tool's hints of what it changes (``readOnlyHint``, ``destructiveHint``), where the server gives any."""
    annotations = getattr(tool, "annotations", None)
    hints = {}
    for key, attribute in (("readOnlyHint", "read_only_hint"), ("destructiveHint", "destructive_hint")):
        value = getattr(annotations, attribute, None)
        if isinstance(value, bool):
            hints[key] = value
    return {"annotations": hints} if hints else {}


def writes(tool: dict[str, Any]) -> str | None:
    """How the server says ``tool`` changes its state (not read-only, or destructive), or ``None``."""
    hints = tool.get("annotations")
    hints = hints if isinstance(hints, dict) else {}
    if hints.get("readOnlyHint") is True:
        return None
    if hints.get("readOnlyHint") is False:
        return "not read-only (readOnlyHint: false)"
    return "destructive (destructiveHint: true)" if hints.get("destructiveHint") is True else None


def _too_long(schema: Any) -> bool:
    """Whether ``schema`` nests deeper than ``MAX_SCHEMA_DEPTH`` or is longer than
    ``MAX_SCHEMA_CHARS`` as JSON (depth first, without recursion: what nests deeper than Python
    recurses is never written, compared or drawn from)."""
    todo = [(schema, 0)]
    while todo:
        node, depth = todo.pop()
        if isinstance(node, (dict, list)):
            if depth >= MAX_SCHEMA_DEPTH:
                return True
            todo.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    try:
        return len(json.dumps(schema)) > MAX_SCHEMA_CHARS
    except (RecursionError, ValueError, TypeError):
        return True


def tool_spec(tool: dict[str, Any]) -> ToolSpec:
    """The tool as the policy sees it: the server's own name, description and input schema."""
    return ToolSpec(tool["name"], tool["description"][:1024] or tool["name"], tool["inputSchema"])


class ServerTool(Tool):
    """A tool the server runs: the arguments are forwarded as they are (the server checks them
    against its schema and answers an error the policy can read), once they are a JSON object of
    a sane size."""

    def __init__(self, spec: ToolSpec, forward: Callable[[str, dict[str, Any]], str]):
        super().__init__(forward, spec=spec)

    def outcome(self, call: ToolCall) -> tuple[str, bool, bool]:
        if not isinstance(call.arguments, dict):
            return (
                f"Error: arguments to {self.name} must be a JSON object, got {type(call.arguments).__name__}",
                False,
                False,
            )
        problem = unreadable(call.arguments)
        if problem:
            return f"Error: {problem}", False, False
        try:
            return self.fn(self.name, call.arguments), True, False
        except ToolError as exc:
            return f"Error: {exc}", False, False


# ---- argument generation -----------------------------------------------------------------------


class GenerationError(ValueError):
    """Arguments that fit a tool's input schema cannot be drawn."""


def normalized(schema: Any, root: dict[str, Any] | None = None, depth: int = 0, budget: list[int] | None = None) -> Any:
    """``schema`` with its local references (``#/$defs/…``) inlined and ``allOf`` merged: the
    shape data.py draws values from (validation uses the schema as it is)."""
    root = schema if root is None else root
    budget = [MAX_SCHEMA_NODES] if budget is None else budget
    budget[0] -= 1
    if budget[0] < 0:
        raise GenerationError(
            f"its input schema holds more than {MAX_SCHEMA_NODES:,} schemas once references are inlined"
        )
    if isinstance(schema, list):
        return [normalized(s, root, depth, budget) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if isinstance(schema.get("$ref"), str):
        ref = schema["$ref"]
        if not ref.startswith("#"):
            raise GenerationError(f"its input schema refers to another document ({ref[:100]!r})")
        if depth >= MAX_REF_DEPTH:
            return {}
        target: Any = root
        for part in ref[1:].split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                raise GenerationError(f"its input schema's reference {ref[:100]!r} points to nothing")
            target = target[part]
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        return normalized({**target, **rest}, root, depth + 1, budget)
    out = {
        k: normalized(v, root, depth, budget)
        for k, v in schema.items()
        if not (schema is root and k in ("$defs", "definitions"))  # read through the references
    }
    if isinstance(out.get("allOf"), list) and all(isinstance(p, dict) for p in out["allOf"]):
        out = merged(out)
    return out


def _hinted(schema: Any, name: str) -> Any:
    """A plain string argument named like a date is drawn as one (``date``, ``due_date``)."""
    if (
        isinstance(schema, dict)
        and schema.get("type") == "string"
        and not {"format", "enum", "pattern", "const"} & set(schema)
        and (name.lower() in ("date", "day") or name.lower().endswith("_date"))
    ):
        return {**schema, "format": "date"}
    return schema


# ---- the rubric --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One check: a ``call`` of a tool (``arguments`` and ``expect`` templates), or an ``answer``."""

    where: str  # "tasks[0].checks[1]"
    tool: str | None = None
    arguments: Any = None
    expect: Any = None
    answer: Any = None

    @property
    def is_call(self) -> bool:
        return self.tool is not None


@dataclass
class RubricTask:
    """One entry of ``tasks``: a tool, its goal, what to draw its arguments from, its checks."""

    index: int
    tool: str
    goal: str
    checks: list[Check]
    schema: dict[str, Any]  # the tool's input schema, as listed
    shape: dict[str, Any]  # the same, normalized for drawing
    given: dict[str, list[Any]]  # argument -> the values it is drawn from (rubric ``arguments``)
    drawn: list[str]  # the arguments every task carries: required, named by a template, or given
    required: list[str]  # the ones the schema requires
    problem: str | None = None  # why no arguments can be drawn (the task is left out)

    @property
    def where(self) -> str:
        return f"tasks[{self.index}] ({self.tool})"

    @property
    def answer(self) -> Any:
        """The answer check's template, if the task has one."""
        return next((c.answer for c in self.checks if not c.is_call), None)

    @property
    def has_answer(self) -> bool:
        return any(not c.is_call for c in self.checks)

    def draw(self, rng: random.Random) -> dict[str, Any]:
        """Arguments for one task: each drawn from its schema (or the rubric's values), checked
        whole against the tool's input schema."""
        props = self.shape.get("properties")
        props = props if isinstance(props, dict) else {}
        problem = "no draw"
        for _ in range(TRIES):
            args = {}
            for name in self.drawn:
                if name in self.given:
                    args[name] = rng.choice(self.given[name])
                else:
                    try:
                        args[name] = value(_hinted(props.get(name, {}), name), name, rng)
                    except (TypeError, ValueError, KeyError, IndexError, AttributeError, ArithmeticError) as exc:
                        why = f"{type(exc).__name__}: {str(exc)[:200]}"
                        raise GenerationError(f"the schema of {name!r} cannot be read ({why})") from None
            found = invalid(args, self.schema, "the arguments")
            if found is None:
                return args
            problem = found
        raise GenerationError(f"no arguments drawn in {TRIES} tries fit its input schema ({problem})")


@dataclass
class Rubric:
    instructions: str | None
    tasks: list[RubricTask]  # the ones arguments can be drawn for
    left_out: list[RubricTask] = field(default_factory=list)  # the others, with their problem
    notes: list[tuple[str, str]] = field(default_factory=list)

    @property
    def tools_used(self) -> list[str]:
        """Every tool a task or a check calls: the server must still list them."""
        names = [t.tool for t in self.tasks] + [c.tool for t in self.tasks for c in t.checks if c.tool]
        return list(dict.fromkeys(names))


class _Loader(yaml.SafeLoader):
    """YAML's safe loader, refusing aliases (nested aliases expand to gigabytes)."""

    def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.YAMLError(f"YAML aliases (*{event.anchor}) are not read, at line {event.start_mark.line + 1}")
        return super().compose_node(parent, index)


def read_rubric(text: bytes, tools: list[dict[str, Any]], where: str = "the rubric") -> Rubric:
    """The rubric in ``text`` (YAML), checked against ``tools`` (the snapshot). Raises
    :class:`RubricError` naming the place and the problem."""
    if len(text) > MAX_RUBRIC_BYTES:
        raise RubricError(f"{where} is larger than {MAX_RUBRIC_BYTES:,} bytes")
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - the safe loader, without aliases
    except yaml.YAMLError as exc:
        raise RubricError(f"{where} is not YAML that can be read: {str(exc)[:300]}") from None
    except RecursionError:
        raise RubricError(f"{where} nests too deep") from None
    return _Reader(where, {t["name"]: t for t in tools}).rubric(data)


class _Reader:
    def __init__(self, where: str, tools: dict[str, dict[str, Any]]):
        self.where, self.tools = where, tools

    def fail(self, at: str, problem: str) -> RubricError:
        from ludus.envs.synth.package import printable

        return RubricError(printable(f"{self.where}: {at}: {problem}"))

    def mapping(self, data: Any, at: str, known: tuple[str, ...], required: tuple[str, ...] = ()) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise self.fail(at, f"must be a mapping with {', '.join(known)}, got {_kind(data)}")
        unknown = [str(k) for k in data if k not in known]
        if unknown:
            raise self.fail(at, f"unknown key {unknown[0]!r} (known: {', '.join(known)})")
        missing = [k for k in required if k not in data]
        if missing:
            raise self.fail(at, f"{missing[0]!r} is required")
        return data

    def rubric(self, data: Any) -> Rubric:
        top = self.mapping(data, "the top level", ("instructions", "tasks"), ("tasks",))
        instructions = top.get("instructions")
        if instructions is not None and (not isinstance(instructions, str) or not instructions.strip()):
            raise self.fail("instructions", "must be a text")
        if isinstance(instructions, str) and FIELD.search(instructions.replace("{{", "").replace("}}", "")):
            raise self.fail(
                "instructions",
                "holds a brace: it is the same for every task, so it names no argument (write {{ and }})",
            )
        entries = top["tasks"]
        if not isinstance(entries, list) or not entries:
            raise self.fail("tasks", "must be a list of at least one task")
        rubric = Rubric(instructions.replace("{{", "{").replace("}}", "}") if instructions else None, [])
        for i, entry in enumerate(entries):
            task = self.task(i, entry)
            if task.problem:
                rubric.left_out.append(task)
            else:
                rubric.tasks.append(task)
            missing = [r for r in task.required if r not in _fields(task.goal) and r not in task.given]
            if missing:
                rubric.notes.append((task.where, f"required argument(s) the goal does not name: {', '.join(map(str, missing))} "
                                     "(the policy chooses them; the checks should not depend on them)"))  # fmt: skip
        return rubric

    def task(self, i: int, entry: Any) -> RubricTask:
        at = f"tasks[{i}]"
        entry = self.mapping(entry, at, ("tool", "goal", "arguments", "checks"), ("tool", "goal", "checks"))
        tool = self.tool(entry["tool"], f"{at}.tool")
        schema = self.tools[tool]["inputSchema"]
        props = schema.get("properties", {}) if isinstance(schema.get("properties"), dict) else {}
        goal = entry["goal"]
        if not isinstance(goal, str) or not goal.strip():
            raise self.fail(f"{at}.goal", "must be a text")
        named = set(self.template(goal, f"{at}.goal", props, tool))
        given = self.given(entry.get("arguments"), f"{at}.arguments", props, schema, tool)
        checks_data = entry["checks"]
        if not isinstance(checks_data, list) or not checks_data:
            why = "must be a list of at least one check: a task without one would pay anything (deny by default)"
            raise self.fail(f"{at}.checks", why)
        checks = []
        for k, c in enumerate(checks_data):
            check, names = self.check(c, f"{at}.checks[{k}]", props, tool)
            checks.append(check)
            named |= names
        if not any(c.is_call for c in checks):
            why = "needs a `call` check: an answer alone can be copied from the goal, and the task's own call would go unchecked"
            raise self.fail(f"{at}.checks", why)
        if sum(not c.is_call for c in checks) > 1:
            raise self.fail(f"{at}.checks", "has more than one `answer` check: a reply has one answer")
        listed = schema.get("required")
        required = [r for r in listed if isinstance(r, str)] if isinstance(listed, list) else []
        drawn = list(dict.fromkeys([*required, *sorted(named), *given]))
        task = RubricTask(i, tool, goal, checks, schema, {}, given, drawn, required)
        try:
            task.shape = normalized(schema)
            task.draw(random.Random(f"rubric:{i}"))
        except GenerationError as exc:
            task.problem = f"its arguments cannot be drawn: {exc}"
        except RecursionError:
            task.problem = "its arguments cannot be drawn: the input schema nests too deep"
        return task

    def tool(self, name: Any, at: str) -> str:
        if not isinstance(name, str):
            raise self.fail(at, f"must be a tool's name, got {_kind(name)}")
        if name not in self.tools:
            raise self.fail(at, f"the server lists no tool {name!r} (it lists: {', '.join(self.tools) or 'none'})")
        return name

    def template(self, text: str, at: str, props: dict[str, Any], tool: str) -> list[str]:
        """The arguments ``text`` names; a name the tool does not take, or a lone brace, is refused."""
        names = []
        for match in FIELD.finditer(text):
            token = match.group(0)
            if token in ("{{", "}}"):
                continue
            if match.group(1) is None:
                raise self.fail(at, f"a lone {token!r} in {text[:100]!r}: write {token * 2} for a brace")
            name = match.group(1)
            if name not in props:
                raise self.fail(at, f"{{{name}}} names no argument of {tool} (it takes: {', '.join(props) or 'none'})")
            names.append(name)
        return names

    def templates(self, data: Any, at: str, props: dict[str, Any], tool: str, depth: int = 0) -> set[str]:
        """The arguments named in every text of a JSON value (keys are not templates)."""
        if depth > 32:
            raise self.fail(at, "nests deeper than 32")
        if isinstance(data, str):
            return set(self.template(data, at, props, tool))
        if isinstance(data, list):
            return set().union(*(self.templates(v, at, props, tool, depth + 1) for v in data)) if data else set()
        if isinstance(data, dict):
            if not all(isinstance(k, str) for k in data):
                raise self.fail(at, "a mapping's keys must be texts")
            return (
                set().union(*(self.templates(v, at, props, tool, depth + 1) for v in data.values())) if data else set()
            )
        if (
            data is None
            or isinstance(data, (bool, int))
            or (isinstance(data, float) and data == data and abs(data) != float("inf"))
        ):
            return set()
        raise self.fail(at, f"{_kind(data)} is not a JSON value")

    def given(
        self, data: Any, at: str, props: dict[str, Any], schema: dict[str, Any], tool: str
    ) -> dict[str, list[Any]]:
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise self.fail(at, f"must map argument names to {{one_of: [...]}} or {{value: ...}}, got {_kind(data)}")
        out = {}
        for name, spec in data.items():
            where = f"{at}.{name}"
            if name not in props:
                raise self.fail(at, f"{name!r} is no argument of {tool} (it takes: {', '.join(props) or 'none'})")
            spec = self.mapping(spec, where, ("one_of", "value"))
            if len(spec) != 1:
                raise self.fail(where, "give exactly one of one_of (a list of values to draw from) or value")
            self.templates(spec, where, {}, tool)  # JSON values, no templates
            values = spec["one_of"] if "one_of" in spec else [spec["value"]]
            if not isinstance(values, list) or not values:
                raise self.fail(f"{where}.one_of", "must be a list of at least one value")
            for v in values:
                sub = props[name]
                defs = {k: schema[k] for k in ("$defs", "definitions") if k in schema}
                problem = invalid(v, {**defs, **sub} if isinstance(sub, dict) else sub, name)
                if problem:
                    raise self.fail(where, f"{json.dumps(v)[:100]} does not fit the argument's schema: {problem}")
            out[name] = values
        return out

    def check(self, data: Any, at: str, props: dict[str, Any], tool: str) -> tuple[Check, set[str]]:
        if isinstance(data, dict) and "answer" in data:
            data = self.mapping(data, at, ("answer",), ("answer",))
            spec = self.mapping(data["answer"], f"{at}.answer", ("equals",), ("equals",))
            names = self.templates(spec["equals"], f"{at}.answer.equals", props, tool)
            return Check(at, answer=spec["equals"]), names
        data = self.mapping(data, at, ("call", "expect"), ("call", "expect"))
        call = self.mapping(data["call"], f"{at}.call", ("tool", "arguments"), ("tool",))
        called = self.tool(call["tool"], f"{at}.call.tool")
        marked = writes(self.tools[called])
        if marked:
            why = (f"the server marks {called} {marked}: a check must only read (it runs on a fresh server before the "
                   "task's call when synth tries the task, and on every episode's server after the reply)")  # fmt: skip
            raise self.fail(f"{at}.call.tool", why)
        arguments = call.get("arguments", {})
        if not isinstance(arguments, dict):
            raise self.fail(
                f"{at}.call.arguments", f"must be a mapping of the arguments of {called}, got {_kind(arguments)}"
            )
        takes = self.tools[called]["inputSchema"].get("properties", {})
        takes = takes if isinstance(takes, dict) else {}
        unknown = [a for a in arguments if a not in takes]
        if unknown:
            why = f"{unknown[0]!r} is no argument of {called} (it takes: {', '.join(takes) or 'none'})"
            raise self.fail(f"{at}.call.arguments", why)
        names = self.templates(arguments, f"{at}.call.arguments", props, tool)
        expect = self.mapping(data["expect"], f"{at}.expect", EXPECT_KEYS)
        if not expect:
            raise self.fail(f"{at}.expect", f"names nothing to expect (one or more of {', '.join(EXPECT_KEYS)})")
        for key in ("contains", "not_contains"):
            if key in expect:
                if not isinstance(expect[key], str) or not expect[key]:
                    raise self.fail(f"{at}.expect.{key}", "must be a text that is not empty")
                names |= set(self.template(expect[key], f"{at}.expect.{key}", props, tool))
        if "equals" in expect:
            names |= self.templates(expect["equals"], f"{at}.expect.equals", props, tool)
        if "is_error" in expect and not isinstance(expect["is_error"], bool):
            raise self.fail(f"{at}.expect.is_error", "must be true or false")
        return Check(at, tool=called, arguments=arguments, expect=expect), names


def _kind(data: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a text", type(None): "nothing"}.get(
        type(data), type(data).__name__
    )


def _fields(text: str) -> list[str]:
    return [m.group(1) for m in FIELD.finditer(text) if m.group(1) is not None]


def fill(text: str, args: dict[str, Any]) -> str:
    """``text`` with each ``{name}`` replaced by the argument's text (JSON for what is no text)."""

    def one(match: re.Match[str]) -> str:
        token = match.group(0)
        if token in ("{{", "}}"):
            return token[0]
        return answer_text(args[match.group(1)])

    return FIELD.sub(one, text)


def render(template: Any, args: dict[str, Any]) -> Any:
    """A JSON value with its templates filled: a text that is one ``{name}`` whole becomes the
    argument itself (a number stays a number), any other text is filled as :func:`fill` does."""
    if isinstance(template, str):
        whole = WHOLE.fullmatch(template)
        return args[whole.group(1)] if whole else fill(template, args)
    if isinstance(template, list):
        return [render(v, args) for v in template]
    if isinstance(template, dict):
        return {k: render(v, args) for k, v in template.items()}
    return template


def expectation_problem(expect: dict[str, Any], result: CallResult, args: dict[str, Any]) -> str | None:
    """Why ``result`` does not meet ``expect``, or ``None``: every key must hold, and the call
    must not be an error unless ``is_error: true`` says it must."""
    want_error = expect.get("is_error", False)
    if result.is_error != want_error:
        said = result.text[:200]
        outcome, wanted = ("failed", "success") if result.is_error else ("succeeded", "an error")
        return f"the call {outcome} ({said!r}); the check expects {wanted}"
    if "contains" in expect and fill(expect["contains"], args) not in result.text:
        return f"the result does not contain {fill(expect['contains'], args)[:200]!r} (it is {result.text[:200]!r})"
    if "not_contains" in expect and fill(expect["not_contains"], args) in result.text:
        return f"the result contains {fill(expect['not_contains'], args)[:200]!r}"
    if "equals" in expect:
        got, want = canonical_json(result.json_value()), canonical_json(render(expect["equals"], args))
        if got != want:
            return f"the result is {got[:200]}, not {want[:200]}"
    return None


def run_checks(server: Server, task: RubricTask, args: dict[str, Any], timeout: float) -> str | None:
    """Run ``task``'s call checks on ``server``: the first failure, or ``None``. A server that
    fails raises :class:`ServerError`."""
    for n, check in enumerate(c for c in task.checks if c.is_call):
        call_args = render(check.arguments, args)
        try:
            result = server.call(check.tool, call_args, timeout)
        except ServerError as exc:
            raise ServerError(f"check {n + 1} ({check.tool}): {exc}") from None
        problem = expectation_problem(check.expect, result, args)
        if problem:
            return f"check {n + 1} ({check.tool}): {problem}"
    return None


def answer_problem(task: RubricTask, args: dict[str, Any], completion: str) -> Score | None:
    """The zero score of a reply whose answer is not the answer check's, or ``None``."""
    if not task.has_answer:
        return None
    answer, refusal = final_answer(completion)
    if refusal is not None:
        return refusal
    want = render(task.answer, args)
    if not _same_answer(answer, want):
        return Score.zero(Status.WRONG, f"the answer {answer[:80]!r} is not {answer_text(want)[:80]!r}")
    return None


# ---- what synth checks: listing the tools, reading the rubric, probing its tasks --------------


@dataclass
class Plan:
    """What ``ludus synth --mcp`` found: the command, the server, its tools, the rubric."""

    argv: list[str]
    cwd: str
    server: dict[str, str]
    tools: list[dict[str, Any]]
    left_out: list[tuple[str, str]]
    rubric: Rubric
    examples: dict[int, str] = field(default_factory=dict)  # a task's goal, drawn, by its index

    def report(self, env_name: str, module: str) -> str:
        from ludus.envs.synth.package import printable

        rubric = self.rubric
        server = self.server.get("name") or "MCP server"
        version = f" {self.server['version']}" if self.server.get("version") else ""
        tasked = {t.tool for t in rubric.tasks}
        checking = {c.tool for t in rubric.tasks for c in t.checks if c.tool}
        lines = [
            f"# {env_name}: the {server} MCP server", "",
            f"Environment `{env_name}` (`{module}.Env`): {len(self.tools)} tool(s) of the MCP server `{server}`{version}, "
            f"started for each episode as `{' '.join(self.argv)}` in `{self.cwd}`; {len(rubric.tasks)} kind(s) of task "
            "from the rubric.", "",
            "Grading is the rubric's: the state lives in the server, so this is the weaker guarantee (docs/synth.md, "
            "\"From an MCP server\"). State the server keeps outside its process (a file, a database) is yours to reset.",
            "", "## Tools", "",
        ]  # fmt: skip
        for tool in self.tools:
            name = tool["name"]
            roles = [f"tasks ({sum(t.tool == name for t in rubric.tasks)})"] if name in tasked else []
            roles += ["checks"] if name in checking else []
            summary = (tool["description"].strip().splitlines() or [""])[0][:120]
            lines.append(f"- `{name}`: {summary} — {', '.join(roles) or 'no task: the rubric asks none'}")
        lines += ["", "## Tasks", ""]
        for task in rubric.tasks:
            kinds = ", ".join(f"{c.tool} ({', '.join(c.expect)})" if c.is_call else "the answer" for c in task.checks)
            lines.append(f"- {task.where}: {task.goal!r}; checks: {kinds}")
            if task.index in self.examples:
                lines.append(f"  - for example: {self.examples[task.index]!r}")
        lines += ["", "## Left out", ""]
        left = [*self.left_out, *((t.where, t.problem or "") for t in rubric.left_out)]
        lines += [f"- {where}: {why}" for where, why in left[:MAX_LEFT_OUT_SHOWN]] or [
            "Nothing: every tool is offered, every task kept."
        ]
        if len(left) > MAX_LEFT_OUT_SHOWN:
            lines.append(f"- and {len(left) - MAX_LEFT_OUT_SHOWN} more")
        lines += ["", "## Notes", ""]
        lines += [f"- {where}: {why}" for where, why in rubric.notes] or ["Nothing."]
        return "\n".join(printable(line) for line in lines) + "\n"


def resolve_command(command: str, cwd: Path) -> list[str]:
    """``command`` split as a shell would (without running one), with the program found on
    ``PATH`` now (the environment runs the very server synth tried, whatever ``PATH`` it is
    given later) and relative paths made absolute (arguments naming a file or folder that exists)."""
    import shlex
    import shutil

    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ValueError(f"--mcp {command!r} cannot be split into words: {exc}") from None
    if not argv:
        raise ValueError("--mcp needs a command that starts the MCP server (e.g. --mcp 'python my_server.py')")
    program = argv[0] if os.sep in argv[0] else shutil.which(argv[0])
    if program is None:
        raise ValueError(f"--mcp: no program {argv[0]!r} on PATH")
    out = [str((cwd / program).absolute())]
    for word in argv[1:]:
        path = cwd / word
        if not word.startswith("-") and not os.path.isabs(word) and path.exists():
            word = str(path.resolve())
        out.append(word)
    return out


def plan(argv: list[str], cwd: Path, rubric_text: bytes, rubric_name: str, timeout: float = START_TIMEOUT) -> Plan:
    """List the server's tools, read the rubric against them and probe each task on a server of
    its own: the checks must fail before anything is done (else they would pay doing nothing)
    and pass after the task's own call (else no policy could earn them). Raises
    :class:`RubricError` (or ``ValueError``) with the reason."""
    loop = _Loop()
    pids: dict[int, str] = {}
    try:
        server = Server(loop, argv, str(cwd), start_timeout=timeout, call_timeout=timeout, pids=pids)
        try:
            listed = server.start()
        except ServerError as exc:
            raise ValueError(f"cannot list the MCP server's tools: {exc}") from None
        finally:
            server.close()
        tools, left_out = snapshot(listed)
        if not tools:
            reasons = "; ".join(f"{w}: {y}" for w, y in left_out[:5]) or "it lists none"
            raise ValueError(f"the MCP server offers no tool a policy can be given ({reasons})")
        rubric = read_rubric(rubric_text, tools, rubric_name)
        if not rubric.tasks:
            reasons = "; ".join(f"{t.where}: {t.problem}" for t in rubric.left_out[:3])
            raise RubricError(f"{rubric_name}: no task can be made ({reasons})")
        found = Plan(argv, str(cwd), server.info, tools, left_out, rubric)
        for task in rubric.tasks:
            found.examples[task.index] = _probe(loop, found, task, rubric_name, timeout, pids)
        return found
    finally:
        _kill_groups(pids)
        loop.close()


def _probe(loop: _Loop, found: Plan, task: RubricTask, rubric_name: str, timeout: float, pids: dict[int, str]) -> str:
    """One task of ``task``'s kind, played as the floor (nothing) and the oracle on one server;
    the floor is played for ``PROBE_DRAWS`` draws of its arguments (checks only read): a check
    that passes on a fresh server for some arguments only (a count of 0, a default value) would
    pay doing nothing on those tasks."""
    from ludus.envs.synth.package import printable

    args = task.draw(random.Random(f"probe:{task.index}"))
    draws = {canonical_json(args): args}
    for k in range(1, PROBE_DRAWS):
        with contextlib.suppress(GenerationError):
            other = task.draw(random.Random(f"probe:{task.index}:{k}"))
            draws.setdefault(canonical_json(other), other)
    shown = printable(json.dumps(args, ensure_ascii=False)[:300])
    where = f"{rubric_name}: {task.where}"
    server = Server(loop, found.argv, found.cwd, start_timeout=timeout, call_timeout=timeout, pids=pids)
    try:
        try:
            server.start()
            for drawn in draws.values():
                if run_checks(server, task, drawn, timeout) is None:
                    seen = printable(json.dumps(drawn, ensure_ascii=False)[:300])
                    raise RubricError(f"{where}: its checks pass before anything is done (arguments {seen}): they would "
                                      "pay a policy that does nothing; check for what the task's call changes")  # fmt: skip
            result = server.call(task.tool, args, timeout)
            if result.is_error:
                raise RubricError(printable(f"{where}: the task's own call {task.tool}({shown}) fails on the server: "
                                            f"{result.text[:300]!r}"))  # fmt: skip
            problem = run_checks(server, task, args, timeout)
        except ServerError as exc:
            raise ValueError(f"{where}: the server failed while the task was tried: {exc}") from None
        if problem:
            raise RubricError(printable(f"{where}: after the task's call {task.tool}({shown}), {problem}"))
    finally:
        server.close()
    return fill(task.goal, args)


# ---- the environment -----------------------------------------------------------------------------


@dataclass
class Package:
    """A generated package's files, read and checked: ``server.json``, ``tools.json``, ``rubric.yaml``."""

    argv: list[str]
    cwd: str | None
    server: dict[str, str]
    tools: list[dict[str, Any]]
    rubric: Rubric


@functools.lru_cache(maxsize=16)
def load_package(folder: str) -> Package:
    base = Path(folder)
    server = json.loads((base / "server.json").read_text(encoding="utf-8"))
    listing = json.loads((base / "tools.json").read_text(encoding="utf-8"))
    argv = server.get("command")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError(f"{base / 'server.json'}: 'command' must be a list of words (the server's argv)")
    tools = listing["tools"]
    rubric = read_rubric((base / "rubric.yaml").read_bytes(), tools, str(base / "rubric.yaml"))
    if not rubric.tasks:
        raise RubricError(f"{base / 'rubric.yaml'}: no task can be made")
    return Package(argv, server.get("cwd"), listing.get("server", {}), tools, rubric)


class McpTasks:
    """An endless, seeded task source: task ``i`` draws one rubric task and its arguments from
    ``Random(f"{env}:{seed}:{split}:{i}:{attempt}")``; train and eval are disjoint by the goal's text."""

    size: int | None = None
    MAX_TRIES = 200

    def __init__(self, env: McpEnv, seed: int, split: Split, eval_fraction: float):
        check_split(split, eval_fraction)
        self.env, self.seed, self.split, self.eval_fraction = env, seed, split, eval_fraction

    def get(self, index: int) -> Task:
        env = self.env
        for attempt in range(self.MAX_TRIES):
            rng = random.Random(f"{env.name}:{self.seed}:{self.split}:{index}:{attempt}")
            spec = rng.choice(env.rubric.tasks)
            try:
                args = spec.draw(rng)
            except GenerationError:
                continue
            goal = fill(spec.goal, args)
            if in_eval_bucket(f"{env.name}:{goal}", self.eval_fraction) != (self.split == "eval"):
                continue
            return Task(
                id=f"{env.name}/{self.split}/{self.seed}/{index}",
                prompt=env.instructions(spec, goal),
                info={"task": spec.index, "arguments": args},
                source=env.name,
            )
        raise RuntimeError(f"{env.name} found no {self.split} task in {self.MAX_TRIES} tries (too few distinct goals?)")


class McpEnv(ToolEnv):
    """The policy works a user's MCP server through its tools; the rubric grades. A generated
    package subclasses it with ``name`` and ``folder`` (where ``server.json``, ``tools.json`` and
    ``rubric.yaml`` are). Each episode starts the server afresh; ``close`` ends it."""

    folder: ClassVar[Path]
    max_turns = 12
    max_tool_calls = 20
    reward_range = (0.0, 1.0)
    requires: ClassVar[dict[str, str]] = {"mcp": "pip install 'ludus[synth]'"}
    start_timeout: float = START_TIMEOUT
    call_timeout: float = CALL_TIMEOUT

    def __init__(
        self,
        tasks: Any = None,
        *,
        seed: int = 0,
        eval_fraction: float = 0.2,
        start_timeout: float | None = None,
        call_timeout: float | None = None,
    ):
        super().__init__(tasks)
        self.package = load_package(str(self.folder))
        self.rubric = self.package.rubric
        self.seed, self.eval_fraction = seed, eval_fraction
        self.start_timeout = self.start_timeout if start_timeout is None else float(start_timeout)
        self.call_timeout = self.call_timeout if call_timeout is None else float(call_timeout)
        self.server: Server | None = None
        self._loop: _Loop | None = None
        self._pids: dict[int, str] = {}
        self._finalizer = weakref.finalize(self, _kill_groups, self._pids)
        self._specs = [tool_spec(t) for t in self.package.tools]
        self._schemas = {t["name"]: canonical_json(t["inputSchema"]) for t in self.package.tools}

    def default_tasks(self, split: Split = "train") -> McpTasks:
        return McpTasks(self, self.seed, split, self.eval_fraction)

    def instructions(self, spec: RubricTask, goal: str) -> str:
        name = self.package.server.get("name") or "MCP"
        intro = self.rubric.instructions or f"You work the {name} server through its tools."
        if spec.has_answer and "<answer>" not in goal:
            return (
                f"{intro} {goal} When you are done, reply without a tool call, giving the answer as <answer>…</answer>."
            )
        return f"{intro} {goal} When you are done, reply without a tool call."

    def _spec(self, task: Task) -> RubricTask:
        index = task.info["task"]
        return next(t for t in self.rubric.tasks if t.index == index)

    # -- the server of the episode --
    def begin(self, task: Task) -> Observation:
        """The episode's server is launched in the background (it boots while the policy writes
        its first turn) and waited for at its first call. A server no call reached yet is still
        in the state it started in: it serves the next episode instead of a new one."""
        if self.server is not None and (self.server.used or self.server.broken):
            self._end_server()
        if self.server is None:
            if self._loop is None:
                self._loop = _Loop()
            self.server = Server(
                self._loop,
                self.package.argv,
                self.package.cwd,
                start_timeout=self.start_timeout,
                call_timeout=self.call_timeout,
                pids=self._pids,
            )
            self.server.launch()
        return Observation([Message("user", task.prompt)], self.tools())

    def _live(self) -> Server:
        """The episode's server, started, its tools compared with the snapshot; a server that
        cannot serve is ended and :class:`ServerError` says why."""
        server = self.server
        if server is None:
            raise ServerError("the episode's MCP server is not running")
        if not server.checked:
            try:
                self._compare(server.ready())
            except ServerError:
                self._end_server()
                raise
            server.checked = True
        return server

    def _compare(self, listed: list[dict[str, Any]]) -> None:
        """The server must still list, with the same arguments, every tool the tasks and checks use
        (only those are read: a tool left out for its schema may still be listed)."""
        used = set(self.rubric.tools_used)
        live = {}
        for tool in listed:
            if tool["name"] in used and tool["name"] not in live:
                try:
                    live[tool["name"]] = None if _too_long(tool["inputSchema"]) else canonical_json(tool["inputSchema"])
                except (RecursionError, ValueError, TypeError):
                    live[tool["name"]] = None
        for name in self.rubric.tools_used:
            if name not in live:
                raise ServerError(f"the MCP server no longer lists the tool {name!r} this environment's tasks use "
                                  "(tools.json, written by ludus synth, has it): run ludus synth again")  # fmt: skip
            if live[name] != self._schemas[name]:
                raise ServerError(f"the MCP server's tool {name!r} takes other arguments than when ludus synth listed "
                                  "it (tools.json): run ludus synth again")  # fmt: skip

    def _end_server(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            server.close()

    def tool_functions(self) -> list[Tool]:
        return [ServerTool(spec, self._forward) for spec in self._specs]

    def _forward(self, name: str, arguments: dict[str, Any]) -> str:
        try:
            result = self._live().call(name, arguments, self.call_timeout)
        except ServerError:  # the episode ends as infra_error; the server goes with it
            self._end_server()
            raise
        if result.is_error:
            raise ToolError(result.reply() or "the tool failed")
        return result.reply()

    def score(self, task: Task, completion: str) -> Score:
        """Deny by default: the answer check (if any), then every call check on the episode's
        server; a server that fails while checking is ``infra_error``, never a reward."""
        spec, args = self._spec(task), task.info["arguments"]
        try:
            refusal = answer_problem(spec, args, completion)
            if refusal is not None:
                return refusal
            try:
                problem = run_checks(self._live(), spec, args, self.call_timeout)
            except ServerError as exc:
                return Score.zero(Status.INFRA_ERROR, str(exc))
            if problem:
                return Score.zero(Status.WRONG, problem)
            return Score(1.0, Status.CORRECT, f"every check of the rubric passes ({len(spec.checks)})")
        finally:
            if self.server is not None and self.server.used:  # one no call reached serves the next episode
                self._end_server()

    def close(self) -> None:
        self._end_server()
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.close()
        _kill_groups(self._pids)

    # -- the oracle --
    def reference_actions(self, task: Task) -> list[Message] | None:
        """The task's tool with its drawn arguments, then the reply (the answer when a check asks one)."""
        spec, args = self._spec(task), task.info["arguments"]
        final = f"<answer>{answer_text(render(spec.answer, args))}</answer>" if spec.has_answer else "Done."
        return [Message("assistant", "", [ToolCall(spec.tool, dict(args), id="call_0")]), Message("assistant", final)]

    def reference_example(self, task: Task, seed: int) -> tuple[list[Message], str] | None:
        return oracle_turn(self, task, seed)

    def cheats(self, task: Task) -> dict[str, list[Message]]:
        """Replies that must earn nothing: claiming success without a call, and the answer
        (when a check asks one) without the call."""
        out = {"claims-done": [Message("assistant", "Done: the task is complete.")]}
        spec = self._spec(task)
        if spec.has_answer:
            answer = answer_text(render(spec.answer, task.info["arguments"]))
            out["answer-without-calls"] = [Message("assistant", f"<answer>{answer}</answer>")]
        return out
