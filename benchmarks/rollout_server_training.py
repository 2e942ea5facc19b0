"""Training with generation on vLLM (``--rollout-server``) against generation in the trainer's
process: same model, same task, same seed, same recipe, in one run (issue 14).

    python benchmarks/rollout_server_training.py                 # ~3 min; builds vLLM's venv once
    python benchmarks/rollout_server_training.py --steps 60 --push-hidden 1024

The model is the tests' tiny Llama (2 layers, hidden 128, heads of 32: vLLM's CPU attention
needs 32 or more), warm-started on the tests' ``digit-map`` task (the prompt ``a?`` answered by
the digit 3a mod 10) until it samples the right digit about a third of the time; RL then raises
that. Three runs from the same weights: generation in process (the anchor), on vLLM in lockstep
(sample, learn, push the weights, sample again) and on vLLM sampling one step ahead
(``max_staleness: 1``: vLLM samples while the learner learns). vLLM runs on this machine from the
venv ``scripts/vllm-venv`` builds, float32, ``--enforce-eager``; it is warmed up before timing.

Prints each run's RL steps per minute, its reward curve (mean reward per five steps), the
weight-push times, the ratios to the anchor, and the time to push a larger model's weights
(``--push-hidden``, 8 layers) to a second vLLM. Not a test: the figures depend on the machine:
here vLLM and the learner share two cores, which no real deployment does.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from ludus.core.registry import register  # noqa: E402
from ludus.core.types import Message  # noqa: E402
from ludus.policies.base import SamplingParams  # noqa: E402
from ludus.policies.hf import HFPolicy  # noqa: E402
from ludus.policies.rollout_server import RolloutServerPolicy  # noqa: E402
from ludus.train.config import load_config  # noqa: E402
from ludus.train.trainer import Trainer  # noqa: E402
from support import DigitMapEnv, VLLMServer, build_hf_checkpoint, vllm_python, warm_start_digits  # noqa: E402


def warm_up(server: VLLMServer, model: Path, folder: Path) -> None:
    """vLLM's first sampled request takes many seconds (one-time set-up): not part of any run."""
    learner = HFPolicy.load(model)
    client = RolloutServerPolicy(server.url, learner, weights_dir=folder)
    client.sync(learner)
    client.generate([[Message("user", "1?")]] * 4, SamplingParams(max_tokens=4))
    client.close()


def run(name: str, model: Path, runs: Path, args: argparse.Namespace, **extra: object) -> dict:
    config = load_config(
        overrides={
            "model": f"hf:{model}",
            "env": "digit-map",
            "env_args": {},
            "seed": 0,
            "steps": args.steps,
            "prompts_per_step": args.prompts,
            "group_size": 8,
            "max_tokens": 2,
            "temperature": 1.0,
            "lr": 1e-3,
            "lr_schedule": "constant",
            "entropy_coef": 0.0,
            "eval_size": 10,
            "eval_every": 0,
            "checkpoint_every": 0,
            "time_limit_min": 0,
            "threads": args.threads,
            "runs_dir": str(runs),
            "name": name,
            **extra,
        }
    )
    result = Trainer.create(config, log=lambda _: None).run()
    lines = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in lines if "reward/mean" in r]
    seconds = sum(r["step_time_s"] for r in train)
    rewards = [r["reward/mean"] for r in train]
    pushes = [r["rollout/push_s"] for r in train if "rollout/push_s" in r]
    return {
        "name": name,
        "steps_per_min": 60 * len(train) / seconds,
        "curve": [round(statistics.mean(rewards[i : i + 5]), 3) for i in range(0, len(rewards), 5)],
        "last5": statistics.mean(rewards[-5:]),
        "push_s": statistics.median(pushes) if pushes else None,
        "push_share": sum(pushes) / seconds if pushes else None,
        "divergent": sum(r.get("rollout/retokenize_divergent", 0) for r in train),
        "replies": sum(r.get("rollout/replies", 0) for r in train),
    }


def push_time(hidden: int, folder: Path, python: str) -> tuple[float, float, int]:
    """Median seconds to push a larger Llama's weights to a vLLM serving it (save + reload +
    reset + version tag), the save alone, and its parameter count."""
    from transformers import AutoConfig, AutoModelForCausalLM  # noqa: PLC0415

    base = build_hf_checkpoint(folder / "model", head_dim=hidden // 4)
    config = AutoConfig.from_pretrained(base)
    config.num_hidden_layers = 8  # deeper than the tests' 2
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(base)
    server = VLLMServer(python, base, folder / "vllm").start()
    try:
        learner = HFPolicy.load(base)
        client = RolloutServerPolicy(server.url, learner, weights_dir=folder / "weights")
        pushes, saves = [], []
        for version in range(6):
            learner.version = version
            start = time.perf_counter()
            learner.save_weights(folder / "save-only")
            saves.append(time.perf_counter() - start)
            pushes.append(client.sync(learner))
        client.close()
        return statistics.median(pushes[1:]), statistics.median(saves[1:]), sum(p.numel() for p in model.parameters())
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step (8 samples each)")
    parser.add_argument("--threads", type=int, default=1, help="the learner's torch threads (vLLM has its own)")
    parser.add_argument("--push-hidden", type=int, default=512, help="hidden size of the push-time model (0: skip)")
    parser.add_argument("--push-only", action="store_true", help="measure the larger model's push time only")
    args = parser.parse_args()
    register("digit-map", DigitMapEnv)
    folder = Path(tempfile.mkdtemp(prefix="ludus-bench-rollout-"))
    python = vllm_python()
    try:
        if not args.push_only:
            compare(args, folder, python)
        if args.push_hidden:
            push, save, params = push_time(args.push_hidden, folder / "push", python)
            mb = params * 4 / 2**20
            print(
                f"\nweight push of a {params / 1e6:.1f} M-parameter Llama ({mb:.0f} MiB float32) to vLLM: "
                f"{push * 1000:.0f} ms median ({save * 1000:.0f} ms of it writing safetensors), {mb / push:.0f} MiB/s"
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def compare(args: argparse.Namespace, folder: Path, python: str) -> None:
    """The three runs from the same warm-started weights, and their table."""
    base = build_hf_checkpoint(folder / "base", head_dim=32)
    model = warm_start_digits(base, folder / "warm")
    server = VLLMServer(python, base, folder / "vllm").start()
    try:
        warm_up(server, model, folder / "warm-up")
        results = [
            run("in-process", model, folder / "runs", args),
            run("vllm lockstep", model, folder / "runs", args, rollout_server=server.url),
            run("vllm max_staleness 1", model, folder / "runs", args, rollout_server=server.url, max_staleness=1),
        ]
    finally:
        server.stop()
    anchor = results[0]
    print(f"\n{args.steps} RL steps of {args.prompts} prompts × 8 samples, digit-map, tiny Llama, seed 0")
    print(
        f"{'run':<22} {'steps/min':>9} {'× anchor':>8} {'reward, last 5':>14} {'push (median)':>13} {'push share':>10}"
    )
    for r in results:
        push = f"{r['push_s'] * 1000:.0f} ms" if r["push_s"] is not None else "-"
        share = f"{r['push_share']:.1%}" if r["push_share"] is not None else "-"
        ratio = r["steps_per_min"] / anchor["steps_per_min"]
        line = f"{r['name']:<22} {r['steps_per_min']:>9.1f} {ratio:>8.2f} {r['last5']:>14.3f} {push:>13} {share:>10}"
        print(line)
    print("\nreward per five steps:")
    for r in results:
        print(f"  {r['name']:<22} {' '.join(f'{x:.2f}' for x in r['curve'])}")
    for r in results[1:]:
        print(f"  {r['name']}: {r['divergent']} of {r['replies']} replies would tokenise otherwise from their text")


if __name__ == "__main__":
    main()
