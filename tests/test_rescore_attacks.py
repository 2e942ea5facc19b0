"""``ludus rescore`` on a run folder that may come from anyone: hostile lines are skipped by reason,
never a crash; the report prints what the log says as text; nothing is written through a planted
link; recorded arguments that name code are refused; Ctrl-C stops a rescore stuck in an
environment; and a re-grade never turns an empty or constant reply into reward."""

from __future__ import annotations

import json
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path

import pytest

from ludus.cli import main
from ludus.core import Message, SingleTurnEnv, Task, Trajectory, register
from ludus.core.registry import make
from ludus.rollout import records
from ludus.rollout.records import DEEPEST
from ludus.rollout.rescore import UntrustedTask, regrade, rescore_run

pytestmark = pytest.mark.usefixtures("module_cache")

OPENING = make("arithmetic").reset(Task("t", "2+3=", answer=5)).messages  # what the environment shows first


def trajectory(reply: str = "5", task_id: str = "t", answer: int = 5, **changes) -> dict:
    """A logged arithmetic episode, as ``ludus eval`` writes it, with ``changes`` to its fields."""
    logged = Trajectory(
        Task(task_id, "2+3=", answer=answer), [*OPENING, Message("assistant", reply)], env="arithmetic", seed=0
    ).to_dict()
    return logged | changes


def run_folder(tmp_path: Path, rows: list, env_args: dict | None = None) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "eval.json").write_text(json.dumps({"env": "arithmetic", "env_args": env_args or {}}))
    text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)
    (run / "trajectories.jsonl").write_bytes(text.encode())
    return run


def rescored(run: Path, *flags: str) -> tuple[dict, list[dict]]:
    assert main(["rescore", str(run), "--workers", "1", *flags]) == 0
    lines = [json.loads(line) for line in (run / "rescore.jsonl").read_text().splitlines()]
    return json.loads((run / "rescore.json").read_text()), lines


# each hostile line and the reason it is skipped under
HOSTILE = [
    ("[" * 100_000 + "]" * 100_000, "broken JSON"),  # RecursionError
    (json.dumps(trajectory()).replace('"content": "5"', '"content": "\\ud800"'), "broken JSON"),  # not UTF-8
    (json.dumps(trajectory(task_id="a")).replace('"a"', '"\\udc00"'), "broken JSON"),
    (trajectory(env=["x"]), "not a trajectory"),  # unhashable
    (trajectory(env={"a": 1}), "not a trajectory"),
    (trajectory(env=5), "not a trajectory"),
    ({**trajectory(), "task": {"id": 7, "prompt": "2+3=", "answer": 5}}, "not a trajectory"),  # escape() of an int
    (trajectory(seed="abc"), "not a trajectory"),
    (trajectory(score={"value": 10**400}), "not a trajectory"),  # OverflowError
    (
        trajectory(turns=[{"prompt_ids": [1], "completion_ids": [2], "logprobs": [0.0], "reward": "1"}]),
        "not a trajectory",
    ),  # the old reward's sum
    (trajectory(info=[1]), "not a trajectory"),
    (trajectory(score={"value": 1, "reason": ["x"]}), "not a trajectory"),  # escape() of a list
]


def test_hostile_lines_are_skipped_by_reason_and_the_good_ones_graded(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(records, "LONGEST_LINE", 300_000)  # over the deeply nested line
    huge = trajectory(reply="5" + " " * 400_000)
    rows = [trajectory(), huge, *(row for row, _ in HOSTILE), json.dumps(trajectory()) + "\r"]  # CRLF
    run = run_folder(tmp_path, rows)
    with (run / "trajectories.jsonl").open("a") as f:
        f.write(json.dumps(trajectory())[:-20])  # the writer died mid-line
    summary, lines = rescored(run)
    assert summary["skipped"] == {"broken JSON": 4, "not a trajectory": len(HOSTILE) - 3, "too long": 1}
    assert summary["total"] == len(lines) == 2 and summary["transitions"] == {"unscored -> correct": 2}
    assert [line["line"] for line in lines] == [1, len(rows)]
    err = capsys.readouterr().err
    assert "line 2: too long (the line is over 300,000 bytes)" in err
    assert f"line 3: broken JSON (nested deeper than {DEEPEST} levels)" in err


def test_the_report_prints_what_the_log_says_as_text(tmp_path, capsys):
    rows = [
        trajectory(task_id="\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\ \x1b[2J[red]x\nline", score={"value": 0}),
        trajectory(task_id="b", score={"value": 0, "status": "a -> b", "reason": "[/] [link=http://evil]y"}),
        trajectory(task_id="c", score={"value": 0, "status": "[bold]wrong[/bold]", "reason": "\u202edesrever"}),
    ]
    summary, lines = rescored(run_folder(tmp_path, rows))
    assert summary["changed"] == 3 and {line["task_id"] for line in lines} == {rows[0]["task"]["id"], "b", "c"}
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\u202e")  # no escape sequence and no reversed text reaches the terminal
    assert "\\x1b]8;;http://evil\\x1b\\click" in out and "\\x1b[2J[red]x\\nline:" in out
    assert "a -> b 0 ([/] [link=http://evil]y)" in out and "[bold]wrong[/bold]" in out and "\\u202edesrever" in out


def test_a_link_planted_in_the_run_folder_is_never_written_through(tmp_path):
    precious = tmp_path / "precious.txt"
    precious.write_text("precious")
    run = run_folder(tmp_path, [trajectory()])
    for name in (".rescore.jsonl.tmp", ".rescore.json.tmp", "rescore.jsonl", "rescore.json"):
        (run / name).symlink_to(precious)
    summary, lines = rescored(run)
    assert precious.read_text() == "precious"
    assert summary["total"] == len(lines) == 1 and not (run / "rescore.jsonl").is_symlink()
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(".rescore")) == [
        ".rescore.json.tmp",
        ".rescore.jsonl.tmp",
    ]  # only the planted links: no temporary file is left behind


@pytest.mark.parametrize(
    "recorded",
    [
        {"rubric": [{"name": "x", "function": "subprocess:getoutput", "options": {"cmd": "touch {marker}"}}]},
        {"command": "touch {marker}"},
    ],
)
def test_recorded_arguments_that_name_code_are_refused(tmp_path, capsys, recorded):
    marker = tmp_path / "ran"
    run = run_folder(tmp_path, [trajectory()], json.loads(json.dumps(recorded).replace("{marker}", str(marker))))
    assert main(["rescore", str(run)]) == 2
    assert "names code to run" in capsys.readouterr().err and not marker.exists()
    assert not (run / "rescore.json").exists()
    summary, _ = rescored(run, "--env-args", "{}")  # the user's own arguments
    assert summary["total"] == 1


def test_a_trajectory_file_that_cannot_be_read_is_one_sentence(tmp_path, capsys):
    run = run_folder(tmp_path, [])
    (run / "trajectories.jsonl").unlink()
    (run / "trajectories.jsonl").symlink_to("/proc/self/mem")  # a regular file whose first byte is an I/O error
    assert main(["rescore", str(run)]) == 2
    assert "trajectories.jsonl cannot be read: Input/output error" in capsys.readouterr().err


@pytest.mark.parametrize("workers", ["0", "-1", "100000"])
def test_workers_out_of_range_is_one_sentence(tmp_path, capsys, workers):
    assert main(["rescore", str(run_folder(tmp_path, [trajectory()])), "--workers", workers]) == 2
    assert "--workers must be between 1 and 256" in capsys.readouterr().err


class ConstructorFails(SingleTurnEnv):
    name = "rescore-constructor-fails"

    def __init__(self, **kwargs):
        raise RuntimeError("the licence server is down")

    def score(self, task, completion):
        raise AssertionError("never made")


def test_an_environment_that_cannot_be_made_is_one_sentence(tmp_path, capsys):
    register(ConstructorFails.name, ConstructorFails)
    run = run_folder(tmp_path, [trajectory(env=ConstructorFails.name)])
    assert main(["rescore", str(run)]) == 2
    assert "could not be made: RuntimeError: the licence server is down" in capsys.readouterr().err


class Hangs(SingleTurnEnv):
    """An arithmetic grader that hangs until the test lets it go."""

    name = "rescore-hangs"
    client_task_info = {}  # its tasks hold nothing of the machine's: a run's are graded as logged
    entered, release = threading.Event(), threading.Event()

    def score(self, task, completion):
        Hangs.entered.set()
        Hangs.release.wait()
        return make("arithmetic").score(task, completion)


def test_ctrl_c_stops_a_rescore_stuck_in_an_environment_that_hangs(tmp_path):
    """The documented limitation: no time limit. Ctrl-C must still stop it at once rather than wait
    for the stuck worker (the watcher below sees the main thread wait for it, then lets it go, so a
    regression fails instead of hanging)."""
    register(Hangs.name, Hangs)
    run = run_folder(tmp_path, [trajectory(), trajectory()])
    main_thread, waited_for_the_worker, returned = threading.get_ident(), [], threading.Event()

    def interrupt_and_watch() -> None:
        Hangs.entered.wait()
        signal.pthread_kill(main_thread, signal.SIGINT)
        while not returned.is_set():
            frame = sys._current_frames().get(main_thread)
            while frame is not None and frame.f_code.co_name != "join":
                frame = frame.f_back
            if frame is not None and not returned.is_set():  # returned is set before the test's own join
                waited_for_the_worker.append(True)
                break
            time.sleep(0.01)
        Hangs.release.set()

    watcher = threading.Thread(target=interrupt_and_watch)
    watcher.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            rescore_run(run, env=Hangs.name, workers=1)
    finally:
        returned.set()
        watcher.join()
    assert not waited_for_the_worker
    assert not (run / "rescore.jsonl").exists() and not list(run.glob(".rescore*"))


def test_empty_and_constant_replies_earn_nothing_on_a_re_grade():
    env = make("arithmetic")
    try:
        for reply in ["", " ", "\u200b", "[/]", "5"]:  # "5" answers every task with the same number
            for answer in (7, 11):
                task = Task(f"t{answer}", f"{answer - 2}+2=", answer=answer)
                logged = Trajectory(task, [*OPENING, Message("assistant", reply)])
                assert not regrade(env, logged).score.correct and regrade(env, logged).reward == 0
    finally:
        env.close()


def _secrets(tmp_path: Path) -> Path:
    """An SQLite file of this machine's user, outside any run folder."""
    secrets = tmp_path / "elsewhere" / "browser-cookies.db"
    secrets.parent.mkdir()
    with sqlite3.connect(secrets) as db:
        db.execute("CREATE TABLE secrets (token TEXT)")
        db.execute("INSERT INTO secrets VALUES ('hunter2')")
    return secrets


GUESS = Message("assistant", "```sql\nSELECT 'hunter2'\n```")


def test_a_forged_task_cannot_make_the_grader_read_a_file_outside_the_run(tmp_path):
    secrets = _secrets(tmp_path)
    env = make("sql")
    try:
        forged = Task("forged", "the token?", answer="SELECT token FROM secrets", info={"db": str(secrets)})
        with pytest.raises(UntrustedTask, match="none of sql's own tasks"):
            regrade(env, Trajectory(forged, [Message("user", "the token?"), GUESS]))
        # under the id of one of the environment's own tasks, that task is graded, not the forged one
        own = env.task_source("train").get(2)
        posing = Task(own.id, "the token?", answer="SELECT token FROM secrets", info={**own.info, "db": str(secrets)})
        opening = env.reset(own).messages
        assert not regrade(env, Trajectory(posing, [*opening, GUESS])).score.correct
        gold = Message("assistant", f"```sql\n{own.answer}\n```")
        assert regrade(env, Trajectory(posing, [*opening, gold])).score.correct
        assert regrade(env, Trajectory(forged, [Message("user", "the token?"), GUESS]), trust_task=True).score.correct
    finally:
        env.close()


def test_a_run_folders_forged_tasks_are_skipped_unless_trusted(tmp_path):
    secrets = _secrets(tmp_path)
    env = make("sql")
    try:
        own = env.task_source("train").get(2)
        gold = Message("assistant", f"```sql\n{own.answer}\n```")
        honest = Trajectory(own, [*env.reset(own).messages, gold], env="sql")
    finally:
        env.close()
    forged = Task("forged", "the token?", answer="SELECT token FROM secrets", info={"db": str(secrets)})
    run = tmp_path / "run"
    run.mkdir()
    (run / "eval.json").write_text(json.dumps({"env": "sql", "env_args": {}}))
    rows = [honest.to_dict(), Trajectory(forged, [Message("user", "the token?"), GUESS], env="sql").to_dict()]
    (run / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary, lines = rescored(run)
    assert summary["skipped"] == {"untrusted task": 1} and summary["total"] == 1
    assert [line["task_id"] for line in lines] == [own.id] and lines[0]["new"]["status"] == "correct"
    summary, lines = rescored(run, "--trust-run")  # the user's own folder and tasks file: graded as recorded
    assert summary["skipped"] == {} and [line["new"]["status"] for line in lines] == ["correct", "correct"]
