"""Red team: a policy must not turn an episode it is losing into ``infra_error`` (masked from
training) by what it writes. Scripted policies write fixed hostile text against real built-in
environments through the real rollout engine; every episode must end with a non-infra status.

Each finding (fixed) is a test with a comment saying what it was.
"""

from __future__ import annotations

import math

import pytest

from ludus.core import registry
from ludus.core.tools import parse_tool_calls
from ludus.core.types import Status, Task, ToolCall
from ludus.policies.base import Completion, Policy, SamplingParams
from ludus.policies.tiny import TinyConfig, TinyPolicy
from ludus.rollout.engine import RolloutConfig, RolloutEngine, requests


class Scripted(Policy):
    """Writes ``text`` every turn, its tool calls read by the real hermes parser (as a model's
    reply is), or the given ``calls`` verbatim."""

    def __init__(self, text: str = "", calls: list[ToolCall] | None = None):
        self.text, self.calls = text, calls

    def generate(self, conversations, sampling, *, tools=None, generator=None):
        if self.calls is not None:
            return [Completion(self.text, [1], [2], [-0.5], "tool_calls", list(self.calls)) for _ in conversations]
        text, calls = parse_tool_calls(self.text)
        return [Completion(text, [1], [2], [-0.5], "tool_calls" if calls else "stop", calls) for _ in conversations]


class ScriptedThenTiny(Policy):
    """Writes ``text`` on its first turn; from then on the real tiny model answers, reading (and
    tokenizing) the conversation that first reply left behind."""

    def __init__(self, text: str):
        self.text = text
        self.tiny = TinyPolicy(TinyConfig(max_len=4096))

    def generate(self, conversations, sampling, *, tools=None, generator=None):
        out = []
        for i, conversation in enumerate(conversations):
            if any(m.role == "assistant" for m in conversation):
                out += self.tiny.generate([conversation], sampling, tools=None if tools is None else [tools[i]])
            else:
                text, calls = parse_tool_calls(self.text)
                out.append(Completion(text, [1], [2], [-0.5], "tool_calls" if calls else "stop", calls))
        return out


def first_task(env_name: str) -> Task:
    return registry.make(env_name).task_source("train").get(0)


def run_one(policy: Policy, env_name: str, max_tokens: int = 4):
    engine = RolloutEngine(
        policy, lambda: registry.make(env_name), SamplingParams(max_tokens=max_tokens), RolloutConfig(infra_retries=1)
    )
    (trajectory,) = engine.run(requests([first_task(env_name)]))
    return trajectory


def assert_not_masked(trajectory) -> None:
    score = trajectory.score
    assert not score.is_infra_error, f"masked: {score.reason}"
    assert score.status != Status.INFRA_ERROR and score.value <= 0.0 and score.reason
    assert trajectory.info["attempts"] == 1


# ---- open findings -------------------------------------------------------------------------

# A tool call whose JSON is plain ASCII but holds the escape \ud800 decodes to a lone surrogate.
SURROGATE_CALL = '<tool_call>{{"name": "{name}", "arguments": {{"{arg}": "\\ud800"}}}}</tool_call>'


# found by the red team (session 27, fixed): sql's tool cache hashes the call with str.encode() (ToolCache.key,
# src/ludus/core/tools.py), which raises UnicodeEncodeError on a lone surrogate from a JSON escape;
# SQLEnv.transition raises -> infra_error
@pytest.mark.parametrize("tool", ["describe_table", "run_query"])
def test_sql_tool_call_with_a_lone_surrogate_escape_is_not_masked(tool):
    arg = {"describe_table": "name", "run_query": "sql"}[tool]
    trajectory = run_one(Scripted(SURROGATE_CALL.format(name=tool, arg=arg)), "sql")
    assert_not_masked(trajectory)


# found by the red team (session 27, fixed): a lone surrogate (JSON escape \ud800 in a tool call,
# parse_tool_calls keeps it) stays in the conversation; the backend cannot encode it on the next turn
# (TinyTokenizer.encode / any UTF-8 tokenizer), the engine turns that into PolicyError -> infra_error, retried
# and masked
@pytest.mark.parametrize(("env_name", "arg"), [("synth-shop", "q"), ("synth-ticketing", "q")])
def test_a_lone_surrogate_escape_in_a_tool_call_does_not_break_the_next_turn(env_name, arg):
    env = registry.make(env_name)
    tools = env.reset(first_task(env_name), 0).tools
    name = tools[0].name if tools else "move"
    trajectory = run_one(ScriptedThenTiny(SURROGATE_CALL.format(name=name, arg=arg)), env_name)
    assert_not_masked(trajectory)


# found by the red team (session 27, fixed): rg:advanced_geometry rounds the answer with Decimal.quantize at
# prec 80 (_rounds_to, src/ludus/envs/reasoning_gym/audit_a_m.py); a number of 80+ digits raises
# decimal.InvalidOperation -> infra_error
def test_rg_advanced_geometry_a_100_digit_angle_is_wrong_not_masked():
    trajectory = run_one(Scripted("<answer>" + "9" * 100 + "</answer>"), "rg:advanced_geometry")
    assert_not_masked(trajectory)
    assert trajectory.score.status in (Status.WRONG, Status.FORMAT_ERROR)


# found by the red team (session 27, fixed): Ludus's reasoning-gym scorers call int()/json.loads on the policy's
# digits (audit_a_m.py, audit_n_z.py); past Python's 4300-digit limit that raises ValueError -> infra_error
@pytest.mark.parametrize(
    "env_name",
    [
        "rg:binary_matrix",
        "rg:boxnet",
        "rg:codeio",
        "rg:game_of_life",
        "rg:kakurasu",
        "rg:knight_swap",
        "rg:palindrome_partitioning",
        "rg:puzzle24",
    ],
)
def test_rg_a_5000_digit_answer_is_wrong_not_masked(env_name):
    trajectory = run_one(Scripted("9" * 5000), env_name)
    assert_not_masked(trajectory)


# ---- attacks the environments already withstand (regression tests) --------------------------

HOSTILE_TEXT = {
    "nul": "\x00<answer>\x00</answer><move>\x00</move>",
    "zero-width": "<answer>\u200b1\u200d\ufeff</answer><move>\u200b1</move>",
    "one-megabyte": "<answer>" + "a" * 1_000_000 + "</answer>",
    "nan-inf": "<answer>nan</answer> \\boxed{1e999999999} <move>inf</move>",
    "nested": "<answer>" + "(" * 2000 + "1" + ")" * 2000 + "</answer>",
    "bad-moves": "<move>-1</move><move>99 99</move><move>" + "9" * 5000 + "</move>",
}


@pytest.mark.parametrize("env_name", ["arithmetic", "tictactoe", "nim", "countdown", "math"])
@pytest.mark.parametrize("attack", sorted(HOSTILE_TEXT))
def test_hostile_text_ends_with_a_verdict(env_name, attack):
    assert_not_masked(run_one(Scripted(HOSTILE_TEXT[attack]), env_name))


def _nest(depth: int) -> dict:
    value: object = 1
    for _ in range(depth):
        value = {"a": value}
    return value  # type: ignore[return-value]


SHOP_CALLS = {
    "arguments-a-string": [ToolCall("listProducts", "cheap")],  # type: ignore[arg-type]
    "arguments-a-list": [ToolCall("listProducts", [1, 2])],  # type: ignore[arg-type]
    "arguments-null": [ToolCall("listProducts", None)],  # type: ignore[arg-type]
    "unknown-operation": [ToolCall("drop_database", {})],
    "numbers": [ToolCall("createProduct", {"name": 1e308, "price": math.nan, "stock": 10**400})],
    "nested": [ToolCall("listProducts", {"query": _nest(500)})],
    "ten-thousand-calls": [ToolCall("listProducts", {"query": "x"}, id=str(i)) for i in range(10_000)],
}


@pytest.mark.parametrize("attack", sorted(SHOP_CALLS))
def test_hostile_tool_calls_against_synth_shop_end_with_a_verdict(attack):
    assert_not_masked(run_one(Scripted(calls=SHOP_CALLS[attack]), "synth-shop"))


# found by the red team (session 27, fixed): 5000 nested '[' in a <tool_call> make json.loads raise
# RecursionError, which the tool-call parsers (HermesFormat/MistralFormat/Llama3JsonFormat in
# src/ludus/core/tools.py) do not catch (only ValueError); every backend parses inside generate (tiny.py, hf.py,
# openai.py), so PolicyError -> infra_error
def test_deeply_nested_tool_call_json_is_an_unreadable_call_not_masked():
    text = '<tool_call>{"name": "listProducts", "arguments": ' + "[" * 5000 + "</tool_call>"
    assert_not_masked(run_one(Scripted(text), "synth-shop"))
