"""The ``bfcl-multi-turn`` environment: BFCL's multi-turn categories on BFCL's own API simulators.

An episode is one BFCL item: its first user turn is the first observation. The model's tool calls run
on the episode's simulator instances (BFCL's classes: a file system, a trading bot, a travel agency…)
and the results come back as tool messages; an assistant message without a tool call ends the user
turn, and the next user turn is the next observation (for ``multi_turn_miss_func``, with the functions
it reveals). After the last turn the episode ends and is graded.

Calls never go through ``eval``: a call is dispatched with ``getattr`` on the instance that owns the
method, only for a public method of the episode's simulators (as BFCL's executor: a function that
``multi_turn_miss_func`` holds back exists all along, it is only not documented yet), the arguments
as keyword arguments. A bad name, bad arguments or an exception in the simulator becomes an error string in the
tool message (``"Error during execution: …"``, as in BFCL), never a crash.

Grading is our own code, checked against BFCL's ``multi_turn_checker`` (tests/test_bfcl_multi_turn.py):
at the end of every turn whose ground truth is not empty, the ground-truth calls run on a separate
set of instances, then (1) the model must have made a call in that turn, (2) every public attribute
of each ground-truth instance must equal the model instance's, and (3) the ground truth's results of
that turn must all appear, unordered, among the results of all the model's calls so far. A turn whose
ground truth is empty (the request cannot be done yet: a function or parameter is missing) is not
checked, but the model's calls in it still change the state the next turns are checked on. Reward 1
only when every turn passes; the reason names the first failing turn. See docs/bfcl.md.
"""

from __future__ import annotations

import ast
import copy
import decimal
import importlib
import inspect
import json
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from ludus.core.env import Env, Split, TaskSource
from ludus.core.types import Message, Observation, Score, Status, StepResult, Task, ToolCall, ToolSpec
from ludus.envs.bfcl.data import INSTALL_HINT, MULTI_TURN, is_eval, load_multi_turn
from ludus.envs.bfcl.env import ListTasks, tool_spec

MAX_STEPS_PER_TURN = 20  # BFCL's MAXIMUM_STEP_LIMIT: more steps with calls in one turn force the model to quit
ADDED_FUNCTIONS_PROMPT = "I have updated some more functions you can choose from. What about now?"
STATELESS = frozenset({"MathAPI"})  # BFCL's STATELESS_CLASSES: no scenario to load
SIMULATOR_PACKAGE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
SIMULATOR_MODULES = {
    "GorillaFileSystem": "gorilla_file_system",
    "MathAPI": "math_api",
    "MessageAPI": "message_api",
    "TwitterAPI": "posting_api",
    "TicketAPI": "ticket_api",
    "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking",
    "VehicleControlAPI": "vehicle_control",
}
MAX_PRECISION = 1_000  # digits: MathAPI's logarithm/square_root set a process-wide precision from it
MAX_INT_EXPONENT = 10_000  # an integer power beyond this would take minutes and gigabytes
MAX_SHOWN = 200  # characters of a failing value quoted in a reason


def simulator_class(name: str) -> type:
    """BFCL's simulator class ``name`` (imported from the installed ``bfcl-eval``)."""
    if name not in SIMULATOR_MODULES:
        raise ValueError(f"no simulator known for {name!r}")
    try:
        module = importlib.import_module(f"{SIMULATOR_PACKAGE}.{SIMULATOR_MODULES[name]}")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("bfcl_eval"):
            raise ModuleNotFoundError(f"BFCL's simulators not found: {INSTALL_HINT}") from exc
        raise
    return getattr(module, name)


def new_instances(task: Task) -> dict[str, Any]:
    """Fresh simulator instances for ``task``, with its initial scenario loaded (as BFCL does)."""
    instances = {}
    for name in task.info["involved_classes"]:
        instance = simulator_class(name)()
        if name not in STATELESS:
            config = copy.deepcopy(task.info["initial_config"].get(name, {}))
            instance._load_scenario(config, long_context=task.info["long_context"])
        instances[name] = instance
    return instances


def method_owners(instances: Mapping[str, Any]) -> dict[str, Any]:
    """Public method name → the instance that owns it; on a clash the later class wins, as in BFCL."""
    owners = {}
    for instance in instances.values():
        for name, _ in inspect.getmembers(instance, predicate=inspect.ismethod):
            if not name.startswith("_"):
                owners[name] = instance
    return owners


def parse_call(text: str) -> tuple[str, list[Any], dict[str, Any]]:
    """A ground-truth call string such as ``"mv(source='a', destination='b')"`` as (name, args, kwargs);
    only a plain function name and literal arguments are accepted (``ast``, never ``eval``)."""
    node = ast.parse(text.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain function call: {text!r}")
    if any(k.arg is None for k in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
        raise ValueError(f"unpacked arguments in {text!r}")
    args = [ast.literal_eval(a) for a in node.args]
    kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
    return node.func.id, args, kwargs


def keyword_arguments(class_name: str, name: str, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """``args`` and ``kwargs`` of a call to ``class_name.name`` as keyword arguments only (the ground truth
    sometimes passes positionally; a model's tool call cannot)."""
    signature = inspect.signature(getattr(simulator_class(class_name), name))
    bound = signature.bind(None, *args, **kwargs)  # None stands for self
    out = dict(bound.arguments)
    out.pop(next(iter(signature.parameters)))
    return out


def render_result(result: Any) -> str:
    """A call's result as text, exactly as BFCL renders it (strings as they are, dicts as JSON)."""
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except Exception:  # noqa: BLE001 - BFCL falls back to str for what JSON cannot hold
            return str(result)
    return str(result)


_CALLS = threading.Lock()


def call_simulator(method: Any, args: list[Any], kwargs: dict[str, Any]) -> str:
    """Run one simulator method and render its result or its exception as BFCL does. MathAPI sets
    process-wide precisions (mpmath's and decimal's), which also shape how its result prints: calls
    are serialised, rendered under the precision they set, and the precisions restored afterwards,
    so episodes on other threads (and other environments using mpmath) are not disturbed."""
    with _CALLS:
        mpmath = sys.modules.get("mpmath")
        saved = (mpmath.mp.dps if mpmath is not None else None, decimal.getcontext().prec)
        try:
            return render_result(method(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - the simulator's complaint is the model's feedback, as in BFCL
            return f"Error during execution: {exc}"
        finally:
            if mpmath is not None and saved[0] is not None:
                mpmath.mp.dps = saved[0]
            decimal.getcontext().prec = saved[1]


def _guard(name: str, arguments: dict[str, Any]) -> str | None:
    """Arguments that would make a simulator hang or change process-wide state for minutes."""
    precision = arguments.get("precision")
    if isinstance(precision, int) and not isinstance(precision, bool) and abs(precision) > MAX_PRECISION:
        return f"precision must be at most {MAX_PRECISION}"
    if name == "power":
        base, exponent = arguments.get("base"), arguments.get("exponent")
        if isinstance(base, int) and isinstance(exponent, int) and abs(exponent) > MAX_INT_EXPONENT:
            return f"an integer exponent must be at most {MAX_INT_EXPONENT} in size"
    return None


def execute(owners: Mapping[str, Any], name: Any, arguments: Any) -> str:
    """Run one call on its owning instance and return BFCL's text for the result or the error."""
    if not isinstance(name, str) or not name:
        return "Error during execution: the call has no function name"
    if name.startswith("_") or name not in owners:
        return f"Error during execution: no function named {name[:MAX_SHOWN]!r} is available"
    if not isinstance(arguments, dict) or not all(isinstance(k, str) for k in arguments):
        return "Error during execution: the arguments must be an object of named parameters"
    problem = _guard(name, arguments)
    if problem:
        return f"Error during execution: {problem}"
    # a copy: the simulator may keep (and later change) what it is given; the message must not change
    return call_simulator(getattr(owners[name], name), [], copy.deepcopy(arguments))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


def state_difference(model: Mapping[str, Any], truth: Mapping[str, Any]) -> str | None:
    """The first public attribute of a ground-truth instance that the model's instance does not equal."""
    for class_name, expected in truth.items():
        actual = model[class_name]
        for attribute, value in vars(expected).items():
            if attribute.startswith("_"):
                continue
            if not hasattr(actual, attribute):
                return f"{class_name}.{attribute} is missing"
            if getattr(actual, attribute) != value:
                return f"{class_name}.{attribute} is {_short(getattr(actual, attribute))}, expected {_short(value)}"
    return None


def missing_results(model_results: list[str], truth_results: list[str]) -> list[str]:
    """The ground truth's results not found among the model's (each model result used once, any order)."""
    pool = list(model_results)
    missing = []
    for item in truth_results:
        if item in pool:
            pool.remove(item)
        else:
            missing.append(item)
    return missing


class BFCLMultiTurnEnv(Env):
    name = "bfcl-multi-turn"
    description = "BFCL multi-turn function calling on BFCL's API simulators, graded like its multi-turn checker"
    reward_range: ClassVar[tuple[float, float]] = (0.0, 1.0)
    # at most 8 user turns, each of at most MAX_STEPS_PER_TURN + 1 steps with calls and one without
    max_turns = 8 * (MAX_STEPS_PER_TURN + 2)
    # BFCL's API simulators are its code: a folder of its data (path=) does not replace the wheel
    requires: ClassVar[Mapping[str, str]] = {"bfcl_eval": "pip install --no-deps bfcl-eval==2026.3.23"}

    def __init__(
        self,
        tasks: TaskSource | None = None,
        category: str = "multi_turn_base",
        path: str | Path | None = None,
        eval_fraction: float = 0.2,
    ):
        super().__init__(tasks)
        categories = list(MULTI_TURN) if category == "all_multi_turn" else [category]
        self.items = [t for c in categories for t in load_multi_turn(c, path)]
        self.eval_fraction = eval_fraction
        for class_name in {c for t in self.items for c in t.info["involved_classes"]}:
            simulator_class(class_name)  # fail now when bfcl-eval (or mpmath) is missing
        self._tools: list[ToolSpec] = []  # the functions offered so far, converted once an episode
        self._model: dict[str, Any] = {}
        self._truth: dict[str, Any] = {}

    def default_tasks(self, split: Split = "train") -> TaskSource:
        want_eval = split != "train"
        return ListTasks([t for t in self.items if is_eval(t.id, self.eval_fraction) == want_eval])

    def tools(self) -> list[ToolSpec]:
        return list(self._tools)

    # ---- the episode -------------------------------------------------------------------------------
    def begin(self, task: Task) -> Observation:
        if len(task.info["turns"]) > 8:
            raise ValueError(f"{task.id} has {len(task.info['turns'])} turns; max_turns allows 8")
        self._tools = [tool_spec(f) for f in task.info["functions"]]
        self._model, self._truth = new_instances(task), new_instances(task)
        self._model_owners, self._truth_owners = method_owners(self._model), method_owners(self._truth)
        self._turn = 0  # the user turn being answered
        self._steps = 0  # steps with calls in this turn
        self._called = False  # whether this turn had a step with calls
        self._results: list[str] = []  # every result of the model's calls, all turns so far
        self._failure: str | None = None
        return Observation(self._turn_messages(task, 0), self.tools())

    def _turn_messages(self, task: Task, turn: int) -> list[Message]:
        revealed = task.info["missed_functions"].get(str(turn))
        if revealed:
            # BFCL (function-calling mode) only re-sends the tool list; a Ludus engine keeps the first
            # observation's tools, so the new functions are also written into the message (as BFCL's
            # prompting mode does)
            added = [tool_spec(f) for f in revealed]
            self._tools += added
            docs = json.dumps([spec.to_dict() for spec in added], ensure_ascii=False)
            return [Message("user", f"{docs}\n{ADDED_FUNCTIONS_PROMPT}")]
        return [Message(m["role"], m["content"]) for m in task.info["turns"][turn]]

    def transition(self, action: Message) -> StepResult:
        task = self.task
        assert task is not None
        if action.tool_calls:
            replies = []
            for call in action.tool_calls:
                text = execute(self._model_owners, call.name, call.arguments)
                self._results.append(text)
                replies.append(Message("tool", text, tool_call_id=call.id or None, name=str(call.name)[:MAX_SHOWN]))
            self._steps += 1
            self._called = True
            info = {"tool_calls": len(action.tool_calls)}
            if self._steps > MAX_STEPS_PER_TURN:
                score = Score.zero(
                    Status.TRUNCATED, f"turn {self._turn}: forced to quit after {MAX_STEPS_PER_TURN} steps with calls"
                )
                return StepResult(Observation(replies), 0.0, terminated=True, score=score, info=info)
            return StepResult(Observation(replies), info=info)
        # a message without calls ends the user turn: grade it, then the next turn or the end
        if self._failure is None:
            self._failure = self._check_turn(task, self._turn)
        else:
            self._run_truth(task, self._turn)  # keeps the ground truth's instances in step (unused)
        self._turn += 1
        self._steps, self._called = 0, False
        if self._turn < len(task.info["turns"]):
            return StepResult(Observation(self._turn_messages(task, self._turn), self.tools()))
        if self._failure is not None:
            return StepResult(Observation([]), 0.0, terminated=True, score=Score.zero(Status.WRONG, self._failure))
        score = Score(1.0, Status.CORRECT, f"all {len(task.info['turns'])} turns match the ground truth")
        return StepResult(Observation([]), 1.0, terminated=True, score=score)

    def _run_truth(self, task: Task, turn: int) -> list[str]:
        results = []
        for text in task.answer[turn]:
            name, args, kwargs = parse_call(text)
            results.append(call_simulator(getattr(self._truth_owners[name], name), args, kwargs))
        return results

    def _check_turn(self, task: Task, turn: int) -> str | None:
        """Why the model fails turn ``turn`` (BFCL's order: empty turn, state, results), or None."""
        truth = self._run_truth(task, turn)
        if not task.answer[turn]:
            return None  # nothing can be done yet (a function or parameter is missing): no check
        if not self._called:
            return f"turn {turn}: no function call, but the request needed {len(task.answer[turn])}"
        difference = state_difference(self._model, self._truth)
        if difference:
            return f"turn {turn}: the state differs from the expected one: {difference}"
        missing = missing_results(self._results, truth)
        if missing:
            return f"turn {turn}: {len(missing)} expected result(s) never returned, e.g. {_short(missing[0])}"
        return None

    # ---- the scripted episodes ---------------------------------------------------------------------
    def reference_actions(self, task: Task) -> list[Message] | None:
        """The ground truth: each turn's calls in one message (run in order), then a short reply."""
        owners = {}
        for class_name in task.info["involved_classes"]:
            for name, _ in inspect.getmembers(simulator_class(class_name), predicate=inspect.isfunction):
                owners[name] = class_name
        actions = []
        for turn, calls in enumerate(task.answer):
            if calls:
                tool_calls = []
                for i, text in enumerate(calls):
                    name, args, kwargs = parse_call(text)
                    arguments = keyword_arguments(owners[name], name, args, kwargs)
                    tool_calls.append(ToolCall(name, arguments, id=f"call_{turn}_{i}"))
                actions.append(Message("assistant", "", tool_calls=tool_calls))
            actions.append(Message("assistant", "Done." if calls else "I cannot do that with what I have."))
        return actions

    def cheats(self, task: Task) -> Mapping[str, list[Message]]:
        def every_function(turn: int) -> Message:
            offered = list(task.info["functions"])
            for revealed_at, functions in task.info["missed_functions"].items():
                if int(revealed_at) <= turn:
                    offered += functions
            calls = [ToolCall(f["name"], {}, id=f"c{turn}_{i}") for i, f in enumerate(offered)]
            return Message("assistant", "", tool_calls=calls)

        turns = range(len(task.info["turns"]))
        return {
            "every function without arguments, every turn": [
                m for t in turns for m in (every_function(t), Message("assistant", "Done."))
            ],
            "only text, every turn": [Message("assistant", "Done.") for _ in turns],
        }
