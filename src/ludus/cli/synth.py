"""``ludus synth``: a tool environment package from an OpenAPI document (docs/synth.md)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ludus.cli.common import CommandParser


def add_parser(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser(
        "synth", help="make a tool environment package from an OpenAPI 3.0/3.1 document (JSON or YAML)"
    )
    p.add_argument("spec", type=Path, help="the OpenAPI document")
    p.add_argument("-o", "--out", type=Path, required=True, help="the folder to write the package to")
    p.add_argument("--name", help="the environment's name (default: from the document's title)")
    p.add_argument("--force", action="store_true", help="replace a package ludus synth wrote there before")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ludus.cli.common import console
    from ludus.envs.synth.package import synthesize

    made = synthesize(args.spec, args.out, name=args.name, force=args.force)  # errors are ValueErrors: user errors
    console().print(made.report(), markup=False, highlight=False)
    console().print(
        f"wrote {made.folder}: install it with `pip install -e {made.folder}`, then "
        f"`ludus check {made.env_name} --redteam` and `ludus train --env {made.env_name}`",
        markup=False,
        highlight=False,
    )
    return 0
