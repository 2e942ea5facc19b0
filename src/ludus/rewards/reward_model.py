"""Learned reward models: one number for a conversation, trained on preference pairs (train/reward_model.py).

Two backbones behind :class:`RewardModel`:

* ``tiny`` — the embedded byte-level transformer (policies/tiny.py) and a linear head on the
  hidden state of the last token, the reply's end-of-sequence token: in a causal model it is
  the one position that has seen the whole conversation.
* ``hf`` — a transformers ``AutoModelForSequenceClassification`` with one label, which pools
  the same way (the last token that is not padding).

A saved reward model is a folder: ``config.json`` (``{"kind": "reward-model", "backbone":
"tiny" | "hf", "center", "scale", "max_len", ...}``), the weights (``model.pt`` for tiny, the
``hf/`` checkpoint for transformers) and, from ``ludus train-rm``, ``metrics.json``.

As a reward source, ``rm:PATH`` in a rubric (:func:`rm_reward`). A raw reward ``r`` has no
fixed range, so the criterion's value is ``sigmoid((r - center) / scale)``, with ``center``
and ``scale`` the mean and standard deviation of the rewards of the training data (chosen and
rejected replies alike): 0.5 is an average training reply, 0.73 one standard deviation above.
Environments score from many threads at once; a per-model micro-batcher gathers those calls
into one forward pass (up to ``max_batch`` calls, or whatever arrived within ``wait_ms``).
"""

from __future__ import annotations

import json
import math
import os
import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from ludus.core.tools import render_tool_calls
from ludus.core.types import InfraError, Message, Score, Status, Task
from ludus.policies.tiny import PAD, ByteTokenizer, TinyConfig, TinyPolicy, TinyTransformer

Backbone = Literal["tiny", "hf"]
KIND = "reward-model"
TINY_MAX_LEN = 128  # a fresh tiny reward model's context, in bytes


class TinyRewardNet(nn.Module):
    """The tiny transformer's blocks and a scalar head on the last token's final hidden state."""

    def __init__(self, body: TinyTransformer):
        super().__init__()
        self.body = body
        self.head = nn.Linear(body.cfg.d_model, 1)
        nn.init.zeros_(self.head.weight)  # every reward starts at 0: the loss starts at log 2
        nn.init.zeros_(self.head.bias)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``ids``: ``[B, T]`` right-padded; ``lengths``: ``[B]``. Returns rewards ``[B]``."""
        b, t = ids.shape
        x = self.body.tok(ids) + self.body.pos(torch.arange(t).expand(b, t))
        causal = torch.ones(t, t, dtype=torch.bool).tril()[None, None]  # padding sits after every real token
        for block in self.body.blocks:
            x, _ = block(x, causal, None)
        last = self.body.ln_f(x)[torch.arange(b), lengths - 1]
        return self.head(last).squeeze(-1)


class RewardModel:
    """A scalar reward for whole conversations; :meth:`rewards` is differentiable (training)
    and batched. Build one with :meth:`create` (to train) or :meth:`load` (a saved folder)."""

    def __init__(
        self,
        backbone: Backbone,
        module: nn.Module,
        tokenizer: Any,
        max_len: int,
        *,
        center: float = 0.0,
        scale: float = 1.0,
    ) -> None:
        self.backbone, self.module, self.tokenizer, self.max_len = backbone, module, tokenizer, max_len
        self.center, self.scale = center, scale

    # ---- building, saving, loading -----------------------------------------------------
    @classmethod
    def create(cls, spec: str, *, max_len: int | None = None, seed: int = 0) -> RewardModel:
        """A reward model to train, from ``spec``: ``tiny`` (fresh embedded weights), a folder
        holding a saved tiny policy (its weights, a new head) or a reward model (trained further),
        or ``hf:PATH`` / a transformers folder (a sequence-classification head on that checkpoint)."""
        folder = Path(spec[3:] if spec.startswith("hf:") else spec)
        kind = None
        if spec != "tiny" and (folder / "config.json").is_file():
            kind = json.loads((folder / "config.json").read_text()).get("kind")
        if kind == KIND:
            return cls.load(folder)
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            if spec == "tiny":
                body = TinyPolicy(TinyConfig(max_len=max_len or TINY_MAX_LEN), seed=seed).module
            elif kind == "tiny":
                body = TinyPolicy.load(folder).module
            elif spec.startswith("hf:") or (folder / "config.json").is_file():
                return _hf_model(folder, max_len=max_len)
            else:
                raise ValueError(
                    f"cannot make a reward model from {spec!r}: expected 'tiny', 'hf:PATH' (a transformers "
                    "checkpoint folder), or a folder saved by ludus (a tiny policy or a reward model)"
                )
            net = TinyRewardNet(body)
        limit = body.cfg.max_len if max_len is None else min(max_len, body.cfg.max_len)
        return cls("tiny", net, ByteTokenizer(), limit)

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        config: dict[str, Any] = {
            "kind": KIND,
            "backbone": self.backbone,
            "center": self.center,
            "scale": self.scale,
            "max_len": self.max_len,
        }
        if isinstance(self.module, TinyRewardNet):
            config["tiny"] = asdict(self.module.body.cfg)
            torch.save(self.module.state_dict(), path / "model.pt")
        else:
            self.module.save_pretrained(path / "hf")
            self.tokenizer.save_pretrained(path / "hf")
        (path / "config.json").write_text(json.dumps(config, indent=2))

    @classmethod
    def load(cls, path: str | Path) -> RewardModel:
        path = Path(path)
        config = read_config(path)
        calibration = {"center": float(config["center"]), "scale": float(config["scale"])}
        if config["backbone"] == "hf":
            model = _hf_model(path / "hf", max_len=int(config["max_len"]))
            model.center, model.scale = calibration["center"], calibration["scale"]
            return model
        net = TinyRewardNet(TinyTransformer(TinyConfig(**config["tiny"])))
        net.load_state_dict(torch.load(path / "model.pt", weights_only=True))
        return cls("tiny", net, ByteTokenizer(), int(config["max_len"]), **calibration)

    # ---- scoring -----------------------------------------------------------------------
    def rewards(self, conversations: Sequence[Sequence[Message]]) -> torch.Tensor:
        """Raw rewards ``[B]`` of whole conversations (prompt and reply). A conversation longer
        than ``max_len`` tokens keeps its last ``max_len``: the reply matters more than the prompt's start."""
        if isinstance(self.module, TinyRewardNet):
            rows = [self.tokenizer.render(list(c))[-self.max_len :] for c in conversations]
            ids = torch.full((len(rows), max(map(len, rows))), PAD, dtype=torch.long)
            for i, row in enumerate(rows):
                ids[i, : len(row)] = torch.tensor(row)
            return self.module(ids, torch.tensor([len(r) for r in rows]))
        batch = self.tokenizer(
            [_hf_text(self.tokenizer, c) for c in conversations],
            padding=True,
            truncation=True,
            max_length=self.max_len,
            add_special_tokens=not getattr(self.tokenizer, "chat_template", None),
            return_tensors="pt",
        ).to(next(self.module.parameters()).device)
        return self.module(**batch).logits[:, 0].float()

    def value(self, reward: float) -> float:
        """A raw reward as a number in [0, 1]: ``sigmoid((reward - center) / scale)``."""
        z = (reward - self.center) / self.scale
        return 1 / (1 + math.exp(-z)) if z >= 0 else math.exp(z) / (1 + math.exp(z))


def read_config(path: Path) -> dict[str, Any]:
    """A reward model folder's config.json, checked enough to say what is wrong with a wrong folder."""
    try:
        config = json.loads((path / "config.json").read_text())
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path} is not a reward model: it has no config.json (make one with ludus train-rm)"
        ) from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path / 'config.json'} is not valid JSON: {exc}") from exc
    if not isinstance(config, dict) or config.get("kind") != KIND:
        raise ValueError(
            f"{path} is not a reward model (config.json kind is not {KIND!r}; make one with ludus train-rm)"
        )
    return config


def _hf_model(folder: Path, *, max_len: int | None) -> RewardModel:
    try:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer  # noqa: PLC0415 - optional
    except ImportError as exc:
        raise ValueError(f"a transformers reward model needs transformers: pip install 'ludus[hf]' ({exc})") from exc
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} is not a transformers checkpoint (no config.json)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        # A fresh head on a causal LM is expected: hide the "newly initialized weights" warning.
        from transformers.utils import logging as hf_logging  # noqa: PLC0415

        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        try:
            module = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=1, local_files_only=True)
        finally:
            hf_logging.set_verbosity(verbosity)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot load a sequence-classification model and tokenizer from {folder}: {exc}") from exc
    if tokenizer.pad_token is None:  # the head pools at the last non-padding token, so padding needs a name
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side, tokenizer.truncation_side = "right", "left"
    module.config.pad_token_id = tokenizer.pad_token_id
    context = getattr(module.config, "max_position_embeddings", None) or 512
    return RewardModel("hf", module.float(), tokenizer, min(max_len or context, context))


def _hf_text(tokenizer: Any, conversation: Sequence[Message]) -> str:
    """The conversation as the checkpoint's chat template writes it, or ``role: content`` lines without one."""
    chat = [{"role": m.role, "content": m.content + render_tool_calls(m.tool_calls)} for m in conversation]
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(chat, tokenize=False)
    return "".join(f"{m['role']}: {m['content']}\n" for m in chat)


# ---- the reward source: rm:PATH ------------------------------------------------------------
class Batcher:
    """One model's scoring thread: callers from any thread queue a conversation and wait; the
    thread takes the first request, gathers more for up to ``wait_s`` (at most ``max_batch``)
    and scores them in one forward pass under ``torch.no_grad``."""

    def __init__(self, model: RewardModel, max_batch: int, wait_s: float, name: str) -> None:
        self.model, self.max_batch, self.wait_s, self.name = model, max_batch, wait_s, name
        self.forward_passes = 0
        self._queue: queue.SimpleQueue[tuple[list[Message], Future[float]]] = queue.SimpleQueue()
        self.model.module.eval()
        threading.Thread(target=self._serve, name=f"reward-model {name}", daemon=True).start()

    def reward(self, conversation: list[Message]) -> float:
        future: Future[float] = Future()
        self._queue.put((conversation, future))
        return future.result()

    def _serve(self) -> None:
        while True:
            batch = [self._queue.get()]
            deadline = time.monotonic() + self.wait_s
            while len(batch) < self.max_batch:
                try:
                    batch.append(self._queue.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
            try:
                with torch.no_grad():
                    rewards = self.model.rewards([c for c, _ in batch]).tolist()
                if not all(math.isfinite(r) for r in rewards):
                    raise ValueError("the model gave a non-finite reward")
            except Exception as exc:  # noqa: BLE001 - every waiting caller must hear of it
                error = InfraError(f"reward model {self.name} failed: {type(exc).__name__}: {exc}")
                for _, future in batch:
                    future.set_exception(error)
                continue
            self.forward_passes += 1
            for (_, future), r in zip(batch, rewards, strict=True):
                future.set_result(r)


_batchers: dict[tuple[str, int, int, float], Batcher] = {}
_lock = threading.Lock()


def batcher(path: str | Path, max_batch: int = 64, wait_ms: float = 5.0) -> Batcher:
    """The process's one batcher for the model at ``path`` with these settings, loaded on first
    use; a folder saved again (a newer config.json) is loaded again."""
    real = os.path.realpath(path)
    key = (real, os.stat(Path(real) / "config.json").st_mtime_ns, max_batch, wait_ms)
    with _lock:
        if key not in _batchers:
            _batchers[key] = Batcher(RewardModel.load(real), max_batch, wait_ms / 1000, str(path))
        return _batchers[key]


class RewardModelReward:
    """``(task, completion) -> Score`` from a saved reward model; see :func:`rm_reward`."""

    def __init__(self, path: str, threshold: float | None, max_batch: int, wait_ms: float) -> None:
        self.path, self.threshold, self.max_batch, self.wait_ms = path, threshold, max_batch, wait_ms
        self.__name__ = f"rm:{path}"

    def __call__(self, task: Task, completion: str) -> Score:
        try:
            scorer = batcher(self.path, self.max_batch, self.wait_ms)
        except Exception as exc:  # noqa: BLE001 - a model that cannot load is the grader's failure
            raise InfraError(f"reward model {self.path} could not be loaded: {type(exc).__name__}: {exc}") from exc
        reward = scorer.reward([Message("user", task.prompt), Message("assistant", completion)])
        value = scorer.model.value(reward)
        passed = self.threshold is not None and value >= self.threshold
        return Score(
            value,
            Status.CORRECT if passed else Status.PARTIAL,
            f"reward model {reward:+.3f} (center {scorer.model.center:+.3f}, scale {scorer.model.scale:.3f})",
        )


def rm_reward(
    path: str, *, threshold: float | None = None, max_batch: int = 64, wait_ms: float = 5.0
) -> RewardModelReward:
    """The reward function of a saved reward model (``rm:PATH``, or ``function: rm`` with these options).

    Its value is ``sigmoid((r - center) / scale)`` (module docstring); its status is ``partial``
    — a learned score is an opinion, not a check — or ``correct`` when ``threshold`` is given and
    the value reaches it. The folder is checked now; the weights load on the first call, once
    per process, and a model that fails then raises :class:`InfraError`."""
    read_config(Path(path))
    if threshold is not None and not 0 < threshold <= 1:
        raise ValueError(f"rm threshold must be in (0, 1], got {threshold!r}")
    if max_batch < 1 or wait_ms < 0:
        raise ValueError(f"rm max_batch must be at least 1 and wait_ms at least 0, got {max_batch}, {wait_ms}")
    return RewardModelReward(str(path), threshold, max_batch, wait_ms)
