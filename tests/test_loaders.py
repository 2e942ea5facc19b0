"""Dataset loaders: JSONL and Parquet, GSM8K and MATH presets, and errors that say where."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ludus.core.env import TaskSource
from ludus.core.types import Task
from ludus.tasks import FileTasks, TaskFileError, load_tasks
from ludus.tasks.loaders import split_files
from ludus.tasks.procedural import in_eval_bucket

GSM8K_ROWS = [
    {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3+4=7\n#### 7"},
    {"question": "A car costs $1,200 and a bike $300. Total?", "answer": "1200+300=1500\n#### 1,500"},
]
MATH_ROWS = [
    {
        "problem": "Simplify $\\frac{4}{8}$.",
        "solution": "Divide by 4: $\\boxed{\\frac{1}{2}}$.",
        "level": "Level 1",
        "type": "Algebra",
    },
    {
        "problem": "What is $2+2$?",
        "solution": "First \\boxed{3}? No: $\\boxed{4}$",
        "level": "Level 1",
        "type": "Prealgebra",
    },
]


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.fixture(params=["jsonl", "parquet"])
def write(request, tmp_path):
    """Write rows to a file of the parametrised format and return its path."""

    def _write(rows: list[dict], name: str = "data") -> Path:
        path = tmp_path / f"{name}.{request.param}"
        return write_jsonl(path, rows) if request.param == "jsonl" else write_parquet(path, rows)

    return _write


def test_gsm8k_preset(write) -> None:
    tasks = load_tasks(write(GSM8K_ROWS, "gsm8k"), fields="gsm8k")
    assert isinstance(tasks, FileTasks) and isinstance(tasks, TaskSource)
    assert tasks.size == 2
    first, second = tasks.get(0), tasks.get(1)
    assert first.prompt == GSM8K_ROWS[0]["question"]
    assert (first.answer, second.answer) == ("7", "1500")
    assert second.info["solution"] == GSM8K_ROWS[1]["answer"]
    assert first.id == "gsm8k/0" and second.id == "gsm8k/1"


def test_math_preset_takes_the_last_boxed_with_nested_braces(write) -> None:
    tasks = load_tasks(write(MATH_ROWS, "math"), fields="math")
    first, second = tasks.get(0), tasks.get(1)
    assert first.answer == "\\frac{1}{2}"
    assert second.answer == "4"
    assert first.info == {"solution": MATH_ROWS[0]["solution"], "level": "Level 1", "type": "Algebra"}


def test_explicit_mapping_and_extra_columns(write) -> None:
    rows = [
        {"q": "2+2?", "gold": 4, "uid": "a1", "topic": "add"},
        {"q": "3*3?", "gold": 9, "uid": "a2", "topic": "mul"},
    ]
    tasks = load_tasks(write(rows), prompt_field="q", answer_field="gold", id_field="uid")
    task = tasks.get(1)
    assert (task.id, task.prompt, task.answer, task.info) == ("a2", "3*3?", 9, {"topic": "mul"})
    assert task.source.startswith("data.")


def test_default_fields_are_prompt_and_answer(write) -> None:
    tasks = load_tasks(write([{"prompt": "hi", "answer": [1, 2]}]))
    assert (tasks.get(0).prompt, tasks.get(0).answer) == ("hi", [1, 2])


def test_explicit_field_overrides_a_preset(write) -> None:
    rows = [{"text": "Q?", "answer": "work\n#### 12"}]
    assert load_tasks(write(rows), fields="gsm8k", prompt_field="text").get(0).answer == "12"


def test_limit_and_index_bounds(write) -> None:
    tasks = load_tasks(write(GSM8K_ROWS), fields="gsm8k", limit=1)
    assert tasks.size == 1
    with pytest.raises(IndexError, match="1 tasks"):
        tasks.get(1)
    with pytest.raises(IndexError):
        tasks.get(-1)


def test_missing_file_names_the_path(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_tasks(tmp_path / "nope.jsonl")


def test_unsupported_extension(tmp_path) -> None:
    path = tmp_path / "data.csv"
    path.write_text("prompt,answer\n")
    with pytest.raises(TaskFileError, match=r"data\.csv.*\.jsonl"):
        load_tasks(path)


def test_empty_file_is_an_error(tmp_path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    with pytest.raises(TaskFileError, match="empty.jsonl.*no rows"):
        load_tasks(path)


def _bad_jsonl(tmp_path: Path, bad_line: str) -> Path:
    good = json.dumps(GSM8K_ROWS[0])
    path = tmp_path / "bad.jsonl"
    path.write_text(f"{good}\n\n{bad_line}\n{good}\n", encoding="utf-8")  # the bad row is on line 3
    return path


@pytest.mark.parametrize(
    ("bad_line", "field"),
    [
        ('{"answer": "x\\n#### 7"}', "question"),  # missing prompt field
        ('{"question": "Q"}', "answer"),  # missing answer field
        ('{"question": "Q", "answer": "no marker here"}', "answer"),  # no ####
        ('{"question": "Q", "answer": "x\\n#### "}', "answer"),  # empty gold
        ('{"question": "Q", "answer": 7}', "answer"),  # solution not a string
        ('{"question": 5, "answer": "x\\n#### 7"}', "question"),  # prompt not a string
    ],
)
def test_malformed_jsonl_row_names_file_line_and_field(tmp_path, bad_line: str, field: str) -> None:
    with pytest.raises(TaskFileError) as info:
        load_tasks(_bad_jsonl(tmp_path, bad_line), fields="gsm8k")
    message = str(info.value)
    assert "bad.jsonl, line 3: " in message and repr(field) in message
    assert info.value.field == field


def test_invalid_json_names_file_and_line(tmp_path) -> None:
    with pytest.raises(TaskFileError, match=r"bad.jsonl, line 3: invalid JSON"):
        load_tasks(_bad_jsonl(tmp_path, '{"question": "Q", "answer": "7"'), fields="gsm8k")


def test_row_that_is_not_an_object_names_the_expected_fields(tmp_path) -> None:
    with pytest.raises(TaskFileError, match=r"bad.jsonl, line 3: is a JSON list, expected an object .*'question'"):
        load_tasks(_bad_jsonl(tmp_path, '["question", "answer"]'), fields="gsm8k")


@pytest.mark.parametrize(
    "solution",
    ["The answer is 4.", "\\boxed{}", "\\boxed{\\frac{1}{2}"],
)
def test_malformed_math_rows_in_parquet_name_the_row(tmp_path, solution: str) -> None:
    rows = [MATH_ROWS[0], {"problem": "P", "solution": solution}]
    path = write_parquet(tmp_path / "math.parquet", rows)
    with pytest.raises(TaskFileError) as info:
        load_tasks(path, fields="math")
    message = str(info.value)
    assert "math.parquet" in message and "row 2" in message and "'solution'" in message
    assert info.value.field == "solution"


def test_missing_id_and_duplicate_id(tmp_path) -> None:
    path = write_jsonl(tmp_path / "ids.jsonl", [{"prompt": "a", "answer": 1, "id": "x"}, {"prompt": "b", "answer": 2}])
    with pytest.raises(TaskFileError, match=r"ids.jsonl, line 2: missing field 'id'"):
        load_tasks(path, id_field="id")
    path = write_jsonl(
        tmp_path / "dup.jsonl", [{"prompt": "a", "answer": 1, "id": "x"}, {"prompt": "b", "answer": 2, "id": "x"}]
    )
    with pytest.raises(TaskFileError, match=r"dup.jsonl, line 2: id 'x' already used at line 1"):
        load_tasks(path, id_field="id")


def test_corrupt_parquet_is_a_task_file_error(tmp_path) -> None:
    pytest.importorskip("pyarrow")
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"not parquet at all")
    with pytest.raises(TaskFileError, match="broken.parquet"):
        load_tasks(path)


def test_parquet_without_pyarrow_says_what_to_install(tmp_path, monkeypatch) -> None:
    path = tmp_path / "x.parquet"
    path.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ImportError, match=r"pip install 'ludus\[parquet\]'"):
        load_tasks(path)


def test_bad_arguments(tmp_path) -> None:
    path = write_jsonl(tmp_path / "ok.jsonl", [{"prompt": "a", "answer": 1}])
    with pytest.raises(ValueError, match="fields"):
        load_tasks(path, fields="gsm9k")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="limit"):
        load_tasks(path, limit=0)


# ---- train and eval splits of a file ----


def _ids(source: FileTasks) -> list[str]:
    return [source.get(i).id for i in range(source.size or 0)]


def _rows(n: int) -> list[dict]:
    return [{"prompt": f"question {i}", "answer": i} for i in range(n)]


def test_a_file_alone_is_split_into_disjoint_deterministic_train_and_eval(tmp_path) -> None:
    path = str(write_jsonl(tmp_path / "rows.jsonl", _rows(200)))
    files = split_files(path, None, load_tasks)
    train, held = _ids(files["train"]()), _ids(files["eval"]())
    assert train and held and not set(train) & set(held)
    assert sorted(train + held) == sorted(_ids(load_tasks(path)))
    assert held == [i for i in _ids(load_tasks(path)) if in_eval_bucket(i, 0.1)]  # keyed by task id, file order
    again = split_files(path, None, load_tasks)
    assert (_ids(again["train"]()), _ids(again["eval"]())) == (train, held)
    wider = split_files(path, None, load_tasks, eval_fraction=0.5)
    assert len(_ids(wider["eval"]())) > len(held)


@pytest.mark.parametrize("eval_fraction", [0.001, 0.5, 0.999])
@pytest.mark.parametrize("n", [2, 3, 5])
def test_neither_split_of_a_small_file_is_empty(tmp_path, n: int, eval_fraction: float) -> None:
    path = str(write_jsonl(tmp_path / "rows.jsonl", _rows(n)))
    files = split_files(path, None, load_tasks, eval_fraction=eval_fraction)
    train, held = _ids(files["train"]()), _ids(files["eval"]())
    assert train and held and not set(train) & set(held) and len(train) + len(held) == n
    with pytest.raises(IndexError, match="the train split of"):
        files["train"]().get(n)


def test_rows_sharing_a_task_id_stay_in_one_split(tmp_path) -> None:
    path = tmp_path / "rows.jsonl"
    tasks = [Task(id=f"t{i % 10}", prompt=f"q{i}") for i in range(40)]
    files = split_files(str(path), None, lambda p: FileTasks(Path(p), tasks), eval_fraction=0.3)
    assert not set(_ids(files["train"]())) & set(_ids(files["eval"]()))
    assert len(_ids(files["train"]())) + len(_ids(files["eval"]())) == 40


def test_eval_path_is_the_eval_split_and_each_file_loads_once(tmp_path) -> None:
    train_path = str(write_jsonl(tmp_path / "train.jsonl", _rows(5)))
    eval_path = str(write_jsonl(tmp_path / "eval.jsonl", _rows(2)))
    loaded: list[str] = []

    def load(p: str) -> FileTasks:
        loaded.append(p)
        return load_tasks(p)

    files = split_files(train_path, eval_path, load)
    for _ in range(3):
        assert _ids(files["train"]()) == _ids(load_tasks(train_path))
        assert _ids(files["eval"]()) == ["eval/0", "eval/1"]
    assert loaded == [train_path, eval_path]
    held_out = split_files(train_path, None, load)
    held_out["train"](), held_out["eval"](), held_out["eval"]()
    assert loaded[2:] == [train_path]


def test_a_one_task_file_trains_and_refuses_to_evaluate(tmp_path) -> None:
    path = str(write_jsonl(tmp_path / "one.jsonl", _rows(1)))
    files = split_files(path, None, load_tasks)
    assert _ids(files["train"]()) == ["one/0"]
    with pytest.raises(TaskFileError, match="one.jsonl.*pass eval_path"):
        files["eval"]()
    assert _ids(split_files(path, path, load_tasks)["eval"]()) == ["one/0"]  # asked for explicitly: allowed


def test_split_arguments_are_checked() -> None:
    assert split_files(None, None, load_tasks) == {}
    with pytest.raises(ValueError, match="eval_path needs path"):
        split_files(None, "eval.jsonl", load_tasks)
    with pytest.raises(ValueError, match="eval_fraction"):
        split_files("train.jsonl", None, load_tasks, eval_fraction=1.0)
