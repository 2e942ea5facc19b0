"""The ``ludus`` command: ``train``, ``eval``, ``warmstart``, ``verify``, ``serve-model``, ``envs``, ``check``, ``doctor``.

Every error a user can cause (a bad config value, an unknown environment, a malformed task
file) ends in one plain sentence on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ludus.core.registry import EnvLoadError, UnknownEnvError, entries

console = Console(stderr=True)
USER_ERRORS: tuple[type[BaseException], ...] = (
    UnknownEnvError,
    EnvLoadError,
    ValueError,
    FileNotFoundError,
    FileExistsError,
)


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    from ludus.train.config import FIELDS, TrainConfig

    group = parser.add_argument_group(
        "config fields (override the YAML file; values are parsed as YAML; docs/recipe.md explains the recipe)"
    )
    defaults = TrainConfig().to_dict()
    for name in FIELDS:
        shown = json.dumps(defaults[name]) if isinstance(defaults[name], dict) else repr(defaults[name])
        group.add_argument(
            f"--{name.replace('_', '-')}", dest=f"cfg_{name}", metavar="VALUE", default=None, help=f"default {shown}"
        )


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {k[4:]: v for k, v in vars(args).items() if k.startswith("cfg_") and v is not None}


def cmd_train(args: argparse.Namespace) -> int:
    from ludus.train.config import load_config
    from ludus.train.trainer import Trainer, TrainingHalted

    if args.resume:
        if args.config or _overrides(args):
            raise ValueError("--resume continues a run with its saved config.yaml; drop --config and field flags")
        trainer = Trainer.resume_from(args.resume, log=console.print)
    else:
        trainer = Trainer.create(load_config(args.config, _overrides(args)), log=console.print)
    c = trainer.config
    console.print(
        f"[bold]ludus train[/] env={c.env} run={trainer.run_dir} "
        f"(RL: {c.steps} steps max, {c.time_limit_min or '∞'} min max)"
    )
    state: dict[str, Any] = {"eval": float("nan")}
    with Progress(
        TextColumn("[bold blue]RL"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=console,
        transient=False,
    ) as progress:
        bar = progress.add_task("", total=c.steps)

        def on_metrics(m: dict[str, Any]) -> None:
            if "eval/accuracy" in m:
                state["eval"] = m["eval/accuracy"]
                progress.console.print(
                    f"  step {m['step']:>5}  {m['elapsed_s'] / 60:5.1f} min  "
                    f"held-out accuracy (greedy) {m['eval/accuracy']:.3f}"
                )
            else:
                state.update(m)
                progress.update(
                    bar,
                    completed=m["step"],
                    description=(
                        f"reward {m['reward/mean']:.3f} acc {m['accuracy']:.3f} eval {state['eval']:.3f} "
                        f"step {m['step_time_s']:.2f}s"
                    ),
                )

        try:
            result = trainer.run(on_metrics)
        except TrainingHalted as exc:
            console.print(f"[red]error:[/] {exc}\nstopped; the run folder {trainer.run_dir} keeps the steps done")
            return 1
    first, last = result.eval_accuracy[0], result.eval_accuracy[-1]
    console.print(
        f"held-out accuracy {first[2]:.3f} → {last[2]:.3f} in {result.elapsed_s / 60:.1f} min "
        f"({result.step} steps). Run folder: {result.run_dir}"
    )
    return 130 if result.interrupted else 0


def cmd_warmstart(args: argparse.Namespace) -> int:
    from ludus.core.registry import make
    from ludus.train.config import load_config
    from ludus.train.supervised import base_model_recipe, make_base_model

    c = load_config(args.config, _overrides(args))
    recipe = base_model_recipe(c.env, c.env_args, c.tiny, c.seed, c.warmstart_steps, c.warmstart_batch, c.warmstart_lr)
    with Progress(
        TextColumn("[bold blue]warm-start"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        console=console,
    ) as progress:
        bar = progress.add_task("", total=c.warmstart_steps)
        _, path, created = make_base_model(
            make(c.env, **c.env_args),
            recipe,
            force=args.force,
            on_step=lambda s, loss: progress.update(bar, completed=s, description=f"loss {loss:.3f}"),
        )
    console.print(f"{'created' if created else 'already cached (use --force to re-create)'}: {path}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    import os
    import time
    from pathlib import Path

    from ludus.core.registry import env_class
    from ludus.policies import SamplingParams, load_policy
    from ludus.rollout.engine import RolloutConfig
    from ludus.rollout.evaluate import evaluate

    ks = sorted({int(k) for k in args.k.split(",") if k.strip()}) if args.k else [1]
    if not ks or ks[0] < 1 or ks[-1] > args.samples:
        raise ValueError(f"--k must be positive and at most --samples ({args.samples}); got {args.k!r}")
    env_args = json.loads(args.env_args) if args.env_args else {}
    cls = env_class(args.env)
    source = cls(**env_args).task_source(args.split)
    count = args.tasks if args.tasks is not None else (source.size if source.size is not None else 100)
    if source.size is not None and count > source.size:
        raise ValueError(f"--tasks {count} is more than the {source.size} tasks of {args.env}'s {args.split} split")
    tasks = [source.get(i) for i in range(count)]
    temperature = args.temperature if args.temperature is not None else (1.0 if args.samples > 1 else 0.0)
    sampling = SamplingParams(temperature=temperature, top_p=args.top_p, max_tokens=args.max_tokens)
    if args.model_name and not args.model.startswith(("http://", "https://")):
        raise ValueError("--model-name picks a model on an OpenAI-compatible server; it needs --model http(s)://...")
    options = {"model": args.model_name} if args.model_name else {}
    options.update(_model_args(args.model_args))
    if args.tool_format:
        if args.model in ("tiny", "oracle", "nothing"):
            raise ValueError(f"--tool-format applies to transformers models and servers, not {args.model!r}")
        options["tool_format"] = args.tool_format
    if (args.ray_address or args.ray_actors is not None) and not args.ray:
        raise ValueError("--ray-address and --ray-actors set up the Ray scale-out: add --ray")
    actors = args.ray_actors if args.ray_actors is not None else 2
    if actors < 1:
        raise ValueError(f"--ray-actors must be at least 1, got {actors}")
    if args.model == "oracle":  # scripted policies: prove the tasks solvable and the rewards discriminating
        from ludus.rollout.engine import requests
        from ludus.rollout.scripted import OraclePolicy

        policy = OraclePolicy(lambda: cls(**env_args), requests(tasks, args.samples))
    elif args.model == "nothing":
        from ludus.rollout.scripted import NothingPolicy

        policy = NothingPolicy()
    else:
        policy = load_policy(args.model, **options)
    run_dir = Path(args.runs) / (args.name or f"eval-{args.env}-{time.strftime('%Y%m%d-%H%M%S')}")
    config = RolloutConfig(max_batch=args.batch, env_concurrency=args.env_workers, generate_calls=args.generate_calls)
    console.print(
        f"[bold]ludus eval[/] env={args.env} ({args.split}, {count} tasks × {args.samples}) model={args.model} "
        f"temperature={temperature} run={run_dir}"
    )
    state = {"n": 0, "reward": 0.0, "infra": 0}
    host = None
    try:
        if args.ray:
            from ludus.rollout.ray_host import RayHost

            per_actor = -(-args.env_workers // actors)  # --env-workers calls at once in all, as without Ray
            # on this machine alone, the actors share its cores; on a cluster each reserves one
            cpus = 1.0 if args.ray_address else min(1.0, (os.cpu_count() or 1) / actors)
            try:
                host = RayHost(actors, per_actor, address=args.ray_address, num_cpus_per_actor=cpus)
            except (ImportError, ConnectionError, RuntimeError) as exc:  # no Ray, no cluster, no actors: say so
                console.print(f"[red]error:[/] {exc}")
                return 2
            where = args.ray_address or "local"
            console.print(f"environments on Ray ({where}): {actors} actors × {per_actor} calls at once")
        with Progress(
            TextColumn("[bold blue]eval"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=console,
        ) as progress:
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
                lambda: cls(**env_args),
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
        console.print(
            f"interrupted: every finished episode is in {run_dir / 'trajectories.jsonl'}; "
            f"continue with the same command plus --resume --name {run_dir.name}"
        )
        return 130
    finally:
        policy.close()
        if host is not None:
            host.shutdown()
    table = Table("metric", "value", title=f"{args.env} × {args.model}")
    table.add_row("tasks", str(summary.tasks))
    table.add_row("samples (gradable)", str(summary.samples))
    table.add_row("mean reward", f"{summary.mean_reward:.4f}")
    table.add_row("accuracy (reward 1)", f"{summary.accuracy:.4f}")
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
    console.print(f"trajectories and summary.json in {run_dir}")
    return 0


def cmd_envs(args: argparse.Namespace) -> int:
    table = Table("name", "description", "origin")
    for name, entry in entries().items():
        try:
            description = entry.load().description or "(no description)"
        except EnvLoadError as exc:
            description = f"[red]cannot load: {exc}[/]"
        table.add_row(name, description, entry.origin)
    Console().print(table)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    import json

    from ludus.core.check import check_env_by_name, format_report

    kwargs = json.loads(args.env_args) if args.env_args else {}
    report = check_env_by_name(args.env, **kwargs)
    print(format_report(report))
    return 0 if report.ok else 1


def _verifier_for(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(score_many over (completion, gold) pairs, the line spec, a closer) for ``ludus verify DOMAIN``."""
    from ludus.verifiers.batch import LineSpec

    if args.domain == "math":
        from ludus.verifiers.guard import cpu_count
        from ludus.verifiers.math import MathVerifier

        math = MathVerifier(
            workers=args.workers or cpu_count(),
            timeout_s=args.timeout or 5.0,
            max_answer_chars=args.max_answer_chars,
            decimal_gold=args.decimal_gold,
        )
        math.score_many([("\\boxed{1}", "1")] * math.workers)  # start the workers before the clock
        spec = LineSpec(args.completion_field, args.gold_field or "gold")
        return math.score_many, spec, lambda: None

    from ludus.sandbox import Limits
    from ludus.verifiers.code import CodeVerifier, code_annotation, task_object

    code = CodeVerifier(
        partial_credit=args.partial_credit,
        shuffle=args.shuffle,
        prune=args.prune,
        test_timeout_s=args.timeout or 5.0,
        limits=Limits(wall_s=args.wall, cpu_s=args.wall),
        workers=args.workers or None,
        backend=args.backend,
    )
    code.score({"test_list": ["assert f() == 1"]}, "def f(): return 1")  # start the sandbox before the clock
    spec = LineSpec(args.completion_field, args.gold_field or "task", task_object, code_annotation)
    return (lambda pairs: code.score_many([(task, completion) for completion, task in pairs])), spec, code.close


def cmd_verify(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ludus.verifiers.batch import score_jsonl

    source = Path(args.input)
    if not source.is_file():
        raise FileNotFoundError(f"input file not found: {source}")
    if args.output and Path(args.output).resolve() == source.resolve():
        raise ValueError("-o must name a different file than the input")
    score_many, spec, close = _verifier_for(args)
    with source.open(encoding="utf-8", errors="replace") as f:
        total = sum(1 for line in f if line.strip())
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout  # noqa: SIM115
    try:
        with (
            source.open(encoding="utf-8", errors="replace") as lines,
            Progress(
                TextColumn(f"[bold blue]verify {args.domain}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
            ) as progress,
        ):
            bar = progress.add_task("", total=total)
            report = score_jsonl(lines, out.write, score_many, spec=spec, on_line=lambda n: progress.advance(bar, n))
    finally:
        close()
        if out is not sys.stdout:
            out.close()
    for number, why in report.skipped:
        console.print(f"[yellow]skipped line {number}:[/] {why}")
    table = Table(
        "status", "lines", "share", title=f"{source.name}: {report.scored} scored, {len(report.skipped)} skipped"
    )
    for status, count in report.statuses.most_common():
        table.add_row(status, str(count), f"{count / max(1, report.scored):.1%}")
    console.print(table)
    console.print(
        f"mean reward {report.mean_reward:.4f}; {report.scored / max(report.seconds, 1e-9):.1f} lines/s"
        + (f"; written to {args.output}" if args.output else "")
    )
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from ludus.sandbox import Sandbox, detect
    from ludus.sandbox.backend import process_limit_note

    found = detect()
    table = Table("check", "result", title="ludus doctor", show_lines=False)
    table.add_row("python", f"{sys.version.split()[0]} at {sys.executable}")
    table.add_row("bubblewrap", f"{found.bwrap} ({found.version})" if found.bwrap else "[red]not installed[/]")
    colour = "green" if found.backend == "bwrap" else "red"
    table.add_row("sandbox backend", f"[{colour}]{found.backend}[/]: {found.reason}")
    if found.backend == "bwrap":
        with Sandbox(workers=1, backend_name="bwrap") as box:
            level, detail = box.level, ""
            probe = box.run("import socket; print(socket.gethostname())")
        if level != "namespaces":
            detail = " — executions share their worker's namespaces (the worker wipes /tmp between them)"
        table.add_row("isolation per execution", f"{level}{detail}")
        table.add_row("sandbox smoke test", "ok" if probe.ok else f"[red]{probe.status}: {probe.reason}[/]")
    table.add_row("process limit", process_limit_note())
    try:
        import torch

        table.add_row("torch", f"{torch.__version__}, {torch.get_num_threads()} threads")
    except ImportError:
        table.add_row("torch", "[red]not installed[/]")
    console.print(table)
    return 0 if found.backend == "bwrap" else 1


def _model_args(text: str | None) -> dict[str, Any]:
    """``--model-args``: a JSON object of options for ``load_policy``."""
    given = json.loads(text) if text else {}
    if not isinstance(given, dict):
        raise ValueError(f"--model-args must be a JSON object, got {text!r}")
    return given


MODEL_ARGS_HELP = (
    "JSON options for loading the model: for tiny its shape (e.g. '{\"max_len\": 1024}'), for hf: device, "
    "dtype, tool_format; for a server timeout_s, concurrency, tool_format"
)


def cmd_serve_model(args: argparse.Namespace) -> int:
    import socket

    try:
        import uvicorn

        from ludus.serve.model_server import create_app
    except ImportError as exc:
        from rich.markup import escape

        hint = f"ludus serve-model needs FastAPI and uvicorn: pip install 'ludus[serve]' ({exc})"
        console.print(f"[red]error:[/] {escape(hint)}")
        return 2
    from ludus.policies import load_policy

    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be in 0..65535 (0 picks a free one), got {args.port}")
    policy = load_policy(args.model, **_model_args(args.model_args))
    app = create_app(policy, args.name or args.model, max_batch=args.max_batch)
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
        sock.listen(2048)  # from here on, connections wait in the backlog instead of being refused
    except OSError as exc:
        sock.close()
        raise ValueError(
            f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}; choose another --port (0 picks a free one)"
        ) from exc
    host = f"[{args.host}]" if family == socket.AF_INET6 else args.host
    console.print(
        f"serving {args.name or args.model} at http://{host}:{sock.getsockname()[1]}/v1 (OpenAI-compatible; Ctrl-C stops)",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    try:
        uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn re-raises Ctrl-C once it has shut down gracefully
        return 130
    finally:
        sock.close()
        policy.close()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ludus", description="Reinforcement learning with verifiable rewards.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="train a policy with GRPO (no arguments: the embedded default recipe)")
    p.add_argument("--config", help="YAML file of config fields")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue an interrupted run from its last checkpoint")
    _add_config_flags(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("warmstart", help="create (or re-create with --force) the cached base model for a config")
    p.add_argument("--config", help="YAML file of config fields")
    p.add_argument("--force", action="store_true", help="re-create even if it is cached")
    _add_config_flags(p)
    p.set_defaults(func=cmd_warmstart)

    p = sub.add_parser("verify", help="score a JSONL file of completions (math answers or code)")
    p.add_argument("domain", choices=["math", "code"], help="which verifier")
    p.add_argument(
        "input",
        metavar="INPUT.jsonl",
        help="one JSON object per line: a completion and its gold answer (math) or task (code)",
    )
    p.add_argument("-o", "--output", metavar="OUTPUT.jsonl", help="write scored lines here (default: stdout)")
    p.add_argument("--completion-field", default="completion", help="field holding the model's reply")
    p.add_argument(
        "--gold-field", help="field holding the gold answer (math, default 'gold') or task (code, default 'task')"
    )
    p.add_argument("--workers", type=int, default=0, help="verifier processes or sandbox workers (default: all cores)")
    p.add_argument(
        "--timeout", type=float, help="seconds per line (math, default 5) or per test call (code, default 5)"
    )
    math = p.add_argument_group("math")
    math.add_argument("--max-answer-chars", type=int, default=1000, help="longer final answers are refused unparsed")
    math.add_argument(
        "--decimal-gold",
        choices=["rounded", "exact"],
        default="rounded",
        help="a decimal gold such as 6.28 accepts answers that round to it (default) or only equal values",
    )
    code = p.add_argument_group("code")
    code.add_argument("--partial-credit", action="store_true", help="reward the fraction of tests passed")
    code.add_argument("--shuffle", action="store_true", help="run the tests in a random order")
    code.add_argument("--prune", action="store_true", help="stop at the first failing test")
    code.add_argument("--wall", type=float, default=30.0, help="seconds for a solution's whole run (default 30)")
    code.add_argument(
        "--backend", choices=["auto", "bwrap", "process"], default="auto", help="sandbox backend (see ludus doctor)"
    )
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("serve-model", help="serve a policy over an OpenAI-compatible chat-completions API")
    p.add_argument(
        "--model", default="tiny", metavar="SPEC", help="what load_policy reads: tiny, a saved folder, hf:PATH"
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000; 0 picks a free one)")
    p.add_argument("--name", help="model name clients send and /v1/models lists (default: the SPEC)")
    p.add_argument("--max-batch", type=int, default=32, metavar="N", help="most conversations per generate call")
    p.add_argument("--model-args", help=MODEL_ARGS_HELP)
    p.set_defaults(func=cmd_serve_model)

    p = sub.add_parser("doctor", help="report the sandbox isolation and other facilities of this machine")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("eval", help="evaluate a model on an environment: mean reward, pass@k, best-of-N")
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
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("envs", help="list the available environments")
    p.set_defaults(func=cmd_envs)

    p = sub.add_parser("check", help="run the contract check on an environment")
    p.add_argument("env", help="environment name (see `ludus envs`)")
    p.add_argument("--env-args", help="JSON object of constructor arguments, e.g. '{\"digits\": 3}'")
    p.set_defaults(func=cmd_check)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except USER_ERRORS as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
