"""Training a reward model on preference pairs, top to bottom: from a JSONL file to a saved folder.

1. **Data** — each row a prompt with a chosen and a rejected reply (and an optional margin),
   in any of the forms TRL's reward trainer reads (:func:`read_preferences`).
2. **The split** — a seeded fraction of pairs held out for evaluation.
3. **The loss** — Bradley-Terry (Ouyang et al., 2022, InstructGPT; the margin from Llama 2):
   ``P(chosen ≻ rejected) = σ(r_c - r_r)``, so ``loss = -log σ(r_c - r_r - margin)``
   (:func:`bradley_terry_loss`).
4. **The loop** — epochs of shuffled minibatches, both replies of a pair in one forward pass,
   AdamW with gradient clipping.
5. **Evaluation** — pair accuracy (``r_c > r_r``, a tie counts half) and loss on the held-out pairs.
6. **Calibration** — mean and standard deviation of the rewards of the training replies,
   which map a raw reward to [0, 1] when the model is a rubric criterion (rewards/reward_model.py).
7. **Saving** — the model folder and its ``metrics.json``.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ludus.core.types import Message
from ludus.rewards.reward_model import RewardModel

Conversation = list[Message]


@dataclass(frozen=True)
class Preference:
    """One pair: the same prompt with the reply a rater preferred and the one they did not."""

    chosen: Conversation
    rejected: Conversation
    margin: float = 0.0


@dataclass
class RMTrainConfig:
    epochs: int = 3
    lr: float | None = None  # None: 5e-4 for the tiny backbone, 1e-5 for a pretrained transformers model
    batch_size: int = 32
    eval_frac: float = 0.1
    seed: int = 0
    max_len: int | None = None  # tokens per conversation (tiny: bytes); None: the model's context
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0


@dataclass
class RMResult:
    model: RewardModel
    metrics: dict[str, Any] = field(default_factory=dict)


# ---- 1. data -------------------------------------------------------------------------------
def read_preferences(path: str | Path) -> list[Preference]:
    """Preference pairs from a JSONL file. Each line is a JSON object with ``chosen`` and
    ``rejected`` and optionally ``prompt`` and ``margin``:

    * ``{"prompt": str, "chosen": str, "rejected": str}`` — explicit prompt;
    * ``{"chosen": str, "rejected": str}`` — implicit prompt: the longest common start of the two
      texts is the prompt (as TRL does);
    * conversational: ``chosen``/``rejected`` lists of ``{"role", "content"}`` messages, either whole
      conversations or the replies to a ``prompt`` that is itself a message list (or a string).

    A malformed line is a :class:`ValueError` naming the file and line."""
    path = Path(path)
    pairs = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: not valid JSON ({exc.msg}, column {exc.colno})") from None
            pairs.append(preference_from_row(row, where))
    if not pairs:
        raise ValueError(f"{path} has no preference pairs: expected JSON lines with 'chosen' and 'rejected'")
    return pairs


def preference_from_row(row: Any, where: str) -> Preference:
    """One JSONL row (any form :func:`read_preferences` reads) as a pair; ``where`` names it in errors."""
    if not isinstance(row, dict):
        raise ValueError(f"{where}: a row must be a JSON object, got {type(row).__name__}")
    missing = [k for k in ("chosen", "rejected") if k not in row]
    if missing:
        raise ValueError(f"{where}: missing {' and '.join(repr(k) for k in missing)} (keys: {sorted(row)})")
    margin = row.get("margin", 0.0)
    if isinstance(margin, bool) or not isinstance(margin, (int, float)):
        raise ValueError(f"{where}: 'margin' must be a number, got {margin!r}")
    chosen, rejected, prompt = row["chosen"], row["rejected"], row.get("prompt")
    if isinstance(chosen, str) and isinstance(rejected, str):
        if prompt is None:  # implicit prompt: what the two texts share
            n = next(
                (i for i, (a, b) in enumerate(zip(chosen, rejected, strict=False)) if a != b),
                min(len(chosen), len(rejected)),
            )
            prompt, chosen, rejected = chosen[:n], chosen[n:], rejected[n:]
        if not isinstance(prompt, str):
            raise ValueError(f"{where}: with text replies 'prompt' must be a string, got {type(prompt).__name__}")
        return Preference(_reply(prompt, chosen), _reply(prompt, rejected), float(margin))
    if isinstance(chosen, list) and isinstance(rejected, list):
        if isinstance(prompt, str):
            prompt = [{"role": "user", "content": prompt}]
        start = _messages(prompt or [], "prompt", where)
        return Preference(
            start + _messages(chosen, "chosen", where), start + _messages(rejected, "rejected", where), float(margin)
        )
    raise ValueError(
        f"{where}: 'chosen' and 'rejected' must both be strings or both be message lists, got "
        f"{type(chosen).__name__} and {type(rejected).__name__}"
    )


def _reply(prompt: str, reply: str) -> Conversation:
    return [Message("user", prompt), Message("assistant", reply)]


def _messages(items: Any, key: str, where: str) -> Conversation:
    if not isinstance(items, list) or not all(isinstance(m, dict) for m in items):
        raise ValueError(f"{where}: {key!r} must be a list of {{'role', 'content'}} objects")
    try:
        return [Message(str(m.get("role")), m.get("content") or "") for m in items]
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{where}: {key!r} has a bad message: {exc}") from None


# ---- 2. the split --------------------------------------------------------------------------
def split(pairs: Sequence[Preference], eval_frac: float, seed: int) -> tuple[list[Preference], list[Preference]]:
    """(train, held-out): a seeded shuffle, the last ``eval_frac`` held out (at least one pair if
    ``eval_frac > 0``, and at least one pair left to train on)."""
    if not 0 <= eval_frac < 1:
        raise ValueError(f"eval_frac must be in [0, 1), got {eval_frac}")
    order = list(pairs)
    random.Random(seed).shuffle(order)
    held = min(len(order) - 1, max(1, round(eval_frac * len(order)))) if eval_frac > 0 else 0
    return order[: len(order) - held], order[len(order) - held :]


# ---- 3. the loss ---------------------------------------------------------------------------
def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor, margin: torch.Tensor) -> torch.Tensor:
    """``-log σ(r_c - r_r - margin)``, averaged over pairs."""
    return -F.logsigmoid(chosen - rejected - margin).mean()


def pair_rewards(model: RewardModel, batch: Sequence[Preference]) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewards of the chosen and the rejected replies, from one forward pass over both."""
    rewards = model.rewards([p.chosen for p in batch] + [p.rejected for p in batch])
    return rewards[: len(batch)], rewards[len(batch) :]


# ---- 4. the loop ---------------------------------------------------------------------------
def train_reward_model(
    pairs: Sequence[Preference],
    model: RewardModel,
    config: RMTrainConfig,
    *,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
) -> RMResult:
    """Train ``model`` on ``pairs`` (Bradley-Terry), evaluate it on a held-out split and calibrate it."""
    if config.epochs < 1 or config.batch_size < 1:
        raise ValueError(f"epochs and batch_size must be at least 1, got {config.epochs} and {config.batch_size}")
    if len(pairs) < 2:
        raise ValueError(f"reward model training needs at least 2 preference pairs, got {len(pairs)}")
    train, held_out = split(pairs, config.eval_frac, config.seed)
    lr = config.lr if config.lr is not None else (5e-4 if model.backbone == "tiny" else 1e-5)
    params = [p for p in model.module.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=config.weight_decay)
    order_rng = random.Random(config.seed)
    history: list[dict[str, Any]] = []
    train_seconds = 0.0
    with torch.random.fork_rng():
        torch.manual_seed(config.seed)  # dropout, in transformers backbones that have it
        for epoch in range(1, config.epochs + 1):
            model.module.train()
            order = list(train)
            order_rng.shuffle(order)
            losses, correct = [], 0.0
            start = time.perf_counter()
            for lo in range(0, len(order), config.batch_size):
                batch = order[lo : lo + config.batch_size]
                chosen, rejected = pair_rewards(model, batch)
                loss = bradley_terry_loss(chosen, rejected, torch.tensor([p.margin for p in batch]))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
                optimizer.step()
                losses.append(float(loss.detach()) * len(batch))
                correct += _wins(chosen.detach(), rejected.detach())
            train_seconds += time.perf_counter() - start
            # ---- 5. evaluation -------------------------------------------------------------
            line = {"epoch": epoch, "train_loss": sum(losses) / len(order), "train_accuracy": correct / len(order)}
            line.update(evaluate(model, held_out, config.batch_size))
            history.append(line)
            if on_epoch is not None:
                on_epoch(line)
    # ---- 6. calibration --------------------------------------------------------------------
    model.center, model.scale = calibrate(model, train, config.batch_size)
    metrics = {
        **history[-1],
        "train_pairs": len(train),
        "eval_pairs": len(held_out),
        "pairs_per_s": config.epochs * len(train) / train_seconds,
        "train_seconds": train_seconds,
        "center": model.center,
        "scale": model.scale,
        "lr": lr,
        "config": asdict(config),
        "history": history,
    }
    return RMResult(model, metrics)


def _wins(chosen: torch.Tensor, rejected: torch.Tensor) -> float:
    """Pairs ranked right; a tie (an untrained head gives every reply 0) counts half, as chance does."""
    return float((chosen > rejected).sum() + 0.5 * (chosen == rejected).sum())


@torch.no_grad()
def evaluate(model: RewardModel, pairs: Sequence[Preference], batch_size: int = 64) -> dict[str, Any]:
    """Held-out pair accuracy and loss (``None`` without held-out pairs)."""
    if not pairs:
        return {"eval_accuracy": None, "eval_loss": None}
    model.module.eval()
    loss, wins = 0.0, 0.0
    for lo in range(0, len(pairs), batch_size):
        batch = pairs[lo : lo + batch_size]
        chosen, rejected = pair_rewards(model, batch)
        loss += float(bradley_terry_loss(chosen, rejected, torch.tensor([p.margin for p in batch]))) * len(batch)
        wins += _wins(chosen, rejected)
    return {"eval_accuracy": wins / len(pairs), "eval_loss": loss / len(pairs)}


@torch.no_grad()
def calibrate(model: RewardModel, pairs: Sequence[Preference], batch_size: int = 64) -> tuple[float, float]:
    """(center, scale): mean and standard deviation of the rewards of every training reply."""
    model.module.eval()
    rewards = torch.cat(
        [torch.cat(pair_rewards(model, pairs[lo : lo + batch_size])) for lo in range(0, len(pairs), batch_size)]
    )
    return float(rewards.mean()), max(float(rewards.std()) if rewards.numel() > 1 else 1.0, 1e-6)


# ---- 7. saving -----------------------------------------------------------------------------
def check_out(out: str | Path) -> None:
    """An existing folder is replaced only if it holds a reward model: ``--out`` pointing at
    anything else (a run folder, a checkpoint) is a mistake to refuse before training, not after."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        config = out / "config.json"
        try:
            ours = config.is_file() and json.loads(config.read_text()).get("kind") == "reward-model"
        except (json.JSONDecodeError, AttributeError):
            ours = False
        if not ours:
            raise FileExistsError(f"{out} exists and is not a reward model folder; choose another --out")


def save(result: RMResult, out: str | Path) -> Path:
    """Write the model folder and its metrics.json."""
    out = Path(out)
    check_out(out)
    result.model.save(out)
    (out / "metrics.json").write_text(json.dumps(result.metrics, indent=2))
    return out
