"""``ludus export ENV -o FILE.parquet``: an environment's tasks as a dataset for TRL or verl.

Rows hold the prompt (the environment's first observation) and where the task comes from
(environment, arguments, split, index, seed, task id) — never its answer or hidden tests: the
Ludus reward rebuilds the task from the environment (docs/integrations.md).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ludus.cli.common import ENV_ARGS_HELP

if TYPE_CHECKING:
    from ludus.cli.common import CommandParser

FORMATS = ("trl", "verl")


def add_parser(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser("export", help="write an environment's tasks as a TRL or verl dataset (parquet)")
    p.add_argument("env", help="environment name (see `ludus envs`)")
    p.add_argument("-o", "--output", required=True, help="file to write: .parquet, or .jsonl for JSON lines")
    p.add_argument("--format", choices=FORMATS, default="trl", help="the trainer's layout (default trl)")
    p.add_argument("--split", default="train", help="task split: train or eval (default train)")
    p.add_argument("-n", "--tasks", type=int, help="how many tasks (default: the whole split; required if endless)")
    p.add_argument("--start", type=int, default=0, help="index of the first task (default 0)")
    p.add_argument("--env-args", help=ENV_ARGS_HELP)
    p.add_argument("--force", action="store_true", help="overwrite the output file if it exists")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from ludus.cli.common import console, mapping_flag, progress_bar
    from ludus.integrations import trl, verl_rows
    from ludus.integrations.common import canonical_args, export_tasks

    out = Path(args.output)
    if out.suffix not in (".parquet", ".jsonl"):
        raise ValueError(f"--output must end in .parquet or .jsonl, got {out.name!r}")
    if out.exists() and not args.force:
        raise FileExistsError(f"{out} exists; pass --force to overwrite it")
    env_args = canonical_args(mapping_flag("--env-args", args.env_args))
    exported = []
    with progress_bar("export") as progress:
        bar = progress.add_task("", total=args.tasks)
        for item in export_tasks(args.env, args.split, args.tasks, env_args=env_args, start=args.start):
            exported.append(item)
            progress.update(bar, advance=1)
    rows = trl.rows(exported) if args.format == "trl" else verl_rows.rows(exported)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    if out.suffix == ".jsonl":
        partial.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    else:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise ValueError("writing parquet needs pyarrow: pip install 'ludus[parquet]' (or write .jsonl)") from exc
        pq.write_table(pa.Table.from_pylist(rows), partial)
    partial.replace(out)
    tools = len(exported[0].observation.tools) if exported else 0
    console().print(
        f"wrote {len(rows)} {args.env} tasks ({args.split} {args.start}..{args.start + len(rows) - 1}) to {out} "
        f"in {args.format}'s layout" + (f"; the environment has {tools} tools: train it multi-turn" if tools else "")
    )
    return 0
