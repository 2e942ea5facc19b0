"""Training with generation on an inference server: the learner here, a real vLLM (or `ludus
serve-model`) on 127.0.0.1 sampling token ids in and out, the learner's weights pushed to it after
every update.

vLLM runs in its own virtual environment (scripts/vllm-venv, built the first time) and serves a
tiny Llama the tests build (heads 32 wide: vLLM's CPU attention needs that); one server serves the
whole session (the ``vllm`` fixture). Tests push their own weights to it. The test that kills it
comes last; a later test would get a new server from ``vllm.ensure()``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import httpx
import pytest
import torch
import yaml

from ludus.cli import main
from ludus.core import Env, Score, Status, Task
from ludus.core.registry import register
from ludus.core.types import Message, Observation, StepResult, ToolCall
from ludus.policies.base import ContextFull, PolicyError, SamplingParams
from ludus.policies.hf import HFPolicy
from ludus.policies.openai import OpenAIPolicy
from ludus.policies.rollout_server import RolloutServerPolicy
from ludus.serve.model_server import create_app
from ludus.train.config import ConfigError, load_config
from ludus.train.run_folder import RunFolder
from ludus.train.trainer import Trainer, TrainingHalted
from support import DigitMapEnv, DigitTasks, serving, warm_start_digits

pytestmark = pytest.mark.slow

CONVS = [
    [Message("user", "hi")],
    [Message("system", "Be brief."), Message("user", "What is 12 + 30? Answer with the number only, please.")],
    [Message("user", "The quick brown fox")],
]


register("digit-map", DigitMapEnv)


class TwoTurnEnv(Env):
    """The digit task in two turns: the first reply gets "Once more?", the second is graded.
    ``between_turns`` (when set) runs at the first reply of an episode: the fault tests kill the
    server there, in the middle of a step. ``at_grading`` runs when a second reply is graded, once
    the step's replies are all sampled: a server killed there dies before the step's weight push."""

    name = "two-turns"
    description = "the digit task, answered twice"
    quick = True
    max_turns = 2
    between_turns: ClassVar[list[Callable[[], None]]] = []
    at_grading: ClassVar[list[Callable[[], None]]] = []

    def default_tasks(self, split="train"):
        return DigitTasks(split)

    def begin(self, task: Task) -> Observation:
        self.asked_twice = False
        return Observation([Message("user", task.prompt)])

    def transition(self, action: Message) -> StepResult:
        if not self.asked_twice:
            self.asked_twice = True
            while self.between_turns:
                self.between_turns.pop()()
            return StepResult(Observation([Message("user", "Once more?")]))
        while self.at_grading:
            self.at_grading.pop()()
        right = action.content.strip() == self.task.answer
        score = Score(1.0, Status.CORRECT, "right digit") if right else Score.zero(Status.WRONG, "wrong digit")
        return StepResult(Observation([]), reward=score.value, terminated=True, score=score)


register("two-turns", TwoTurnEnv)


@pytest.fixture(scope="module")
def warm_model(tiny_llama, tmp_path_factory) -> Path:
    """``tiny_llama`` after a short supervised warm-start on gold digits (support.warm_start_digits)."""
    return warm_start_digits(tiny_llama, tmp_path_factory.mktemp("warm") / "model")


@pytest.fixture(params=["vllm", "serve-model"])
def rollout_url(request, tiny_llama):
    """A rollout server that starts with ``tiny_llama``'s weights: the session's vLLM, or `ludus
    serve-model` (weight updates on) in this process."""
    if request.param == "vllm":
        yield request.getfixturevalue("vllm").ensure().url
        return
    with serving(create_app(HFPolicy.load(tiny_llama), "tiny", weight_updates=True)) as url:
        yield url


def _root(url: str) -> str:
    return url.removesuffix("/v1")


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _samples(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


def _perturbed(checkpoint: Path, seed: int) -> HFPolicy:
    """The checkpoint's model with its weights moved: what the server holds is then not what the learner has."""
    policy = HFPolicy.load(checkpoint)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.module.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    return policy


# ---- configuration -----------------------------------------------------------------------------
def test_rollout_server_settings_are_checked_with_clear_errors(tiny_llama, tmp_path, capsys):
    with pytest.raises(ConfigError, match="needs a transformers model.*hf:PATH"):
        load_config(overrides={"rollout_server": "http://127.0.0.1:8000/v1"})
    with pytest.raises(ConfigError, match="must be the /v1 URL"):
        load_config(overrides={"model": f"hf:{tiny_llama}", "rollout_server": "127.0.0.1:8000"})
    with pytest.raises(ConfigError, match="top_p.*must be 1"):
        load_config(overrides={"model": f"hf:{tiny_llama}", "rollout_server": "http://h:1/v1", "top_p": 0.9})
    with pytest.raises(ConfigError, match="rollout_logprob_tolerance"):
        load_config(overrides={"rollout_logprob_tolerance": -1})
    assert main(["train", "--rollout-server", "http://127.0.0.1:8000/v1", "--runs-dir", str(tmp_path)]) == 2
    assert "needs a transformers model" in capsys.readouterr().err
    config = load_config(
        overrides={
            "model": f"hf:{tiny_llama}",
            "rollout_server": "http://127.0.0.1:9/v1",  # nothing listens there
            "runs_dir": str(tmp_path),
            "time_limit_min": 0,
        }
    )
    with pytest.raises(ConfigError, match="'rollout_server'.*127.0.0.1:9.*Check that the server is up"):
        Trainer.create(config, log=lambda _: None).run()


def test_a_server_whose_logprobs_are_not_the_learners_is_refused_at_the_start(tiny_llama, tmp_path):
    """A bfloat16 server reports log-probs 1e-3 to 1e-2 off the float32 learner's: refused below
    that tolerance, accepted above it."""
    server = HFPolicy.load(tiny_llama, dtype="bfloat16")
    with serving(create_app(server, "tiny", weight_updates=True)) as url:
        base = {"model": f"hf:{tiny_llama}", "rollout_server": url, "runs_dir": str(tmp_path), "time_limit_min": 0}
        strict = load_config(overrides={**base, "name": "strict", "rollout_logprob_tolerance": 1e-4, "steps": 1})
        with pytest.raises(TrainingHalted, match=r"differ from the learner's by .* per token.*processed_logprobs"):
            Trainer.create(strict, log=lambda _: None).run()
        lenient = load_config(
            overrides={**base, "name": "lenient", "rollout_logprob_tolerance": 0.5, "steps": 1, "eval_size": 2}
        )
        assert Trainer.create(lenient, log=lambda _: None).run().step == 1


# ---- sampler and learner must agree ------------------------------------------------------------
class UntemperedLogprobs(HFPolicy):
    """A server's model that samples at the request's temperature but reports each token's log-prob
    under the untempered distribution: what vLLM does without ``--logprobs-mode processed_logprobs``."""

    def generate_from_ids(self, prompts, sampling, *, generator=None):
        replies = super().generate_from_ids(prompts, sampling, generator=generator)
        with torch.no_grad():
            logp, _ = self.token_logprobs([r.prompt_ids for r in replies], [r.completion_ids for r in replies], 1.0)
        return [
            dataclasses.replace(r, logprobs=logp[i, : len(r.completion_ids)].tolist()) for i, r in enumerate(replies)
        ]


class LoadsTheFirstWeightsOnly(HFPolicy):
    """A server's model that loads the first pushed weights and silently keeps them through every
    later push, while the version tags the client sets still advance: a server lagging the learner."""

    loaded = False

    def load_weights(self, path):
        if not self.loaded:
            super().load_weights(path)
            self.loaded = True


def test_the_probe_tells_a_correct_server_from_one_reporting_untempered_logprobs(warm_model, tmp_path):
    """Greedy and sampled replies to several prompts: a correct float32 server is about 1e-7 per
    token off the learner, one reporting untempered log-probs 1e-2 or more, and its log-probs are
    the untempered distribution's. (The old probe, one sampled reply of up to 8 tokens under a
    0.1 tolerance, let such a vLLM through 10 times in 13.)"""
    for server, expected in [(HFPolicy, False), (UntemperedLogprobs, True)]:
        with serving(create_app(server.load(warm_model), "tiny", weight_updates=True)) as url:
            learner = HFPolicy.load(warm_model)
            client = RolloutServerPolicy(url, learner, weights_dir=tmp_path / server.__name__)
            client.sync(learner)
            gap = client.logprob_gap(0.7)
            assert gap.tokens >= 20 and gap.before_temperature is expected, gap
            if expected:
                assert gap.mean > 1e-2 and gap.untempered < 1e-5
            else:
                assert gap.mean < 1e-5 and gap.max < 1e-4 and gap.untempered > 1e-2
            at_one = client.logprob_gap(1.0)  # at temperature 1 the two distributions are one
            assert at_one.mean < 1e-5 and at_one.untempered is None and not at_one.before_temperature
            client.close()


def test_a_server_reporting_untempered_logprobs_is_refused_at_the_start(warm_model, tmp_path):
    with serving(create_app(UntemperedLogprobs.load(warm_model), "tiny", weight_updates=True)) as url:
        for tolerance in (1e-3, 0.5):  # however loose the tolerance: these are another distribution's
            config = load_config(
                overrides={
                    "model": f"hf:{warm_model}",
                    "rollout_server": url,
                    "env": "digit-map",
                    "env_args": {},
                    "temperature": 0.7,
                    "rollout_logprob_tolerance": tolerance,
                    "steps": 2,
                    "time_limit_min": 0,
                    "threads": 1,
                    "runs_dir": str(tmp_path),
                    "name": f"tolerance-{tolerance}",
                }
            )
            with pytest.raises(
                TrainingHalted, match=r"untempered distribution .* start vLLM with --logprobs-mode processed_logprobs"
            ):
                Trainer.create(config, log=lambda _: None).run()


def test_a_server_that_stops_loading_the_pushed_weights_is_stopped_before_learning_from_it(warm_model, tmp_path):
    """The server passes the start-up probe (it loads the first push), then keeps those weights:
    step 2's replies come from the weights before step 1's update, about 0.25 per token off the
    learner's. The run stops at step 2, before its update, whether or not the loss corrects."""
    weights: dict[int, dict[str, torch.Tensor]] = {}
    with serving(create_app(LoadsTheFirstWeightsOnly.load(warm_model), "tiny", weight_updates=True)) as url:
        config = load_config(
            overrides={
                "model": f"hf:{warm_model}",
                "rollout_server": url,
                "rollout_correction": False,  # the ratio against the server's log-probs, as before the correction
                "env": "digit-map",
                "env_args": {},
                "steps": 6,
                "prompts_per_step": 8,
                "group_size": 8,
                "max_tokens": 2,
                "temperature": 1.0,
                "lr": 1e-3,
                "entropy_coef": 0,
                "eval_size": 4,
                "eval_every": 0,
                "checkpoint_every": 0,
                "time_limit_min": 0,
                "threads": 1,
                "runs_dir": str(tmp_path),
            }
        )
        trainer = Trainer.create(config, log=lambda _: None)

        def keep_weights(record: dict) -> None:
            if "reward/mean" in record:
                weights[record["step"]] = {k: v.clone() for k, v in trainer.policy.module.state_dict().items()}

        with pytest.raises(
            TrainingHalted,
            match=r"step 2: the rollout server .* no longer samples as the learner: .* by 0\.\d+ per token .*"
            r"did not load the pushed weights.*Nothing was learned from this step.*--resume",
        ):
            trainer.run(keep_weights)
    train = [r for r in _records(trainer.run_dir) if "reward/mean" in r]
    assert [r["step"] for r in train] == [1]
    first = train[0]
    assert first["logprob_gap/mean"] < 1e-5 and first["logprob_gap/frac"] == 0 and "importance/mean" not in first
    assert all(torch.equal(v, weights[1][k]) for k, v in trainer.policy.module.state_dict().items())


# ---- token in, token out -----------------------------------------------------------------------
def test_behaviour_logprobs_are_the_servers_for_the_learners_own_tokens(rollout_url, tiny_llama, tmp_path):
    learner = _perturbed(tiny_llama, seed=1)
    client = RolloutServerPolicy(rollout_url, learner, weights_dir=tmp_path)
    with pytest.raises(PolicyError, match="before the first sync"):
        client.generate(CONVS, SamplingParams())
    learner.version = 3
    client.sync(learner)
    assert client.version == 3
    replies = []
    for temperature in (1.0, 0.7):
        out = client.generate(CONVS, SamplingParams(temperature=temperature, max_tokens=8))
        logp, _ = learner.token_logprobs([c.prompt_ids for c in out], [c.completion_ids for c in out], temperature)
        for i, (conversation, c) in enumerate(zip(CONVS, out, strict=True)):
            assert c.prompt_ids == learner.encode_prompt(conversation)  # the learner's tokens went in
            assert 0 < len(c.completion_ids) == len(c.logprobs) <= 8
            assert torch.allclose(logp[i, : len(c.logprobs)], torch.tensor(c.logprobs), atol=1e-4)
            assert c == learner.completion(c.prompt_ids, c.completion_ids, c.logprobs)  # read as the learner reads
        replies += out
    tokenizer = learner.tokenizer
    bodies = [c.completion_ids[:-1] if c.finish_reason == "stop" else c.completion_ids for c in replies]
    differ = sum(
        tokenizer.encode(tokenizer.decode(b, skip_special_tokens=False), add_special_tokens=False) != b for b in bodies
    )
    stats = client.take_stats()
    assert stats == {
        "replies": 6,
        "continued_turns": 0,
        "prefix_divergent": 0,
        "retokenize_divergent": differ,  # a random model writes byte soup that tokenises otherwise
        "prompt_mismatch": 0,
    }
    assert differ > 0
    # a second turn continues the first turn's tokens instead of tokenising its text again
    [first] = client.generate(CONVS[:1], SamplingParams(temperature=0, max_tokens=6))
    conversation = [*CONVS[0], first.message(), Message("user", "and again?")]
    [second] = client.generate([conversation], SamplingParams(temperature=0, max_tokens=6))
    assert second.prompt_ids[: len(first.prompt_ids) + len(first.completion_ids)] == (
        first.prompt_ids + first.completion_ids
    )
    assert client.take_stats()["continued_turns"] == 1
    logp, _ = learner.token_logprobs([second.prompt_ids], [second.completion_ids])
    assert torch.allclose(logp[0], torch.tensor(second.logprobs), atol=1e-4)
    # an evaluation samples uncounted while a sampler thread samples training replies: only those count
    sampler = threading.Thread(target=client.generate, args=(CONVS, SamplingParams(max_tokens=2)))
    with client.uncounted():
        sampler.start()
        client.generate(CONVS[:2], SamplingParams(max_tokens=2))

        async def evaluation() -> None:  # the trainer's evaluation: an engine on an event loop
            await client.agenerate(CONVS[:1], SamplingParams(max_tokens=2))

        asyncio.run(evaluation())
    sampler.join()
    assert client.take_stats()["replies"] == len(CONVS)
    client.close()


def test_a_weight_push_makes_the_server_sample_as_the_learner(rollout_url, tiny_llama, tmp_path):
    learner = HFPolicy.load(tiny_llama)
    client = RolloutServerPolicy(rollout_url, learner, weights_dir=tmp_path)
    client.sync(learner)
    greedy = SamplingParams(temperature=0, max_tokens=12)
    conversation = [Message("user", "What is 12 + 30?")]
    before = client.generate([conversation], greedy)[0]
    prompt = learner.encode_prompt(conversation)
    target = learner.tokenizer.encode("The answer is 42.", add_special_tokens=False) + [learner.tokenizer.eos_token_id]
    optimizer = torch.optim.Adam(learner.module.parameters(), lr=3e-3)
    torch.manual_seed(0)
    for _ in range(40):
        logp, _ = learner.token_logprobs([prompt], [target])
        optimizer.zero_grad()
        (-logp.mean()).backward()
        optimizer.step()
    assert learner.generate([conversation], greedy)[0].completion_ids == target
    assert client.generate([conversation], greedy)[0].completion_ids == before.completion_ids != target  # not pushed
    learner.version = 1
    assert client.sync(learner) > 0 and client.version == 1
    after = client.generate([conversation], greedy)[0]
    assert (after.completion_ids, after.text, after.finish_reason) == (target, "The answer is 42.", "stop")
    logp, _ = learner.token_logprobs([after.prompt_ids], [after.completion_ids])
    assert torch.allclose(logp[0], torch.tensor(after.logprobs), atol=1e-4)
    assert [p.name for p in tmp_path.iterdir()] == [f"v000001-{client._session}"]  # the server's weights only
    # The server loses the pushed weights (what a restart does): the batch sampled from them is
    # refused, the weights are loaded again, and the next batch is the learner's again.
    httpx.post(
        f"{_root(rollout_url)}/collective_rpc",
        json={"method": "reload_weights", "kwargs": {"weights_path": str(tiny_llama)}},
        timeout=60,
    ).raise_for_status()
    httpx.post(f"{_root(rollout_url)}/update_weight_version", json={"new_version": "default"}).raise_for_status()
    with pytest.raises(PolicyError, match="holds weights tagged 'default', not version 1.*restarted"):
        client.generate([conversation], greedy)
    again = client.generate([conversation], greedy)[0]
    assert again.completion_ids == target and client.version == 1
    client.close()


# ---- training ----------------------------------------------------------------------------------
LEARN = [
    "--env", "digit-map", "--env-args", "{}", "--prompts-per-step", "8", "--group-size", "8",
    "--max-tokens", "2", "--temperature", "1.0", "--lr", "1e-3", "--lr-schedule", "constant",
    "--entropy-coef", "0", "--eval-size", "10", "--eval-every", "0", "--checkpoint-every", "0",
    "--time-limit-min", "0", "--threads", "1",
]  # fmt: skip


def test_ludus_train_with_a_rollout_server_raises_the_reward(rollout_url, warm_model, tmp_path):
    runs = tmp_path / "runs"
    argv = ["train", "--model", f"hf:{warm_model}", "--rollout-server", rollout_url, "--steps", "20"]
    assert main([*argv, *LEARN, "--runs-dir", str(runs), "--name", "learn"]) == 0
    train = [r for r in _records(runs / "learn") if "reward/mean" in r]
    rewards = [r["reward/mean"] for r in train]
    assert len(rewards) == 20
    assert sum(rewards[-5:]) / 5 > sum(rewards[:5]) / 5 + 0.2, rewards
    for r in train:  # lockstep: sampled by the weights just pushed, the learner's own tokens
        assert r["staleness/max"] == 0 and r["masked_infra_errors"] == 0
        assert r["rollout/replies"] == 64 and r["rollout/prompt_mismatch"] == 0 and r["rollout/push_s"] > 0
        # the server's log-probs are the learner's; the mismatch correction's weights stay at 1
        assert r["logprob_gap/mean"] < 1e-5 and r["logprob_gap/max"] < 1e-4 and r["logprob_gap/frac"] == 0
        assert r["importance/mean"] == pytest.approx(1, abs=1e-4) and r["importance/capped"] == 0
    samples = _samples(runs / "learn")
    assert samples and all(s["policy_version"] == s["step"] - 1 for s in samples)


def test_sampling_ahead_on_a_rollout_server_keeps_the_staleness_bound(vllm, warm_model, tmp_path):
    config = load_config(
        overrides={
            "model": f"hf:{warm_model}",
            "rollout_server": vllm.ensure().url,
            "max_staleness": 1,
            "env": "digit-map",
            "env_args": {},
            "steps": 5,
            "prompts_per_step": 4,
            "group_size": 4,
            "max_tokens": 2,
            "temperature": 1.0,
            "lr": 1e-3,
            "entropy_coef": 0,
            "eval_size": 4,
            "eval_every": 0,
            "checkpoint_every": 0,
            "time_limit_min": 0,
            "threads": 1,
            "runs_dir": str(tmp_path),
        }
    )
    result = Trainer.create(config, log=lambda _: None).run()
    train = [r for r in _records(result.run_dir) if "reward/mean" in r]
    assert len(train) == 5 and max(r["staleness/max"] for r in train) == 1
    assert all("importance/mean" in r and r["masked_infra_errors"] == 0 for r in train)
    assert all(s["step"] - 2 <= s["policy_version"] <= s["step"] - 1 for s in _samples(result.run_dir))


# ---- faults ------------------------------------------------------------------------------------
FAULT = {
    "env_args": {"digits": 1, "ops": "+"},
    "steps": 6,
    "prompts_per_step": 4,
    "group_size": 4,
    "max_tokens": 24,  # a random model rarely stops: sampling takes a while, long enough to be cut
    "lr": 1e-3,
    "beta": 0.01,  # a random model earns no reward; the KL and entropy terms still train every sample
    "eval_size": 4,
    "eval_every": 0,
    "checkpoint_every": 0,  # only a halt checkpoints: a resumed run must not go back
    "time_limit_min": 0,
    "threads": 1,
}


def _free_port() -> int:
    """A port of 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_real_servers_read_the_history_of_broken_tool_calls_and_refuse_an_outgrown_context_as_such(
    rollout_url, request
):
    """What ``OpenAIPolicy`` sends back of a model's unreadable calls is history the server reads
    (vLLM ``json.loads`` each earlier call's arguments: raw text nested past Python's recursion
    limit was a 500, retried and masked), and a conversation past the server's context is
    ``ContextFull``, which the engine ends as ``truncated`` once the policy has replied."""
    policy = OpenAIPolicy(rollout_url, timeout_s=120, max_retries=0)

    def after(raw: str) -> list[Message]:
        call = ToolCall("add", raw, id="c1")
        return [
            Message("user", "1+2="),
            Message("assistant", "", tool_calls=[call]),
            Message("tool", "?", tool_call_id="c1"),
        ]

    [c] = policy.generate([after('{"a": 1, "b": ')], SamplingParams(max_tokens=2))
    assert c.completion_ids
    try:  # vLLM renders arguments that are not an object as {}; serve-model renders the text, past its context
        policy.generate([after("[" * 5000)], SamplingParams(max_tokens=2))
    except ContextFull:
        assert request.node.callspec.params["rollout_url"] == "serve-model"
    with pytest.raises(ContextFull):
        policy.generate([[Message("user", "1+2=" * 400)]], SamplingParams(max_tokens=2))
    policy.close()


def test_a_dead_serve_model_halts_training_with_a_checkpoint_and_the_run_resumes_elsewhere(tiny_llama, tmp_path):
    """Killed after step 2, the server takes step 3's samples with it: the run stops with step 2
    checkpointed. Resumed on a server at another port, which dies while step 4 is graded: step 4's
    update is whole but cannot be pushed, so step 4 is logged and checkpointed. With a server back
    on that port, a plain ``--resume`` (config.yaml now names it) finishes the run."""
    servers: list[subprocess.Popen[str]] = []

    def start(port: int) -> str:
        command = [
            sys.executable, "-m", "ludus.cli", "serve-model", "--model", f"hf:{tiny_llama}", "--name", "tiny",
            "--port", str(port), "--weight-updates",
        ]  # fmt: skip
        servers.append(subprocess.Popen(command, stderr=subprocess.PIPE, text=True))
        line = servers[-1].stderr.readline()
        assert f"at http://127.0.0.1:{port}/v1" in line, line
        return f"http://127.0.0.1:{port}/v1"

    def kill() -> None:
        servers[-1].kill()
        servers[-1].wait()

    overrides = {**FAULT, "env": "two-turns", "env_args": {}, "max_tokens": 4, "model": f"hf:{tiny_llama}"}
    try:
        config = load_config(overrides={**overrides, "rollout_server": start(_free_port()), "runs_dir": str(tmp_path)})

        def kill_after_step_2(record: dict) -> None:
            if record["step"] == 2 and "reward/mean" in record:
                kill()

        trainer = Trainer.create(config, log=lambda _: None)
        with pytest.raises(
            TrainingHalted,
            match=r"every sample of step 3 failed.*127\.0\.0\.1.*A checkpoint of step 2 was written\. Once that is "
            r"fixed, `ludus train --resume .*` continues from step 2 \(add --rollout-server URL",
        ):
            trainer.run(kill_after_step_2)
        run = trainer.run_dir
        assert [r["step"] for r in _records(run) if "reward/mean" in r] == [1, 2]
        assert [p.name for p in RunFolder(run).checkpoints()] == ["step_000002"]

        port = _free_port()
        elsewhere = start(port)

        def kill_while_grading_step_4(record: dict) -> None:
            if record["step"] == 3 and "reward/mean" in record:
                TwoTurnEnv.at_grading.append(kill)

        with pytest.raises(
            TrainingHalted,
            match=r"the weights of step 4 could not be pushed .*A checkpoint of step 4 was written.*from step 4",
        ):
            Trainer.resume_from(run, {"rollout_server": elsewhere}, log=lambda _: None).run(kill_while_grading_step_4)
        assert [r["step"] for r in _records(run) if "reward/mean" in r] == [1, 2, 3, 4]
        assert [p.name for p in RunFolder(run).checkpoints()] == ["step_000002", "step_000004"]
        assert yaml.safe_load((run / "config.yaml").read_text())["rollout_server"] == elsewhere

        start(port)  # back at the address config.yaml names
        assert main(["train", "--resume", str(run)]) == 0
        train = [r for r in _records(run) if "reward/mean" in r]
        assert [r["step"] for r in train] == [1, 2, 3, 4, 5, 6] and all(r["masked_infra_errors"] == 0 for r in train)
        assert all(s["policy_version"] == s["step"] - 1 for s in _samples(run))
    finally:
        TwoTurnEnv.at_grading.clear()
        for server in servers:
            server.kill()
            server.wait()


def test_vllm_killed_mid_step_halts_training_with_a_clear_reason(vllm, tiny_llama, tmp_path):
    """Last in this file: it kills the session's vLLM (a later test would start a new one). The
    kill comes in step 3, between the two turns of its episodes: their second turns cannot be
    sampled, so every sample of the step is an infrastructure error, and the run stops there."""
    url = vllm.ensure().url
    overrides = {**FAULT, "env": "two-turns", "env_args": {}, "max_tokens": 4, "model": f"hf:{tiny_llama}"}
    config = load_config(overrides={**overrides, "rollout_server": url, "runs_dir": str(tmp_path)})

    def arm_after_step_2(record: dict) -> None:
        if record.get("step") == 2 and "reward/mean" in record:
            TwoTurnEnv.between_turns.append(vllm.kill)

    trainer = Trainer.create(config, log=lambda _: None)
    try:
        with pytest.raises(TrainingHalted, match=r"every sample of step 3 failed: model backend: .*--resume") as halt:
            trainer.run(arm_after_step_2)
    finally:
        TwoTurnEnv.between_turns.clear()
    assert not vllm.alive() and url.removesuffix("/v1") in str(halt.value)
    # nothing after the kill was trained on: steps 1 and 2, each on samples of the weights before it
    train = [r for r in _records(trainer.run_dir) if "reward/mean" in r]
    assert [r["step"] for r in train] == [1, 2]
    for r in train:  # 16 episodes of 2 turns; a second turn continues the first's tokens where its text allows
        assert r["rollout/replies"] == 32 and r["rollout/continued_turns"] + r["rollout/prefix_divergent"] == 16, r
        assert r["rollout/continued_turns"] > 0
    assert all(s["policy_version"] == s["step"] - 1 for s in _samples(trainer.run_dir))
    assert (trainer.run_dir / "checkpoints" / "step_000002").is_dir()  # `--resume` continues from there
