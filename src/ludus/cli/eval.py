"""``ludus eval``: any model on any environment through the rollout engine: mean reward, pass@k, best-of-N."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from ludus.cli.common import ENV_ARGS_HELP, MODEL_ARGS_HELP, add_env_server_arguments

if TYPE_CHECKING:
    from pathlib import Path

    from ludus.cli.common import CommandParser
    from ludus.rollout.evaluate import Summary

# What makes a run's samples, and the value of each when its flag is not given (temperature: 0, greedy,
# for one sample, else 1). A run records them in its folder (RECORD) with how many tasks it covers;
# `--resume` continues with them and refuses a flag that changes one: one summary of two models'
# samples would measure neither. Only --tasks, and where and how fast it runs, may change
RUN_SETTINGS: dict[str, Any] = {
    "env": None,
    "env_args": {},
    "split": "eval",
    "model": "tiny",
    "model_name": None,
    "model_args": {},
    "tool_format": None,
    "samples": 1,
    "temperature": None,
    "top_p": 1.0,
    "max_tokens": 32,
    "actors": [],
}
RECORD = "eval.json"


def add_parser(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser("eval", help="evaluate a model on an environment: mean reward, pass@k, best-of-N")
    p.add_argument("env", help="environment name (see `ludus envs`)")
    p.add_argument(
        "--model",
        help="'tiny' (default), a saved model folder (a run's final/ or checkpoints/step_NNNNNN/), hf:PATH, "
        "http(s)://HOST/v1, or a scripted policy: 'oracle' (plays the environment's reference actions) or "
        "'nothing' (empty replies)",
    )
    p.add_argument("--model-name", help="the model to ask an OpenAI-compatible server for (default: its only one)")
    p.add_argument("--model-args", help=MODEL_ARGS_HELP)
    p.add_argument(
        "--tool-format",
        help="how the model writes tool calls in text: hermes (default), mistral or llama3_json "
        "(transformers models, and servers that return calls as text)",
    )
    p.add_argument("--env-args", help=ENV_ARGS_HELP)
    p.add_argument(
        "--actor",
        dest="actors",
        action="append",
        metavar="NAME=MODEL",
        help="another policy, for the seats an environment gives to actor NAME (a game with env args "
        '{"opponent": "actor:NAME"}): a saved model folder, hf:PATH or http(s)://HOST/v1; repeatable',
    )
    p.add_argument("--split", help="task split: train or eval (default eval)")
    p.add_argument("--tasks", type=int, help="how many tasks (default: all, or 100 of an endless source)")
    p.add_argument("--samples", type=int, help="samples per task (default 1)")
    p.add_argument("--k", help="pass@k values, comma-separated, each <= --samples (default 1)")
    p.add_argument("--temperature", type=float, help="default 0 (greedy) for one sample, else 1")
    p.add_argument("--top-p", type=float, help="default 1")
    p.add_argument("--max-tokens", type=int, help="completion length cap (default 32)")
    p.add_argument("--batch", type=int, default=64, help="conversations per generate call")
    p.add_argument("--generate-calls", type=int, default=1, help="generate calls in flight (raise for a server)")
    p.add_argument("--env-workers", type=int, default=32, help="environment calls at once")
    p.add_argument("--runs", default="runs", help="folder of run folders (default runs/)")
    p.add_argument("--name", help="run folder name (default eval-<env>-<time>)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run --name with the model and settings it recorded: skip finished episodes",
    )
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

    from ludus.cli.common import console, fewer_malloc_arenas, progress_bar
    from ludus.core.types import ACTOR_NAME
    from ludus.policies import PolicyError, SamplingParams, load_policy
    from ludus.rollout.engine import RolloutConfig
    from ludus.rollout.evaluate import evaluate
    from ludus.rollout.placement import EnvPlacement

    fewer_malloc_arenas()
    if args.resume and not args.name:
        raise ValueError("--resume continues the run that --name names: add --name")
    run_dir = Path(args.runs) / (args.name or f"eval-{args.env}-{time.strftime('%Y%m%d-%H%M%S')}")
    vars(args).update(run_settings(args, run_dir))  # the flags given, completed by default or by the run's record
    ks = sorted({int(k) for k in args.k.split(",") if k.strip()}) if args.k else [1]
    if not ks or ks[0] < 1 or ks[-1] > args.samples:
        raise ValueError(f"--k must be positive and at most --samples ({args.samples}); got {args.k!r}")
    if (args.ray_address or args.ray_actors is not None) and not args.ray:
        raise ValueError("--ray-address and --ray-actors set up the Ray scale-out: add --ray")
    placement = EnvPlacement(
        args.env_workers,
        env_servers=tuple(args.env_server or ()),
        ray=args.ray,
        ray_address=args.ray_address,
        ray_actors=2 if args.ray_actors is None else args.ray_actors,
    )
    make_env, first = placement.env_factory(args.env, args.env_args or None)  # no --env-args: the server's
    try:
        source = first.task_source(args.split)
        count = args.tasks if args.tasks is not None else (source.size if source.size is not None else 100)
        if source.size is not None and count > source.size:
            raise ValueError(f"--tasks {count} is more than the {source.size} tasks of {args.env}'s {args.split} split")
        tasks = [source.get(i) for i in range(count)]
    finally:
        first.close()
    sampling = SamplingParams(temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens)
    if args.model_name and not args.model.startswith(("http://", "https://")):
        raise ValueError("--model-name picks a model on an OpenAI-compatible server; it needs --model http(s)://...")
    options = {"model": args.model_name} if args.model_name else {}
    options.update(args.model_args)
    if args.tool_format:
        if args.model in ("tiny", "oracle", "nothing"):
            raise ValueError(f"--tool-format applies to transformers models and servers, not {args.model!r}")
        options["tool_format"] = args.tool_format
    if args.model == "oracle":  # scripted policies: prove the tasks solvable and the rewards discriminating
        from ludus.rollout.engine import requests
        from ludus.rollout.scripted import OraclePolicy

        if placement.env_servers:
            raise ValueError("--model oracle plays reference answers, which stay on the env server: evaluate it there")
        policy = OraclePolicy(make_env, requests(tasks, args.samples))
    elif args.model == "nothing":
        from ludus.rollout.scripted import NothingPolicy

        policy = NothingPolicy()
    else:
        policy = load_policy(args.model, **options)
    actors = {}
    try:
        for given in args.actors:
            name, _, spec = given.partition("=")
            if not ACTOR_NAME.fullmatch(name) or not spec:
                raise ValueError(f"--actor takes NAME=MODEL (NAME of letters, digits, '_', '.', '-'), got {given!r}")
            try:
                actors[name] = load_policy(spec)
            except PolicyError as exc:
                raise ValueError(f"--actor {name}: {exc}") from None
    except BaseException:
        for actor in [policy, *actors.values()]:
            actor.close()
        raise
    record(run_dir, {name: getattr(args, name) for name in RUN_SETTINGS} | {"tasks": count}, args.resume)
    config = RolloutConfig(max_batch=args.batch, env_concurrency=args.env_workers, generate_calls=args.generate_calls)
    console().print(
        f"[bold]ludus eval[/] env={args.env} ({args.split}, {count} tasks × {args.samples}) model={args.model} "
        f"temperature={args.temperature} run={run_dir}"
    )
    state = {"n": 0, "reward": 0.0, "infra": 0}
    try:
        host = placement.host()
    except (ImportError, ConnectionError, RuntimeError) as exc:  # no Ray, no cluster, no server: say so
        for actor in [policy, *actors.values()]:
            actor.close()
        console().print(f"[red]error:[/] {exc}")
        return 2
    if args.ray:
        console().print(f"environments on Ray ({args.ray_address or 'local'}), {args.env_workers} calls at once")
    elif placement.env_servers:
        servers = placement.env_servers
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
                actors=actors,
            )
    except KeyboardInterrupt:
        console().print(
            f"interrupted: every finished episode is in {run_dir / 'trajectories.jsonl'}; "
            f"continue with the same command plus --resume --name {run_dir.name}"
        )
        return 130
    finally:
        for actor in [policy, *actors.values()]:
            actor.close()
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
    return ungraded_verdict(summary)


def ungraded_verdict(summary: Summary) -> int:
    """The exit code of an evaluation, saying what its infra errors hide: 1 when no sample could be
    graded (its numbers measure nothing), else 0 with a warning for those that could not."""
    from rich.markup import escape

    from ludus.cli.common import console

    if not summary.infra_errors:
        return 0
    reason = escape(summary.infra_reason)
    if not summary.samples:
        console().print(
            f"[red]error:[/] no sample could be graded: all {summary.infra_errors} were infra_error, so its numbers "
            f"measure nothing. The commonest reason: {reason}",
            soft_wrap=True,
        )
        return 1
    console().print(
        f"[yellow]warning:[/] {summary.infra_errors} of {summary.infra_errors + summary.samples} samples could not be "
        f"graded (infra_error) and are left out of every number. The commonest reason: {reason}",
        soft_wrap=True,
    )
    return 0


def run_settings(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    """The :data:`RUN_SETTINGS` the run samples with, and ``tasks``: the flags given and the
    defaults; with ``--resume``, what the run recorded, which flags may repeat but not change."""
    from ludus.cli.common import mapping_flag
    from ludus.rollout.evaluate import TRAJECTORIES

    given = {name: getattr(args, name) for name in RUN_SETTINGS if getattr(args, name) is not None}
    for name in ("env_args", "model_args"):
        if name in given:
            given[name] = mapping_flag(flag(name), given[name])
    tasks = {} if args.tasks is None else {"tasks": args.tasks}
    path = run_dir / RECORD
    if args.resume and path.is_file():
        try:
            recorded = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            recorded = None
        if isinstance(recorded, dict):
            recorded.setdefault("actors", [])  # recorded before --actor existed
        if not isinstance(recorded, dict) or not set(RUN_SETTINGS) <= set(recorded):
            raise ValueError(f"{path} is not a record of an evaluation's settings: evaluate under a new --name")
        changed = [name for name in RUN_SETTINGS if name in given and given[name] != recorded[name]]
        if changed:
            said = ", ".join(f"{flag(n)} {shown(recorded[n])} (this command: {shown(given[n])})" for n in changed)
            raise ValueError(
                f"{run_dir} was evaluated with {said}; --resume continues a run with the model and settings it "
                f"recorded ({path}), so that one summary never mixes two: drop {', '.join(map(flag, changed))} "
                "or evaluate under a new --name"
            )
        return recorded | tasks
    trajectories = run_dir / TRAJECTORIES
    if args.resume and trajectories.is_file() and trajectories.stat().st_size:
        raise ValueError(
            f"{run_dir} holds trajectories but no record of the model and settings that made them ({RECORD}): "
            "evaluate under a new --name"
        )
    settings = RUN_SETTINGS | given | {"tasks": args.tasks}
    if settings["temperature"] is None:
        settings["temperature"] = 1.0 if settings["samples"] > 1 else 0.0
    return settings


def record(run_dir: Path, settings: dict[str, Any], resume: bool) -> None:
    """Write the run's settings for ``--resume`` to read back, whole or not at all. A run that
    already holds trajectories keeps its record unless it is resumed (with the same settings,
    perhaps more tasks): without ``--resume`` ``evaluate`` refuses to mix runs."""
    import os

    from ludus.rollout.evaluate import TRAJECTORIES

    trajectories = run_dir / TRAJECTORIES
    if not resume and trajectories.is_file() and trajectories.stat().st_size:
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / f".{RECORD}.tmp"
    tmp.write_text(json.dumps(settings, indent=2) + "\n")
    os.replace(tmp, run_dir / RECORD)


def flag(setting: str) -> str:
    return "ENV" if setting == "env" else "--" + setting.replace("_", "-")


def shown(value: Any) -> str:
    return "unset" if value is None else json.dumps(value) if isinstance(value, dict) else str(value)
