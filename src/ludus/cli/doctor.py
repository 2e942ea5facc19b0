"""``ludus doctor``: which sandbox isolation this machine gives, and why; exits 1 without bubblewrap."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ludus.cli.common import CommandParser


def add_parser(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser("doctor", help="report the sandbox isolation and other facilities of this machine")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from rich.table import Table

    from ludus.cli.common import console
    from ludus.sandbox import Sandbox, detect
    from ludus.sandbox.backend import process_limit_note

    found = detect()
    table = Table("check", "result", title="ludus doctor", show_lines=False)
    table.add_row("python", f"{sys.version.split()[0]} at {sys.executable}")
    table.add_row("bubblewrap", f"{found.bwrap} ({found.version})" if found.bwrap else "[red]not installed[/]")
    colour = "green" if found.backend == "bwrap" else "red"
    table.add_row("sandbox backend", f"[{colour}]{found.backend}[/]: {found.reason}")
    if found.backend == "bwrap":
        with Sandbox(workers=1, backend_name="bwrap") as box:
            level, detail = box.level, ""
            probe = box.run("import socket; print(socket.gethostname())")
        if level != "namespaces":
            detail = " — executions share their worker's namespaces (the worker wipes /tmp between them)"
        table.add_row("isolation per execution", f"{level}{detail}")
        table.add_row("sandbox smoke test", "ok" if probe.ok else f"[red]{probe.status}: {probe.reason}[/]")
    table.add_row("process limit", process_limit_note())
    try:
        import torch

        table.add_row("torch", f"{torch.__version__}, {torch.get_num_threads()} threads")
    except ImportError:
        table.add_row("torch", "[red]not installed[/]")
    console().print(table)
    return 0 if found.backend == "bwrap" else 1
