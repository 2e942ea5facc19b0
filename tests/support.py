"""Shared by several test modules: a tiny transformers checkpoint built on the spot, and a
real HTTP server for an ASGI app on 127.0.0.1."""

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import uvicorn
from fastapi import FastAPI

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the Hub

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402

CALL = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
CORPUS = [
    "What is 12 + 30? The answer is 42.",
    "Reply with the final answer only. 6+3=9",
    CALL,
    "The quick brown fox jumps over the lazy dog.",
]
# Renders tools (their JSON) and assistant tool calls (as <tool_call> blocks), like real templates.
TEMPLATE = (
    "{{ bos_token }}"
    "{% if tools %}<|tools|>{% for t in tools %}{{ t.function | tojson }}{% endfor %}{{ '\\n' }}{% endif %}"
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}"
    "{% for c in m.tool_calls or [] %}"
    "<tool_call>{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}</tool_call>"
    "{% endfor %}"
    "{% if m.role == 'assistant' %}{{ eos_token }}{% endif %}{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
# Knows neither tools nor tool calls, like many base models' templates.
BARE_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}"
    "{% if m.role == 'assistant' %}{{ eos_token }}{% endif %}{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_hf_checkpoint(folder: Path, context: int = 256) -> Path:
    """A randomly initialised 2-layer Llama and a byte-level BPE tokenizer with a chat template
    that renders tools and tool calls, saved to ``folder``: a real transformers checkpoint
    made without any download."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        CORPUS,
        trainers.BpeTrainer(
            vocab_size=320,
            special_tokens=["<pad>", "<s>", "</s>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    tokenizer.chat_template = TEMPLATE
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@contextlib.contextmanager
def serving(app: FastAPI) -> Iterator[str]:
    """Serve ``app`` on a free port of 127.0.0.1 in a background thread; yields its ``/v1`` URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(2000):  # a bound on a broken start-up, not a speed check
            if server.started or not thread.is_alive():
                break
            time.sleep(0.005)
        assert server.started, "the test server did not start"
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        server.should_exit = True
        thread.join()
        sock.close()
