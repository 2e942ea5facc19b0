"""The math environment and `ludus verify math`: real files, real worker processes."""

import json
import subprocess
import sys

import pytest

from ludus.certify.contract import check_env_by_name
from ludus.cli.batch import score_jsonl
from ludus.core import Status, make
from ludus.envs.math.env import MathEnv
from ludus.envs.math.verifier import MathVerifier


def test_procedural_math_env_grades_with_the_math_verifier():
    env = MathEnv(family="linear-equation", difficulty=1)
    obs = env.reset(seed=3)
    assert "boxed" in obs.messages[0].content
    task = env.task
    assert env.step(f"so x = {task.answer}, \\boxed{{x = {task.answer}}}").score.status == Status.CORRECT
    env.reset(seed=3)
    assert env.step(f"\\boxed{{{task.answer + 1}}}").score.status == Status.WRONG


def test_math_env_passes_the_contract_check():
    report = check_env_by_name("math")
    assert report.ok, report


def test_format_component_is_paid_only_with_a_correct_answer():
    env = MathEnv(format_weight=0.2)
    env.reset(seed=0)
    answer = env.task.answer
    boxed = env.step(f"\\boxed{{{answer}}}").score
    assert boxed.value == 1.0 and boxed.components == {"correct": 1.0, "format": 1.0}
    env.reset(seed=0)
    plain = env.step(f"Answer: {answer}").score
    assert plain.value == pytest.approx(0.8) and plain.components == {"correct": 1.0, "format": 0.0}
    env.reset(seed=0)
    wrong = env.step(f"\\boxed{{{answer + 1}}}").score
    assert wrong.value == 0.0 and wrong.components["format"] == 1.0
    with pytest.raises(ValueError, match="format_weight"):
        MathEnv(format_weight=1.0)


def test_last_math_fallback_is_an_env_option_and_off_by_default():
    reply = "x = 2 and the answer would be $2$."
    env = MathEnv(family="linear-equation", difficulty=1)
    env.reset(seed=3)
    assert env.step(reply.replace("2", str(env.task.answer))).score.status == Status.NO_ANSWER
    env = MathEnv(family="linear-equation", difficulty=1, fallback="last_math")
    env.reset(seed=3)
    assert env.verifier.fallback == "last_math"
    assert env.step(reply.replace("2", str(env.task.answer))).score.status == Status.CORRECT
    env.reset(seed=3)
    assert env.step(f"it is ${env.task.answer + 1}$").score.status == Status.WRONG


def test_math_env_reads_math_and_gsm8k_files(tmp_path):
    math_file = tmp_path / "math.jsonl"
    math_file.write_text(
        json.dumps({"problem": "What is half of one?", "solution": "Half is $\\boxed{\\frac{1}{2}}$."}) + "\n"
    )
    env = make("math", path=str(math_file), fields="math")
    env.reset(seed=0)
    assert env.step("It is \\boxed{0.5}").score.status == Status.CORRECT
    gsm = tmp_path / "gsm.jsonl"
    gsm.write_text(json.dumps({"question": "1000 + 234?", "answer": "1000+234=1234\n#### 1,234"}) + "\n")
    env = MathEnv(path=str(gsm), fields="gsm8k")
    env.reset(seed=0)
    assert env.step("The total is 1,234.\n#### 1,234").score.status == Status.CORRECT


def test_a_task_without_gold_is_a_gold_error_not_a_reward(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"prompt": "?", "answer": "\\frac{1}{"}) + "\n")
    env = MathEnv(path=str(f))
    env.reset(seed=0)
    score = env.step("\\boxed{1}").score
    assert score.status == Status.GOLD_ERROR and score.value == 0.0


def test_score_jsonl_skips_malformed_lines_and_keeps_order():
    lines = [
        json.dumps({"completion": "\\boxed{4}", "gold": "4", "id": 1}),
        "{not json",
        json.dumps({"completion": "\\boxed{5}", "gold": 4, "id": 2}),
        json.dumps({"gold": "1"}),
        "",
        json.dumps({"completion": ["x"], "gold": "1"}),
        json.dumps({"completion": "Answer: 1/2", "gold": "0.5", "id": 3}),
    ]
    written = []
    report = score_jsonl(lines, written.append, MathVerifier(workers=2).score_many)
    rows = [json.loads(w) for w in written]
    assert [r["id"] for r in rows] == [1, 2, 3]
    assert [r["status"] for r in rows] == ["correct", "wrong", "correct"]
    assert [r["reward"] for r in rows] == [1.0, 0.0, 1.0]
    assert rows[2]["extracted"] == "1/2" and rows[1]["reason"]
    assert [n for n, _ in report.skipped] == [2, 4, 6]
    assert "missing field 'completion'" in report.skipped[1][1]
    assert report.scored == 3 and report.mean_reward == pytest.approx(2 / 3)


def test_ludus_verify_math_cli(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text(
        "\n".join(
            [
                json.dumps({"reply": "\\boxed{\\frac{3}{4}}", "answer": "0.75"}),
                "garbage",
                json.dumps({"reply": "\\boxed{3} or \\boxed{4}", "answer": "3"}),
            ]
        )
    )
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "ludus.cli", "verify", "math", str(source), "-o", str(out)]
    done = subprocess.run(
        [*cmd, "--completion-field", "reply", "--gold-field", "answer"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert [json.loads(x)["status"] for x in out.read_text().splitlines()] == ["correct", "ambiguous"]
    assert "skipped line 2" in done.stderr and "correct" in done.stderr
    missing = subprocess.run([*cmd[:5], str(tmp_path / "nope.jsonl")], capture_output=True, text=True)
    assert missing.returncode == 2 and "not found" in missing.stderr
    # free-form replies: no marker is no_answer, unless the evaluation asks for the last expression
    source.write_text(json.dumps({"reply": "So the total comes to $x = 12$ apples.", "answer": "12"}))
    flags = ["--completion-field", "reply", "--gold-field", "answer"]
    for extra, status in (([], "no_answer"), (["--fallback", "last_math"], "correct")):
        done = subprocess.run([*cmd, *flags, *extra], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert json.loads(out.read_text())["status"] == status
