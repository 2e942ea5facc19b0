"""The README's promises: the example is the file that runs, and CI runs the README's test command."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, re.S)


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one():
    setup = README.split("## Set up on a new machine", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)\n```", setup, re.S)
    assert len(commands) == 2
    assert commands[0].rstrip().endswith("ludus train")
    assert "pytest" in commands[1]
    assert commands[1].strip() in (ROOT / ".ci" / "run").read_text()


def test_environment_example_is_the_file_and_it_runs():
    example = (ROOT / "examples" / "reverse_env.py").read_text()
    assert example in _blocks("python")
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "reverse_env.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "meets the environment contract" in out
    assert "status='wrong'" in out
