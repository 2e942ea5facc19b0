"""The transformers backend on a tiny Llama and a byte-level BPE tokenizer that the tests build and
save themselves: exact log-probs, left padding, stopping, tool calls, save/load and a training run."""

import json
import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the Hub

from transformers import (  # noqa: E402
    AutoTokenizer,
    GPT2Config,
    GPT2LMHeadModel,
)

from ludus.core.types import Message, ToolCall, ToolSpec  # noqa: E402
from ludus.policies import load_policy  # noqa: E402
from ludus.policies.base import SamplingParams  # noqa: E402
from ludus.policies.hf import HFPolicy  # noqa: E402
from ludus.train.config import ConfigError, load_config  # noqa: E402
from ludus.train.trainer import Trainer  # noqa: E402
from support import BARE_TEMPLATE, CALL, build_hf_checkpoint  # noqa: E402

ADD = ToolSpec("add", "Add two integers.", {"type": "object", "properties": {"a": {"type": "integer"}}})
CONVS = [
    [Message("user", "hi")],
    [Message("system", "Be brief."), Message("user", "What is 12 + 30? Answer with the number only, please.")],
    [Message("user", "The quick brown fox")],
]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return build_hf_checkpoint(tmp_path_factory.mktemp("hf") / "model")


@pytest.fixture(scope="module")
def policy(checkpoint) -> HFPolicy:
    loaded = load_policy(f"hf:{checkpoint}")
    assert isinstance(loaded, HFPolicy)
    return loaded


def test_loads_from_spec_and_from_a_plain_folder_with_clear_errors(checkpoint, policy, tmp_path):
    assert isinstance(load_policy(str(checkpoint)), HFPolicy)  # a folder whose config.json is not tiny
    assert policy.eos_ids == [policy.tokenizer.eos_token_id] and policy.context == 256
    assert policy.device == torch.device("cpu") and next(policy.module.parameters()).dtype == torch.float32
    with pytest.raises(FileNotFoundError, match="no config.json"):
        HFPolicy.load(tmp_path)
    policy.module.save_pretrained(tmp_path / "weights-only")
    with pytest.raises(FileNotFoundError, match="no tokenizer"):
        HFPolicy.load(tmp_path / "weights-only")
    with pytest.raises(ValueError, match="not a torch dtype"):
        HFPolicy.load(checkpoint, dtype="float33")


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 1.0), (1.3, 0.9)])
def test_sampled_logprobs_equal_rescored_logprobs(policy, temperature, top_p):
    out = policy.generate(
        CONVS,
        SamplingParams(temperature=temperature, top_p=top_p, max_tokens=8),
        generator=torch.Generator().manual_seed(0),
    )
    logp, entropy = policy.token_logprobs([c.prompt_ids for c in out], [c.completion_ids for c in out], temperature)
    assert logp.shape == entropy.shape == (3, max(len(c.completion_ids) for c in out))
    for i, c in enumerate(out):
        assert torch.allclose(logp[i, : len(c.completion_ids)], torch.tensor(c.logprobs), atol=1e-4)
    assert (entropy >= 0).all()


def test_log_probs_stay_exact_for_another_architecture_with_dropout_in_train_mode(policy, tmp_path):
    eos = policy.tokenizer.eos_token_id
    config = GPT2Config(
        vocab_size=len(policy.tokenizer),
        n_embd=32,
        n_layer=1,
        n_head=2,
        n_positions=256,
        bos_token_id=eos,
        eos_token_id=eos,
    )
    config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.5
    torch.manual_seed(0)
    GPT2LMHeadModel(config).save_pretrained(tmp_path / "gpt2")
    policy.tokenizer.save_pretrained(tmp_path / "gpt2")
    gpt2 = load_policy(str(tmp_path / "gpt2"))
    assert gpt2.context == 256  # GPT-2 calls it n_positions
    gpt2.module.train()  # as the trainer leaves it between updates
    out = gpt2.generate(CONVS, SamplingParams(max_tokens=6), generator=torch.Generator().manual_seed(0))
    logp, _ = gpt2.token_logprobs([c.prompt_ids for c in out], [c.completion_ids for c in out])
    for i, c in enumerate(out):
        assert torch.allclose(logp[i, : len(c.completion_ids)], torch.tensor(c.logprobs), atol=1e-4)
    assert gpt2.module.training


def test_greedy_is_deterministic_and_unaffected_by_left_padding(policy):
    greedy = SamplingParams(temperature=0, max_tokens=8)
    batch = policy.generate(CONVS, greedy)
    assert len({len(c.prompt_ids) for c in batch}) == 3  # different lengths, so padding is exercised
    assert [c.completion_ids for c in policy.generate(CONVS, greedy)] == [c.completion_ids for c in batch]
    for conv, together in zip(CONVS, batch, strict=True):
        alone = policy.generate([conv], greedy)[0]
        assert alone.prompt_ids == together.prompt_ids and alone.completion_ids == together.completion_ids
        assert torch.allclose(torch.tensor(alone.logprobs), torch.tensor(together.logprobs), atol=1e-5)
    logp, _ = policy.token_logprobs([c.prompt_ids for c in batch], [c.completion_ids for c in batch], 0.0)
    assert torch.allclose(logp[0, : len(batch[0].logprobs)], torch.tensor(batch[0].logprobs), atol=1e-4)


def test_seeded_sampling_is_reproducible_and_max_tokens_ends_with_length(policy):
    params = SamplingParams(temperature=1.0, max_tokens=5)
    a = policy.generate(CONVS, params, generator=torch.Generator().manual_seed(7))
    b = policy.generate(CONVS, params, generator=torch.Generator().manual_seed(7))
    assert [(x.completion_ids, x.logprobs) for x in a] == [(x.completion_ids, x.logprobs) for x in b]
    c = policy.generate(CONVS, params, generator=torch.Generator().manual_seed(8))
    assert [x.completion_ids for x in c] != [x.completion_ids for x in a]
    for x in a:  # a random model almost never picks the EOS token among 320
        assert x.finish_reason == "length" and len(x.completion_ids) == len(x.logprobs) == 5
        assert policy.tokenizer.eos_token_id not in x.completion_ids


def test_chat_template_renders_tools_and_tool_calls(policy):
    history = [
        Message("user", "add 1 and 2"),
        Message("assistant", "", tool_calls=[ToolCall("add", {"a": 1, "b": 2}, id="call_0")]),
        Message("tool", "3", tool_call_id="call_0", name="add"),
    ]
    text = policy.render(history, [ADD])
    assert text.startswith('<s><|tools|>{"name": "add", "description": "Add two integers."')
    assert f"<|assistant|>{CALL}</s>\n<|tool|>3\n" in text and text.endswith("<|assistant|>")
    assert policy.generate(
        [history], SamplingParams(max_tokens=2), generator=torch.Generator().manual_seed(0), tools=[[ADD]]
    )


def test_a_template_without_tools_gets_them_as_text_and_no_template_gets_plain_lines(policy, checkpoint):
    history = [Message("user", "add 1 and 2"), Message("assistant", "sure", tool_calls=[ToolCall("add", {"a": 1})])]
    bare = AutoTokenizer.from_pretrained(checkpoint)
    bare.chat_template = BARE_TEMPLATE
    text = HFPolicy(policy.module, bare).render(history, [ADD])
    assert text.startswith('<s><|system|>You can call these tools:\n{"name": "add"')
    assert '<|assistant|>sure<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call></s>' in text
    none = AutoTokenizer.from_pretrained(checkpoint)
    none.chat_template = None
    plain = HFPolicy(policy.module, none).render(history)
    assert plain == (
        '<s>user: add 1 and 2\nassistant: sure<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call></s>\n'
        "assistant:"
    )


def test_training_through_token_logprobs_teaches_a_tool_call_that_stops_at_eos(checkpoint):
    policy = HFPolicy.load(checkpoint)
    conv = [Message("user", "add 1 and 2")]
    prompt = policy.encode_prompt(conv, [ADD])
    target = policy.tokenizer.encode(CALL, add_special_tokens=False) + [policy.tokenizer.eos_token_id]
    optimizer = torch.optim.Adam(policy.module.parameters(), lr=1e-2)
    for step in range(60):
        logp, _ = policy.token_logprobs([prompt], [target])
        optimizer.zero_grad()
        (-logp.mean()).backward()
        if step == 0:
            grad = policy.module.model.embed_tokens.weight.grad
            assert grad is not None and grad.abs().sum() > 0
        optimizer.step()
    out = policy.generate([conv], SamplingParams(temperature=0, max_tokens=40), tools=[[ADD]])[0]
    assert out.prompt_ids == prompt and out.completion_ids == target
    assert out.finish_reason == "tool_calls" and out.text == ""
    assert [(c.name, c.arguments) for c in out.tool_calls] == [("add", {"a": 1, "b": 2})]


def test_turn_ids_are_what_the_template_writes_for_a_logged_reply(policy, checkpoint):
    """A reply someone else wrote (a logged conversation), as this model would have sampled it: the
    prompt ids it renders, the reply's ids up to its end-of-sequence token — with tools, a tool call,
    a template that writes tool calls as text and none at all."""
    conv = [Message("user", "add 1 and 2")]
    call = Message("assistant", "", tool_calls=[ToolCall("add", {"a": 1, "b": 2})])
    eos = policy.tokenizer.eos_token_id
    prompt, completion = policy.turn_ids(conv, call, [ADD])
    assert prompt == policy.encode_prompt(conv, [ADD])
    assert completion == policy.tokenizer.encode(CALL, add_special_tokens=False) + [eos]
    # and what sampling gives is what turn_ids reads back from the sampled message
    out = policy.generate(
        CONVS, SamplingParams(temperature=1.0, max_tokens=12), generator=torch.Generator().manual_seed(1)
    )
    for conversation, sampled in zip(CONVS, out, strict=True):
        if sampled.finish_reason == "stop":
            assert policy.turn_ids(conversation, sampled.message()) == (sampled.prompt_ids, sampled.completion_ids)
    for template in (BARE_TEMPLATE, None):
        tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        tokenizer.chat_template = template
        other = HFPolicy(policy.module, tokenizer)
        prompt, completion = other.turn_ids(conv, call, [ADD])
        assert prompt == other.encode_prompt(conv, [ADD]) and completion[-1] == eos
        # (without a template the prompt ends "assistant:", and the reply's line goes on with " ")
        assert other.tokenizer.decode(completion).removeprefix(" ") == CALL + other.tokenizer.eos_token


def test_a_prompt_longer_than_the_context_says_what_to_lower(policy):
    with pytest.raises(ValueError, match="lower max_tokens or shorten the prompt"):
        policy.generate([[Message("user", "the lazy dog " * 120)]], SamplingParams(max_tokens=4))
    with pytest.raises(ValueError, match="context of .* \\(256 positions\\)"):
        policy.token_logprobs([[1] * 250], [[5] * 10])


def test_save_load_round_trip_gives_identical_outputs(policy, tmp_path):
    policy.save(tmp_path / "saved")
    loaded = load_policy(str(tmp_path / "saved"))
    greedy = SamplingParams(temperature=0, max_tokens=6)
    before, after = policy.generate(CONVS, greedy), loaded.generate(CONVS, greedy)
    assert [(c.completion_ids, c.logprobs) for c in before] == [(c.completion_ids, c.logprobs) for c in after]


def test_ludus_train_with_an_hf_model_checkpoints_and_resumes(checkpoint, tmp_path):
    config = load_config(
        overrides={
            "model": f"hf:{checkpoint}",
            "name": "hf",
            "runs_dir": str(tmp_path / "runs"),
            "env_args": {"digits": 1, "ops": "+"},
            "steps": 2,
            "prompts_per_step": 2,
            "group_size": 2,
            "max_tokens": 4,
            "lr": 1e-3,
            "beta": 0.01,  # a random model earns no reward; the KL and entropy terms still train every sample
            "eval_size": 4,
            "eval_every": 2,
            "checkpoint_every": 2,
            "time_limit_min": 0,
            "threads": 1,
        }
    )
    result = Trainer.create(config, log=lambda _: None).run()
    assert result.step == 2 and not result.interrupted
    records = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "reward/mean" in r] == [1, 2]
    saved = load_policy(str(result.run_dir / "checkpoints" / "step_000002"))
    final = load_policy(str(result.run_dir / "final"))
    start = load_policy(f"hf:{checkpoint}")
    assert isinstance(saved, HFPolicy) and isinstance(final, HFPolicy)
    weights = dict(saved.module.named_parameters())
    for name, value in final.module.named_parameters():
        assert torch.equal(weights[name], value), name
    assert any(not torch.equal(weights[n], p) for n, p in start.module.named_parameters())  # it did train
    logs: list[str] = []
    resumed = Trainer.resume_from(result.run_dir, log=logs.append).run()
    assert resumed.step == 2 and any("from step 2" in line for line in logs)  # reloaded, nothing re-run


def test_train_config_rejects_models_it_cannot_train(tmp_path):
    with pytest.raises(ConfigError, match="model server"):
        load_config(overrides={"model": "http://localhost:8000/v1"})
    with pytest.raises(ConfigError, match="no config.json"):
        load_config(overrides={"model": f"hf:{tmp_path}"})


def test_ludus_train_loads_hf_models_with_model_args_and_samples_ahead(checkpoint, tmp_path):
    """``model_args`` reach the loader (bfloat16 here) and asynchronous training runs on a copy
    of a transformers model as it does on the tiny one."""
    config = load_config(
        overrides={
            "model": f"hf:{checkpoint}",
            "model_args": {"dtype": "bfloat16"},
            "max_staleness": 1,
            "name": "hf-async",
            "runs_dir": str(tmp_path / "runs"),
            "env_args": {"digits": 1, "ops": "+"},
            "steps": 3,
            "prompts_per_step": 2,
            "group_size": 2,
            "max_tokens": 4,
            "beta": 0.01,
            "eval_size": 4,
            "eval_every": 0,
            "checkpoint_every": 0,
            "time_limit_min": 0,
            "threads": 1,
        }
    )
    trainer = Trainer.create(config, log=lambda _: None)
    result = trainer.run()
    assert result.step == 3 and trainer.policy.module.dtype == torch.bfloat16
    train = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["staleness/max"] for r in train if "reward/mean" in r][1:] == [1, 1]


def test_model_args_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="device, dtype and tool_format only"):
        load_config(overrides={"model_args": {"devic": "cuda"}})
    with pytest.raises(ConfigError, match="applies to transformers models"):
        load_config(overrides={"model_args": {"dtype": "bfloat16"}})
