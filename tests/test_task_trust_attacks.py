"""Red team of the tasks a grader takes from elsewhere (issue 33): a run folder's or a log's task
graded by ``ludus rescore`` and offline training (``task_to_grade``), a MiniWoB++ client's task
name and seed (``MiniWoBEnv.client_task``), and the screenshots ``ludus view`` serves. A forged
record must never make a grader or the viewer touch a file, folder, URL or database that the
environment's own tasks do not name, and a hostile line is a skip or an ``infra_error``, never a
crash."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ludus.cli import main
from ludus.core import Message, SingleTurnEnv, Task, Trajectory, register, registry
from ludus.core.registry import env_class, make
from ludus.envs.sql import tasks as sql_tasks
from ludus.envs.web.miniwob import SUPPORTED, html_root
from ludus.rollout.rescore import UntrustedTask, task_to_grade
from ludus.serve.view import PNG_SIGNATURE, open_runs
from ludus.train.config import ConfigError
from ludus.train.trainer import Trainer
from test_rescore_attacks import rescored, trajectory
from test_view_attacks import RECORDS, get, viewing

pytestmark = pytest.mark.usefixtures("module_cache")


def hostile_run(tmp_path: Path, env: str, env_args: dict[str, Any], rows: list[dict[str, Any]]) -> Path:
    """A run folder as anyone may send one: its eval.json records ``env`` and ``env_args``."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "eval.json").write_text(json.dumps({"env": env, "env_args": env_args}))
    (run / "trajectories.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return run


def episode(task: Task, reply: str, env: str) -> dict[str, Any]:
    """A logged episode without a score: one question, one reply."""
    return Trajectory(task, [Message("user", task.prompt), Message("assistant", reply)], env=env).to_dict()


def secret_database(folder: Path) -> Path:
    """An SQLite file of this machine's user, named as a browser names its cookie store."""
    folder.mkdir()
    secret = folder / "cookies.sqlite"
    with sqlite3.connect(secret) as db:
        db.execute("CREATE TABLE secrets (token TEXT)")
        db.execute("INSERT INTO secrets VALUES ('hunter2')")
    return secret


# ---- surface 1: the arguments a run folder records ------------------------------------------------


def test_recorded_arguments_cannot_make_the_sql_grader_open_a_database_elsewhere(tmp_path):
    secret = secret_database(tmp_path / "elsewhere")
    questions = tmp_path / "run" / "questions.json"  # the folder's own file, made the environment's tasks
    row = episode(Task("questions/0", "the token?"), "```sql\nSELECT token FROM secrets\n```", "sql")
    run = hostile_run(tmp_path, "sql", {"path": str(questions)}, [row])
    gold = [{"question": "the token?", "query": "SELECT 'hunter2'", "db_id": str(secret.with_suffix(""))}]
    questions.write_text(json.dumps(gold))
    if main(["rescore", str(run), "--workers", "1"]) == 0:  # refusing the recorded arguments is a defence too
        verdicts = [json.loads(x) for x in (run / "rescore.jsonl").read_text().splitlines()]
        assert not any(v["new"]["status"] == "correct" for v in verdicts), "the grader read the secret database"


@pytest.mark.filterwarnings("ignore::ludus.sandbox.backend.UnisolatedWarning")
def test_recorded_arguments_cannot_take_the_sandbox_away_from_logged_code(tmp_path):
    marker = tmp_path / "escaped"
    env = make("code")
    try:
        own = env.task_source("train").get(0)
        opening = env.reset(own).messages
        body = env.reference(own).replace("```python\n", f"```python\n    open({str(marker)!r}, 'w').write('x')\n", 1)
    finally:
        env.close()
    row = Trajectory(own, [*opening, Message("assistant", body)], env="code").to_dict()
    run = hostile_run(tmp_path, "code", {"backend": "process"}, [row])
    main(["rescore", str(run), "--workers", "1"])
    assert not marker.exists(), "the logged reply's code ran outside the sandbox"


def test_recorded_arguments_cannot_send_the_replies_to_a_judge_elsewhere(tmp_path):
    from ludus.rewards.scripted_judge import ScriptedJudgeServer  # a stand-in for a server of the folder's author

    elsewhere = tmp_path / "elsewhere" / "notes.jsonl"
    elsewhere.parent.mkdir()
    with ScriptedJudgeServer() as server:
        judge = {"model": server.url, "model_name": "scripted", "cache_path": str(elsewhere)}
        env = make("judged")
        try:
            own = env.task_source("train").get(0)
        finally:
            env.close()
        run = hostile_run(tmp_path, "judged", {"judge": judge}, [episode(own, "A short, careful answer.", "judged")])
        main(["rescore", str(run), "--workers", "1"])
        assert server.stats()["requests"] == 0, "the grader sent the log's reply to the folder's URL"
    assert not elsewhere.exists(), "the grader wrote a file the folder named"


# ---- surface 1: the task a line records ----------------------------------------------------------


def test_ids_posing_as_the_sql_environments_own_tasks_get_the_own_task_or_are_refused():
    env = make("sql")
    try:
        train, held_out = env.task_source("train").get(3), env.task_source("eval").get(5)
        for own in (train, held_out):  # an id of the eval split is an own task too
            posing = Task(own.id, "the token?", answer="SELECT token FROM secrets", info={"db": "/etc/passwd"})
            assert task_to_grade(env, posing) == own
        head, _, index = train.id.rpartition("/")
        assert index == "3"
        odd = [
            f"../{train.id}",
            f"{train.id}/",
            f"{train.id}/..",
            f"{head}/03",
            f"{head}/3 ",
            f"{head}/+3",
            f"{head}/٣",
        ]
        odd += [f"{head}/３", f"{index}/{head}", f"{head}/-3", f"{head}/{'9' * 400}"]
        for task_id in odd:
            with pytest.raises(UntrustedTask):
                task_to_grade(env, Task(task_id, "the token?", info={"db": "/etc/passwd"}))
    finally:
        env.close()


def test_an_id_ending_in_a_superscript_digit_is_an_untrusted_task(tmp_path):
    forged = Task("sql-1/train/s4f64ecba93fd/²", "the token?", info={"db": "/etc/passwd"})
    summary, lines = rescored(hostile_run(tmp_path, "sql", {}, [episode(forged, "```sql\nSELECT 1\n```", "sql")]))
    assert summary["skipped"] == {"untrusted task": 1} and lines == []


def test_forged_sql_ids_cost_what_a_real_line_costs_and_write_only_the_trimmed_cache(module_cache):
    """A forged id ending in a number is looked up as the environment's own task of that index: for
    ``sql`` that generates the task (~4 ms) and writes its databases into the SQL cache, which is
    trimmed by size (a real line costs the same). Accepted: nothing is written anywhere else."""
    env = make("sql")
    try:
        sql_cache = sql_tasks.cache_dir("sql")
        before = {p for p in module_cache.rglob("*") if not p.is_relative_to(sql_cache)}
        for n in range(3):
            with pytest.raises(UntrustedTask):
                task_to_grade(env, Task(f"forged/{987_654_321 + n}", "the token?"))
        assert {p for p in module_cache.rglob("*") if not p.is_relative_to(sql_cache)} == before
    finally:
        env.close()


def test_an_instruct_line_without_its_answer_is_graded_on_the_own_task():
    env = make("instruct")
    try:
        own = env.task_source("train").get(0)
        assert task_to_grade(env, Task(own.id, own.prompt)) == own  # an imported chat keeps id and prompt only
    finally:
        env.close()


def test_offline_training_skips_a_line_whose_task_the_grader_cannot_read(small_config, small_training, tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps(episode(Task("forged", "Write a haiku."), "Leaves fall, rain", "instruct")) + "\n")
    config = small_config(
        name="instruct",
        env="instruct",
        env_args={},
        offline=[str(log)],
        steps=1,
        warmstart_steps=0,
        tiny={**small_training["tiny"], "max_len": 1024},  # instruct's prompts
    )
    with pytest.raises(ConfigError, match="hold no episode to learn from"):  # the line skipped, not a crash
        Trainer.create(config, log=lambda _: None).run()


class TaskServerDown(SingleTurnEnv):
    """An environment whose tasks live on a server that is down."""

    name = "attack-task-server-down"

    def task_source(self, split="train"):
        raise RuntimeError("the task server is down")

    def score(self, task, completion):
        raise AssertionError("never graded: no task of it can be looked up")


def test_an_environment_whose_task_lookup_fails_is_an_infra_error_not_a_crash(tmp_path):
    register(TaskServerDown.name, TaskServerDown)
    row = episode(Task("t", "2+3="), "5", TaskServerDown.name)
    summary, lines = rescored(hostile_run(tmp_path, TaskServerDown.name, {}, [row, row]))
    assert summary["transitions"] == {"unscored -> infra_error": 2}
    assert all("the task server is down" in line["new"]["reason"] for line in lines)


# ---- surfaces 1 and 2: what a client task may hold -----------------------------------------------

FORGED = {"id": "forged", "prompt": "2+3="}
WRONG_SHAPES = [
    ("arithmetic", "[1]"),
    ("arithmetic", {**FORGED, "info": {"family": True}}),
    ("arithmetic", {**FORGED, "info": {"family": {"db": "/etc/passwd"}}}),
    ("arithmetic", {**FORGED, "info": {"db": "/etc/passwd"}}),
    ("arithmetic", {**FORGED, "info": ["db", "/etc/passwd"]}),
    ("arithmetic", {**FORGED, "answer": True}),
    ("arithmetic", {**FORGED, "answer": {"path": "/etc/passwd"}}),
    ("arithmetic", {**FORGED, "id": 7}),
    ("arithmetic", {**FORGED, "source": ["/etc/passwd"]}),
    ("arithmetic", {**FORGED, "path": "/etc/passwd"}),
    ("countdown", {**FORGED, "info": {"numbers": [1, 2], "target": True}}),
    ("countdown", {**FORGED, "info": {"numbers": "1 2", "target": 3}}),
    ("countdown", {**FORGED, "info": {"numbers": [{"db": "/etc/passwd"}], "target": 3}}),
    ("sorting", {**FORGED, "answer": "1 2 3"}),
    ("math", {**FORGED, "info": {"solution": 5}}),
    ("judged", {**FORGED, "info": {"family": "x"}}),
    ("instruct", {**FORGED, "answer": {"constraints": [{"kind": "no_comma", "count": True}]}}),
    ("instruct", {**FORGED, "answer": {"constraints": [{"kind": "open_file", "path": "/etc/passwd"}]}}),
    ("instruct", FORGED),
    *[
        ("miniwob", {**FORGED, "info": {"miniwob": name, "seed": 0}})
        for name in ("CLICK-BUTTON", "click\u2010button", "ｃlick-button", "click-button ", "click-button\x00")
        + ("../miniwob/click-button", "/click-button", "click-button.html", "")
    ],
    *[("miniwob", {**FORGED, "info": {"miniwob": "click-button", "seed": seed}}) for seed in (True, 1.0, "3", None)],
    ("miniwob", {**FORGED, "info": {"miniwob": "click-button"}}),
    ("miniwob", {**FORGED, "info": {"miniwob": "click-button", "seed": 0, "url": "file:///etc/passwd"}}),
    ("miniwob", {**FORGED, "info": {"miniwob": "x" * 300, "seed": 0}}),
]


@pytest.mark.parametrize(("name", "data"), WRONG_SHAPES)
def test_a_client_task_of_the_wrong_shape_is_refused_by_a_value_error(name, data):
    with pytest.raises(ValueError):
        object.__new__(env_class(name)).client_task(data)  # it checks the data alone: no environment is made


def test_no_builtin_environment_takes_a_client_task_that_names_something_on_disk():
    """Every key that names a file, folder or URL in some environment's tasks, offered to every one."""
    disk = {"db": "/etc/passwd", "variant_dbs": ["/etc/passwd"], "path": "/", "folder": "/", "repo": "/",
            "tests": "/", "url": "file:///etc/passwd", "data_seed": 1, "library": "/"}  # fmt: skip
    for name in registry._declared():
        cls = env_class(name)
        for key, value in disk.items():
            with pytest.raises(ValueError):
                object.__new__(cls).client_task({**FORGED, "info": {key: value}})


def test_a_miniwob_client_chooses_a_supported_task_and_a_seed_and_nothing_else():
    miniwob = object.__new__(env_class("miniwob"))
    for seed in (0, 7, 10**30, -5):
        sent = {"id": "../../etc", "prompt": "ignore the page", "info": {"miniwob": SUPPORTED[0], "seed": seed}}
        assert miniwob.client_task(sent) == miniwob.task_for(SUPPORTED[0], seed)  # its own id and prompt


def test_a_miniwob_task_name_never_reaches_the_servers_disk(tmp_path):
    (tmp_path / "diary.html").write_text("private")
    miniwob, folder = object.__new__(env_class("miniwob")), html_root() / "miniwob"
    refusals = []
    for name in ("diary", "nothing-here"):
        probe = os.path.relpath(tmp_path / name, folder)
        with pytest.raises(ValueError) as refused:
            miniwob.client_task({**FORGED, "info": {"miniwob": probe, "seed": 0}})
        refusals.append(str(refused.value).replace(probe, "NAME"))
    assert refusals[0] == refusals[1], "the refusal says whether a file exists on the server"


def test_a_regraded_forged_miniwob_task_is_refused_before_any_browser(tmp_path):
    """Through rescore: a name the client may not choose is an untrusted task, and no page is opened."""
    forged = Task("miniwob/click-button/0", "p", info={"miniwob": "../../../../etc/passwd", "seed": 0})
    summary, lines = rescored(hostile_run(tmp_path, "miniwob", {}, [episode(forged, "done", "miniwob")]))
    assert summary["skipped"] == {"untrusted task": 1} and lines == []


# ---- surface 3: the screenshots ludus view serves ------------------------------------------------


def _view_run(folder: Path, screenshots: str | None, shown: list[str]) -> Path:
    """A run whose one trajectory's page view names ``shown`` as its screenshots, recording the
    screenshot folder ``screenshots``."""
    folder.mkdir()
    lines = "\n".join(f"Screenshot: {path}" for path in shown)
    row = trajectory(
        messages=[{"role": "user", "content": f"the page\n{lines}"}, {"role": "assistant", "content": "5"}]
    )
    (folder / "trajectories.jsonl").write_text(json.dumps(row) + "\n")
    env_args = {} if screenshots is None else {"screenshots": screenshots}
    (folder / "eval.json").write_text(json.dumps({"env": "web", "env_args": env_args}))
    return folder


def test_a_screenshot_is_served_only_from_the_run_or_right_inside_its_recorded_folder(tmp_path):
    png = PNG_SIGNATURE + b"rest of the picture"
    elsewhere, shots = tmp_path / "elsewhere", tmp_path / "shots"
    elsewhere.mkdir()
    shots.mkdir()
    for folder in (elsewhere, shots):
        (folder / "web-x-1.png").write_bytes(png)
    (shots / "web-x-2.png").symlink_to(elsewhere / "web-x-1.png")  # a link out of the recorded folder
    (shots / "web-x-3.PNG").write_bytes(png)  # not the name an environment gives
    (shots / "web-x-4.png").mkdir()
    os.mkfifo(shots / "web-x-5.png")  # never opened: it would hang
    (shots / "web-x-6.png").write_bytes(b"GIF89a")
    (shots / "sub").mkdir()
    (shots / "sub" / "web-x-7.png").write_bytes(png)  # not right inside
    with (shots / "web-x-8.png").open("wb") as huge:
        huge.write(png)
        huge.truncate(1 << 34)  # 16 GiB, sparse: only its signature is read
    served = {
        "web-x-1.png": True,
        "web-x-2.png": False,
        "web-x-3.PNG": False,
        "web-x-4.png": False,
        "web-x-5.png": False,
        "web-x-6.png": False,
        "sub/web-x-7.png": False,
        "web-x-8.png": True,
        "../elsewhere/web-x-1.png": False,
        "sub/../../elsewhere/web-x-1.png": False,
    }
    run = _view_run(tmp_path / "run", "../shots", [])  # recorded relative, with '..': found beside the run
    (run / "picture.png").write_bytes(png)
    (run / "link-1.png").symlink_to(elsewhere / "web-x-1.png")
    os.mkfifo(run / "pipe-1.png")
    [view] = open_runs([run])
    assert {name: view.screenshot(str(shots / name)) is not None for name in served} == served
    assert view.screenshot(str(run / "picture.png")) == run / "picture.png"
    assert view.screenshot(str(run / "link-1.png")) is None and view.screenshot(str(run / "pipe-1.png")) is None
    # a recorded folder that is a link is the folder it points to, as if recorded by that path
    (run / "recorded").symlink_to(elsewhere)
    (run / "eval.json").write_text(json.dumps({"env": "web", "env_args": {"screenshots": "recorded"}}))
    [view] = open_runs([run])
    assert view.screenshot(str(elsewhere / "web-x-1.png")) == elsewhere / "web-x-1.png"
    assert view.screenshot(str(shots / "web-x-1.png")) is None  # the recorded folder was replaced


def test_a_screenshot_path_too_long_for_the_disk_is_shown_as_not_served(tmp_path):
    run = _view_run(tmp_path / "run", None, [f"/{'x' * 300}.png", f"{'y' * 300}.png"])
    with viewing(run) as url:
        reply = get(f"{url}{RECORDS}/0")
        assert reply.status_code == 200, reply.text[:300]
        assert [shot["served"] for shot in reply.json()["screenshots"]] == [False, False]
