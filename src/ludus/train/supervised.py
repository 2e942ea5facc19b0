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
import math
import os
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ludus.core.cache import cache_dir
from ludus.core.env import Env, cycled_task
from ludus.core.types import Message
from ludus.policies.base import TrainablePolicy
from ludus.policies.tiny import ByteTokenizer, TinyConfig, TinyPolicy
from ludus.train.config import ConfigError, TrainConfig

if TYPE_CHECKING:
    from ludus.train.curriculum import Arm

# the warm start reads an endless train stream from here on, a part RL does not reach; a finite
# train split (a task file) it reads round and round from wherever this falls in it
WARMSTART_TASK_OFFSET = 10_000_000


def reference_batch(envs: Env | Sequence[Env], indices: range) -> tuple[list[list[Message]], list[str]]:
    """Prompts (as the policy's conversations) and reference replies for train tasks ``indices``;
    with several environments (a mixture, a curriculum's levels) task ``i`` comes from the
    ``i mod n``-th, so every batch shows them all. Only the train split is read: the warm start
    never sees a held-out task."""
    envs = [envs] if isinstance(envs, Env) else list(envs)
    sources = [env.task_source("train") for env in envs]
    conversations, replies = [], []
    for i in indices:
        env = envs[i % len(envs)]
        task = cycled_task(sources[i % len(envs)], i // len(envs))
        example = env.reference_example(task, seed=i)
        if example is None:
            raise ValueError(
                f"environment {env.name!r} gives no reference answer for task {task.id}; "
                "supervised warm-start needs one (set warmstart_steps: 0 to skip it)"
            )
        conversations.append(example[0])
        replies.append(example[1])
    return conversations, replies


CONTEXT_SAMPLE = 32  # tasks of each split, and warm-start reference answers, that size the context
AUTO_CONTEXT_MAX = 512  # the longest context chosen unasked: past it a warm start on a CPU takes hours


def fit_context(
    config: TrainConfig, arms: Iterable[tuple[Arm, Env]], warmstart: Sequence[Env], log: Callable[[str], None]
) -> bool:
    """Fit the embedded model's context (``tiny.max_len``) to the run's prompts and replies before
    anything is generated: the default 64 tokens hold the default recipe's sums, not a task file's
    problems or an SQL schema. Unset, it is sized from the first tasks with a quarter to spare, up to
    ``AUTO_CONTEXT_MAX``; set, it is checked. Either failing is a :class:`ConfigError` that names
    the value to set. Returns whether it set ``max_len``: the config has changed."""
    if config.model != "tiny":
        return False
    default, given = TinyConfig().max_len, config.tiny.get("max_len")
    if given is not None and (isinstance(given, bool) or not isinstance(given, int) or given < 1):
        raise ConfigError(f"config field 'tiny': max_len must be a positive integer, got {given!r}")
    needed, longest = context_needed(config, arms, warmstart)
    fitting = max(default, 1 << math.ceil(math.log2(max(needed, 1) * 1.25)))
    advice = f"set tiny: {{max_len: {fitting}}} (`ludus train --tiny '{{max_len: {fitting}}}'`)"
    if given is not None:
        if given < needed:
            raise ConfigError(f"config field 'tiny': max_len {given} cannot hold {longest}; {advice}")
        return False
    if needed <= default:
        return False
    if needed > AUTO_CONTEXT_MAX:
        raise ConfigError(
            f"the embedded model's context ({default} tokens) cannot hold {longest}, and Ludus lengthens it by "
            f"itself only up to {AUTO_CONTEXT_MAX} tokens (a longer one makes the warm start take hours on a CPU): "
            f"{advice} to train it anyway, or train a transformers model (model: hf:PATH, docs/models.md)"
        )
    config.tiny = {**config.tiny, "max_len": min(fitting, AUTO_CONTEXT_MAX)}
    log(
        f"the embedded model's context is {config.tiny['max_len']} tokens, sized to hold {longest}; tiny: max_len sets it"
    )
    return True


def context_needed(config: TrainConfig, arms: Iterable[tuple[Arm, Env]], warmstart: Sequence[Env]) -> tuple[int, str]:
    """The most tokens one sequence of the run takes as far as the first ``CONTEXT_SAMPLE`` tasks
    of each arm's splits (a prompt and ``max_tokens``, read in the arm's environment given with
    it) and of the warm start (a reference turn's prompt, a later turn's too, and the longer of its
    reference answer and ``max_tokens``) show, and what it was. A multi-turn episode's later turns are longer still:
    what they add (tool results) is not known before they are played."""
    tokenizer = ByteTokenizer()
    longest = (0, "")

    def measure(prompt: list[Message], reply: int, what: str) -> None:
        nonlocal longest
        tokens = len(tokenizer.render(prompt))
        if tokens + reply > longest[0]:
            longest = (tokens + reply, f"{what} ({tokens} prompt + {reply} reply tokens)")

    for arm, env in arms:
        held_out = arm.eval_tasks[:CONTEXT_SAMPLE]
        for seed in range(CONTEXT_SAMPLE + len(held_out)):
            try:
                task = arm.task(seed) if seed < CONTEXT_SAMPLE else held_out[seed - CONTEXT_SAMPLE]
                messages = env.reset(task, seed=seed).messages
            except Exception:  # noqa: BLE001, S112 - a task that cannot be read or started: the run reports it
                continue
            measure(messages, config.max_tokens, f"{arm.key}'s prompts with max_tokens {config.max_tokens}")
    if warmstart:
        start = WARMSTART_TASK_OFFSET
        conversations, replies = reference_batch(warmstart, range(start, start + CONTEXT_SAMPLE))
        for conversation, reply in zip(conversations, replies, strict=True):  # RL answers them in max_tokens
            measure(
                conversation, max(len(tokenizer.encode(reply)) + 1, config.max_tokens), "a warm-start reference turn"
            )
    return longest


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
        "recipe": 3,
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
