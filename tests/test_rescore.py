"""``ludus rescore``: real runs graded again — a stricter grader changes exactly the answers it
should, the same grader changes nothing, a multi-turn tool episode replays as it was logged, and a
tampered log, a broken line or a failing environment is reported, never a crash."""

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from ludus.cli import main
from ludus.core import Message, Score, SingleTurnEnv, Status, Task, ToolCall, Trajectory, register
from ludus.core.registry import make
from ludus.envs import SQLEnv
from ludus.rollout.rescore import Regraded, Rescored, regrade

pytestmark = pytest.mark.usefixtures("module_cache")

# a model that writes numbers, some of them partly right: a warm start of seconds
TRAIN = [
    "--tiny", "{d_model: 32, n_layers: 1, n_heads: 2}", "--warmstart-steps", "60", "--warmstart-batch", "16",
    "--steps", "2", "--prompts-per-step", "2", "--group-size", "2", "--eval-size", "4",
    "--time-limit-min", "0", "--threads", "1",
]  # fmt: skip


class ExploringSQL(SQLEnv):
    """The ``sql`` environment whose oracle looks around first: two tool turns, then the answer."""

    name = "sql-exploring"

    def reference_actions(self, task):
        calls = [ToolCall("list_tables", {}, id="call_0"), ToolCall("run_query", {"sql": task.answer}, id="call_1")]
        return [*(Message("assistant", "", tool_calls=[call]) for call in calls), *super().reference_actions(task)]


class GraderDown(SingleTurnEnv):
    """An arithmetic grader whose service is down."""

    name = "grader-down"
    client_task_info = {"family": str}  # arithmetic's tasks: a run's are graded as logged

    def score(self, task, completion):
        raise ConnectionError("the grading service refused the connection")


class ResetDown(GraderDown):
    name = "reset-down"

    def begin(self, task):
        raise OSError("no space left on device")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """A small training run (arithmetic with digit credit 0.5), an evaluation of its model with the
    same grader, and an oracle's multi-turn evaluation of ``sql-exploring``."""
    register(ExploringSQL.name, ExploringSQL)
    runs = tmp_path_factory.mktemp("runs")
    assert main(["train", *TRAIN, "--runs-dir", str(runs), "--name", "train"]) == 0
    evaluation = ["--tasks", "10", "--samples", "4", "--temperature", "1", "--max-tokens", "4", "--runs", str(runs)]
    model = str(runs / "train" / "final")
    assert (
        main(
            ["eval", "arithmetic", "--model", model, "--env-args", "{digit_credit: 0.5}", *evaluation, "--name", "eval"]
        )
        == 0
    )
    assert (
        main(["eval", ExploringSQL.name, "--model", "oracle", "--tasks", "3", "--runs", str(runs), "--name", "sql"])
        == 0
    )
    return runs


def copy_run(runs: Path, name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(runs / name, tmp_path / name))


def trajectories(path: Path) -> list[Trajectory]:
    return [Trajectory.from_dict(json.loads(line)) for line in path.read_text().splitlines()]


def rescore(run: Path, *flags: str) -> tuple[dict, list[dict]]:
    assert main(["rescore", str(run), *flags]) == 0
    lines = [json.loads(line) for line in (run / "rescore.jsonl").read_text().splitlines()]
    return json.loads((run / "rescore.json").read_text()), lines


def partly_credited(trajectory: Trajectory) -> bool:
    return trajectory.score.status == Status.WRONG and trajectory.score.value > 0


def test_a_stricter_grader_takes_back_exactly_the_partial_credit(runs, tmp_path, capsys):
    run = copy_run(runs, "eval", tmp_path)
    logged = (run / "trajectories.jsonl").read_bytes()
    stored = trajectories(run / "trajectories.jsonl")
    credited = [t for t in stored if partly_credited(t)]
    assert credited, "the warm-started model must give some partly right answers for this test to mean anything"

    summary, lines = rescore(run, "--env-args", '{"digit_credit": 0}')
    assert summary["env"] is None and summary["env_args"] == {"arithmetic": {"digit_credit": 0}}
    assert summary["total"] == len(stored) == len(lines) and summary["diverged"] == 0 and summary["skipped"] == {}
    assert summary["changed"] == len(credited)
    assert summary["transitions"] == dict(Counter(f"{t.score.status} -> {t.score.status}" for t in stored))
    for line, trajectory in zip(lines, stored, strict=True):
        assert (line["file"], line["env"], line["task_id"]) == ("trajectories.jsonl", "arithmetic", trajectory.task.id)
        assert line["old"] == trajectory.score.to_dict() and line["old_reward"] == trajectory.reward
        assert (
            line["new"]["value"]
            == line["new_reward"]
            == (0.0 if partly_credited(trajectory) else trajectory.score.value)
        )
        assert line["diverged"] is None and Rescored.from_dict(line).to_dict() == line
        # the line's place: its byte offset starts the trajectory's line, its number counts from 1
        at_offset = logged[line["offset"] :].split(b"\n", 1)[0]
        assert json.loads(at_offset)["task"]["id"] == trajectory.task.id
        assert logged.splitlines()[line["line"] - 1] == at_offset
    assert (run / "trajectories.jsonl").read_bytes() == logged  # the log itself is never touched
    out = capsys.readouterr().out
    assert f"{len(stored)} re-graded, {len(credited)} changed" in out and "digits right) → wrong 0" in out


def test_the_same_grader_changes_nothing_and_a_second_rescore_replaces_the_first(runs, tmp_path):
    run = copy_run(runs, "eval", tmp_path)
    rescore(run, "--env-args", "{digit_credit: 0}")
    assert main(["rescore", str(run)]) == 2  # a folder that records arguments: only when said to be one's own
    summary, lines = rescore(run, "--workers", "2", "--trust-run")  # the arguments eval.json recorded
    assert summary["env_args"] == {"arithmetic": {"digit_credit": 0.5}}
    assert summary["changed"] == summary["diverged"] == 0
    assert len(lines) == summary["total"] == len(trajectories(run / "trajectories.jsonl"))
    assert all(line["new"] == line["old"] for line in lines)


def test_a_training_run_is_rescored_with_the_arguments_its_config_records(runs, tmp_path):
    run = copy_run(runs, "train", tmp_path)
    samples = trajectories(run / "samples.jsonl")
    summary, lines = rescore(run, "--trust-run")
    assert summary["env_args"] == {"arithmetic": {"digits": 2, "ops": "+", "digit_credit": 0.5}}
    assert summary["total"] == len(samples) == len(lines) > 0
    assert summary["changed"] == summary["diverged"] == 0 and all(line["file"] == "samples.jsonl" for line in lines)
    summary, _ = rescore(run, "--env-args", "{digit_credit: 0}")
    assert summary["changed"] == sum(map(partly_credited, samples))


def test_a_multi_turn_tool_episode_replays_as_logged_and_a_tampered_tool_result_diverges(runs, tmp_path):
    run = copy_run(runs, "sql", tmp_path)
    stored = trajectories(run / "trajectories.jsonl")
    assert all(sum(m.role == "tool" for m in t.messages) == 2 and t.score.correct for t in stored)
    summary, lines = rescore(run)
    assert summary == {**summary, "total": 3, "changed": 0, "diverged": 0, "transitions": {"correct -> correct": 3}}

    rows = [json.loads(line) for line in (run / "trajectories.jsonl").read_text().splitlines()]
    tool = next(i for i, m in enumerate(rows[1]["messages"]) if m["role"] == "tool" and m["name"] == "run_query")
    rows[1]["messages"][tool]["content"] = "(no rows)"  # what the model saw is no longer what the database says
    (run / "trajectories.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    summary, lines = rescore(run)
    assert summary["diverged"] == 1 and summary["changed"] == 0
    assert [line["diverged"] is not None for line in lines] == [False, True, False]
    assert lines[1]["diverged"] == f"turn 2's reply differs from the log's at message {tool + 1} (tool)"
    assert lines[1]["new"]["status"] == Status.CORRECT  # the replies are graded all the same, the divergence beside


def test_broken_lines_are_counted_by_reason_with_their_line_numbers(runs, tmp_path, capsys):
    run = copy_run(runs, "eval", tmp_path)
    count = len(trajectories(run / "trajectories.jsonl"))
    with (run / "trajectories.jsonl").open("a") as f:
        f.write('{"schema": 1, "task": {"id": "cut short"\n{"step": 3, "loss": 0.5}\n')
    summary, lines = rescore(run, "--trust-run")
    assert summary["skipped"] == {"broken JSON": 1, "not a trajectory": 1}
    assert summary["total"] == len(lines) == count
    err = capsys.readouterr().err
    assert f"trajectories.jsonl line {count + 1}: broken JSON" in err
    assert f"trajectories.jsonl line {count + 2}: not a trajectory" in err


def test_an_environment_that_fails_while_grading_gives_infra_error_not_a_crash(runs, tmp_path):
    register(GraderDown.name, GraderDown)
    run = copy_run(runs, "eval", tmp_path)
    summary, lines = rescore(run, "--env", GraderDown.name)
    assert summary["env"] == GraderDown.name and summary["changed"] == summary["total"] == len(lines)
    assert all(transition.endswith(" -> infra_error") for transition in summary["transitions"])
    assert all(
        line["new"]["status"] == Status.INFRA_ERROR and "ConnectionError" in line["new"]["reason"] for line in lines
    )

    trajectory = trajectories(run / "trajectories.jsonl")[0]
    regraded = regrade(ResetDown(), trajectory)
    assert regraded.score.status == Status.INFRA_ERROR
    assert regraded.score.reason == "environment reset raised OSError: no space left on device"


def test_a_conversation_without_token_turns_is_graded_and_one_cut_short_is_not_a_reward():
    env = make("arithmetic")
    task = Task("sum", "2+3=", answer=5)
    opening = [Message("system", "Reply with the final answer only."), Message("user", "2+3=")]
    answered = regrade(env, Trajectory(task, [*opening, Message("assistant", "5")]))
    assert answered == Regraded(answered.score, None, 1.0) and answered.score.correct
    cut = regrade(env, Trajectory(task, opening))
    assert cut.score == Score.zero(
        Status.TRUNCATED, "the log ends after 0 turns, before the environment ended the episode"
    )
    assert cut.diverged == cut.score.reason
    overlong = regrade(
        env,
        Trajectory(task, [*opening, Message("assistant", "5"), Message("user", "sure?"), Message("assistant", "6")]),
    )
    assert (
        overlong.score.correct and overlong.diverged == "turn 1's reply: the environment gave 0 messages, the log has 1"
    )


@pytest.mark.parametrize(
    ("where", "flags", "said"),
    [
        ("missing", [], "is not a folder"),
        ("empty", [], "holds no trajectory file"),
        ("eval", ["--env", "no-such-env"], "no environment named 'no-such-env'"),
        ("eval", ["--env-args", "{digit_credit: 2}"], "digit_credit must be in [0, 1)"),
    ],
)
def test_what_cannot_be_rescored_is_one_sentence_and_exit_2(runs, tmp_path, capsys, where, flags, said):
    (tmp_path / "empty").mkdir()
    folder = runs / where if where == "eval" else tmp_path / where
    assert main(["rescore", str(folder), *flags]) == 2
    assert said in capsys.readouterr().err
    assert not (runs / "eval" / "rescore.json").exists()
