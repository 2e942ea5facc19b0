"""``ludus serve-model``: a policy behind an OpenAI-compatible chat-completions API (needs ``ludus[serve]``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ludus.cli.common import MODEL_ARGS_HELP, add_browser_flags

if TYPE_CHECKING:
    from ludus.cli.common import CommandParser


def add_parser(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser("serve-model", help="serve a policy over an OpenAI-compatible chat-completions API")
    p.add_argument(
        "--model",
        default="tiny",
        metavar="SPEC",
        help="what load_policy reads: tiny, a saved folder (a run's final/ or checkpoints/step_NNNNNN/), hf:PATH",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000; 0 picks a free one)")
    p.add_argument("--name", help="model name clients send and /v1/models lists (default: the SPEC)")
    p.add_argument("--max-batch", type=int, default=32, metavar="N", help="most conversations per generate call")
    p.add_argument("--model-args", help=MODEL_ARGS_HELP)
    p.add_argument(
        "--weight-updates",
        action="store_true",
        help="let a trainer replace the weights (POST /collective_rpc reload_weights, as vLLM's dev mode): "
        "for ludus train --rollout-server",
    )
    add_browser_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ludus.cli.common import console, mapping_flag

    try:
        from ludus.serve.model_server import create_app
        from ludus.serve.net import address, guarded_server, listen
    except ImportError as exc:
        from rich.markup import escape

        hint = f"ludus serve-model needs FastAPI and uvicorn: pip install 'ludus[serve]' ({exc})"
        console().print(f"[red]error:[/] {escape(hint)}")
        return 2
    from ludus.policies import load_policy
    from ludus.serve.browser import BrowserRules

    BrowserRules(tuple(args.allow_origin), tuple(args.allow_host))  # a bad flag stops us before the model loads
    options = mapping_flag("--model-args", args.model_args)
    sock = listen(args.host, args.port)
    policy = load_policy(args.model, **options)
    app = create_app(
        policy,
        args.name or args.model,
        max_batch=args.max_batch,
        weight_updates=args.weight_updates,
        allow_origins=tuple(args.allow_origin),
        allow_hosts=tuple(args.allow_host),
    )
    console().print(
        f"serving {args.name or args.model} at {address(sock)}/v1 (OpenAI-compatible; Ctrl-C stops)",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    try:
        guarded_server(app).run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn re-raises Ctrl-C once it has shut down gracefully
        return 130
    finally:
        sock.close()
        policy.close()
    return 0
