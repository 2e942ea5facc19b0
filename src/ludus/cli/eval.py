"""``ludus eval``: any model on any environment through the rollout engine: mean reward, pass@k, best-of-N."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from ludus.cli.common import MODEL_ARGS_HELP, add_env_server_arguments

if TYPE_CHECKING:
    from ludus.cli.common import CommandParser


def add_parser(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser("eval", help="evaluate a model on an environment: mean reward, pass@k, best-of-N")
    p.add_argument("env", help="environment name (see `ludus envs`)")
    p.add_argument(
        "--model",
        default="tiny",
        help="'tiny', a saved model folder, hf:PATH, http(s)://HOST/v1, or a scripted policy: 'oracle' (plays "
        "the environment's reference actions) or 'nothing' (empty replies)",
    )
    p.add_argument("--model-name", help="the model to ask an OpenAI-compatible server for (default: its only one)")
    p.add_argument("--model-args", help=MODEL_ARGS_HELP)
    p.add_argument(
        "--tool-format",
        help="how the model writes tool calls in text: hermes (default), mistral or llama3_json "
        "(transformers models, and servers that return calls as text)",
    )
    p.add_argument("--env-args", help="JSON keyword arguments for the environment")
    p.add_argument("--split", default="eval", help="task split: train or eval (default eval)")
    p.add_argument("--tasks", type=int, help="how many tasks (default: all, or 100 of an endless source)")
    p.add_argument("--samples", type=int, default=1, help="samples per task (default 1)")
    p.add_argument("--k", help="pass@k values, comma-separated, each <= --samples (default 1)")
    p.add_argument("--temperature", type=float, help="default 0 (greedy) for one sample, else 1")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--max-tokens", type=int, default=32, help="completion length cap (default 32)")
    p.add_argument("--batch", type=int, default=64, help="conversations per generate call")
    p.add_argument("--generate-calls", type=int, default=1, help="generate calls in flight (raise for a server)")
    p.add_argument("--env-workers", type=int, default=32, help="environment calls at once")
    p.add_argument("--runs", default="runs", help="folder of run folders (default runs/)")
    p.add_argument("--name", help="run folder name (default eval-<env>-<time>)")
    p.add_argument("--resume", action="store_true", help="continue the run --name: skip finished episodes")
    p.add_argument("--ray", action="store_true", help="run the environments in Ray actors (pip install 'ludus[ray]')")
    p.add_argument("--ray-address", help="join a Ray cluster: HOST:PORT, ray://HOST:10001, auto (default: local)")
    p.add_argument("--ray-actors", type=int, help="Ray actors holding environments (default 2)")
    add_env_server_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table

    from ludus.cli.common import console, env_factory, model_args, progress_bar
    from ludus.policies import SamplingParams, load_policy
    from ludus.rollout.engine import RolloutConfig
    from ludus.rollout.evaluate import evaluate
    from ludus.rollout.hosts import make_host

    ks = sorted({int(k) for k in args.k.split(",") if k.strip()}) if args.k else [1]
    if not ks or ks[0] < 1 or ks[-1] > args.samples:
        raise ValueError(f"--k must be positive and at most --samples ({args.samples}); got {args.k!r}")
    env_args = json.loads(args.env_args) if args.env_args else {}
    make_env, servers, token = env_factory(args.env, env_args, args.env_server)
    source = make_env().task_source(args.split)
    count = args.tasks if args.tasks is not None else (source.size if source.size is not None else 100)
    if source.size is not None and count > source.size:
        raise ValueError(f"--tasks {count} is more than the {source.size} tasks of {args.env}'s {args.split} split")
    tasks = [source.get(i) for i in range(count)]
    temperature = args.temperature if args.temperature is not None else (1.0 if args.samples > 1 else 0.0)
    sampling = SamplingParams(temperature=temperature, top_p=args.top_p, max_tokens=args.max_tokens)
    if args.model_name and not args.model.startswith(("http://", "https://")):
        raise ValueError("--model-name picks a model on an OpenAI-compatible server; it needs --model http(s)://...")
    options = {"model": args.model_name} if args.model_name else {}
    options.update(model_args(args.model_args))
    if args.tool_format:
        if args.model in ("tiny", "oracle", "nothing"):
            raise ValueError(f"--tool-format applies to transformers models and servers, not {args.model!r}")
        options["tool_format"] = args.tool_format
    if (args.ray_address or args.ray_actors is not None) and not args.ray:
        raise ValueError("--ray-address and --ray-actors set up the Ray scale-out: add --ray")
    if args.model == "oracle":  # scripted policies: prove the tasks solvable and the rewards discriminating
        from ludus.rollout.engine import requests
        from ludus.rollout.scripted import OraclePolicy

        if servers:
            raise ValueError("--model oracle plays reference answers, which stay on the env server: evaluate it there")
        policy = OraclePolicy(make_env, requests(tasks, args.samples))
    elif args.model == "nothing":
        from ludus.rollout.scripted import NothingPolicy

        policy = NothingPolicy()
    else:
        policy = load_policy(args.model, **options)
    run_dir = Path(args.runs) / (args.name or f"eval-{args.env}-{time.strftime('%Y%m%d-%H%M%S')}")
    config = RolloutConfig(max_batch=args.batch, env_concurrency=args.env_workers, generate_calls=args.generate_calls)
    console().print(
        f"[bold]ludus eval[/] env={args.env} ({args.split}, {count} tasks × {args.samples}) model={args.model} "
        f"temperature={temperature} run={run_dir}"
    )
    state = {"n": 0, "reward": 0.0, "infra": 0}
    try:
        host = make_host(
            args.env_workers,
            env_servers=servers,
            token=token,
            ray=args.ray,
            ray_address=args.ray_address,
            ray_actors=2 if args.ray_actors is None else args.ray_actors,
        )
    except (ImportError, ConnectionError, RuntimeError) as exc:  # no Ray, no cluster, no server: say so
        policy.close()
        console().print(f"[red]error:[/] {exc}")
        return 2
    if args.ray:
        console().print(f"environments on Ray ({args.ray_address or 'local'}), {args.env_workers} calls at once")
    elif servers:
        console().print(f"environments on {len(servers)} env server(s): {', '.join(servers)}")
    try:
        with progress_bar("eval") as progress:
            bar = progress.add_task("", total=count * args.samples)

            def on_trajectory(trajectory: Any) -> None:
                score = trajectory.score
                if score is not None and score.is_infra_error:
                    state["infra"] += 1
                else:
                    state["n"] += 1
                    state["reward"] += score.value if score is not None else 0.0
                mean = state["reward"] / state["n"] if state["n"] else 0.0
                progress.update(bar, advance=1, description=f"mean reward {mean:.3f} infra errors {state['infra']}")

            summary = evaluate(
                policy,
                make_env,
                tasks,
                run_dir,
                samples=args.samples,
                sampling=sampling,
                ks=ks,
                resume=args.resume,
                config=config,
                on_trajectory=on_trajectory,
                host=host,
            )
    except KeyboardInterrupt:
        console().print(
            f"interrupted: every finished episode is in {run_dir / 'trajectories.jsonl'}; "
            f"continue with the same command plus --resume --name {run_dir.name}"
        )
        return 130
    finally:
        policy.close()
        host.shutdown()
    table = Table("metric", "value", title=f"{args.env} × {args.model}")
    table.add_row("tasks", str(summary.tasks))
    table.add_row("samples (gradable)", str(summary.samples))
    table.add_row("mean reward", f"{summary.mean_reward:.4f}")
    table.add_row("accuracy (graded correct)", f"{summary.accuracy:.4f}")
    for k, value in summary.pass_at.items():
        table.add_row(f"pass@{k}", f"{value:.4f}")
    table.add_row(f"best-of-{args.samples}", f"{summary.best_of_n:.4f}")
    table.add_row("infra errors (not counted)", str(summary.infra_errors))
    table.add_row("statuses", ", ".join(f"{k} {v}" for k, v in sorted(summary.statuses.items())))
    if summary.env_counts:
        table.add_row("environment counts", ", ".join(f"{k} {v:g}" for k, v in summary.env_counts.items()))
    Console().print(table)
    if summary.categories:
        by_category = Table("category", *next(iter(summary.categories.values())).keys(), title="by category")
        for name, row in summary.categories.items():
            by_category.add_row(name, *(f"{v:.4f}" if isinstance(v, float) else str(v) for v in row.values()))
        Console().print(by_category)
    console().print(f"trajectories and summary.json in {run_dir}")
    return 0
