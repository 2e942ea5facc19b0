"""``ludus warmstart``: create (or re-create) the cached base model that ``ludus train`` starts from."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ludus.cli.train import add_config_flags, config_overrides

if TYPE_CHECKING:
    from ludus.cli.common import CommandParser


def add_parser(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser("warmstart", help="create (or re-create with --force) the cached base model for a config")
    p.add_argument("--config", help="YAML file of config fields")
    p.add_argument("--force", action="store_true", help="re-create even if it is cached")
    p.defer(add_config_flags)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ludus.cli.common import console, progress_bar
    from ludus.train.config import load_config
    from ludus.train.curriculum import build_picker
    from ludus.train.supervised import base_model_recipe, fit_context, make_base_model
    from ludus.train.trainer import close_start_envs, make_env_factory, warmstart_envs

    c = load_config(args.config, config_overrides(args))
    if not (c.model == "tiny" and c.warmstart_steps):
        raise ValueError("there is nothing to warm-start: the config's model is not tiny or warmstart_steps is 0")
    picker, arm_envs = build_picker(c, *make_env_factory(c))
    envs = warmstart_envs(c, arm_envs)  # what `ludus train` warm-starts on
    try:
        fit_context(c, zip(picker.arms.values(), arm_envs, strict=True), envs, console().print)  # as `ludus train`
        with progress_bar("warm-start") as progress:
            bar = progress.add_task("", total=c.warmstart_steps)
            _, path, created = make_base_model(
                envs,
                base_model_recipe(c),
                force=args.force,
                on_step=lambda s, loss: progress.update(bar, completed=s, description=f"loss {loss:.3f}"),
            )
    finally:
        close_start_envs(arm_envs, envs)
    console().print(f"{'created' if created else 'already cached (use --force to re-create)'}: {path}")
    return 0
