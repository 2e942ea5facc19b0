"""``ludus serve-env``: an environment over HTTP and WebSocket for trainers elsewhere (needs ``ludus[serve]``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ludus.cli.common import CommandParser


def add_parser(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser(
        "serve-env", help="serve an environment over HTTP and WebSocket: sessions, graded on the server"
    )
    p.add_argument("env", help="environment name (see `ludus envs`)")
    p.add_argument("--env-args", help="JSON keyword arguments for the environment")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8100, help="port to listen on (default 8100; 0 picks a free one)")
    p.add_argument(
        "--token",
        help="require 'Authorization: Bearer TOKEN' (default: $LUDUS_ENV_TOKEN; required off loopback)",
    )
    p.add_argument("--max-sessions", type=int, default=10_000, help="live sessions at most (default 10000)")
    p.add_argument("--max-pending", type=int, default=4096, help="environment calls running or queued at most")
    p.add_argument("--max-request-bytes", type=int, default=1 << 20, help="largest request body (default 1 MiB)")
    p.add_argument("--idle-timeout", type=float, default=600.0, help="seconds before an idle session is closed")
    p.add_argument("--call-timeout", type=float, default=300.0, help="seconds a reset or step may take")
    p.add_argument("--drain-timeout", type=float, default=30.0, help="seconds running episodes get on SIGTERM")
    p.add_argument("--threads", type=int, default=32, help="threads running environment calls (default 32)")
    p.add_argument(
        "--hide-reasons",
        action="store_true",
        help="send scores without the grader's reason and extracted answer, which can name the gold answer",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import json
    import os

    from ludus.cli.common import console
    from ludus.core.registry import factory

    try:
        from ludus.serve.env_server import ServerLimits, serve
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ValueError(f"ludus serve-env needs uvicorn: pip install 'ludus[serve]' ({exc})") from None
    env_args = json.loads(args.env_args) if args.env_args else {}
    if not isinstance(env_args, dict):
        raise ValueError(f"--env-args must be a JSON object, got {args.env_args!r}")
    limits = ServerLimits(
        max_sessions=args.max_sessions,
        max_pending=args.max_pending,
        max_request_bytes=args.max_request_bytes,
        idle_timeout_s=args.idle_timeout,
        call_timeout_s=args.call_timeout,
        drain_timeout_s=args.drain_timeout,
        threads=args.threads,
        hide_reasons=args.hide_reasons,
    )

    def ready(url: str) -> None:
        console().print(
            f"serving {args.env} at {url} (docs/serving.md; Ctrl-C or SIGTERM drains and stops)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )

    token = args.token or os.environ.get("LUDUS_ENV_TOKEN") or None
    serve(
        factory(args.env, env_args),
        host=args.host,
        port=args.port,
        token=token,
        limits=limits,
        env_args=env_args,
        on_ready=ready,
    )
    return 0
