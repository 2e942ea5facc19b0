"""Find and load BFCL's data files (from an installed ``bfcl-eval`` wheel, without importing its code)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Any

from ludus.core.types import Task

INSTALL_HINT = "pip install --no-deps bfcl-eval==2026.3.23  (or pass path= a folder of BFCL_v4_*.json files)"

SINGLE_TURN = {
    "simple": "simple_python",
    "multiple": "multiple",
    "parallel": "parallel",
    "parallel_multiple": "parallel_multiple",
    "irrelevance": "irrelevance",
    "live_simple": "live_simple",
    "live_multiple": "live_multiple",
    "live_parallel": "live_parallel",
    "live_parallel_multiple": "live_parallel_multiple",
    "live_irrelevance": "live_irrelevance",
    "live_relevance": "live_relevance",
}
NO_CALL = {"irrelevance", "live_irrelevance"}  # right answer: no call at all
SOME_CALL = {"live_relevance"}  # right answer: at least one call


def data_folder(path: str | Path | None = None) -> Path:
    """The folder of BFCL JSON files: ``path`` or the installed wheel's ``bfcl_eval/data``."""
    if path is not None:
        folder = Path(path)
    else:
        spec = importlib.util.find_spec("bfcl_eval")
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(f"BFCL data not found: {INSTALL_HINT}")
        folder = Path(next(iter(spec.submodule_search_locations))) / "data"
    if not folder.is_dir():
        raise FileNotFoundError(f"BFCL data folder {folder} does not exist: {INSTALL_HINT}")
    return folder


def _lines(file: Path) -> list[dict[str, Any]]:
    with file.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def load_category(category: str, path: str | Path | None = None) -> list[Task]:
    """Every item of one single-turn category as a Task (answer = possible answer, info = functions)."""
    if category not in SINGLE_TURN:
        raise ValueError(f"category must be one of {sorted(SINGLE_TURN)} or 'all_single', got {category!r}")
    folder = data_folder(path)
    stem = f"BFCL_v4_{SINGLE_TURN[category]}.json"
    items = _lines(folder / stem)
    answers: dict[str, Any] = {}
    answer_file = folder / "possible_answer" / stem
    if category not in NO_CALL | SOME_CALL:
        answers = {a["id"]: a["ground_truth"] for a in _lines(answer_file)}
    tasks = []
    for item in items:
        turn = item["question"][0]
        functions = item["function"] if isinstance(item["function"], list) else [item["function"]]
        tasks.append(
            Task(
                id=item["id"],
                prompt="\n".join(m["content"] for m in turn if m["role"] == "user"),
                answer=answers.get(item["id"], []),
                info={"category": category, "messages": turn, "functions": functions},
                source=f"bfcl:{category}",
            )
        )
    return tasks


def is_eval(task_id: str, eval_fraction: float) -> bool:
    """A fixed split by hash of the id: the same item is always on the same side."""
    digest = hashlib.sha256(task_id.encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32 < eval_fraction
