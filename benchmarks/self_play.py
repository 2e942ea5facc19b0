"""Self-play against training on a fixed scripted player, on the embedded default (issue 35).

For each seed, two runs from the same cached base model, at equal steps, on one game (default:
nim with two heaps of up to five; ``view: state``: each turn a short prompt, which the embedded
model's context holds):

* **fixed**: every game against the scripted ``greedy`` player (medium strength: it wins at once
  when it can and blocks a win in one);
* **self-play**: ``self_play: true`` — the learner plays itself (both seats trained) and a pool
  of its past checkpoints.

Both are evaluated the same way every ``--eval-every`` steps: greedy decoding on the same
held-out starts against ``greedy`` (the fixed run's own evaluation; the self-play run's
``eval/vs_greedy``). Printed per seed: the score against greedy (a win 1, a draw 1/2) at the
end and at its best, the win and draw rates, and the self-play learner's Elo rating at each
evaluation; then the means over seeds and whether the mean rating rose at every evaluation.
``--plot`` writes the ratings figure.

Not a test: the seeds' base models are made first, side by side, and cached; then the two arms
of a seed run side by side (one core each), about 20-30 minutes a seed.

    python benchmarks/self_play.py --seeds 0 1 2 --plot benchmarks/self_play_ratings.png
    python benchmarks/self_play.py --env tictactoe --env-args '{}' --seeds 0
    python benchmarks/self_play.py --env tictactoe --env-args '{}' --league greedy --pool-sampling rating --warmstart-steps 1500
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ludus.core.registry import make
from ludus.train.selfplay import calibrate, performance

ENV_ARGS = {"view": "state", "winnable": False}  # added to --env-args
RECIPE = {  # one recipe for both arms: only self_play differs
    "max_tokens": 24,  # a move tag is 14-17 characters (nim: <move>1 2</move>); room for a stray one
    "tiny": {"max_len": 256},
    # a base that plays legal moves: 180 warm-start steps (the arithmetic default) left nim's base
    # losing 0.92 of its games to random by illegal moves; 500 steps: 0.375 score vs random, 0.41 vs greedy
    "warmstart_steps": 500,
    # the default lr and entropy bonus (6e-4, 0.05: tuned on arithmetic) were unstable here: self-play's
    # entropy blew up (0.02 -> 0.95 by step 100: zero-sum groups cancel, the bonus does not) and training
    # against greedy collapsed to one move (entropy 0.002, 97 % of groups without variance)
    "lr": 2e-4,
    "entropy_coef": 0.01,
    "prompts_per_step": 8,
    "group_size": 8,
    "time_limit_min": 0,
    "threads": 1,
    "checkpoint_every": 0,
}


def launch(name: str, seed: int, args: argparse.Namespace, self_play: bool) -> subprocess.Popen:
    config = {
        **RECIPE,
        "warmstart_steps": args.warmstart_steps,
        "env": args.env,
        "env_args": {**json.loads(args.env_args), **ENV_ARGS},
        "seed": seed,
        "steps": args.steps,
        "eval_every": args.eval_every,
        "eval_size": args.eval_size,
        "runs_dir": str(args.runs),
        "name": name,
    }
    if self_play:
        config |= {"self_play": True, "pool_every": args.pool_every, "pool_size": args.pool_size}
        config |= {"pool_scripted": args.league, "pool_sampling": args.pool_sampling}
    path = Path(args.runs) / f"{name}.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    log = open(Path(args.runs) / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
    command = [sys.executable, "-c", "import sys; from ludus.cli import main; sys.exit(main(sys.argv[1:]))"]
    return subprocess.Popen([*command, "train", "--config", str(path)], stdout=log, stderr=log)


def bases(args: argparse.Namespace) -> None:
    """Each seed's base model first, all side by side (a warm start uses one core), once, so that
    the two arms of a seed do not both make it; the cache keeps them for later runs."""
    warm_only = argparse.Namespace(**{**vars(args), "steps": 0})
    warm = {seed: launch(f"warm-{seed}", seed, warm_only, self_play=False) for seed in args.seeds}
    for seed, proc in warm.items():
        if proc.wait():
            raise SystemExit(f"the base model of seed {seed} failed: see {args.runs}/warm-{seed}.log")


def train(seed: int, args: argparse.Namespace) -> None:
    """Both arms of a seed side by side, from its base."""
    arms = {"fixed": launch(f"fixed-{seed}", seed, args, False), "self-play": launch(f"self-{seed}", seed, args, True)}
    for name, proc in arms.items():
        if proc.wait():
            raise SystemExit(f"the {name} run of seed {seed} failed: see {args.runs}")


def evals(run: Path) -> list[dict]:
    return [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "eval/accuracy" in r]


def measured(record: dict, anchors: dict[str, float]) -> float:
    """The learner's rating at an evaluation as train/selfplay.py measures it, from the logged games
    against each scripted player (win, draw and loss rates over ``games``)."""
    results = []
    for player, rating in anchors.items():
        n = int(record[f"eval/vs_{player}/games"])
        wins, draws = round(record[f"eval/vs_{player}/win_rate"] * n), round(record[f"eval/vs_{player}/draw_rate"] * n)
        results += [(rating, 1.0)] * wins + [(rating, 0.5)] * draws + [(rating, 0.0)] * (n - wins - draws)
    return performance(results)


def vs_greedy(record: dict, self_play: bool) -> tuple[float, float, float]:
    """(score, win rate, draw rate) against greedy from an evaluation record."""
    if self_play:
        return record["eval/vs_greedy/score"], record["eval/vs_greedy/win_rate"], record["eval/vs_greedy/draw_rate"]
    # the fixed run's own evaluation is against greedy: reward = win 1, draw draw_reward (1/2)
    return (
        record["eval/reward"],
        record["eval/accuracy"],
        round(2 * (record["eval/reward"] - record["eval/accuracy"]), 4),
    )


def headroom(env, size: int) -> str:
    """How well anyone can do against greedy on the held-out starts: each scripted player's score
    in the learner's seat, and the share of starts from which a win can be forced against greedy's
    (deterministic) replies — the most any policy can win."""
    import random

    tasks = [env.task_source("eval").get(i) for i in range(size)]
    scores = {}
    for name, player in sorted(env.game.players().items()):
        total = 0.0
        for task in tasks:
            setup = env.setup_of(task)
            state = env.start_state(setup)
            while not env.game.terminal(state):
                if env.game.to_move(state) == setup.seat:
                    state = env.game.apply(state, player(state, random.Random(f"{task.id}:{state!r}")))
                else:
                    state = env.game.apply(state, env.opponent_move(setup, state))
            total += env.game.returns(state)[setup.seat]
        scores[name] = total / len(tasks)
    winnable = sum(env.oracle_line(env.setup_of(t)) is not None for t in tasks) / len(tasks)
    played = ", ".join(f"{k} {v:.3f}" for k, v in scores.items())
    return f"against greedy on these {size} held-out starts: {played}; a forced win exists from {winnable:.3f} of them"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--env", default="nim", help="a game of the games family (default nim)")
    p.add_argument("--env-args", default='{"heaps": 2, "max_heap": 5}', help="its arguments, as JSON")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--eval-every", type=int, default=25)
    p.add_argument("--eval-size", type=int, default=64)
    p.add_argument(
        "--warmstart-steps", type=int, default=RECIPE["warmstart_steps"], help="supervised steps of each base"
    )
    p.add_argument("--pool-every", type=int, default=10)
    p.add_argument("--pool-size", type=int, default=5)
    p.add_argument(
        "--league", nargs="*", default=[], help="scripted players kept in the self-play pool (pool_scripted)"
    )
    p.add_argument(
        "--pool-sampling", choices=["recency", "rating"], default="recency", help="how pool members are drawn"
    )
    p.add_argument("--runs", type=Path, default=None, help="where the run folders go (default: a temporary folder)")
    p.add_argument("--plot", type=Path, help="write the ratings figure here (PNG)")
    p.add_argument("--report", action="store_true", help="only report the runs already in --runs (no training)")
    args = p.parse_args()
    args.runs = args.runs or Path(tempfile.mkdtemp(prefix="ludus-self-play-"))
    args.runs.mkdir(parents=True, exist_ok=True)
    print(f"{args.env} {args.env_args}: runs in {args.runs}; {args.steps} steps, "
          f"{RECIPE['prompts_per_step']}x{RECIPE['group_size']} games a step")  # fmt: skip
    rows = []
    env_args = {**json.loads(args.env_args), **ENV_ARGS}
    anchors = calibrate(make(args.env, **env_args))  # as train/selfplay.py fixes them
    print("scripted players' ratings: " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(anchors.items())))
    print(headroom(make(args.env, **env_args), args.eval_size))
    if not args.report:
        bases(args)
    for seed in args.seeds:
        if not args.report:
            train(seed, args)
        fixed, play = evals(args.runs / f"fixed-{seed}"), evals(args.runs / f"self-{seed}")
        both = sorted({r["step"] for r in fixed} & {r["step"] for r in play})  # equal steps (a run cut short)
        fixed, play = [r for r in fixed if r["step"] in both], [r for r in play if r["step"] in both]
        row = {"seed": seed, "steps": both}
        for arm, records, is_self in (("fixed", fixed, False), ("self-play", play, True)):
            scores = [vs_greedy(r, is_self) for r in records]
            row[arm] = {"score": [s[0] for s in scores], "win": [s[1] for s in scores], "draw": [s[2] for s in scores]}
        row["rating"] = [measured(r, anchors) for r in play]
        row["ratings"] = {k.removeprefix("rating/"): v for k, v in play[-1].items() if k.startswith("rating/")}
        rows.append(row)
        print(f"\nseed {seed} (vs greedy on {args.eval_size} held-out starts; score = win + draw/2)")
        print(
            f"{'step':>6} {'fixed score':>12} {'win':>6} {'draw':>6} {'self score':>11} {'win':>6} {'draw':>6} {'Elo':>7}"
        )
        for i, step in enumerate(row["steps"]):
            f, s = row["fixed"], row["self-play"]
            print(f"{step:>6} {f['score'][i]:>12.3f} {f['win'][i]:>6.3f} {f['draw'][i]:>6.3f} "
                  f"{s['score'][i]:>11.3f} {s['win'][i]:>6.3f} {s['draw'][i]:>6.3f} {row['rating'][i]:>7.1f}")  # fmt: skip
        print("final ratings: " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(row["ratings"].items())))
    print("\nmeans over seeds")
    for arm in ("fixed", "self-play"):
        final = statistics.mean(r[arm]["score"][-1] for r in rows)
        best = statistics.mean(max(r[arm]["score"]) for r in rows)
        gain = statistics.mean(r[arm]["score"][-1] - r[arm]["score"][0] for r in rows)
        print(f"  {arm:>9}: final score vs greedy {final:.3f}, best {best:.3f}, gain from step 0 {gain:+.3f}")
    wins = sum(r["self-play"]["score"][-1] > r["fixed"]["score"][-1] for r in rows)
    print(f"  self-play ahead of fixed at the end on {wins} of {len(rows)} seeds")
    mean_rating = [statistics.mean(r["rating"][i] for r in rows) for i in range(min(len(r["rating"]) for r in rows))]
    rises = sum(b >= a for a, b in zip(mean_rating, mean_rating[1:], strict=False))
    print("  mean learner Elo by evaluation: " + " ".join(f"{x:.0f}" for x in mean_rating))
    print(f"  it rose (or held) at {rises} of {len(mean_rating) - 1} evaluations")
    if args.plot:
        plot(rows, mean_rating, args.plot)
        print(f"  ratings figure: {args.plot}")


def plot(rows: list[dict], mean_rating: list[float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for r in rows:
        left.plot(r["steps"], r["rating"], alpha=0.5, label=f"seed {r['seed']}")
        right.plot(r["steps"], r["self-play"]["score"], color="tab:blue", alpha=0.5)
        right.plot(r["steps"], r["fixed"]["score"], color="tab:orange", alpha=0.5)
    left.plot(rows[0]["steps"][: len(mean_rating)], mean_rating, color="black", linewidth=2, label="mean")
    left.axhline(1000, color="grey", linestyle=":", label="random (anchor)")
    left.set(title="self-play learner's Elo", xlabel="step", ylabel="Elo")
    left.legend(fontsize=8)
    right.set(title="score vs greedy (held-out; blue self-play, orange fixed)", xlabel="step", ylabel="win + draw/2")
    fig.tight_layout()
    fig.savefig(path, dpi=80)


if __name__ == "__main__":
    main()
