"""`SynthEnv` on the shop example (issue 36, in progress): the contract and the red team pass,
the oracle solves every kind of task, and a state that differs from the goal in any way —
one record too many changed, the right change on the wrong record, a report's wrong answer — is
wrong."""

from __future__ import annotations

from collections import Counter

import pytest

from ludus.certify.contract import check_env
from ludus.certify.redteam import redteam_env
from ludus.core.types import Message, Status, ToolCall
from ludus.envs.synth import EXAMPLES
from ludus.envs.synth.env import SynthEnv


class Shop(SynthEnv):
    name = "synth-shop-test"
    description = "the Corner Shop example API"
    spec_path = EXAMPLES / "shop.yaml"


def play(env: SynthEnv, task, messages: list[Message]):
    env.reset(task, seed=0)
    result = None
    for message in messages:
        result = env.step(message)
        if result.done:
            break
    return result.score


def tasks_of(kind: str, n: int = 3):
    source = Shop().task_source("train")
    found = [t for t in (source.get(i) for i in range(80)) if t.info["goal"]["kind"] == kind]
    assert len(found) >= n
    return found[:n]


def test_the_shop_passes_the_contract_and_the_red_team():
    assert all(r.ok for r in check_env(Shop, name="synth-shop").results)
    report = redteam_env(Shop, name="synth-shop", tasks=8)
    assert all(r.ok for r in report.results), [r for r in report.results if not r.ok]


def test_tasks_cover_every_kind_and_the_splits_do_not_share_a_goal():
    env = Shop()
    train = [env.task_source("train").get(i) for i in range(60)]
    held = [env.task_source("eval").get(i) for i in range(30)]
    assert set(Counter(t.info["goal"]["kind"] for t in train)) == {"create", "update", "delete", "count", "lookup"}
    assert not {t.prompt for t in train} & {t.prompt for t in held}
    assert env.task_source("train").get(7) == Shop().task_source("train").get(7)  # seeded


@pytest.mark.parametrize("kind", ["create", "update", "delete", "count", "lookup"])
def test_the_oracle_solves_each_kind(kind):
    env = Shop()
    for task in tasks_of(kind):
        score = play(env, task, env.reference_actions(task))
        assert (score.status, score.value) == (Status.CORRECT, 1.0), score.reason


def test_a_change_beyond_the_goal_is_wrong_however_right_the_goal_part_is():
    env = Shop()
    task = tasks_of("update", 1)[0]
    oracle = env.reference_actions(task)
    env.reset(task, seed=0)
    other = next(k for k in env.initial["orders"])
    quantity = env.initial["orders"][other]["quantity"] % 100 + 1  # a different valid quantity
    extra = ToolCall("updateOrder", {"orderId": other, "body": {"quantity": quantity}}, id="x")
    calls = [*oracle[0].tool_calls, extra]
    score = play(env, task, [Message("assistant", "", calls), Message("assistant", "Done.")])
    assert score.status == Status.WRONG and "orders record" in score.reason


def test_the_right_change_on_the_wrong_record_and_a_wrong_count_are_wrong():
    env = Shop()
    task = tasks_of("delete", 1)[0]
    env.reset(task, seed=0)
    op, args = task.info["goal"]["calls"][-1]
    resource = next(
        r for r in env.catalog.resources if r.operations.get("delete") and r.operations["delete"].name == op
    )
    wrong = next(k for k in env.initial[resource.name] if k != args[resource.id_param])
    call = ToolCall(op, {resource.id_param: wrong}, id="d")
    score = play(env, task, [Message("assistant", "", [call]), Message("assistant", "Done.")])
    assert score.status == Status.WRONG and "removed" in score.reason
    count = tasks_of("count", 1)[0]
    n = count.info["goal"]["answer"]
    assert play(env, count, [Message("assistant", f"<answer>{n + 1}</answer>")]).status == Status.WRONG
    assert (
        play(env, count, [Message("assistant", f"<answer>{n}</answer>")]).status == Status.CORRECT
    )  # no call needed to be right


def test_the_warm_start_reads_every_turn_of_the_oracle_as_an_agent_plays_it():
    from ludus.core.tools import parse_tool_calls
    from ludus.train.supervised import reference_batch

    env = Shop()
    conversations, replies = reference_batch(env, range(10_000_000, 10_000_040))
    later = [c for c in conversations if any(m.role == "tool" for m in c)]
    assert later and len(later) < len(conversations)  # first turns and turns after tool results
    for reply in replies:
        if "<tool_call>" in reply:
            calls = parse_tool_calls(reply)[1]
            assert calls and {c.name for c in calls} <= {t.name for t in env.tools()}
        else:
            assert reply == "Done." or reply.startswith("<answer>")
    # a change waits for the lookup's result: the turn that changes a record follows a tool reply
    for conversation, reply in zip(conversations, replies, strict=True):
        if any(name in reply for name in ('"updateProduct"', '"deleteProduct"', '"updateOrder"')):
            key_named = "whose" in conversation[0].content
            assert not key_named or conversation[-1].role == "tool"


def test_kinds_chooses_the_goals_drawn_and_is_checked():
    env = Shop(kinds=["count", "lookup"])
    drawn = Counter(
        env.task_source(split).get(i).info["goal"]["kind"] for split in ("train", "eval") for i in range(30)
    )
    assert set(drawn) == {"count", "lookup"}
    assert Shop(kinds=["delete"]).task_source("train").get(0).info["goal"]["kind"] == "delete"
    for wrong in (["count", "guess"], [], "count"):
        with pytest.raises(ValueError, match="kinds names goals among create, update, delete, count, lookup"):
            Shop(kinds=wrong)


def test_resources_chooses_what_the_goals_are_about_and_is_checked():
    everything = [Shop().task_source("train").get(i) for i in range(12)]
    assert Shop(resources=["products", "customers", "orders"]).task_source("train").get(5) == everything[5]
    env = Shop(kinds=["lookup"], resources=["orders"])
    tasks = [env.task_source(split).get(i) for split in ("train", "eval") for i in range(20)]
    assert all(t.info["goal"]["kind"] == "lookup" and "of the order with id" in t.prompt for t in tasks)
    assert {c[0] for t in tasks for c in t.info["goal"]["calls"]} == {"getOrder"}
    for wrong in (["orders", "invoices"], [], "orders", {"orders": 1}, [["orders"]], [None]):
        with pytest.raises(ValueError, match="resources names this API's resources among products, customers, orders"):
            Shop(resources=wrong)
    with pytest.raises(RuntimeError, match="no train task of the kinds count on customers"):
        Shop(kinds=["count"], resources=["customers"]).task_source("train").get(0)


@pytest.mark.parametrize("name", ["synth-shop", "synth-calendar", "synth-ticketing"])
def test_the_examples_are_built_in_and_their_oracle_solves_them(name):
    from ludus.core.registry import make

    env = make(name)
    for i in range(5):
        task = env.task_source("eval").get(i)
        score = play(env, task, env.reference_actions(task))
        assert (score.status, score.value) == (Status.CORRECT, 1.0), (task.prompt, score)
