"""An environment whose optional package is missing says, in one line, what to install.

This venv has every extra, so each test runs ``ludus`` in a subprocess where the packages are
hidden the way Python sees a missing one: ``sys.modules[name] = None`` makes ``import name`` fail
and ``importlib.util.find_spec(name)`` return None.
"""

import json
import os
import subprocess
import sys

import pytest

WEB = "pip install 'ludus[web]'"


def ludus(argv: list[str], hidden: tuple[str, ...], cwd, extra_env: dict[str, str] | None = None):
    """``ludus ARGV`` with the modules ``hidden`` not installed."""
    program = (
        "import sys\n"
        f"for name in {list(hidden)!r}:\n"
        "    sys.modules[name] = None\n"
        "from ludus.cli import main\n"
        "raise SystemExit(main(sys.argv[1:]))\n"
    )
    env = {**os.environ, "COLUMNS": "200", "LUDUS_CACHE": str(cwd / "cache"), **(extra_env or {})}
    return subprocess.run(
        [sys.executable, "-c", program, *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )


def test_envs_marks_the_environments_whose_package_is_missing(tmp_path):
    done = ludus(["envs"], ("playwright", "miniwob", "bfcl_eval", "reasoning_gym"), tmp_path)
    assert done.returncode == 0, done.stderr
    listing = " ".join(done.stdout.split())
    assert f"not installed (playwright): {WEB}" in listing
    assert f"not installed (playwright, miniwob): {WEB}" in listing
    assert "not installed (bfcl_eval): pip install --no-deps bfcl-eval==2026.3.23" in listing
    assert "rg:* │ the rg: environments need reasoning-gym: pip install 'ludus[reasoning-gym]'" in listing
    assert listing.count("not installed") == 4  # web, miniwob, bfcl, bfcl-multi-turn; nothing else
    assert done.stderr == ""


@pytest.mark.parametrize(
    ("argv", "hidden", "line"),
    [
        (["check", "web"], ("playwright",), f"environment 'web' needs playwright, which is not installed: {WEB}"),
        (
            ["eval", "web", "--tasks", "2", "--model", "oracle", "--runs", "RUNS"],
            ("playwright",),
            "environment 'web' needs playwright",
        ),
        (["train", "--env", "web", "--steps", "1", "--runs-dir", "RUNS"], ("playwright",), "environment 'web' needs"),
        (
            ["check", "miniwob"],
            ("playwright", "miniwob"),
            f"environment 'miniwob' needs playwright and miniwob, which are not installed: {WEB}",
        ),
        (
            ["eval", "bfcl-multi-turn", "--tasks", "2", "--runs", "RUNS"],
            ("bfcl_eval",),
            "environment 'bfcl-multi-turn' needs bfcl_eval, which is not installed: "
            "pip install --no-deps bfcl-eval==2026.3.23",
        ),
    ],
)
def test_a_command_on_such_an_environment_stops_with_one_line_naming_the_install(tmp_path, argv, hidden, line):
    done = ludus([str(tmp_path / "runs") if arg == "RUNS" else arg for arg in argv], hidden, tmp_path)
    output = (done.stdout + done.stderr).strip()
    assert done.returncode == 2, output
    assert output.splitlines() == [output] and output.startswith(f"error: {line}"), output  # no traceback, no warning
    assert not (tmp_path / "runs").exists()  # stopped before anything was written


def test_bfcl_reads_a_folder_of_its_files_without_the_wheel(tmp_path):
    """``path=`` stands in for the bfcl-eval wheel: nothing is missing then."""
    item = {
        "id": "simple_python_0",
        "question": [[{"role": "user", "content": "What is 5 factorial?"}]],
        "function": [
            {
                "name": "math.factorial",
                "description": "n!",
                "parameters": {"type": "dict", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
            }
        ],
    }
    (tmp_path / "data" / "possible_answer").mkdir(parents=True)
    (tmp_path / "data" / "BFCL_v4_simple_python.json").write_text(json.dumps(item) + "\n")
    answer = {"id": "simple_python_0", "ground_truth": [{"math.factorial": {"n": [5]}}]}
    (tmp_path / "data" / "possible_answer" / "BFCL_v4_simple_python.json").write_text(json.dumps(answer) + "\n")
    env_args = json.dumps({"path": str(tmp_path / "data"), "eval_fraction": 0.0})
    done = ludus(["check", "bfcl", "--env-args", env_args], ("bfcl_eval",), tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "bfcl meets the environment contract" in done.stdout


def test_a_browser_that_cannot_start_leaves_no_coroutine_unawaited(tmp_path):
    """The episode's opening coroutine was made before asking for the browser: when no browser
    could start, Python warned at exit that it was never awaited."""
    program = (
        "from ludus.envs.web import ShopEnv\n"
        "env = ShopEnv()\n"
        "try:\n"
        "    env.reset(env.task_source('eval').get(0))\n"
        "except RuntimeError as exc:\n"
        "    print('refused:', exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=tmp_path,
        env={**os.environ, "LUDUS_CHROMIUM": str(tmp_path / "no-chromium")},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("refused: LUDUS_CHROMIUM=") and done.stderr == ""
