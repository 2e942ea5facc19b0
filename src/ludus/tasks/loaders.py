"""Tasks from dataset files: JSON Lines and Parquet, with presets for GSM8K and MATH.

The whole file is read and checked when it is loaded, so a malformed row stops the run
before training starts, with an error naming the file, the line (or row) and the field.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ludus.core.types import Task
from ludus.tasks.answers import boxed_contents
from ludus.tasks.procedural import in_eval_bucket

Preset = Literal["gsm8k", "math"]


class TaskFileError(ValueError):
    """A dataset file cannot be turned into tasks; the message says where and what to do."""

    def __init__(self, path: Path, message: str, *, where: str | None = None, field: str | None = None):
        self.path, self.where, self.field = path, where, field
        super().__init__(f"{path}, {where}: {message}" if where else f"{path}: {message}")


def gsm8k_gold(solution: str) -> str:
    """The number after ``####`` in a GSM8K solution, without thousands separators."""
    _, marker, gold = solution.rpartition("####")
    gold = gold.strip().replace(",", "")
    if not marker or not gold:
        raise ValueError("has no '#### <answer>' line")
    return gold


def last_boxed(solution: str) -> str:
    """The content of the last ``\\boxed{...}`` in a MATH solution (braces may nest)."""
    found = boxed_contents(solution)
    if not found:
        raise ValueError("has no complete \\boxed{...} answer")
    if not found[-1]:
        raise ValueError("has an empty \\boxed{}")
    return found[-1]


@dataclass(frozen=True)
class _Fields:
    prompt: str
    answer: str
    gold: Callable[[str], str] | None = None  # turns the answer column into the gold answer


PRESETS: dict[str, _Fields] = {
    "gsm8k": _Fields("question", "answer", gsm8k_gold),
    "math": _Fields("problem", "solution", last_boxed),
}


class FileTasks:
    """The tasks of one dataset file (or of one split of it), in file order; a
    :class:`~ludus.core.env.TaskSource`."""

    def __init__(self, path: Path, tasks: list[Task], *, split: str | None = None):
        self.path, self.split = path, split
        self._tasks = tasks
        self.size: int | None = len(tasks)

    def rows(self) -> list[Task]:
        return list(self._tasks)

    def get(self, index: int) -> Task:
        if not 0 <= index < len(self._tasks):
            where = f"the {self.split} split of {self.path}" if self.split else str(self.path)
            raise IndexError(f"task index {index} is out of range: {where} has {len(self._tasks)} tasks")
        return self._tasks[index]


def _jsonl_rows(path: Path) -> Iterator[tuple[str, Any]]:
    packed = path.suffix.lower() == ".gz"  # .jsonl.gz: HumanEval's own form
    try:
        with gzip.open(path, "rt", encoding="utf-8") if packed else path.open(encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise TaskFileError(
                        path,
                        f"invalid JSON ({exc.msg} at column {exc.colno}); each line must be one JSON object",
                        where=f"line {number}",
                    ) from exc
                yield f"line {number}", row
    except (OSError, EOFError) as exc:
        if not packed:
            raise
        raise TaskFileError(path, f"cannot be read as gzip-compressed JSON Lines ({exc})") from exc


def _parquet_rows(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError(f"reading {path} needs pyarrow: pip install 'ludus[parquet]'") from exc
    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises several types for a damaged or foreign file
        raise TaskFileError(path, f"cannot be read as Parquet ({type(exc).__name__}: {exc})") from exc
    for number, row in enumerate(rows, start=1):
        yield f"row {number}", row


_READERS = {".jsonl": _jsonl_rows, ".jsonl.gz": _jsonl_rows, ".parquet": _parquet_rows}


def split_files(
    path: str | None, eval_path: str | None, load: Callable[[str], FileTasks], eval_fraction: float = 0.1
) -> dict[str, Callable[[], FileTasks]]:
    """Loaders for a file-backed environment's splits; empty without a file. Each file loads once,
    when a split is first asked for.

    ``eval_path`` given: ``path`` is the train split and ``eval_path`` the eval split. ``path``
    alone: :func:`hold_out` splits the file, so evaluation never scores rows the policy trained
    on (scoring the training file itself would hide overfitting). A file of a single task has
    nothing to hold out: it trains, and asking it for eval raises :class:`TaskFileError`."""
    if eval_path is not None and path is None:
        raise ValueError("eval_path needs path (the training file)")
    if not 0.0 < eval_fraction < 1.0:
        raise ValueError(f"eval_fraction must be strictly between 0 and 1, got {eval_fraction}")
    if path is None:
        return {}
    if eval_path is not None:
        return {"train": functools.cache(lambda: load(path)), "eval": functools.cache(lambda: load(eval_path))}
    halves = functools.cache(lambda: hold_out(load(path), eval_fraction))

    def held_out() -> FileTasks:
        train, held = halves()
        if held is None:
            raise TaskFileError(
                train.path,
                f"has one task id only ({train.size} row(s)): nothing can be held out for evaluation without "
                "scoring the training task; pass eval_path (a separate evaluation file)",
            )
        return held

    return {"train": lambda: halves()[0], "eval": held_out}


def hold_out(tasks: FileTasks, eval_fraction: float) -> tuple[FileTasks, FileTasks | None]:
    """(train, eval) of one file: eval holds the rows whose task id falls in the eval bucket
    (:func:`~ludus.tasks.procedural.in_eval_bucket`), train the others; rows sharing an id stay
    together. Neither side is empty: with no id in the bucket the id of smallest hash goes to
    eval, with every id in it the one of largest hash stays in train. Eval is ``None`` when the
    file has one task id only."""
    rows = tasks.rows()
    ids = sorted({task.id for task in rows}, key=lambda task_id: hashlib.sha256(task_id.encode()).digest())
    if len(ids) < 2:
        return tasks, None
    held = {task_id for task_id in ids if in_eval_bucket(task_id, eval_fraction)}
    if not held:
        held = {ids[0]}  # ids are in the order in_eval_bucket thresholds: this one is nearest the bucket
    elif len(held) == len(ids):
        held.discard(ids[-1])
    return (
        FileTasks(tasks.path, [task for task in rows if task.id not in held], split="train"),
        FileTasks(tasks.path, [task for task in rows if task.id in held], split="eval"),
    )


def read_rows(path: str | Path) -> Iterator[tuple[str, Any]]:
    """(where, row) for every row of a ``.jsonl``, ``.jsonl.gz`` or ``.parquet`` file; ``where`` is
    "line 3" or "row 3"."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"task file not found: {path}")
    name = path.name.lower()
    reader = next((read for suffix, read in _READERS.items() if name.endswith(suffix)), None)
    if reader is None:
        raise TaskFileError(path, f"unsupported file type {path.suffix!r}; use one of {', '.join(_READERS)}")
    return reader(path)


def load_tasks(
    path: str | Path,
    *,
    prompt_field: str | None = None,
    answer_field: str | None = None,
    id_field: str | None = None,
    fields: Preset | None = None,
    limit: int | None = None,
) -> FileTasks:
    """Read ``path`` (``.jsonl`` or ``.parquet``) into tasks.

    Without a preset the prompt and answer come from the ``prompt`` and ``answer`` columns.
    ``fields="gsm8k"`` reads ``question``/``answer`` and takes the gold after ``####``;
    ``fields="math"`` reads ``problem``/``solution`` and takes the last ``\\boxed{}``; in both
    the full solution is kept in ``info["solution"]``. ``prompt_field``/``answer_field``
    override the preset's column names. Every other column goes to ``Task.info``; ``id_field``
    names a column of task ids (default: ``<file stem>/<row index>``). ``limit`` keeps the
    first rows only.
    """
    path = Path(path)
    if fields is not None and fields not in PRESETS:
        raise ValueError(f"fields must be one of {sorted(PRESETS)} or None, got {fields!r}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    rows = read_rows(path)
    preset = PRESETS[fields] if fields else _Fields("prompt", "answer")
    spec = _Fields(prompt_field or preset.prompt, answer_field or preset.answer, preset.gold)

    tasks: list[Task] = []
    seen_ids: dict[str, str] = {}
    for where, row in rows:
        task = _task(path, where, row, spec, id_field, index=len(tasks))
        if id_field is not None:
            if task.id in seen_ids:
                raise TaskFileError(
                    path,
                    f"id {task.id!r} already used at {seen_ids[task.id]}; ids must be unique",
                    where=where,
                    field=id_field,
                )
            seen_ids[task.id] = where
        tasks.append(task)
        if len(tasks) == limit:
            break
    if not tasks:
        raise TaskFileError(path, "has no rows; it should hold one task per line (JSONL) or row (Parquet)")
    return FileTasks(path, tasks)


def _task(path: Path, where: str, row: Any, spec: _Fields, id_field: str | None, index: int) -> Task:
    wanted = [spec.prompt, spec.answer] + ([id_field] if id_field else [])
    if not isinstance(row, dict):
        raise TaskFileError(
            path, f"is a JSON {type(row).__name__}, expected an object with fields {wanted}", where=where
        )
    for name in wanted:
        if name not in row:
            hint = (
                "check id_field"
                if name == id_field
                else "map your columns with prompt_field=/answer_field= or use fields='gsm8k'/'math'"
            )
            raise TaskFileError(
                path, f"missing field {name!r} (the row has {sorted(row)}); {hint}", where=where, field=name
            )
    prompt = row[spec.prompt]
    if not isinstance(prompt, str) or not prompt.strip():
        raise TaskFileError(path, f"field {spec.prompt!r} must be a non-empty string", where=where, field=spec.prompt)
    info = {k: v for k, v in row.items() if k not in wanted}
    answer = row[spec.answer]
    if spec.gold is not None:
        if not isinstance(answer, str):
            raise TaskFileError(path, f"field {spec.answer!r} must be a string", where=where, field=spec.answer)
        try:
            gold = spec.gold(answer)
        except ValueError as exc:
            raise TaskFileError(
                path,
                f"field {spec.answer!r} {exc}; check the file is the dataset its preset expects",
                where=where,
                field=spec.answer,
            ) from exc
        info["solution"], answer = answer, gold
    task_id = str(row[id_field]) if id_field else f"{path.stem}/{index}"
    return Task(id=task_id, prompt=prompt, answer=answer, info=info, source=path.name)
