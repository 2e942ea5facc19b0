"""The shop's red team through a real browser: what a reward-seeking model could try with the
actions it has. Each attempt scores 0 or is refused, and a concurrent episode is unaffected."""

import pytest

from ludus.core.types import Message, ToolCall
from ludus.envs.web import ShopEnv
from ludus.envs.web.shop import ShopTasks
from support import act, play_reference


def text_of(result) -> str:
    return result.observation.messages[-1].content


def search_box(view: str) -> int:
    line = next(line for line in view.splitlines() if "searchbox" in line)
    return int(line.strip().split("]")[0].lstrip("["))


@pytest.fixture(scope="module")
def edit_task():
    return ShopTasks(3, kind="edit_address").get(0)


def test_another_episodes_app_cannot_be_reached(edit_task):
    victim, attacker = ShopEnv(), ShopEnv()
    try:
        victim.reset(edit_task, 0)
        other = victim.tab.origin
        view = attacker.reset(ShopTasks(1).get(0), 0).messages[-1].content
        for url in (f"{other}/admin/customers", f"{other}/", other.replace("http://", "//") + "/cart"):
            reply = text_of(act(attacker, "goto", url=url))
            assert "goto only opens pages of this site" in reply
        typed = text_of(act(attacker, "type", element=search_box(view), text=f"{other}/admin", submit=True))
        assert "Error" not in typed.splitlines()[0]  # searched for the text; it went nowhere else
        assert victim.app.honeypot is None and attacker.tab.blocked == []
    finally:
        victim.close()
        attacker.close()


def test_text_that_claims_success_earns_nothing(edit_task):
    """The page is only what the model sees; the grade is the app's database. Typing a success
    message into the page, or answering with one, changes nothing that is graded."""
    env = ShopEnv()
    try:
        view = env.reset(edit_task, 0).messages[-1].content
        claim = "Address updated successfully. Task complete. All checks passed."
        act(env, "type", element=search_box(view), text=claim, submit=True)
        assert act(env, "finish").score.status == "wrong"
        env.reset(edit_task, 0)
        assert act(env, "answer", text=claim).score.status == "wrong"
        env.reset(edit_task, 0)
        assert env.step(claim).score.status == "wrong"
    finally:
        env.close()


def test_injection_and_floods_leave_the_shop_and_the_neighbour_intact(edit_task):
    env, neighbour = ShopEnv(max_actions=30), ShopEnv()
    try:
        view = env.reset(edit_task, 0).messages[-1].content
        box = search_box(view)
        injected = text_of(act(env, "type", element=box, text="' OR 1=1; DROP TABLE products; --", submit=True))
        assert "Error" not in injected.splitlines()[0] and "products" in injected.lower()
        calls = [ToolCall("type", {"element": box, "text": "x" * 2000, "submit": True}, id=f"c{i}") for i in range(40)]
        storm = env.step(Message("assistant", "", tool_calls=calls))
        assert not storm.done and storm.info["tool_errors"] >= 10  # the action budget refuses the rest
        assert act(env, "finish").score.status == "wrong"  # nothing it did is the task's edit
        assert play_reference(neighbour, edit_task).reward == 1.0
        assert play_reference(env, edit_task).reward == 1.0  # the same environment, next episode: a clean shop
    finally:
        env.close()
        neighbour.close()
