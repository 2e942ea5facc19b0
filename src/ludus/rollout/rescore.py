"""Stored trajectories graded again by today's environments (``ludus rescore``, docs/rescore.md).

    regraded = regrade(env, trajectory)        # one trajectory: its new Score, and whether it diverged
    report = rescore_run("runs/my-eval")       # every trajectory of a run folder, written beside it

A trajectory is replayed through the environment's ordinary contract, as the rollout engine plays
an episode: ``reset(task, seed)``, then ``step`` with each of the log's assistant messages in turn,
so a multi-turn tool environment is graded on the state the logged calls build, not on the last
reply alone. The last step's score is the new verdict. The replay *diverged* when the environment's
messages (tool results, feedback) differ from the logged ones, or when the environment and the log
do not end together; the verdict is kept, the reason written beside it.

Deny by default: a replay that cannot reach the end of the episode gets the status the engine
gives an episode cut off there (``truncated``, a score of 0); an environment that raises is
``infra_error``, never a crash and never a reward.

``rescore_run`` writes ``<run>/rescore.jsonl`` (one line per trajectory, in file order, placed by
its file, byte offset and line number: see :mod:`ludus.rollout.records`) and ``<run>/rescore.json``
(the summary), each whole or not at all; the run's own files are only read.

A run folder may come from anyone: its lines are read as :mod:`ludus.rollout.records` reads a file
from elsewhere (a bad line is skipped with its reason, never a crash), the arguments it records are
not taken when they name code to run (:data:`CODE_ARGS`), and nothing is written through a link
planted at the name of a file being written. Nor is a trajectory's own ``task`` taken as it is: a
forged one could name any database file or folder on this machine. The environment's own task of
that id is graded instead (:func:`task_to_grade`), or the logged one if the environment would take
it from any client of its server (``Env.client_task``); any other is refused (:class:`UntrustedTask`)
unless the caller trusts the folder (``trust_run``, ``--trust-run``), which also takes the
arguments the folder records for its environments (without it they are an error).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import queue
import secrets
import threading
import weakref
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from ludus.core.env import Env, has_async_hooks
from ludus.core.registry import UnknownEnvError
from ludus.core.types import Message, Observation, Score, Status, StepResult, Task, Trajectory
from ludus.rollout.placement import EnvPlacement
from ludus.rollout.records import (
    TRAJECTORY_FILES,
    RecordLine,
    load_json,
    trajectory_files,
    trajectory_of,
    untrusted_lines,
)

logger = logging.getLogger("ludus.rescore")

LINES = "rescore.jsonl"
SUMMARY = "rescore.json"
INFRA_RETRIES = 2  # further replays of a trajectory whose environment failed, as the engine retries an episode
EXAMPLES = 5  # changed trajectories a report shows
UNSCORED = "unscored"  # the old status of a trajectory logged without a score (an imported conversation)
BROKEN_JSON, NOT_A_TRAJECTORY, NO_ENVIRONMENT = "broken JSON", "not a trajectory", "names no environment"
TOO_LONG = "too long"  # a line over records.LONGEST_LINE bytes, not read whole
MAX_WORKERS = 256  # threads, each with environments of its own
# environment arguments that name code to run or a command (a rubric's functions, an agent): never
# taken from a run folder's record, which may come from anyone, only from --env-args
CODE_ARGS = ("rubric", "agent", "command")
UNTRUSTED = "untrusted task"  # a skipped line's reason: its task is none of the environment's own
SCANNED_SOURCE = 100_000  # a finite task source at most this long is searched by id (a tasks file of the user's)


@dataclass(frozen=True)
class Regraded:
    """A replay's verdict: the last step's ``score``, the episode's ``reward`` (the sum of its step
    rewards, as training counts a trajectory's), and why the replay ``diverged`` from the log
    (``None``: the environment said what the log says, and ended where it ends)."""

    score: Score
    diverged: str | None
    reward: float = 0.0


class UntrustedTask(ValueError):
    """A logged task that is none of the environment's own and that it takes from no client."""


def regrade(
    env: Env, trajectory: Trajectory, *, runner: asyncio.Runner | None = None, trust_task: bool = False
) -> Regraded:
    """Replay ``trajectory``'s assistant messages through ``env`` and grade them (module docstring),
    on :func:`task_to_grade`'s task (raises :class:`UntrustedTask` before the replay).

    Needs only the trajectory's ``task`` and ``messages`` (token ``turns`` are not read), so an
    imported conversation is graded the same way. An environment with async hooks runs on
    ``runner``'s event loop (keep one per thread: an env server's client keeps a connection per
    loop), by default on one of this call's own."""
    task = task_to_grade(env, trajectory.task, trust=trust_task)
    if not has_async_hooks(env):
        return _replay(trajectory, task, env.reset, env.step)
    if runner is None:
        with asyncio.Runner() as own:
            return regrade(env, trajectory, runner=own, trust_task=trust_task)
    return _replay(
        trajectory,
        task,
        lambda task, seed: runner.run(env.areset(task, seed)),
        lambda action: runner.run(env.astep(action)),
    )


def task_to_grade(env: Env, task: Task, *, trust: bool = False) -> Task:
    """The task a logged ``task`` is graded on: ``task`` itself when ``trust``-ed or when ``env``
    takes it from any client (``Env.client_task``: nothing in it names what only the server has);
    else ``env``'s own task of the same id (the one today's environment makes, found by the index
    an id ends with, or by id in a finite source of up to :data:`SCANNED_SOURCE` tasks). Raises
    :class:`UntrustedTask` for any other: a forged task could name any file on this machine."""
    if trust:
        return task
    try:
        return env.client_task(task.to_dict())
    except Exception as refused:  # noqa: BLE001 - a check that fails its own way on hostile data refuses too
        own = _own_task(env, task.id)
        if own is not None:
            return own
        name = env.name or type(env).__name__
        raise UntrustedTask(
            f"task {task.id[:200]!r} is none of {name}'s own tasks, and {name} takes none from elsewhere ({refused})"
        ) from None


_indexes: weakref.WeakKeyDictionary[Env, dict[str, dict[str, int]]] = weakref.WeakKeyDictionary()
_indexes_lock = threading.Lock()


def _own_task(env: Env, task_id: str) -> Task | None:
    """``env``'s task whose id is ``task_id``, if it has one (:func:`task_to_grade`)."""
    parts = task_id.split("/")
    index = int(parts[-1]) if parts[-1].isascii() and parts[-1].isdecimal() and len(parts[-1]) < 10 else None
    for split in [s for s in ("train", "eval") if s in parts[:-1]] or ["train", "eval"]:
        try:
            source = env.task_source(split)  # type: ignore[arg-type]
        except NotImplementedError:  # an environment without tasks of its own
            return None
        finite = source.size is not None
        if index is not None and (not finite or index < source.size):  # type: ignore[operator]
            task = source.get(index)
            if task.id == task_id:
                return task
        if finite and source.size <= SCANNED_SOURCE:  # type: ignore[operator]
            with _indexes_lock:
                by_id = _indexes.setdefault(env, {})
                if split not in by_id:
                    by_id[split] = {source.get(i).id: i for i in range(source.size)}  # type: ignore[arg-type]
            if task_id in by_id[split]:
                return source.get(by_id[split][task_id])
    return None


def _replay(
    trajectory: Trajectory,
    task: Task,
    reset: Callable[[Task, int | None], Observation],
    step: Callable[[Message], StepResult],
) -> Regraded:
    logged, turn, reward = trajectory.messages, 0, 0.0
    diverged: str | None = None
    calling = "reset"
    try:
        first = reset(task, trajectory.seed).messages
        calling = "step"
        cursor = _next_reply(logged, 0, first)  # the log's next policy turn
        diverged = _difference(first, logged[:cursor], 0, "the first observation")
        while cursor < len(logged):
            result = step(logged[cursor])
            turn += 1
            reward += result.reward
            if result.history_rewritten:
                cut = f"the environment rewrote the conversation at turn {turn}; the log keeps only its last one"
                return Regraded(Score.zero(Status.TRUNCATED, cut), diverged or cut, reward)
            added = result.observation.messages
            end = _next_reply(logged, cursor + 1, added)
            diverged = diverged or _difference(added, logged[cursor + 1 : end], cursor + 1, f"turn {turn}'s reply")
            cursor = end
            if result.done:
                if cursor < len(logged):
                    later = sum(m.role == "assistant" for m in logged[cursor:])
                    diverged = diverged or f"the environment ended the episode at turn {turn}; the log has {later} more"
                score = result.score or Score.zero(Status.INFRA_ERROR, "the episode ended without a score")
                return Regraded(score, diverged, reward)
    except Exception as exc:  # noqa: BLE001 - the environment's failure: not a verdict, never a crash
        reason = f"environment {calling} raised {type(exc).__name__}: {exc}"[:1000]
        return Regraded(Score.zero(Status.INFRA_ERROR, reason), diverged, reward)
    cut = f"the log ends after {turn} turns, before the environment ended the episode"
    return Regraded(Score.zero(Status.TRUNCATED, cut), diverged or cut, reward)


def _next_reply(logged: Sequence[Message], start: int, added: Sequence[Message]) -> int:
    """Where the log's next policy turn is: the first assistant message from ``start`` on that is not
    one of the environment's own (an environment may show the model assistant turns, a few-shot
    prompt); the log's length when there is none."""
    own = sum(m.role == "assistant" for m in added)
    for index in range(start, len(logged)):
        if logged[index].role == "assistant":
            if not own:
                return index
            own -= 1
    return len(logged)


def _difference(replayed: Sequence[Message], logged: Sequence[Message], first: int, where: str) -> str | None:
    """Why the environment's messages are not the log's (``first``: the log's index of the first one)."""
    for i, (mine, theirs) in enumerate(zip(replayed, logged, strict=False)):
        if _canonical(mine) != _canonical(theirs):
            return f"{where} differs from the log's at message {first + i + 1} ({theirs.role})"
    if len(replayed) != len(logged):
        return f"{where}: the environment gave {len(replayed)} messages, the log has {len(logged)}"
    return None


def _canonical(message: Message) -> str:
    """A message as its JSON line holds it: a replayed one compares equal to its logged twin."""
    return json.dumps(message.to_dict(), sort_keys=True, ensure_ascii=False)


# ---- a run folder ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rescored:
    """One line of ``rescore.jsonl``: where the trajectory is, the environment that graded it, the
    old and new verdicts."""

    file: str
    offset: int
    line: int
    env: str
    task_id: str
    old: Score | None
    new: Score
    old_reward: float
    new_reward: float
    diverged: str | None

    @property
    def old_status(self) -> str:
        return UNSCORED if self.old is None else self.old.status

    @property
    def changed(self) -> bool:
        """The verdict moved: another status, score or reward (not merely another reason)."""
        if self.old is None:
            return True
        return (
            self.old.status != self.new.status
            or not math.isclose(self.old.value, self.new.value, abs_tol=1e-9)
            or not math.isclose(self.old_reward, self.new_reward, abs_tol=1e-9)
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Rescored:
        """A line of ``rescore.jsonl`` read back (``ludus view``); ``KeyError``, ``TypeError`` or
        ``ValueError`` for one that is not a verdict."""
        return cls(
            file=str(data["file"]),
            offset=int(data["offset"]),
            line=int(data["line"]),
            env=str(data["env"]),
            task_id=str(data["task_id"]),
            old=None if data["old"] is None else Score.from_dict(data["old"]),
            new=Score.from_dict(data["new"]),
            old_reward=float(data["old_reward"]),
            new_reward=float(data["new_reward"]),
            diverged=None if data["diverged"] is None else str(data["diverged"]),
        )

    def to_dict(self) -> dict[str, Any]:
        """The line as ``rescore.jsonl`` holds it, its keys in the order of the fields."""
        line = {f.name: getattr(self, f.name) for f in fields(self)}
        return line | {"old": None if self.old is None else self.old.to_dict(), "new": self.new.to_dict()}


@dataclass(frozen=True)
class SkippedLine:
    """A line of a trajectory file that was not re-graded, and why."""

    file: str
    line: int
    reason: str  # one of the summary's ``skipped`` keys
    detail: str


@dataclass
class RescoreReport:
    """What :func:`rescore_run` found: ``summary`` is what ``rescore.json`` holds."""

    run_dir: Path
    summary: dict[str, Any]
    skipped: list[SkippedLine] = field(default_factory=list)
    examples: list[Rescored] = field(default_factory=list)  # the first few that changed
    transitions: Counter[tuple[str, str]] = field(default_factory=Counter)  # (old status, new status): count
    changed_by_transition: Counter[tuple[str, str]] = field(default_factory=Counter)
    old_reward_mean: float = 0.0
    new_reward_mean: float = 0.0


def recorded_env_args(run_dir: str | Path) -> dict[str, dict[str, Any]]:
    """The environments a run folder records, by name, with the arguments they were made with: an
    evaluation's ``eval.json``, a training run's ``config.yaml`` (``env``/``env_args`` or ``envs``);
    nothing for a folder that records none (an agent proxy's)."""
    run_dir = Path(run_dir)
    evaluation, config = run_dir / "eval.json", run_dir / "config.yaml"
    if evaluation.is_file():
        record = _mapping(evaluation, json.loads)
        entries = [{"name": record.get("env"), "args": record.get("env_args") or {}}]
    elif config.is_file():
        import yaml

        record = _mapping(config, yaml.safe_load)
        entries = record.get("envs") or [{"name": record.get("env"), "args": record.get("env_args") or {}}]
    else:
        return {}
    found: dict[str, dict[str, Any]] = {}
    for entry in entries:
        name, args = (entry.get("name"), entry.get("args") or {}) if isinstance(entry, dict) else (None, None)
        if not isinstance(name, str) or not isinstance(args, dict):
            raise ValueError(f"{run_dir} records an environment without a name or with arguments that are no mapping")
        if found.get(name, args) != args:
            raise ValueError(
                f"{run_dir} mixes {name!r} with two sets of arguments and its trajectories do not say which: "
                "give the ones to grade with, --env-args"
            )
        found[name] = dict(args)
    return found


def _mapping(path: Path, parse: Callable[[str], Any]) -> dict[str, Any]:
    try:
        record = parse(path.read_text())
    except Exception as exc:  # noqa: BLE001 - JSON or YAML: either way the record is unreadable
        raise ValueError(f"{path} cannot be read ({type(exc).__name__}): rescore with --env and --env-args") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path} is not a mapping: rescore with --env and --env-args")
    return record


def rescore_run(
    run_dir: str | Path,
    *,
    env: str | None = None,
    env_args: Mapping[str, Any] | None = None,
    workers: int = 4,
    trust_run: bool = False,
    on_result: Callable[[Rescored], None] | None = None,
) -> RescoreReport:
    """Re-grade every trajectory of ``run_dir``'s trajectory files and write ``rescore.jsonl`` and
    ``rescore.json`` beside them (replacing an earlier rescore's).

    Each trajectory is graded by its own environment (``Trajectory.env``) made with the arguments
    the run records (:func:`recorded_env_args`), or by ``env`` and ``env_args`` when given (another
    environment, another version of its grader; ``env_args`` alone replaces the recorded arguments
    of every environment), on :func:`task_to_grade`'s task: a line whose task is refused is skipped
    (:data:`UNTRUSTED`). ``trust_run`` says the folder is the caller's own: its recorded arguments
    are taken (without it, recorded arguments are an error: they can name files, servers or the
    sandbox's backend) and its tasks graded as recorded. ``workers`` threads replay at once, each with environments of its own,
    closed at the end. Lines that are not trajectories are counted, never fatal. Raises
    ``FileNotFoundError`` for a folder without trajectory files and ``ValueError`` for an
    environment that cannot be made, for recorded arguments that name code (:data:`CODE_ARGS`) and
    for ``workers`` outside 1 to :data:`MAX_WORKERS`."""
    if not 1 <= workers <= MAX_WORKERS:
        raise ValueError(f"--workers must be between 1 and {MAX_WORKERS}, got {workers}")
    run_dir = Path(run_dir)
    files = trajectory_files(run_dir)
    if not files:
        raise FileNotFoundError(
            f"{run_dir} holds no trajectory file ({', '.join(TRAJECTORY_FILES)}): is it a run folder?"
        )
    makers = _Makers(recorded_env_args(run_dir), env_args, trust_run)
    if env is not None:
        makers.get(env)
    tally = _Tally(on_result)
    pool = _Workers(workers, trust_run)
    interrupted = False
    try:
        with _whole_file(run_dir / LINES) as out:
            window: deque[tuple[Future[Regraded], Rescoring]] = deque()  # in file order, as they are written
            for make, rescoring in _to_grade(files, env, makers, tally):
                window.append((pool.submit(make, rescoring.trajectory), rescoring))
                while len(window) >= 8 * workers:
                    out.write(tally.add(*window.popleft()))
            while window:
                out.write(tally.add(*window.popleft()))
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        pool.close(wait=not interrupted)  # Ctrl-C: a worker stuck in an environment that hangs is left behind
    report = tally.report(run_dir, env, makers.used_args)
    with _whole_file(run_dir / SUMMARY) as out:
        out.write(json.dumps(report.summary, indent=2) + "\n")
    return report


def _to_grade(
    files: Sequence[Path], env: str | None, makers: _Makers, tally: _Tally
) -> Iterator[tuple[Callable[[], Env], Rescoring]]:
    """Each trajectory of ``files`` and the maker of the environment that grades it: ``env``, else the
    one it names, else the run's only one. A line that holds none is tallied as skipped."""
    for path in files:
        for line in untrusted_lines(path):
            trajectory, problem = _trajectory(line)
            if trajectory is None:
                tally.skip(SkippedLine(path.name, line.number, *problem))
                continue
            name = env or trajectory.env or makers.sole
            if not name:
                detail = "the trajectory names no environment: give --env NAME"
                tally.skip(SkippedLine(path.name, line.number, NO_ENVIRONMENT, detail))
                continue
            try:
                make = makers.get(name)
            except UnknownEnvError as exc:
                raise ValueError(
                    f"{path.name} line {line.number} names environment {name[:100]!r}, which cannot be made here ({exc}): "
                    "install it, or grade with another, --env NAME"
                ) from None
            yield make, Rescoring(path.name, line.offset, line.number, name, trajectory)


@dataclass(frozen=True)
class Rescoring:
    """A trajectory sent to be re-graded, and where it came from."""

    file: str
    offset: int
    line: int
    env: str
    trajectory: Trajectory


class _Makers:
    """The checked maker of each environment a run's trajectories name, with the arguments it gets:
    ``env_args`` when given, else those the run recorded for it."""

    def __init__(self, recorded: dict[str, dict[str, Any]], env_args: Mapping[str, Any] | None, trusted: bool):
        self.recorded, self.env_args, self.trusted = recorded, env_args, trusted
        self.sole = next(iter(recorded)) if len(recorded) == 1 else None  # what a trajectory naming none was run on
        self.used_args: dict[str, dict[str, Any]] = {}
        self._makers: dict[str, Callable[[], Env]] = {}

    def get(self, name: str) -> Callable[[], Env]:
        """Made once here first, so that an argument the environment refuses is the user's error now,
        not an ``infra_error`` on every line."""
        if name not in self._makers:
            if self.env_args is not None:
                args = dict(self.env_args)
            else:
                args = self.recorded.get(name, {})
                code = next((key for key in CODE_ARGS if key in args), None)
                if code is not None:
                    raise ValueError(
                        f"the run records {code!r} among the arguments of {name!r}: it names code to run, and a run "
                        "folder can come from anyone; read it in the folder's eval.json or config.yaml and, if you "
                        "trust it, give the arguments with --env-args"
                    )
                if args and not self.trusted:
                    raise ValueError(
                        f"the run records arguments for {name!r} ({', '.join(sorted(args))}): a run folder can come "
                        "from anyone, and an argument can name a file, a server or the sandbox's backend. If the folder "
                        "is yours, rescore with --trust-run; else read them in its eval.json or config.yaml and give "
                        "the ones to grade with, --env-args"
                    )
            try:
                make, first = EnvPlacement(threads=1).env_factory(name, args)
            except (UnknownEnvError, ValueError, ImportError):  # the registry's and the arguments' own words
                raise
            except Exception as exc:  # noqa: BLE001 - an environment's constructor failing its own way
                raise ValueError(f"environment {name!r} could not be made: {type(exc).__name__}: {exc}") from None
            first.close()
            self._makers[name], self.used_args[name] = make, args
        return self._makers[name]


class _Tally:
    """The verdicts as they come, in file order: each one's line of ``rescore.jsonl`` and the counts."""

    def __init__(self, on_result: Callable[[Rescored], None] | None):
        self.on_result = on_result
        self.transitions: Counter[tuple[str, str]] = Counter()
        self.changed_by_transition: Counter[tuple[str, str]] = Counter()
        self.skipped: list[SkippedLine] = []
        self.examples: list[Rescored] = []
        self.diverged = 0
        self.old_reward = self.new_reward = 0.0

    def skip(self, line: SkippedLine) -> None:
        self.skipped.append(line)

    def add(self, job: Future[Regraded], where: Rescoring) -> str:
        """Wait for one verdict; its line of ``rescore.jsonl`` (none for a task refused)."""
        try:
            regraded, trajectory = job.result(), where.trajectory
        except UntrustedTask as refused:
            advice = "if the run folder is yours, grade it with --trust-run"
            self.skip(SkippedLine(where.file, where.line, UNTRUSTED, f"{refused}; {advice}"))
            return ""
        old = trajectory.score
        record = Rescored(
            where.file,
            where.offset,
            where.line,
            where.env,
            trajectory.task.id,
            old=old,
            new=regraded.score,
            # the return training counted; a log without token turns has its score alone
            old_reward=trajectory.reward if trajectory.turns else (old.value if old is not None else 0.0),
            new_reward=regraded.reward,
            diverged=regraded.diverged,
        )
        transition = (record.old_status, record.new.status)
        self.transitions[transition] += 1
        self.diverged += record.diverged is not None
        self.old_reward += record.old_reward
        self.new_reward += record.new_reward
        if record.changed:
            self.changed_by_transition[transition] += 1
            if len(self.examples) < EXAMPLES:
                self.examples.append(record)
        if self.on_result is not None:
            self.on_result(record)
        return json.dumps(record.to_dict(), ensure_ascii=False) + "\n"

    def report(self, run_dir: Path, env: str | None, used_args: dict[str, dict[str, Any]]) -> RescoreReport:
        total = sum(self.transitions.values())
        summary = {
            "env": env,
            "env_args": used_args,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "total": total,
            "changed": sum(self.changed_by_transition.values()),
            "transitions": _joined(self.transitions),
            "skipped": dict(Counter(line.reason for line in self.skipped)),
            "diverged": self.diverged,
        }
        return RescoreReport(
            run_dir,
            summary,
            self.skipped,
            self.examples,
            self.transitions,
            self.changed_by_transition,
            self.old_reward / total if total else 0.0,
            self.new_reward / total if total else 0.0,
        )


def _joined(transitions: Counter[tuple[str, str]]) -> dict[str, int]:
    """The summary's ``"<old> -> <new>"`` counts, most first (a logged status may hold `` -> `` itself:
    the report keeps the pairs)."""
    joined: Counter[str] = Counter()
    for (old, new), count in transitions.items():
        joined[f"{old} -> {new}"] += count
    return dict(joined.most_common())


def _trajectory(line: RecordLine) -> tuple[Trajectory, None] | tuple[None, tuple[str, str]]:
    """The trajectory a line holds, or why it holds none (a reason of the summary, and the detail)."""
    if line.cut:
        return None, (TOO_LONG, f"the line is over {len(line.raw):,} bytes")
    try:
        data = load_json(line.raw)
    except ValueError as exc:
        return None, (BROKEN_JSON, str(exc))
    try:
        return trajectory_of(data), None
    except ValueError as exc:
        return None, (NOT_A_TRAJECTORY, str(exc))


@contextmanager
def _whole_file(path: Path) -> Iterator[TextIO]:
    """A text file written under a new name of its own beside ``path``, then renamed onto it: ``path``
    is the old file or the whole new one, and a link planted in the folder is never written through."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # O_EXCL: never an existing file or link
    try:
        with open(descriptor, "w", encoding="utf-8") as out:
            yield out
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class _Workers:
    """``size`` threads replaying trajectories, each with environments of its own (one per maker),
    made on first need and closed by the thread that made them (an environment may hold objects
    bound to its thread, a SQLite connection)."""

    def __init__(self, size: int, trust_run: bool):
        self.trust_run = trust_run
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Env], Trajectory, Future[Regraded]] | None] = (
            queue.SimpleQueue()
        )
        self._threads = [threading.Thread(target=self._work, name="ludus-rescore", daemon=True) for _ in range(size)]
        for thread in self._threads:
            thread.start()

    def submit(self, make: Callable[[], Env], trajectory: Trajectory) -> Future[Regraded]:
        future: Future[Regraded] = Future()
        self._jobs.put((make, trajectory, future))
        return future

    def close(self, wait: bool = True) -> None:
        """Drop the jobs not started (a rescore interrupted), let each thread finish the one it runs,
        close its environments and end; without ``wait``, return at once (Ctrl-C: a thread stuck in
        an environment that hangs would never end)."""
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job[2].cancel()
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads if wait else ():
            thread.join()

    def _work(self) -> None:
        envs: dict[Callable[[], Env], Env] = {}
        runner: asyncio.Runner | None = None
        try:
            while (job := self._jobs.get()) is not None:
                make, trajectory, future = job
                try:
                    if make not in envs:
                        envs[make] = make()
                    env = envs[make]
                    if runner is None and has_async_hooks(env):
                        runner = asyncio.Runner()
                    for _ in range(1 + INFRA_RETRIES):
                        regraded = regrade(env, trajectory, runner=runner, trust_task=self.trust_run)
                        if not regraded.score.is_infra_error:
                            break
                except UntrustedTask as refused:
                    future.set_exception(refused)
                    continue
                except Exception as exc:  # noqa: BLE001 - the environment could not be made here
                    reason = f"environment could not be made: {type(exc).__name__}: {exc}"[:1000]
                    regraded = Regraded(Score.zero(Status.INFRA_ERROR, reason), None)
                future.set_result(regraded)
        finally:
            for made in envs.values():
                try:
                    made.close()
                except Exception:  # noqa: BLE001 - closing is best effort; the verdicts are in
                    logger.warning("closing environment %s failed", made.name, exc_info=True)
            if runner is not None:
                runner.close()
