"""``ludus check ENV``: the environment contract check; exits 1 when an invariant is broken.

``--redteam`` adds the red-team report card (``ludus.certify.redteam``): the oracle, the floor,
the generic cheats that apply and the environment's own; exits 1 when any line fails.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ludus.cli.common import ENV_ARGS_HELP

if TYPE_CHECKING:
    from ludus.cli.common import CommandParser


def add_parser(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser(
        "check", help="run the contract check (and with --redteam, the red-team) on an environment"
    )
    p.add_argument("env", help="environment name (see `ludus envs`)")
    p.add_argument("--env-args", help=ENV_ARGS_HELP)
    p.add_argument(
        "--env-server",
        metavar="URL",
        help="check the environment as an env server serves it (`ludus serve-env`; token from $LUDUS_ENV_TOKEN)",
    )
    p.add_argument(
        "--redteam",
        action="store_true",
        help="also play the oracle, the floor and a library of cheats (early exits, rigged __eq__, test tampering, "
        "pass markers, hedged answers, hidden files, …); every cheat must score 0",
    )
    p.add_argument("--tasks", type=int, default=5, metavar="N", help="tasks the red-team samples (default 5)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="which tasks the red-team samples (default 0)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ludus.certify.contract import check_env, format_report
    from ludus.cli.common import mapping_flag

    kwargs = mapping_flag("--env-args", args.env_args)
    if args.tasks < 1:
        raise ValueError(f"--tasks must be at least 1, got {args.tasks}")
    if args.env_server:
        from ludus.rollout.placement import EnvPlacement

        factory, first = EnvPlacement(env_servers=(args.env_server,)).env_factory(args.env, kwargs or None)
        first.close()
        name = f"{args.env} at {args.env_server}"
    else:
        from ludus.core import registry

        try:
            factory = registry.factory(args.env, kwargs)
        except registry.EnvLoadError as exc:
            from ludus.certify.contract import CheckReport, CheckResult

            print(format_report(CheckReport(args.env, [CheckResult("load", False, str(exc))])))
            return 1
        name = args.env
    report = check_env(factory, name=name)
    print(format_report(report))
    ok = report.ok
    if args.redteam:
        from ludus.certify.redteam import format_redteam, redteam_env

        card = redteam_env(factory, name=name, tasks=args.tasks, seed=args.seed)
        print()
        print(format_redteam(card))
        ok = ok and card.ok
    return 0 if ok else 1
