"""``ludus rescore RUN_DIR``: a run's stored trajectories graded again by today's environments (or
another version of one), the new verdicts written beside the old, and what changed (docs/rescore.md)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ludus.cli.common import ENV_ARGS_HELP

if TYPE_CHECKING:
    from ludus.cli.common import CommandParser
    from ludus.core.types import Score
    from ludus.rollout.rescore import Rescored

SKIPPED_SHOWN = 10  # bad lines named one by one; the rest are counted


def add_parser(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser(
        "rescore", help="re-grade a run's stored trajectories with today's graders and report what changed"
    )
    p.add_argument(
        "run_dir", metavar="RUN_DIR", help="a run folder: ludus eval's, ludus train's or ludus proxy's --out"
    )
    p.add_argument(
        "--env", help="grade every trajectory with this environment (default: each trajectory's own, see `ludus envs`)"
    )
    p.add_argument(
        "--env-args",
        help=f"{ENV_ARGS_HELP}; replaces the arguments the run recorded (default: those, from eval.json or config.yaml)",
    )
    p.add_argument("--workers", type=int, default=4, help="trajectories replayed at once, in threads (default 4)")
    p.add_argument(
        "--trust-run",
        action="store_true",
        help="the run folder is yours: take the environment arguments it records, and grade each trajectory on the "
        "task it records even when it is none of the environment's own (a tasks file of yours). Never for a folder "
        "from elsewhere: a forged argument or task can name any file, server or sandbox backend",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from ludus.cli.common import console, mapping_flag, progress_bar
    from ludus.rollout.rescore import LINES, SUMMARY, UNSCORED, rescore_run

    env_args = None if args.env_args is None else mapping_flag("--env-args", args.env_args)
    with progress_bar("rescore") as progress:
        bar = progress.add_task("", total=None)
        changed = 0

        def advance(record: Rescored) -> None:
            nonlocal changed
            changed += record.changed
            progress.update(bar, advance=1, description=f"changed {changed}")

        report = rescore_run(
            args.run_dir,
            env=args.env,
            env_args=env_args,
            workers=args.workers,
            trust_run=args.trust_run,
            on_result=advance,
        )
    summary = report.summary
    shown = Console()  # the report on stdout; notes on stderr
    shown.print(
        f"[bold]ludus rescore[/] {escape(str(report.run_dir))}: {summary['total']} re-graded, "
        f"{summary['changed']} changed, {summary['diverged']} diverged from the log",
        soft_wrap=True,
    )
    if report.transitions:
        table = Table("old status", "new status", "trajectories", "changed", title="old → new")
        for (old, new), count in report.transitions.most_common():
            table.add_row(text(old), text(new), str(count), str(report.changed_by_transition[old, new]))
        shown.print(table)
        shown.print(f"mean reward {report.old_reward_mean:.4f} → {report.new_reward_mean:.4f}")
    for record in report.examples:
        old = UNSCORED if record.old is None else verdict(record.old)
        diverged = f" [yellow]diverged:[/] {text(record.diverged)}" if record.diverged else ""
        shown.print(f"  {text(record.task_id)}: {old} → {verdict(record.new)}{diverged}", soft_wrap=True)
    for line in report.skipped[:SKIPPED_SHOWN]:
        console().print(
            f"[yellow]skipped[/] {line.file} line {line.line}: {line.reason} ({text(line.detail)})", soft_wrap=True
        )
    if len(report.skipped) > SKIPPED_SHOWN:
        console().print(f"[yellow]skipped[/] {len(report.skipped) - SKIPPED_SHOWN} more lines: {summary['skipped']}")
    console().print(f"new verdicts in {escape(str(report.run_dir / LINES))}, the summary in {SUMMARY}", soft_wrap=True)
    return 0


def verdict(score: Score) -> str:
    """A score as the report shows it: status, value and reason."""
    return f"{text(score.status)} {score.value:.3g} ({text(score.reason)})"


def text(value: str) -> str:
    """What a trajectory file says (a task id, a status, a reason), as rich markup that prints it as
    it is: a log from elsewhere may hold markup or terminal escape sequences."""
    from rich.markup import escape

    from ludus.rollout.records import shown

    return escape(shown(value))
