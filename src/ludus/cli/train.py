"""``ludus train``: GRPO on an environment with a live progress bar; every config field is also a flag."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ludus.cli.common import CommandParser


def add_parser(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser("train", help="train a policy with GRPO (no arguments: the embedded default recipe)")
    p.add_argument("--config", help="YAML file of config fields")
    p.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue an interrupted run from its last checkpoint; it may change only where its parts run and how "
        "often it reports (--rollout-server, --env-server, --threads, --eval-every, ...), which its config.yaml then records",
    )
    p.defer(add_config_flags)
    p.set_defaults(run=run)


# fields whose flag says more than its default
METAVARS = {"rollout_server": "URL", "rollout_weights_dir": "DIR"}
NOTES = {
    "rollout_server": "; sample on vLLM or `ludus serve-model --weight-updates` at this /v1 URL, token ids in and "
    "out, the weights pushed after every step (needs model: hf:PATH; docs/integrations.md)",
}


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One ``--field-name VALUE`` flag per field of ``TrainConfig``, its default in the help; a
    yes/no field's flag alone means true (``--ray`` is ``--ray true``)."""
    from ludus.train.config import FIELDS, TrainConfig

    group = parser.add_argument_group(
        "config fields (override the YAML file; values are parsed as YAML; docs/recipe.md explains the recipe)"
    )
    defaults = TrainConfig().to_dict()
    for name in FIELDS:
        shown = json.dumps(defaults[name]) if isinstance(defaults[name], dict) else repr(defaults[name])
        switch = {"nargs": "?", "const": "true"} if isinstance(defaults[name], bool) else {}
        group.add_argument(
            f"--{name.replace('_', '-')}",
            dest=f"cfg_{name}",
            metavar=METAVARS.get(name, "VALUE"),
            default=None,
            help=f"default {shown}{NOTES.get(name, '')}",
            **switch,
        )


def config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The config fields given as flags: mappings (``--env-args``, ``--tiny``, …) read as every
    command reads them, the rest as the strings typed (``load_config`` parses them)."""
    from ludus.cli.common import mapping_flag
    from ludus.train.config import TrainConfig

    defaults = TrainConfig().to_dict()
    given = {k[4:]: v for k, v in vars(args).items() if k.startswith("cfg_") and v is not None}
    return {
        name: mapping_flag(f"--{name.replace('_', '-')}", value) if isinstance(defaults[name], dict) else value
        for name, value in given.items()
    }


def run(args: argparse.Namespace) -> int:
    from ludus.cli.common import console, fewer_malloc_arenas, progress_bar
    from ludus.train.config import load_config
    from ludus.train.trainer import Trainer, TrainingHalted

    fewer_malloc_arenas()

    def plain_log(text: str) -> None:  # the trainer's lines quote logs and configs: never read as markup
        console().print(text, markup=False)

    if args.resume:
        if args.config:
            raise ValueError("--resume continues a run with its saved config.yaml; drop --config")
        trainer = Trainer.resume_from(args.resume, config_overrides(args), log=plain_log)
    else:
        trainer = Trainer.create(load_config(args.config, config_overrides(args)), log=plain_log)
    c = trainer.config
    console().print(
        f"[bold]ludus train[/] env={c.env} run={trainer.run_dir} "
        f"(RL: {c.steps} steps max, {c.time_limit_min or '∞'} min max)"
    )
    state: dict[str, Any] = {"eval": float("nan")}
    with progress_bar("RL") as progress:
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
                if "logged/reward" in m:  # offline: the step's logged episodes, not the policy's samples
                    now = f"logged reward {m['logged/reward']:.3f} nll {m['nll']:.3f}"
                else:
                    now = f"reward {m['reward/mean']:.3f} acc {m['accuracy']:.3f}"
                progress.update(
                    bar,
                    completed=m["step"],
                    description=f"{now} eval {state['eval']:.3f} step {m['step_time_s']:.2f}s",
                )

        try:
            result = trainer.run(on_metrics)
        except TrainingHalted as exc:
            kept = (
                f"the run folder {trainer.run_dir} keeps the steps done"
                if trainer.run_dir.exists()
                else "no run folder was kept"
            )
            console().print(f"[red]error:[/] {exc}\nstopped; {kept}")
            return 1
    first, last = result.eval_accuracy[0], result.eval_accuracy[-1]
    console().print(
        f"held-out accuracy {first[2]:.3f} → {last[2]:.3f} in {result.elapsed_s / 60:.1f} min "
        f"({result.step} steps). Run folder: {result.run_dir}"
    )
    return 130 if result.interrupted else 0
