"""The environment API: ``reset(task, seed) -> Observation``, ``step(action) -> StepResult``.

Invariants every environment keeps (``ludus check ENV`` tests them):

* ``reset`` starts a fresh episode and returns the full conversation the policy sees first;
  the same task and seed give the same observation.
* ``step`` takes the policy's assistant message (or its text) and returns only the messages
  the environment *adds* (or, flagged ``history_rewritten``, the whole next conversation);
  calling it before ``reset`` or after the episode ended raises :class:`EnvStateError`.
* The last step of an episode is ``terminated`` or ``truncated`` and carries the final
  :class:`Score`; every reward lies in ``reward_range``.
* Bad model output never raises: it ends in a score with a status such as ``format_error``.
  An exception inside the environment's own code is reported as status ``infra_error``
  (training masks it) rather than crashing the run or passing as a reward of 0.

Subclasses implement two hooks, :meth:`Env.begin` and :meth:`Env.transition`; the base class
keeps the episode state and enforces the invariants. :class:`SingleTurnEnv` and
:class:`ToolEnv` cover the common shapes in a few lines.
"""

from __future__ import annotations

import importlib.util
import logging
import random
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from ludus.core.tools import Tool, ToolCache
from ludus.core.types import Message, Observation, Score, Status, StepResult, Task, ToolCall, ToolSpec

logger = logging.getLogger("ludus.env")

Split = Literal["train", "eval"]
JsonTypes = type | tuple[type, ...]  # the JSON types a field of a client's task may take


def _json_type_ok(value: Any, allowed: JsonTypes) -> bool:
    """``value`` is one of ``allowed`` as JSON sees types: a bool is no number, an integer is a float."""
    kinds = allowed if isinstance(allowed, tuple) else (allowed,)
    if isinstance(value, bool):
        return bool in kinds
    return isinstance(value, kinds) or (float in kinds and isinstance(value, int))


def _json_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


class EnvStateError(RuntimeError):
    """``step`` was called when no episode is running (before ``reset`` or after the end)."""


class MissingDependency(ImportError):
    """An environment needs a package that is not installed; the message names the command that
    installs it. A setup problem, not a broken environment: commands stop with that one line."""


def missing_requirements(requires: Mapping[str, str]) -> dict[str, str]:
    """The modules of ``requires`` (top-level module -> the command that installs it) that cannot
    be imported, found without importing them."""
    missing = {}
    for module, install in requires.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # ValueError: a module in sys.modules without a spec
            found = False
        if not found:
            missing[module] = install
    return missing


def require(requires: Mapping[str, str], who: str) -> None:
    """Raise :class:`MissingDependency`, naming the install command, unless every module of
    ``requires`` can be imported."""
    missing = missing_requirements(requires)
    if missing:
        modules = " and ".join(missing)
        commands = "; ".join(dict.fromkeys(missing.values()))
        verb = "is" if len(missing) == 1 else "are"
        raise MissingDependency(f"{who} needs {modules}, which {verb} not installed: {commands}")


@runtime_checkable
class TaskSource(Protocol):
    """An indexable, deterministic supply of tasks: ``get(i)`` is always the same task.

    ``size`` is the number of distinct tasks, or ``None`` for an endless procedural source.
    """

    size: int | None

    def get(self, index: int) -> Task: ...


def cycled_task(source: TaskSource, index: int) -> Task:
    """Task ``index`` of a stream that never ends: an endless source's own, or a finite one's
    ``index mod size`` (a dataset comes round again), so a reader of the stream need not know which."""
    return source.get(index if source.size is None else index % source.size)


class Env(ABC):
    """Base class of every environment. Subclass, set ``name``/``description``, implement the hooks."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    reward_range: ClassVar[tuple[float, float]] = (0.0, 1.0)
    max_turns: int = 1
    # True when reset and step are quick pure-Python calls that never block (no I/O, no
    # subprocess): the rollout engine then runs them on its event loop, without a thread hop. An
    # instance may be slower than its class: one graded by a rubric whose criterion can block
    quick: bool = False
    # True when a task's answer is read from the environment's own tool replies by design (a lookup in a
    # service's records, envs/synth): the red team then does not count a tool reply showing it as a leak
    answers_in_tools: ClassVar[bool] = False
    # modules this environment needs beyond Ludus's own dependencies (top-level name -> the command
    # that installs it, e.g. {"playwright": "pip install 'ludus[web]'"}): making one without them
    # raises MissingDependency, and `ludus envs` marks it. A literal, so `ludus envs` reads it
    # from the source without importing the environment
    requires: ClassVar[Mapping[str, str]] = {}
    # the values ``difficulty=`` accepts, easiest first (empty: the environment has no levels);
    # the trainer's adaptive curriculum (train/curriculum.py) moves a run through them
    difficulty_levels: ClassVar[tuple[int, ...]] = ()
    # the ``Task.info`` keys a client may send in a whole task (an env server started with
    # ``--allow-client-tasks``), each with the JSON types it may take; empty: no ``info``; None
    # (the default: an environment that never considered it may keep a path anywhere in a task):
    # no task from a client at all. Never declare a key that names a file, a directory or anything
    # else on the server: a client must not reach the server's disk.
    client_task_info: ClassVar[Mapping[str, JsonTypes] | None] = None
    # the JSON types a client task's ``answer`` may take besides null; ``dict`` and ``list`` admit
    # anything inside, so declare them only when no part of the answer can reach the server's disk
    client_task_answer: ClassVar[JsonTypes] = (str, int, float)

    def __init__(self, tasks: TaskSource | None = None):
        if self.requires:
            require(self.requires, f"environment {self.name or type(self).__name__!r}")
        self._tasks = tasks
        self.task: Task | None = None
        self.messages: list[Message] = []
        self.turn = 0
        self.episode_seed = 0  # the seed of the current episode, as reset got it
        self.done = True
        self._rng: random.Random | None = None
        self._rng_seed: str | int = 0

    @property
    def rng(self) -> random.Random:
        """The episode's random generator, seeded from the environment, the task and the seed:
        draw every random choice from it so that an episode replays exactly. Seeded on first
        use (seeding from a string costs more than a whole quick step)."""
        if self._rng is None:
            self._rng = random.Random(self._rng_seed)
        return self._rng

    @rng.setter
    def rng(self, value: random.Random) -> None:
        self._rng = value

    # ---- hooks -------------------------------------------------------------------------
    @abstractmethod
    def begin(self, task: Task) -> Observation:
        """Set up the episode for ``task`` (use ``self.rng`` for any randomness) and return
        the first observation."""

    @abstractmethod
    def transition(self, action: Message) -> StepResult:
        """Apply the policy's message. Return the added messages, reward, end flags and,
        on the last step, the score. ``self.turn`` counts turns already completed."""

    def default_tasks(self, split: Split = "train") -> TaskSource:
        """Where tasks come from when ``reset`` gets none. Override to provide a built-in supply."""
        raise NotImplementedError(
            f"environment {self.name or type(self).__name__!r} has no built-in tasks; "
            "pass tasks=... when creating it or a task to reset()"
        )

    def tools(self) -> list[ToolSpec]:
        """The tools offered to the model; none by default."""
        return []

    def reference(self, task: Task) -> str | None:
        """A reply that earns full reward on ``task``, if the environment knows one. Used for
        supervised warm-starts and by ``ludus check``; ``None`` when there is none to give."""
        return None

    def reference_example(self, task: Task, seed: int) -> tuple[list[Message], str] | None:
        """A conversation the policy meets on ``task`` and a good reply to it: what the embedded
        model's supervised warm start trains on. By default the first observation and
        :meth:`reference`; a multi-turn environment may give a later turn (a game's middle), so
        that the warm start covers the conversations RL meets, not only their beginnings."""
        reply = self.reference(task)
        return None if reply is None else (list(self.reset(task, seed).messages), reply)

    def reference_actions(self, task: Task) -> list[Message] | None:
        """The assistant messages of an episode that earns full reward (tool calls included):
        what the scripted oracle policy plays, proving a task solvable. By default the
        :meth:`reference` reply alone; multi-turn environments override it."""
        reply = self.reference(task)
        return None if reply is None else [Message("assistant", reply)]

    def cheats(self, task: Task) -> Mapping[str, list[Message]]:
        """Scripted cheat episodes for ``task``, by name: the assistant messages of an episode that
        tries to earn reward without solving the task in a way only this environment allows
        (reading its ``secrets`` table, deleting its tests). Optional; none by default.

        ``ludus check --redteam`` plays each one next to its generic cheat library and fails the
        environment when one is judged correct or earns more than an empty reply. (It picks the
        generic cheats from what the environment is; an optional class attribute
        ``redteam_kinds``, a set of ``"answer"``, ``"code"``, ``"tools"``, overrides that.)"""
        return {}

    def close(self) -> None:
        """Release anything the environment holds (processes, connections)."""

    def client_task(self, data: Any) -> Task:
        """A task sent whole by a client, checked against :attr:`client_task_info` and
        :attr:`client_task_answer` before it comes near the environment. Raises ``ValueError``
        naming the field that is refused. Called on an instance that may be closed: an override
        checks the data, not the environment's state."""
        env = self.name or type(self).__name__
        if self.client_task_info is None:
            raise ValueError(f"{env} takes no tasks from clients: its tasks hold what only the server has")
        if not isinstance(data, dict):
            raise ValueError("'task' must be a JSON object")
        unknown = set(data) - {"id", "prompt", "answer", "info", "source"}
        if unknown:
            raise ValueError(f"a task has no field {sorted(unknown)[0]!r}")
        for key in ("id", "prompt", "source"):
            if key in data and not isinstance(data[key], str):
                raise ValueError(f"task.{key} must be a string")
        if not isinstance(data.get("id"), str) or not isinstance(data.get("prompt"), str):
            raise ValueError("a task needs a string 'id' and 'prompt'")
        if data.get("answer") is not None and not _json_type_ok(data["answer"], self.client_task_answer):
            raise ValueError(f"{env} does not accept a task.answer of type {_json_name(data.get('answer'))}")
        info = data.get("info")
        info = {} if info is None else info
        if not isinstance(info, dict):
            raise ValueError("task.info must be a JSON object")
        for key, value in info.items():
            allowed = self.client_task_info.get(key)
            if allowed is None:
                accepted = ", ".join(sorted(self.client_task_info)) or "none"
                raise ValueError(f"{env} does not accept task.info[{key!r}] from a client (it accepts: {accepted})")
            if not _json_type_ok(value, allowed):
                raise ValueError(f"task.info[{key!r}] has the wrong type: {_json_name(value)}")
        return Task.from_dict({**data, "info": dict(info)})

    # ---- public API --------------------------------------------------------------------
    def task_source(self, split: Split = "train") -> TaskSource:
        return self._tasks if self._tasks is not None else self.default_tasks(split)

    def reset(self, task: Task | None = None, seed: int | None = None) -> Observation:
        """Start an episode on ``task`` (or on task number ``seed`` of the default supply)."""
        seed = 0 if seed is None else int(seed)
        if task is None:
            task = self.task_source("train").get(seed)
        self._start(task, seed)
        return self._begun(self.begin(task))

    def step(self, action: str | Message) -> StepResult:
        """Apply one policy turn. Never raises because of what the model wrote."""
        action = self._accept(action)
        try:
            result: StepResult | Exception = self.transition(action)
        except Exception as exc:  # the environment's own bug or infrastructure: not the policy's fault
            result = exc
        return self._record(action, result)

    async def areset(self, task: Task | None = None, seed: int | None = None) -> Observation:
        """``reset`` for event loops: awaits :meth:`abegin` when the subclass has one, else runs
        ``reset`` in a worker thread."""
        import asyncio  # only async callers pay for it: importing ludus.core stays quick

        if not _overrides(self, "abegin"):
            return await asyncio.to_thread(self.reset, task, seed)
        seed = 0 if seed is None else int(seed)
        if task is None:
            task = await asyncio.to_thread(self.task_source("train").get, seed)
        self._start(task, seed)
        return self._begun(await self.abegin(task))

    async def astep(self, action: str | Message) -> StepResult:
        """``step`` for event loops: awaits :meth:`atransition` when the subclass has one, else
        runs ``step`` in a worker thread."""
        import asyncio

        if not _overrides(self, "atransition"):
            return await asyncio.to_thread(self.step, action)
        action = self._accept(action)
        try:
            result: StepResult | Exception = await self.atransition(action)
        except Exception as exc:  # noqa: BLE001 - as in step
            result = exc
        return self._record(action, result)

    # ---- optional async hooks: environments whose work is I/O (a server, a browser) ----------
    async def abegin(self, task: Task) -> Observation:
        """The async twin of :meth:`begin`: ``reset`` calls ``begin``, ``areset`` calls this. An
        environment may have either twin or both; ``areset`` runs ``reset`` on a thread without it."""
        raise NotImplementedError

    async def atransition(self, action: Message) -> StepResult:
        """The async twin of :meth:`transition`; see :meth:`abegin`."""
        raise NotImplementedError

    # ---- the episode bookkeeping both twins share ----------------------------------------------
    def _start(self, task: Task, seed: int) -> None:
        """Reset the episode state; subclasses with per-episode state extend it."""
        if not isinstance(task, Task):
            raise TypeError(f"reset() expects a ludus Task, got {type(task).__name__}")
        self._rng, self._rng_seed = None, f"{self.name}:{task.id}:{seed}"
        self.task, self.episode_seed, self.turn, self.done = task, seed, 0, False

    def _begun(self, obs: Observation) -> Observation:
        self.messages = list(obs.messages)
        return obs

    def _accept(self, action: str | Message) -> Message:
        if self.task is None or self.done:
            raise EnvStateError("step() needs a running episode: call reset() first (again after the episode ends)")
        if isinstance(action, str):
            action = Message("assistant", action)
        if not isinstance(action, Message) or action.role != "assistant":
            raise TypeError("step() expects the policy's text or an assistant Message")
        return action

    def _record(self, action: Message, result: StepResult | Exception) -> StepResult:
        """Enforce the contract on what ``transition`` gave (or raised) and advance the episode."""
        if isinstance(result, Exception):
            detail = traceback.format_exception_only(type(result), result)[-1].strip()
            problem: str | None = f"{type(self).__name__}.transition raised {detail}"
            result = StepResult(Observation([]), 0.0, terminated=True)
        else:
            problem = self._contract_problem(result)
        if problem:
            result.reward, result.terminated = 0.0, True
            result.score = Score.zero(Status.INFRA_ERROR, problem)
        self.turn += 1
        if not result.done and self.turn >= self.max_turns:
            result.truncated = True
            result.score = Score.zero(Status.TRUNCATED, f"no final answer within {self.max_turns} turns")
        if result.history_rewritten:
            self.messages = list(result.observation.messages)
        else:
            self.messages.append(action)
            self.messages.extend(result.observation.messages)
        self.done = result.done
        return result

    def _contract_problem(self, result: Any) -> str | None:
        if not isinstance(result, StepResult):
            return f"transition() returned {type(result).__name__}, not a StepResult"
        lo, hi = self.reward_range
        if not lo <= result.reward <= hi:
            return f"reward {result.reward} is outside the declared reward_range {self.reward_range}"
        if result.done and result.score is None:
            return "the episode ended without a Score"
        return None


def has_async_hooks(env: Env) -> bool:
    """Whether ``env`` implements an async hook (:meth:`Env.abegin`, :meth:`Env.atransition` or
    both), so that its ``areset``/``astep`` are worth awaiting on an event loop rather than
    running on a thread (the twin without a hook runs its sync call on a thread itself)."""
    return _overrides(env, "abegin") or _overrides(env, "atransition")


def _overrides(env: Env, hook: str) -> bool:
    return getattr(type(env), hook) is not getattr(Env, hook)


class SingleTurnEnv(Env):
    """One prompt, one answer, one score. Implement :meth:`score` (and optionally :meth:`prompt`)."""

    system_prompt: ClassVar[str | None] = None
    # True for an environment that replaces ``transition`` but still grades every final answer
    # through ``score`` (an agent's answer, ludus.agents.AgentEnv): a rubric may then replace that grade
    grades_through_score: ClassVar[bool] = False

    def prompt(self, task: Task) -> str:
        return task.prompt

    @abstractmethod
    def score(self, task: Task, completion: str) -> Score:
        """Grade the model's whole answer. Deny by default: anything unrecognised scores 0."""

    def begin(self, task: Task) -> Observation:
        messages = [Message("system", self.system_prompt)] if self.system_prompt else []
        return Observation(messages + [Message("user", self.prompt(task))], self.tools())

    def transition(self, action: Message) -> StepResult:
        assert self.task is not None
        score = self.score(self.task, action.content)
        return StepResult(Observation([]), reward=score.value, terminated=True, score=score)


class ToolEnv(SingleTurnEnv):
    """Multi-turn episodes where the model calls tools until it gives a final answer.

    List the tools in :meth:`tool_functions` (type-hinted functions or bound methods, so
    tools can reach per-episode state); a message without tool calls is the final answer and
    goes to :meth:`score`. ``tool_functions()`` is read once per episode. Each step's ``info``
    counts its ``tool_calls``, ``tool_errors`` and ``tool_cache_hits``.

    Caching: a tool marked ``@tool(cacheable=True)`` is run once per distinct call and state
    when the environment has a ``tool_cache`` (set it on the subclass to share one among all
    its instances) and :meth:`cache_scope` names the state the tools read.

    Honeypots: a tool marked ``@tool(honeypot=True)``, or any code of the environment calling
    :meth:`trip_honeypot` (a query that reads a ``secrets`` table), ends the episode with
    status ``honeypot`` and reward ``honeypot_penalty``, whatever the answer: bait that a
    legitimate solution never touches, so reaching for it is logged and punished.
    """

    max_turns = 8
    tool_cache: ToolCache | None = None
    honeypot_penalty: float = -1.0
    reward_range: ClassVar[tuple[float, float]] = (-1.0, 1.0)  # must include honeypot_penalty

    max_tool_calls: int | None = None  # per episode; calls past it are refused with an error
    unmetered_tools: ClassVar[frozenset[str]] = frozenset()  # never refused by max_tool_calls (the one that ends)
    _honeypot: str | None = None
    _tool_calls_used = 0
    _tools: dict[str, Tool] | None = None  # built once per episode: a schema per tool is not free

    def trip_honeypot(self, what: str) -> None:
        """Record that the model touched a honeypot (``what`` says which); the episode ends
        after this step with status ``honeypot``."""
        if self._honeypot is None:
            self._honeypot = what
            logger.warning("honeypot touched in %s, task %s: %s", self.name, self.task and self.task.id, what)

    def _start(self, task: Task, seed: int) -> None:
        self._honeypot, self._tool_calls_used, self._tools = None, 0, None
        super()._start(task, seed)

    def cache_scope(self) -> str | None:
        """What cacheable tools' results depend on besides their arguments — e.g. the task id,
        or a hash of this episode's database. ``None`` (the default) caches nothing: the safe
        choice when tools read state that differs between episodes of one task."""
        return None

    def tool_functions(self) -> Sequence[Callable[..., Any] | Tool]:
        """The episode's tools: functions (their schemas from type hints) or :class:`Tool` s."""
        return []

    def tools(self) -> list[ToolSpec]:
        return [t.spec for t in self._tool_map().values()]

    def _tool_map(self) -> dict[str, Tool]:
        if self._tools is None:
            made = (f if isinstance(f, Tool) else Tool(f) for f in self.tool_functions())
            self._tools = {t.name: t for t in made}
        return self._tools

    def transition(self, action: Message) -> StepResult:
        return self._unless_honeypot(self._call_tools(action) if action.tool_calls else super().transition(action))

    def _unless_honeypot(self, result: StepResult) -> StepResult:
        """``result``, or the end of the episode as ``honeypot`` when this step touched one."""
        if self._honeypot is None:
            return result
        score = Score(self.honeypot_penalty, Status.HONEYPOT, f"touched a honeypot: {self._honeypot}")
        info = {**result.info, "honeypot": self._honeypot}
        return StepResult(result.observation, score.value, terminated=True, score=score, info=info)

    def _call_tools(self, action: Message) -> StepResult:
        tools = self._tool_map()
        scope = self.cache_scope() if self.tool_cache is not None else None
        counts = {"tool_calls": len(action.tool_calls), "tool_errors": 0, "tool_cache_hits": 0}
        replies = []
        for call in action.tool_calls:
            text, ok, cached = self._run(tools, call, scope)
            counts["tool_errors"] += not ok
            counts["tool_cache_hits"] += cached
            replies.append(Message("tool", text, tool_call_id=call.id or None, name=call.name))
        return StepResult(Observation(replies), info=counts)

    def _run(self, tools: dict[str, Tool], call: ToolCall, scope: str | None) -> tuple[str, bool, bool]:
        """``(text for the model, ok, from the cache)``."""
        if not call.name:
            return (
                f"Error: this tool call could not be read: {str(call.arguments)[:200]!r}; write a JSON object "
                'with a string "name" and an "arguments" object',
                False,
                False,
            )
        tool = tools.get(call.name)
        if tool is None:
            return f"Error: no tool named {call.name!r}; available: {', '.join(tools) or 'none'}", False, False
        if (
            self.max_tool_calls is not None
            and self._tool_calls_used >= self.max_tool_calls
            and tool.name not in self.unmetered_tools
        ):
            return (
                f"Error: the limit of {self.max_tool_calls} tool calls is used up; give your final answer",
                False,
                False,
            )
        self._tool_calls_used += 1
        if tool.honeypot:
            self.trip_honeypot(f"called the tool {tool.name}")
        if scope is None or not tool.cacheable or self.tool_cache is None:
            return (*tool(call), False)
        return self.tool_cache.run(ToolCache.key(f"{self.name}\0{scope}", call), lambda: tool.outcome(call))
