"""The environment server (``ludus serve-env``) and its clients, on real servers on 127.0.0.1:
grading parity with local environments, sessions that outlive connections, limits, auth,
failures (a hung or crashing environment, a killed server, a dropped socket), and drain."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from ludus.core.env import SingleTurnEnv
from ludus.core.registry import make
from ludus.core.types import Message, Score, Status, Task
from ludus.policies import SamplingParams
from ludus.rollout import NothingPolicy, RolloutConfig, RolloutEngine, ThreadHost, requests
from ludus.rollout.placement import EnvPlacement
from ludus.rollout.remote import Connection, RemoteEnv, RemoteEnvError, ServerHost, UnusableEnvServer
from ludus.serve.env_server import EnvServer, ServerLimits, serve
from support import serving, start_env_server

ARGS = {"digits": 2, "ops": "+", "digit_credit": 0.5}
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    proc, url = start_env_server(
        "--drain-timeout", "1", "--show-reasons", env_args=ARGS
    )  # reasons too: parity is checked whole
    yield url
    proc.terminate()
    proc.wait(timeout=30)


class Hangs(SingleTurnEnv):
    """Replies "hang" never finish (until the test releases them); "crash" raises in the grader."""

    name, description = "hangs", "a grader that can hang or crash"
    release = threading.Event()

    def default_tasks(self, split="train"):
        return make("arithmetic").task_source(split)

    def score(self, task: Task, completion: str) -> Score:
        if completion == "hang":
            self.release.wait()
        if completion == "crash":
            raise RuntimeError("the grader fell over")
        return Score(1.0) if completion == "ok" else Score.zero(Status.WRONG, "not ok")


@pytest.fixture
def hangs() -> Iterator[EnvServer]:
    limits = ServerLimits(call_timeout_s=0.5, max_sessions=3, max_request_bytes=4096, show_reasons=True)
    app = EnvServer(Hangs, limits=limits)
    yield app
    Hangs.release.set()  # let the abandoned threads finish
    Hangs.release = threading.Event()


# ---- grading parity and privacy --------------------------------------------------------------------
def test_remote_env_grades_exactly_as_the_local_environment(server):
    local = make("arithmetic", **ARGS)
    remote = RemoteEnv(server)
    assert (remote.name, remote.reward_range, remote.max_turns, remote.env_args) == ("arithmetic", (0.0, 1.0), 1, ARGS)
    for index in range(6):
        full = local.task_source("eval").get(index)
        view = remote.task_source("eval").get(index)
        assert (view.id, view.prompt) == (full.id, full.prompt)
        for reply in (str(full.answer), "12", "", "x" * 50):
            expected = (local.reset(full, seed=index), local.step(reply))
            got = (remote.reset(view, seed=index), remote.step(reply))
            assert got[0].to_dict() == expected[0].to_dict()
            assert got[1].to_dict() == expected[1].to_dict()
    remote.close()


def test_async_twins_give_the_same_results_as_the_sync_ones(server):
    remote = RemoteEnv(server)
    task = remote.task_source("train").get(3)
    sync = (remote.reset(task, seed=1).to_dict(), remote.step("7").to_dict())

    async def play():
        return (await remote.areset(task, seed=1)).to_dict(), (await remote.astep("7")).to_dict()

    assert asyncio.run(play()) == sync
    remote.close()


def test_clients_never_see_answers_or_task_info(server):
    local_task = make("arithmetic", **ARGS).task_source("eval").get(0)
    view = httpx.get(f"{server}/tasks/eval/0").json()["task"]
    assert set(view) == {"id", "prompt", "source"} and str(local_task.answer) not in json.dumps(view)
    reply = httpx.post(f"{server}/reset", json={"split": "eval", "index": 0, "session_id": "privacy"}).json()
    assert set(reply["task"]) == {"id", "prompt", "source"}
    assert RemoteEnv(server).task_source("eval").get(0).answer is None


def test_scores_keep_the_gold_answer_out_unless_the_server_shows_reasons():
    full = make("arithmetic").task_source("eval").get(0)
    for limits, shown in ((None, False), (ServerLimits(show_reasons=True), True)):
        with serving(EnvServer(lambda: make("arithmetic"), limits=limits), path="") as url:
            env = RemoteEnv(url)
            env.reset(env.task_source("eval").get(0))
            score = env.step("1").score
        assert (score.value, score.status) == (0.0, "wrong")
        assert (score.reason == "wrong" and score.extracted is None) is not shown
        assert (f"expected {full.answer}" in score.reason) is shown


def test_ludus_check_passes_against_a_server(server):
    out = subprocess.run(
        [sys.executable, "-m", "ludus.cli", "check", "arithmetic", "--env-server", server],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "meets the environment contract" in out.stdout


# ---- sessions, retries, reconnection --------------------------------------------------------------
def test_a_repeated_step_returns_the_recorded_reply_instead_of_acting_twice(server):
    body = {"session_id": "replay-1", "split": "train", "index": 2, "seed": 0}
    assert httpx.post(f"{server}/reset", json=body).status_code == 200
    step = {"session_id": "replay-1", "turn": 0, "action": {"role": "assistant", "content": "5"}}
    first, again = httpx.post(f"{server}/step", json=step), httpx.post(f"{server}/step", json=step)
    assert first.json() == again.json() and first.json()["result"]["terminated"]
    late = httpx.post(f"{server}/step", json={**step, "turn": 1})
    assert late.status_code == 409 and late.json()["error"]["type"] == "no_episode"


def test_a_session_survives_its_websocket_and_continues_on_a_new_one(server):
    ws_url = server.replace("http://", "ws://") + "/ws"

    async def scenario():
        async with connect(ws_url) as ws:
            await ws.send(json.dumps({"id": 1, "op": "reset", "session_id": "moving", "split": "eval", "index": 1}))
            reply = json.loads(await ws.recv())
            assert reply["ok"] and reply["id"] == 1
        async with connect(ws_url) as ws:  # the first connection is gone; the session is not
            action = {"role": "assistant", "content": "1"}
            await ws.send(json.dumps({"id": 2, "op": "step", "session_id": "moving", "turn": 0, "action": action}))
            return json.loads(await ws.recv())

    reply = asyncio.run(scenario())
    assert reply["ok"] and reply["id"] == 2 and reply["result"]["score"]["status"] in ("wrong", "correct")


def test_bad_requests_get_clear_errors_not_crashes(server):
    cases = [
        (httpx.post(f"{server}/step", content=b"{not json"), 400, "bad_request"),
        (httpx.post(f"{server}/step", json=[1, 2]), 400, "bad_request"),
        (httpx.post(f"{server}/step", json={"session_id": "nope", "action": {"role": "assistant"}}), 404, None),
        (httpx.post(f"{server}/reset", json={"split": "test", "index": 0}), 404, "unknown_split"),
        (httpx.post(f"{server}/reset", json={"seed": "one"}), 400, "bad_request"),
        (httpx.post(f"{server}/reset", json={"session_id": "../../etc"}), 400, "bad_request"),
        (httpx.post(f"{server}/dance", json={}), 404, "not_found"),
        (httpx.get(f"{server}/tasks/eval/-1"), 400, "bad_request"),
    ]
    for response, status, kind in cases:
        assert response.status_code == status, response.text
        assert kind is None or response.json()["error"]["type"] == kind
    httpx.post(f"{server}/reset", json={"session_id": "badstep"})
    wrong = httpx.post(f"{server}/step", json={"session_id": "badstep", "action": {"role": "user", "content": "x"}})
    assert wrong.status_code == 400 and "assistant" in wrong.json()["error"]["message"]
    assert httpx.get(f"{server}/health").json()["status"] == "ok"


def test_ludus_eval_on_two_servers_matches_a_local_eval(server, tmp_path):
    proc, second = start_env_server(env_args=ARGS)
    try:
        common = [
            "eval",
            "arithmetic",
            "--model",
            "nothing",
            "--tasks",
            "12",
            "--samples",
            "2",
            "--runs",
            str(tmp_path),
        ]
        remote = [*common, "--name", "remote", "--env-server", server, "--env-server", second]
        local = [*common, "--name", "local", "--env-args", json.dumps(ARGS)]
        for cmd in (remote, local):
            out = subprocess.run([sys.executable, "-m", "ludus.cli", *cmd], capture_output=True, text=True)
            assert out.returncode == 0, out.stderr
        summaries = [json.loads((tmp_path / n / "summary.json").read_text()) for n in ("remote", "local")]
        for key in ("mean_reward", "statuses", "samples"):
            assert summaries[0][key] == summaries[1][key]
        metrics = httpx.get(f"{second}/metrics").text
        assert 'ludus_env_events_total{event="episodes"}' in metrics  # the second server took episodes too
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_ludus_train_on_an_env_server_logs_the_same_metrics_as_a_local_run(server, tmp_path):
    flags = ["--steps", "2", "--eval-every", "0", "--eval-size", "16", "--prompts-per-step", "8"]
    flags += ["--group-size", "4", "--runs-dir", str(tmp_path), "--checkpoint-every", "0"]
    for name, extra in (("local", []), ("remote", ["--env-server", server])):
        out = subprocess.run(
            [sys.executable, "-m", "ludus.cli", "train", *flags, "--name", name, *extra], capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr[-2000:]
    runs = [(tmp_path / n / "metrics.jsonl").read_text().splitlines() for n in ("local", "remote")]
    strip = [
        [{k: v for k, v in json.loads(line).items() if "time" not in k and "_s" not in k} for line in r] for r in runs
    ]
    assert strip[0] == strip[1] and len(strip[0]) >= 3


def test_train_refuses_a_server_built_with_other_env_args(server, tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ludus.cli",
            "train",
            "--env-server",
            server,
            "--env-args",
            "{digits: 3}",
            "--runs-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "--env-args" in out.stderr and not any(tmp_path.iterdir())


def test_one_rule_checks_a_server_against_the_environment_asked_for(server, tmp_path, capsys):
    """``EnvPlacement.env_factory``, behind ``ludus eval``, ``check`` and ``train``: the server must
    serve the environment named; env_args ``None`` take the server's, a mapping must be the server's."""
    from ludus.cli import main

    placement = EnvPlacement(env_servers=(server,))
    for env_args in (None, ARGS):
        make_env, first = placement.env_factory("arithmetic", env_args)
        assert isinstance(first, RemoteEnv) and first.env_args == ARGS
        first.close()
        again = make_env()
        assert isinstance(again, RemoteEnv) and again is not first
        again.close()
    with pytest.raises(UnusableEnvServer, match="start the server with --env-args '{\"digits\": 3}'"):
        placement.env_factory("arithmetic", {"digits": 3})
    with pytest.raises(UnusableEnvServer, match="serves 'arithmetic', not 'countdown'"):
        placement.env_factory("countdown", None)
    # the command line keeps the same rule: the server's --env-args are accepted, others refused
    assert main(["check", "arithmetic", "--env-server", server, "--env-args", json.dumps(ARGS)]) == 0
    runs = tmp_path / "runs"
    code = main(["eval", "arithmetic", "--model", "nothing", "--env-server", server, "--env-args", "{digits: 3}",
                 "--runs", str(runs)])  # fmt: skip
    assert code == 2 and "--env-args" in capsys.readouterr().err and not runs.exists()


# ---- failures -------------------------------------------------------------------------------------
def test_a_hung_or_crashing_environment_is_an_infra_error_and_the_server_carries_on(hangs):
    with serving(hangs, path="") as url:
        env = RemoteEnv(url)
        task = env.task_source("train").get(0)
        env.reset(task)
        hung = env.step("hang")
        assert hung.score.status == Status.INFRA_ERROR and "did not finish within 0.5 s" in hung.score.reason
        env.reset(task)  # the hung session was dropped: a new one starts
        crashed = env.step("crash")
        assert crashed.score.status == Status.INFRA_ERROR and "fell over" in crashed.score.reason
        env.reset(task)
        assert env.step("ok").score.value == 1.0
        assert 'ludus_env_events_total{event="timeouts"} 1' in httpx.get(f"{url}/metrics").text


class RowTasks:
    """A task source that reads rows (here: waits, records its thread): row 7 hangs, row 13 is broken."""

    size = 100
    threads: list[int] = []

    def get(self, index: int) -> Task:
        self.threads.append(threading.get_ident())
        if index == 7:
            Hangs.release.wait()
        if index == 13:
            raise ValueError("row 13 is corrupt")
        return Task(f"row/{index}", f"{index}+1=", answer=str(index + 1))


class FromRows(Hangs):
    threads: list[int] = []

    def default_tasks(self, split="train"):
        return RowTasks()

    def begin(self, task: Task):
        self.threads.append(threading.get_ident())
        return super().begin(task)


def test_tasks_load_on_the_thread_that_resets_and_their_failures_are_reported(hangs):
    app = EnvServer(FromRows, limits=ServerLimits(call_timeout_s=0.5))
    with serving(app, path="") as url:
        ok = httpx.post(f"{url}/reset", json={"session_id": "rows", "index": 3})
        assert ok.status_code == 200 and ok.json()["task"]["id"] == "row/3"
        # one thread hop per reset: the task was read on the environment thread that began the episode
        assert RowTasks.threads[-1] == FromRows.threads[-1] != threading.get_ident()
        broken = httpx.post(f"{url}/reset", json={"session_id": "rows", "index": 13})
        assert broken.status_code == 500 and "row 13 is corrupt" in broken.json()["error"]["message"]
        assert httpx.post(f"{url}/reset", json={"session_id": "rows", "index": 4}).status_code == 200  # it lives on
        hung = httpx.post(f"{url}/reset", json={"session_id": "rows", "index": 7})
        assert hung.status_code == 504 and hung.json()["error"]["type"] == "timeout"
        # a reset that never came back may still hold its environment: the session is gone, not reused
        gone = httpx.post(f"{url}/step", json={"session_id": "rows", "action": {"role": "assistant", "content": "5"}})
        assert gone.status_code == 404 and gone.json()["error"]["type"] == "unknown_session"
        assert httpx.get(f"{url}/tasks/train/13").status_code == 500
        assert httpx.get(f"{url}/tasks/train/5").json()["task"]["id"] == "row/5"


class OddInfo(Hangs):
    """Its step result carries a value JSON cannot hold."""

    def transition(self, action):
        result = super().transition(action)
        result.info["handle"] = object()
        return result


def test_a_reply_with_no_json_form_is_an_env_error_on_both_transports():
    with serving(EnvServer(OddInfo), path="") as url:
        body = {"session_id": "odd", "action": {"role": "assistant", "content": "ok"}, "turn": 0}
        assert httpx.post(f"{url}/reset", json={"session_id": "odd"}).status_code == 200
        http = httpx.post(f"{url}/step", json=body)
        assert http.status_code == 500 and "no JSON form" in http.json()["error"]["message"]

        async def over_websocket():
            async with connect(url.replace("http", "ws") + "/ws") as ws:
                await ws.send(json.dumps({"id": 1, "op": "reset", "session_id": "odd"}))
                await ws.recv()
                await ws.send(json.dumps({"id": 2, "op": "step", **body}))
                return json.loads(await asyncio.wait_for(ws.recv(), 30))

        reply = asyncio.run(over_websocket())
        assert reply["id"] == 2 and reply["ok"] is False and reply["error"]["type"] == "env_error"
        env = RemoteEnv(url)
        env.reset(env.task_source("train").get(0))
        failed = env.step("ok")  # the client's episode ends as an infrastructure failure, with the reason
        assert failed.score.status == Status.INFRA_ERROR and "no JSON form" in failed.score.reason


def test_an_action_over_the_request_limit_scores_zero_as_bad_output_not_as_an_infra_error():
    app = EnvServer(lambda: make("arithmetic"), limits=ServerLimits(max_request_bytes=4096))
    with serving(app, path="") as url:
        env = RemoteEnv(url)
        task = env.task_source("train").get(0)
        env.reset(task)
        sync = env.step("9" * 5000)  # HTTP: the server answers 413

        async def play():
            await env.areset(task)
            return await env.astep("9" * 5000)  # WebSocket: refused before sending (the server would close it)

        for result in (sync, asyncio.run(play())):
            assert result.reward == 0.0 and result.terminated
            assert result.score.status == Status.FORMAT_ERROR and "too large" in result.score.reason

        async def engine_session():
            host = ServerHost([url])
            session = await host.open()
            await session.reset(task, 0)
            big = await session.step(Message("assistant", "9" * 5000))
            await session.reset(task, 1)  # the session is still good for the next episode
            fine = await session.step(Message("assistant", str(task.answer)))
            await session.close()
            return big, fine

        big, fine = asyncio.run(engine_session())
        assert big.score.status == Status.FORMAT_ERROR and fine.score.status != Status.INFRA_ERROR


def test_limits_refuse_with_a_reason_instead_of_queueing(hangs):
    with serving(hangs, path="", ws_max_size=4096) as url:
        for i in range(3):
            assert httpx.post(f"{url}/reset", json={"session_id": f"s{i}"}).status_code == 200
        full = httpx.post(f"{url}/reset", json={"session_id": "s3"})
        assert full.status_code == 503 and full.json()["error"]["type"] == "too_many_sessions"
        assert full.headers["retry-after"] == "1"
        with pytest.raises(RemoteEnvError) as caught:
            remote = RemoteEnv(url, retries=1)
            remote.reset(remote.task_source("train").get(0))
        assert caught.value.kind == "too_many_sessions"
        big = httpx.post(
            f"{url}/step", json={"session_id": "s0", "action": {"role": "assistant", "content": "x" * 5000}}
        )
        assert big.status_code == 413 and big.json()["error"]["type"] == "too_large"

        async def oversized_websocket_message():
            async with connect(url.replace("http", "ws") + "/ws") as ws:
                await ws.send("x" * 5000)
                with pytest.raises(ConnectionClosed) as closed:
                    await ws.recv()
                return closed.value.rcvd.code

        assert asyncio.run(oversized_websocket_message()) == 1009  # "message too big"


def test_idle_sessions_are_closed_and_their_steps_become_infra_errors():
    app = EnvServer(lambda: make("arithmetic"), limits=ServerLimits(idle_timeout_s=0.2))
    with serving(app, path="") as url:
        env = RemoteEnv(url)
        env.reset(env.task_source("train").get(0))
        deadline = time.monotonic() + 30
        while app.sessions and time.monotonic() < deadline:  # the reaper runs every idle_timeout/4
            time.sleep(0.05)
        result = env.step("1")
        assert result.score.status == Status.INFRA_ERROR and "no such session" in result.score.reason


def test_a_token_guards_everything_but_health():
    app = EnvServer(lambda: make("arithmetic"), token="s3cret-s3cret-s3cret")
    with serving(app, path="") as url:
        assert httpx.get(f"{url}/health").status_code == 200
        assert httpx.get(f"{url}/info").status_code == 401
        assert httpx.get(f"{url}/info", headers={"authorization": "Bearer wrong"}).status_code == 401
        with pytest.raises(RemoteEnvError) as caught:
            RemoteEnv(url, token="wrong")
        assert caught.value.kind == "unauthorized"
        env = RemoteEnv(url, token="s3cret-s3cret-s3cret")
        assert env.name == "arithmetic"

        assert asyncio.run(env.areset(env.task_source("train").get(0))).messages  # the WebSocket sends it too
        with pytest.raises(RemoteEnvError, match="refused the WebSocket"):
            asyncio.run(Connection(url, token="wrong", retries=0).arequest("info"))


def test_serving_beyond_loopback_needs_a_token():
    with pytest.raises(ValueError, match="set a token"):
        serve(lambda: make("arithmetic"), host="0.0.0.0", port=0)  # refused before anything is bound


def test_a_killed_server_ends_episodes_as_infra_errors_and_new_ones_move_to_the_live_server(tmp_path):
    doomed, doomed_url = start_env_server(env_args=ARGS)
    live, live_url = start_env_server(env_args=ARGS)
    try:
        remote = RemoteEnv(doomed_url, retries=1)
        task = remote.task_source("train").get(0)
        remote.reset(task)
        host = ServerHost([doomed_url, live_url], retries=1)
        doomed.kill()
        doomed.wait()
        result = remote.step("12")  # mid-episode: the server is gone
        assert result.score.status == Status.INFRA_ERROR and "Connection refused" in result.score.reason
        survivor = RemoteEnv(live_url)
        tasks = [survivor.task_source("train").get(i) for i in range(1, 9)]
        engine = RolloutEngine(
            NothingPolicy(), lambda: survivor, SamplingParams(max_tokens=4), RolloutConfig(max_batch=16), host=host
        )
        trajectories = engine.run(requests(tasks, 2))
        assert len(trajectories) == 16 and all(not t.score.is_infra_error for t in trajectories)
        assert 'event="episodes"} 16' in httpx.get(f"{live_url}/metrics").text
        host.shutdown()
    finally:
        for proc in (doomed, live):
            proc.kill()
            proc.wait()


def test_a_slow_client_holds_up_no_one(server):
    host, port = server.removeprefix("http://").split(":")
    trickle = socket.create_connection((host, int(port)))
    trickle.sendall(b"POST /reset HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n{")  # and then nothing
    try:
        env = RemoteEnv(server)
        env.reset(env.task_source("train").get(0))
        assert env.step("3").score is not None
    finally:
        trickle.close()


def test_sigterm_drains_running_episodes_then_exits():
    proc, url = start_env_server("--drain-timeout", "20", env_args=ARGS)
    try:
        env = RemoteEnv(url)
        task = env.task_source("train").get(0)
        env.reset(task)
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        while httpx.get(f"{url}/health").status_code != 503 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert httpx.get(f"{url}/health").json()["status"] == "draining"
        refused = httpx.post(f"{url}/reset", json={"session_id": "late"})
        assert refused.status_code == 503 and refused.json()["error"]["type"] == "draining"
        assert env.step("12").score.status in ("wrong", "correct")  # the running episode finishes
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()


def test_remote_sessions_match_thread_sessions_in_the_engine(server):
    remote = RemoteEnv(server)
    local = make("arithmetic", **ARGS)
    tasks_remote = [remote.task_source("train").get(i) for i in range(6)]
    tasks_local = [local.task_source("train").get(i) for i in range(6)]
    sampling = SamplingParams(max_tokens=4)
    host = ServerHost([server])
    try:
        got = RolloutEngine(NothingPolicy(), lambda: remote, sampling, host=host).run(requests(tasks_remote, 3))
    finally:
        host.shutdown()
    threads = ThreadHost(4)
    want = RolloutEngine(NothingPolicy(), lambda: make("arithmetic", **ARGS), sampling, host=threads).run(
        requests(tasks_local, 3)
    )
    threads.shutdown()
    assert [(t.task.id, t.score.to_dict(), [m.to_dict() for m in t.messages]) for t in got] == [
        (t.task.id, t.score.to_dict(), [m.to_dict() for m in t.messages]) for t in want
    ]
