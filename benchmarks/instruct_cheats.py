"""``instruct`` against the cheat library (issue 28): how many replies that do nothing are paid.

On N generated tasks, every cheat of ``ludus.envs.instruct.cheats`` that applies (content-free
constants, the task's parameters with nothing said, the prompt echoed in Unicode disguises,
constraints broken where only a naive checker is blind, the reference with each constraint
broken) is scored by ``InstructEnv``; the tasks' references must all still score 1.

The anchor, in the same run: IFEval's own checkers (``if-verifiable``'s copy of google-research's
``instructions.py``, prompt-level strict: a cheat is paid when it follows every instruction) on
the same replies. IFEval counts sentences and capital words with NLTK's Punkt model, whose data
is a download, and has no "exactly N sentences": tasks with those constraints are left out of the
anchor (counted), and our "at most N" is its "less than N + 1". Sixteen constants like those of
the issue get their own line (before the gate, one of the issue's met every constraint of 27 %
of the tasks): where the checkers alone still pass one, only the gate refuses it.

    python benchmarks/instruct_cheats.py                    # 3,000 train tasks, about 5 minutes
    python benchmarks/instruct_cheats.py --tasks 300 --split eval
"""

from __future__ import annotations

import argparse
import logging
import time
from collections import Counter
from typing import Any

from ludus.envs.instruct import IFEVAL_IDS, InstructEnv, check
from ludus.envs.instruct.cheats import cheats
from ludus.envs.instruct.env import constraints_of

ISSUE_CONSTANTS = (
    "empty", "an empty object", "two responses of a letter", "an empty list", "zero", "null", "an empty string",
    "a quoted letter", "a title", "a postscript", "two bullets", "a letter", "a capital", "NaN", "a divider",
    "a fixed option",
)  # fmt: skip
"""Sixteen constant replies of the library, like those of issue 28's finding."""

_IFEVAL_ID = {kind: iid for iid, kind in IFEVAL_IDS.items()}
_NEEDS_PUNKT = {"length_sentences", "capital_words"}


def ifeval_instructions(constraints: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]] | None:
    """The task's constraints as IFEval's instruction ids and arguments; ``None`` when one has no
    IFEval checker that runs offline."""
    out = []
    for c in constraints:
        kwargs = {k: v for k, v in c.items() if k != "kind"}
        if c["kind"] in _NEEDS_PUNKT or "exactly" in kwargs.values():
            return None
        if kwargs.get("relation") == "at most":
            kwargs["relation"], kwargs["num_words"] = "less than", kwargs["num_words"] + 1
        out.append((_IFEVAL_ID[c["kind"]], kwargs))
    return out


def ifeval_follows(registry: Any, instructions: list[tuple[str, dict[str, Any]]], text: str) -> bool:
    """IFEval's prompt-level strict verdict: every instruction followed (an empty reply follows none)."""
    for iid, kwargs in instructions:
        checker = registry.INSTRUCTION_DICT[iid](iid)
        checker.build_description(**kwargs)
        if not (text.strip() and checker.check_following(text)):
            return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--split", default="train", choices=("train", "eval"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    logging.getLogger().setLevel(logging.CRITICAL)  # IFEval's case checkers log every reply langdetect cannot read
    try:
        from if_verifiable.ifeval import instructions_registry as registry
    except ImportError:
        registry = None
        print("if-verifiable is not installed: no IFEval anchor (pip install -e '.[dev]')")

    env = InstructEnv(seed=args.seed)
    source = env.task_source(args.split)
    start = time.perf_counter()
    played = paid = references = anchor_tasks = 0
    names: set[str] = set()
    ifeval_paid: Counter[str] = Counter()
    ifeval_tasks_paid = issue_ours = issue_ifeval = issue_met = 0  # the last three count tasks
    for index in range(args.tasks):
        task = source.get(index)
        reference = env.reference(task)
        references += env.score(task, reference or "").correct
        instructions = ifeval_instructions(constraints_of(task)) if registry is not None else None
        anchor_tasks += instructions is not None
        task_paid_by_ifeval = False
        constant = Counter[str]()
        for name, text in cheats(task, reference).items():
            played += 1
            names.add(name)
            ours = env.score(task, text).correct
            paid += ours
            theirs = instructions is not None and ifeval_follows(registry, instructions, text)
            ifeval_paid[name] += theirs
            task_paid_by_ifeval |= theirs
            if name in ISSUE_CONSTANTS:
                constant.update(ours=ours, ifeval=theirs, met=all(check(c, text) for c in constraints_of(task)))
        ifeval_tasks_paid += task_paid_by_ifeval
        issue_ours += constant["ours"] > 0
        issue_ifeval += constant["ifeval"] > 0
        issue_met += constant["met"] > 0
    seconds = time.perf_counter() - start

    print(
        f"{args.tasks:,} {args.split} tasks (seed {args.seed}), {len(names)} cheats, {played:,} replies, {seconds:.0f} s"
    )
    print(f"references scoring 1: {references:,} of {args.tasks:,}")
    print(f"cheat replies paid by InstructEnv: {paid:,} of {played:,}")
    print(f"tasks where one of 16 constants like the issue's is paid: {issue_ours:,}; where one meets every "
          f"constraint (the checkers alone, without the gate): {issue_met:,}")  # fmt: skip
    if registry is not None:
        print(f"IFEval's checkers, on the {anchor_tasks:,} tasks they can check: pay a cheat on {ifeval_tasks_paid:,} "
              f"tasks ({ifeval_tasks_paid / max(anchor_tasks, 1):.0%}), {sum(ifeval_paid.values()):,} replies; "
              f"one of the 16 constants on {issue_ifeval:,} tasks")  # fmt: skip
        print("the cheats IFEval pays most often (replies):")
        for name, count in ifeval_paid.most_common(12):
            print(f"  {count:6,}  {name}")


if __name__ == "__main__":
    main()
