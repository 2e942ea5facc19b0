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
    p.add_argument(
        "--token-file",
        help="the token the API requires, read from this file (16 characters at least; default: a new random "
        "one each start, unless $LUDUS_VIEW_TOKEN is set); it is printed in the page's address, after '#', which browsers never send",
    )
    p.set_defaults(run=run, token=None)


def run(args: argparse.Namespace) -> int:
    import secrets
    import urllib.parse

    from ludus.cli.common import console, read_token

    try:
        from ludus.serve.net import address, guarded_server, listen
        from ludus.serve.view import open_runs, view_app
    except ImportError as exc:
        raise ValueError(f"ludus view needs FastAPI and uvicorn: pip install 'ludus[serve]' ({exc})") from None

    # other accounts of this machine can reach 127.0.0.1 too: the API answers only the token's holder
    token = read_token(args, "LUDUS_VIEW_TOKEN", console().print) or secrets.token_urlsafe(32)
    runs = open_runs(args.runs)
    app = view_app(runs, token)
    sock = listen("127.0.0.1", args.port)  # this machine only: the page shows everything the runs hold
    try:
        console().print(
            f"viewing {len(runs)} run(s) at {address(sock)}/#token={urllib.parse.quote(token, safe='')} (Ctrl-C stops)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        guarded_server(app).run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn re-raises Ctrl-C once it has shut down gracefully
        return 130
    finally:
        sock.close()
    return 0
