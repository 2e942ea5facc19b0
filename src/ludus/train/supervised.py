"""Supervised training on reference answers, and the cached "base model" it makes.

Pure RL from random weights learns nothing in minutes: a random byte model almost never
writes a well-formed answer, so every reward is 0. Like a real LLM that was pre-trained
before RL, the embedded model first gets a *short* supervised warm-start on reference
answers — short enough that it is still mostly wrong (held-out accuracy ≲ 0.2) but has
learned the answer format. That base model is cached by its recipe, so ``ludus train`` makes
it once; ``ludus warmstart --force`` re-creates it. All later gains come from RL.

The same loop, run longer, is the "supervised on gold answers" baseline of the benchmarks.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from ludus.core.cache import cache_dir
from ludus.core.env import Env
from ludus.core.types import Message
from ludus.policies.base import TrainablePolicy
from ludus.policies.tiny import TinyConfig, TinyPolicy
from ludus.train.config import ConfigError, TrainConfig

WARMSTART_TASK_OFFSET = 10_000_000  # warm-start draws from a different part of the train stream than RL


def reference_batch(envs: Env | Sequence[Env], indices: range) -> tuple[list[list[Message]], list[str]]:
    """Prompts (as the policy's conversations) and reference replies for train tasks ``indices``;
    with several environments (a mixture, a curriculum's levels) task ``i`` comes from the
    ``i mod n``-th, so every batch shows them all."""
    envs = [envs] if isinstance(envs, Env) else list(envs)
    sources = [env.task_source("train") for env in envs]
    conversations, replies = [], []
    for i in indices:
        env = envs[i % len(envs)]
        task = sources[i % len(envs)].get(i // len(envs))
        reply = env.reference(task)
        if reply is None:
            raise ValueError(
                f"environment {env.name!r} gives no reference answer for task {task.id}; "
                "supervised warm-start needs one (set warmstart_steps: 0 to skip it)"
            )
        obs = env.reset(task, seed=i)
        conversations.append(obs.messages)
        replies.append(reply)
    return conversations, replies


def supervised_steps(
    policy: TinyPolicy,
    env: Env | Sequence[Env],
    *,
    steps: int,
    batch: int,
    lr: float,
    start_index: int = WARMSTART_TASK_OFFSET,
    time_limit_s: float | None = None,
    on_step: Callable[[int, float], None] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
) -> int:
    """Minimise the cross-entropy of reference replies (answer + end-of-sequence). Returns steps done.

    Pass an ``optimizer`` to continue training across calls without resetting Adam's moments."""
    tok = policy.tokenizer
    opt = optimizer or torch.optim.AdamW(policy.module.parameters(), lr=lr, weight_decay=0.0)
    policy.module.train()
    start = time.perf_counter()
    done = 0
    for step in range(steps):
        if time_limit_s is not None and time.perf_counter() - start >= time_limit_s:
            break
        lo = start_index + step * batch
        conversations, replies = reference_batch(env, range(lo, lo + batch))
        prompt_ids = [tok.render(c) for c in conversations]
        completion_ids = [tok.encode(r) + [tok.eos_id] for r in replies]
        logp, _ = policy.token_logprobs(prompt_ids, completion_ids)
        mask = torch.zeros_like(logp)
        for i, c in enumerate(completion_ids):
            mask[i, : len(c)] = 1
        loss = -(logp * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.module.parameters(), 1.0)
        opt.step()
        done = step + 1
        if on_step is not None:
            on_step(done, float(loss))
    return done


def base_model_recipe(config: TrainConfig) -> dict[str, Any]:
    """What makes a base model, and names its cache folder: the fields of ``config`` it depends on."""
    tasks = {"envs": config.envs} if config.envs else {}
    if config.curriculum:
        tasks["curriculum_levels"] = config.curriculum_levels or "all"
    return tasks | {
        "recipe": 2,
        "env": config.env,
        "env_args": config.env_args,
        "tiny": config.tiny,
        "seed": config.seed,
        "steps": config.warmstart_steps,
        "batch": config.warmstart_batch,
        "lr": config.warmstart_lr,
    }


def base_model_path(recipe: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir("base", digest)


def make_base_model(
    env: Env | Sequence[Env],
    recipe: dict[str, Any],
    *,
    force: bool = False,
    on_step: Callable[[int, float], None] | None = None,
) -> tuple[TrainablePolicy, Path, bool]:
    """Load the cached base model for ``recipe`` or create it. Returns (policy, folder, created)."""
    path = base_model_path(recipe)
    if path.exists() and not force:
        return TinyPolicy.load(path), path, False
    policy = TinyPolicy(TinyConfig(**recipe["tiny"]), seed=recipe["seed"])
    # One thread: CPU matmuls sum in a thread-count-dependent order, and the warm-start sits near a
    # phase change, so the same recipe must give the same base on a 2-core and a 16-core machine.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng():
            torch.manual_seed(recipe["seed"])
            supervised_steps(
                policy, env, steps=recipe["steps"], batch=recipe["batch"], lr=recipe["lr"], on_step=on_step
            )
    finally:
        torch.set_num_threads(threads)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    policy.save(tmp)
    (tmp / "recipe.json").write_text(json.dumps(recipe, indent=2, sort_keys=True))
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)
    return policy, path, True


def base_policy(config: TrainConfig, envs: Sequence[Env], log: Callable[[str], None]) -> TrainablePolicy:
    """The embedded model ``ludus train`` starts from: the cached base model of the config's
    warm-start recipe (made now from the reference answers of ``envs`` if missing), or fresh
    weights with ``warmstart_steps: 0``."""
    try:
        TinyConfig(**config.tiny)
    except TypeError as exc:
        raise ConfigError(f"config field 'tiny' has an unknown model setting: {exc}") from exc
    if config.warmstart_steps == 0:
        return TinyPolicy(TinyConfig(**config.tiny), seed=config.seed)
    policy, path, created = make_base_model(envs, base_model_recipe(config))
    log(f"{'created' if created else 'loaded cached'} base model {path}")
    return policy
