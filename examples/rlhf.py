"""RLHF end to end on the embedded tiny model: preferences → a reward model → GRPO on its reward,
and where optimising the learned proxy stops improving the true goal (reward over-optimisation).

1. **Preferences from a hidden true metric.** For arithmetic prompts (``37+45=``), the base
   model's sampled answer and the reference answer are compared by a metric the learner never
   sees (:func:`true_metric`: half for the sum's last digit, half for the whole sum). The better
   one is ``chosen``; a tie is no preference.
2. **``ludus train-rm``** on those pairs, from the base policy's weights (a fresh tiny model
   cannot learn to check sums from preferences in minutes); the held-out pair accuracy is printed.
3. **GRPO on the reward model.** ``ludus.train`` with the arithmetic environment's grader
   replaced by a rubric: the reward model is the reward (``rm:DIR``); the true metric and the
   environment's own grade (the exact sum) are measured beside it with weight 0, and the trainer
   logs all three every step as ``reward/rm``, ``reward/true`` and ``reward/exact``.
4. **The plot** (``rlhf_overoptimisation.png`` in the work folder, or ``--plot PATH``): proxy and
   true reward over training; the step where the true metric peaks while the proxy still climbs is
   where over-optimisation starts.

    python examples/rlhf.py                    # about 12 minutes on a 2-core CPU
    python examples/rlhf.py --rl-minutes 3     # a quicker look
    python examples/rlhf.py --plot docs/images/rlhf_overoptimisation.png   # the docs' figure, from the repository
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from ludus.core.types import Task

ENV = {"digits": 2, "ops": "+"}  # the default recipe's tasks; the environment's own grade is the exact sum
PREFERENCE_OFFSET = 20_000_000  # preference prompts come from a part of the train stream RL never reaches


def true_metric(task: Task, completion: str) -> float:
    """The hidden goal: half for the sum's last digit, half for the whole sum."""
    reply, answer = completion.strip(), str(task.answer)
    return 0.5 * (reply[-1:] == answer[-1:]) + 0.5 * (reply == answer)


def preferences(base: Path, pairs: int, seed: int) -> list[dict]:
    """For each prompt, the reference answer against the base model's sampled answer, ranked by
    the hidden true metric; a tie (a right sample) is no preference and is dropped."""
    from ludus.core.registry import make
    from ludus.policies import SamplingParams, load_policy

    env, policy = make("arithmetic", **ENV), load_policy(str(base))
    tasks = env.task_source("train")
    rows: list[dict] = []
    generator = torch.Generator().manual_seed(seed)
    index = PREFERENCE_OFFSET
    while len(rows) < pairs:
        batch = [tasks.get(index + i) for i in range(64)]
        index += 64
        conversations = [env.reset(t, seed=0).messages for t in batch]
        samples = policy.generate(conversations, SamplingParams(temperature=1.0, max_tokens=6), generator=generator)
        for task, sample in zip(batch, samples, strict=True):
            reference = str(task.answer)
            if true_metric(task, reference) > true_metric(task, sample.text):
                rows.append({"prompt": task.prompt, "chosen": reference, "rejected": sample.text})
    return rows[:pairs]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=8000, help="preference pairs to generate")
    parser.add_argument("--rm-epochs", type=int, default=8)
    parser.add_argument("--rl-minutes", type=float, default=9.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--warmstart-steps", type=int, default=None,
        help="supervised steps that make the base model (default: the default recipe's; fewer: a weaker base, quicker)",
    )  # fmt: skip
    parser.add_argument("--out", default=None, help="work folder (default: a temporary one)")
    parser.add_argument("--plot", default=None, help="where to save the plot (default: in the work folder)")
    args = parser.parse_args(argv)

    from ludus.cli import main as ludus
    from ludus.core.registry import make
    from ludus.train import TrainConfig, Trainer
    from ludus.train.supervised import base_model_recipe, make_base_model

    out = Path(args.out or tempfile.mkdtemp(prefix="ludus-rlhf-"))
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    # ---- 1. preferences from the hidden true metric -----------------------------------------
    config = TrainConfig(seed=args.seed)  # the default recipe: its cached warm-started base model
    if args.warmstart_steps is not None:
        config.warmstart_steps = args.warmstart_steps
    _, base, _ = make_base_model(make(config.env, **config.env_args), base_model_recipe(config))
    rows = preferences(base, args.pairs, args.seed)
    data = out / "prefs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"1. {len(rows)} preference pairs ({time.perf_counter() - started:.0f} s)")

    # ---- 2. the reward model ----------------------------------------------------------------
    rm_dir = out / "rm"
    code = ludus(
        ["train-rm", "--data", str(data), "--model", str(base), "--out", str(rm_dir),
         "--epochs", str(args.rm_epochs), "--lr", "5e-4", "--seed", str(args.seed)]
    )  # fmt: skip
    if code:
        raise SystemExit(code)
    rm_metrics = json.loads((rm_dir / "metrics.json").read_text())
    print(
        f"2. reward model: held-out pair accuracy {rm_metrics['eval_accuracy']:.3f} ({time.perf_counter() - started:.0f} s)"
    )

    # ---- 3. GRPO on the reward model, the true metric measured beside it ----------------------
    rubric = [
        # wait_ms 0: score whatever has arrived at once; calls that come while a batch runs form the next one
        {"function": "rm", "options": {"path": str(rm_dir), "wait_ms": 0}, "name": "rm"},
        # weight 0: measured, not rewarded. This file is importable as `rlhf` (Python puts a script's folder on sys.path)
        {"function": f"{Path(__file__).stem}:true_metric", "name": "true", "weight": 0},
        {"function": "env", "name": "exact", "weight": 0},
    ]
    rl = TrainConfig(
        seed=args.seed,
        model=str(base),  # the base the preferences were sampled from and the reward model was trained from
        env_args={**ENV, "rubric": rubric},
        time_limit_min=args.rl_minutes,
        runs_dir=str(out),
        name="rl",
        eval_every=10_000,  # held-out accuracy would count the rubric's status; the true metric is logged per step
        eval_size=50,
        checkpoint_every=10_000,
    )
    result = Trainer.create(rl, log=lambda _: None).run()
    print(f"3. GRPO on the reward model ({time.perf_counter() - started:.0f} s)")

    # ---- 4. proxy vs true ---------------------------------------------------------------------
    summary = {"pairs": len(rows), "rm_eval_accuracy": rm_metrics["eval_accuracy"]}
    plot = Path(args.plot) if args.plot else out / "rlhf_overoptimisation.png"
    summary |= report(result.run_dir, plot)
    summary["plot"] = str(plot)
    summary["minutes"] = (time.perf_counter() - started) / 60
    print(json.dumps(summary, indent=2))
    return summary


def report(run_dir: Path, plot: Path, window: int = 25) -> dict:
    """Proxy, true metric and exact-sum rate per step (moving averages over ``window`` steps: one
    step is 256 samples, noisy), and the plot. Over-optimisation starts at the *knee*: the step
    where the true metric has made 90% of its gain; past it the proxy keeps climbing, the truth does not."""
    from ludus.train.run_folder import read_jsonl

    steps = [m for m in read_jsonl(run_dir / "metrics.jsonl") if "reward/rm" in m]
    x = [m["step"] for m in steps]
    curves = {name: _moving_average([m[f"reward/{name}"] for m in steps], window) for name in ("rm", "true", "exact")}
    first = min(window, len(x)) - 1  # the first full window
    true = curves["true"]
    knee = next(i for i in range(first, len(x)) if true[i] >= true[first] + 0.9 * (max(true[first:]) - true[first]))
    summary = {"rl_steps": len(x), "knee_step": x[knee]}
    for name, curve in curves.items():
        summary |= {f"{name}_start": curve[first], f"{name}_at_knee": curve[knee], f"{name}_end": curve[-1]}

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    labels = {"rm": "proxy: the reward model", "true": "true metric (hidden)", "exact": "exact sums (env grade)"}
    for (name, curve), colour in zip(curves.items(), ("tab:blue", "tab:orange", "tab:green"), strict=True):
        ax.plot(x, [m[f"reward/{name}"] for m in steps], color=colour, alpha=0.2)
        ax.plot(x, curve, color=colour, label=labels[name])
    ax.axvline(x[knee], color="grey", linestyle="--", label=f"the true metric stops improving (step {x[knee]})")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel(f"mean over the step's samples ({window}-step average)")
    ax.set_title("RLHF on the tiny model: the learned proxy vs the true metric")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    plot.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(plot, dpi=120)
    return summary


def _moving_average(values: list[float], window: int) -> list[float]:
    """Each value averaged with up to ``window - 1`` before it."""
    out = []
    for i in range(len(values)):
        recent = values[max(0, i - window + 1) : i + 1]
        out.append(sum(recent) / len(recent))
    return out


if __name__ == "__main__":
    main()
