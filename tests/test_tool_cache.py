"""Caching deterministic tool calls: each distinct call on one state runs once, errors are
never cached, nothing is cached unless the environment names the state, and a GRPO group
through the real rollout engine shares one execution."""

import threading
import time

import pytest

from ludus.core import Score, Status, Task, Tool, ToolCache, ToolCall, ToolEnv, ToolError, tool
from ludus.core.types import Message
from ludus.policies.base import Completion, Policy, SamplingParams
from ludus.rollout.engine import RolloutEngine, requests


def test_concurrent_misses_on_one_key_run_the_tool_once():
    cache = ToolCache()
    runs = []

    def slow() -> tuple[str, bool, bool]:
        runs.append(1)
        time.sleep(0.05)
        return "42", True, True

    results: list[tuple[str, bool, bool]] = []
    threads = [threading.Thread(target=lambda: results.append(cache.run("k", slow))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(runs) == 1
    assert sorted(results) == [("42", True, False)] + [("42", True, True)] * 7
    assert (cache.hits, cache.misses) == (7, 1)


def test_only_storable_outcomes_are_cached_and_the_oldest_entry_goes_first():
    cache = ToolCache(max_entries=2)
    assert cache.run("bad", lambda: ("Error: timed out", False, False)) == ("Error: timed out", False, False)
    assert cache.run("bad", lambda: ("ok now", True, True)) == ("ok now", True, False)
    cache.run("b", lambda: ("B", True, True))
    cache.run("bad", lambda: ("never run", True, True))  # a hit: "bad" is now the most recent
    cache.run("c", lambda: ("Error: over the step budget", False, True))  # a deterministic error; evicts "b"
    assert len(cache) == 2
    assert cache.run("c", lambda: ("never run", True, True)) == ("Error: over the step budget", False, True)
    assert cache.run("b", lambda: ("B again", True, True)) == ("B again", True, False)


def test_tool_errors_reach_the_model_verbatim_and_only_deterministic_ones_are_storable():
    def flaky(x: int) -> str:
        """Fail.

        Args:
            x: how.
        """
        raise ToolError("query timed out after 5 s", deterministic=x == 1)

    assert Tool(flaky).outcome(ToolCall("flaky", {"x": 0})) == ("Error: query timed out after 5 s", False, False)
    assert Tool(flaky).outcome(ToolCall("flaky", {"x": 1})) == ("Error: query timed out after 5 s", False, True)
    assert Tool(flaky)(ToolCall("flaky", {"x": 1})) == ("Error: query timed out after 5 s", False)


def test_keys_ignore_argument_order_and_separate_scopes_and_tools():
    a = ToolCall("q", {"x": 1, "y": [1, 2]})
    assert ToolCache.key("db1", a) == ToolCache.key("db1", ToolCall("q", {"y": [1, 2], "x": 1}, id="other"))
    assert ToolCache.key("db1", a) != ToolCache.key("db2", a)
    assert ToolCache.key("db1", a) != ToolCache.key("db1", ToolCall("r", {"x": 1, "y": [1, 2]}))
    assert ToolCache.key("db1", a) != ToolCache.key("db1", ToolCall("q", {"x": 2, "y": [1, 2]}))
    with pytest.raises(ValueError):
        ToolCache(max_entries=0)


executions: list[tuple[str, int]] = []
_lock = threading.Lock()


class LookupEnv(ToolEnv):
    """Answer the square of the task's number, looked up with a (slow, deterministic) tool."""

    name = "lookup"
    tool_cache = ToolCache()
    scope_by_task = True

    def tool_functions(self):
        return [self.square, self.clock]

    @tool(cacheable=True)
    def square(self, x: int) -> str:
        """Square a number.

        Args:
            x: the number.
        """
        with _lock:
            executions.append((self.task.id, x))
        time.sleep(0.01)
        return str(x * x)

    def clock(self) -> str:
        """The time now (not deterministic, so never cached)."""
        with _lock:
            executions.append((self.task.id, -1))
        return str(time.time())

    def cache_scope(self):
        return self.task.id if self.scope_by_task else None

    def score(self, task: Task, completion: str) -> Score:
        if completion.strip() == str(int(task.prompt) ** 2):
            return Score(1.0, Status.CORRECT)
        return Score.zero(Status.WRONG, "not the square")


class Scripted(Policy):
    """Turn 1: call square(x) and clock(); turn 2: answer with the square tool's reply."""

    def generate(self, conversations, sampling, *, tools=None, generator=None):
        out = []
        for messages in conversations:
            if messages[-1].role == "user":
                x = int(messages[-1].content)
                calls = [ToolCall("square", {"x": x}, id="a"), ToolCall("clock", {}, id="b")]
                out.append(Completion("", [1], [2], [0.0], "tool_calls", calls))
            else:
                answer = next(m.content for m in messages if m.role == "tool" and m.name == "square")
                out.append(Completion(answer, [1], [2], [0.0], "stop"))
        return out


def test_a_group_shares_one_execution_of_each_cacheable_call_through_the_engine():
    executions.clear()
    LookupEnv.tool_cache = ToolCache()
    tasks = [Task(id=f"t{n}", prompt=str(n)) for n in (3, 7)]
    engine = RolloutEngine(Scripted(), LookupEnv, SamplingParams(max_tokens=4))
    trajectories = engine.run(requests(tasks, group_size=8))
    assert all(t.score.status == Status.CORRECT for t in trajectories)
    squares = sorted(e for e in executions if e[1] >= 0)
    assert squares == [("t3", 3), ("t7", 7)]  # once per task, not 8 times
    assert sum(1 for e in executions if e[1] < 0) == 16  # the uncacheable tool ran every time
    assert (LookupEnv.tool_cache.hits, LookupEnv.tool_cache.misses) == (14, 2)


def test_nothing_is_cached_when_the_environment_names_no_state():
    executions.clear()
    env = LookupEnv()
    env.tool_cache = ToolCache()
    env.scope_by_task = False
    for seed in range(3):
        env.reset(Task(id="t", prompt="5"), seed)
        result = env.step(Message("assistant", "", tool_calls=[ToolCall("square", {"x": 5})]))
        assert result.info == {"tool_calls": 1, "tool_errors": 0, "tool_cache_hits": 0}
    assert executions == [("t", 5)] * 3 and len(env.tool_cache) == 0


def test_step_info_counts_calls_errors_and_hits():
    env = LookupEnv()
    env.tool_cache = ToolCache()
    env.reset(Task(id="t", prompt="5"), 0)
    calls = [
        ToolCall("square", {"x": 5}),
        ToolCall("square", {"x": 5}),
        ToolCall("nope", {}),
        ToolCall("square", {"x": "5"}),
    ]
    result = env.step(Message("assistant", "", tool_calls=calls))
    assert result.info == {"tool_calls": 4, "tool_errors": 2, "tool_cache_hits": 1}
    texts = [m.content for m in result.observation.messages]
    assert texts[:2] == ["25", "25"] and texts[2].startswith("Error: no tool named 'nope'")
    assert "must be integer" in texts[3]
