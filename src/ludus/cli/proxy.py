"""``ludus proxy``: an OpenAI-compatible endpoint that records each agent's model calls, token-exactly,
under its episode (needs ``ludus[serve]``; docs/proxy.md)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ludus.cli.common import MODEL_ARGS_HELP, add_browser_flags, add_token_flags

if TYPE_CHECKING:
    from ludus.cli.common import CommandParser

TOKEN_VARIABLE = "LUDUS_PROXY_TOKEN"


def add_parser(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser(
        "proxy", help="an OpenAI-compatible endpoint for agents that records every model call under its episode"
    )
    p.add_argument(
        "--model",
        default="tiny",
        metavar="SPEC",
        help="the model: tiny, a saved folder (a run's final/ or checkpoints/step_NNNNNN/), hf:PATH",
    )
    p.add_argument("--model-args", help=MODEL_ARGS_HELP)
    p.add_argument(
        "--rollout-server",
        metavar="URL",
        help="sample on this OpenAI-compatible server (its /v1 URL: vLLM with VLLM_SERVER_DEV_MODE=1, or ludus "
        "serve-model --weight-updates) after pushing --model's weights to it, as ludus train --rollout-server "
        "does, so that the weight version of every call is known; --model must be a transformers model",
    )
    p.add_argument(
        "--weights-dir",
        metavar="DIR",
        help="where the weights pushed to --rollout-server are written (default: a temporary folder); the server "
        "must be able to read it",
    )
    p.add_argument("--name", help="model name agents send and /v1/models lists (default: the SPEC)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8200, help="port to listen on (default 8200; 0 picks a free one)")
    p.add_argument(
        "--max-batch", type=int, default=64, metavar="N", help="most conversations per generate call (default 64)"
    )
    p.add_argument(
        "--max-tokens",
        type=int,
        default=16,
        metavar="N",
        help="completion tokens for a call that sets neither max_tokens nor max_completion_tokens (default 16)",
    )
    p.add_argument("--out", metavar="DIR", help="append every ended episode to DIR/episodes.jsonl")
    p.add_argument("--max-episodes", type=int, default=10_000, metavar="N", help="open episodes at most")
    p.add_argument("--max-calls", type=int, default=1_000, metavar="N", help="model calls per episode at most")
    add_token_flags(p, TOKEN_VARIABLE, "always required: it opens and ends episodes, which agents must not")
    add_browser_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import shutil
    import tempfile

    from ludus.cli.common import console, mapping_flag, read_token

    try:
        from ludus.serve.env_server import checked_token
        from ludus.serve.model_server import PolicyBackend
        from ludus.serve.net import address, guarded_server, listen
        from ludus.serve.proxy import EpisodeBook, proxy_app
    except ImportError as exc:
        raise ValueError(f"ludus proxy needs FastAPI and uvicorn: pip install 'ludus[serve]' ({exc})") from None
    from ludus.policies import load_policy
    from ludus.policies.base import PolicyError, SamplingParams
    from ludus.serve.browser import BrowserRules

    def warn(message: str) -> None:
        console().print(f"warning: {message}", markup=False, highlight=False, soft_wrap=True)

    # everything a user can get wrong is refused before the model loads
    BrowserRules(tuple(args.allow_origin), tuple(args.allow_host))
    token = read_token(args, TOKEN_VARIABLE, warn)
    if token is None:
        raise ValueError(
            f"ludus proxy needs an admin token (--token-file PATH or ${TOKEN_VARIABLE}; e.g. python -c "
            "'import secrets; print(secrets.token_hex(16))' > proxy.token): it opens and ends episodes, and an "
            "agent, which knows its own episode key, must not be able to end its episode with a reward of its choosing"
        )
    checked_token(token)
    if args.model.startswith(("http://", "https://")):
        raise ValueError(
            f"--model {args.model} is a server: the proxy records token ids, which it gets from a model it loads; "
            "load the model here (--model hf:PATH) and sample on that server with --rollout-server URL"
        )
    defaults = SamplingParams(max_tokens=args.max_tokens)
    options = mapping_flag("--model-args", args.model_args)
    name = args.name or args.model
    book = EpisodeBook(out=args.out, max_open=args.max_episodes, max_calls=args.max_calls)
    sock = listen(args.host, args.port)
    policy = sampler = None
    weights = None
    try:
        policy = sampler = load_policy(args.model, **options)
        if args.rollout_server:
            from ludus.policies.rollout_server import RolloutServerPolicy

            if not hasattr(policy, "save_weights"):
                raise ValueError(
                    f"--rollout-server samples with the weights of --model, pushed to the server: {args.model} is not "
                    "a transformers model (use --model hf:PATH)"
                )
            weights = args.weights_dir or tempfile.mkdtemp(prefix="ludus-proxy-weights-")
            sampler = RolloutServerPolicy(args.rollout_server, policy, weights_dir=weights)  # type: ignore[arg-type]
            try:
                seconds = sampler.sync(policy)  # type: ignore[arg-type]
            except PolicyError as exc:
                raise ValueError(
                    f"--rollout-server {args.rollout_server} cannot take the weights of {args.model}: {exc}. It must "
                    "be vLLM started with VLLM_SERVER_DEV_MODE=1 or `ludus serve-model --weight-updates`, able to "
                    "read --weights-dir"
                ) from None
            console().print(f"weights pushed to {args.rollout_server} in {seconds:.2f} s", markup=False)
        app = proxy_app(
            PolicyBackend(sampler, name, args.max_batch),
            book,
            admin_token=token,
            allow_origins=tuple(args.allow_origin),
            allow_hosts=tuple(args.allow_host),
            defaults=defaults,
        )
        url = address(sock)
        console().print(
            f"serving {name} at {url}/v1 for agents; episodes at {url}/ludus/episodes (docs/proxy.md; Ctrl-C stops)",
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
        if sampler is not None and sampler is not policy:
            sampler.close()
        if policy is not None:
            policy.close()
        book.close()
        if weights is not None and not args.weights_dir:
            shutil.rmtree(weights, ignore_errors=True)
    return 0
