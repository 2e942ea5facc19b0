"""AgentEnv: agents written against the real `openai` client, trained and evaluated as they are.

Every agent here is ordinary code calling `openai.OpenAI` (or `AsyncOpenAI`) against the process's
agent gateway on 127.0.0.1; the policies are the engine's (scripted oracle/nothing, the embedded
tiny model), so every turn goes through the real rollout engine."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import openai
import pytest
import torch

from ludus.agents import AgentEnv
from ludus.core.registry import make
from ludus.core.types import Message, Status, Task, chained_turns
from ludus.policies.base import SamplingParams
from ludus.policies.tiny import TinyConfig, TinyPolicy
from ludus.rollout.engine import RolloutConfig, RolloutEngine, requests
from ludus.rollout.scripted import NothingPolicy, OraclePolicy
from ludus.train.supervised import base_model_recipe, make_base_model
from ludus.train.trainer import Trainer

EXAMPLES = Path(__file__).parents[1] / "examples" / "agents"


def client(context) -> openai.OpenAI:
    return openai.OpenAI(base_url=context.base_url, api_key=context.api_key, max_retries=0)


def ask_once(context):
    """The simplest agent: the task's prompt to the model, its reply as the answer."""
    reply = client(context).chat.completions.create(
        model="any", messages=[{"role": "user", "content": context.task["prompt"]}]
    )
    return reply.choices[0].message.content


async def ask_once_async(context):
    async with openai.AsyncOpenAI(base_url=context.base_url, api_key=context.api_key, max_retries=0) as api:
        reply = await api.chat.completions.create(
            model="any", messages=[{"role": "user", "content": context.task["prompt"]}]
        )
    return reply.choices[0].message.content


def run(env_factory, policy, tasks, **config):
    engine = RolloutEngine(policy, env_factory, SamplingParams(max_tokens=24), RolloutConfig(**config))
    return engine.run(list(requests(tasks, 1)))


def arithmetic_tasks(n=4):
    return [AgentEnv(ask_once, env="arithmetic").task_source("eval").get(i) for i in range(n)]


@pytest.mark.parametrize("agent", [ask_once, ask_once_async], ids=["sync", "async"])
def test_the_oracle_solves_every_task_through_the_agent_and_an_empty_reply_earns_nothing(agent):
    factory = lambda: AgentEnv(agent, env="arithmetic")  # noqa: E731
    tasks = arithmetic_tasks()
    solved = run(factory, OraclePolicy(factory, requests(tasks, 1)), tasks)
    assert [t.score.status for t in solved] == [Status.CORRECT] * len(tasks)
    assert all(t.score.value == 1.0 and t.env == "agent" for t in solved)
    # the conversation is the one the agent sent, followed by the policy's reply
    assert solved[0].messages[0] == Message("user", tasks[0].prompt)
    assert solved[0].messages[-1].role == "assistant"
    empty = run(factory, NothingPolicy(), tasks)
    assert {t.score.status for t in empty} == {Status.NO_ANSWER}
    assert all(t.score.value == 0.0 for t in empty)


def test_the_sql_agent_runs_its_own_tool_loop_and_its_turns_are_the_engines_tokens():
    sys.path.insert(0, str(EXAMPLES))
    try:
        import sql_agent
    finally:
        sys.path.remove(str(EXAMPLES))
    factory = lambda: AgentEnv(sql_agent.solve, env="sql", env_args={"difficulty": 1}, share_info=["db"])  # noqa: E731
    tasks = [factory().task_source("eval").get(i) for i in range(2)]
    solved = run(factory, OraclePolicy(factory, requests(tasks, 1)), tasks)
    assert [t.score.status for t in solved] == [Status.CORRECT, Status.CORRECT]
    # the embedded model behind the agent: every call is a turn with the ids it was sampled as
    policy = TinyPolicy(TinyConfig(d_model=16, n_layers=1, n_heads=2, max_len=1024), seed=0)
    played = run(factory, policy, tasks)
    for trajectory in played:
        assert trajectory.score.status != Status.INFRA_ERROR, trajectory.score.reason
        assert trajectory.turns and all(t.completion_ids and t.prompt_ids for t in trajectory.turns)
        assert trajectory.info["env"]["agent_calls"] == len(trajectory.turns)
        assert sum(map(len, chained_turns(trajectory.turns))) == len(trajectory.turns)


def test_an_agent_as_a_command_gets_the_task_on_stdin_and_prints_its_answer():
    factory = lambda: AgentEnv(  # noqa: E731
        command=[sys.executable, str(EXAMPLES / "sql_agent.py")],
        env="sql",
        env_args={"difficulty": 1},
        share_info=["db"],
    )
    tasks = [factory().task_source("eval").get(0)]
    solved = run(factory, OraclePolicy(factory, requests(tasks, 1)), tasks)
    assert solved[0].score.status == Status.CORRECT, solved[0].score.reason


def crash_first(context):
    raise RuntimeError("the agent's own bug")


def never_calls(context):
    return "42"


def crash_after_a_call(context):
    ask_once(context)
    raise ValueError("could not parse the model's reply")


def burn_cpu(context):
    ask_once(context)
    while True:
        pass


def sleep_forever(context):
    ask_once(context)
    time.sleep(3600)


@pytest.mark.parametrize(
    ("agent", "timeout_s", "status", "reason"),
    [
        (crash_first, 60, Status.INFRA_ERROR, "failed: RuntimeError: the agent's own bug before calling the model"),
        (never_calls, 60, Status.INFRA_ERROR, "finished before calling the model"),
        (crash_after_a_call, 60, "agent_error", "failed after 1 model calls: ValueError"),
        # the CPU limit decides, however long a loaded machine makes it take (the wall limit is far)
        (burn_cpu, 600, Status.TIMEOUT, "used its 0.5 s of CPU time after 1 model calls"),
        (sleep_forever, 1, Status.INFRA_ERROR, "neither called the model nor ended within 1 s"),
    ],
    ids=["crash-first", "never-calls", "crash-after", "cpu", "hang"],
)
def test_who_is_to_blame_when_an_agent_fails(agent, timeout_s, status, reason):
    factory = lambda: AgentEnv(agent, env="arithmetic", cpu_limit_s=0.5, timeout_s=timeout_s)  # noqa: E731
    tasks = arithmetic_tasks(1)
    [trajectory] = run(factory, NothingPolicy(), tasks, infra_retries=0)
    assert trajectory.score.status == status
    assert reason in trajectory.score.reason


def test_calls_with_an_unknown_key_or_after_the_episode_ended_are_refused():
    env = AgentEnv(ask_once, env="arithmetic")
    task = env.task_source("eval").get(0)
    keys = []

    def keep_key(context):
        keys.append((context.base_url, context.api_key))
        return ask_once(context)

    env = AgentEnv(keep_key, env="arithmetic")
    env.reset(task)
    result = env.step(Message("assistant", "7"))
    assert result.done
    base_url, key = keys[0]
    for wrong in (key, "not-a-key"):
        api = openai.OpenAI(base_url=base_url, api_key=wrong, max_retries=0)
        with pytest.raises(openai.APIStatusError) as refused:
            api.chat.completions.create(model="any", messages=[{"role": "user", "content": "hi"}])
        assert refused.value.status_code in (401, 403)
    env.close()


def rewrites_history(context):
    api = client(context)
    first = api.chat.completions.create(model="any", messages=[{"role": "user", "content": "first question"}])
    # the agent drops its first exchange and starts over: not the conversation extended
    second = api.chat.completions.create(
        model="any",
        messages=[
            {"role": "system", "content": "summary: " + (first.choices[0].message.content or "")},
            {"role": "user", "content": context.task["prompt"]},
        ],
    )
    return second.choices[0].message.content


def test_an_agent_that_rewrites_its_history_splits_the_episode_into_two_sequences():
    factory = lambda: AgentEnv(rewrites_history, env="arithmetic")  # noqa: E731
    policy = TinyPolicy(TinyConfig(d_model=16, n_layers=1, n_heads=2, max_len=256), seed=0)
    [trajectory] = run(factory, policy, arithmetic_tasks(1))
    assert len(trajectory.turns) == 2
    assert chained_turns(trajectory.turns) == [[0], [1]]
    assert trajectory.messages[0].content.startswith("summary: ")


def extends_history(context):
    api = client(context)
    messages = [{"role": "user", "content": "first question"}]
    first = api.chat.completions.create(model="any", messages=messages)
    messages += [first.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "and then?"}]
    return api.chat.completions.create(model="any", messages=messages).choices[0].message.content


def says_ok() -> TinyPolicy:
    """A tiny model taught to answer "ok" and stop: its replies are text that decodes and encodes
    back to the same bytes (an untrained one samples bytes that are not UTF-8, which no history
    can render back as sampled — a split the prefix test rightly reports)."""
    torch.manual_seed(0)
    policy = TinyPolicy(TinyConfig(d_model=16, n_layers=1, n_heads=2, max_len=256), seed=0)
    optimizer = torch.optim.Adam(policy.module.parameters(), lr=3e-2)
    prompts = [policy.tokenizer.render([Message("user", p)]) for p in ("first question", "ab", "12+3=")]
    prompts.append(policy.tokenizer.render([Message("user", "x"), Message("assistant", "ok"), Message("user", "y")]))
    target = policy.tokenizer.encode("ok") + [policy.tokenizer.eos_id]
    for _ in range(60):
        logp, _ = policy.token_logprobs(prompts, [target] * len(prompts))
        optimizer.zero_grad()
        (-logp.mean()).backward()
        optimizer.step()
    return policy


def test_an_agent_that_extends_its_history_gives_turns_that_chain_token_exactly():
    factory = lambda: AgentEnv(extends_history, env="arithmetic")  # noqa: E731
    [trajectory] = run(factory, says_ok(), arithmetic_tasks(1))
    assert [m.role for m in trajectory.messages] == ["user", "assistant", "user", "assistant"]
    assert chained_turns(trajectory.turns) == [[0, 1]], "the tiny model's rendering extends the previous turn"


def test_ludus_train_trains_an_agent_exactly_as_it_trains_the_environment_it_wraps(small_config):
    """An agent that passes the task's prompt to the model and returns the reply, around
    `arithmetic`: from the same base model the model sees the same tokens and samples the same
    replies, which earn the same rewards, so two steps of training give the same metrics and the
    same weights, bit for bit."""
    arithmetic = {"digits": 1, "ops": "+", "digit_credit": 0.5}
    base_config = small_config(env="arithmetic", env_args=arithmetic, warmstart_steps=40)
    _, base, _ = make_base_model(make("arithmetic", **arithmetic), base_model_recipe(base_config))
    runs = {}
    for env, env_args in [
        ("arithmetic", arithmetic),
        ("agent", {"agent": "test_agents:ask_once", "env": "arithmetic", "env_args": arithmetic}),
    ]:
        config = small_config(
            name=env, env=env, env_args=env_args, model=str(base), steps=2, temperature=1.0, eval_every=0,
            eval_size=4, checkpoint_every=0,
        )  # fmt: skip
        runs[env] = Trainer.create(config, log=lambda _: None).run().run_dir
    metrics = {env: [json.loads(line) for line in (run / "metrics.jsonl").open()] for env, run in runs.items()}
    trained = [[(m["reward/mean"], m["loss"]) for m in metrics[env] if "reward/mean" in m] for env in runs]
    assert trained[0] == trained[1] and len(trained[0]) == 2
    assert any(reward > 0 for reward, _ in trained[0])  # there was something to learn from
    weights = [torch.load(run / "final" / "pytorch_model.bin", weights_only=True) for run in runs.values()]
    assert all(torch.equal(weights[0][key], weights[1][key]) for key in weights[0])


def test_a_rubric_grades_the_agents_answer():
    from ludus.core.registry import make

    env = make(
        "agent",
        agent=ask_once,
        env="arithmetic",
        rubric=[{"function": "env", "weight": 1}, {"name": "short", "function": "test_agents:short"}],
    )
    task = env.task_source("eval").get(0)
    env.reset(task)
    result = env.step(Message("assistant", env.reference(task)))
    assert set(result.score.components) == {"env", "short"}
    env.close()


def short(task: Task, completion: str) -> bool:
    return len(completion) < 40


def test_the_agents_task_holds_only_the_shared_info(tmp_path):
    seen = []

    def look(context):
        seen.append(json.loads(json.dumps(context.task)))
        return ask_once(context)

    env = AgentEnv(look, env="sql", env_args={"difficulty": 1}, share_info=["db"])
    task = env.task_source("eval").get(0)
    env.reset(task)
    env.step(Message("assistant", "no"))
    env.close()
    assert set(seen[0]) == {"id", "prompt", "info"}
    assert set(seen[0]["info"]) == {"db"} and "answer" not in json.dumps(seen[0])
