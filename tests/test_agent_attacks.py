"""``AgentEnv`` and its gateway attacked by the agents they run: calls racing the end of their
episode or flooding it, command agents that leave daemons, flood their pipes, never read, stop
themselves or print their key, Python agents that return what is no text or raise what is no
Exception, hostile requests (unencodable text, conversations too long for the model, hostile tool
schemas, unknown roles, rewritten histories), agents looking for the answer or answering without
the model, the verdict of a loaded machine, and slow or idle clients of the gateway. Each runs
against the real gateway on 127.0.0.1 with the real ``openai`` client and the real rollout
engine, and checks the status the "who is to blame" table of docs/agents.md gives, that the
agent's processes are gone and that its calls were answered."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import socket
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from ludus.agents import AgentEnv
from ludus.agents.gateway import MAX_WAITING_CALLS, AgentGateway
from ludus.agents.runner import AgentContext
from ludus.core.registry import make
from ludus.core.types import Message, Status, Task, Trajectory, chained_turns
from ludus.policies.base import Policy, SamplingParams
from ludus.policies.tiny import TinyConfig, TinyPolicy
from ludus.rollout.engine import RolloutConfig, RolloutEngine, requests
from ludus.rollout.scripted import NothingPolicy, OraclePolicy
from test_agents import arithmetic_tasks, ask_once, client, run
from test_proxy import ADD, ScriptedAgentModel
from test_proxy_attacks import closed_by_the_server

ASK = Path(__file__).parents[1] / "examples" / "agents" / "ask.sh"
ONE_CALL = (  # a shell agent's model call, its reply thrown away
    'curl -sf -H "Authorization: Bearer $OPENAI_API_KEY" -H "Content-Type: application/json" '
    '-d \'{"messages": [{"role": "user", "content": "hi"}]}\' "$OPENAI_BASE_URL/chat/completions" >/dev/null'
)


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended and been reaped."""
    return not os.path.exists(f"/proc/{pid}")


def pids_in(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def command_env(script: str, **options: Any) -> Callable[[], AgentEnv]:
    """A factory of AgentEnv running ``script`` with bash, graded by arithmetic."""
    return lambda: AgentEnv(command=["bash", "-c", script], env="arithmetic", **options)


def run_each(factories: list[Callable[[], AgentEnv]], policy: Policy, **config: Any) -> list[Trajectory]:
    """One episode of each factory's environment, on arithmetic's first tasks, in one engine run
    (batched together with ``lockstep``); the trajectories in the factories' order."""
    tasks = arithmetic_tasks(len(factories))
    episodes = [dataclasses.replace(r, env=f) for r, f in zip(requests(tasks, 1), factories, strict=True)]
    engine = RolloutEngine(policy, factories[0], SamplingParams(max_tokens=24), RolloutConfig(**config))
    by_key = {t.info["key"]: t for t in engine.run(episodes)}
    return [by_key[r.key] for r in episodes]


# ---- calls racing their episode's end, and floods ------------------------------------------------------
def test_calls_racing_the_end_of_their_episode_are_answered_or_refused_never_left_waiting():
    callers: list[threading.Thread] = []
    refusals: list[int] = []

    def flood(context: AgentContext) -> str:
        """Eight threads of its own calling the model until refused (the agent itself is stopped
        when its episode ends; its threads are not)."""

        def caller() -> None:
            while True:
                try:
                    client(context).chat.completions.create(model="any", messages=[{"role": "user", "content": "hi"}])
                except openai.APIStatusError as refused:
                    refusals.append(refused.status_code)
                    return

        threads = [threading.Thread(target=caller) for _ in range(8)]
        callers.extend(threads)
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return "1"

    env = AgentEnv(flood, env="arithmetic", max_turns=3)
    for task in arithmetic_tasks(8):
        env.reset(task)
        result = env.step(Message("assistant", "1"))
        while not result.done:
            result = env.step(Message("assistant", "1"))
        assert result.score.status == Status.TRUNCATED
    env.close()
    for thread in callers:
        thread.join(120)  # a bound on a call left waiting, not a speed check
    assert len(callers) == 64 and not any(thread.is_alive() for thread in callers)
    assert len(refusals) == 64 and set(refusals) <= {401, 403}


def test_a_call_after_close_is_refused_and_a_flood_of_calls_waits_only_up_to_its_bound():
    busy: list[int] = []
    ended: list[int] = []
    keys: list[tuple[str, str]] = []
    floods: list[threading.Thread] = []

    def flood(context: AgentContext) -> str:
        """A hundred calls at once, from a thread of its own (which outlives the agent, stopped
        with its episode), counting how each was refused."""
        keys.append((context.base_url, context.api_key))

        async def calls() -> None:
            async with openai.AsyncOpenAI(base_url=context.base_url, api_key=context.api_key, max_retries=0) as api:

                async def call() -> None:
                    try:
                        await api.chat.completions.create(model="any", messages=[{"role": "user", "content": "hi"}])
                    except openai.RateLimitError:
                        busy.append(429)
                    except openai.APIStatusError as refused:
                        ended.append(refused.status_code)

                await asyncio.gather(*(call() for _ in range(100)))

        floods.append(threading.Thread(target=asyncio.run, args=(calls(),)))
        floods[0].start()
        floods[0].join()
        return "1"

    env = AgentEnv(flood, env="arithmetic")
    env.reset(arithmetic_tasks(1)[0])
    for _ in range(24000):  # a bound on a broken gateway, not a speed check
        if len(busy) >= 100 - MAX_WAITING_CALLS - 1:
            break
        threading.Event().wait(0.005)
    env.close()
    floods[0].join(120)  # a bound on a call left waiting
    assert not floods[0].is_alive()
    # one call taken as the first turn (it may still have been queued when the others came), 64 waiting
    assert len(busy) in (100 - MAX_WAITING_CALLS - 1, 100 - MAX_WAITING_CALLS)
    assert len(ended) == 100 - len(busy) and set(ended) == {403}
    base_url, key = keys[0]
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=base_url, api_key=key, max_retries=0).chat.completions.create(
            model="any", messages=[{"role": "user", "content": "hi"}]
        )


# ---- command agents ----------------------------------------------------------------------------------
def test_a_command_agents_daemons_end_with_it_and_its_answer_still_counts(tmp_path):
    """A daemon holding the command's stdout kept its answer from ever arriving: ``infra_error``
    after ``timeout_s``, and both daemons ran on after the episode."""
    pids = tmp_path / "pids"
    script = (
        f"setsid sleep 611 & echo $! > {pids}; "  # in a session of its own, holding stdout
        f"setsid -f sh -c 'echo $$ >> {pids}; exec sleep 611' </dev/null >/dev/null 2>&1; "  # detached
        f'while [ "$(wc -l < {pids})" -lt 2 ]; do sleep 0.01; done; exec bash {ASK}'
    )
    factory = command_env(script, timeout_s=60)
    tasks = arithmetic_tasks(1)
    [trajectory] = run(factory, OraclePolicy(factory, requests(tasks, 1)), tasks, infra_retries=0)
    assert trajectory.score.status == Status.CORRECT, trajectory.score.reason
    assert len(pids_in(pids)) == 2 and all(gone(pid) for pid in pids_in(pids))


HOSTILE_COMMANDS = {
    # stdout and stderr flooded with 100 MB each, then exit 0: the first MiB of stdout is its answer
    "floods its pipes": (
        f"{ONE_CALL}; head -c 100000000 /dev/zero | tr '\\0' 7; head -c 100000000 /dev/zero >&2",
        Status.FORMAT_ERROR,
        "1048576 characters",
    ),
    "closes stdout and runs on": (f"{ONE_CALL}; echo 5; exec 1>&-; exec sleep 612", Status.INFRA_ERROR, "within 3 s"),
    "stops its whole process group": (f"{ONE_CALL}; kill -STOP 0", Status.INFRA_ERROR, "within 3 s"),
    "prints its key": (f"{ONE_CALL}; echo $OPENAI_API_KEY", Status.FORMAT_ERROR, "ludus-"),
}


@pytest.mark.parametrize("name", list(HOSTILE_COMMANDS))
def test_hostile_command_agents_get_the_verdict_of_the_table_and_leave_nothing_running(name, tmp_path):
    script, status, reason = HOSTILE_COMMANDS[name]
    pids = tmp_path / "pids"
    factory = command_env(f"echo $$ > {pids}; {script}", timeout_s=3)
    tasks = arithmetic_tasks(1)
    [trajectory] = run(factory, NothingPolicy(), tasks, infra_retries=0)
    assert trajectory.score.status == status and reason in trajectory.score.reason, trajectory.score.reason
    [pid] = pids_in(pids)
    assert gone(pid)
    if name == "prints its key":  # an episode's key is refused once it ended, whoever read it
        key = trajectory.score.reason.split("'")[1]
        refused = httpx.post(
            f"{AgentGateway.shared().base_url}/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}]},
            headers={"authorization": f"Bearer {key}"},
        )
        assert refused.status_code == 401


class BigTasks:
    """One task whose prompt is larger than a pipe holds (the agent's stdin)."""

    size = 1

    def get(self, index: int) -> Task:
        return Task("big/0", "What is 2+3? " + "Think. " * 20_000, answer=5)


def test_a_command_that_never_reads_its_stdin_is_graded():
    factory = lambda: AgentEnv(command=["bash", "-c", f"{ONE_CALL}; echo 5"], env="arithmetic", tasks=BigTasks())  # noqa: E731
    [trajectory] = run(factory, NothingPolicy(), [BigTasks().get(0)], infra_retries=0)
    assert trajectory.score.status == Status.CORRECT, trajectory.score.reason


# ---- Python agents -------------------------------------------------------------------------------------
class NoText:
    def __str__(self) -> str:
        raise RuntimeError("no text here")


def returns_a_dict(context: AgentContext) -> Any:
    ask_once(context)
    return {"answer": 1}


def returns_no_text(context: AgentContext) -> Any:
    ask_once(context)
    return NoText()


def exits(context: AgentContext) -> Any:
    ask_once(context)
    raise SystemExit(3)


def interrupts(context: AgentContext) -> Any:
    ask_once(context)
    raise KeyboardInterrupt


def asks_two_replies(context: AgentContext) -> Any:
    ask_once(context)
    return client(context).chat.completions.create(model="any", messages=[{"role": "user", "content": "?"}], n=2)


def streams_a_tool_loop(context: AgentContext) -> str:
    """The tool loop of the proxy's tests, every reply streamed through the gateway."""
    api = client(context)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is 1+2?"}]
    for _ in range(2):
        text, calls = "", {}
        for chunk in api.chat.completions.create(model="any", messages=messages, tools=[ADD], stream=True):
            for choice in chunk.choices:
                text += choice.delta.content or ""
                for call in choice.delta.tool_calls or []:
                    entry = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                    entry["id"] = call.id or entry["id"]
                    entry["name"] += (call.function.name or "") if call.function else ""
                    entry["arguments"] += (call.function.arguments or "") if call.function else ""
        if not calls:
            return text
        wire = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls.values()
        ]
        messages.append({"role": "assistant", "content": text or None, "tool_calls": wire})
        arguments = json.loads(calls[0]["arguments"])
        messages.append(
            {"role": "tool", "tool_call_id": calls[0]["id"], "content": str(arguments["a"] + arguments["b"])}
        )
    return "no answer"


def hostile_tools(context: AgentContext) -> str:
    recursive = {"$ref": "#", "definitions": {"loop": {"$ref": "#/definitions/loop"}}, "type": "object"}
    tools = [{"type": "function", "function": {"name": f"t{i}", "parameters": recursive}} for i in range(2000)]
    tools.append({"type": "function", "function": {"name": "big", "description": "x" * 1_000_000}})
    api = client(context)
    return (
        api.chat.completions.create(model="any", messages=[{"role": "user", "content": "hi"}], tools=tools)
        .choices[0]
        .message.content
        or ""
    )


def odd_roles(context: AgentContext) -> str:
    api = client(context)
    with pytest.raises(openai.BadRequestError):
        api.chat.completions.create(model="any", messages=[{"role": "robot", "content": "beep"}])
    messages = [
        {"role": "developer", "content": "be brief"},
        {"role": "tool", "content": "a result nobody asked for"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "x", "type": "function", "function": {"name": "ghost", "arguments": "{not json"}}],
        },
        {"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "someone"},
    ]
    return api.chat.completions.create(model="any", messages=messages).choices[0].message.content or ""


def rewrites_every_call(context: AgentContext) -> str:
    api = client(context)
    for i in range(3):
        api.chat.completions.create(model="any", messages=[{"role": "user", "content": f"version {i}"}])
    return "1"


PYTHON_AGENTS = {
    # agent: (status, reason), the status None where the wrapped grader decides
    returns_a_dict: (None, "{'answer': 1}"),
    returns_no_text: ("agent_error", "RuntimeError: no text here"),
    exits: ("agent_error", "SystemExit: 3"),
    interrupts: ("agent_error", "KeyboardInterrupt"),
    asks_two_replies: ("agent_error", "n=2"),
    streams_a_tool_loop: (None, "The sum is 3."),
    hostile_tools: (None, ""),
    odd_roles: (None, ""),
    rewrites_every_call: (None, ""),
}


@pytest.mark.parametrize("agent", list(PYTHON_AGENTS), ids=[a.__name__ for a in PYTHON_AGENTS])
def test_hostile_python_agents_get_the_verdict_of_the_table(agent):
    status, reason = PYTHON_AGENTS[agent]
    factory = lambda: AgentEnv(agent, env="arithmetic", max_turns=4)  # noqa: E731
    [trajectory] = run(factory, ScriptedAgentModel(), arithmetic_tasks(1), infra_retries=0)
    score = trajectory.score
    if status is None:  # the answer reached the wrapped grader
        assert score.status not in (Status.INFRA_ERROR, "agent_error", Status.TIMEOUT), score.reason
    else:
        assert score.status == status, score.reason
    assert reason in score.reason or reason in trajectory.messages[-1].content
    assert len(trajectory.turns) == trajectory.info["env"]["agent_calls"]
    if agent is rewrites_every_call:
        assert chained_turns(trajectory.turns) == [[0], [1], [2]]
    if agent is streams_a_tool_loop:
        assert [m.role for m in trajectory.messages] == ["user", "assistant", "tool", "assistant"]


def sends_half_a_surrogate(context: AgentContext) -> str:
    body = '{"messages": [{"role": "user", "content": "hi \\ud800"}]}'
    refused = httpx.post(
        f"{context.base_url}/chat/completions",
        content=body,
        headers={"authorization": f"Bearer {context.api_key}", "content-type": "application/json"},
    )
    assert refused.status_code == 400
    return ask_once(context)


def sends_too_much(context: AgentContext) -> str:
    return (
        client(context)
        .chat.completions.create(model="any", messages=[{"role": "user", "content": "x" * 5000}])
        .choices[0]
        .message.content
        or ""
    )


@pytest.mark.parametrize("culprit", [sends_half_a_surrogate, sends_too_much], ids=["surrogate", "too-long"])
def test_what_one_agent_sends_fails_no_other_episode_of_its_batch(culprit):
    """Half a surrogate pair reached the model, which cannot encode it, and a conversation longer
    than the model's context failed the model's call: every episode batched with the culprit was
    ``infra_error``."""
    factories = [lambda agent=agent: AgentEnv(agent, env="arithmetic") for agent in (culprit, *[ask_once] * 3)]
    policy = TinyPolicy(TinyConfig(d_model=16, n_layers=1, n_heads=2, max_len=256), seed=0)
    first, *others = run_each(factories, policy, infra_retries=0, lockstep=True)
    assert all(t.score.status != Status.INFRA_ERROR for t in others), [t.score for t in others]
    if culprit is sends_too_much:  # the model's failure on its conversation: masked, never a verdict
        assert first.score.status == Status.INFRA_ERROR and "context" in first.score.reason
    else:
        assert first.score.status != Status.INFRA_ERROR, first.score


# ---- the answer ------------------------------------------------------------------------------------------
def test_a_command_agent_sees_none_of_the_answer_and_one_that_never_asks_earns_nothing(tmp_path):
    seen = tmp_path / "seen"
    script = f'{{ env; cat; cat "$LUDUS_TASK_FILE"; ls -a "$LUDUS_WORKDIR"; }} > {seen}; {ONE_CALL}; echo 1'
    factory = lambda: AgentEnv(  # noqa: E731
        command=["bash", "-c", script], env="sql", env_args={"difficulty": 1}, share_info=["db"]
    )
    env = factory()
    task = env.task_source("eval").get(0)
    env.close()
    run(factory, NothingPolicy(), [task], infra_retries=0)
    text = seen.read_text()
    assert task.prompt in text and str(task.info["db"]) in text  # what it may see, it saw
    assert str(task.answer) not in text and '"answer"' not in text
    # the right answer, printed without a model call: nothing in it is the policy's doing
    tasks = arithmetic_tasks(1)
    [unasked] = run(command_env(f"echo {tasks[0].answer}"), NothingPolicy(), tasks, infra_retries=0)
    assert unasked.score.status == Status.INFRA_ERROR and unasked.score.value == 0.0


def test_look_alike_and_invisible_answers_get_the_wrapped_graders_own_verdict():
    task = arithmetic_tasks(1)[0]
    right = str(task.answer)
    fullwidth = right.translate({ord(d): 0xFF10 + int(d) for d in "0123456789"})
    answers = [
        "",
        " ",
        "0",
        right,
        f" {right}\n",
        fullwidth,
        right[:1] + "\u200b" + right[1:],
        right + "\u200b",
        "\u2212" + right,
        "\u200b",
    ]
    for answer in answers:
        env = AgentEnv(lambda context, answer=answer: (ask_once(context), answer)[1], env="arithmetic")
        env.reset(task)
        through_the_agent = env.step(Message("assistant", "ignored")).score
        env.close()
        direct = make("arithmetic")
        direct.reset(task)
        graded = direct.step(Message("assistant", answer)).score if answer else None
        direct.close()
        if graded is None:  # nothing returned: no answer, whatever the grader would say of ""
            assert through_the_agent.status == Status.NO_ANSWER
        else:
            assert (through_the_agent.status, through_the_agent.value) == (graded.status, graded.value), repr(answer)


# ---- keys ----------------------------------------------------------------------------------------------
def test_an_episodes_key_is_in_no_repr_record_log_or_public_answer(capfd):
    contexts: list[AgentContext] = []

    def look(context: AgentContext) -> str:
        contexts.append(context)
        return ask_once(context)

    factory = lambda: AgentEnv(look, env="arithmetic")  # noqa: E731
    [trajectory] = run(factory, NothingPolicy(), arithmetic_tasks(1))
    [context] = contexts
    gateway = AgentGateway.shared().base_url
    public = [httpx.get(f"{gateway.removesuffix('/v1')}/health").text, httpx.get(f"{gateway}/models").text]
    printed = capfd.readouterr()
    for text in (repr(context), trajectory.to_json(), printed.out, printed.err, *public):
        assert context.api_key not in text


# ---- a loaded machine ----------------------------------------------------------------------------------
def test_the_cpu_limit_decides_the_same_on_a_loaded_machine():
    """Two busy loops, each in a session of its own, share the cores with the agents: the light
    agents' CPU stays below the limit however long they wait for a core; the heavy ones reach it,
    one through a daemon it detached (whose CPU is the agent's: it was uncounted, and ran on), and
    are stopped."""
    burning: list[threading.Thread] = []

    def burn(context: AgentContext) -> str:
        burning.append(threading.current_thread())
        ask_once(context)
        while True:
            pass

    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True) for _ in range(2)]
    try:
        agents = {
            "light callable": {"agent": ask_once},
            "heavy callable": {"agent": burn},
            "light command": {"command": ["bash", str(ASK)]},
            "heavy command": {
                "command": ["bash", "-c", f"{ONE_CALL}; setsid -f sh -c 'while :; do :; done'; exec sleep 613"]
            },
        }
        factories = [
            lambda how=how: AgentEnv(env="arithmetic", cpu_limit_s=2.0, timeout_s=300, **how) for how in agents.values()
        ]
        played = run_each(factories, NothingPolicy(), infra_retries=0)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    statuses = {name: t.score.status for name, t in zip(agents, played, strict=True)}
    assert statuses["light callable"] == statuses["light command"] == Status.NO_ANSWER, statuses
    assert statuses["heavy callable"] == statuses["heavy command"] == Status.TIMEOUT, statuses
    [thread] = burning  # stopped with its episode: it spun on for good
    thread.join(120)  # a bound on a thread that was not stopped, not a speed check
    assert not thread.is_alive()


# ---- slow and idle clients of the gateway ------------------------------------------------------------
def test_idle_and_slow_clients_leave_the_gateway_serving_episodes():
    port = urllib.parse.urlsplit(AgentGateway.shared().base_url).port
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(1000)]
    head = socket.create_connection(("127.0.0.1", port))
    head.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-")
    body = socket.create_connection(("127.0.0.1", port))
    body.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n{")
    try:
        factory = lambda: AgentEnv(ask_once, env="arithmetic")  # noqa: E731
        [trajectory] = run(factory, NothingPolicy(), arithmetic_tasks(1))
        assert trajectory.score.status == Status.NO_ANSWER, trajectory.score.reason
        assert all(closed_by_the_server(conn) for conn in (head, body, idle[0]))
    finally:
        for conn in (*idle, head, body):
            conn.close()
