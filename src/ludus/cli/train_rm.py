"""``ludus train-rm``: a reward model from preference pairs (Bradley-Terry), saved as a folder for ``rm:PATH``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ludus.cli.common import CommandParser


def add_parser(subparsers: argparse._SubParsersAction[CommandParser]) -> None:
    p = subparsers.add_parser("train-rm", help="train a reward model on preference pairs (JSONL) for rubrics' rm:PATH")
    p.add_argument(
        "--data",
        required=True,
        help='JSONL, one pair a line: {"prompt", "chosen", "rejected", "margin"?}; TRL\'s implicit-prompt and '
        "conversational forms too",
    )
    p.add_argument(
        "--model",
        default="tiny",
        help="'tiny' (fresh embedded weights), a folder saved by ludus (a tiny policy, or a reward model to train "
        "further), or 'hf:PATH' (a transformers checkpoint; a one-label classification head is added)",
    )
    p.add_argument("--out", required=True, help="folder to write the reward model and metrics.json to")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, help="default 5e-4 for tiny, 1e-5 for transformers models")
    p.add_argument("--batch-size", type=int, default=32, help="pairs per step")
    p.add_argument("--eval-frac", type=float, default=0.1, help="fraction of pairs held out for accuracy")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-len", type=int, help="tokens kept per conversation (its end); default the model's context")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ludus.cli.common import console
    from ludus.rewards.reward_model import RewardModel
    from ludus.train.reward_model import RMTrainConfig, check_out, read_preferences, save, train_reward_model

    check_out(args.out)
    pairs = read_preferences(args.data)
    config = RMTrainConfig(
        epochs=args.epochs,
        lr=args.lr,
        batch_size=args.batch_size,
        eval_frac=args.eval_frac,
        seed=args.seed,
        max_len=args.max_len,
    )
    model = RewardModel.create(args.model, max_len=args.max_len, seed=args.seed)
    console().print(
        f"[bold]ludus train-rm[/] {len(pairs)} pairs from {args.data}, model {args.model} ({model.backbone})"
    )

    def on_epoch(m: dict[str, Any]) -> None:
        held = "n/a" if m["eval_accuracy"] is None else f"{m['eval_accuracy']:.3f}"
        console().print(
            f"  epoch {m['epoch']:>3}  train loss {m['train_loss']:.4f}  train accuracy {m['train_accuracy']:.3f}  "
            f"held-out accuracy {held}"
        )

    result = train_reward_model(pairs, model, config, on_epoch=on_epoch)
    out = save(result, args.out)
    m = result.metrics
    held = (
        "no held-out pairs (--eval-frac 0)"
        if m["eval_accuracy"] is None
        else f"held-out pair accuracy {m['eval_accuracy']:.3f} ({m['eval_pairs']} pairs)"
    )
    print(f"{held}; train loss {m['train_loss']:.4f}; {m['pairs_per_s']:.0f} pairs/s; saved {out}")
    return 0
