"""The embedded model: sampling log-probs match scoring, greedy is deterministic, save/load round-trips, and a
saved model is a GPT-2 that transformers reads."""

import json
from dataclasses import asdict

import pytest
import torch

from ludus.core.types import Message
from ludus.policies.base import SamplingParams
from ludus.policies.tiny import EOS, PAD, ByteTokenizer, TinyConfig, TinyPolicy

CONVS = [[Message("user", "1+2=")], [Message("user", "13+24=")], [Message("user", "123+456=")]]


def test_tokenizer_round_trips_any_text_and_renders_chat():
    tok = ByteTokenizer()
    text = "naïve 37+45=82 ✓"
    assert tok.decode(tok.encode(text)) == text
    ids = tok.render([Message("system", "ignored"), Message("user", "2+2="), Message("assistant", "4")])
    assert tok.decode(ids) == "2+2=\n4" and ids[-1] == EOS


def test_sampled_logprobs_equal_rescored_logprobs_across_padding():
    policy = TinyPolicy(TinyConfig(d_model=32, n_layers=2, n_heads=2, max_len=32), seed=1)
    gen = torch.Generator().manual_seed(0)
    for temperature in (1.0, 0.7):
        out = policy.generate(CONVS, SamplingParams(temperature=temperature, max_tokens=6), generator=gen)
        logp, entropy = policy.token_logprobs([c.prompt_ids for c in out], [c.completion_ids for c in out], temperature)
        for i, c in enumerate(out):
            assert torch.allclose(logp[i, : len(c.completion_ids)], torch.tensor(c.logprobs), atol=1e-4)
        assert (entropy >= 0).all()


def test_kv_cache_generation_matches_full_recompute():
    policy = TinyPolicy(TinyConfig(d_model=32, n_layers=2, n_heads=2, max_len=32), seed=2)
    out = policy.generate(CONVS, SamplingParams(temperature=0, max_tokens=8))
    for conv, c in zip(CONVS, out, strict=True):
        ids = ByteTokenizer().render(conv)
        for expected in c.completion_ids:  # greedy, one token at a time, no cache
            n = len(ids)
            logits, _ = policy.module(
                torch.tensor([ids]), torch.arange(n)[None], torch.ones(n, n, dtype=torch.bool).tril()[None, None]
            )
            assert int(logits[0, -1].argmax()) == expected
            ids.append(expected)


def test_seeded_sampling_is_reproducible_and_top_p_one_token():
    policy = TinyPolicy(TinyConfig(d_model=32, n_layers=1, n_heads=2, max_len=32), seed=3)
    a = policy.generate(CONVS, SamplingParams(max_tokens=5), generator=torch.Generator().manual_seed(7))
    b = policy.generate(CONVS, SamplingParams(max_tokens=5), generator=torch.Generator().manual_seed(7))
    assert [x.completion_ids for x in a] == [x.completion_ids for x in b]
    greedy = policy.generate(CONVS, SamplingParams(temperature=0, max_tokens=5))
    nucleus = policy.generate(
        CONVS, SamplingParams(top_p=1e-6, max_tokens=5), generator=torch.Generator().manual_seed(1)
    )
    assert [x.completion_ids for x in nucleus] == [x.completion_ids for x in greedy]


def test_save_load_round_trip(tmp_path):
    policy = TinyPolicy(TinyConfig(d_model=32, n_layers=1, n_heads=2, max_len=32), seed=4)
    policy.save(tmp_path / "m")
    loaded = TinyPolicy.load(tmp_path / "m")
    assert loaded.config == policy.config
    for (k, a), (_, b) in zip(policy.module.state_dict().items(), loaded.module.state_dict().items(), strict=True):
        assert torch.equal(a, b), k
    with pytest.raises(FileNotFoundError, match="config.json"):
        TinyPolicy.load(tmp_path / "missing")


def test_a_saved_tiny_model_is_a_gpt2_that_transformers_reads(tmp_path):
    """The same model under transformers: the same log-probs and the same greedy reply, from byte ids."""
    from transformers import AutoModelForCausalLM

    policy = TinyPolicy(TinyConfig(d_model=32, n_layers=2, n_heads=2, max_len=32), seed=5)
    policy.save(tmp_path / "m")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "m").eval()
    assert type(model).__name__ == "GPT2LMHeadModel"
    for conv, ours in zip(CONVS, policy.generate(CONVS, SamplingParams(temperature=0, max_tokens=8)), strict=True):
        prompt = torch.tensor([ByteTokenizer().render(conv)])
        with torch.no_grad():
            theirs = model.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                max_new_tokens=8,
                do_sample=False,
                eos_token_id=EOS,
                pad_token_id=PAD,
            )[0, prompt.shape[1] :].tolist()
            logits = model(torch.tensor([ours.prompt_ids + ours.completion_ids])).logits[0]
        assert theirs == ours.completion_ids
        logp = torch.log_softmax(logits[len(ours.prompt_ids) - 1 : -1], -1)
        gathered = logp.gather(1, torch.tensor(ours.completion_ids)[:, None])[:, 0]
        assert torch.allclose(gathered, torch.tensor(ours.logprobs), atol=1e-4)


def test_a_folder_saved_in_the_earlier_layout_still_loads(tmp_path):
    """Folders saved before tiny folders were GPT-2 folders (cached base models among them)."""
    policy = TinyPolicy(TinyConfig(d_model=32, n_layers=1, n_heads=2, max_len=32), seed=6)
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "config.json").write_text(json.dumps({"kind": "tiny", **asdict(policy.config)}))
    torch.save(policy.module.state_dict(), tmp_path / "old" / "model.pt")
    loaded = TinyPolicy.load(tmp_path / "old")
    for name, value in policy.module.state_dict().items():
        assert torch.equal(loaded.module.state_dict()[name], value), name


def test_prompt_longer_than_context_is_a_clear_error():
    policy = TinyPolicy(TinyConfig(d_model=32, n_layers=1, n_heads=2, max_len=16), seed=0)
    with pytest.raises(ValueError, match="context"):
        policy.generate([[Message("user", "x" * 20)]], SamplingParams(max_tokens=4))
    with pytest.raises(ValueError, match="max_len"):  # training on too long a sequence says so too
        policy.token_logprobs([list(range(1, 13))], [list(range(1, 9))])
