"""``ludus verify math|code``: score a JSONL file of completions on all cores (the engine is :mod:`ludus.cli.batch`).

Only the chosen domain's verifier is imported: sympy for ``math``, the sandbox for ``code``.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ludus.cli.batch import LineSpec
    from ludus.cli.common import CommandParser
    from ludus.core.types import Score

    ScoreMany = Callable[[Sequence[tuple[Any, Any]]], list[Score]]


def add_parser(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser("verify", help="score a JSONL file of completions (math answers or code)")
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
        "--timeout",
        type=float,
        help="CPU seconds per line (math, default 5) or per test call (code, default 5); a busy machine never shortens it",
    )
    math = p.add_argument_group("math")
    math.add_argument("--max-answer-chars", type=int, default=1000, help="longer final answers are refused unparsed")
    math.add_argument(
        "--decimal-gold",
        choices=["rounded", "exact"],
        default="rounded",
        help="a decimal gold such as 6.28 accepts answers that round to it (default) or only equal values",
    )
    math.add_argument(
        "--fallback",
        choices=["last_math"],
        help="replies without an answer marker: read their last math expression (evaluation of free-form "
        "outputs; training keeps requiring a marker)",
    )
    code = p.add_argument_group("code")
    code.add_argument("--partial-credit", action="store_true", help="reward the fraction of tests passed")
    code.add_argument("--shuffle", action="store_true", help="run the tests in a random order")
    code.add_argument(
        "--prune",
        action=argparse.BooleanOptionalAction,
        help="stop at the first failing test (default: yes, unless --partial-credit, which needs the count)",
    )
    code.add_argument(
        "--wall",
        type=float,
        default=30.0,
        help="seconds of a solution's whole run, not counting time spent waiting for a CPU (default 30)",
    )
    code.add_argument(
        "--backend", choices=["auto", "bwrap", "process"], default="auto", help="sandbox backend (see ludus doctor)"
    )
    code.add_argument(
        "--recursion-limit",
        type=int,
        metavar="N",
        help="raise python's recursion limit for every solution (default: python's own; recorded in each reason)",
    )
    code.add_argument(
        "--hash-seed",
        type=int,
        default=0,
        metavar="N",
        help="PYTHONHASHSEED of every execution (default 0: the same set order on every run)",
    )
    p.set_defaults(run=run)


def math_verifier(args: argparse.Namespace) -> tuple[ScoreMany, LineSpec, Callable[[], None]]:
    """(score_many over (completion, gold) pairs, the line spec, a closer), its workers started."""
    from ludus.cli.batch import LineSpec
    from ludus.envs.math.guard import cpu_count
    from ludus.envs.math.verifier import MathVerifier

    math = MathVerifier(
        workers=args.workers or cpu_count(),
        timeout_s=args.timeout or 5.0,
        max_answer_chars=args.max_answer_chars,
        decimal_gold=args.decimal_gold,
        fallback=args.fallback,
    )
    math.score_many([("\\boxed{1}", "1")] * math.workers)  # start the workers before the clock
    spec = LineSpec(args.completion_field, args.gold_field or "gold")
    return math.score_many, spec, lambda: None


def code_verifier(args: argparse.Namespace) -> tuple[ScoreMany, LineSpec, Callable[[], None]]:
    """(score_many over (completion, task) pairs, the line spec, a closer), its sandbox started."""
    from ludus.cli.batch import LineSpec
    from ludus.envs.code.verifier import CodeVerifier, code_annotation, task_object
    from ludus.sandbox import Limits

    code = CodeVerifier(
        partial_credit=args.partial_credit,
        shuffle=args.shuffle,
        prune=args.prune,
        test_timeout_s=args.timeout or 5.0,
        limits=Limits(wall_s=args.wall, cpu_s=args.wall, recursion=args.recursion_limit),
        workers=args.workers or None,
        backend=args.backend,
        hash_seed=args.hash_seed,
    )
    code.warm()  # every sandbox worker starts now, at once, before the clock
    spec = LineSpec(args.completion_field, args.gold_field or "task", task_object, code_annotation)
    return (lambda pairs: code.score_many([(task, completion) for completion, task in pairs])), spec, code.close


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.table import Table

    from ludus.cli.batch import score_jsonl
    from ludus.cli.common import console, progress_bar

    source = Path(args.input)
    if not source.is_file():
        raise FileNotFoundError(f"input file not found: {source}")
    if args.output and Path(args.output).resolve() == source.resolve():
        raise ValueError("-o must name a different file than the input")
    score_many, spec, close = (math_verifier if args.domain == "math" else code_verifier)(args)
    with source.open(encoding="utf-8", errors="replace") as f:
        total = sum(1 for line in f if line.strip())
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout  # noqa: SIM115
    try:
        with (
            source.open(encoding="utf-8", errors="replace") as lines,
            progress_bar(f"verify {args.domain}") as progress,
        ):
            bar = progress.add_task("", total=total)
            report = score_jsonl(lines, out.write, score_many, spec=spec, on_line=lambda n: progress.advance(bar, n))
    finally:
        close()
        if out is not sys.stdout:
            out.close()
    for number, why in report.skipped:
        console().print(f"[yellow]skipped line {number}:[/] {why}")
    table = Table(
        "status", "lines", "share", title=f"{source.name}: {report.scored} scored, {len(report.skipped)} skipped"
    )
    for status, count in report.statuses.most_common():
        table.add_row(status, str(count), f"{count / max(1, report.scored):.1%}")
    console().print(table)
    console().print(
        f"mean reward {report.mean_reward:.4f}; {report.scored / max(report.seconds, 1e-9):.1f} lines/s"
        + (f"; written to {args.output}" if args.output else "")
    )
    return 0
