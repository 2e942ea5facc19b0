"""Environments are found by name: built-ins, register(), and installed packages' ``ludus.envs`` entry points."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import ludus
from ludus.core import registry
from ludus.core.env import SingleTurnEnv
from ludus.core.registry import EnvEntry, EnvLoadError, UnknownEnvError, entries, env_class, make, register
from ludus.core.types import Score, Status, Task


class Fixed(SingleTurnEnv):
    name = "fixed"
    description = "always the same question"

    def score(self, task: Task, completion: str) -> Score:
        return Score(1.0 if completion == "yes" else 0.0, Status.CORRECT if completion == "yes" else Status.WRONG)


@pytest.fixture(autouse=True)
def clean_registrations(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_registered", {})


def test_builtins_are_listed_without_importing_them() -> None:
    known = entries()
    assert {"arithmetic", "countdown", "sorting", "linear-equation"} <= set(known)
    assert known["arithmetic"] == EnvEntry("arithmetic", "ludus.envs.procedural:ArithmeticEnv", "builtin")
    assert list(known) == sorted(known)


def test_make_arithmetic_runs_an_episode() -> None:
    env = make("arithmetic", digits=1)
    obs = env.reset(seed=0)
    assert env.task is not None
    result = env.step(str(env.task.answer))
    assert obs.messages[-1].role == "user"
    assert result.terminated and result.reward == 1.0


def test_unknown_name_suggests_close_matches() -> None:
    with pytest.raises(UnknownEnvError) as info:
        make("arithmetc")
    message = str(info.value)
    assert "no environment named 'arithmetc'" in message
    assert "Did you mean 'arithmetic'" in message
    assert "ludus envs" in message
    assert isinstance(info.value, KeyError)


def test_unknown_name_without_close_match_has_no_suggestion() -> None:
    with pytest.raises(UnknownEnvError) as info:
        env_class("zzzzzzzz")
    assert "Did you mean" not in str(info.value)


def test_register_makes_a_class_available() -> None:
    register("fixed-test", Fixed)
    assert entries()["fixed-test"].origin == "registered"
    assert entries()["fixed-test"].target == f"{__name__}:Fixed"
    env = make("fixed-test")
    env.reset(Task("q", "Is it?"))
    assert env.step("yes").reward == 1.0


def test_register_rejects_non_env() -> None:
    with pytest.raises(TypeError, match="needs an Env subclass"):
        register("bad", dict)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("target", "fragment"),
    [
        ("ludus.no_such_module:Env", "failed to import: ModuleNotFoundError"),
        ("ludus.core.registry:NoSuchClass", "failed to import: AttributeError"),
        ("json:dumps", "is not a ludus Env subclass"),
    ],
)
def test_load_errors_are_clear(target: str, fragment: str) -> None:
    with pytest.raises(EnvLoadError, match=fragment) as info:
        EnvEntry("broken", target, "entry point (somepkg)").load()
    assert "'broken'" in str(info.value) and target in str(info.value)


PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "hellodist"
version = "0.0.1"

[tool.setuptools]
py-modules = ["hello_env", "hello_broken"]

[project.entry-points."ludus.envs"]
hello-env = "hello_env:HelloEnv"
not-an-env = "hello_env:greet"
broken-env = "hello_broken:HelloEnv"
"""

HELLO = """\
from ludus.core.env import SingleTurnEnv
from ludus.core.types import Score, Task


class Greetings:
    size = None

    def get(self, index):
        return Task(f"hello/{index}", f"Greet person number {index}.", answer="hello")


class HelloEnv(SingleTurnEnv):
    name = "hello-env"
    description = "say hello"

    def default_tasks(self, split="train"):
        return Greetings()

    def score(self, task, completion):
        if task.answer in completion.lower():
            return Score(1.0, "correct", "greeted")
        return Score.zero("wrong", "no greeting")


def greet():
    return "hello"
"""

PROBE = """\
import importlib.metadata, json, sys
import ludus
from ludus.certify.contract import check_env_by_name, format_report
from ludus.core.registry import EnvLoadError, entries, env_class, make

out = {"prefix": sys.prefix, "ludus": ludus.__file__}
out["dist_files"] = str(importlib.metadata.distribution("hellodist").locate_file(""))
entry = entries()["hello-env"]
out["origin"], out["target"] = entry.origin, entry.target
env = make("hello-env")
obs = env.reset(seed=3)
result = env.step("Hello there!")
out["prompt"] = obs.messages[-1].content
out["score"] = result.score.to_dict()
out["done"] = result.done
for name in ("not-an-env", "broken-env"):
    try:
        env_class(name)
        out[name] = None
    except EnvLoadError as exc:
        out[name] = str(exc)
report = check_env_by_name("hello-env")
out["check_ok"], out["check"] = report.ok, format_report(report)
print(json.dumps(out))
"""


def _run(cmd: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.slow
def test_entry_point_in_a_fresh_virtualenv(tmp_path: Path) -> None:
    pkg = tmp_path / "hellopkg"
    pkg.mkdir()
    (pkg / "pyproject.toml").write_text(PYPROJECT)
    (pkg / "hello_env.py").write_text(HELLO)
    (pkg / "hello_broken.py").write_text("raise RuntimeError('hello_broken is broken on purpose')\n")

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_", "VIRTUAL_ENV"))}
    venv = tmp_path / "venv"
    # no pip of its own: the .pth below lends it this interpreter's packages (pip, setuptools, ludus's deps)
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], env)
    python = str(venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python"))
    site_packages = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], env).strip()
    src = Path(ludus.__file__).resolve().parents[1]
    (Path(site_packages) / "ludus_dev.pth").write_text(f"{sysconfig.get_paths()['purelib']}\n{src}\n")

    _run(
        [python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
        + ["--disable-pip-version-check", str(pkg)],
        env,
    )
    out = json.loads(_run([python, "-c", PROBE], env).splitlines()[-1])

    assert Path(out["prefix"]).resolve() == venv.resolve()
    assert Path(out["dist_files"]).resolve().is_relative_to(Path(site_packages).resolve())
    assert Path(out["ludus"]).resolve().is_relative_to(src)
    assert out["origin"] == "entry point (hellodist)"
    assert out["target"] == "hello_env:HelloEnv"
    assert out["prompt"] == "Greet person number 3."
    assert out["done"] and out["score"]["value"] == 1.0 and out["score"]["status"] == "correct"
    assert "'not-an-env'" in out["not-an-env"] and "is not a ludus Env subclass" in out["not-an-env"]
    assert "'broken-env'" in out["broken-env"] and "entry point (hellodist)" in out["broken-env"]
    assert "RuntimeError: hello_broken is broken on purpose" in out["broken-env"]
    assert out["check_ok"], out["check"]
