"""``SynthEnv``: a tool environment over a simulated service described by an OpenAPI document.

Each operation the simulation honours is a tool (its path and query parameters, and ``body``);
each episode starts the service on the task's own records; the final reply ends it and the
service's state (and a report's answer) is graded against the task's goal (tasks.py).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from ludus.core.env import Split, ToolEnv
from ludus.core.tools import Tool, render_tool_calls
from ludus.core.types import Message, Observation, Score, Task, ToolCall, ToolSpec
from ludus.envs.synth.data import DataError
from ludus.envs.synth.resources import Catalog, Resource, catalog
from ludus.envs.synth.spec import MAX_ENUM, Operation, load_spec
from ludus.envs.synth.store import Store
from ludus.envs.synth.tasks import KINDS, Goal, GoalError, answer_text, expected_state, grade, make_goal, records_for
from ludus.tasks.procedural import check_split, in_eval_bucket

BODY = "body"


@functools.lru_cache(maxsize=16)
def _catalog(path: str) -> Catalog:
    return catalog(load_spec(Path(path)))


@functools.lru_cache(maxsize=16)
def _tool_specs(path: str) -> tuple[ToolSpec, ...]:
    """Every operation's tool: they depend on the document alone, so they are made once, not per episode."""
    return tuple(operation_tool(op, r) for r in _catalog(path).resources for op in r.operations.values())


def _chosen(arg: str, what: str, given: Sequence[str] | None, known: Sequence[str]) -> tuple[str, ...]:
    """``given`` (default all of ``known``) in ``known``'s order; a ValueError naming the choices."""
    chosen = known if given is None else given
    if not isinstance(chosen, list | tuple) or not chosen or not all(c in known for c in chosen):
        raise ValueError(f"{arg} names {what} among {', '.join(known)}, as a list; got {given!r}")
    return tuple(k for k in known if k in chosen)


def operation_tool(op: Operation, resource: Resource) -> ToolSpec:
    """The tool of one operation: the path and query parameters the simulation reads, and its
    JSON body as ``body``."""
    props: dict[str, Any] = {}
    required: list[str] = []
    for p in op.params:
        if p.name not in resource.honoured(op):
            continue
        schema = shown(p.schema)
        if p.description and "description" not in schema:
            schema["description"] = p.description
        props[p.name] = schema
        if p.required:
            required.append(p.name)
    if op.body is not None:
        props[BODY] = shown(op.body)
        if op.body_required:
            required.append(BODY)
    parameters = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
    return ToolSpec(op.name, f"{op.label}: {op.description}"[:1024], parameters)


def shown(schema: Any) -> Any:
    """``schema`` as the tool shows it: an enum of more than ``MAX_ENUM`` values left out (the
    service still checks it; SYNTH.md notes it), so one long list does not fill the prompt."""
    if isinstance(schema, list):
        return [shown(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    return {k: shown(v) for k, v in schema.items() if not (k == "enum" and isinstance(v, list) and len(v) > MAX_ENUM)}


def oracle_turn(env: ToolEnv, task: Task, seed: int) -> tuple[list[Message], str]:
    """A warm start's example from a tool environment's oracle: one turn of its episode, drawn by
    the seed — the conversation so far and the oracle's message, its tool calls written as the
    embedded model writes them."""
    obs = env.reset(task, seed)
    conversation, turns = list(obs.messages), []
    for message in env.reference_actions(task) or []:
        turns.append((conversation, message))
        result = env.step(message)
        if result.done:
            break
        conversation = [*conversation, message, *result.observation.messages]
    conversation, message = random.Random(f"{env.name}:{task.id}:{seed}:warm start").choice(turns)
    return conversation, message.content + (render_tool_calls(message.tool_calls) if message.tool_calls else "")


class SynthTasks:
    """An endless, seeded task source: task ``i`` draws its records and one goal from
    ``Random(f"{api}:{seed}:{split}:{i}")``; train and eval are disjoint by the goal's text."""

    size: int | None = None
    MAX_TRIES = 200

    def __init__(self, env: SynthEnv, seed: int, split: Split, eval_fraction: float):
        check_split(split, eval_fraction)
        self.env, self.seed, self.split, self.eval_fraction = env, seed, split, eval_fraction

    def get(self, index: int) -> Task:
        env = self.env
        for attempt in range(self.MAX_TRIES):
            data_seed = f"{env.name}:{self.seed}:{self.split}:{index}:{attempt}"
            try:
                records = records_for(env.catalog, data_seed)  # DataError: a draw the schemas refuse (multipleOf)
                goal = make_goal(env.catalog, records, random.Random(data_seed), env.kinds, env.resources)
                if goal is None:
                    continue
                if in_eval_bucket(f"{env.name}:{goal.text}", self.eval_fraction) != (self.split == "eval"):
                    continue
                expected_state(env.catalog, records, goal)  # GoalError: the service refuses it, or it changes nothing
            except (DataError, GoalError):
                continue
            return Task(
                id=f"{env.name}/{self.split}/{self.seed}/{index}",
                prompt=env.instructions(goal),
                info={"data_seed": data_seed, "goal": goal.to_info()},
                source=env.name,
            )
        raise RuntimeError(
            f"{env.name} found no {self.split} task of the kinds {', '.join(env.kinds)} on "
            f"{', '.join(env.resources)} in {self.MAX_TRIES} tries "
            "(SYNTH.md lists the operations each kind needs)"
        )


class SynthEnv(ToolEnv):
    """The policy works a simulated service through its operations. A generated package
    subclasses it with ``spec_path`` (its document) and ``name``."""

    spec_path: ClassVar[Path]
    max_turns = 12
    max_tool_calls = 20
    reward_range = (0.0, 1.0)
    answers_in_tools = True  # a lookup's answer is in the records the tools return: that is how it is found

    def __init__(
        self,
        tasks: Any = None,
        *,
        seed: int = 0,
        eval_fraction: float = 0.2,
        kinds: Sequence[str] | None = None,
        resources: Sequence[str] | None = None,
    ):
        """``kinds``: the goals to draw (default all of ``create``, ``update``, ``delete``, ``count``,
        ``lookup``): a run on reports alone, or a curriculum that starts with them. ``resources``:
        the resources goals are about (default all): one part of a service, or shorter episodes."""
        super().__init__(tasks)
        self.catalog = _catalog(str(self.spec_path))
        self.seed, self.eval_fraction = seed, eval_fraction
        self.kinds = _chosen("kinds", "goals", kinds, KINDS)
        self.resources = _chosen(
            "resources", "this API's resources", resources, [r.name for r in self.catalog.resources]
        )
        self.store: Store | None = None

    def default_tasks(self, split: Split = "train") -> SynthTasks:
        return SynthTasks(self, self.seed, split, self.eval_fraction)

    def instructions(self, goal: Goal) -> str:
        return (
            f"You work the {self.catalog.title} API through its tools: each is one of its operations. {goal.text} "
            "When you are done, reply without a tool call."
        )

    def _goal(self, task: Task) -> Goal:
        g = task.info["goal"]
        return Goal(g["kind"], "", tuple((op, args) for op, args in g["calls"]), g["answer"])

    def begin(self, task: Task) -> Observation:
        records = records_for(self.catalog, task.info["data_seed"])
        self.store = Store(self.catalog, records)
        self.initial = self.store.snapshot()
        self.expected = expected_state(self.catalog, records, self._goal(task))
        return Observation([Message("user", task.prompt)], self.tools())

    def tool_functions(self) -> list[Tool]:
        return [
            Tool(functools.partial(self._operate, spec.name), spec=spec) for spec in _tool_specs(str(self.spec_path))
        ]

    def _operate(self, operation: str, /, **arguments: Any) -> str:
        """Positional-only, so that a parameter may be called ``name`` or ``self`` (a filter by name)."""
        assert self.store is not None, "tools are called only inside an episode"
        return self.store.call(operation, arguments).text()

    def score(self, task: Task, completion: str) -> Score:
        assert self.store is not None
        return grade(self.catalog, self.initial, self.store.snapshot(), self.expected, self._goal(task), completion)

    def reference_actions(self, task: Task) -> list[Message] | None:
        """The oracle as an agent works: the calls that look records up in one turn, the calls
        that change the service in the next (with the ids the lookups return), then the reply."""
        goal = self._goal(task)
        reads = {
            op.name for r in self.catalog.resources for verb, op in r.operations.items() if verb in ("list", "read")
        }
        looks = [(op, args) for op, args in goal.calls if op in reads]
        acts = [(op, args) for op, args in goal.calls if op not in reads]
        final = "Done." if goal.kind not in ("count", "lookup") else f"<answer>{answer_text(goal.answer)}</answer>"
        turns = [
            Message("assistant", "", [ToolCall(op, args, id=f"call_{k}_{i}") for i, (op, args) in enumerate(calls)])
            for k, calls in enumerate((looks, acts))
            if calls
        ]
        return [*turns, Message("assistant", final)]

    def reference_example(self, task: Task, seed: int) -> tuple[list[Message], str] | None:
        return oracle_turn(self, task, seed)

    def cheats(self, task: Task) -> dict[str, list[Message]]:
        """Replies that must earn nothing: claiming success without calls, deleting everything
        the lists show, and for a report a guess without looking."""
        wipe = []
        for resource in self.catalog.resources:
            if "delete" in resource.operations:
                for key in self.initial_ids(task, resource.name):
                    wipe.append(
                        ToolCall(resource.operations["delete"].name, {resource.id_param: key}, id=f"w{len(wipe)}")
                    )
        out = {"claims-done": [Message("assistant", "Done: the task is complete.")]}
        if wipe:
            out["delete-everything"] = [
                Message("assistant", "", wipe[: self.max_tool_calls]),
                Message("assistant", "Done."),
            ]
        goal = self._goal(task)
        if goal.kind == "count":
            out["guess-count"] = [Message("assistant", f"<answer>{int(goal.answer) + 1}</answer>")]
        return out

    def initial_ids(self, task: Task, name: str) -> list[Any]:
        """The ids of resource ``name``'s records when ``task`` starts."""
        id_field = self.catalog.resource(name).id_field
        return [r[id_field] for r in records_for(self.catalog, task.info["data_seed"]).get(name, [])]
