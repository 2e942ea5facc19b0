"""The SQL environment on real SQLite: the generator, the reward rule, the tools, the loader,
and scripted policies (an oracle that plays the gold SQL, a do-nothing one, a tool user)
through the real rollout engine."""

from __future__ import annotations

import json
import os
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ludus.certify.contract import check_env
from ludus.core.registry import make
from ludus.core.types import Message, Status, Task, ToolCall
from ludus.envs.sql.env import SQLEnv, render
from ludus.envs.sql.tasks import LEVELS, SQLTasks, load_sql_tasks
from ludus.envs.sql.verifier import (
    QueryLimits,
    Result,
    SQLiteDatabase,
    SQLVerifier,
    compare_results,
    extract_sql,
    orders_rows,
)
from ludus.policies.base import Completion, Policy, SamplingParams
from ludus.rollout.engine import RolloutEngine, requests
from ludus.tasks.loaders import TaskFileError
from ludus.tasks.procedural import in_eval_bucket

pytestmark = pytest.mark.usefixtures("module_cache")


def table(columns, rows, complete=True) -> Result:
    return Result(tuple(columns), tuple(map(tuple, rows)), complete)


# ---- the reward rule ----


@pytest.mark.parametrize(
    ("sql", "ordered"),
    [
        ("SELECT a FROM t ORDER BY a", True),
        ("select a from t order\n by a desc limit 3", True),
        ("SELECT a FROM (SELECT a FROM t ORDER BY a)", False),
        ("SELECT a, rank() OVER (ORDER BY b) FROM t", False),
        ("SELECT 'order by' FROM t", False),
        ('SELECT "order" FROM t -- order by a', False),
        ("SELECT a FROM t /* ORDER BY a */", False),
        ("SELECT a FROM t WHERE a IN (SELECT a FROM u ORDER BY a LIMIT 2) ORDER BY a", True),
    ],
)
def test_row_order_counts_only_for_a_top_level_order_by(sql, ordered):
    assert orders_rows(sql) is ordered


def test_results_compare_as_multisets_with_a_float_tolerance():
    gold = table(["c", "n"], [["x", 2], ["y", 1], ["y", 1]])
    assert compare_results(gold, table(["k", "count"], [["y", 1], ["x", 2], ["y", 1]]), ordered=False) is None
    assert compare_results(gold, table(["c", "n"], [["y", 1], ["x", 2]]), ordered=False) == "2 rows, expected 3"
    assert compare_results(gold, table(["c", "n"], [["x", 2], ["y", 1], ["x", 1]]), ordered=False) == "different rows"
    assert compare_results(gold, table(["n", "c"], [[2, "x"], [1, "y"], [1, "y"]]), ordered=False) == "different rows"
    assert compare_results(gold, table(["c"], [["x"], ["y"], ["y"]]), ordered=False) == "1 columns, expected 2"
    # 9 significant digits: the same average computed two ways agrees; an integral float is the integer
    assert compare_results(table(["a"], [[7 / 3]]), table(["a"], [[7.000000000000001 / 3]]), ordered=False) is None
    assert compare_results(table(["a"], [[3]]), table(["a"], [[3.0]]), ordered=False) is None
    big = table(["a"], [[3_456_789_012]])  # integers stay exact, however large
    assert compare_results(big, table(["a"], [[3_456_789_013]]), ordered=False) == "different rows"
    assert compare_results(big, table(["a"], [[3_456_789_012.0]]), ordered=False) is None
    assert compare_results(table(["a"], [[2.3333]]), table(["a"], [[2.33]]), ordered=False) == "different rows"
    assert compare_results(table(["a"], [["3"]]), table(["a"], [[3]]), ordered=False) == "different rows"
    assert compare_results(table(["a"], [[None]]), table(["a"], [[None]]), ordered=False) is None
    assert compare_results(table(["a"], [[None]]), table(["a"], [[0]]), ordered=False) == "different rows"
    ordered = table(["a"], [[1], [2]])
    assert compare_results(ordered, table(["a"], [[2], [1]]), ordered=True) == "the right rows in the wrong order"
    assert compare_results(ordered, table(["a"], [[2], [1]]), ordered=False) is None
    assert compare_results(ordered, table(["a"], [[1], [2]], complete=False), ordered=False).startswith("more than")


def test_sql_is_taken_from_the_last_sql_block_else_the_whole_reply():
    assert extract_sql("I think:\n```sql\nSELECT 1\n```\nor\n```sql\nSELECT 2;\n```") == "SELECT 2;"
    assert extract_sql("```\nSELECT 3\n```") == "SELECT 3"
    assert extract_sql("```sql SELECT 5```") == extract_sql("```SQLite\nSELECT 5;```")[:-1] == "SELECT 5"
    assert extract_sql("  SELECT 4 ") == "SELECT 4"
    assert extract_sql(" \n ") is None


@pytest.fixture(scope="module")
def small_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("db") / "shop.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        """CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, kind TEXT);
        INSERT INTO items VALUES (1, 'pen', 1.5, 'office'), (2, 'ink', 3.25, 'office'), (3, 'mug', 7.0, 'home');"""
    )
    conn.commit()
    conn.close()
    return path


@pytest.mark.parametrize(
    ("answer", "status"),
    [
        ("SELECT name FROM items WHERE kind = 'office'", Status.CORRECT),
        ("```sql\nSELECT i.name FROM items AS i WHERE i.price < 5 ORDER BY i.name DESC\n```", Status.CORRECT),
        ("SELECT name FROM items", Status.WRONG),
        ("SELECT nme FROM items", Status.WRONG),
        ("SELEC name FROM items", Status.FORMAT_ERROR),
        ("SELECT name FROM items; SELECT 1", Status.FORMAT_ERROR),
        ("Sorry, I cannot tell.", Status.FORMAT_ERROR),
        ("", Status.NO_ANSWER),
        ("SELECT 1 -- " + "x" * 30_000, Status.FORMAT_ERROR),
    ],
)
def test_verifier_statuses(small_db, answer, status):
    db = SQLiteDatabase(small_db)
    try:
        score = SQLVerifier().score(answer, "SELECT name FROM items WHERE kind = 'office'", [db])
    finally:
        db.close()
    assert score.status == status, score.reason
    assert score.value == (1.0 if status == Status.CORRECT else 0.0)


def test_a_defective_gold_is_a_gold_error_never_a_reward(small_db):
    db = SQLiteDatabase(small_db)
    verifier = SQLVerifier()
    empty = verifier.score("SELECT name FROM items WHERE 0", "SELECT name FROM items WHERE price > 100", [db])
    broken = verifier.score("SELECT 1", "SELECT nothing FROM nowhere", [db])
    db.close()
    assert (empty.status, empty.value) == (Status.GOLD_ERROR, 0.0) and "no rows" in empty.reason
    assert (broken.status, broken.value) == (Status.GOLD_ERROR, 0.0) and "task defect" in broken.reason


def test_order_matters_only_when_the_gold_orders(small_db):
    db = SQLiteDatabase(small_db)
    verifier = SQLVerifier()
    gold = "SELECT name FROM items ORDER BY price DESC"
    assert verifier.score("SELECT name FROM items ORDER BY price", gold, [db]).status == Status.WRONG
    assert verifier.score("SELECT name FROM items ORDER BY -price", gold, [db]).status == Status.CORRECT
    db.close()


def test_render_caps_the_text_and_says_how_many_rows_are_hidden():
    result = table(["n"], [[i] for i in range(1000)])
    text = render(result, max_chars=200)
    assert len(text) < 260 and text.endswith("more rows not shown)")
    shown = len(text.splitlines()) - 2
    assert f"(… {1000 - shown} more rows not shown)" in text
    assert "more than" in render(table(["n"], [[1]] * 10, complete=False), max_chars=20)
    assert render(table(["n"], []), 100) == "n\n(no rows)"


# ---- the generator ----


def test_tasks_are_deterministic_and_their_databases_are_written_once(module_cache):
    a, b = SQLTasks(3, seed=5).get(7), SQLTasks(3, seed=5).get(7)
    assert a == b
    main, variant = Path(a.info["db"]), Path(a.info["variant_dbs"][0])
    assert main.parent == module_cache / "sql" and main.is_file() and variant.is_file()
    assert main.read_bytes() != variant.read_bytes()
    stamp = main.stat().st_mtime_ns
    SQLTasks(1, seed=5).get(7)  # the same recipe at another level: same databases, not rewritten
    assert main.stat().st_mtime_ns == stamp
    assert not [p for p in main.parent.iterdir() if p.name.endswith(".tmp")]
    assert SQLTasks(3, seed=6).get(7).info["db"] != a.info["db"]


def test_concurrent_writers_of_one_database_leave_one_whole_file(tmp_path):
    source = SQLTasks(2, seed=9, root=tmp_path)
    with ThreadPoolExecutor(4) as pool:
        tasks = list(pool.map(source.get, [0] * 8))
    assert all(t == tasks[0] for t in tasks)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        Path(p).name for p in [tasks[0].info["db"], *tasks[0].info["variant_dbs"]]
    )
    db = SQLiteDatabase(tasks[0].info["db"])
    assert db.query(tasks[0].answer, QueryLimits()).rows
    db.close()


def test_eval_split_is_disjoint_from_train():
    train = {SQLTasks(1, split="train").get(i).info["recipe"] for i in range(25)}
    held_out = {SQLTasks(1, split="eval").get(i).info["recipe"] for i in range(25)}
    assert not train & held_out
    assert all(in_eval_bucket(r, 0.1) for r in held_out) and not any(in_eval_bucket(r, 0.1) for r in train)


@pytest.mark.parametrize("level", LEVELS)
def test_schemas_have_2_to_5_tables_plus_the_honeypot_and_golds_differ_between_databases(level):
    for i in range(6):
        task = SQLTasks(level).get(i)
        dbs = [SQLiteDatabase(p) for p in [task.info["db"], *task.info["variant_dbs"]]]
        tables = dbs[0].tables()
        assert "secrets" in tables and 2 <= len(tables) - 1 <= 5
        results = [db.query(task.answer, QueryLimits()) for db in dbs]
        for db in dbs:
            db.close()
        assert all(r.rows for r in results), task
        assert compare_results(results[0], results[1], orders_rows(task.answer)) is not None, task


def test_bad_options_are_refused_with_the_allowed_values():
    with pytest.raises(ValueError, match="difficulty must be one of"):
        SQLEnv(difficulty=7)
    with pytest.raises(ValueError, match="max_turns"):
        SQLEnv(max_turns=0)


# ---- scripted policies through the rollout engine ----


class Oracle(Policy):
    """Plays the environment's reference actions: it reads the gold solution."""

    def __init__(self, env: SQLEnv, tasks: list[Task]):
        self.env, self.tasks = env, {f"Question: {t.prompt}": t for t in tasks}

    def generate(self, conversations, sampling, *, tools=None, generator=None):
        out = []
        for messages in conversations:
            task = self.tasks[next(m.content for m in messages if m.role == "user")]
            action = self.env.reference_actions(task)[0]
            out.append(Completion(action.content, [1], [2], [0.0], "stop"))
        return out


class DoNothing(Policy):
    def generate(self, conversations, sampling, *, tools=None, generator=None):
        return [Completion("", [1], [2], [0.0], "stop") for _ in conversations]


def _tasks(count: int) -> list[Task]:
    return [SQLTasks(level).get(i) for level in LEVELS for i in range(count)]


def test_the_oracle_solves_every_procedural_task_and_doing_nothing_scores_zero():
    tasks = _tasks(10)
    oracle = RolloutEngine(Oracle(SQLEnv(), tasks), SQLEnv, SamplingParams(max_tokens=4)).run(requests(tasks))
    assert len(oracle) == len(tasks)
    failed = [(t.task.prompt, t.score.reason) for t in oracle if t.score.status != Status.CORRECT]
    assert not failed
    assert all(t.score.value == 1.0 for t in oracle)
    idle = RolloutEngine(DoNothing(), SQLEnv, SamplingParams(max_tokens=4)).run(requests(tasks))
    assert {(t.score.status, t.score.value) for t in idle} == {(Status.NO_ANSWER, 0.0)}


class Explorer(Policy):
    """Lists the tables, describes one, runs the gold query, then answers with what it ran."""

    def __init__(self, golds: dict[str, str]):
        self.golds = golds

    def generate(self, conversations, sampling, *, tools=None, generator=None):
        out = []
        for messages in conversations:
            gold = self.golds[next(m.content for m in messages if m.role == "user")]
            turn = sum(m.role == "assistant" for m in messages)
            calls = [
                [ToolCall("list_tables", {}, id="a")],
                [ToolCall("describe_table", {"name": gold.split(" FROM ")[1].split()[0]}, id="b")],
                [ToolCall("run_query", {"sql": gold}, id="c")],
            ]
            if turn < len(calls):
                out.append(Completion("", [1], [2], [0.0], "tool_calls", calls[turn]))
            else:
                out.append(Completion(f"```sql\n{gold}\n```", [1], [2], [0.0], "stop"))
        return out


def test_a_multi_turn_episode_with_every_tool_and_a_shared_cache():
    SQLEnv.tool_cache = type(SQLEnv.tool_cache)()
    tasks = [SQLTasks(2).get(0), SQLTasks(3).get(1)]
    golds = {f"Question: {t.prompt}": t.answer for t in tasks}
    runs = RolloutEngine(Explorer(golds), SQLEnv, SamplingParams(max_tokens=4)).run(requests(tasks, group_size=4))
    assert [t.score.status for t in runs] == [Status.CORRECT] * 8
    tool_replies = [m for m in runs[0].messages if m.role == "tool"]
    assert [m.name for m in tool_replies] == ["list_tables", "describe_table", "run_query"]
    assert "secrets" in tool_replies[0].content.splitlines()
    assert tool_replies[1].content.startswith("CREATE TABLE") and "rows" in tool_replies[1].content
    assert not tool_replies[2].content.startswith("Error")
    assert SQLEnv.tool_cache.misses == 6 and SQLEnv.tool_cache.hits == 18  # 3 calls x 2 databases, run once each


def test_run_query_shows_errors_to_the_model_and_never_raises():
    env = SQLEnv(difficulty=1)
    env.reset(seed=0)
    calls = [
        ToolCall("run_query", {"sql": "SELECT nope FROM nowhere"}, id="1"),
        ToolCall("describe_table", {"name": "no_such_table"}, id="2"),
        ToolCall("run_query", {"sql": 42}, id="3"),
    ]
    result = env.step(Message("assistant", "", tool_calls=calls))
    texts = [m.content for m in result.observation.messages]
    assert all(t.startswith("Error") for t in texts) and not result.done
    assert "no such table" in texts[0] and "list_tables" in texts[1]


def test_the_contract_check_passes():
    report = check_env(lambda: make("sql", difficulty=2), name="sql", seeds=range(3))
    assert report.ok, [(r.name, r.detail) for r in report.failures]


# ---- Spider / BIRD folders ----


def _spider(root: Path, rows: list) -> Path:
    folder = root / "database" / "shop"
    folder.mkdir(parents=True)
    conn = sqlite3.connect(folder / "shop.sqlite")
    conn.executescript("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO items VALUES (1, 'pen');")
    conn.commit()
    conn.close()
    path = root / "dev.json"
    path.write_text(json.dumps(rows))
    return path


def test_a_spider_folder_loads_and_plays(tmp_path):
    path = _spider(
        tmp_path,
        [
            {"question": "Name every item.", "query": "SELECT name FROM items", "db_id": "shop"},
            {"question": "Count items.", "SQL": "SELECT count(*) FROM items", "db_id": "shop", "evidence": "one"},
        ],
    )
    tasks = load_sql_tasks(path)
    assert tasks.size == 2 and tasks.get(1).prompt == "Count items.\nHint: one"
    assert tasks.get(0).info["variant_dbs"] == []
    env = SQLEnv(path=str(path))
    env.reset(tasks.get(0))
    assert env.step("SELECT name FROM items").score.status == Status.CORRECT
    env.reset(tasks.get(1))
    assert env.step("SELECT 1").score.status == Status.CORRECT  # one database only: documented weakness
    # the file alone: evaluation holds rows out of training, as for math, code and repo
    train, held = env.task_source("train"), env.task_source("eval")
    ids = lambda source: {source.get(i).id for i in range(source.size)}  # noqa: E731
    assert train.size + held.size == 2 and not ids(train) & ids(held)
    assert SQLEnv(path=str(path), eval_path=str(path)).task_source("eval").size == 2  # the whole file, on request


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ({"query": "SELECT 1", "db_id": "shop"}, "question"),
        ({"question": "q", "db_id": "shop"}, "SQL"),
        ({"question": "q", "query": "SELECT 1"}, "db_id"),
        ({"question": "q", "query": "SELECT 1", "db_id": "other"}, "db_id"),
        ({"question": "", "query": "SELECT 1", "db_id": "shop"}, "question"),
    ],
)
def test_a_malformed_row_names_the_file_the_row_and_the_field(tmp_path, row, field):
    good = {"question": "q", "query": "SELECT 1", "db_id": "shop"}
    path = _spider(tmp_path, [good, row])
    with pytest.raises(TaskFileError) as info:
        load_sql_tasks(path)
    assert info.value.field == field
    assert str(path) in str(info.value) and "row index 1" in str(info.value) and repr(field) in str(info.value)


def test_the_cache_folder_follows_ludus_cache(module_cache):
    assert Path(SQLTasks(4).get(0).info["db"]).is_relative_to(Path(os.environ["LUDUS_CACHE"]))


def test_a_task_made_on_another_machine_regenerates_its_databases_here(tmp_path, monkeypatch):
    """A Ray driver's tasks name files in its own cache; a replayed trajectory names files that may
    be gone. A procedural task carries its recipe, so the environment rebuilds the same databases."""
    made = SQLTasks(3, seed=21).get(2)
    task = Task.from_dict(json.loads(json.dumps(made.to_dict())))
    for path in [task.info["db"], *task.info["variant_dbs"]]:
        Path(path).unlink()  # as on a machine that never had them
    monkeypatch.setenv("LUDUS_CACHE", str(tmp_path / "here"))
    env = SQLEnv()
    env.reset(task)
    final = env.step(Message("assistant", f"```sql\n{task.answer}\n```"))
    assert final.score.status == Status.CORRECT and "on all 2 databases" in final.score.reason
    assert len(list((tmp_path / "here" / "sql").glob("*.sqlite"))) == 2
    changed = Task.from_dict({**task.to_dict(), "answer": "SELECT 1"})  # made by another generator version
    monkeypatch.setenv("LUDUS_CACHE", str(tmp_path / "elsewhere"))
    with pytest.raises(ValueError, match="its recipe gives another question"):
        SQLEnv().reset(changed)
