"""Reward-model training: Ludus (``ludus.train.reward_model``) beside TRL's ``RewardTrainer``, same model, same data.

Both train a one-label sequence-classification head on the same tiny transformers Llama
(the tests' ``build_hf_checkpoint``: a byte-level BPE tokenizer and a chat template, nothing downloaded),
from the same initial weights, on the same conversational preference pairs, with the same
epochs, batch size, learning rate and optimizer (AdamW, constant rate, no warm-up, gradient
clipping at 1). Reported: training throughput (pairs per second of training loop, data
preparation excluded) and held-out pair accuracy, each measured by the same function on the
trained model; then the ratios Ludus / TRL.

The preference: a reply in lower case over the same kind of reply shouted in capitals, with
a tenth of the labels flipped (a rater's noise), so the best possible accuracy is about 0.9.

    python benchmarks/reward_model.py                 # about a minute or two on 2 cores
    python benchmarks/reward_model.py --pairs 4000 --epochs 2
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support import build_hf_checkpoint  # noqa: E402 - the tests' tiny Llama, made without a download

WORDS = "apple river stone cloud maple tiger lemon otter piano quilt robin sugar amber cedar delta ember".split()


def preference_rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b, c = rng.sample(WORDS, 3)
        good, bad = f"{b} and {c}", f"{b.upper()} and {c.upper()}"
        if rng.random() < 0.1:  # rater noise
            good, bad = bad, good
        rows.append(
            {
                "prompt": [{"role": "user", "content": f"name two things like a {a}"}],
                "chosen": [{"role": "assistant", "content": good}],
                "rejected": [{"role": "assistant", "content": bad}],
            }
        )
    return rows


def run_ludus(checkpoint: Path, train: list[dict], held_out: list[dict], args: argparse.Namespace) -> dict:
    import torch

    from ludus.rewards.reward_model import RewardModel
    from ludus.train.reward_model import RMTrainConfig, evaluate, preference_from_row, train_reward_model

    pairs = [preference_from_row(r, f"row {i}") for i, r in enumerate(train)]
    torch.manual_seed(args.seed)
    model = RewardModel.create(f"hf:{checkpoint}", max_len=args.max_len, seed=args.seed)
    config = RMTrainConfig(epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, eval_frac=0.0, seed=args.seed)
    # eval_frac 0: the held-out pairs are the benchmark's own, scored below for both trainers alike
    result = train_reward_model(pairs, model, config)
    accuracy = evaluate(model, [preference_from_row(r, f"held-out {i}") for i, r in enumerate(held_out)])
    return {"pairs_per_s": result.metrics["pairs_per_s"], "accuracy": accuracy["eval_accuracy"]}


def run_trl(checkpoint: Path, train: list[dict], held_out: list[dict], args: argparse.Namespace) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, TrainerCallback
    from trl import RewardConfig, RewardTrainer

    from ludus.rewards.reward_model import RewardModel
    from ludus.train.reward_model import evaluate, preference_from_row

    torch.manual_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForSequenceClassification.from_pretrained(checkpoint, num_labels=1)
    model.config.pad_token_id = tokenizer.pad_token_id

    class Clock(TrainerCallback):  # the training loop only: TRL tokenizes the dataset before it starts
        def on_train_begin(self, *a, **k):
            self.start = time.perf_counter()

        def on_train_end(self, *a, **k):
            self.seconds = time.perf_counter() - self.start

    clock = Clock()
    config = RewardConfig(
        output_dir=tempfile.mkdtemp(),
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        max_length=args.max_len,
        seed=args.seed,
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = RewardTrainer(
        model=model,
        args=config,
        train_dataset=Dataset.from_list(train),
        processing_class=tokenizer,
        callbacks=[clock],
    )
    trainer.train()
    scored = RewardModel("hf", trainer.model.eval(), tokenizer, args.max_len)  # the same held-out scoring as Ludus
    scored.tokenizer.padding_side, scored.tokenizer.truncation_side = "right", "left"
    accuracy = evaluate(scored, [preference_from_row(r, f"held-out {i}") for i, r in enumerate(held_out)])
    return {"pairs_per_s": args.epochs * len(train) / clock.seconds, "accuracy": accuracy["eval_accuracy"]}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3000)
    parser.add_argument("--held-out", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--max-len", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: all cores)")
    args = parser.parse_args(argv)

    import datasets
    import torch
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    datasets.disable_progress_bars()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    rows = preference_rows(args.pairs + args.held_out, args.seed)
    train, held_out = rows[: args.pairs], rows[args.pairs :]
    checkpoint = build_hf_checkpoint(Path(tempfile.mkdtemp()) / "llama", context=128, head_dim=16)  # hidden 64
    print(
        f"{args.pairs} training pairs, {args.held_out} held out; {args.epochs} epochs of batch {args.batch_size}, "
        f"lr {args.lr}; a 2-layer Llama (hidden 64); torch threads {torch.get_num_threads()}"
    )
    results = {"ludus": run_ludus(checkpoint, train, held_out, args), "trl": run_trl(checkpoint, train, held_out, args)}
    for name, r in results.items():
        print(f"  {name:<6} {r['pairs_per_s']:8.0f} pairs/s   held-out accuracy {r['accuracy']:.3f}")
    ratios = {
        "throughput": results["ludus"]["pairs_per_s"] / results["trl"]["pairs_per_s"],
        "accuracy": results["ludus"]["accuracy"] / results["trl"]["accuracy"],
    }
    print(f"  ludus / trl: throughput ×{ratios['throughput']:.2f}, accuracy ×{ratios['accuracy']:.3f}")
    return {**results, "ratios": ratios}


if __name__ == "__main__":
    main()
