"""``ludus view``: a local web page over run folders — curves, every trajectory, two runs side by side
(needs ``ludus[serve]``; docs/view.md)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ludus.cli.common import CommandParser

DEFAULT_PORT = 8300


def add_parser(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser(
        "view", help="a local web page over run folders: metric curves, every trajectory, two runs side by side"
    )
    p.add_argument(
        "runs",
        nargs="+",
        metavar="RUN_DIR",
        help="run folders: of ludus train (metrics.jsonl, samples.jsonl), ludus eval (trajectories.jsonl) or "
        "ludus proxy --out (episodes.jsonl)",
    )
    p.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port on 127.0.0.1 to serve the page on (default {DEFAULT_PORT}; 0 picks a free one)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ludus.cli.common import console

    try:
        from ludus.serve.net import address, guarded_server, listen
        from ludus.serve.view import open_runs, view_app
    except ImportError as exc:
        raise ValueError(f"ludus view needs FastAPI and uvicorn: pip install 'ludus[serve]' ({exc})") from None

    runs = open_runs(args.runs)
    sock = listen("127.0.0.1", args.port)  # this machine only: the page shows everything the runs hold
    try:
        console().print(
            f"viewing {len(runs)} run(s) at {address(sock)}/ (Ctrl-C stops)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        guarded_server(view_app(runs)).run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn re-raises Ctrl-C once it has shut down gracefully
        return 130
    finally:
        sock.close()
    return 0
