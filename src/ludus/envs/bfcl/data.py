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


# ---- multi-turn ------------------------------------------------------------------------------------

MULTI_TURN = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
# BFCL's bfcl_eval.constants.executable_backend_config, for the classes of the multi-turn categories
# (the memory and web-search classes belong to other categories and need heavy dependencies)
FUNC_DOC_FILES = {
    "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json",
    "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json",
    "VehicleControlAPI": "vehicle_control.json",
}


def load_multi_turn(category: str, path: str | Path | None = None) -> list[Task]:
    """Every item of one multi-turn category as a Task: ``answer`` is the ground truth (a list per turn
    of call strings such as ``"cd(folder='document')"``), ``info`` holds the user turns, the involved
    classes and their initial configuration, the functions offered at the start and, for
    ``multi_turn_miss_func``, the held-back functions by the turn (as a string) that reveals them."""
    if category not in MULTI_TURN:
        raise ValueError(f"category must be one of {list(MULTI_TURN)} or 'all_multi_turn', got {category!r}")
    folder = data_folder(path)
    stem = f"BFCL_v4_{category}.json"
    answers = {a["id"]: a["ground_truth"] for a in _lines(folder / "possible_answer" / stem)}
    docs: dict[str, list[dict[str, Any]]] = {}
    tasks = []
    for item in _lines(folder / stem):
        classes = item["involved_classes"]
        unknown = [c for c in classes if c not in FUNC_DOC_FILES]
        if unknown:
            raise ValueError(f"{item['id']}: no function docs known for {unknown}")
        for name in classes:
            if name not in docs:
                docs[name] = _lines(folder / "multi_turn_func_doc" / FUNC_DOC_FILES[name])
        functions = [f for name in classes for f in docs[name]]
        missed: dict[str, list[dict[str, Any]]] = {}
        for turn, names in (item.get("missed_function") or {}).items():  # as BFCL's populate_test_cases...
            missed[turn] = [f for f in functions if f["name"] in names]
            functions = [f for f in functions if f["name"] not in names]
        turns = item["question"]
        tasks.append(
            Task(
                id=item["id"],
                prompt="\n".join(m["content"] for m in turns[0] if m["role"] == "user"),
                answer=answers[item["id"]],
                info={
                    "category": category,
                    "turns": turns,
                    "involved_classes": classes,
                    "initial_config": item.get("initial_config", {}),
                    "functions": functions,
                    "missed_functions": missed,
                    "long_context": "long_context" in category,
                },
                source=f"bfcl:{category}",
            )
        )
    return tasks
