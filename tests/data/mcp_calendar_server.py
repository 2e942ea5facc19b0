"""An MCP server over stdio for tests/test_synth_mcp.py and docs/synth.md: a calendar kept in
memory, so each process starts empty, written with the SDK's MCPServer.

Flags (read from the command line and from $MCP_CALENDAR_FLAGS, so that a test can change a
packaged command's behaviour) make it misbehave the ways a real server can:

    --pid-file PATH     append this process's id (and its child's) to PATH
    --child             start a child process (``sleep``) in the server's process group
    --exit-at-start     say why on stderr and exit 3 before speaking MCP
    --hang-at-start     never read stdin
    --junk              print a line that is not JSON-RPC to stdout first
    --hang-on TOOL      a call of TOOL never returns
    --crash-on TOOL     a call of TOOL kills the server
    --without TOOL      do not list TOOL (a server upgraded since `ludus synth` ran)
    --name NAME         the name the server gives itself (default: calendar)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

FLAGS = sys.argv[1:] + os.environ.get("MCP_CALENDAR_FLAGS", "").split()


def option(name: str) -> list[str]:
    return [FLAGS[i + 1] for i, flag in enumerate(FLAGS[:-1]) if flag == name]


def record(pid: int) -> None:
    for path in option("--pid-file"):
        with open(path, "a") as out:
            out.write(f"{pid}\n")


record(os.getpid())
if "--child" in FLAGS:
    record(subprocess.Popen(["sleep", "600"]).pid)
if "--exit-at-start" in FLAGS:
    print("calendar: cannot open the calendar file", file=sys.stderr, flush=True)
    sys.exit(3)
if "--hang-at-start" in FLAGS:
    time.sleep(3600)
if "--junk" in FLAGS:
    print("Calendar server 1.0 starting", flush=True)

import datetime  # noqa: E402 - after the flags: a server that fails at start fails fast
from typing import Literal  # noqa: E402

from mcp.server.mcpserver import MCPServer  # noqa: E402
from mcp.server.mcpserver.exceptions import ToolError  # noqa: E402

mcp = MCPServer((option("--name") or ["calendar"])[0])
EVENTS: list[dict] = []


def misbehave(tool: str) -> None:
    if tool in option("--hang-on"):
        time.sleep(3600)
    if tool in option("--crash-on"):
        os._exit(9)


def listed(tool):  # noqa: ANN001, ANN201
    return tool if tool.__name__ in option("--without") else mcp.tool()(tool)


@listed
def add_event(title: str, date: datetime.date, kind: Literal["meeting", "party", "trip"] = "meeting") -> str:
    """Add an event to the calendar.

    Args:
        title: what the event is called.
        date: the day it takes place (YYYY-MM-DD).
        kind: meeting, party or trip.
    """
    misbehave("add_event")
    event = {"id": len(EVENTS) + 1, "title": title, "date": date.isoformat(), "kind": kind}
    EVENTS.append(event)
    return f"added event {event['id']}"


@listed
def find_events(date: datetime.date) -> list[dict]:
    """The events on one day.

    Args:
        date: the day (YYYY-MM-DD).
    """
    misbehave("find_events")
    return [e for e in EVENTS if e["date"] == date.isoformat()]


@listed
def delete_event(event_id: int) -> str:
    """Remove an event.

    Args:
        event_id: the id add_event gave it.
    """
    for event in EVENTS:
        if event["id"] == event_id:
            EVENTS.remove(event)
            return f"deleted event {event_id}"
    raise ToolError(f"no event {event_id}")


if __name__ == "__main__":
    mcp.run()
