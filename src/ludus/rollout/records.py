"""The files of trajectories Ludus writes, and reading them line by line without loading them whole.

    <eval run>/trajectories.jsonl     every episode of a ``ludus eval`` run
    <training run>/samples.jsonl      ``samples_per_step`` whole trajectories per step
    <proxy --out>/episodes.jsonl      every ended episode of ``ludus proxy``

Each line is one :class:`~ludus.core.types.Trajectory` as JSON (a training sample also has its
``step``). A record's place is its file and the byte offset of its line: what ``ludus view``
pages by, ``ludus rescore`` writes its verdicts against and the log importer names in errors.

A file may come from anyone (a log copied from elsewhere), so a reader that acts on its records
reads them with :func:`untrusted_lines` (a line too long is not loaded whole), :func:`load_json` (no
nesting deep enough to exhaust the stack later, no text that cannot be written back as UTF-8)
and :func:`trajectory_of` (every field of the type the code that uses it expects).
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ludus.core.tools import nested_deeper
from ludus.core.types import Trajectory

TRAJECTORY_FILES = ("trajectories.jsonl", "samples.jsonl", "episodes.jsonl")
LONGEST_LINE = 256 << 20  # bytes: a long-context agent's trajectory, every turn's token ids in it, is tens of MB
DEEPEST = 100  # levels of nesting of a record: a trajectory needs about ten; a thousand exhaust Python's stack
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # how JSON spells half of a UTF-16 surrogate pair
# characters a terminal acts on or hides: controls (escape sequences, carriage returns), zero-width
# and bidirectional marks, line separators
_UNSEEN = re.compile("[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")


@dataclass(frozen=True)
class RecordLine:
    """One non-blank line of a JSONL file: its 1-based line number, its byte offset and its bytes
    (the newline stripped); ``cut``: the line is longer than the reader's ``longest`` and ``raw``
    holds only its first bytes."""

    number: int
    offset: int
    raw: bytes
    cut: bool = False


def trajectory_files(folder: str | Path) -> list[Path]:
    """The trajectory files in a run folder (one of :data:`TRAJECTORY_FILES` or more)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder")
    return [folder / name for name in TRAJECTORY_FILES if (folder / name).is_file()]


def read_lines(path: str | Path, start: int = 0, longest: int | None = None) -> Iterator[RecordLine]:
    """The non-blank lines of ``path`` from byte ``start`` (a line's offset), one at a time. A last
    line without its newline is read too (a writer may have stopped mid-line: its JSON is then
    broken, which the reader of the record reports with the line number). Line numbers count from
    the file's start only when ``start`` is 0. With ``longest``, a line of more bytes comes ``cut``
    to its first ``longest`` bytes, the rest read past a chunk at a time: memory stays bounded."""
    with open_regular(path) as f:
        f.seek(start)
        offset, number = start, 0
        while raw := f.readline(-1 if longest is None else longest + 1):
            number += 1
            size = len(raw)
            if longest is not None and size > longest and not raw.endswith(b"\n"):
                size += _read_past_line(f)
                yield RecordLine(number, offset, raw[:longest], cut=True)
            elif (line := raw.rstrip(b"\r\n")).strip():
                yield RecordLine(number, offset, line)
            offset += size


def open_regular(path: str | Path) -> BinaryIO:
    """``path`` open for reading if it is a regular file (symlinks followed), else ``OSError``.
    Opened without waiting and checked once open: a FIFO or device put at the path, even after an
    earlier check of it, is never waited on."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def untrusted_lines(path: Path) -> Iterator[RecordLine]:
    """:func:`read_lines` for a reader that acts on the records of a file from anywhere: lines over
    :data:`LONGEST_LINE` bytes come ``cut``, and a file that cannot be read (no permission, a
    device's error) is a ``ValueError`` naming it, as a user's error is."""
    try:
        yield from read_lines(path, longest=LONGEST_LINE)
    except OSError as exc:
        raise ValueError(f"{path} cannot be read: {exc.strerror or exc}") from None


def _read_past_line(f: BinaryIO) -> int:
    """Read to the end of the line ``f`` is in, a chunk at a time; how many bytes that was."""
    skipped = 0
    while chunk := f.readline(1 << 20):
        skipped += len(chunk)
        if chunk.endswith(b"\n"):
            break
    return skipped


def load_json(raw: bytes) -> Any:
    """A line's JSON value; ``ValueError`` saying why it has none: not JSON or not UTF-8, nested
    deeper than :data:`DEEPEST` levels, or text with half of a surrogate pair (an escape no UTF-8
    file can hold: writing the record back would fail). A byte-order mark (a file saved by a
    Windows editor) is not an error."""
    try:
        value = json.loads(raw.removeprefix(b"\xef\xbb\xbf"))
    except RecursionError:
        raise ValueError(f"nested deeper than {DEEPEST} levels") from None
    if raw.count(b"[") + raw.count(b"{") > DEEPEST and nested_deeper(value, DEEPEST):
        raise ValueError(f"nested deeper than {DEEPEST} levels")
    if _SURROGATE_ESCAPE.search(raw):
        try:
            json.dumps(value, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise ValueError("a \\u escape names half of a UTF-16 surrogate pair, which is no character") from None
    return value


def trajectory_of(data: Any) -> Trajectory:
    """The trajectory a record's JSON holds; ``ValueError`` naming what is wrong. Besides what
    ``Trajectory.from_dict`` needs, every field must have the type the code using it expects
    (:func:`malformed`): ``from_dict`` keeps a list as a task id or a string as a reward."""
    try:
        trajectory = Trajectory.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise ValueError(f"{type(exc).__name__}: {exc}") from None
    problem = malformed(trajectory)
    if problem is not None:
        raise ValueError(problem)
    return trajectory


def malformed(trajectory: Trajectory) -> str | None:
    """What in ``trajectory`` has a type its readers cannot use (trainers, graders, reports), or
    ``None``: strings, objects, integer token ids and finite numbers where they belong."""
    task, score = trajectory.task, trajectory.score
    if not all(isinstance(v, str) for v in (task.id, task.prompt, task.source, trajectory.env)):
        return "task.id, task.prompt, task.source and env must be strings"
    if not isinstance(task.info, dict) or not isinstance(trajectory.info, dict):
        return "task.info and info must be objects"
    if trajectory.seed is not None and type(trajectory.seed) is not int:
        return f"seed must be an integer, got {trajectory.seed!r}"[:200]
    if score is not None and not (
        isinstance(score.reason, str)
        and isinstance(score.extracted, str | None)
        and isinstance(score.components, dict)
        and all(finite_number(v) for v in score.components.values())
    ):
        return "score: reason must be a string, extracted a string or null, components finite numbers"
    for k, message in enumerate(trajectory.messages):
        if not all(isinstance(v, str | None) for v in (message.tool_call_id, message.name)):
            return f"message {k}: tool_call_id and name must be strings"
        for call in message.tool_calls:
            if not (isinstance(call.name, str) and isinstance(call.id, str) and isinstance(call.arguments, dict)):
                return f"message {k}: a tool call needs a string name and id and arguments that are an object"
    for tool in trajectory.tools:
        if not (isinstance(tool.name, str) and isinstance(tool.description, str) and isinstance(tool.parameters, dict)):
            return "tools: a tool needs a string name and description and parameters that are an object"
    for k, turn in enumerate(trajectory.turns):
        ids = (turn.prompt_ids, turn.completion_ids)
        if not all(isinstance(part, list) and all(type(i) is int for i in part) for part in ids):
            return f"turn {k}: prompt_ids and completion_ids must be lists of integers"
        if not (isinstance(turn.logprobs, list) and all(map(finite_number, turn.logprobs))):
            return f"turn {k}: logprobs must be a list of finite numbers"
        if not finite_number(turn.reward) or not isinstance(turn.finish_reason, str):
            return f"turn {k}: reward must be a finite number and finish_reason a string"
    return None


def finite_number(value: Any) -> bool:
    """A number JSON can hold and arithmetic can use: not a bool, NaN, an infinity or an integer
    too large for a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def shown(value: object, limit: int = 300) -> str:
    """A record's text (a task id, a status, a reason) as a report prints it: at most ``limit``
    characters, and every character a terminal would act on or hide written as an escape (``\\x1b``,
    ``\\u200b``), so that a log cannot move the cursor, recolour the screen or pass for another."""
    text = str(value)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return _UNSEEN.sub(lambda m: m.group().encode("unicode_escape").decode(), text)
