"""Ludus in verl: export a dataset, check the reward verl will load, and print the verl command.

    pip install 'ludus[verl]'          # in verl's environment
    python examples/verl_reward.py --env arithmetic --out data/

It writes ``train.parquet`` and ``eval.parquet`` in verl's layout, loads ``compute_score`` the way
verl does (``reward.custom_reward_function``) and grades each task's reference answer and an
empty reply with it — every reference must score 1 and every empty reply 0 — then prints the
overrides for ``python -m verl.trainer.main_ppo``. For environments with tools it also writes
the agent-loop config that registers ``LudusAgentLoop``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

AGENT_LOOP_CONFIG = "- name: ludus_agent\n  _target_: ludus.integrations.verl.LudusAgentLoop\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="arithmetic")
    parser.add_argument("--env-args", default="{}")
    parser.add_argument("--tasks", type=int, default=64, help="training tasks (evaluation: a quarter)")
    parser.add_argument("--out", default="data")
    args = parser.parse_args(argv)

    import pyarrow.parquet as pq
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    import ludus.integrations.verl as ludus_verl
    from ludus.cli import main as ludus
    from ludus.core.registry import make

    out = Path(args.out)
    for split, n in (("train", args.tasks), ("eval", max(1, args.tasks // 4))):
        ludus(["export", args.env, "--format", "verl", "--split", split, "-n", str(n), "--env-args", args.env_args,
               "-o", str(out / f"{split}.parquet"), "--force"])  # fmt: skip

    config = OmegaConf.create(
        {"reward": {"custom_reward_function": {"path": ludus_verl.__file__, "name": "compute_score"}}}
    )
    compute_score = get_custom_reward_fn(config)  # exactly how verl loads it
    env = make(args.env, **json.loads(args.env_args))
    rows = pq.read_table(out / "train.parquet").to_pylist()
    tools = "agent_name" in rows[0]
    checked = {"reference": 0, "empty": 0, "no_reference": 0}
    for row in rows:
        info = row["extra_info"]
        task = env.task_source(info["split"]).get(info["index"])
        reference = env.reference(task)
        if reference is None or tools:  # tool episodes are graded by the agent loop, not from text
            checked["no_reference"] += 1
            continue
        kw = {
            "data_source": row["data_source"],
            "ground_truth": row["reward_model"]["ground_truth"],
            "extra_info": info,
        }
        assert compute_score(solution_str=reference, **kw)["score"] == 1.0, f"reference failed on {task.id}"
        assert compute_score(solution_str="", **kw)["score"] == 0.0, f"an empty reply scored on {task.id}"
        checked["reference"] += 1
        checked["empty"] += 1
    overrides = [
        f"data.train_files={out / 'train.parquet'}",
        f"data.val_files={out / 'eval.parquet'}",
        f"reward.custom_reward_function.path={ludus_verl.__file__}",
        "reward.custom_reward_function.name=compute_score",
    ]
    if tools:
        (out / "agent_loops.yaml").write_text(AGENT_LOOP_CONFIG)
        overrides += [
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={out / 'agent_loops.yaml'}",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            "actor_rollout_ref.rollout.multi_turn.format=hermes",
        ]
    print(f"graded {checked['reference']} reference answers (all 1) and empty replies (all 0) through verl's loader")
    print("python -m verl.trainer.main_ppo " + " ".join(overrides) + " ...")
    return {"checked": checked, "overrides": overrides}


if __name__ == "__main__":
    main()
