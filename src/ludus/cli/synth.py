"""``ludus synth``: a tool environment package from an OpenAPI document, or from an MCP server
and a rubric (docs/synth.md)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ludus.cli.common import CommandParser


def add_parser(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser(
        "synth",
        help="make a tool environment package from an OpenAPI 3.0/3.1 document (JSON or YAML), "
        "or from an MCP server and a rubric (--mcp)",
    )
    p.add_argument("spec", type=Path, nargs="?", help="the OpenAPI document (or --mcp instead)")
    p.add_argument(
        "--mcp",
        metavar="COMMAND",
        help="the command that starts an MCP server over stdio, quoted as one argument ('python my_server.py')",
    )
    p.add_argument("--rubric", type=Path, help="with --mcp: the YAML rubric saying which tools get tasks and how to grade them")  # fmt: skip
    p.add_argument("-o", "--out", type=Path, required=True, help="the folder to write the package to")
    p.add_argument("--name", help="the environment's name (default: from the document's title or the server's name)")
    p.add_argument("--force", action="store_true", help="replace a package ludus synth wrote there before")
    p.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="with --mcp: seconds the server has to start and to answer each call while synth tries it (default 30)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ludus.cli.common import console
    from ludus.envs.synth.package import synthesize, synthesize_mcp

    if (args.spec is None) == (args.mcp is None):
        raise ValueError("give either an OpenAPI document (SPEC) or --mcp COMMAND, not both and not neither")
    if args.mcp is not None and args.rubric is None:
        raise ValueError("--mcp needs --rubric RUBRIC.yaml: the tasks and their checks (docs/synth.md, 'From an MCP server')")  # fmt: skip
    if args.spec is not None and args.rubric is not None:
        raise ValueError("--rubric goes with --mcp: an OpenAPI document's tasks and grading come from the document")
    if args.mcp is not None:
        made = synthesize_mcp(args.mcp, args.rubric, args.out, name=args.name, force=args.force, timeout=args.timeout)
    else:  # errors are ValueErrors: user errors
        made = synthesize(args.spec, args.out, name=args.name, force=args.force)
    console().print(made.report(), markup=False, highlight=False)
    console().print(
        f"wrote {made.folder}: install it with `pip install -e {made.folder}`, then "
        f"`ludus check {made.env_name} --redteam` and `ludus train --env {made.env_name}`",
        markup=False,
        highlight=False,
    )
    return 0
