"""``ludus check ENV``: the environment contract check; exits 1 when an invariant is broken."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ludus.cli.common import CommandParser


def add_parser(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser("check", help="run the contract check on an environment")
    p.add_argument("env", help="environment name (see `ludus envs`)")
    p.add_argument("--env-args", help="JSON object of constructor arguments, e.g. '{\"digits\": 3}'")
    p.add_argument(
        "--env-server",
        metavar="URL",
        help="check the environment as an env server serves it (`ludus serve-env`; token from $LUDUS_ENV_TOKEN)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import json

    from ludus.core.check import check_env, check_env_by_name, format_report

    kwargs = json.loads(args.env_args) if args.env_args else {}
    if args.env_server:
        from ludus.cli.common import env_factory

        factory, _, _ = env_factory(args.env, kwargs, [args.env_server])
        report = check_env(factory, name=f"{args.env} at {args.env_server}")
    else:
        report = check_env_by_name(args.env, **kwargs)
    print(format_report(report))
    return 0 if report.ok else 1
