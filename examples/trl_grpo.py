"""GRPO with TRL on a Ludus environment: export its tasks, grade with Ludus, train two steps.

    pip install 'ludus[trl]'
    python examples/trl_grpo.py --model Qwen/Qwen2.5-0.5B-Instruct --env arithmetic --steps 50
    python examples/trl_grpo.py --model Qwen/Qwen2.5-0.5B-Instruct --env sql --steps 50   # tools: multi-turn

Single-turn environments are graded by ``LudusReward`` (a reward function); environments with
tools run through ``LudusEnvironment`` (TRL's ``environment_factory``). Either way the dataset
holds prompts and task names, and every reward comes from the environment's own grader.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a transformers model: hub id or local folder")
    parser.add_argument("--env", default="arithmetic", help="a Ludus environment (see `ludus envs`)")
    parser.add_argument("--env-args", default="{}", help="JSON arguments for the environment")
    parser.add_argument("--tasks", type=int, default=16, help="tasks in the dataset")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--max-completion-length", type=int, default=64)
    parser.add_argument("--out", default=None, help="output folder (default: a temporary one)")
    args = parser.parse_args(argv)

    import torch
    from datasets import load_dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from ludus.cli import main as ludus
    from ludus.core.registry import make
    from ludus.integrations.trl import LudusEnvironment, LudusReward

    out = Path(args.out or tempfile.mkdtemp(prefix="ludus-trl-"))
    data_file = out / f"{args.env}.parquet"
    # the same as: ludus export ENV -n N -o FILE --env-args JSON --force
    ludus(["export", args.env, "-n", str(args.tasks), "-o", str(data_file), "--env-args", args.env_args, "--force"])
    dataset = load_dataset("parquet", data_files=str(data_file))["train"]

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    tokenizer.padding_side = "left"
    config = GRPOConfig(
        output_dir=str(out / "run"),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=args.max_completion_length,
        max_steps=args.steps,
        learning_rate=1e-5,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=not torch.cuda.is_available(),
    )
    has_tools = bool(make(args.env, **json.loads(args.env_args)).tools())
    if has_tools:
        environment = LudusEnvironment(args.env, args.env_args)
        trainer = GRPOTrainer(
            model=args.model,
            reward_funcs=environment.reward,
            environment_factory=environment,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
        )
        statuses = environment.status
    else:
        reward = LudusReward()
        trainer = GRPOTrainer(
            model=args.model, reward_funcs=reward, args=config, train_dataset=dataset, processing_class=tokenizer
        )
        statuses = reward.status
    trainer.train()
    summary = {"steps": trainer.state.global_step, "statuses": dict(statuses.counts)}
    print(f"trained {summary['steps']} steps on {args.env}; graded: {summary['statuses']}")
    return summary


if __name__ == "__main__":
    main()
