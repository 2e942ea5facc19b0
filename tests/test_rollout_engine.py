"""The async rollout engine: overlap, batching and bounds, groups, failures as statuses, JSONL and resume."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from ludus.core import registry
from ludus.core.env import Env
from ludus.core.types import Message, Observation, Score, Status, StepResult, Task
from ludus.policies.base import Completion, Policy, PolicyError, SamplingParams
from ludus.policies.tiny import TinyConfig, TinyPolicy
from ludus.rollout.engine import EpisodeRequest, JsonlSink, RolloutConfig, RolloutEngine, requests

HANG_GUARD_S = 300.0  # only so that a broken engine fails instead of hanging (far above any run under load); never a timing assertion


def arithmetic_tasks(n: int) -> list[Task]:
    source = registry.make("arithmetic").task_source("train")
    return [source.get(i) for i in range(n)]


class Echo(Policy):
    """Replies with the last user message; records every batch it was asked for."""

    def __init__(self, fail_first: int = 0, fail_always: bool = False):
        self.batches: list[int] = []
        self.fail_first, self.fail_always = fail_first, fail_always
        self.lock = threading.Lock()

    def generate(self, conversations, sampling, *, tools=None, generator=None):
        with self.lock:
            self.batches.append(len(conversations))
            if self.fail_always or len(self.batches) <= self.fail_first:
                raise PolicyError("server answered 503")
        return [Completion(c[-1].content, [1], [2], [-0.5], "stop") for c in conversations]


class Counted(Env):
    """Two turns; the answer is correct when it repeats the prompt. Counts what runs at once."""

    name = "counted"
    reward_range = (0.0, 1.0)
    max_turns = 2
    lock = threading.Lock()
    alive = steps = max_alive = max_steps = 0

    def __init__(self) -> None:
        super().__init__()
        with Counted.lock:
            Counted.alive += 1
            Counted.max_alive = max(Counted.max_alive, Counted.alive)

    def begin(self, task: Task) -> Observation:
        return Observation([Message("user", task.prompt)])

    def transition(self, action: Message) -> StepResult:
        with Counted.lock:
            Counted.steps += 1
            Counted.max_steps = max(Counted.max_steps, Counted.steps)
        threading.Event().wait(0.01)
        with Counted.lock:
            Counted.steps -= 1
        if self.turn == 0:
            return StepResult(Observation([Message("user", self.task.prompt)]))
        ok = action.content == self.task.prompt
        return StepResult(Observation([]), float(ok), terminated=True, score=Score(float(ok)))

    def close(self) -> None:
        with Counted.lock:
            Counted.alive -= 1

    @classmethod
    def reset_counts(cls) -> None:
        cls.alive = cls.steps = cls.max_alive = cls.max_steps = 0


def test_runs_real_episodes_in_input_order_with_tokens_and_groups():
    tasks = arithmetic_tasks(6)
    engine = RolloutEngine(TinyPolicy(), lambda: registry.make("arithmetic"), SamplingParams(max_tokens=6))
    done = engine.run(requests(tasks, group_size=3))
    assert [t.info["key"] for t in done] == [f"{task.id}#{k}" for task in tasks for k in range(3)]
    for t in done:
        assert t.score is not None and t.score.status != Status.INFRA_ERROR
        assert t.turns and len(t.turns[0].completion_ids) == len(t.turns[0].logprobs) > 0
        assert t.env == "arithmetic" and t.info["attempts"] == 1

    async def collect():
        return [g async for g in engine.groups(tasks, group_size=4)]

    groups = asyncio.run(collect())
    assert sorted(g[0].task.id for g in groups) == sorted(t.id for t in tasks)
    assert all(len(g) == 4 and len({t.task.id for t in g}) == 1 for g in groups)


def test_generation_overlaps_environment_steps():
    """An environment step that can only finish once the model has been called again:
    a loop that waits for every step before generating would never see that call."""
    calls = threading.Event()
    seen_overlap: list[bool] = []

    class Watching(Echo):
        def generate(self, conversations, sampling, *, tools=None, generator=None):
            out = super().generate(conversations, sampling, tools=tools, generator=generator)
            if len(self.batches) >= 2:
                calls.set()
            return out

    class Blocking(Env):
        name = "blocking"

        def begin(self, task):
            if task.id == "late":
                threading.Event().wait(0.2)  # joins after the first generate call
            return Observation([Message("user", task.prompt)])

        def transition(self, action):
            if self.task.id == "early":
                seen_overlap.append(calls.wait(HANG_GUARD_S))
            return StepResult(Observation([]), 1.0, terminated=True, score=Score(1.0))

    engine = RolloutEngine(Watching(), Blocking, SamplingParams(max_tokens=4))
    done = engine.run([EpisodeRequest(Task("early", "a")), EpisodeRequest(Task("late", "b"))])
    assert seen_overlap == [True]
    assert [t.score.value for t in done] == [1.0, 1.0]


def test_bounds_on_batch_episodes_and_environment_threads():
    Counted.reset_counts()
    policy = Echo()
    config = RolloutConfig(max_batch=5, max_episodes=7, env_concurrency=3)
    engine = RolloutEngine(policy, Counted, SamplingParams(max_tokens=4), config)
    done = engine.run(requests([Task(f"t{i}", f"p{i}") for i in range(30)]))
    assert [t.score.value for t in done] == [1.0] * 30
    assert max(policy.batches) <= 5 and sum(policy.batches) == 60
    assert Counted.max_alive <= 7 and Counted.max_steps <= 3
    assert Counted.alive == 0  # every environment was closed


class SlowToClose(Counted):
    def close(self) -> None:
        threading.Event().wait(0.3)  # a browser or sandbox takes a while to let go
        super().close()


def test_a_run_returns_with_its_environments_closed():
    # closes run on the environment threads so they never hold up an episode, yet whoever ran
    # the episodes must find the processes and connections released when run() returns
    Counted.reset_counts()
    engine = RolloutEngine(Echo(), SlowToClose, SamplingParams(max_tokens=4), RolloutConfig(env_concurrency=2))
    done = engine.run(requests([Task(f"t{i}", f"p{i}") for i in range(4)]))
    assert [t.score.value for t in done] == [1.0] * 4
    assert Counted.alive == 0


def test_backend_failures_are_retried_then_masked_never_scored():
    tasks = [Task("t0", "x"), Task("t1", "y")]
    flaky = RolloutEngine(Echo(fail_first=1), Counted, SamplingParams(max_tokens=4))
    done = flaky.run(requests(tasks))
    assert [t.score.value for t in done] == [1.0, 1.0]
    assert max(t.info["attempts"] for t in done) == 2

    dead = RolloutEngine(Echo(fail_always=True), Counted, SamplingParams(max_tokens=4), RolloutConfig(infra_retries=2))
    done = dead.run(requests(tasks))
    assert [t.score.status for t in done] == [Status.INFRA_ERROR] * 2
    assert all("model backend" in t.score.reason and t.info["attempts"] == 3 for t in done)


class Growing(Env):
    """Three turns; each reply of the environment adds the task's ``info["grow"]`` bytes; ``first``
    names the seat that opens."""

    name = "growing"
    reward_range = (0.0, 1.0)
    max_turns = 3

    def begin(self, task: Task) -> Observation:
        return Observation([Message("user", task.prompt)], actor=task.info.get("first", ""))

    def transition(self, action: Message) -> StepResult:
        if self.turn < 2:  # with "rival" in the task, the rival's seat answers the first reply
            actor = "rival" if "rival" in self.task.info and self.turn == 0 else ""
            return StepResult(Observation([Message("user", "z" * self.task.info["grow"])], actor=actor))
        return StepResult(Observation([]), 1.0, terminated=True, score=Score(1.0))


def test_a_conversation_that_outgrows_the_context_is_truncated_not_masked_and_only_its_episode():
    """Masking it (infra_error) would spare the policy the zero for a conversation its own replies
    made too long: nothing would teach it to stop; the opening prompt too long is the task's."""
    tasks = [
        Task("fits", "a", info={"grow": 1}),
        Task("grows", "b", info={"grow": 60}),
        Task("opening", "c" * 80, info={"grow": 1}),
    ]
    policy = TinyPolicy()  # a context of 64 tokens; each turn asks room for 4 more
    engine = RolloutEngine(policy, Growing, SamplingParams(max_tokens=4), RolloutConfig(infra_retries=2))
    fits, grows, opening = engine.run(requests(tasks))
    assert fits.score.status == Status.CORRECT and len(fits.turns) == 3
    assert grows.score.status == Status.TRUNCATED and grows.score.value == 0.0 and not grows.score.is_infra_error
    assert (
        "outgrew the model's context" in grows.score.reason
        and "exceeds the tiny model's context of 64" in grows.score.reason
    )
    assert len(grows.turns) == 1 and grows.info["attempts"] == 1
    assert opening.score.is_infra_error and "model backend" in opening.score.reason
    assert opening.turns == [] and opening.info["attempts"] == 1  # the same prompt again would not fit either

    # another seat with a shorter context: once the policy has spoken, talking past the rival's
    # context is no way out of a lost game
    long = TinyPolicy(TinyConfig(max_len=256))
    engine = RolloutEngine(long, Growing, SamplingParams(max_tokens=4), actors={"rival": TinyPolicy()})
    seats = [Task("past-rival", "d", info={"grow": 60, "rival": 1}), Task("rival-first", "e" * 80, info={"grow": 1, "rival": 1, "first": "rival"})]  # fmt: skip
    past_rival, rival_first = engine.run(requests(seats))
    assert past_rival.score.status == Status.TRUNCATED and len(past_rival.turns) == 1
    assert "outgrew the context of actor 'rival'" in past_rival.score.reason
    assert rival_first.score.is_infra_error and "of actor 'rival'" in rival_first.score.reason


class Crashing(Env):
    name = "crashing"
    made = 0

    def __init__(self, where: str):
        super().__init__()
        self.where = where
        if where == "init":
            raise RuntimeError("cannot start the browser")

    def begin(self, task):
        if self.where == "reset":
            raise OSError("database is gone")
        return Observation([Message("user", task.prompt)])

    def transition(self, action):
        if self.where == "step":
            raise ValueError("bug in the environment")
        if self.where == "hang":
            threading.Event().wait()  # never returns
        return StepResult(Observation([]), 1.0, terminated=True, score=Score(1.0))


@pytest.mark.parametrize(
    ("where", "reason"),
    [
        ("init", "environment create raised RuntimeError"),
        ("reset", "environment reset raised OSError"),
        ("step", "Crashing.transition raised ValueError"),
        ("hang", "environment step did not finish within 0.3 s"),
    ],
)
def test_environment_crashes_and_hangs_end_as_infra_error(where, reason):
    # a short limit only where the step hangs: a busy machine may take 0.3 s to start a reset
    config = RolloutConfig(step_timeout_s=0.3 if where == "hang" else 30.0, infra_retries=1)
    engine = RolloutEngine(Echo(), lambda: Crashing(where), SamplingParams(max_tokens=4), config)
    done = engine.run(requests([Task("t0", "x")]))
    (t,) = done
    assert t.score.status == Status.INFRA_ERROR and t.score.value == 0.0
    assert reason in t.score.reason
    assert t.info["attempts"] == (1 if where == "hang" else 2)  # a hang is not retried


def test_episode_time_limit_is_a_timeout():
    class Slow(Env):
        name = "slow"
        max_turns = 1000

        def begin(self, task):
            return Observation([Message("user", task.prompt)])

        def transition(self, action):
            threading.Event().wait(0.05)
            return StepResult(Observation([Message("user", "again")]))

    config = RolloutConfig(episode_timeout_s=0.4)
    (t,) = RolloutEngine(Echo(), Slow, SamplingParams(max_tokens=4), config).run(requests([Task("t", "x")]))
    assert t.score.status == Status.TIMEOUT and t.score.value == 0.0 and t.turns


def test_results_stream_to_jsonl_and_a_rerun_resumes(tmp_path):
    path = tmp_path / "out" / "trajectories.jsonl"
    tasks = [Task(f"t{i}", f"p{i}") for i in range(8)]
    engine = RolloutEngine(Echo(), Counted, SamplingParams(max_tokens=4), RolloutConfig(max_episodes=2))

    async def first_three():
        got = []
        with JsonlSink(path) as sink:
            async for t in engine.stream(requests(tasks), sink):
                got.append(t)
                if len(got) == 3:
                    break  # an interrupted run
        return got

    first = asyncio.run(first_three())
    on_disk = [json.loads(line) for line in path.read_text().splitlines()]
    assert {r["info"]["key"] for r in on_disk} >= {t.info["key"] for t in first}
    with path.open("a") as fh:
        fh.write('{"info": {"key": "t7#0"}, "cut sho')  # a line cut short by a crash

    with JsonlSink(path) as sink:
        kept = sink.done_keys()
        assert "t7#0" not in kept and len(kept) == len(on_disk)
        rest = engine.run(requests(tasks), sink)
    assert {t.info["key"] for t in rest} == {f"t{i}#0" for i in range(8)} - kept
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(r["info"]["key"] for r in lines) == sorted(f"t{i}#0" for i in range(8))
    assert all(r["score"]["value"] == 1.0 for r in lines)


def test_duplicate_keys_are_refused():
    engine = RolloutEngine(Echo(), Counted, SamplingParams(max_tokens=4))
    with pytest.raises(ValueError, match="share the key"):
        engine.run([EpisodeRequest(Task("a", "x"), key="k"), EpisodeRequest(Task("b", "y"), key="k")])


def test_config_is_validated():
    with pytest.raises(ValueError, match="max_batch"):
        RolloutConfig(max_batch=0)


# ---- evaluation (ludus eval) ----


def test_pass_at_k_matches_counting_every_draw():
    import itertools
    import math as m

    from ludus.rollout.evaluate import pass_at_k

    for n in range(1, 7):
        for c in range(n + 1):
            outcomes = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                draws = list(itertools.combinations(range(n), k))
                expected = sum(any(outcomes[i] for i in d) for d in draws) / len(draws)
                assert m.isclose(pass_at_k(n, c, k), expected)
    with pytest.raises(ValueError, match="at least 3 samples"):
        pass_at_k(2, 1, 3)


def test_summary_leaves_infra_errors_out_and_breaks_down_by_category():
    from ludus.core.types import Trajectory
    from ludus.rollout.evaluate import summarize

    def traj(task_id, category, value, status=Status.CORRECT):
        task = Task(task_id, "p", info={"category": category})
        return Trajectory(task=task, messages=[], score=Score(value, status))

    trajectories = [
        traj("a", "easy", 1.0),
        traj("a", "easy", 0.0, Status.WRONG),
        traj("b", "hard", 0.0, Status.WRONG),
        traj("b", "hard", 0.0, Status.INFRA_ERROR),
        traj("b", "hard", 0.5, Status.PARTIAL),
    ]
    s = summarize(trajectories, ks=(1, 2, 3))
    assert s.samples == 4 and s.infra_errors == 1 and s.tasks == 2
    assert s.mean_reward == pytest.approx(1.5 / 4)
    assert s.accuracy == pytest.approx(1 / 4)
    assert s.pass_at == {1: pytest.approx((0.5 + 0.0) / 2), 2: pytest.approx((1.0 + 0.0) / 2)}  # 3 > 2 samples of a
    assert s.best_of_n == pytest.approx((1.0 + 0.5) / 2)
    assert s.categories["easy"]["pass@1"] == pytest.approx(0.5) and s.categories["hard"]["samples"] == 2


def test_evaluate_writes_trajectories_and_summary_and_resumes(tmp_path):
    from ludus.rollout.evaluate import SUMMARY, TRAJECTORIES, evaluate

    tasks = [Task(f"t{i}", f"p{i}") for i in range(4)]
    first = evaluate(Echo(), Counted, tasks[:2], tmp_path, samples=3, ks=(1, 3))
    assert first.samples == 6 and first.pass_at == {1: 1.0, 3: 1.0}
    with pytest.raises(FileExistsError, match="--resume"):
        evaluate(Echo(), Counted, tasks, tmp_path, samples=3)
    policy = Echo()
    second = evaluate(policy, Counted, tasks, tmp_path, samples=3, resume=True)
    assert sum(policy.batches) == 2 * 3 * 2  # only the two new tasks ran (two turns each)
    assert second.tasks == 4 and second.samples == 12
    assert len((tmp_path / TRAJECTORIES).read_text().splitlines()) == 12
    assert json.loads((tmp_path / SUMMARY).read_text())["samples"] == 12


SLOW_ENV = """
import threading
from ludus.core.env import Env
from ludus.core.types import Message, Observation, Score, StepResult, Task


class Source:
    size = 120

    def get(self, index):
        return Task(f"slow/{index}", f"q{index}", info={"category": "odd" if index % 2 else "even"})


class SlowEnv(Env):
    name = "slow"

    def default_tasks(self, split="train"):
        return Source()

    def begin(self, task):
        return Observation([Message("user", task.prompt)])

    def transition(self, action):
        threading.Event().wait(0.05)
        return StepResult(Observation([]), 1.0, terminated=True, score=Score(1.0))
"""


def _eval_process(tmp_path, *extra):
    import signal
    import subprocess
    import sys

    (tmp_path / "slowenv.py").write_text(SLOW_ENV)
    program = (
        "import sys; sys.path.insert(0, sys.argv[1]); import slowenv\n"
        "from ludus.core import registry; registry.register('slow', slowenv.SlowEnv)\n"
        "from ludus.cli import main; sys.exit(main(sys.argv[2:]))\n"
    )
    argv = ["eval", "slow", "--runs", str(tmp_path), "--name", "r", "--max-tokens", "4", "--env-workers", "2"]
    return subprocess.Popen(
        [sys.executable, "-c", program, str(tmp_path), *argv, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C must reach it even when the tests run with SIGINT ignored (as a background job)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def test_ctrl_c_during_ludus_eval_keeps_every_finished_episode_and_resume_completes(tmp_path):
    import signal
    import time

    out = tmp_path / "r" / "trajectories.jsonl"
    proc = _eval_process(tmp_path, "--batch", "2")
    deadline = time.monotonic() + HANG_GUARD_S
    while (not out.exists() or len(out.read_text().splitlines()) < 5) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert out.exists() and len(out.read_text().splitlines()) >= 5, "no 5 episodes written"  # else SIGINT hits imports
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "--resume" in err
    kept = [json.loads(line) for line in out.read_text().splitlines()]  # every line is whole
    assert 5 <= len(kept) < 120

    proc = _eval_process(tmp_path, "--resume")
    stdout, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["info"]["key"] for r in lines) == sorted(f"slow/{i}#0" for i in range(120))
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["samples"] == 120 and summary["mean_reward"] == 1.0
    assert set(summary["categories"]) == {"odd", "even"}
    assert "mean reward" in stdout and "pass@1" in stdout


def test_ludus_eval_refuses_to_mix_runs_and_bad_k(tmp_path):
    first = _eval_process(tmp_path, "--tasks", "3")
    first.communicate(timeout=120)
    assert first.returncode == 0
    again = _eval_process(tmp_path, "--tasks", "3")
    _, err = again.communicate(timeout=120)
    assert again.returncode == 2 and "--resume" in err
    bad = _eval_process(tmp_path, "--tasks", "3", "--k", "5", "--name", "other")
    _, err = bad.communicate(timeout=120)
    assert bad.returncode == 2 and "--k" in err


def _episodes(run_dir) -> dict[str, dict]:
    lines = (run_dir / "trajectories.jsonl").read_text().splitlines()
    return {r["info"]["key"]: r for r in map(json.loads, lines)}


def test_ludus_eval_resume_finishes_a_run_with_its_own_model_and_refuses_another(tmp_path, capsys):
    from ludus.cli import main

    run = tmp_path / "half"
    common = ["eval", "arithmetic", "--runs", str(tmp_path), "--name", "half"]
    assert main([*common, "--model", "nothing", "--tasks", "4", "--max-tokens", "8", "--env-args", "{digits: 1}"]) == 0
    lines = (run / "trajectories.jsonl").read_text().splitlines()
    (run / "trajectories.jsonl").write_text(lines[0] + "\n" + lines[1] + "\n")  # as an interrupted run leaves it
    (run / "summary.json").unlink()

    for changed, said in [
        (["--model", "tiny"], "--model nothing (this command: tiny)"),
        (["--env-args", "{digits: 2}"], '--env-args {"digits": 1} (this command: {"digits": 2})'),
        (["--max-tokens", "32"], "--max-tokens 8 (this command: 32)"),
        (["--samples", "2"], "--samples 1 (this command: 2)"),
    ]:
        assert main([*common, "--resume", *changed]) == 2
        assert said in capsys.readouterr().err
    assert len(_episodes(run)) == 2 and not (run / "summary.json").exists()  # refused before running anything

    # no --model: the run's own finishes it (empty replies), not the default tiny model
    assert main([*common, "--resume", "--env-args", '{"digits": 1}']) == 0  # the same arguments, as JSON
    episodes = _episodes(run)
    assert len(episodes) == 4 and all(not e["turns"][0]["completion_ids"] for e in episodes.values())
    summary = json.loads((run / "summary.json").read_text())
    assert summary["samples"] == 4 and summary["statuses"] == {"no_answer": 4}
    assert main(["eval", "arithmetic", "--runs", str(tmp_path), "--name", "tiny", "--tasks", "4"]) == 0
    assert all(e["turns"][0]["completion_ids"] for e in _episodes(tmp_path / "tiny").values())  # tiny would show

    assert main([*common, "--resume", "--tasks", "6"]) == 0  # more tasks, the same model and settings
    assert len(_episodes(run)) == 6 and json.loads((run / "eval.json").read_text())["tasks"] == 6
    assert all(not e["turns"][0]["completion_ids"] for e in _episodes(run).values())


def test_ludus_eval_resume_refuses_a_run_without_a_record_or_a_name(tmp_path, capsys):
    from ludus.cli import main

    assert (
        main(["eval", "arithmetic", "--runs", str(tmp_path), "--name", "old", "--model", "nothing", "--tasks", "2"])
        == 0
    )
    for broken in ("{not json", '{"env": "arithmetic"}', "[1, 2]"):  # a damaged record: refused, no traceback
        (tmp_path / "old" / "eval.json").write_text(broken)
        assert main(["eval", "arithmetic", "--runs", str(tmp_path), "--name", "old", "--resume"]) == 2
        assert "is not a record of an evaluation's settings" in capsys.readouterr().err
    (tmp_path / "old" / "eval.json").unlink()  # a run folder from before runs recorded their settings
    assert main(["eval", "arithmetic", "--runs", str(tmp_path), "--name", "old", "--resume"]) == 2
    assert "no record of the model and settings" in capsys.readouterr().err
    assert main(["eval", "arithmetic", "--runs", str(tmp_path), "--resume"]) == 2
    assert "add --name" in capsys.readouterr().err


def test_a_stop_hook_ends_an_episode_early_with_its_score():
    class Chatty(Env):
        name = "chatty"
        max_turns = 50

        def begin(self, task):
            return Observation([Message("user", task.prompt)])

        def transition(self, action):
            return StepResult(Observation([Message("user", "FAILED test_1" if self.turn >= 1 else "ok")]))

    def stop_on_failure(trajectory, result):
        if any("FAILED" in m.content for m in result.observation.messages):
            return Score.zero(Status.WRONG, "stopped at the first failing test")
        return None

    engine = RolloutEngine(Echo(), Chatty, SamplingParams(max_tokens=4), stop_when=stop_on_failure)
    (t,) = engine.run(requests([Task("t", "x")]))
    assert t.score.status == Status.WRONG and t.score.reason == "stopped at the first failing test"
    assert len(t.turns) == 2 and t.info["stopped_early"] is True


def test_lockstep_with_a_seeded_generator_is_reproducible_whatever_the_thread_timing():
    import random as stdlib_random

    import torch

    class Jittery(Env):
        """Two turns; each call sleeps a random few milliseconds, so threads finish in any order."""

        name = "jittery"
        max_turns = 2

        def begin(self, task):
            threading.Event().wait(stdlib_random.random() / 100)
            return Observation([Message("user", task.prompt)])

        def transition(self, action):
            threading.Event().wait(stdlib_random.random() / 100)
            if self.turn == 0:
                return StepResult(Observation([Message("user", "again")]))
            return StepResult(Observation([]), terminated=True, score=Score(0.0, Status.WRONG))

    def run() -> list[list[int]]:
        config = RolloutConfig(lockstep=True, max_batch=32, env_concurrency=8)
        engine = RolloutEngine(
            TinyPolicy(), Jittery, SamplingParams(max_tokens=4), config, generator=torch.Generator().manual_seed(3)
        )
        done = engine.run(requests([Task(f"t{i}", f"p{i}") for i in range(12)]))
        assert engine.stats["generate_calls"] == 2  # one call per turn, for every episode at once
        return [turn.completion_ids for t in done for turn in t.turns]

    assert run() == run()


def test_requests_number_groups_one_way_for_evaluation_and_training():
    """Group n's sample k has seed n·G + k wherever the stream is cut; evaluation keys by task id,
    a training stream (where a finite dataset comes round again) by group number."""
    tasks = [Task("a", "p"), Task("b", "p"), Task("a", "p")]
    evaluation = list(requests(tasks[:2], 2))
    assert [(r.key, r.group, r.seed) for r in evaluation] == [
        ("a#0", "a", 0),
        ("a#1", "a", 1),
        ("b#0", "b", 2),
        ("b#1", "b", 3),
    ]
    training = list(requests(tasks, 2, first=5, numbered=True))
    assert [r.key for r in training] == ["5#0", "5#1", "6#0", "6#1", "7#0", "7#1"]
    assert [r.seed for r in training] == list(range(10, 16))
    assert [r.seed for r in requests(tasks[1:], 2, first=6, numbered=True)] == list(range(12, 16))  # cut anywhere


def test_thread_host_runs_calls_on_its_threads_and_drops_abandoned_ones():
    from ludus.rollout.hosts import ThreadHost

    async def main() -> None:
        host = ThreadHost(1)
        gate, ran = threading.Event(), []
        first = host.run(gate.wait)  # occupies the only thread
        abandoned = host.run(ran.append, "abandoned")
        failing = host.run(int, "not a number")
        abandoned.cancel()  # the caller gave up before the call started: it never runs
        gate.set()
        assert await first is True
        with pytest.raises(ValueError):
            await failing
        late = host.run(gate.wait)
        late.cancel()  # a result that arrives after its caller gave up is dropped, not an error
        assert await host.run(threading.get_ident) != threading.get_ident()
        assert ran == []
        host.shutdown()

    asyncio.run(main())


def test_a_step_that_lists_tools_changes_the_tools_offered_from_then_on():
    """BFCL's miss_func reveals functions mid-episode: the policy must be offered them at the next call."""
    from ludus.core.types import ToolSpec

    first, more = ToolSpec("ls", "list", {"type": "object"}), ToolSpec("tail", "last lines", {"type": "object"})

    class Revealing(Env):
        name = "revealing"
        max_turns = 3

        def begin(self, task):
            return Observation([Message("user", task.prompt)], [first])

        def transition(self, action):
            if self.turn == 0:
                return StepResult(Observation([Message("user", "more functions")], [first, more]))
            if self.turn == 1:
                return StepResult(Observation([Message("user", "go on")]))  # no tools listed: unchanged
            return StepResult(Observation([]), 1.0, terminated=True, score=Score(1.0))

    offered: list[list[str]] = []

    class Recording(Echo):
        def generate(self, conversations, sampling, *, tools=None, generator=None):
            offered.extend([t.name for t in each] for each in tools or [[]])
            return super().generate(conversations, sampling, tools=tools, generator=generator)

    (t,) = RolloutEngine(Recording(), Revealing, SamplingParams(max_tokens=4)).run(requests([Task("t", "x")]))
    assert t.score.value == 1.0
    assert offered == [["ls"], ["ls", "tail"], ["ls", "tail"]]
    assert [s.name for s in t.tools] == ["ls", "tail"]


class Where(Env):
    """One turn; records which thread ran each hook (``Where.ran``: hook -> thread id)."""

    name = "where"
    ran: dict[str, int] = {}

    def begin(self, task):
        Where.ran["begin"] = threading.get_ident()
        return Observation([Message("user", task.prompt)])

    def transition(self, action):
        Where.ran["transition"] = threading.get_ident()
        return StepResult(Observation([]), 1.0, terminated=True, score=Score(1.0))


class AsyncStep(Where):
    name = "async-step"

    async def atransition(self, action):
        Where.ran["atransition"] = threading.get_ident()
        return StepResult(Observation([]), 1.0, terminated=True, score=Score(1.0))


class AsyncReset(Where):
    name = "async-reset"

    async def abegin(self, task):
        Where.ran["abegin"] = threading.get_ident()
        return Observation([Message("user", task.prompt)])


class QuickWhere(Where):
    name = "quick-where"
    quick = True


@pytest.mark.parametrize(
    ("env_cls", "calls", "on_the_loop", "on_a_thread"),
    [
        (Where, "blocking", [], ["begin", "transition"]),
        (AsyncStep, "async", ["atransition"], ["begin"]),  # an async hook alone is awaited; its sync twin threaded
        (AsyncReset, "async", ["abegin"], ["transition"]),
        (QuickWhere, "quick", ["begin", "transition"], []),
    ],
)
def test_each_environment_is_called_one_way_decided_when_it_is_opened(env_cls, calls, on_the_loop, on_a_thread):
    from ludus.rollout.hosts import EnvCalls, ThreadHost, env_calls

    assert env_calls(env_cls()) is EnvCalls(calls)
    Where.ran = {}
    host = ThreadHost(2)
    try:
        (t,) = RolloutEngine(Echo(), env_cls, SamplingParams(max_tokens=4), host=host).run(requests([Task("t", "x")]))
        assert host.opens_quickly(env_cls) is (calls == "quick")  # what the host learnt opening it
    finally:
        host.shutdown()
    assert t.score.value == 1.0
    loop = threading.get_ident()  # engine.run runs its event loop on this thread
    assert set(Where.ran) == {*on_the_loop, *on_a_thread}  # the other twin never ran
    assert [h for h in on_the_loop if Where.ran[h] != loop] == []
    assert [h for h in on_a_thread if Where.ran[h] == loop] == []
