"""The bfcl-multi-turn environment: real episodes on BFCL's simulators, graded like BFCL's
multi_turn_checker (proved by running both on the oracle and near misses of every item)."""

from __future__ import annotations

import copy
import functools
import json
import random
import sys
from collections import Counter
from typing import Any

import pytest

from support import package_without_dependencies

package_without_dependencies("bfcl-eval==2026.3.23", "bfcl_eval")

from ludus.certify.contract import check_env, format_report  # noqa: E402
from ludus.certify.redteam import format_redteam, redteam_env  # noqa: E402
from ludus.core.types import Message, ToolCall  # noqa: E402
from ludus.envs.bfcl import BFCLMultiTurnEnv  # noqa: E402
from ludus.envs.bfcl.data import FUNC_DOC_FILES, MULTI_TURN, load_multi_turn  # noqa: E402
from ludus.envs.bfcl.multi_turn import MAX_STEPS_PER_TURN, parse_call  # noqa: E402

Turns = list[list[list[ToolCall]]]  # per user turn, per step, the calls of one assistant message

# a call per class that changes its state (when it succeeds) and one that only reads it
STATE_CHANGING = {
    "GorillaFileSystem": ("touch", {"file_name": "ludus_extra.txt"}),
    "MessageAPI": ("add_contact", {"user_name": "ludus_extra"}),
    "TwitterAPI": ("post_tweet", {"content": "ludus extra"}),
    "TicketAPI": ("create_ticket", {"title": "ludus extra"}),
    "TradingBot": ("add_to_watchlist", {"stock": "ZZZZ"}),
    "VehicleControlAPI": ("lockDoors", {"unlock": True, "door": ["driver"]}),
}
READ_ONLY = {
    "GorillaFileSystem": ("pwd", {}),
    "MathAPI": ("add", {"a": 1, "b": 2}),
    "MessageAPI": ("list_users", {}),
    "TwitterAPI": ("posting_get_login_status", {}),
    "TicketAPI": ("ticket_get_login_status", {}),
    "TradingBot": ("get_watchlist", {}),
    "TravelAPI": ("list_all_airports", {}),
    "VehicleControlAPI": ("check_tire_pressure", {}),
}
# a function of each class, called where the class is not involved (BFCL: NameError)
FOREIGN = {
    "GorillaFileSystem": ("mkdir", {"dir_name": "x"}),
    "TradingBot": ("get_stock_info", {"symbol": "AAPL"}),
    "MathAPI": ("add", {"a": 1, "b": 2}),
}


# ---- BFCL's checker, on the same calls -----------------------------------------------------------
_runs = 0


def bfcl_verdict(task, turns: Turns) -> bool:
    """BFCL's multi_turn_checker on ``turns`` decoded as its function-calling handlers decode them
    (``name(k=repr(v),...)`` per call, one list per step with calls). Its instances live in the
    module's globals, named after the model: a fresh name per run, removed afterwards."""
    global _runs
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    _runs += 1
    model = f"ludus{_runs}"
    decoded = [
        [[f"{c.name}({','.join(f'{k}={v!r}' for k, v in c.arguments.items())})" for c in step] for step in turn if step]
        for turn in turns
    ]
    entry = {
        "id": task.id,
        "initial_config": copy.deepcopy(task.info["initial_config"]),
        "involved_classes": task.info["involved_classes"],
    }
    try:
        return bool(multi_turn_checker(decoded, task.answer, entry, task.info["category"], model)["valid"])
    finally:
        for name in [n for n in vars(multi_turn_utils) if n.startswith(model + "_")]:
            delattr(multi_turn_utils, name)


# ---- our environment, in real episodes -----------------------------------------------------------
def play(env: BFCLMultiTurnEnv, task, turns: Turns):
    """One episode: each turn's steps as assistant messages with calls, then a reply without."""
    env.reset(task)
    result = None
    for t, turn in enumerate(turns):
        for s, step in enumerate(turn):
            calls = [ToolCall(c.name, c.arguments, id=f"c{t}_{s}_{i}") for i, c in enumerate(step)]
            result = env.step(Message("assistant", "", tool_calls=calls))
            assert not result.done, result.score
        result = env.step(Message("assistant", "Done."))
        if result.done:
            break
    assert result is not None and result.done
    return result


def oracle_turns(env: BFCLMultiTurnEnv, task) -> Turns:
    """The reference actions as turns: messages with calls are steps, one without closes the turn."""
    turns: Turns = []
    steps: list[list[ToolCall]] = []
    for message in env.reference_actions(task):
        if message.tool_calls:
            steps.append([ToolCall(c.name, c.arguments) for c in message.tool_calls])
        else:
            turns.append(steps)
            steps = []
    assert len(turns) == len(task.answer)
    return turns


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "_x"
    if isinstance(value, list):
        return value[:-1] if value else ["x"]
    if isinstance(value, dict):
        return {}
    return "x"


def variants(task, oracle: Turns, rng: random.Random) -> dict[str, Turns]:
    """The oracle and its near misses, by name (a near miss that does not apply is left out)."""
    out: dict[str, Turns] = {"oracle": oracle, "no calls at all": [[] for _ in oracle]}
    with_calls = [t for t, turn in enumerate(oracle) if turn]
    if not with_calls:
        return out
    classes = task.info["involved_classes"]

    def edited(turn: int, calls: list[ToolCall]) -> Turns:
        copied = copy.deepcopy(oracle)
        copied[turn] = [calls] if calls else []
        return copied

    t = rng.choice(with_calls)
    calls = oracle[t][0]
    out["a call dropped"] = edited(t, [c for i, c in enumerate(calls) if i != rng.randrange(len(calls))])
    with_args = [(t, i) for t in with_calls for i, c in enumerate(oracle[t][0]) if c.arguments]
    if with_args:
        t, i = rng.choice(with_args)
        changed = copy.deepcopy(oracle[t][0])
        key = rng.choice(sorted(changed[i].arguments))
        changed[i].arguments[key] = _changed(changed[i].arguments[key])
        out["one argument changed"] = edited(t, changed)
    first = with_calls[0]
    mutators = [STATE_CHANGING[c] for c in classes if c in STATE_CHANGING]
    if mutators:
        name, args = mutators[0]
        out["an extra state-changing call"] = edited(first, [*oracle[first][0], ToolCall(name, dict(args))])
    name, args = READ_ONLY[classes[0]]
    out["an extra read-only call"] = edited(first, [*oracle[first][0], ToolCall(name, dict(args))])
    several = [t for t in with_calls if len({repr(c) for c in oracle[t][0]}) > 1]
    if several:
        t = rng.choice(several)
        shuffled = rng.sample(oracle[t][0], len(oracle[t][0]))
        if shuffled == oracle[t][0]:
            shuffled.reverse()
        out["the calls of one turn shuffled"] = edited(t, shuffled)
    if len(oracle) > 1:
        out["stopped after the first turn"] = [oracle[0]] + [[] for _ in oracle[1:]]
    held_back = task.info["missed_functions"]
    if held_back:
        # a held-back function called in the first turn, with the arguments the ground truth uses later
        turn, functions = next(iter(held_back.items()))
        name = functions[0]["name"]
        later = [parse_call(c) for turn_calls in task.answer for c in turn_calls if parse_call(c)[0] == name]
        arguments = _keywords(task, later[0]) if later else {}
        out["a held-back function called early"] = edited(first, [*oracle[first][0], ToolCall(name, arguments)])
    foreign = [FOREIGN[c] for c in FOREIGN if c not in classes]
    if foreign:
        name, args = foreign[0]
        out["a function of a class not involved"] = edited(first, [*oracle[first][0], ToolCall(name, dict(args))])
    return out


def _keywords(task, parsed) -> dict[str, Any]:
    from ludus.envs.bfcl.multi_turn import keyword_arguments

    name, args, kwargs = parsed
    owner = [c for c in task.info["involved_classes"] if any(f["name"] == name for f in _docs(c))][-1]
    return keyword_arguments(owner, name, args, kwargs)


def _docs(class_name: str) -> list[dict[str, Any]]:
    from ludus.envs.bfcl.data import data_folder

    path = data_folder() / "multi_turn_func_doc" / FUNC_DOC_FILES[class_name]
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@functools.cache
def shared_env() -> BFCLMultiTurnEnv:
    return BFCLMultiTurnEnv(category="all_multi_turn")


def compare_with_bfcl(tasks, sample: int | None = None):
    """Both verdicts for every variant of every task (or a seeded sample of tasks): the counts by
    variant and the differences."""
    env = shared_env()
    if sample is not None:
        tasks = random.Random(0).sample(tasks, sample)
    counts: Counter[tuple[str, bool]] = Counter()
    differences = []
    for task in tasks:
        rng = random.Random(task.id)
        for name, turns in variants(task, oracle_turns(env, task), rng).items():
            ours = play(env, task, turns).reward == 1.0
            theirs = bfcl_verdict(task, turns)
            counts[(name, ours)] += 1
            if ours != theirs:
                differences.append((task.id, name, ours, theirs))
    return counts, differences


def all_items():
    return [t for category in MULTI_TURN for t in load_multi_turn(category)]


def test_every_item_agrees_with_bfcl_multi_turn_checker():
    """Every item of the four categories, the oracle and nine kinds of near miss, graded by our env in
    real episodes and by BFCL's checker: the same verdict everywhere."""
    tasks = all_items()
    assert len(shared_env().items) == len(tasks) == 800
    counts, differences = compare_with_bfcl(tasks)
    compared = sum(counts.values())
    print(f"\n{compared} verdicts compared, {len(differences)} differ")
    for (name, ours), n in sorted(counts.items()):
        print(f"  {name}: {'pass' if ours else 'fail'} x{n}")
    assert compared > 7000
    assert counts[("oracle", True)] == 800 and counts[("oracle", False)] == 0
    assert counts[("no calls at all", False)] == 800
    # the near misses are not all trivially failed: the comparison has both verdicts to get right
    assert counts[("one argument changed", False)] > 500 and counts[("an extra read-only call", True)] > 500
    assert differences == []


def test_a_held_back_function_runs_as_in_bfcl():
    """multi_turn_miss_func_49's ground truth calls ``tail`` in turn 1, although ``tail`` is documented
    to the model only from turn 3: BFCL's executor runs any public method of the involved instances,
    so its own ground truth passes, and ours does too (the function exists; it is not yet described)."""
    (task,) = [t for t in load_multi_turn("multi_turn_miss_func") if t.id == "multi_turn_miss_func_49"]
    env = shared_env()
    oracle = oracle_turns(env, task)
    assert "tail" not in {f["name"] for f in task.info["functions"]}
    assert any(c.name == "tail" for step in oracle[1] for c in step)
    assert bfcl_verdict(task, oracle)
    assert play(env, task, oracle).reward == 1.0


def test_tool_messages_are_bfcls_execution_results():
    """The oracle's tool messages are, string for string, what BFCL's executor returns for the same calls."""
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    env = shared_env()
    compared = 0
    for task in random.Random(1).sample(env.items, 60):
        env.reset(task)
        ours, calls = [], []
        for action in env.reference_actions(task):
            result = env.step(action)
            ours += [m.content for m in result.observation.messages if m.role == "tool"]
            calls += [f"{c.name}({','.join(f'{k}={v!r}' for k, v in c.arguments.items())})" for c in action.tool_calls]
        model = f"ludus_exec_{task.id}"
        try:
            theirs, _ = multi_turn_utils.execute_multi_turn_func_call(
                calls,
                copy.deepcopy(task.info["initial_config"]),
                task.info["involved_classes"],
                model,
                task.id,
                long_context=task.info["long_context"],
            )
        finally:
            for name in [n for n in vars(multi_turn_utils) if n.startswith(model + "_")]:
                delattr(multi_turn_utils, name)
        assert ours == theirs, task.id
        compared += len(ours)
    assert compared > 100


def test_check_and_redteam_pass():
    """``ludus check bfcl-multi-turn --redteam``, through the same functions the command calls."""
    factory = functools.partial(BFCLMultiTurnEnv, category="all_multi_turn")
    report = check_env(factory, name="bfcl-multi-turn")
    assert report.ok, format_report(report)
    card = redteam_env(factory, name="bfcl-multi-turn", tasks=8)
    text = format_redteam(card)
    assert card.ok, text
    assert "oracle: the reference actions solve 8 of 8" in text and "floor:" in text


def test_miss_func_reveals_functions_at_their_turn():
    env = shared_env()
    task = next(t for t in env.items if t.info["missed_functions"])
    (turn, functions), *_ = task.info["missed_functions"].items()
    names = {f["name"] for f in functions}
    obs = env.reset(task)
    assert not names & {t.name for t in obs.tools}
    result = None
    for _ in range(int(turn)):
        result = env.step(Message("assistant", "I cannot do that."))
    assert result is not None and not result.done
    (message,) = result.observation.messages
    assert message.role == "user" and "I have updated some more functions" in message.content
    assert names <= {t.name for t in result.observation.tools} and names <= {t.name for t in env.tools()}
    assert all(name in message.content for name in names)  # also in the text: the engine keeps the first tools


HOSTILE = [
    ToolCall("no_such_function", {}),
    ToolCall("__class__", {}),
    ToolCall("__init__", {}),
    ToolCall("__dict__", {}),
    ToolCall("_load_scenario", {"scenario": {}}),
    ToolCall("__import__", {"name": "os"}),
    ToolCall("", {"raw": "garbage"}),
    ToolCall("ls", "a=True"),  # type: ignore[arg-type] - arguments that are not an object
    ToolCall("ls", ["a"]),  # type: ignore[arg-type]
    ToolCall("ls", {"a": True, "__class__": 1}),
    ToolCall("ls", {"self": 1}),
    ToolCall("cd", {"folder": "x" * 2_000_000}),
    ToolCall("mkdir", {"dir_name": ["not", "a", "string"]}),
    ToolCall("cat", {}),  # a required argument missing: the simulator raises
    ToolCall("power", {"base": 10, "exponent": 10**9}),
    ToolCall("logarithm", {"value": 10, "base": 2, "precision": 10**9}),
    ToolCall("square_root", {"number": 2, "precision": 10**9}),
]


def test_hostile_calls_become_error_messages_and_score_zero():
    env = shared_env()
    task = next(
        t for t in env.items if set(t.info["involved_classes"]) == {"GorillaFileSystem", "MathAPI"} and t.answer[0]
    )
    env.reset(task)
    result = env.step(Message("assistant", "", tool_calls=[copy.deepcopy(c) for c in HOSTILE]))
    assert not result.done
    replies = [m.content for m in result.observation.messages]
    assert len(replies) == len(HOSTILE)
    for call, reply in zip(HOSTILE, replies, strict=True):
        if call.name in ("ls", "cd", "mkdir") and isinstance(call.arguments, dict) and "self" not in call.arguments:
            continue  # a real call of an offered function: whatever the simulator says
        assert reply.startswith("Error during execution:") or '"error"' in reply, (call.name, reply[:200])
        assert len(reply) < 10_000
    while not result.done:
        result = env.step(Message("assistant", "Done."))
    assert result.reward == 0.0 and result.score.status == "wrong"


def test_step_cap_ends_a_runaway_turn():
    env = shared_env()
    task = env.items[0]
    env.reset(task)
    name = task.info["functions"][0]["name"]
    for _ in range(MAX_STEPS_PER_TURN):
        assert not env.step(Message("assistant", "", tool_calls=[ToolCall(name, {})])).done
    result = env.step(Message("assistant", "", tool_calls=[ToolCall(name, {})]))
    assert result.done and result.reward == 0.0 and result.score.status == "truncated"


def test_ground_truth_is_parsed_never_evaluated():
    assert parse_call("sort('final_report.pdf')") == ("sort", ["final_report.pdf"], {})
    assert parse_call("mv(source='a',destination='b')") == ("mv", [], {"source": "a", "destination": "b"})
    for bad in ["__import__('os').system('x')", "f(x=g())", "a.b(1)", "f(*x)", "f(**x)", "1+1"]:
        with pytest.raises(ValueError):
            parse_call(bad)


def test_unknown_category_and_missing_wheel_say_what_to_do(tmp_path):
    with pytest.raises(ValueError, match="multi_turn_base"):
        BFCLMultiTurnEnv(category="multi_turn_nope")
    with pytest.raises(FileNotFoundError, match="pip install --no-deps bfcl-eval"):
        BFCLMultiTurnEnv(path=tmp_path / "nowhere")
    assert "bfcl_eval" in sys.modules
