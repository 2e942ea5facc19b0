"""The ``ludus`` command: ``train``, ``eval``, ``warmstart``, ``train-rm``, ``verify``, ``serve-model``, ``serve-env``,
``proxy``, ``envs``, ``check``, ``doctor``, ``synth``.

Every error a user can cause (a bad config value, an unknown environment, a malformed task
file) ends in one plain sentence on stderr and exit code 2, never a traceback.

Each command is one module of this package with ``add_parser`` and ``run``. A module imports at
its top only the standard library and its neighbours here, and what its command needs (torch,
sympy, rich, an environment family) inside ``run``, so that ``ludus --help`` costs little more
than starting Python (benchmarks/cli_startup.py).
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence

from ludus.cli.common import CommandParser

COMMANDS = (
    "train",
    "warmstart",
    "train_rm",
    "verify",
    "serve",
    "serve_env",
    "proxy",
    "doctor",
    "eval",
    "rescore",
    "view",
    "export",
    "envs",
    "check",
    "synth",
)  # modules, in --help order


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ludus", description="Reinforcement learning with verifiable rewards.")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    for command in COMMANDS:
        importlib.import_module(f"ludus.cli.{command}").add_parser(subparsers)
    return parser


def user_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a user can cause. ``main`` calls this only once an exception reaches it,
    so the registry behind two of them is not imported on the way in."""
    from ludus.core.env import MissingDependency
    from ludus.core.registry import EnvLoadError, UnknownEnvError
    from ludus.policies.base import PolicyError  # a model server that is down or refuses: the user's to start

    return (
        UnknownEnvError,
        EnvLoadError,
        MissingDependency,
        PolicyError,
        ValueError,
        FileNotFoundError,
        FileExistsError,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except user_errors() as exc:  # evaluated only when an exception arrives
        from rich.markup import escape

        from ludus.cli.common import console

        console().print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        return 2
