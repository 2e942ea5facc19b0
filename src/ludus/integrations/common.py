"""What the trainer adapters share: the task a dataset row names, the rows ``ludus export`` writes,
and grading a reply on the task a row names.

A row names its task by ``TaskRef`` — environment, its arguments, split, index, the episode's
seed and the task's id — in the ``ludus_*`` columns (TRL) or in ``data_source`` and
``extra_info`` (verl); a :class:`Layout` says which, so that errors name the row's own columns.
Grading rebuilds the task with ``env.task_source(split).get(index)``, checks that its id is
still the one exported (a dataset written with other environment arguments, or by another
version of the environment, is an error, not a silently wrong reward), replays
``reset(task, seed)`` and scores the reply with ``step``.

Rewards: a score's value, or ``None`` when its status is ``infra_error`` — the grader failed,
or the environment could not start for the sample (:class:`EnvUnavailable`: its env server
down, say) — the sample says nothing about the policy and the trainer must leave it out, never
count it 0. A row that names no task, or not the one the environment gives, is a
:class:`RowError`: the dataset's mistake, raised.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any

from ludus.core.env import Env, TaskSource
from ludus.core.types import Message, Observation, Score, Status, Task

logger = logging.getLogger("ludus.integrations")

EnvFactory = Callable[[], Env]
FIELDS = ("env", "env_args", "split", "index", "seed", "task_id")  # what names a task (TaskRef)
COLUMNS = ("ludus_env", "ludus_env_args", "ludus_split", "ludus_index", "ludus_seed", "ludus_task_id")
SPLITS = ("train", "eval")


class RowError(ValueError):
    """A dataset row that names no Ludus task, or one its environment no longer gives."""


class EnvUnavailable(RuntimeError):
    """The environment could not be made, or could not give the row's task (an env server down, a
    database that did not start): the infrastructure's failure, not the row's or the model's, so
    the sample is an ``infra_error`` like a grader that fails."""


@dataclass(frozen=True)
class Layout:
    """How one trainer's rows name a task: the column of each of :data:`FIELDS` and ``ludus
    export``'s ``--format`` that writes them, so that an error names the user's own columns and
    the command that fixes the dataset."""

    columns: Mapping[str, str]
    format: str

    def export(self, env: str = "ENV", split: str = "train") -> str:
        """The ``ludus export`` command that writes rows of this layout."""
        options = (" --split eval" if split == "eval" else "") + (
            f" --format {self.format}" if self.format != "trl" else ""
        )
        return f"`ludus export {env}{options} -n N -o FILE.parquet`"  # -n: an endless split needs it


TRL_LAYOUT = Layout(dict(zip(FIELDS, COLUMNS, strict=True)), "trl")


def canonical_args(env_args: Mapping[str, Any] | str | None) -> str:
    """Environment arguments as one canonical JSON text (sorted keys), as rows carry them."""
    if env_args is None or env_args == "":
        return "{}"
    value = json.loads(env_args) if isinstance(env_args, str) else dict(env_args)
    if not isinstance(value, dict):
        raise ValueError(f"environment arguments must be a JSON object, got {env_args!r}")
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class TaskRef:
    """Which task a dataset row is: task ``index`` of ``env``'s ``split``, played with ``seed``."""

    env: str
    split: str
    index: int
    seed: int
    task_id: str
    env_args: str = "{}"  # canonical JSON (see canonical_args)
    layout: Layout = field(default=TRL_LAYOUT, compare=False, repr=False)  # the row's, for errors about it

    def columns(self) -> dict[str, Any]:
        """The ``ludus_*`` columns of a TRL row (also what verl's ``extra_info`` carries)."""
        return dict(
            zip(COLUMNS, (self.env, self.env_args, self.split, self.index, self.seed, self.task_id), strict=True)
        )

    @classmethod
    def from_columns(cls, row: Mapping[str, Any], where: str = "the row") -> TaskRef:
        """The task a TRL row's ``ludus_*`` columns name."""
        return cls.parse({f: row.get(c) for f, c in TRL_LAYOUT.columns.items()}, TRL_LAYOUT, where)

    @classmethod
    def parse(cls, values: Mapping[str, Any], layout: Layout, where: str = "the row") -> TaskRef:
        """The task ``values`` (one per name in :data:`FIELDS`) name; errors speak of ``layout``'s columns."""
        column = layout.columns
        missing = [column[f] for f in FIELDS if values.get(f) is None]
        if missing:
            raise RowError(
                f"{where} lacks {', '.join(missing)}: it does not name a Ludus task. Write the dataset with "
                f"{layout.export()} (or keep these columns when you transform it)"
            )
        split = str(values["split"])
        if split not in SPLITS:
            raise RowError(f"{where}: {column['split']} must be one of {SPLITS}, got {split!r}")
        try:
            index, seed = int(values["index"]), int(values["seed"])
        except (TypeError, ValueError) as exc:
            raise RowError(f"{where}: {column['index']} and {column['seed']} must be integers ({exc})") from exc
        try:
            env_args = canonical_args(values["env_args"])
        except ValueError as exc:
            raise RowError(f"{where}: {column['env_args']} is not a JSON object: {exc}") from exc
        return cls(str(values["env"]), split, index, seed, str(values["task_id"]), env_args, layout)

    def env_kwargs(self) -> dict[str, Any]:
        return json.loads(self.env_args)


def registered(name: str, env_args: Mapping[str, Any] | str | None = None) -> EnvFactory:
    """A factory for the registered environment ``name`` with ``env_args``. Unknown names fail
    here, with the registry's suggestions, rather than on the first reward."""
    from ludus.core.registry import factory

    return factory(name, json.loads(canonical_args(env_args)))


def chat(messages: Sequence[Message]) -> list[dict[str, str]]:
    """A prompt as the chat messages trainers read: ``[{"role": ..., "content": ...}]``."""
    out = []
    for m in messages:
        if m.tool_calls or m.role == "tool":
            raise ValueError(f"a prompt holds only system and user messages, got a {m.role} message with tool calls")
        out.append({"role": m.role, "content": m.content})
    return out


@dataclass
class ExportedTask:
    """One exported row before a trainer's layout: the reference, the first observation, the task."""

    ref: TaskRef
    observation: Observation
    task: Task


def export_tasks(
    env: str,
    split: str = "train",
    count: int | None = None,
    *,
    env_args: Mapping[str, Any] | str | None = None,
    start: int = 0,
) -> Iterator[ExportedTask]:
    """Tasks ``start`` … ``start + count - 1`` of ``env``'s ``split`` with the first observation of
    each (reset with ``seed = index``, the seed grading replays). ``count=None`` means the whole
    split, which an endless procedural source does not have."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    args = canonical_args(env_args)
    instance = registered(env, args)()
    try:
        source = instance.task_source(split)  # type: ignore[arg-type]
        if count is None:
            if source.size is None:
                raise ValueError(f"{env}'s {split} split is endless (procedural): say how many tasks with -n")
            count = source.size - start
        if count < 1 or start < 0:
            raise ValueError(
                f"need a positive number of tasks from a non-negative start, got -n {count}, start {start}"
            )
        if source.size is not None and start + count > source.size:
            raise ValueError(f"{env}'s {split} split has {source.size} tasks; asked for {start}..{start + count - 1}")
        for index in range(start, start + count):
            task = source.get(index)
            observation = instance.reset(task, seed=index)
            yield ExportedTask(TaskRef(env, split, index, index, task.id, args), observation, task)
    finally:
        instance.close()


def infra_error(exc: BaseException, doing: str | None = None) -> Score:
    """The score of a sample whose environment failed (at ``doing``; an :class:`EnvUnavailable`
    says what itself): ``infra_error``, never the model's 0."""
    reason = str(exc) if doing is None else f"{doing} failed: {type(exc).__name__}: {exc}"
    return Score.zero(Status.INFRA_ERROR, reason[:1000])


def reward(score: Score) -> float | None:
    """What a trainer gets: the score's value, or ``None`` (leave the sample out) for ``infra_error``."""
    return None if score.is_infra_error else score.value


def same_prompt(prompt: Sequence[Mapping[str, Any]] | str, messages: Sequence[Message]) -> bool:
    """Whether a dataset's prompt is the environment's first observation (text prompts: the last
    user message)."""
    if isinstance(prompt, str):
        users = [m.content for m in messages if m.role == "user"]
        return bool(users) and prompt == users[-1]
    if not all(isinstance(p, Mapping) for p in prompt):
        return False
    return [(p.get("role"), p.get("content")) for p in prompt] == [(m.role, m.content) for m in messages]


def check_prompt(prompt: Sequence[Mapping[str, Any]] | str, messages: Sequence[Message], ref: TaskRef) -> None:
    """Refuse a row whose prompt is not the environment's first observation ``messages``: the reply
    would be graded as the answer to another question than the model was asked."""
    if same_prompt(prompt, messages):
        return
    shown = [(m.role, m.content) for m in messages]
    if isinstance(prompt, str):
        given, shown = [("user", prompt)], [m for m in shown if m[0] == "user"][-1:]
    else:
        given = [(p.get("role"), p.get("content")) if isinstance(p, Mapping) else ("?", repr(p)) for p in prompt]
    first = next(i for i, (a, b) in enumerate(zip_longest(given, shown)) if a != b)

    def show(message: tuple[Any, Any] | None) -> str:
        return "nothing" if message is None else f"{message[0]}: {str(message[1])[:80]!r}"

    raise RowError(
        f"the row's prompt differs from the one {ref.env} shows for task {ref.task_id!r} (seed {ref.seed}): message "
        f"{first} is {show(given[first] if first < len(given) else None)} in the row and "
        f"{show(shown[first] if first < len(shown) else None)} in the environment. If you edited the prompts on "
        "purpose (a system prompt or template of your own) and the question is the same, pass check_prompt=False; "
        "otherwise the dataset was written with other environment arguments or by another version of the "
        f"environment: export it again with {ref.layout.export(ref.env, ref.split)}"
    )


@dataclass
class Slot:
    """One environment instance and the task sources it has opened."""

    env: Env
    sources: dict[str, TaskSource] = field(default_factory=dict)


class EnvPool:
    """Environments for the tasks rows name: one instance per thread and environment
    (:meth:`thread_slot`) or one of the caller's own (:meth:`new_slot`), made by the factory, all
    closed by :meth:`close`.

    ``env`` is the factory used for every row (a :class:`~ludus.rollout.remote.RemoteEnv` on a
    server, say), a registered name with ``env_args`` (then every row must name it), or ``None``:
    each row's own ``ludus_env`` and ``ludus_env_args`` from the registry."""

    def __init__(self, env: str | EnvFactory | None = None, env_args: Mapping[str, Any] | str | None = None):
        self.fixed_name: str | None = None
        self.factory: EnvFactory | None = None
        if isinstance(env, str):
            self.fixed_name, self.factory = env, registered(env, env_args)
        elif env is not None:
            if not callable(env):
                raise TypeError(f"env must be a registered name, an env factory or None, got {env!r}")
            if env_args is not None:
                raise ValueError("env_args go with a registered environment name, not with a factory")
            self.factory = env
        self._local = threading.local()
        self._all: list[Env] = []
        self._lock = threading.Lock()

    def check_env(self, ref: TaskRef) -> None:
        """Refuse a row that names another environment than the one this pool was made for."""
        if self.fixed_name is not None and ref.env != self.fixed_name:
            raise RowError(f"the row names environment {ref.env!r}, but this one plays {self.fixed_name!r}")

    def thread_slot(self, ref: TaskRef) -> Slot:
        """This thread's instance of the row's environment, made on first use."""
        self.check_env(ref)
        slots: dict[tuple[str, str], Slot] = self._local.__dict__.setdefault("slots", {})
        key = ("", "") if self.factory is not None else (ref.env, ref.env_args)
        if key not in slots:
            slots[key] = self.new_slot(ref)
        return slots[key]

    def new_slot(self, ref: TaskRef | None = None) -> Slot:
        """A new environment instance (for the row ``ref`` when rows name their environments)."""
        if ref is not None:
            self.check_env(ref)
        if self.factory is not None:
            make = self.factory
        elif ref is not None:
            make = registered(ref.env, ref.env_args)
        else:
            raise ValueError("an environment needs a factory, a registered name or a row that names one")
        try:
            env = make()
        except Exception as exc:  # noqa: BLE001 - an env server down, a database that did not start, ...
            raise EnvUnavailable(f"the environment could not be made: {type(exc).__name__}: {exc}"[:1000]) from exc
        if not isinstance(env, Env):
            raise TypeError(f"the env factory returned {type(env).__name__}, not a ludus Env")
        with self._lock:
            self._all.append(env)
        return Slot(env)

    def task(self, slot: Slot, ref: TaskRef) -> Task:
        """Task ``ref.index`` of the slot's environment, checked against the exported id. A task
        source that fails (a remote one whose server is down) raises :class:`EnvUnavailable`."""
        try:
            if ref.split not in slot.sources:
                slot.sources[ref.split] = slot.env.task_source(ref.split)  # type: ignore[arg-type]
            source = slot.sources[ref.split]
            if ref.index < 0 or (source.size is not None and ref.index >= source.size):
                raise RowError(
                    f"the row names task {ref.index} of {ref.env}'s {ref.split} split, which has {source.size}"
                )
            task = source.get(ref.index)
        except RowError:
            raise
        except NotImplementedError as exc:  # the environment has no such split: the row's mistake
            raise RowError(f"the row names {ref.env}'s {ref.split} split, which it does not have here: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - the environment failed to give a task, not the row
            raise EnvUnavailable(f"the task could not be read: {type(exc).__name__}: {exc}"[:1000]) from exc
        if task.id != ref.task_id:
            raise RowError(
                f"the row names task {ref.task_id!r} (index {ref.index} of {ref.env}'s {ref.split} split), but the "
                f"environment gives {task.id!r} there: the dataset was exported with other environment arguments or "
                f"by another version of the environment; export it again with {ref.layout.export(ref.env, ref.split)}"
            )
        return task

    def close(self) -> None:
        with self._lock:
            envs, self._all = self._all, []
        for env in envs:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                logger.warning("closing %s failed", type(env).__name__, exc_info=True)
        self._local = threading.local()


class Grader:
    """Scores single replies on the tasks rows name, with the environments' own graders (an
    :class:`EnvPool`'s, one instance per worker thread).

    ``workers`` threads grade a batch at once (each with its own environments), for graders that
    wait on a sandbox or a database. An ``infra_error`` is graded again up to ``retries`` times
    before it stands; an environment that cannot be made or cannot give the task
    (:class:`EnvUnavailable`) is one at once, its factory having had its own retries (a
    ``RemoteEnv``'s back-off), and is made anew for the next row. ``counts`` tallies every status
    graded so far."""

    def __init__(
        self,
        env: str | EnvFactory | None = None,
        env_args: Mapping[str, Any] | str | None = None,
        *,
        workers: int = 1,
        retries: int = 1,
    ):
        if workers < 1 or retries < 0:
            raise ValueError(f"workers must be >= 1 and retries >= 0, got {workers} and {retries}")
        self.envs = EnvPool(env, env_args)
        self.workers, self.retries = workers, retries
        self.counts: Counter[str] = Counter()
        self._counts_lock = threading.Lock()
        self._threads: ThreadPoolExecutor | None = None

    def grade(self, ref: TaskRef, reply: str, prompt: Sequence[Mapping[str, Any]] | str | None = None) -> Score:
        """The score of ``reply`` as the whole answer to the row's task. A prompt that is not the
        environment's first observation raises :class:`RowError`: the model was asked something
        else than what is graded."""
        try:
            slot = self.envs.thread_slot(ref)
            task = self.envs.task(slot, ref)
        except EnvUnavailable as exc:
            score = infra_error(exc)
        else:
            score = self._once(slot, task, ref, reply, prompt)
            for _ in range(self.retries):
                if not score.is_infra_error:
                    break
                logger.warning("grading %s task %s again after infra_error: %s", ref.env, ref.task_id, score.reason)
                score = self._once(slot, task, ref, reply, prompt)
        with self._counts_lock:
            self.counts[score.status] += 1
        return score

    def grade_all(
        self,
        refs: Sequence[TaskRef],
        replies: Sequence[str],
        prompts: Sequence[Sequence[Mapping[str, Any]] | str] | None = None,
    ) -> list[Score]:
        if len(refs) != len(replies) or (prompts is not None and len(prompts) != len(refs)):
            raise ValueError(f"{len(refs)} rows, {len(replies)} replies and {len(prompts or [])} prompts: one each")
        given = prompts if prompts is not None else [None] * len(refs)
        if self.workers == 1 or len(refs) < 2:
            return [self.grade(r, t, p) for r, t, p in zip(refs, replies, given, strict=True)]
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self.workers, thread_name_prefix="ludus-grader")
        return list(self._threads.map(self.grade, refs, replies, given))

    def _once(
        self, slot: Slot, task: Task, ref: TaskRef, reply: str, prompt: Sequence[Mapping[str, Any]] | str | None
    ) -> Score:
        try:
            observation = slot.env.reset(task, seed=ref.seed)
        except Exception as exc:  # noqa: BLE001 - a reset that fails is the environment's failure, not the model's
            return infra_error(exc, "reset")
        if prompt is not None:
            check_prompt(prompt, observation.messages, ref)
        result = slot.env.step(Message("assistant", reply))
        if not result.done:
            return Score.zero(
                Status.TRUNCATED,
                f"{ref.env} expects more than one reply per episode: train it through the multi-turn adapter",
            )
        assert result.score is not None  # Env.step guarantees a score on the last step
        return result.score

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown(wait=True)
            self._threads = None
        self.envs.close()
