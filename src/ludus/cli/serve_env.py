"""``ludus serve-env``: an environment over HTTP and WebSocket for trainers elsewhere (needs ``ludus[serve]``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ludus.cli.common import ENV_ARGS_HELP, add_browser_flags, add_token_flags

if TYPE_CHECKING:
    from ludus.cli.common import CommandParser


def add_parser(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser(
        "serve-env", help="serve an environment over HTTP and WebSocket: sessions, graded on the server"
    )
    p.add_argument("env", help="environment name (see `ludus envs`)")
    p.add_argument("--env-args", help=ENV_ARGS_HELP)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8100, help="port to listen on (default 8100; 0 picks a free one)")
    add_token_flags(p, "LUDUS_ENV_TOKEN", "required off loopback")
    add_browser_flags(p)
    p.add_argument(
        "--max-sessions",
        type=int,
        default=10_000,
        help="live sessions at most (default 10000, lowered to what the file descriptors allow)",
    )
    p.add_argument(
        "--max-connections", type=int, help="open connections at most (default: what the file descriptors allow)"
    )
    p.add_argument(
        "--request-timeout",
        type=float,
        default=10.0,
        help="seconds a client has to send a whole request, or to read a reply, before its connection is closed",
    )
    p.add_argument("--max-pending", type=int, default=4096, help="environment calls running or queued at most")
    p.add_argument("--max-request-bytes", type=int, default=1 << 20, help="largest request body (default 1 MiB)")
    p.add_argument("--idle-timeout", type=float, default=600.0, help="seconds before an idle session is closed")
    p.add_argument(
        "--ws-idle-timeout",
        type=float,
        default=60.0,
        help="seconds before a WebSocket with no request in progress is closed (default 60; clients reconnect)",
    )
    p.add_argument("--call-timeout", type=float, default=300.0, help="seconds a reset or step may take")
    p.add_argument("--drain-timeout", type=float, default=30.0, help="seconds running episodes get on SIGTERM")
    p.add_argument(
        "--drain-idle",
        type=float,
        default=10.0,
        help="on SIGTERM, episodes without a request for this many seconds are not waited for (default 10)",
    )
    p.add_argument("--threads", type=int, default=32, help="threads running environment calls (default 32)")
    p.add_argument(
        "--show-reasons",
        action="store_true",
        help="send scores with the grader's reason and extracted answer, which can name the gold answer "
        "(for debugging with clients of your own; by default a score is its value and status)",
    )
    # hiding reasons is the default now: the old flag is accepted, and does nothing
    p.add_argument("--hide-reasons", action="store_true", help=argparse.SUPPRESS)
    p.add_argument(
        "--allow-client-tasks",
        action="store_true",
        help="let clients send whole tasks to reset, each checked against the fields its environment declares "
        "safe (by default clients pick the server's tasks by split and index)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ludus.cli.common import console, mapping_flag, read_token
    from ludus.core.registry import factory

    try:
        from ludus.serve.env_server import ServerLimits, serve
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ValueError(f"ludus serve-env needs uvicorn: pip install 'ludus[serve]' ({exc})") from None
    env_args = mapping_flag("--env-args", args.env_args)
    if args.hide_reasons and args.show_reasons:
        raise ValueError("--hide-reasons (the default) and --show-reasons contradict each other: keep one")
    limits = ServerLimits(
        max_sessions=args.max_sessions,
        max_pending=args.max_pending,
        max_request_bytes=args.max_request_bytes,
        idle_timeout_s=args.idle_timeout,
        call_timeout_s=args.call_timeout,
        drain_timeout_s=args.drain_timeout,
        threads=args.threads,
        show_reasons=args.show_reasons,
        allow_client_tasks=args.allow_client_tasks,
        allow_origins=tuple(args.allow_origin),
        allow_hosts=tuple(args.allow_host),
        ws_idle_timeout_s=args.ws_idle_timeout,
        max_connections=args.max_connections,
        request_timeout_s=args.request_timeout,
        drain_idle_s=args.drain_idle,
    )

    def ready(url: str) -> None:
        console().print(
            f"serving {args.env} at {url} (docs/serving.md; Ctrl-C or SIGTERM drains and stops)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )

    def warn(message: str) -> None:
        console().print(f"warning: {message}", markup=False, highlight=False, soft_wrap=True)

    token = read_token(args, "LUDUS_ENV_TOKEN", warn)
    serve(
        factory(args.env, env_args),
        host=args.host,
        port=args.port,
        token=token,
        limits=limits,
        env_args=env_args,
        on_ready=ready,
        on_warning=warn,
    )
    return 0
