"""AgentEnv(command=..., sandbox=True): agent commands inside the real sandbox (bubblewrap), whose
only network is the relay to the agent gateway. Every episode goes through the real gateway,
the real rollout engine or the environment's own reset/step, and a real sandbox execution."""

from __future__ import annotations

import os
import secrets
import signal
import socket
from pathlib import Path

import pytest

from load_support import processes_named
from ludus.agents import AgentEnv, AgentOutcome
from ludus.agents.gateway import AgentGateway
from ludus.core.registry import make
from ludus.core.types import Message, Score, Status, Task
from ludus.rollout.engine import requests
from ludus.rollout.scripted import NothingPolicy, OraclePolicy
from ludus.sandbox import detect
from test_agents import arithmetic_tasks, run

EXAMPLES = Path(__file__).parents[1] / "examples" / "agents"
# one model call with curl, the reply dropped (bash and curl come from the host's /usr)
CALL = (
    'curl --silent --fail "$OPENAI_BASE_URL/chat/completions" -H "Authorization: Bearer $OPENAI_API_KEY" '
    '-H "Content-Type: application/json" -d \'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}\' '
    ">/dev/null"
)


@pytest.fixture(autouse=True)
def bubblewrap():
    assert detect().backend == "bwrap", f"these tests need bubblewrap: {detect().reason}"


def parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


def test_the_sql_agent_solves_tasks_in_the_sandbox_with_its_database_copied_in(monkeypatch):
    monkeypatch.chdir(EXAMPLES)
    factory = lambda: AgentEnv(  # noqa: E731
        command="python sql_agent.py",
        sandbox=True,
        sandbox_files=["sql_agent.py"],
        env="sql",
        env_args={"difficulty": 1},
        share_info=["db"],
    )
    tasks = [factory().task_source("eval").get(i) for i in range(2)]
    solved = run(factory, OraclePolicy(factory, requests(tasks, 1)), tasks)
    assert [t.score.status for t in solved] == [Status.CORRECT] * 2, [t.score.reason for t in solved]
    assert all(t.info["env"]["agent_calls"] >= 1 and t.info["env"]["agent_cpu_s"] > 0 for t in solved)


def test_a_shell_agent_with_curl_works_in_the_sandbox_and_an_empty_reply_earns_nothing(monkeypatch):
    monkeypatch.chdir(EXAMPLES)
    factory = lambda: AgentEnv(command="bash ask.sh", sandbox=True, sandbox_files=["ask.sh"], env="arithmetic")  # noqa: E731
    tasks = arithmetic_tasks(2)
    solved = run(factory, OraclePolicy(factory, requests(tasks, 1)), tasks)
    assert [t.score.status for t in solved] == [Status.CORRECT] * 2, [t.score.reason for t in solved]
    empty = run(factory, NothingPolicy(), tasks)
    assert {t.score.status for t in empty} == {Status.NO_ANSWER}


PARALLEL_AGENT = """
import asyncio, json, sys
from openai import AsyncOpenAI

async def main():
    task = json.load(sys.stdin)
    async with AsyncOpenAI(max_retries=0) as client:  # OPENAI_BASE_URL and OPENAI_API_KEY
        asks = [
            client.chat.completions.create(model="any", messages=[{"role": "user", "content": task["prompt"]}])
            for _ in range(3)
        ]
        replies = await asyncio.gather(*asks)  # three calls at once, on three connections
    print(replies[0].choices[0].message.content)

asyncio.run(main())
"""


def test_an_async_agent_makes_parallel_calls_through_the_sandbox(tmp_path, monkeypatch):
    (tmp_path / "parallel.py").write_text(PARALLEL_AGENT)
    monkeypatch.chdir(tmp_path)
    factory = lambda: AgentEnv(  # noqa: E731
        command="python parallel.py", sandbox=True, sandbox_files=["parallel.py"], env="arithmetic"
    )
    tasks = arithmetic_tasks(1)
    [trajectory] = run(factory, OraclePolicy(factory, requests(tasks, 1)), tasks)
    assert trajectory.score.status == Status.CORRECT, trajectory.score.reason
    assert trajectory.info["env"]["agent_calls"] == len(trajectory.turns) == 3


PROBE_AGENT = """
import json, os, socket, subprocess, sys, urllib.request

task = json.load(sys.stdin)
subprocess.Popen(["bash", "-c", "exec -a {marker} sleep 3600"])  # left running: the episode's end takes it
body = json.dumps({{"model": "m", "messages": [{{"role": "user", "content": task["prompt"]}}]}}).encode()
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    body,
    {{"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"}},
)
reply = json.load(urllib.request.urlopen(request))["choices"][0]["message"]["content"]
seen = []
own = int(os.environ["OPENAI_BASE_URL"].rsplit(":", 1)[1].split("/")[0])  # the relay's port in the sandbox
for port in ({gateway_port}, {server_port}):  # the gateway itself, and a server of the host
    if port == own:  # the sandbox's own loopback happened to give the relay that number: it says nothing
        seen.append("own-relay")
        continue
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        seen.append("connected")
    except OSError as exc:
        seen.append(type(exc).__name__)
with open(os.path.join(os.environ["LUDUS_WORKDIR"], "notes", "reply.txt"), "w") as fh:
    fh.write(reply)
print(" ".join(seen))
"""


class KeepsOutcome(AgentEnv):
    """Grades nothing: keeps how the agent ended, and the file it left."""

    def grade(self, task: Task, outcome: AgentOutcome) -> Score:
        self.answer = outcome.answer
        self.note = (outcome.workdir / "notes" / "reply.txt").read_text()
        return Score(1.0)


def test_the_agent_reaches_the_gateway_and_nothing_else_and_its_files_come_back(tmp_path, monkeypatch):
    marker = f"ludus-marker-{secrets.token_hex(6)}"
    host_server = socket.create_server(("127.0.0.1", 0))
    host_server.setblocking(False)
    gateway_port = int(AgentGateway.shared().base_url.rsplit(":", 1)[1].split("/")[0])
    probe = PROBE_AGENT.format(marker=marker, gateway_port=gateway_port, server_port=host_server.getsockname()[1])
    (tmp_path / "probe.py").write_text(probe)
    monkeypatch.chdir(tmp_path)
    # the agent's files go in its $LUDUS_WORKDIR, which starts empty but for the task file
    env = KeepsOutcome(command="bash -c 'mkdir $LUDUS_WORKDIR/notes && exec python probe.py'", sandbox=True,
                       sandbox_files=["probe.py"], env="arithmetic")  # fmt: skip
    task = env.task_source("eval").get(0)
    observation = env.reset(task)
    assert observation.messages == [Message("user", task.prompt)]
    assert processes_named(marker), "the agent's background process runs"
    result = env.step(Message("assistant", "the reply"))
    assert result.done and result.score.value == 1.0, result.score
    # refused both ways (a port number the relay happens to share inside the sandbox proves nothing either way)
    assert set(env.answer.split()) <= {"ConnectionRefusedError", "own-relay"} and len(env.answer.split()) == 2
    assert env.note == "the reply"
    with pytest.raises(BlockingIOError):
        host_server.accept()  # nothing came through
    assert processes_named(marker) == []
    env.close()
    host_server.close()


@pytest.mark.parametrize(
    ("script", "timeout_s", "status", "reason"),
    [
        ("exit 0", 60, Status.INFRA_ERROR, "finished before calling the model"),
        (f"{CALL}; echo 'no tool' >&2; exit 3", 60, "agent_error", "exit status 3: no tool"),
        # the relay is process 1 of the execution's PID namespace: the agent cannot kill it to
        # pass its own failure off as the sandbox's (which would be masked, not scored)
        (f"{CALL}; kill -KILL 1; kill -TERM 1; exit 3", 60, "agent_error", "exit status 3"),
        # the CPU limit decides, however long a loaded machine makes it take (the hang rule is far)
        (f"{CALL}; while :; do :; done", 600, Status.TIMEOUT, "used its 0.5 s of CPU time after 1 model calls"),
        (f"{CALL}; sleep 3600", 1, Status.INFRA_ERROR, "neither called the model nor ended within 1 s"),
    ],
    ids=["never-calls", "crash-after", "kills-the-relay", "cpu", "hang"],
)
def test_who_is_to_blame_when_a_sandboxed_agent_fails(tmp_path, monkeypatch, script, timeout_s, status, reason):
    (tmp_path / "agent.sh").write_text(script)
    monkeypatch.chdir(tmp_path)
    factory = lambda: AgentEnv(  # noqa: E731
        command="bash agent.sh",
        sandbox=True,
        sandbox_files=["agent.sh"],
        env="arithmetic",
        cpu_limit_s=0.5,
        timeout_s=timeout_s,
    )
    [trajectory] = run(factory, NothingPolicy(), arithmetic_tasks(1), infra_retries=0)
    assert trajectory.score.status == status
    assert reason in trajectory.score.reason


def marked_agent(tmp_path: Path, script: str, **options) -> tuple[AgentEnv, str]:
    """An agent ``bash agent.sh MARKER`` running ``script``: the marker, a token of this test, is
    in the command line of its shell, of the shell's forks and (``exec -a "$1"``) of what they run."""
    marker = f"ludus-marker-{secrets.token_hex(6)}"
    (tmp_path / "agent.sh").write_text(script)
    env = AgentEnv(command=f"bash agent.sh {marker}", sandbox=True, sandbox_files=["agent.sh"], env="arithmetic",
                   **options)  # fmt: skip
    return env, marker


def test_a_hung_agent_is_stopped_with_everything_it_started(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env, marker = marked_agent(tmp_path, f'(exec -a "$1" sleep 3600) & {CALL}; sleep 3600', timeout_s=1)
    env.reset(env.task_source("eval").get(0))
    assert processes_named(marker), "the agent runs"
    result = env.step(Message("assistant", "7"))
    assert result.score.status == Status.INFRA_ERROR
    assert "neither called the model nor ended" in result.score.reason
    assert processes_named(marker) == []
    env.close()


def test_a_sandbox_that_dies_under_the_agent_is_infra_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env, marker = marked_agent(tmp_path, f"{CALL}; {CALL}")
    env.reset(env.task_source("eval").get(0))
    # the agent's shell runs under the relay (a fork of the sandbox worker), under the worker
    [relay] = {parent(pid) for pid in processes_named(marker)}
    assert b"ludus_inside" in Path(f"/proc/{relay}/cmdline").read_bytes()
    os.kill(parent(relay), signal.SIGKILL)
    result = env.step(Message("assistant", "7"))
    assert result.score.status == Status.INFRA_ERROR
    assert "the agent's sandbox failed" in result.score.reason, result.score.reason
    assert processes_named(marker) == []
    env.close()


def test_the_sandbox_arguments_are_checked_when_the_environment_is_made(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "agent.sh").write_text("exit 0")
    env = make("agent", command="bash agent.sh", sandbox=True, sandbox_files=["agent.sh"],
               sandbox_limits={"memory_mb": 512, "processes": 16}, cpu_limit_s=5, timeout_s=10, max_turns=3)  # fmt: skip
    limits = env.sandbox_limits
    assert (limits.memory_mb, limits.processes, limits.cpu_s) == (512, 16, 5)
    assert limits.wall_s > 4 * 10, "own time includes waits for the model: only a backstop"
    assert env.sandbox_files == {"agent.sh": b"exit 0"}
    for wrong, message in [
        ({"sandbox_limits": {"cpu_s": 5}}, "cpu_limit_s"),
        ({"sandbox_limits": {"memry_mb": 5}}, "unknown fields"),
        ({"sandbox_limits": {"memory_mb": -1}}, "positive"),
        ({"sandbox_files": ["../agent.sh"]}, "inside the directory"),
        ({"sandbox_files": ["missing.sh"]}, "no file or folder"),
    ]:
        with pytest.raises(ValueError, match=message):
            AgentEnv(command="bash agent.sh", sandbox=True, **wrong)
    with pytest.raises(ValueError, match="a Python agent= runs in this process"):
        AgentEnv(lambda context: None, sandbox=True)
    with pytest.raises(ValueError, match="for sandbox=True"):
        AgentEnv(command="bash agent.sh", sandbox_files=["agent.sh"])
