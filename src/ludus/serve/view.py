"""``ludus view``: a local web page over run folders — metric curves, a paged table of every
trajectory, one trajectory in full, two runs side by side on one task (docs/view.md).

A run's trajectory files can hold hundreds of thousands of lines, each with every message and
token id, and a training run's grow while it is viewed. So nothing here holds a record whole:
each file is read once, as a stream, into small :class:`Row` summaries (the table's columns and
the line's byte offset), on a background thread whose first rows serve the first page before the
rest is read. A page is filtered and sorted over those summaries; a trajectory is read again from
its offset when it is opened. A file that grew is read on from its last line; one that shrank or
was replaced (a resumed training rewrites its samples) is read again from its start.

The page and its API are served to one browser on this machine: bound to 127.0.0.1, behind
:class:`~ludus.serve.browser.BrowserGuard` (no other site's page, no rebound DNS name), with a
strict Content-Security-Policy (scripts from this server's own files only). What a run holds is
model-written text, and a run folder may come from anyone: the page renders all of it as text, a
line or file of the wrong kind is shown as such (never stopping the index or a reply), what one
line puts in the index is bounded, and a FIFO or folder where a file should be is never read. A
client names nothing on disk: runs by their index, files by a name of
:data:`~ludus.rollout.records.TRAJECTORY_FILES`, records by an offset that must be a line start
of the file's index, screenshots by their number in a trajectory, served only from inside its run
folder or the screenshot folder its run recorded. Other accounts of this machine can connect to
127.0.0.1 too: the API answers only requests that carry the viewer's token (:class:`TokenGuard`);
the page's own files, which hold no data, are public (docs/view.md).
"""

from __future__ import annotations

import bisect
import hashlib
import hmac
import itertools
import json
import math
import os
import re
import stat
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Generic, TypeVar

import orjson
import yaml

from ludus.rollout.records import (
    DEEPEST,
    LONGEST_LINE,
    TRAJECTORY_FILES,
    RecordLine,
    finite_number,
    open_regular,
    read_lines,
    trajectory_files,
)
from ludus.rollout.rescore import LINES as RESCORE_LINES
from ludus.rollout.rescore import SUMMARY as RESCORE_SUMMARY
from ludus.rollout.rescore import Rescored

try:
    from fastapi import FastAPI, HTTPException, Query
    from fastapi.responses import FileResponse, JSONResponse, Response
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(f"ludus view needs FastAPI and uvicorn: pip install 'ludus[serve]' ({exc})") from exc

from ludus.serve.browser import BrowserGuard, BrowserRules
from ludus.serve.env_server import checked_token

PAGE = Path(__file__).parent / "view_page"
METRICS = "metrics.jsonl"
PAGE_ROWS, MAX_PAGE_ROWS = 50, 500
UNAUTHORIZED = (
    "the API needs the token ludus view printed: open the address it printed (…/#token=TOKEN), "
    "or send 'Authorization: Bearer TOKEN'"
)
PUBLISH_EVERY = 500  # rows read before the indexing thread shows them to requests
SCREENSHOT_LINE = re.compile(r"^Screenshot: (.+\.png)$", re.MULTILINE)
# what a web environment names its screenshots (envs/web/env.py): ENV-TASK-N.png
SCREENSHOT_NAME = re.compile(r"[A-Za-z0-9._:-]+-[0-9]+\.png")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# what one line may put in the index and a reply: a task id, env or status of megabytes is cut, and
# a file of ten thousand distinct ones offers the first of them as choices (they are model- or
# anyone-written: a run folder may come from elsewhere)
MAX_FIELD_CHARS = 300
MAX_CHOICES = 200
SETTINGS_BYTES = 1 << 20  # config.yaml, eval.json, summary.json, rescore.json: a few KB each
SETTINGS_VALUES = 100_000  # values of a recorded setting once YAML's aliases are written out
# the page's own files only: no inline script or style, nothing from elsewhere, no framing
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; connect-src 'self'; "
        b"base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-resource-policy", b"same-origin"),
]

T = TypeVar("T")


# ---- a JSONL file that may grow ------------------------------------------------------------------
class GrowingJsonl(Generic[T]):
    """The records of a JSONL file, read once and then only its new lines: :meth:`refresh` reads
    what was appended since the last call; a file that shrank or was replaced is read again from
    its start (``generation`` counts those restarts). A last line without its newline is taken
    only once it is whole JSON: a writer may be half way through it. ``parse`` turns a line into
    a record (None: skip it). :meth:`refresh_in_background` publishes records every
    :data:`PUBLISH_EVERY` lines, so that readers see the first ones while the rest is read."""

    def __init__(self, path: Path, parse: Callable[[RecordLine], T | None]) -> None:
        self.path, self.parse = path, parse
        self.records: list[T] = []
        self.generation = 0
        self.reading = False  # a background refresh is under way
        self.published = threading.Condition()  # notified when records are added and when a refresh ends
        self._lock = threading.Lock()  # one refresh at a time
        self._identity: tuple[int, int] | None = None
        self._size = 0
        self._last: tuple[int, int] | None = None  # (offset, line number) of the last line taken

    def refresh(self) -> None:
        with self._lock:
            status = _regular_file_status(self.path)
            identity = None if status is None else (status.st_dev, status.st_ino)
            if identity != self._identity or (status is not None and status.st_size < self._size):
                with self.published:
                    self.records = []
                    self.generation += 1
                self._identity, self._size, self._last = identity, 0, None
            if status is None or status.st_size == self._size:
                return
            self._size = status.st_size
            batch: list[T] = []
            try:
                for line, record in self._new_lines(status.st_size):
                    self._last = (line.offset, line.number)
                    if record is not None:
                        batch.append(record)
                    if len(batch) >= PUBLISH_EVERY:
                        batch = self._publish(batch)
            except OSError:  # gone, or no regular file since the check: what was read stays, the next refresh sees
                pass
            self._publish(batch)

    def refresh_in_background(self) -> None:
        """:meth:`refresh` on a thread of its own, unless one is under way or the file has not
        changed since the last; returns at once."""
        with self.published:
            if self.reading or self._unchanged():
                return
            self.reading = True
        threading.Thread(target=self._refresh_and_say_so, name=f"ludus-view-{self.path.name}", daemon=True).start()

    def wait(self, at_least: int) -> list[T]:
        """The records read so far, once there are ``at_least`` or no background refresh is under way."""
        with self.published:
            self.published.wait_for(lambda: len(self.records) >= at_least or not self.reading)
            return list(self.records)

    def _unchanged(self) -> bool:
        status = _regular_file_status(self.path)
        if status is None:
            return self._identity is None
        return (status.st_dev, status.st_ino) == self._identity and status.st_size == self._size

    def _refresh_and_say_so(self) -> None:
        try:
            self.refresh()
        finally:
            with self.published:
                self.reading = False
                self.published.notify_all()

    def _new_lines(self, size: int) -> Iterator[tuple[RecordLine, T | None]]:
        """The lines past the last one taken, numbered from the file's start, up to ``size``."""
        start, before = (0, 0) if self._last is None else (self._last[0], self._last[1] - 1)
        taken = None if self._last is None else self._last[0]
        for line in read_lines(self.path, start, longest=LONGEST_LINE):
            if line.offset == taken:
                continue  # read again only to number the lines after it
            end = line.offset + len(line.raw)
            if end > size or (end == size and not _whole_json(line.raw)):
                return  # written after the size was taken, or still being written: the next refresh reads it
            numbered = RecordLine(before + line.number, line.offset, line.raw)
            yield numbered, self.parse(numbered)

    def _publish(self, batch: list[T]) -> list[T]:
        with self.published:
            self.records.extend(batch)
            self.published.notify_all()
        return []


def _whole_json(raw: bytes) -> bool:
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    return True


def _loads(raw: bytes) -> Any:
    """A line's JSON value, NaN and infinities as null (Python's json writes them, ``1e999`` is
    one, and no browser reads them back); ValueError for one that is not JSON or nests too deep."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:  # orjson refuses NaN and infinities, and nesting past 1024 levels
        try:
            return json.loads(raw, parse_constant=lambda _: None, parse_float=_finite_or_none)
        except RecursionError:
            raise ValueError("nested too deep to read") from None


def _finite_or_none(text: str) -> float | None:
    number = float(text)
    return number if math.isfinite(number) else None


def _regular_file_status(path: Path) -> os.stat_result | None:
    """``path``'s status if it is a regular file (symlinks followed); None for a missing one, or a
    FIFO, device or folder put in its place, which reading would block on or fail."""
    try:
        status = path.stat()
    except OSError:
        return None
    return status if stat.S_ISREG(status.st_mode) else None


def _open_regular(path: Path) -> BinaryIO | None:
    """``path`` open for reading if it is a regular file; None otherwise (``records.open_regular``)."""
    try:
        return open_regular(path)
    except OSError:
        return None


def _line_at(path: Path, offset: int) -> bytes | None:
    """The line of ``path`` that starts at ``offset``, without its newline; None if the file is
    gone or is no regular file now, or the line is longer than :data:`LONGEST_LINE`."""
    f = _open_regular(path)
    if f is None:
        return None
    with f:
        f.seek(offset)
        line = f.readline(LONGEST_LINE + 1)
    return None if len(line) > LONGEST_LINE else line.rstrip(b"\r\n")


def _short(text: str) -> str:
    """``text`` as the index keeps it: one of more than :data:`MAX_FIELD_CHARS` characters is cut,
    with a digest of the whole so that two long ids sharing a beginning stay apart."""
    if len(text) <= MAX_FIELD_CHARS:
        return text
    digest = hashlib.blake2b(text.encode(errors="surrogatepass"), digest_size=6).hexdigest()
    tail = f"… ({len(text):,} characters, {digest})"
    return text[: MAX_FIELD_CHARS - len(tail)] + tail


def _count(value: Any) -> int:
    """How many token ids a turn's list holds (0 for anything that is no list)."""
    return len(value) if isinstance(value, list) else 0


# ---- the table's rows ----------------------------------------------------------------------------
@dataclass(slots=True)
class Row:
    """What the table shows of one line of a trajectory file, and where the line starts. Never
    the messages: the index of a large run must fit in memory. ``problem`` says why a line is no
    readable trajectory (it is listed all the same, so that nothing is hidden)."""

    offset: int
    line: int
    task_id: str
    env: str
    status: str
    reward: float | None
    components: dict[str, float] | None
    tokens: int
    chars: int
    turns: int
    step: int | None
    policy_version: int | None
    problem: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}  # type: ignore[attr-defined]


def summarize_line(line: RecordLine) -> Row:
    """The :class:`Row` of one line of a trajectory file (``Trajectory.to_dict``, a training
    sample's ``step`` beside it)."""
    if line.cut:
        return _unreadable(line, f"longer than {LONGEST_LINE >> 20} MB: not read")
    try:
        data = _loads(line.raw)
    except (ValueError, UnicodeDecodeError) as exc:
        return _unreadable(line, f"not JSON: {exc}")
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        return _unreadable(line, "not a trajectory (a JSON object with messages)")
    task = data.get("task") if isinstance(data.get("task"), dict) else {}
    score = data.get("score") if isinstance(data.get("score"), dict) else None
    turns = [t for t in data.get("turns") or [] if isinstance(t, dict)]
    messages = [m for m in data["messages"] if isinstance(m, dict)]
    replies = [m for m in messages if m.get("role") == "assistant"]
    rewards = [t["reward"] for t in turns if finite_number(t.get("reward"))]
    if rewards:
        reward: float | None = float(sum(rewards))  # the episode return, as training counts it
    else:
        reward = float(score["value"]) if score is not None and finite_number(score.get("value")) else None
    components = score.get("components") if score is not None else None
    if isinstance(components, dict):
        named = ((sys.intern(_short(str(k))), float(v)) for k, v in components.items() if finite_number(v))
        components = dict(itertools.islice(named, MAX_CHOICES))
    return Row(
        offset=line.offset,
        line=line.number,
        task_id=_short(str(task.get("id", ""))),
        env=sys.intern(_short(str(data.get("env") or ""))),
        status=sys.intern(_short(str(score.get("status", "")))) if score is not None else "unscored",
        reward=reward,
        components=components or None,
        tokens=sum(_count(t.get("completion_ids")) for t in turns),
        chars=sum(len(m["content"]) for m in replies if isinstance(m.get("content"), str)),
        turns=len(turns) or len(replies),
        step=data["step"] if isinstance(data.get("step"), int) else None,
        policy_version=data["policy_version"] if isinstance(data.get("policy_version"), int) else None,
    )


def _unreadable(line: RecordLine, problem: str) -> Row:
    return Row(line.offset, line.number, "", "", "unreadable", None, None, 0, 0, 0, None, None, problem)


# ---- a rescore's verdicts ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Verdict:
    """What ``ludus rescore`` found for one trajectory, as the table needs it; the reasons stay
    in rescore.jsonl, read again at ``offset`` when the trajectory is opened."""

    file: str
    trajectory_offset: int
    task_id: str
    old_status: str
    new_status: str
    old_reward: float
    new_reward: float
    changed: bool
    diverged: bool
    offset: int  # of its line in rescore.jsonl

    def to_dict(self) -> dict[str, Any]:
        return {
            "old_status": self.old_status,
            "new_status": self.new_status,
            "old_reward": self.old_reward,
            "new_reward": self.new_reward,
            "changed": self.changed,
            "diverged": self.diverged,
        }


def _verdict(line: RecordLine) -> Verdict | None:
    try:
        data = _loads(line.raw)
        rescored = Rescored.from_dict(data)
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
        return None  # not a verdict (a huge number, a list, NaN): ludus rescore reports its own problems
    return Verdict(
        file=rescored.file,
        trajectory_offset=rescored.offset,
        task_id=_short(rescored.task_id),
        old_status=sys.intern(_short(rescored.old_status)),
        new_status=sys.intern(_short(rescored.new.status)),
        old_reward=rescored.old_reward,
        new_reward=rescored.new_reward,
        changed=rescored.changed,
        diverged=rescored.diverged is not None,
        offset=line.offset,
    )


@dataclass(frozen=True)
class Verdicts:
    """A rescore's verdicts on one trajectory file, by the trajectory's offset; ``stamp`` changes
    when the rescore does."""

    by_offset: dict[int, Verdict]
    stamp: tuple[int, int]

    def of(self, row: Row) -> Verdict | None:
        """The verdict on ``row``'s trajectory; None if there is none, or if the file was rewritten
        since (another task now starts at that offset)."""
        verdict = self.by_offset.get(row.offset)
        return verdict if verdict is not None and verdict.task_id == row.task_id else None


# ---- one trajectory file -------------------------------------------------------------------------
COLUMNS = ("line", "task_id", "env", "step", "status", "reward", "tokens", "chars", "turns", "policy_version")
RESCORE_COLUMNS = ("new_status", "new_reward")


@dataclass(frozen=True)
class RowQuery:
    """Which rows of a file, in which order: filters (all must hold) and a sort column (a
    :data:`COLUMNS` name, ``new_status``/``new_reward`` from a rescore, or ``c:NAME``, a reward
    component); rows without the value come last either way."""

    env: str = ""
    status: str = ""
    changed: bool = False
    text: str = ""
    sort: str = "line"
    descending: bool = False

    def check(self) -> RowQuery:
        if self.sort not in COLUMNS and self.sort not in RESCORE_COLUMNS and not self.sort.startswith("c:"):
            known = ", ".join((*COLUMNS, *RESCORE_COLUMNS, "c:COMPONENT"))
            raise HTTPException(400, f"sort must be one of {known}; got {self.sort!r}")
        return self

    @property
    def first_rows_first(self) -> bool:
        """Whether the answer begins with the file's first lines: a page of it needs no more of
        the index than its own rows."""
        return self == RowQuery()


class TrajectoryFile:
    """The index of one trajectory file: its rows in file order (so by increasing offset), kept
    up to date by a background thread; queries run over whatever is indexed so far."""

    def __init__(self, path: Path) -> None:
        self.path, self.name = path, path.name
        self.lines: GrowingJsonl[Row] = GrowingJsonl(path, summarize_line)
        self._last_query: tuple[Any, list[Row]] | None = None

    @property
    def complete(self) -> bool:
        """Whether the index holds every line the file had when it was last looked at."""
        return not self.lines.reading

    def rows(self, at_least: int = 0) -> list[Row]:
        """The rows indexed so far, once ``at_least`` are or the file has no more; reading what
        the file gained since goes on in the background."""
        self.lines.refresh_in_background()
        return self.lines.wait(at_least)

    def row_at(self, offset: int) -> Row:
        """The row whose line starts at ``offset``: any other offset is refused."""
        rows = self.rows()
        if not rows or rows[-1].offset < offset:
            rows = self.rows(at_least=sys.maxsize)  # it may lie past what is indexed yet
        k = bisect.bisect_left(rows, offset, key=lambda row: row.offset)
        if k < len(rows) and rows[k].offset == offset:
            return rows[k]
        raise HTTPException(404, f"no line of {self.name} starts at byte {offset}")

    def read(self, offset: int) -> tuple[Row, dict[str, Any]]:
        """The whole record at ``offset`` (a line start of the index), read from disk."""
        row = self.row_at(offset)
        raw = _line_at(self.path, offset)
        if raw is None:
            raise HTTPException(
                404,
                f"{self.name}, line {row.line} cannot be read: longer than {LONGEST_LINE >> 20} MB, or the file is gone",
            )
        try:
            data = _loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HTTPException(422, f"{self.name}, line {row.line} is not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise HTTPException(422, f"{self.name}, line {row.line} is not a trajectory")
        return row, data

    def select(self, query: RowQuery, verdicts: Verdicts, rows: list[Row]) -> list[Row]:
        """``rows`` filtered and sorted by ``query``; the last answer is kept for the next page."""
        key = (query, len(rows), self.lines.generation, verdicts.stamp)
        if self._last_query is not None and self._last_query[0] == key:
            return self._last_query[1]
        text = query.text.lower()
        chosen = [
            row
            for row in rows
            if (not query.env or row.env == query.env)
            and (not query.status or row.status == query.status)
            and (not text or text in row.task_id.lower())
            and (not query.changed or ((v := verdicts.of(row)) is not None and v.changed))
        ]
        if query.sort != "line":
            value = _sort_value(query.sort, verdicts)
            present = [row for row in chosen if value(row) is not None]
            present.sort(key=value, reverse=query.descending)
            chosen = present + [row for row in chosen if value(row) is None]
        elif query.descending:
            chosen.reverse()
        self._last_query = (key, chosen)
        return chosen


def components_of(rows: list[Row]) -> list[str]:
    """The reward components the rows' scores name (the first :data:`MAX_CHOICES` in order)."""
    names: set[str] = set()
    for row in rows:
        if row.components:
            names.update(row.components)
    return sorted(names)[:MAX_CHOICES]


def _sort_value(column: str, verdicts: Verdicts) -> Callable[[Row], Any]:
    if column.startswith("c:"):
        name = column[2:]
        return lambda row: row.components.get(name) if row.components else None
    if column in RESCORE_COLUMNS:
        return lambda row: getattr(v, column) if (v := verdicts.of(row)) is not None else None
    return lambda row: getattr(row, column)


# ---- a run folder --------------------------------------------------------------------------------
@dataclass
class Run:
    """One run folder: its trajectory files, metrics and rescore, and what it recorded about
    itself (a training run's config.yaml, an evaluation's eval.json and summary.json)."""

    index: int
    path: Path
    name: str
    files: dict[str, TrajectoryFile]
    metrics: GrowingJsonl[dict[str, Any]]
    verdicts: GrowingJsonl[Verdict]
    settings: dict[str, Any] = field(default_factory=dict)
    _verdicts_by_file: tuple[tuple[int, int], dict[str, dict[int, Verdict]]] | None = None

    @classmethod
    def open(cls, index: int, folder: str | Path, name: str) -> Run:
        path = Path(folder).resolve()
        files = {p.name: TrajectoryFile(p) for p in trajectory_files(path)}  # FileNotFoundError: not a folder
        if not files and not (path / METRICS).is_file():
            raise ValueError(
                f"{folder} holds no trajectories ({', '.join(TRAJECTORY_FILES)}) and no {METRICS}: give the folder "
                "of a `ludus train`, `ludus eval` or `ludus proxy --out` run"
            )
        run = cls(
            index,
            path,
            name,
            files,
            GrowingJsonl(path / METRICS, _numbers),
            GrowingJsonl(path / RESCORE_LINES, _verdict),
        )
        run.settings = run._recorded_settings()
        for trajectory_file in files.values():
            trajectory_file.lines.refresh_in_background()  # indexing starts now: the first page need not wait for it
        return run

    def _recorded_settings(self) -> dict[str, Any]:
        settings: dict[str, Any] = {}
        for name in ("config.yaml", "eval.json", "summary.json"):
            value = _setting(self.path / name)
            if isinstance(value, dict):
                settings[name] = value
        return settings

    def trajectory_file(self, name: str) -> TrajectoryFile:
        if name not in self.files:
            raise HTTPException(404, f"run {self.index} has no trajectory file {name!r}; it has {sorted(self.files)}")
        return self.files[name]

    def verdicts_of(self, name: str) -> Verdicts:
        """The rescore's verdicts on file ``name`` (rescore.jsonl read again when it changed)."""
        self.verdicts.refresh()
        stamp = (self.verdicts.generation, len(self.verdicts.records))
        if self._verdicts_by_file is None or self._verdicts_by_file[0] != stamp:
            by_file: dict[str, dict[int, Verdict]] = {}
            for verdict in self.verdicts.records:
                by_file.setdefault(verdict.file, {})[verdict.trajectory_offset] = verdict
            self._verdicts_by_file = (stamp, by_file)
        return Verdicts(self._verdicts_by_file[1].get(name, {}), stamp)

    def verdict_in_full(self, verdict: Verdict) -> dict[str, Any] | None:
        """The rescore.jsonl line of ``verdict``: both scores with their reasons (None if a new
        rescore has replaced the file since it was read)."""
        line = _line_at(self.path / RESCORE_LINES, verdict.offset)
        if line is None:
            return None
        try:
            data = _loads(line)
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(data, dict) or (data.get("file"), data.get("offset")) != (
            verdict.file,
            verdict.trajectory_offset,
        ):
            return None
        return {key: data.get(key) for key in ("old", "new", "old_reward", "new_reward", "diverged", "env")}

    def rescore_summary(self) -> dict[str, Any] | None:
        value = _setting(self.path / RESCORE_SUMMARY)
        return value if isinstance(value, dict) else None

    def screenshot_folders(self) -> list[Path]:
        """Where screenshots of this run may be served from: the run folder, and the folders its
        environments were told to save screenshots in (``screenshots=`` of a web environment)."""
        folders = [self.path]
        config = self.settings.get("config.yaml", {})
        env_args = [self.settings.get("eval.json", {}).get("env_args"), config.get("env_args")]
        env_args += [entry.get("args") for entry in config.get("envs") or [] if isinstance(entry, dict)]
        for args in env_args:
            if isinstance(args, dict) and isinstance(args.get("screenshots"), str):
                folders.append(self._located(args["screenshots"]) or Path(args["screenshots"]).resolve())
        return folders

    def _located(self, written: str) -> Path | None:
        """A path as a trajectory wrote it, which may be relative to wherever the run was started:
        the first of here, the run folder and the folders above it where it exists."""
        path = Path(written)
        try:
            if path.is_absolute():
                return path.resolve() if path.exists() else None
            for base in (Path.cwd(), self.path, *self.path.parents):
                if (base / path).exists():
                    return (base / path).resolve()
        except (OSError, RuntimeError):  # a name too long for the disk, a loop of links: not found
            return None
        return None

    def screenshot(self, written: str) -> Path | None:
        """The file a trajectory's ``Screenshot: PATH`` names, if it is a PNG inside the run folder,
        or one named as a web environment names its screenshots right inside a folder the run
        recorded (a hostile record's ``screenshots: "/"`` must not show any picture of the machine's);
        None otherwise."""
        path = self._located(written)
        if path is None or path.suffix.lower() != ".png" or not path.is_file():
            return None
        recorded = self.screenshot_folders()[1:]
        inside = path.is_relative_to(self.path) or (
            SCREENSHOT_NAME.fullmatch(path.name) is not None and path.parent in recorded
        )
        if not inside:
            return None
        try:
            with path.open("rb") as image:
                return path if image.read(len(PNG_SIGNATURE)) == PNG_SIGNATURE else None
        except OSError:
            return None

    def describe(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "path": str(self.path),
            "files": [
                {"name": name, "rows": len(f.lines.records), "complete": f.complete} for name, f in self.files.items()
            ],
            "metrics": (self.path / METRICS).is_file(),
            "settings": self.settings,
            "rescore": self.rescore_summary(),
        }


def _setting(path: Path) -> Any:
    """What a small file the run wrote about itself holds (YAML for ``.yaml``, else JSON); None
    if it is missing, no regular file, larger than :data:`SETTINGS_BYTES`, unreadable, or YAML
    whose aliases write out to more than :data:`SETTINGS_VALUES` values (or to no end)."""
    f = _open_regular(path)
    if f is None:
        return None
    try:
        with f:
            raw = f.read(SETTINGS_BYTES + 1)
        if len(raw) > SETTINGS_BYTES:
            return None
        value = yaml.safe_load(raw) if path.suffix == ".yaml" else _loads(raw)
        if not _written_out_within(value, SETTINGS_VALUES, DEEPEST):
            return None
        return _loads(json.dumps(value, default=str).encode())  # JSON's kinds: no NaN, no YAML dates
    except (OSError, ValueError, yaml.YAMLError, RecursionError):
        return None


def _written_out_within(value: Any, most: int, deepest: int) -> bool:
    """Whether ``value`` written out (a shared part once per place it is used) holds at most
    ``most`` values nested at most ``deepest`` levels; counting stops there, so that YAML's alias
    bomb or a list that holds itself costs no more."""
    pending, seen = [(value, 0)], 0
    while pending:
        item, depth = pending.pop()
        seen += 1
        if seen > most or depth > deepest:
            return False
        if isinstance(item, dict | list):
            pending += ((inner, depth + 1) for inner in (item.values() if isinstance(item, dict) else item))
    return True


def _numbers(line: RecordLine) -> dict[str, Any] | None:
    """A metrics line's numbers (None for a line that is not a JSON object)."""
    try:
        data = _loads(line.raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    return {key: value for key, value in data.items() if finite_number(value)}


def screenshots_in(trajectory: dict[str, Any]) -> list[tuple[int, str]]:
    """``(message index, path)`` of every screenshot a trajectory's environment recorded: the
    ``Screenshot: PATH`` lines a web environment puts in the page views it shows (user and tool
    messages only: the model's own text names nothing)."""
    found = []
    for k, message in enumerate(trajectory.get("messages") or []):
        if isinstance(message, dict) and message.get("role") in ("user", "tool"):
            content = message.get("content")
            if isinstance(content, str):
                found += [(k, match) for match in SCREENSHOT_LINE.findall(content)]
    return found


def turn_summaries(trajectory: dict[str, Any]) -> list[dict[str, Any]]:
    """Each policy turn as the page shows it: token counts, mean log-prob, reward, why it ended
    (not the token ids themselves: a long episode repeats its history in every prompt)."""
    out = []
    for turn in trajectory.get("turns") or []:
        if not isinstance(turn, dict):
            continue
        logprobs = turn.get("logprobs")
        logprobs = [p for p in logprobs if finite_number(p)] if isinstance(logprobs, list) else []
        out.append(
            {
                "prompt_tokens": _count(turn.get("prompt_ids")),
                "completion_tokens": _count(turn.get("completion_ids")),
                "mean_logprob": sum(logprobs) / len(logprobs) if logprobs else None,
                "reward": turn.get("reward"),
                "finish_reason": turn.get("finish_reason"),
            }
        )
    return out


# ---- the application -----------------------------------------------------------------------------
def open_runs(folders: Iterable[str | Path]) -> list[Run]:
    """The runs of ``folders``, each named by its folder (with its parent's name where two share
    one); FileNotFoundError or ValueError names a folder that is none."""
    paths = [Path(folder) for folder in folders]
    if not paths:
        raise ValueError("give at least one run folder")
    names = [p.resolve().name for p in paths]
    shown = [f"{p.resolve().parent.name}/{n}" if names.count(n) > 1 else n for p, n in zip(paths, names, strict=True)]
    return [Run.open(k, path, name) for k, (path, name) in enumerate(zip(paths, shown, strict=True))]


class SecurityHeaders:
    """ASGI middleware: :data:`SECURITY_HEADERS` on every response."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        return await self.app(scope, receive, send_with_headers)


class TokenGuard:
    """ASGI middleware: a request under ``/api/`` must carry ``Authorization: Bearer TOKEN`` (the
    scheme's case aside), else 401. Only the header counts, never a query parameter: a token in a
    URL ends up in logs and history. The page learns the token from its address's fragment, which
    browsers never send."""

    def __init__(self, app: Any, token: bytes) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/api/") or self._authorized(scope):
            return await self.app(scope, receive, send)
        body = orjson.dumps({"detail": UNAUTHORIZED})
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"www-authenticate", b"Bearer"),
        ]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _authorized(self, scope: dict[str, Any]) -> bool:
        sent = next((value for name, value in scope["headers"] if name == b"authorization"), b"")
        scheme, _, credentials = sent.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(credentials.strip(b" "), self.token)


def view_app(runs: list[Run], token: str) -> FastAPI:
    """The page and its JSON API over ``runs``: GET only, so that a page of this server's origin
    sends no ``Origin`` and :class:`BrowserGuard` refuses every other site's; the API only with
    ``token`` (:class:`TokenGuard`)."""
    required = checked_token(token)
    if required is None:
        raise ValueError("ludus view needs a token: the API shows every run to whoever holds it")
    app = FastAPI(title="ludus view", docs_url=None, redoc_url=None, openapi_url=None)

    def run_at(index: int) -> Run:
        if not 0 <= index < len(runs):
            raise HTTPException(404, f"there are runs 0 to {len(runs) - 1}; got {index}")
        return runs[index]

    def page_file(name: str, media_type: str) -> Callable[[], FileResponse]:
        def serve() -> FileResponse:
            return FileResponse(PAGE / name, media_type=media_type, headers={"cache-control": "no-cache"})

        return serve

    app.get("/", include_in_schema=False)(page_file("index.html", "text/html; charset=utf-8"))
    app.get("/view.js", include_in_schema=False)(page_file("view.js", "text/javascript; charset=utf-8"))
    app.get("/view.css", include_in_schema=False)(page_file("view.css", "text/css; charset=utf-8"))

    @app.get("/favicon.ico", include_in_schema=False)
    def no_icon() -> Response:
        return Response(status_code=204)

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"ok": True, "runs": len(runs)}

    @app.get("/api/runs")
    def list_runs() -> list[dict[str, Any]]:
        return [run.describe() for run in runs]

    @app.get("/api/runs/{run}/files/{name}/rows")
    def rows(
        run: int,
        name: str,
        start: int = Query(0, ge=0),
        limit: int = Query(PAGE_ROWS, ge=1, le=MAX_PAGE_ROWS),
        env: str = "",
        status: str = "",
        changed: bool = False,
        text: str = Query("", max_length=200),
        sort: str = "line",
        descending: bool = False,
    ) -> dict[str, Any]:
        owner = run_at(run)
        trajectory_file = owner.trajectory_file(name)
        query = RowQuery(env, status, changed, text, sort, descending).check()
        verdicts = owner.verdicts_of(name)
        indexed = trajectory_file.rows(at_least=start + limit if query.first_rows_first else 0)
        chosen = trajectory_file.select(query, verdicts, indexed)
        page = []
        for row in chosen[start : start + limit]:
            shown = row.to_dict()
            verdict = verdicts.of(row)
            if verdict is not None:
                shown["rescore"] = verdict.to_dict()
            page.append(shown)
        return {
            "total": len(chosen),
            "indexed": len(indexed),
            "complete": trajectory_file.complete,
            "rows": page,
            "envs": sorted({row.env for row in indexed})[:MAX_CHOICES],
            "statuses": sorted({row.status for row in indexed})[:MAX_CHOICES],
            "components": components_of(indexed),
            "rescored": bool(verdicts.by_offset),
        }

    @app.get("/api/runs/{run}/files/{name}/records/{offset}")
    def record(run: int, name: str, offset: int) -> JSONResponse:
        owner = run_at(run)
        row, data = owner.trajectory_file(name).read(offset)
        screenshots = [
            {"message": k, "path": path, "served": owner.screenshot(path) is not None}
            for k, path in screenshots_in(data)
        ]
        verdict = owner.verdicts_of(name).of(row)
        rescore = None if verdict is None else owner.verdict_in_full(verdict)
        shown = {key: value for key, value in data.items() if key != "turns"}
        body = {
            "run": owner.index,
            "file": name,
            "row": row.to_dict(),
            "trajectory": shown,
            "turns": turn_summaries(data),
            "screenshots": screenshots,
            "rescore": rescore,
        }
        try:
            return JSONResponse(body)
        except RecursionError:  # read by a parser that goes deeper than the one writing it back
            raise HTTPException(422, f"{name}, line {row.line} is nested too deep to show") from None

    @app.get("/api/runs/{run}/files/{name}/records/{offset}/screenshots/{number}")
    def screenshot(run: int, name: str, offset: int, number: int) -> Response:
        owner = run_at(run)
        _, data = owner.trajectory_file(name).read(offset)
        shots = screenshots_in(data)
        if not 0 <= number < len(shots):
            raise HTTPException(404, f"the trajectory recorded {len(shots)} screenshots; there is no number {number}")
        path = owner.screenshot(shots[number][1])
        if path is None:
            raise HTTPException(404, "that screenshot is not a PNG inside the run folder or its screenshot folder")
        return FileResponse(path, media_type="image/png")  # streamed: a PNG of gigabytes is never held whole

    @app.get("/api/metrics")
    def metrics(keys: str = Query("", max_length=4000)) -> dict[str, Any]:
        wanted = {key: None for key in keys.split(",") if key}  # each once, in the order asked
        every: set[str] = set()
        out = []
        for run in runs:
            if not (run.path / METRICS).is_file():
                continue
            run.metrics.refresh()
            series: dict[str, list[list[Any]]] = {key: [] for key in wanted}
            for record in run.metrics.records:
                every.update(record)
                if "step" in record:  # one pass, each record's keys met with those asked
                    for key in wanted.keys() & record.keys():
                        series[key].append([record["step"], record[key]])
            out.append({"run": run.index, "name": run.name, "series": series})
        every.discard("step")
        return {"keys": sorted(every), "runs": out}

    @app.get("/api/compare")
    def compare(
        a: int,
        b: int,
        a_file: str = "",
        b_file: str = "",
        start: int = Query(0, ge=0),
        limit: int = Query(PAGE_ROWS, ge=1, le=MAX_PAGE_ROWS),
        text: str = Query("", max_length=200),
    ) -> dict[str, Any]:
        left, right = run_at(a), run_at(b)
        left_file = left.trajectory_file(a_file or next(iter(left.files), ""))
        right_file = right.trajectory_file(b_file or next(iter(right.files), ""))
        right_rows: dict[str, Row] = {}
        for row in right_file.rows(at_least=sys.maxsize):
            right_rows.setdefault(row.task_id, row)
        seen: set[str] = set()
        shared = []
        needle = text.lower()
        for row in left_file.rows(at_least=sys.maxsize):
            if row.task_id and row.task_id in right_rows and row.task_id not in seen:
                seen.add(row.task_id)
                if needle in row.task_id.lower():
                    shared.append((row, right_rows[row.task_id]))
        return {
            "a_file": left_file.name,
            "b_file": right_file.name,
            "total": len(shared),
            "tasks": [
                {"task_id": x.task_id, "a": x.to_dict(), "b": y.to_dict()} for x, y in shared[start : start + limit]
            ],
        }

    app.add_middleware(TokenGuard, token=required)
    app.add_middleware(BrowserGuard, rules=BrowserRules())
    app.add_middleware(SecurityHeaders)
    return app
