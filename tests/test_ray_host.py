"""RayHost: the engine's environments in Ray actors — same episodes, other processes, failures as statuses.

One local Ray instance serves the whole module (started by the first RayHost, stopped at the end)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ludus.core import registry
from ludus.core.env import Env
from ludus.core.types import Message, Observation, Score, Status, StepResult, Task
from ludus.policies.base import SamplingParams
from ludus.policies.tiny import TinyConfig, TinyPolicy
from ludus.rollout.engine import RolloutConfig, RolloutEngine, requests
from ludus.rollout.ray_host import RayHost

HANG_GUARD_S = 60.0  # only so that a broken host fails instead of hanging; never a timing assertion
GREEDY = SamplingParams(temperature=0.0, max_tokens=6)
LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}  # /proc/net hex


def _ray_daemons() -> set[int]:
    """Pids of the Ray processes that outlive a careless shutdown."""
    pids = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text().strip() in ("raylet", "gcs_server"):
                pids.add(int(entry.name))
        except OSError:
            continue  # the process just ended
    return pids


def _listening_addresses(pids: set[int]) -> set[str]:
    """The local addresses (as /proc/net hex) of the TCP sockets that ``pids`` listen on."""
    sockets = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                sockets.add(target[len("socket:[") : -1])
    addresses = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in sockets:  # 0A: LISTEN
                addresses.add(fields[1].rsplit(":", 1)[0])
    return addresses


@pytest.fixture(scope="module")
def host():
    before = _ray_daemons()
    host = RayHost(actors=2, envs_per_actor=4, num_cpus_per_actor=0.5)  # starts the module's local Ray
    import ray

    # the workers cannot import this test file: its environments travel by value, as a script's would
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ours = _ray_daemons() - before
    yield host
    host.shutdown()
    assert not ray.is_initialized()
    deadline = time.monotonic() + HANG_GUARD_S
    while _ray_daemons() & ours and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _ray_daemons() & ours, "Ray processes started by the test are still running"


def arithmetic_tasks(n: int) -> list[Task]:
    source = registry.make("arithmetic").task_source("eval")
    return [source.get(i) for i in range(n)]


class Where(Env):
    """Says which process it runs in; an answer of any kind scores 1."""

    name = "where"

    def begin(self, task: Task) -> Observation:
        return Observation([Message("user", f"pid {os.getpid()}")])

    def transition(self, action: Message) -> StepResult:
        return StepResult(Observation([Message("user", f"pid {os.getpid()}")]), 1.0, terminated=True, score=Score(1.0))


class Faulty(Env):
    """Fails where its task's prompt says: in its constructor (via the factory), reset or step."""

    name = "faulty"

    def begin(self, task: Task) -> Observation:
        if task.prompt == "reset":
            raise OSError("database is gone")
        return Observation([Message("user", task.prompt)])

    def step(self, action: str | Message) -> StepResult:  # past Env.step's own guard: the host must carry it
        if self.task is not None and self.task.prompt == "step":
            raise ValueError("bug in the environment")
        return super().step(action)

    def transition(self, action: Message) -> StepResult:
        return StepResult(Observation([]), 1.0, terminated=True, score=Score(1.0))


def faulty(where: str) -> Env:
    if where == "init":
        raise RuntimeError("cannot start the browser")
    return Faulty()


class Mortal(Env):
    """``stall``: writes its pid to ``task.info["pid_file"]`` and waits (to be killed from outside);
    ``exit``: ends its own process; anything else: scores 1."""

    name = "mortal"

    def begin(self, task: Task) -> Observation:
        return Observation([Message("user", f"pid {os.getpid()}")])

    def transition(self, action: Message) -> StepResult:
        if self.task.prompt == "stall":
            Path(self.task.info["pid_file"]).write_text(str(os.getpid()))
            threading.Event().wait(HANG_GUARD_S)
        if self.task.prompt == "exit":
            os._exit(1)
        return StepResult(Observation([]), 1.0, terminated=True, score=Score(1.0))


def test_local_ray_instance_listens_on_loopback_only(host):
    import ray

    assert ray.util.get_node_ip_address() == "127.0.0.1"
    addresses = _listening_addresses(_ray_daemons())
    assert addresses and addresses <= LOOPBACK


def test_episodes_equal_thread_host_episodes_and_run_in_other_processes(host):
    tasks = arithmetic_tasks(6)
    policy = TinyPolicy()
    config = RolloutConfig(max_batch=1)  # one conversation per call: no token can depend on its batch-mates
    local = RolloutEngine(policy, lambda: registry.make("arithmetic"), GREEDY, config).run(requests(tasks, 2))
    remote = RolloutEngine(policy, lambda: registry.make("arithmetic"), GREEDY, config, host=host).run(
        requests(tasks, 2)
    )
    assert [t.info["key"] for t in remote] == [t.info["key"] for t in local]
    assert [t.score.to_dict() for t in remote] == [t.score.to_dict() for t in local]
    assert [[m.to_dict() for m in t.messages] for t in remote] == [[m.to_dict() for m in t.messages] for t in local]
    assert all(t.score.status != Status.INFRA_ERROR and t.env == "arithmetic" for t in remote)

    done = RolloutEngine(policy, Where, GREEDY, host=host).run(requests([Task(f"w{i}", "x") for i in range(8)]))
    assert [t.score.value for t in done] == [1.0] * 8
    pids = {int(m.content.split()[1]) for t in done for m in t.messages if m.role == "user"}
    assert os.getpid() not in pids and len(pids) == 2  # both actors took sessions, none ran here


def test_a_games_other_seat_is_asked_here_when_the_game_runs_on_ray(host):
    # the actor named in an observation travels back from the Ray worker; the engine asks it here
    args = {"opponent": "actor:rival", "winnable": False, "view": "state"}
    tasks = [registry.make("tictactoe", **args).task_source("train").get(i) for i in range(3)]
    learner, rival = (TinyPolicy(TinyConfig(max_len=256), seed=seed) for seed in (0, 1))
    config = RolloutConfig(max_batch=1)
    sampling = SamplingParams(temperature=0.0, max_tokens=12)
    runs = [
        RolloutEngine(
            learner, lambda: registry.make("tictactoe", **args), sampling, config, host=h, actors={"rival": rival}
        ).run(requests(tasks, 2))
        for h in (None, host)
    ]
    assert [(t.score.to_dict(), [m.to_dict() for m in t.messages]) for t in runs[1]] == [
        (t.score.to_dict(), [m.to_dict() for m in t.messages]) for t in runs[0]
    ]
    assert all(t.score.status != Status.INFRA_ERROR and "match" in t.info["env"] for t in runs[1])
    assert any("the opponent made" in t.score.reason for t in runs[1])  # the rival moved (and lost)


@pytest.mark.parametrize(
    ("where", "reason"),
    [
        ("init", "environment create raised RuntimeError: cannot start the browser"),
        ("reset", "environment reset raised OSError: database is gone"),
        ("step", "environment step raised ValueError: bug in the environment"),
    ],
)
def test_environment_exceptions_end_as_infra_error_with_the_exception_named(host, where, reason):
    config = RolloutConfig(infra_retries=1)
    engine = RolloutEngine(TinyPolicy(), lambda: faulty(where), GREEDY, config, host=host)
    (t,) = engine.run(requests([Task("t0", where)]))
    assert t.score.status == Status.INFRA_ERROR and t.score.value == 0.0
    assert reason in t.score.reason
    assert t.info["attempts"] == 2


def test_a_killed_actor_fails_its_episodes_and_a_replacement_runs_the_next(tmp_path):
    host = RayHost(actors=1, envs_per_actor=4, num_cpus_per_actor=0.5)  # joins the module's Ray
    config = RolloutConfig(infra_retries=0, step_timeout_s=HANG_GUARD_S)
    engine = RolloutEngine(TinyPolicy(), Mortal, GREEDY, config, host=host)
    pid_file = tmp_path / "pid"
    try:
        with ThreadPoolExecutor(1) as pool:
            stalled = pool.submit(engine.run, requests([Task("s", "stall", info={"pid_file": str(pid_file)})], 2))
            deadline = time.monotonic() + HANG_GUARD_S
            while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
                time.sleep(0.05)
            victim = int(pid_file.read_text())
            os.kill(victim, signal.SIGKILL)  # mid-step: both episodes' calls are pending in that process
            killed = stalled.result(timeout=HANG_GUARD_S)
        assert [t.score.status for t in killed] == [Status.INFRA_ERROR] * 2
        assert all("actor holding this environment died" in t.score.reason for t in killed)

        exited = engine.run(requests([Task("e", "exit")]))  # the environment ends its own process
        assert exited[0].score.status == Status.INFRA_ERROR and "died" in exited[0].score.reason

        later = engine.run(requests([Task(f"ok{i}", "ok") for i in range(3)]))
        assert [t.score.value for t in later] == [1.0] * 3
        assert victim not in {int(t.messages[0].content.split()[1]) for t in later}  # a new process
    finally:
        host.shutdown()


def test_ludus_eval_with_ray_writes_trajectories_and_summary(host, tmp_path):
    import ray

    from ludus.cli import main

    argv = ["eval", "arithmetic", "--tasks", "4", "--runs", str(tmp_path), "--name", "r", "--max-tokens", "4"]
    assert main([*argv, "--ray", "--ray-actors", "1"]) == 0
    lines = [json.loads(line) for line in (tmp_path / "r" / "trajectories.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and all(r["score"]["status"] != Status.INFRA_ERROR for r in lines)
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["samples"] == 4 and summary["infra_errors"] == 0
    assert ray.is_initialized()  # the CLI's host joined this Ray instance: it must not stop it
    assert main([*argv, "--name", "r2", "--ray-actors", "2"]) == 2  # --ray-actors without --ray


def test_ludus_train_with_ray_logs_the_same_metrics_as_with_threads(host, tmp_path):
    from ludus.cli import main

    argv = ["train", "--steps", "2", "--eval-every", "0", "--eval-size", "16", "--prompts-per-step", "8"]
    argv += ["--group-size", "4", "--runs-dir", str(tmp_path), "--checkpoint-every", "0"]
    assert main([*argv, "--name", "threads"]) == 0
    assert main([*argv, "--name", "ray", "--ray", "--ray-actors", "1"]) == 0
    runs = [(tmp_path / n / "metrics.jsonl").read_text().splitlines() for n in ("threads", "ray")]
    metrics = [[{k: v for k, v in json.loads(x).items() if "_s" not in k} for x in run] for run in runs]
    assert metrics[0] == metrics[1] and len(metrics[0]) >= 3
    assert main([*argv, "--name", "bad", "--ray-address", "auto"]) == 2  # a cluster address without --ray


def test_missing_ray_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what an environment without the extra looks like
    with pytest.raises(ImportError, match=r"pip install 'ludus\[ray\]'"):
        RayHost()
