"""Causal language models from transformers, read from a local folder, behind :class:`TrainablePolicy`.

Sampling is Ludus's own loop over the model's forward pass with a KV cache, not
``model.generate``: each sampled token's behaviour log-prob then comes from the same arithmetic
as :meth:`HFPolicy.token_logprobs` (float32 log-softmax of the temperature-scaled logits, before
top-p), so the importance ratios the trainer computes start at 1 up to float rounding.

Prompts are rendered with the tokenizer's chat template; see :meth:`HFPolicy.render` for what
happens when a template cannot show tools or tool calls, or when there is no template at all.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ludus.core.tools import ToolCallFormat, tool_call_format
from ludus.core.types import Message, ToolCall, ToolSpec
from ludus.policies.base import (
    Completion,
    ContextFull,
    SamplingParams,
    Tools,
    TrainablePolicy,
    eval_mode,
    sample_tokens,
)

# A name no real tool has: rendering it shows whether a chat template writes tools and tool calls.
_PROBE = "ludus_probe_tool_7f3a"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


@contextmanager
def _no_progress_bars() -> Iterator[None]:
    """transformers draws a progress bar per load and save; inside ``ludus train`` they would
    break the run's own progress display at every checkpoint."""
    from transformers.utils import logging as hf_logging  # noqa: PLC0415

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            hf_logging.enable_progress_bar()


def _resolve_dtype(dtype: torch.dtype | str | None) -> torch.dtype:
    if dtype is None:
        return torch.float32  # optimizer updates need full-precision weights
    if isinstance(dtype, torch.dtype):
        return dtype
    resolved = getattr(torch, str(dtype), None)
    if not isinstance(resolved, torch.dtype):
        raise ValueError(f"dtype {dtype!r} is not a torch dtype; use e.g. 'float32', 'bfloat16' or 'float16'")
    return resolved


def _tool_prompt(tools: Sequence[ToolSpec], form: ToolCallFormat) -> str:
    lines = "\n".join(json.dumps(t.to_dict(), ensure_ascii=False) for t in tools)
    example = form.render([ToolCall("TOOL", {"ARGUMENT": "VALUE"})])
    return f"You can call these tools:\n{lines}\nTo call one, write {example}"


def _call_dict(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


class HFPolicy(TrainablePolicy):
    """A transformers causal LM and its tokenizer. Build one with :meth:`load` (or
    ``load_policy("hf:PATH")``); the constructor wraps objects already in memory."""

    def __init__(self, module: torch.nn.Module, tokenizer: Any, name: str = "", tool_format: str = "hermes") -> None:
        self.module = module
        self.tokenizer = tokenizer
        self.tool_format = tool_call_format(tool_format)  # how this model writes tool calls in text
        self.name = name or str(getattr(module.config, "name_or_path", "")) or type(module).__name__
        eos: set[int] = set()
        for ids in (tokenizer.eos_token_id, getattr(getattr(module, "generation_config", None), "eos_token_id", None)):
            eos.update([ids] if isinstance(ids, int) else ids or [])
        if not eos:
            raise ValueError(
                f"{self.name} has no end-of-sequence token, so sampling could never stop; set eos_token in "
                "tokenizer_config.json or eos_token_id in generation_config.json"
            )
        self.eos_ids = sorted(eos)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]
        config = module.config
        self.context: int | None = getattr(config, "max_position_embeddings", None) or getattr(
            config, "n_positions", None
        )
        # Prefill needs only the last position's logits; a full [batch, prompt, vocab] tensor can be gigabytes.
        self._keep_logits = "logits_to_keep" in inspect.signature(module.forward).parameters
        self.has_template = bool(getattr(tokenizer, "chat_template", None))
        self._shows_tools = self.has_template and self._template_shows([{"role": "user", "content": "hi"}], True)
        self._shows_calls = self.has_template and self._template_shows(
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "tool_calls": [_call_dict(ToolCall(_PROBE, {}, "call_0"))]},
            ],
            False,
        )

    # ---- loading and saving ------------------------------------------------------------
    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | str | None = None,
        tool_format: str = "hermes",
    ) -> HFPolicy:
        """Model and tokenizer from a folder written by ``save_pretrained`` (never the Hub).
        ``dtype`` defaults to float32, which training needs; ``"bfloat16"`` halves memory for
        evaluation. ``tool_format`` is how the model writes tool calls (``hermes``, ``mistral``,
        ``llama3_json``; see ``ludus.core.tools``)."""
        try:
            from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415 - an optional extra
        except ImportError as exc:
            raise ImportError(
                f"loading {path} needs transformers, which is not installed: pip install 'ludus[hf]'"
            ) from exc

        folder = Path(path)
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(
                f"{folder} is not a transformers checkpoint (no config.json); pass a local folder written by "
                "save_pretrained, e.g. model: hf:/path/to/model (models are never downloaded)"
            )
        if not any((folder / name).is_file() for name in _TOKENIZER_FILES):
            raise FileNotFoundError(
                f"{folder} has no tokenizer (none of {', '.join(_TOKENIZER_FILES)}); "
                "save the model's tokenizer there with tokenizer.save_pretrained(folder)"
            )
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        except (OSError, ValueError, TypeError) as exc:
            raise FileNotFoundError(
                f"{folder} has no tokenizer that transformers can load ({exc}); "
                "save the model's tokenizer there with tokenizer.save_pretrained(folder)"
            ) from exc
        try:
            with _no_progress_bars():
                module = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
        except (OSError, ValueError) as exc:
            raise ValueError(
                f"cannot load a causal language model from {folder} ({exc}); the folder needs the config.json of "
                "a decoder-only architecture transformers knows and the weights (model.safetensors)"
            ) from exc
        module.to(device=torch.device(device), dtype=_resolve_dtype(dtype))
        return cls(module, tokenizer, name=str(folder), tool_format=tool_format)

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        with _no_progress_bars():
            self.module.save_pretrained(path)
        self.tokenizer.save_pretrained(path)

    @property
    def device(self) -> torch.device:
        return next(self.module.parameters()).device

    # ---- prompts -----------------------------------------------------------------------
    def _template_shows(self, messages: list[dict[str, Any]], with_tools: bool) -> bool:
        from jinja2 import TemplateError  # noqa: PLC0415 - transformers' template engine

        tools = [ToolSpec(_PROBE, "probe").to_openai()] if with_tools else None
        try:
            text = self.tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
        except TemplateError:
            return False
        return _PROBE in text

    def render(self, messages: list[Message], tools: Sequence[ToolSpec] = ()) -> str:
        """The prompt text for ``messages``, ending where the assistant's reply begins.

        With a chat template: tools go to the template, and assistant tool calls as structured
        ``tool_calls``. A template that does not show tools gets them described in the system
        message instead; one that does not show tool calls gets them written into the content as
        ``<tool_call>`` blocks (the form the model is asked to write).

        Without a chat template (a base model): ``role: content`` lines, assistant lines ending in
        the EOS token, tools described on a first ``system:`` line, and a final ``assistant:``.
        """
        if not self.has_template:
            lines = [f"system: {_tool_prompt(tools, self.tool_format)}"] if tools else []
            for m in messages:
                if m.role == "assistant":
                    lines.append(
                        f"assistant: {m.content}{self.tool_format.render(m.tool_calls)}{self.tokenizer.eos_token}"
                    )
                else:
                    lines.append(f"{m.role}: {m.content}")
            return (self.tokenizer.bos_token or "") + "".join(line + "\n" for line in lines) + "assistant:"
        chat: list[dict[str, Any]] = []
        for m in messages:
            entry: dict[str, Any] = {"role": m.role, "content": m.content}
            if m.tool_calls and self._shows_calls:
                entry["tool_calls"] = [_call_dict(c) for c in m.tool_calls]
            elif m.tool_calls:
                entry["content"] = m.content + self.tool_format.render(m.tool_calls)
            if m.tool_call_id is not None:
                entry["tool_call_id"] = m.tool_call_id
            if m.name is not None:
                entry["name"] = m.name
            chat.append(entry)
        if tools and not self._shows_tools:
            if chat and chat[0]["role"] == "system":
                chat[0] = {**chat[0], "content": f"{chat[0]['content']}\n\n{_tool_prompt(tools, self.tool_format)}"}
            else:
                chat.insert(0, {"role": "system", "content": _tool_prompt(tools, self.tool_format)})
        from jinja2 import TemplateError  # noqa: PLC0415

        try:
            return self.tokenizer.apply_chat_template(
                chat,
                tools=[t.to_openai() for t in tools] if tools and self._shows_tools else None,
                add_generation_prompt=True,
                tokenize=False,
            )
        except TemplateError as exc:
            roles = "/".join(dict.fromkeys(m.role for m in messages))
            raise ValueError(
                f"the chat template of {self.name} cannot render a conversation with roles {roles}: {exc}. "
                "Use an environment whose messages the template supports, or a tokenizer whose chat template "
                "handles these roles"
            ) from exc

    def encode_prompt(self, messages: list[Message], tools: Sequence[ToolSpec] = ()) -> list[int]:
        """Token ids of :meth:`render`'s text (special tokens come from the template, none are added)."""
        return self.tokenizer.encode(self.render(messages, tools), add_special_tokens=False)

    def turn_ids(
        self, messages: list[Message], reply: Message, tools: Sequence[ToolSpec] = ()
    ) -> tuple[list[int], list[int]]:
        """The reply's ids are what the chat template writes for it after the prompt, up to and
        including its first end-of-sequence token (the template's end of turn); a template that
        re-renders the earlier messages once the reply is there (one that drops thinking blocks) gets
        the reply's text and tool calls encoded alone, then the first end-of-sequence token."""
        prompt = self.encode_prompt(messages, tools)
        whole = self.encode_prompt([*messages, reply], tools)
        if whole[: len(prompt)] == prompt:
            tail = whole[len(prompt) :]
            end = next((k + 1 for k, token in enumerate(tail) if token in self.eos_ids), None)
            completion = tail[:end] if end is not None else [*tail, self.eos_ids[0]]
        else:
            text = reply.content + self.tool_format.render(reply.tool_calls)
            completion = [*self.tokenizer.encode(text, add_special_tokens=False), self.eos_ids[0]]
        self._check_fits(len(prompt), len(completion))
        return prompt, completion

    def _check_fits(self, prompt_tokens: int, completion_tokens: int) -> None:
        if self.context is not None and prompt_tokens + completion_tokens > self.context:
            raise ContextFull(
                f"a prompt of {prompt_tokens} tokens plus {completion_tokens} completion tokens exceeds the "
                f"context of {self.name} ({self.context} positions); lower max_tokens or shorten the prompt "
                "(a shorter system message, fewer turns or smaller tool outputs)"
            )

    def _left_pad(self, rows: list[list[int]], width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Ids, attention mask and position ids with each row right-aligned at ``width``, so every
        row's next token is in the same column; positions count real tokens only."""
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            mask[i, width - len(row) :] = 1
        positions = (mask.cumsum(1) - 1).clamp(min=0)
        return ids.to(self.device), mask.to(self.device), positions.to(self.device)

    # ---- sampling ----------------------------------------------------------------------
    @torch.no_grad()
    def generate(
        self,
        conversations: list[list[Message]],
        sampling: SamplingParams,
        *,
        tools: Tools = None,
        generator: torch.Generator | None = None,
    ) -> list[Completion]:
        if not conversations:
            return []
        offered = list(tools) if tools is not None else [()] * len(conversations)
        prompts = [self.encode_prompt(c, t) for c, t in zip(conversations, offered, strict=True)]
        self._check_fits(max(map(len, prompts)), sampling.max_tokens)
        with eval_mode(self.module):
            return self._generate(prompts, sampling, generator)

    def _generate(
        self, prompts: list[list[int]], sampling: SamplingParams, generator: torch.Generator | None
    ) -> list[Completion]:
        b = len(prompts)
        ids, mask, positions = self._left_pad(prompts, max(map(len, prompts)))
        keep = {"logits_to_keep": 1} if self._keep_logits else {}
        out = self.module(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **keep)
        eos = torch.tensor(self.eos_ids, device=ids.device)
        next_pos = positions[:, -1:] + 1
        finished = torch.zeros(b, dtype=torch.bool, device=ids.device)
        tokens, logprobs = [], []
        for t in range(sampling.max_tokens):
            token, lp = sample_tokens(out.logits[:, -1], sampling, generator)
            token = token.masked_fill(finished, self.pad_id)  # finished rows idle until the batch ends
            tokens.append(token)
            logprobs.append(lp)
            finished |= torch.isin(token, eos)
            if bool(finished.all()) or t + 1 == sampling.max_tokens:
                break
            mask = torch.cat([mask, torch.ones((b, 1), dtype=mask.dtype, device=mask.device)], dim=1)
            out = self.module(
                input_ids=token[:, None],
                attention_mask=mask,
                position_ids=next_pos,
                past_key_values=out.past_key_values,
                use_cache=True,
            )
            next_pos = next_pos + 1
        all_ids = torch.stack(tokens, 1).tolist()
        all_lp = torch.stack(logprobs, 1).tolist()
        stops = set(self.eos_ids)
        results = []
        for prompt, row, lps in zip(prompts, all_ids, all_lp, strict=True):
            n = next((k + 1 for k, tok in enumerate(row) if tok in stops), len(row))
            results.append(self.completion(prompt, row[:n], lps[:n]))
        return results

    def completion(self, prompt_ids: list[int], completion_ids: list[int], logprobs: list[float]) -> Completion:
        """The :class:`Completion` of sampled tokens: their text and tool calls as this model's
        tokenizer and tool-call format read them (the tokens themselves are kept exactly)."""
        stopped = bool(completion_ids) and completion_ids[-1] in self.eos_ids
        keep_special = self.tool_format.special_markers
        body = completion_ids[:-1] if stopped and keep_special else completion_ids
        text, calls = self.tool_format.parse(self.tokenizer.decode(body, skip_special_tokens=not keep_special))
        return Completion(
            text=text,
            prompt_ids=list(prompt_ids),
            completion_ids=list(completion_ids),
            logprobs=list(logprobs),
            finish_reason="tool_calls" if calls and stopped else "stop" if stopped else "length",
            tool_calls=calls,
        )

    @torch.no_grad()
    def generate_from_ids(
        self, prompts: list[list[int]], sampling: SamplingParams, *, generator: torch.Generator | None = None
    ) -> list[Completion]:
        """``generate`` for prompts that are token ids already (a server's token-in requests)."""
        if not prompts:
            return []
        if any(not p or min(p) < 0 or max(p) >= len(self.tokenizer) for p in prompts):
            raise ValueError(f"a prompt's token ids must be a non-empty list of ids in [0, {len(self.tokenizer)})")
        self._check_fits(max(map(len, prompts)), sampling.max_tokens)
        with eval_mode(self.module):
            return self._generate([list(p) for p in prompts], sampling, generator)

    # ---- weights only (what a rollout server reloads) ------------------------------------
    def save_weights(self, path: str | Path) -> None:
        """The weights alone, as ``save_pretrained`` writes them (safetensors; what vLLM's
        ``reload_weights`` and :meth:`load_weights` read), without the tokenizer."""
        with _no_progress_bars():
            self.module.save_pretrained(Path(path))

    @torch.no_grad()
    def load_weights(self, path: str | Path) -> None:
        """Replace the weights in place with the safetensors files of ``path`` (see :meth:`save_weights`)."""
        from safetensors.torch import load_file  # noqa: PLC0415 - comes with transformers

        files = sorted(Path(path).glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"{path} holds no .safetensors weights; write them with save_weights(path)")
        state: dict[str, torch.Tensor] = {}
        for file in files:
            state.update(load_file(file))
        result = self.module.load_state_dict(state, strict=False)
        tied_embeddings = getattr(self.module.config, "tie_word_embeddings", False)
        tied = set(getattr(self.module, "_tied_weights_keys", None) or ()) if tied_embeddings else set()
        missing = [k for k in result.missing_keys if k not in tied]
        if result.unexpected_keys or missing:
            raise ValueError(
                f"the weights in {path} do not fit {self.name}: missing {missing[:5]}, unexpected "
                f"{result.unexpected_keys[:5]}; they must come from the same architecture (save_weights)"
            )

    # ---- training ----------------------------------------------------------------------
    def token_logprobs(
        self, prompt_ids: list[list[int]], completion_ids: list[list[int]], temperature: float = 1.0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores the batch laid out as sampling lays it out (prompts left-padded, so every
        completion starts in the same column), keeping logits for completion positions only.
        ``temperature == 0`` scores at temperature 1, as greedy sampling reports. Returned
        tensors are on the model's device."""
        longest = max(range(len(prompt_ids)), key=lambda i: len(prompt_ids[i]) + len(completion_ids[i]))
        self._check_fits(len(prompt_ids[longest]), len(completion_ids[longest]))
        width, t_max = max(map(len, prompt_ids)), max(map(len, completion_ids))
        ids, mask, _ = self._left_pad(prompt_ids, width)
        tail = torch.full((len(prompt_ids), t_max), self.pad_id, dtype=torch.long)
        tail_mask = torch.zeros((len(prompt_ids), t_max), dtype=torch.long)
        for i, row in enumerate(completion_ids):
            tail[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            tail_mask[i, : len(row)] = 1
        tail, tail_mask = tail.to(ids.device), tail_mask.to(ids.device)
        ids, mask = torch.cat([ids, tail], 1), torch.cat([mask, tail_mask], 1)
        positions = (mask.cumsum(1) - 1).clamp(min=0)
        keep = {"logits_to_keep": t_max + 1} if self._keep_logits else {}
        # Eval mode, as in sampling: dropout (GPT-2 has some) would make the scores differ from the
        # behaviour log-probs. Gradients flow the same.
        was_training = self.module.training
        self.module.eval()
        try:
            out = self.module(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False, **keep)
        finally:
            self.module.train(was_training)
        logits = out.logits
        # Completion token t sits in column width + t and is predicted by column width + t - 1.
        logits = logits[:, -(t_max + 1) : -1].float() / (temperature if temperature > 0 else 1.0)
        logp_all = F.log_softmax(logits, dim=-1)
        logp = logp_all.gather(-1, tail[:, :, None])[:, :, 0]
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp, entropy
