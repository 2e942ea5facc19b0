"""The embedded default policy: a small byte-level decoder-only transformer, initialised by Ludus.

Readable top to bottom: tokenizer, model (pre-norm GPT blocks with a KV cache), batched
sampling with per-token log-probs, and the :class:`TinyPolicy` wrapper the trainer uses.
Nothing is downloaded: the weights start random (seeded) and are saved to a local folder.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ludus.core.tools import parse_tool_calls, render_tool_calls
from ludus.core.types import Message, ToolSpec
from ludus.policies.base import (
    Completion,
    ContextFull,
    SamplingParams,
    Tools,
    TrainablePolicy,
    eval_mode,
    sample_tokens,
)

# ---- tokenizer -----------------------------------------------------------------------------
PAD, BOS, EOS = 256, 257, 258
VOCAB_SIZE = 259


class ByteTokenizer:
    """UTF-8 bytes plus three specials. Any text encodes; nothing to download or train."""

    pad_id, bos_id, eos_id, vocab_size = PAD, BOS, EOS, VOCAB_SIZE

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def render(self, messages: list[Message]) -> list[int]:
        """The tiny chat template: ``BOS`` + each user/tool message followed by a newline, each
        assistant message (its tool calls written back as ``<tool_call>`` blocks) followed by
        ``EOS``. System messages and tool descriptions are left out: with a few dozen positions
        of context the model cannot afford instructions it cannot read anyway."""
        ids = [BOS]
        for m in messages:
            if m.role == "assistant":
                ids += self.encode(m.content + render_tool_calls(m.tool_calls)) + [EOS]
            elif m.role in ("user", "tool"):
                ids += self.encode(m.content + "\n")
        return ids


# ---- model ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class TinyConfig:
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    max_len: int = 64
    vocab_size: int = VOCAB_SIZE

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")


KVCache = list[tuple[torch.Tensor, torch.Tensor]]


class Block(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(), nn.Linear(4 * cfg.d_model, cfg.d_model)
        )

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x)), (k, v)


class TinyTransformer(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.apply(self._init)
        for block in self.blocks:  # scaled residual init (GPT-2) keeps deep stacks stable
            nn.init.normal_(block.proj.weight, std=0.02 / math.sqrt(2 * cfg.n_layers))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(
        self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: KVCache | None = None
    ) -> tuple[torch.Tensor, KVCache]:
        """``ids``/``positions``: ``[B, T]``; ``mask``: ``[B, 1, T, T_past + T]`` (True = attend).
        Returns logits ``[B, T, V]`` (output weights tied to the embedding) and the new cache."""
        x = self.tok(ids) + self.pos(positions)
        new_cache: KVCache = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, mask, cache[i] if cache else None)
            new_cache.append(kv)
        return self.ln_f(x) @ self.tok.weight.T, new_cache


# ---- a saved model is a GPT-2 for transformers ------------------------------------------------
# The tiny model is GPT-2's architecture (pre-norm blocks, learned positions, exact GELU, tied
# output weights), so a saved folder is also one transformers reads as ``GPT2LMHeadModel``: its
# config.json holds GPT-2's fields beside ours, its weights GPT-2's names. The tokenizer is not
# there: ids are UTF-8 bytes, then PAD, BOS and EOS (``ByteTokenizer``).
WEIGHTS = "pytorch_model.bin"
GPT2_LAYER = {
    "ln1": "ln_1",
    "qkv": "attn.c_attn",
    "proj": "attn.c_proj",
    "ln2": "ln_2",
    "mlp.0": "mlp.c_fc",
    "mlp.2": "mlp.c_proj",
}


def gpt2_config(cfg: TinyConfig) -> dict[str, object]:
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "n_embd": cfg.d_model,
        "n_layer": cfg.n_layers,
        "n_head": cfg.n_heads,
        "n_positions": cfg.max_len,
        "activation_function": "gelu",  # nn.GELU(): exact, not GPT-2's tanh approximation
        "layer_norm_epsilon": 1e-5,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "tie_word_embeddings": True,
        "pad_token_id": PAD,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
    }


def gpt2_names(cfg: TinyConfig) -> list[tuple[str, str, bool]]:
    """(our parameter, GPT-2's, transposed): GPT-2's ``Conv1D`` keeps a linear weight as [in, out]."""
    names = [
        ("tok.weight", "transformer.wte.weight", False),
        ("pos.weight", "transformer.wpe.weight", False),
        ("ln_f.weight", "transformer.ln_f.weight", False),
        ("ln_f.bias", "transformer.ln_f.bias", False),
    ]
    for i in range(cfg.n_layers):
        for ours, theirs in GPT2_LAYER.items():
            names.append((f"blocks.{i}.{ours}.weight", f"transformer.h.{i}.{theirs}.weight", not ours.startswith("ln")))
            names.append((f"blocks.{i}.{ours}.bias", f"transformer.h.{i}.{theirs}.bias", False))
    return names


class TinyPolicy(TrainablePolicy):
    """The embedded default model behind the :class:`TrainablePolicy` interface."""

    def __init__(self, config: TinyConfig | None = None, seed: int = 0):
        self.config = config or TinyConfig()
        self.tokenizer = ByteTokenizer()
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.module = TinyTransformer(self.config)

    @torch.no_grad()
    def generate(
        self,
        conversations: list[list[Message]],
        sampling: SamplingParams,
        *,
        tools: Tools = None,
        generator: torch.Generator | None = None,
    ) -> list[Completion]:
        prompts = [self.tokenizer.render(c) for c in conversations]
        self._check_fits(max(map(len, prompts)), sampling.max_tokens)
        with eval_mode(self.module):
            return self._generate(prompts, sampling, generator)

    def _generate(
        self, prompts: list[list[int]], sampling: SamplingParams, generator: torch.Generator | None
    ) -> list[Completion]:
        b, width = len(prompts), max(map(len, prompts))
        # Left-pad so every row's next token is at the same column; positions skip the padding.
        ids = torch.full((b, width), PAD, dtype=torch.long)
        valid = torch.zeros((b, width), dtype=torch.bool)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(p)
            valid[i, width - len(p) :] = True
        positions = (valid.cumsum(1) - 1).clamp(min=0)
        causal = torch.ones(width, width, dtype=torch.bool).tril()
        # A padding row attends to itself only, so it stays finite (an all-masked row is NaN).
        mask = (causal[None, None] & valid[:, None, None, :]) | torch.eye(width, dtype=torch.bool)
        logits, cache = self.module(ids, positions, mask)
        next_pos = positions[:, -1] + 1
        out_ids = torch.empty((b, sampling.max_tokens), dtype=torch.long)
        out_lp = torch.zeros((b, sampling.max_tokens))
        finished = torch.zeros(b, dtype=torch.bool)
        steps = 0
        for t in range(sampling.max_tokens):
            token, lp = sample_tokens(logits[:, -1], sampling, generator)
            token = token.masked_fill(finished, PAD)
            out_ids[:, t], out_lp[:, t] = token, lp
            steps = t + 1
            finished |= token == EOS
            if bool(finished.all()) or t + 1 == sampling.max_tokens:
                break
            valid = torch.cat([valid, torch.ones((b, 1), dtype=torch.bool)], dim=1)
            logits, cache = self.module(token[:, None], next_pos[:, None], valid[:, None, None, :], cache)
            next_pos = next_pos + 1
        results = []
        for i, p in enumerate(prompts):
            row = out_ids[i, :steps].tolist()
            n = row.index(EOS) + 1 if EOS in row else len(row)
            ids_i = row[:n]
            text, calls = parse_tool_calls(self.tokenizer.decode(ids_i))
            finish = "stop" if ids_i and ids_i[-1] == EOS else "length"
            results.append(
                Completion(
                    text=text,
                    prompt_ids=p,
                    completion_ids=ids_i,
                    logprobs=out_lp[i, :n].tolist(),
                    finish_reason="tool_calls" if calls and finish == "stop" else finish,
                    tool_calls=calls,
                )
            )
        return results

    def _check_fits(self, prompt_tokens: int, completion_tokens: int) -> None:
        if prompt_tokens + completion_tokens > self.config.max_len:
            raise ContextFull(
                f"a prompt of {prompt_tokens} tokens plus {completion_tokens} completion tokens exceeds the tiny "
                f"model's context of {self.config.max_len}; shorten the prompt, lower max_tokens or start from a "
                "model with a longer context (`ludus train --tiny '{max_len: 512}'`, `ludus eval --model-args "
                "'{max_len: 512}'`; a saved model keeps the context it was made with)"
            )

    def token_logprobs(
        self, prompt_ids: list[list[int]], completion_ids: list[list[int]], temperature: float = 1.0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        rows = [p + c for p, c in zip(prompt_ids, completion_ids, strict=True)]
        width, t_max = max(map(len, rows)), max(map(len, completion_ids))
        if width > self.config.max_len:
            longest = max(range(len(rows)), key=lambda i: len(rows[i]))
            self._check_fits(len(prompt_ids[longest]), len(completion_ids[longest]))
        ids = torch.full((len(rows), width), PAD, dtype=torch.long)
        for i, r in enumerate(rows):  # right padding: positions are plain 0..width-1
            ids[i, : len(r)] = torch.tensor(r)
        positions = torch.arange(width).expand(len(rows), width)
        mask = torch.ones(width, width, dtype=torch.bool).tril()[None, None]
        logits, _ = self.module(ids, positions, mask)
        logits = logits[:, :-1] / max(temperature, 1e-6)
        # Column t of the result is completion token t, predicted at position len(prompt) - 1 + t.
        start = torch.tensor([len(p) - 1 for p in prompt_ids])
        index = (start[:, None] + torch.arange(t_max)[None]).clamp(max=width - 2)
        logits = logits.gather(1, index[:, :, None].expand(-1, -1, logits.shape[-1]))
        logp_all = F.log_softmax(logits, dim=-1)
        targets = ids[:, 1:].gather(1, index)
        logp = logp_all.gather(-1, targets[:, :, None])[:, :, 0]
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp, entropy

    def turn_ids(
        self, messages: list[Message], reply: Message, tools: Sequence[ToolSpec] = ()
    ) -> tuple[list[int], list[int]]:
        prompt = self.tokenizer.render(messages)  # the tiny template shows no tool descriptions
        completion = self.tokenizer.encode(reply.content + render_tool_calls(reply.tool_calls)) + [EOS]
        self._check_fits(len(prompt), len(completion))
        return prompt, completion

    def save(self, path: str | Path) -> None:
        """A folder ``load`` reads, and transformers too (as GPT-2; see :data:`WEIGHTS`)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        config = {"kind": "tiny", **asdict(self.config), **gpt2_config(self.config)}
        (path / "config.json").write_text(json.dumps(config, indent=2))
        state = self.module.state_dict()
        torch.save(
            {
                theirs: state[ours].t().contiguous() if flip else state[ours]
                for ours, theirs, flip in gpt2_names(self.config)
            },
            path / WEIGHTS,
        )

    @classmethod
    def load(cls, path: str | Path) -> TinyPolicy:
        path = Path(path)
        try:
            cfg = json.loads((path / "config.json").read_text())
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"{path} is not a saved tiny model: it has no config.json") from exc
        if cfg.get("kind") != "tiny":
            raise ValueError(f"{path / 'config.json'} does not describe a tiny model (kind != 'tiny')")
        policy = cls(TinyConfig(**{name: cfg[name] for name in TinyConfig.__dataclass_fields__}))
        if not (path / WEIGHTS).is_file():  # saved before tiny folders were GPT-2 folders (cached base models too)
            policy.module.load_state_dict(torch.load(path / "model.pt", weights_only=True))
            return policy
        saved = torch.load(path / WEIGHTS, weights_only=True)
        policy.module.load_state_dict(
            {ours: saved[theirs].t() if flip else saved[theirs] for ours, theirs, flip in gpt2_names(policy.config)}
        )
        return policy
