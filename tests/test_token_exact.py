"""Token-exact multi-turn training: turns whose prompt ids continue the previous turn's ids merge
into one masked sample, turns whose history was re-rendered start a new one, and the merged
sample teaches exactly what the per-turn samples teach — on the embedded model and a real
transformers model, with a real chat template that drops earlier thinking blocks."""

import copy
import dataclasses
import json
import math
import os
from collections.abc import Callable

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the Hub

from ludus.core import Env, Message, Observation, Score, Status, StepResult, Task  # noqa: E402
from ludus.core.registry import register  # noqa: E402
from ludus.core.types import Trajectory, Turn, chained_turns  # noqa: E402
from ludus.policies.base import TrainablePolicy  # noqa: E402
from ludus.policies.hf import HFPolicy  # noqa: E402
from ludus.policies.tiny import EOS, TinyConfig, TinyPolicy  # noqa: E402
from ludus.train.config import TrainConfig  # noqa: E402
from ludus.train.grpo import Learner, Sample, build_samples, chaining_metrics, update  # noqa: E402
from ludus.train.trainer import Trainer  # noqa: E402
from support import build_hf_checkpoint  # noqa: E402


def _traj(turns: list[Turn], reward: float = 0.0) -> Trajectory:
    """An episode of ``turns``, ``reward`` paid on its last turn (as a final verdict is)."""
    turns = [*turns[:-1], dataclasses.replace(turns[-1], reward=turns[-1].reward + reward)]
    total = sum(t.reward for t in turns)
    return Trajectory(Task("t", "p"), [], turns=turns, score=Score(total, Status.CORRECT if total else Status.WRONG))


def _turn(prompt: list[int], completion: list[int], reward: float = 0.0, finish: str = "stop") -> Turn:
    return Turn(prompt, completion, [-0.1 * t for t in completion], reward=reward, finish_reason=finish)


# Three turns that chain: the environment adds [5, 6], then [8], between the replies.
CHAINED = [_turn([1, 2], [3, 4]), _turn([1, 2, 3, 4, 5, 6], [7]), _turn([1, 2, 3, 4, 5, 6, 7, 8], [9, 10])]
# The same episode, its second prompt re-rendering the first reply (3, 4 -> 3, 99): turn 2 cannot join turn 1.
RERENDERED = [CHAINED[0], _turn([1, 2, 3, 99, 5, 6], [7]), _turn([1, 2, 3, 99, 5, 6, 7, 8], [9, 10])]


def test_chained_turns_become_one_sample_masked_on_the_environments_tokens():
    samples = build_samples([[_traj(CHAINED, 1.0), _traj(CHAINED, 0.0)]], TrainConfig().loss())
    assert len(samples) == 2 and samples[0].advantage == -samples[1].advantage > 0
    s = samples[0]
    assert (s.prompt_ids, s.completion_ids) == ([1, 2], [3, 4, 5, 6, 7, 8, 9, 10])
    assert s.loss_mask == [1, 1, 0, 0, 1, 0, 1, 1]
    assert s.behaviour_logprobs == pytest.approx([-0.3, -0.4, 0.0, 0.0, -0.7, 0.0, -0.9, -1.0])
    assert s.token_mask().tolist() == [bool(m) for m in s.loss_mask]
    assert chaining_metrics([[_traj(CHAINED, 1.0), _traj(CHAINED, 0.0)]]) == {
        "multiturn/merged_turns": 4,
        "multiturn/split_turns": 0,
        "multiturn/split_episodes": 0,
    }


def test_a_re_rendered_history_splits_the_episode_into_samples_of_one_advantage():
    group = [_traj(RERENDERED, 1.0), _traj(CHAINED, 0.0)]
    assert chained_turns(RERENDERED) == [[0], [1, 2]]
    samples = build_samples([group], TrainConfig().loss())
    first, second, other = samples
    assert (first.prompt_ids, first.completion_ids, first.loss_mask) == ([1, 2], [3, 4], None)
    assert (second.prompt_ids, second.completion_ids) == ([1, 2, 3, 99, 5, 6], [7, 8, 9, 10])
    assert second.loss_mask == [1, 0, 1, 1]
    assert first.advantage == second.advantage == -other.advantage > 0  # the episode's advantage, both parts
    assert chaining_metrics([group]) == {
        "multiturn/merged_turns": 3,  # turn 2 of the first episode, turns 1 and 2 of the second
        "multiturn/split_turns": 1,
        "multiturn/split_episodes": 1,
    }


def test_single_turn_episodes_are_plain_samples_and_log_no_chaining():
    group = [_traj([_turn([1], [2, 3])], 1.0), _traj([_turn([1], [4])], 0.0)]
    samples = build_samples([group], TrainConfig().loss())
    assert [(s.prompt_ids, s.completion_ids, s.loss_mask) for s in samples] == [([1], [2, 3], None), ([1], [4], None)]
    assert chaining_metrics([group]) == {}


def test_reward_to_go_merges_only_chained_turns_of_equal_advantage():
    # turn rewards [1, 0, 0] and [0, 0, 0]: returns to go [1, 0, 0] and [0, 0, 0], baseline 0.5
    paid = [_turn(t.prompt_ids, t.completion_ids, reward=r) for t, r in zip(CHAINED, [1.0, 0.0, 0.0], strict=True)]
    config = TrainConfig(turn_credit="reward_to_go", scale_rewards="none").loss()
    first, rest, other = build_samples([[_traj(paid), _traj(CHAINED)]], config)
    assert (first.completion_ids, first.advantage, first.loss_mask) == ([3, 4], 0.5, None)
    assert (rest.prompt_ids, rest.completion_ids, rest.advantage) == ([1, 2, 3, 4, 5, 6], [7, 8, 9, 10], -0.5)
    assert rest.loss_mask == [1, 0, 1, 1]
    assert (other.completion_ids, other.advantage) == ([3, 4, 5, 6, 7, 8, 9, 10], -0.5)
    # returns to go [1, 0.5, 0]: the middle turn's advantage is 0, so it trains nothing and is left out
    middle = [_turn(t.prompt_ids, t.completion_ids, reward=0.5) for t in CHAINED[:2]] + [CHAINED[2]]
    samples = build_samples([[_traj(middle), _traj(CHAINED)]], config)
    assert [(s.prompt_ids, s.completion_ids, s.advantage) for s in samples[:2]] == [
        ([1, 2], [3, 4], 0.5),
        ([1, 2, 3, 4, 5, 6, 7, 8], [9, 10], -0.5),
    ]


def test_overlong_filter_masks_a_cut_off_turn_inside_a_run_and_never_drops_its_tokens():
    config = TrainConfig(overlong_filter=True).loss()

    def cut(k: int) -> list[Turn]:
        return [
            _turn(t.prompt_ids, t.completion_ids, finish="length" if i == k else "stop") for i, t in enumerate(CHAINED)
        ]

    (middle, _) = build_samples([[_traj(cut(1), 1.0), _traj(CHAINED, 0.0)]], config)
    assert (middle.prompt_ids, middle.completion_ids) == ([1, 2], [3, 4, 5, 6, 7, 8, 9, 10])
    assert middle.loss_mask == [1, 1, 0, 0, 0, 0, 1, 1] and middle.behaviour_logprobs[4] == 0.0
    (first, _) = build_samples([[_traj(cut(0), 1.0), _traj(CHAINED, 0.0)]], config)
    assert (first.prompt_ids, first.completion_ids, first.loss_mask) == (
        [1, 2, 3, 4, 5, 6],
        [7, 8, 9, 10],
        [1, 0, 1, 1],
    )
    (last, _) = build_samples([[_traj(cut(2), 1.0), _traj(CHAINED, 0.0)]], config)
    assert (last.prompt_ids, last.completion_ids, last.loss_mask) == ([1, 2], [3, 4, 5, 6, 7], [1, 1, 0, 0, 1])
    every = [_turn(t.prompt_ids, t.completion_ids, finish="length") for t in CHAINED]
    assert len(build_samples([[_traj(every, 1.0), _traj(CHAINED, 0.0)]], config)) == 1  # nothing left to train
    assert len(build_samples([[_traj(cut(1), 1.0), _traj(CHAINED, 0.0)]], TrainConfig().loss())[0].loss_mask) == 8


# ---- the gradient of a merged sample is the per-turn samples' ----

CONVERSATION = [
    Message("user", "What is 2+2?"),
    Message("assistant", "<think>add</think>4"),
    Message("user", "Times 3?"),
    Message("assistant", "<think>multiply</think>12"),
    Message("user", "Minus 1?"),
    Message("assistant", "11"),
]
WRONG = [Message(m.role, m.content.replace("4", "5").replace("12", "15").replace("11", "14")) for m in CONVERSATION]


def episode_turns(
    conversation: list[Message], prompt_ids: Callable[[list[Message]], list[int]], reply_ids: Callable[[str], list[int]]
) -> list[Turn]:
    """The turns a policy records for ``conversation``: before each assistant message the prompt
    as the policy renders the history, then the reply's ids as sampled."""
    turns = []
    for k, message in enumerate(conversation):
        if message.role == "assistant":
            ids = reply_ids(message.content)
            turns.append(Turn(prompt_ids(conversation[:k]), ids, [0.0] * len(ids)))
    return turns


def _with_behaviour(policy: TrainablePolicy, turns: list[Turn], seed: int) -> list[Turn]:
    """The turns with behaviour log-probs near the policy's own: off by up to ±0.3, so that ratios
    move away from 1 and some are clipped."""
    logp, _ = policy.token_logprobs([t.prompt_ids for t in turns], [t.completion_ids for t in turns])
    noise = torch.Generator().manual_seed(seed)
    return [
        Turn(
            t.prompt_ids,
            t.completion_ids,
            (
                logp[i, : len(t.completion_ids)].detach()
                + 0.3 * (2 * torch.rand(len(t.completion_ids), generator=noise) - 1)
            ).tolist(),
        )
        for i, t in enumerate(turns)
    ]


def turns_of(policy: TrainablePolicy, conversation: list[Message]) -> list[Turn]:
    """The turns ``policy`` (the embedded model or a transformers one) records for ``conversation``."""
    if isinstance(policy, TinyPolicy):
        tokenizer = policy.tokenizer
        return episode_turns(conversation, tokenizer.render, lambda text: [*tokenizer.encode(text), EOS])
    assert isinstance(policy, HFPolicy)
    eos, encode = policy.tokenizer.eos_token_id, policy.tokenizer.encode
    return episode_turns(
        conversation, policy.encode_prompt, lambda text: [*encode(text, add_special_tokens=False), eos]
    )


@pytest.fixture(scope="module")
def hf_checkpoint(tmp_path_factory):
    return build_hf_checkpoint(tmp_path_factory.mktemp("hf") / "model", texts=[m.content for m in CONVERSATION])


# Qwen3's way with history: an assistant message before the last user message loses its <think> block.
VERBATIM = (
    "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}"
    "{% if m.role == 'assistant' %}{{ eos_token }}{% endif %}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
THINK_DROPPING = (
    "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>\n"
    "{% if m.role == 'assistant' %}{{ m.content.split('</think>')[-1].lstrip('\\n') }}{{ eos_token }}"
    "{% else %}{{ m.content }}{% endif %}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def _hf(checkpoint, template: str) -> HFPolicy:
    policy = HFPolicy.load(checkpoint)
    policy.tokenizer.chat_template = template
    return policy


def _learn(policy: TrainablePolicy, samples: list[Sample], **overrides) -> tuple[dict[str, float], list[torch.Tensor]]:
    """One update of a copy of ``policy`` on ``samples`` by plain SGD at lr 1 (no gradient
    clipping): its statistics and every parameter's change, which is minus the gradient."""
    config = TrainConfig(ppo_epochs=1, minibatches=1, max_grad_norm=1e9, **overrides).loss()
    learner = copy.deepcopy(policy)
    reference = None
    if config.beta > 0:  # weights a little away from the learner's, so that the KL term is not 0
        reference = copy.deepcopy(policy.module)
        noise = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for p in reference.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=noise))
    before = [p.detach().clone() for p in learner.module.parameters()]
    optimizer = torch.optim.SGD(learner.module.parameters(), lr=1.0)
    stats = update(Learner(learner, optimizer, reference, torch.Generator().manual_seed(0)), samples, config)
    return stats, [p.detach() - b for p, b in zip(learner.module.parameters(), before, strict=True)]


VARIANTS = {
    "on-policy": {},
    "kl-entropy-importance": {"beta": 0.1, "entropy_coef": 0.05, "max_staleness": 1, "eps_high": 0.1},
}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("model", ["tiny", "hf"])
def test_a_merged_sample_has_the_loss_and_gradient_of_its_turns_and_none_from_the_environments_tokens(
    model, variant, hf_checkpoint
):
    if model == "tiny":
        policy = TinyPolicy(TinyConfig(d_model=32, n_layers=2, n_heads=2, max_len=128), seed=3)
    else:
        policy = _hf(hf_checkpoint, VERBATIM)
    good, bad = turns_of(policy, CONVERSATION), turns_of(policy, WRONG)
    assert chained_turns(good) == chained_turns(bad) == [[0, 1, 2]]
    good, bad = _with_behaviour(policy, good, seed=1), _with_behaviour(policy, bad, seed=2)
    group = [_traj(good, 1.0), _traj(bad, 0.0)]
    merged = build_samples([group], TrainConfig().loss())
    assert len(merged) == 2 and all(s.loss_mask is not None and 0 in s.loss_mask for s in merged)
    per_turn = [
        Sample(t.prompt_ids, t.completion_ids, t.logprobs, s.advantage)
        for traj, s in zip(group, merged, strict=True)
        for t in traj.turns
    ]
    overrides = VARIANTS[variant]
    merged_stats, merged_step = _learn(policy, merged, **overrides)
    turn_stats, turn_step = _learn(policy, per_turn, **overrides)
    assert (merged_stats.pop("trained_samples"), turn_stats.pop("trained_samples")) == (2, 6)
    assert merged_stats.pop("grad_norm") == pytest.approx(turn_stats.pop("grad_norm"), rel=1e-4)
    assert merged_stats == pytest.approx(turn_stats, rel=1e-4, abs=1e-6)  # loss, kl, entropy, clip, importance, gap
    if overrides:  # the ratio is taken against these weights: the importance weights do the work
        assert merged_stats["kl"] > 0 and merged_stats["logprob_gap/max"] > 0.1
        assert merged_stats["importance/mean"] != 1 and merged_stats["importance/capped"] == 0
    else:
        assert merged_stats["clip_frac"] > 0
    for a, b in zip(merged_step, turn_step, strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-7)
    assert any(a.abs().max() > 1e-4 for a in merged_step)

    # whatever the environment's tokens hold as behaviour log-probs, nothing changes
    wild = [-1e30, 50.0, math.nan]
    perturbed = [
        Sample(
            s.prompt_ids,
            s.completion_ids,
            [
                b if m else wild[i % 3]
                for i, (b, m) in enumerate(zip(s.behaviour_logprobs, s.loss_mask or [], strict=True))
            ],
            s.advantage,
            loss_mask=s.loss_mask,
        )
        for s in merged
    ]
    perturbed_stats, perturbed_step = _learn(policy, perturbed, **overrides)
    assert perturbed_stats == merged_stats | {"trained_samples": 2, "grad_norm": perturbed_stats["grad_norm"]}
    assert all(torch.equal(a, b) for a, b in zip(perturbed_step, merged_step, strict=True))


def test_a_template_that_drops_earlier_thinking_splits_the_episode_and_one_that_keeps_history_merges(hf_checkpoint):
    dropping = turns_of(_hf(hf_checkpoint, THINK_DROPPING), CONVERSATION)
    verbatim = turns_of(_hf(hf_checkpoint, VERBATIM), CONVERSATION)
    assert [t.completion_ids for t in dropping] == [t.completion_ids for t in verbatim]  # the same replies
    assert dropping[0].prompt_ids == verbatim[0].prompt_ids
    # the second prompt shows the first reply without its <think> block: not the ids that were sampled
    assert chained_turns(dropping) == [[0], [1], [2]] and chained_turns(verbatim) == [[0, 1, 2]]
    config = TrainConfig().loss()
    split = build_samples([[_traj(dropping, 1.0), _traj(dropping, 0.0)]], config)
    assert [len(s.prompt_ids) for s in split[:3]] == [len(t.prompt_ids) for t in dropping]
    assert all(s.loss_mask is None for s in split) and len({s.advantage for s in split[:3]}) == 1
    assert chaining_metrics([[_traj(dropping, 1.0), _traj(dropping, 0.0)]]) == {
        "multiturn/merged_turns": 0,
        "multiturn/split_turns": 4,
        "multiturn/split_episodes": 2,
    }
    (one, _) = build_samples([[_traj(verbatim, 1.0), _traj(verbatim, 0.0)]], config)
    assert one.prompt_ids == verbatim[0].prompt_ids
    assert one.prompt_ids + one.completion_ids == verbatim[2].prompt_ids + verbatim[2].completion_ids
    assert sum(one.loss_mask or []) == sum(len(t.completion_ids) for t in verbatim)
    assert chaining_metrics([[_traj(verbatim, 1.0), _traj(verbatim, 0.0)]])["multiturn/merged_turns"] == 4


# ---- the trainer logs how its multi-turn episodes were trained ----


class _Count:
    size = None

    def __init__(self, split: str):
        self.split = split

    def get(self, index: int) -> Task:
        return Task(f"{self.split}/{index}", f"{index % 10}?")


class ThreeTries(Env):
    """Three tries to begin the reply with a plain ASCII character, each miss answered with "no":
    a random embedded model hits it about half the time, so groups carry signal from the start."""

    name = "three-tries"
    description = "begin the reply with an ASCII character, three tries"
    quick = True
    max_turns = 3

    def default_tasks(self, split="train"):
        return _Count(split)

    def begin(self, task: Task) -> Observation:
        return Observation([Message("user", task.prompt)])

    def transition(self, action: Message) -> StepResult:
        first = action.content[:1]
        if first and first.isascii() and first.isprintable():
            return StepResult(Observation([]), 1.0, terminated=True, score=Score(1.0, Status.CORRECT, "ascii"))
        return StepResult(Observation([Message("user", "no")]))


register("three-tries", ThreeTries)


def test_the_trainer_logs_merged_and_split_turns_of_multi_turn_episodes(small_config):
    config = small_config(
        name="tries", env="three-tries", env_args={}, warmstart_steps=0, steps=2, eval_every=0, temperature=1.0,
        tiny={"d_model": 32, "n_layers": 1, "n_heads": 2, "max_len": 32}, max_tokens=3, samples_per_step=16,
    )  # fmt: skip
    result = Trainer.create(config, log=lambda _: None).run()
    lines = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in lines if "reward/mean" in r]
    samples = [json.loads(x) for x in (result.run_dir / "samples.jsonl").read_text().splitlines()]
    assert len(train) == 2 and all(math.isfinite(r["loss"]) for r in train)
    later_turns = sum(len(s["turns"]) - 1 for s in samples if s["step"] == 1)
    first = train[0]
    assert later_turns > 0 and first["multiturn/merged_turns"] + first["multiturn/split_turns"] == later_turns
    assert first["multiturn/split_episodes"] <= first["multiturn/split_turns"]
    assert any(r["trained_samples"] > 0 for r in train)
