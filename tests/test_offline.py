"""Learning from logs: importing them (train/logs.py), offline training and replay (train/offline.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from ludus.core import registry
from ludus.core.types import Message, Score, Task, Trajectory, Turn
from ludus.policies.base import SamplingParams
from ludus.policies.tiny import TinyConfig, TinyPolicy
from ludus.rollout.evaluate import evaluate
from ludus.train import offline
from ludus.train.config import ConfigError, load_config
from ludus.train.logs import LOGGED_VERSION, grouped, read_logs
from ludus.train.trainer import LOGGED, Trainer

SMALL_MODEL = TinyConfig(d_model=32, n_layers=1, n_heads=2, max_len=24)


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def weak_base(tmp_path_factory, small_training) -> Path:
    """The small test model's base that solves a few sums, as a run's final/ (a run of no step),
    made once for the module with a cache of its own."""
    folder = tmp_path_factory.mktemp("weak")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LUDUS_CACHE", str(folder / "cache"))
        overrides = {**small_training, "warmstart_steps": 80, "steps": 0, "runs_dir": str(folder / "runs")}
        config = load_config(overrides={**overrides, "name": "base"})
        return Trainer.create(config, log=lambda _: None).run().run_dir / "final"


def _eval_log(base: Path, tmp_path: Path, count: int = 16, samples: int = 4) -> Path:
    """A real `ludus eval`-style run folder of ``base``'s sampled attempts at training tasks."""
    tasks = registry.make("arithmetic", digits=1, ops="+").task_source("train")
    evaluate(
        TinyPolicy.load(base),
        lambda: registry.make("arithmetic", digits=1, ops="+"),
        [tasks.get(i) for i in range(count)],
        tmp_path / "log",
        samples=samples,
        sampling=SamplingParams(temperature=1.0, max_tokens=3),
    )
    return tmp_path / "log"


# ---- importing ---------------------------------------------------------------------------


def test_a_transcript_logged_from_the_openai_packages_own_objects_imports(tmp_path):
    """What an application logs: the request it sent (a tool without a description, with ``strict``)
    and each reply as ``ChatCompletion.choices[0].message.model_dump()`` (its ``refusal``,
    ``audio``, ``annotations`` and ``function_call`` fields, most of them None)."""
    from openai.types.chat import ChatCompletion

    def reply(message: dict) -> dict:
        choice = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", **message}}
        completion = {"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}
        return ChatCompletion.model_validate(completion).choices[0].message.model_dump()

    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
    tool = {"type": "function", "function": {"name": "add", "strict": True, "parameters": {"type": "object"}}}
    asked = [{"role": "user", "content": "2+3?"}]
    conversation = [*asked, reply({"content": None, "tool_calls": [call]})]
    conversation += [{"role": "tool", "tool_call_id": "call_1", "content": "5"}, reply({"content": "5"})]
    assert conversation[1]["refusal"] is None and "audio" in conversation[1]  # the package's own fields
    log = _write(tmp_path / "app.jsonl", [{"messages": conversation, "tools": [tool], "reward": 1.0}])
    [episode], report = read_logs([log])
    assert report.skipped == {} and [m.role for m in episode.messages] == ["user", "assistant", "tool", "assistant"]
    assert episode.messages[1].tool_calls[0].arguments == {"a": 2, "b": 3} and episode.messages[3].content == "5"
    assert episode.tools[0].name == "add" and episode.tools[0].description == ""


def test_openai_conversations_import_with_tools_parts_and_grouping(tmp_path):
    tools = [{"type": "function", "function": {"name": "add", "description": "a + b", "parameters": {}}}]
    ask = [{"role": "developer", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "2+3"}]}]
    rows = [
        {
            "messages": [
                *ask,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "5"},
                {"role": "assistant", "content": "5"},
            ],
            "tools": tools,
            "reward": 1.0,
        },
        {"messages": [*ask, {"role": "assistant", "content": "6"}], "reward": 0, "status": "wrong"},
    ]
    policy = TinyPolicy(TinyConfig(max_len=128))
    trajectories, report = read_logs([_write(tmp_path / "log.jsonl", rows)], policy, temperature=0.7)
    assert report.kept == 2 and not report.skipped
    first, second = trajectories
    assert [m.role for m in first.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert first.messages[2].tool_calls[0].arguments == {"a": 2, "b": 3} and first.tools[0].name == "add"
    assert len(first.turns) == 2 and first.turns[-1].reward == 1.0 and first.reward == 1.0
    assert second.score.status == "wrong" and second.reward == 0.0
    # the same question: one group; tokens and log-probs the policy's own, and marked as recomputed
    assert grouped(trajectories) == [[first, second]]
    assert first.policy_version == LOGGED_VERSION
    assert first.info["logged"] == {
        "file": str(tmp_path / "log.jsonl"),
        "line": 1,
        "tokens": "recomputed",
        "logprobs": "recomputed",
    }
    turn = second.turns[0]
    assert turn.completion_ids == policy.tokenizer.encode("6") + [policy.tokenizer.eos_id]
    with torch.no_grad():
        expected, _ = policy.token_logprobs([turn.prompt_ids], [turn.completion_ids], 0.7)
    assert turn.logprobs == pytest.approx(expected[0].tolist(), abs=1e-6)


def test_every_bad_line_is_counted_by_reason_with_its_line_number(tmp_path):
    good = {"messages": [{"role": "user", "content": "1+1"}, {"role": "assistant", "content": "2"}], "reward": 1}
    rows = [
        good,
        "{not json",
        "[1, 2]",
        {"prompt": "no messages"},
        {"messages": [{"role": "wizard", "content": "x"}], "reward": 1},
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], "reward": 1},
        {
            **good,
            "messages": [
                *good["messages"][:1],
                {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]},
            ],
        },
        {**good, "reward": float("nan")},
        {**good, "reward": True},
        {"messages": [{"role": "user", "content": "unanswered"}], "reward": 1},
        {"messages": good["messages"]},  # no reward and no grader
        {**good, "messages": [good["messages"][0], {"role": "assistant", "content": "x" * 100}]},  # too long
        "",  # blank lines are not episodes
        good,
    ]
    policy = TinyPolicy(SMALL_MODEL)
    path = _write(tmp_path / "log.jsonl", rows)
    trajectories, report = read_logs([path], policy)
    assert report.kept == len(trajectories) == 2
    assert report.lines == report.kept + sum(report.skipped.values()) == 13  # nothing dropped silently
    assert dict(report.skipped) == {
        "not JSON": 1,
        "not an episode": 2,
        "malformed message": 1,
        "unsupported content": 1,
        "malformed tool call": 1,
        "bad reward": 2,
        "no reply": 1,
        "no reward": 1,
        "does not fit the model": 1,
    }
    assert report.errors[0].startswith(f"{path}:2: not JSON")
    assert any(e.startswith(f"{path}:12: does not fit the model") for e in report.errors)
    assert "2 of 13 logged episodes imported" in report.summary()


def test_ludus_trajectories_keep_their_recorded_tokens_and_logprobs(weak_base, tmp_path):
    base, log = weak_base, _eval_log(weak_base, tmp_path, count=6, samples=3)
    lines = (log / "trajectories.jsonl").read_text().splitlines()
    trajectories, report = read_logs([log], TinyPolicy.load(base))  # a run folder: its trajectory files
    assert report.kept == len(lines) == 18 and report.recomputed_tokens == report.recomputed_logprobs == 0
    for line, t in zip(lines, trajectories, strict=True):
        recorded = Trajectory.from_json(line)
        assert [turn.completion_ids for turn in t.turns] == [turn.completion_ids for turn in recorded.turns]
        assert [turn.logprobs for turn in t.turns] == [turn.logprobs for turn in recorded.turns]
        assert t.info["logged"]["tokens"] == t.info["logged"]["logprobs"] == "recorded"
    assert sorted(map(len, grouped(trajectories))) == [3] * 6

    other = TinyPolicy(TinyConfig(vocab_size=200))  # another tokenizer's ids would index past this vocabulary
    other.tokenizer.vocab_size = 200
    _, foreign = read_logs([log], other)
    assert foreign.kept == 0 and foreign.skipped == {"foreign tokens": 18}


def test_turn_ids_are_the_ids_the_policy_samples(weak_base):
    policy = TinyPolicy.load(weak_base)  # one that writes digits, not random bytes
    conversation = [Message("user", "3+4=")]
    sampled = policy.generate(
        [conversation] * 16, SamplingParams(temperature=1.0, max_tokens=3), generator=torch.Generator().manual_seed(0)
    )
    # replies that are text (bytes that are not UTF-8 cannot be logged as text and come back); one cut off
    # at max_tokens is read back as a whole reply, ended by the end-of-sequence token
    readable = [c for c in sampled if "\ufffd" not in c.text]
    assert len(readable) >= 4
    for completion in readable:
        prompt, ids = policy.turn_ids(conversation, completion.message())
        ended = completion.completion_ids + ([] if completion.finish_reason == "stop" else [policy.tokenizer.eos_id])
        assert (prompt, ids) == (completion.prompt_ids, ended)


# ---- the offline objectives -------------------------------------------------------------


def _episode(task: str, reward: float) -> Trajectory:
    return Trajectory(Task(task, "q"), [], [Turn([1], [2, 3], [-1.0, -1.0], reward=reward)], Score(reward))


def test_episode_weights_by_objective(small_config):
    groups = [[_episode("a", 1.0), _episode("a", 0.0)], [_episode("b", 0.5)], [_episode("c", 0.0), _episode("c", 0.0)]]
    flat = [t for g in groups for t in g]

    bc = offline.episode_weights(groups, small_config(offline_objective="filtered_bc"))
    assert [bc[id(t)] for t in flat] == [1.0, 0.0, 0.0, 0.0, 0.0]

    config = small_config(offline_objective="reward_weighted", offline_beta=0.5, offline_weight_cap=100)
    w = offline.episode_weights(groups, config)
    raw = [math.exp(0.5 / 0.5), math.exp(-0.5 / 0.5), math.exp((0.5 - 0.3) / 0.5), 1.0, 1.0]  # b: the log's mean 0.3
    assert [w[id(t)] for t in flat] == pytest.approx([r / (sum(raw) / 5) for r in raw])
    assert sum(w.values()) / len(w) == pytest.approx(1.0)  # normalised over the log

    capped = offline.episode_weights(groups, small_config(offline_objective="reward_weighted", offline_weight_cap=1.5))
    assert max(capped.values()) == 1.5


def test_the_importance_ratio_is_truncated_and_detached():
    logp = torch.log(torch.tensor([[0.5, 0.9]])).requires_grad_()
    behaviour = torch.log(torch.tensor([[0.1, 0.9]]))
    mask = torch.tensor([[True, True]])
    loss, stats = offline.weighted_nll(logp, behaviour, torch.tensor([2.0]), mask, importance=True, cap=3.0)
    loss.backward()
    # token 0: π/β = 5, truncated at 3; token 1: 1. The ratio weighs the log-likelihood's gradient, no more.
    assert logp.grad[0].tolist() == pytest.approx([-2.0 * 3.0 / 2, -2.0 * 1.0 / 2])
    assert stats["importance/capped"] == 0.5 and stats["importance/mean"] == pytest.approx(2.0)
    plain, _ = offline.weighted_nll(logp.detach(), behaviour, torch.tensor([2.0]), mask, importance=False, cap=3.0)
    assert float(plain) == pytest.approx(-2.0 * float(logp.detach().sum()) / 2)


def test_logged_batches_cycle_through_the_log_in_a_seeded_order():
    groups = [[_episode(str(k), 0.0)] for k in range(5)]
    batches = offline.LoggedBatches(groups, seed=1)
    taken = [g[0].task.id for step in range(5) for g in batches.take(step, 2)]
    assert sorted(taken[:5]) == ["0", "1", "2", "3", "4"] and sorted(taken[5:]) == ["0", "1", "2", "3", "4"]
    assert taken == [g[0].task.id for step in range(5) for g in offline.LoggedBatches(groups, 1).take(step, 2)]
    assert taken[:5] != [g[0].task.id for g in offline.LoggedBatches(groups, 2).take(0, 5)]


# ---- ludus train --offline, and replay ----------------------------------------------------


def test_offline_training_learns_the_logged_successes_and_resumes_exactly(small_config, weak_base, tmp_path):
    base, log = weak_base, _eval_log(weak_base, tmp_path, samples=8)
    logged = [Trajectory.from_json(x) for x in (log / "trajectories.jsonl").read_text().splitlines()]
    successes = [t for t in logged if t.reward >= 1.0]
    assert successes, "the base model solves some one-digit sums when sampling"
    # a gentle rate: a few Adam steps at a high one can raise a handful of successes' loss (seen at 2e-3)
    settings = dict(
        model=str(base), offline=[str(log)], offline_objective="filtered_bc", prompts_per_step=4, steps=6, lr=5e-4
    )

    def success_nll(policy: TinyPolicy) -> float:
        turns = [turn for t in successes for turn in t.turns]
        with torch.no_grad():
            logp, _ = policy.token_logprobs([t.prompt_ids for t in turns], [t.completion_ids for t in turns], 0.7)
        return -sum(float(logp[i, : len(t.completion_ids)].sum()) for i, t in enumerate(turns)) / len(turns)

    straight = Trainer.create(small_config(name="straight", **settings), log=lambda _: None).run()
    assert success_nll(TinyPolicy.load(straight.run_dir / "final")) < success_nll(TinyPolicy.load(base))
    records = [json.loads(x) for x in (straight.run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "logged/reward" in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5, 6] and all(r["trained_samples"] >= 0 for r in steps)
    assert json.loads((straight.run_dir / "logged.json").read_text())["kept"] == len(logged)
    assert len((straight.run_dir / LOGGED).read_text().splitlines()) == len(logged)

    trainer = Trainer.create(small_config(name="stopped", **settings), log=lambda _: None)

    def stop_at_3(record):
        if record.get("step") == 3 and "logged/reward" in record:
            trainer.stop.requested = True

    assert trainer.run(stop_at_3).interrupted
    resumed = Trainer.resume_from(trainer.run_dir, log=lambda _: None).run()
    assert resumed.step == 6
    a, b = TinyPolicy.load(straight.run_dir / "final"), TinyPolicy.load(resumed.run_dir / "final")
    for (name, x), (_, y) in zip(a.module.state_dict().items(), b.module.state_dict().items(), strict=True):
        assert torch.equal(x, y), name


def test_replay_mixes_logged_groups_as_stale_samples(small_config, weak_base, tmp_path):
    base, log = weak_base, _eval_log(weak_base, tmp_path, samples=3)  # logged groups of 3, fresh ones of 4
    lines = (log / "trajectories.jsonl").read_text().splitlines()
    (log / "trajectories.jsonl").write_text("".join(x + "\n" for x in lines[:-1]))  # and one group of 2
    run = Trainer.create(
        small_config(name="replay", model=str(base), replay=[str(log)], replay_ratio=0.5, replay_steps=2, steps=3),
        log=lambda _: None,
    ).run()
    steps = [json.loads(x) for x in (run.run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in steps if "reward/mean" in r]
    assert len(steps) == 3
    for r in steps[:2]:
        assert r["replay/groups"] == 4  # as many as the 4 fresh ones: half the step's groups
        assert "importance/mean" in r  # the decoupled loss, with importance weights
    assert "replay/groups" not in steps[2]  # replay_steps: 2, so the third step is online RL alone
    saved = [Trajectory.from_json(x) for x in (run.run_dir / LOGGED).read_text().splitlines()]
    assert all(t.policy_version == LOGGED_VERSION for t in saved)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"offline": ["a.jsonl"], "replay": ["b.jsonl"], "replay_ratio": 0.5}, "keep one"),
        ({"replay": ["b.jsonl"]}, "go together"),
        ({"replay_ratio": 0.3}, "go together"),
        ({"replay": ["b.jsonl"], "replay_ratio": 1.0}, r"in \[0, 1\)"),
        ({"replay": ["b.jsonl"], "replay_ratio": 0.5, "replay_steps": -1}, "must be >= 0"),
        ({"replay_steps": 100}, "needs 'replay'"),
        ({"offline": ["a.jsonl"], "max_staleness": 1}, "drop max_staleness"),
        ({"offline": ["a.jsonl"], "offline_objective": "imitate"}, "one of"),
    ],
)
def test_offline_and_replay_settings_are_checked(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(overrides=overrides)


def test_a_log_with_nothing_to_learn_stops_the_start_and_leaves_no_run(small_config, tmp_path):
    log = _write(tmp_path / "log.jsonl", ["{broken", {"messages": [{"role": "user", "content": "1+1"}]}])
    with pytest.raises(ConfigError, match="hold no episode to learn from"):
        Trainer.create(small_config(name="nothing", offline=[str(log)]), log=lambda _: None).run()
    assert not (tmp_path / "runs" / "nothing").exists()
    assert load_config(overrides={"offline": str(log)}).offline == [str(log)]  # one path as a flag


def test_lines_without_a_reward_are_graded_by_the_runs_environment(small_config, tmp_path):
    tasks = registry.make("arithmetic", digits=1, ops="+").task_source("train")
    rows = []
    for i in range(3):
        task = tasks.get(i)
        for reply in (str(task.answer), str(int(task.answer) + 1)):
            rows.append(
                {
                    "task": task.to_dict(),
                    "messages": [{"role": "user", "content": task.prompt}, {"role": "assistant", "content": reply}],
                }
            )
    rows.append({**rows[0], "env": "countdown"})
    # a task the environment takes from no client, and one posing under an own task's id with another answer
    forged = {**rows[0], "task": {**rows[0]["task"], "id": "forged", "info": {"db": "/etc/passwd"}}}
    posing = {**rows[1], "task": {**rows[1]["task"], "answer": int(tasks.get(0).answer) + 1, "info": {"db": "x"}}}
    log = _write(tmp_path / "log.jsonl", [*rows, forged, posing])
    run = Trainer.create(small_config(name="graded", offline=[str(log)], steps=1), log=lambda _: None).run()
    report = json.loads((run.run_dir / "logged.json").read_text())
    assert report["graded"] == 7 and report["skipped"] == {"other environment": 1, "untrusted task": 1}
    assert "trust_logged_tasks: true" in " ".join(report["errors"])
    graded = [Trajectory.from_json(x) for x in (run.run_dir / LOGGED).read_text().splitlines()]
    assert [t.score.status for t in graded] == ["correct", "wrong"] * 3 + ["wrong"]  # graded on the own task
    assert [t.reward for t in graded] == [1.0, 0.0] * 3 + [0.0] and all(t.env == "arithmetic" for t in graded)
    trusted = small_config(name="trusted", offline=[str(log)], steps=1, trust_logged_tasks=True)
    run = Trainer.create(trusted, log=lambda _: None).run()
    report = json.loads((run.run_dir / "logged.json").read_text())
    assert report["graded"] == 8 and report["skipped"] == {"other environment": 1}


def test_a_run_can_keep_every_trajectory_and_replay_its_own_earlier_groups(small_config):
    first = Trainer.create(small_config(name="first", steps=2, samples_per_step=-1), log=lambda _: None).run()
    kept = [json.loads(x) for x in (first.run_dir / "samples.jsonl").read_text().splitlines()]
    assert [r["step"] for r in kept] == [1] * 16 + [2] * 16  # 4 groups of 4, every one
    trajectories, report = read_logs([first.run_dir])  # a training run's folder is a log too
    assert report.kept == 32 and sorted(map(len, grouped(trajectories))) == [4] * 8
    with pytest.raises(ConfigError, match="samples_per_step"):
        small_config(samples_per_step=-2)
