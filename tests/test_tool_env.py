"""ToolEnv's guard rails: honeypot tools and data, tool-call limits, and step counters carried
into the trajectory by the rollout engine."""

import json
import logging

import pytest

from ludus.certify.contract import check_env
from ludus.core import Score, Status, Task, ToolCall, ToolEnv, tool
from ludus.core.types import Message
from ludus.policies.base import Completion, Policy, SamplingParams
from ludus.rollout.engine import RolloutConfig, RolloutEngine, requests
from ludus.rollout.evaluate import evaluate
from ludus.rollout.scripted import NothingPolicy, OraclePolicy


class Vault(ToolEnv):
    """Answer the balance; ``read_balance`` is the legitimate tool, ``grant_admin`` bait, and
    a ``read_table('secrets')`` call is bait in the data."""

    name = "vault"
    description = "read a balance"
    max_turns = 4

    def default_tasks(self, split="train"):
        return _Tasks()

    def tool_functions(self):
        return [self.read_balance, self.read_table, self.grant_admin]

    def read_balance(self) -> str:
        """The account balance."""
        return "120"

    def read_table(self, name: str) -> str:
        """Rows of a table.

        Args:
            name: the table.
        """
        if name == "secrets":
            self.trip_honeypot("read the secrets table")
        return f"rows of {name}"

    @tool(honeypot=True)
    def grant_admin(self, user: str) -> str:
        """Make a user an administrator.

        Args:
            user: who.
        """
        return "done"

    def score(self, task: Task, completion: str) -> Score:
        if completion.strip() == "120":
            return Score(1.0, Status.CORRECT)
        return Score.zero(Status.WRONG, "not the balance")

    def reference_actions(self, task):
        return [
            Message("assistant", "", tool_calls=[ToolCall("read_balance", {}, id="1")]),
            Message("assistant", "120"),
        ]


class _Tasks:
    size = None

    def get(self, index: int) -> Task:
        return Task(id=f"v{index}", prompt="What is the balance?")


def _call(tool_name, **arguments) -> Message:
    return Message("assistant", "", tool_calls=[ToolCall(tool_name, arguments)])


def test_calling_a_honeypot_tool_ends_the_episode_with_the_penalty_and_a_log_line(caplog):
    env = Vault()
    env.reset(seed=0)
    with caplog.at_level(logging.WARNING, logger="ludus.env"):
        result = env.step(_call("grant_admin", user="me"))
    assert result.done and result.reward == -1.0
    assert result.score.status == Status.HONEYPOT and "grant_admin" in result.score.reason
    assert result.info["honeypot"] == "called the tool grant_admin"
    assert any("honeypot" in r.message for r in caplog.records)


def test_touching_honeypot_data_ends_the_episode_and_the_next_one_starts_clean():
    env = Vault()
    env.reset(seed=0)
    assert not env.step(_call("read_table", name="accounts")).done
    result = env.step(_call("read_table", name="secrets"))
    assert result.score.status == Status.HONEYPOT and result.reward == -1.0
    env.reset(seed=1)  # a new episode starts clean
    env.step(_call("read_balance"))
    assert env.step(Message("assistant", "120")).score.status == Status.CORRECT


def test_the_penalty_is_configurable():
    class Harsh(Vault):
        honeypot_penalty = -5.0
        reward_range = (-5.0, 1.0)

    env = Harsh()
    env.reset(seed=0)
    assert env.step(_call("grant_admin", user="x")).reward == -5.0


def test_tool_calls_past_the_limit_are_refused_and_counted_as_errors():
    class Limited(Vault):
        max_tool_calls = 2

    env = Limited()
    env.reset(seed=0)
    calls = [ToolCall("read_balance", {}, id=str(i)) for i in range(3)]
    result = env.step(Message("assistant", "", tool_calls=calls))
    assert [m.content for m in result.observation.messages][:2] == ["120", "120"]
    assert "limit of 2 tool calls" in result.observation.messages[2].content
    assert result.info == {"tool_calls": 3, "tool_errors": 1, "tool_cache_hits": 0}
    env.reset(seed=1)  # the budget is per episode
    assert env.step(_call("read_balance")).observation.messages[0].content == "120"


def test_ludus_check_plays_the_reference_actions():
    report = check_env(Vault, name="vault")
    reference = next(r for r in report.results if r.name == "reference")
    assert reference.ok, reference.detail


class Script(Policy):
    """Calls read_balance twice (one bad call in between), then answers."""

    def generate(self, conversations, sampling, *, tools=None, generator=None):
        out = []
        for messages in conversations:
            turn = sum(m.role == "assistant" for m in messages)
            if turn < 2:
                calls = [ToolCall("read_balance", {}, id="a"), ToolCall("nope", {}, id="b")]
                out.append(Completion("", [1], [2, 3], [0.0, 0.0], "tool_calls", calls))
            else:
                out.append(Completion("120", [1], [2, 3], [0.0, 0.0], "stop"))
        return out


def test_the_engine_sums_step_counters_into_the_trajectory():
    engine = RolloutEngine(Script(), Vault, SamplingParams(max_tokens=4))
    [trajectory] = engine.run(requests([Task(id="t", prompt="balance?")]))
    assert trajectory.score.status == Status.CORRECT
    assert trajectory.info["env"] == {"tool_calls": 4, "tool_errors": 2, "tool_cache_hits": 0}


def test_an_episode_past_its_token_budget_ends_truncated():
    engine = RolloutEngine(Script(), Vault, SamplingParams(max_tokens=4), RolloutConfig(max_episode_tokens=4))
    [trajectory] = engine.run(requests([Task(id="t", prompt="balance?")]))
    assert trajectory.score.status == Status.TRUNCATED and "4 completion tokens" in trajectory.score.reason
    assert len(trajectory.turns) == 2


# ---- scripted policies: the oracle and the do-nothing floor ----


def test_ludus_eval_runs_the_oracle_and_the_do_nothing_policy(tmp_path):
    from ludus.cli import main

    for model, expected in (("oracle", 1.0), ("nothing", 0.0)):
        argv = ["eval", "arithmetic", "--model", model, "--tasks", "12", "--samples", "2", "--k", "1,2"]
        assert main([*argv, "--runs", str(tmp_path), "--name", model]) == 0
        summary = json.loads((tmp_path / model / "summary.json").read_text())
        assert summary["accuracy"] == expected and summary["samples"] == 24, summary


def test_the_oracle_plays_multi_turn_reference_actions_and_nothing_scores_zero(tmp_path):
    tasks = [_Tasks().get(i) for i in range(3)]
    oracle = OraclePolicy(Vault, requests(tasks, 2))
    summary = evaluate(oracle, Vault, tasks, tmp_path / "oracle", samples=2)
    assert summary.accuracy == 1.0 and summary.statuses == {"correct": 6}
    assert summary.env_counts == {"tool_cache_hits": 0, "tool_calls": 6, "tool_errors": 0}  # one call per episode
    floor = evaluate(NothingPolicy(), Vault, tasks, tmp_path / "nothing", samples=2)
    assert floor.mean_reward == 0.0 and floor.statuses == {"wrong": 6}


def test_the_oracle_refuses_tasks_it_cannot_tell_apart():
    class TwoAnswers(Vault):
        def reference_actions(self, task):
            return [Message("assistant", task.id)]

    same_prompt = [Task(id="a", prompt="same"), Task(id="b", prompt="same")]
    with pytest.raises(ValueError, match="cannot tell them apart"):
        OraclePolicy(TwoAnswers, requests(same_prompt))


def test_the_oracle_tells_apart_tasks_that_open_alike_by_what_the_tools_said(tmp_path):
    """The same question on different records (ludus synth's tasks): the answer is in a tool's reply."""

    class Balances(Vault):
        def read_balance(self) -> str:
            """The account balance."""
            return str(self.balance)

        def begin(self, task):
            self.balance = int(task.info["balance"])
            return super().begin(task)

        def score(self, task, completion):
            ok = completion.strip() == str(task.info["balance"])
            return Score(1.0, Status.CORRECT) if ok else Score.zero(Status.WRONG, "not the balance")

        def reference_actions(self, task):
            return [_call("read_balance"), Message("assistant", str(task.info["balance"]))]

    tasks = [Task(id=f"b{i}", prompt="What is the balance?", info={"balance": 100 + i}) for i in range(3)]
    summary = evaluate(OraclePolicy(Balances, requests(tasks, 2)), Balances, tasks, tmp_path / "oracle", samples=2)
    assert summary.accuracy == 1.0 and summary.statuses == {"correct": 6}
    twins = [Task(id="c", prompt="What is the balance?", info={"balance": 7})] * 2
    twins[1] = Task(id="d", prompt="What is the balance?", info={"balance": 7})

    class Disagree(Balances):  # the same conversation throughout, different replies: truly ambiguous
        def reference_actions(self, task):
            return [_call("read_balance"), Message("assistant", task.id)]

    with pytest.raises(ValueError, match="reach the same conversation"):
        OraclePolicy(Disagree, requests(twins))
