"""The CLI starts without importing what the command does not use, and ``ludus envs`` lists
environments from their source without importing them, reporting those that cannot be loaded."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ludus.cli import main
from ludus.cli.envs import CannotTell, SourceReader, describe
from ludus.core import registry
from ludus.core.env import SingleTurnEnv
from ludus.core.registry import EnvEntry, entries
from ludus.train.config import FIELDS

# Imported by `ludus envs` or any `--help`, each would cost from tens of milliseconds to seconds.
HEAVY = ("torch", "numpy", "sympy", "rich.progress", "ludus.envs", "ludus.train", "ludus.policies", "ludus.rollout")
HEAVY += ("ludus.sandbox", "ludus.serve", "transformers", "uvicorn", "fastapi")

PROBE = """\
import contextlib, io, json, sys
from ludus.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        code = main(json.loads(sys.argv[1]))
    except SystemExit as exc:
        code = exc.code
print(json.dumps({"code": code, "stdout": out.getvalue(), "modules": sorted(sys.modules)}))
"""


def run_probe(argv: list[str], pythonpath: Path | None = None) -> dict:
    """``ludus.cli.main(argv)`` in a fresh interpreter: its exit code, stdout and the modules it imported."""
    env = {**os.environ, "COLUMNS": "400"}  # one table row per line
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(argv)], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def builtins() -> dict[str, EnvEntry]:
    """Ludus's own environments (other test modules register more in this process)."""
    return {name: entry for name, entry in entries().items() if entry.origin == "builtin"}


def loaded(modules: list[str], packages: tuple[str, ...]) -> list[str]:
    return [m for m in modules if m.startswith(tuple(f"{p}." for p in packages)) or m in packages]


@pytest.mark.parametrize("argv", [["--help"], ["verify", "--help"], ["eval", "--help"], ["check", "--help"]])
def test_help_imports_argparse_and_no_ludus_layer_or_rich(argv):
    probe = run_probe(argv)
    assert probe["code"] == 0 and "usage: ludus" in probe["stdout"]
    assert loaded(probe["modules"], (*HEAVY, "rich", "yaml", "ludus.core")) == []


def test_train_help_reads_the_config_fields_without_torch():
    probe = run_probe(["train", "--help"])
    assert probe["code"] == 0
    for name in FIELDS:  # a yes/no field's value is optional (`--ray` alone means true); some name theirs
        assert re.search(rf"--{name.replace('_', '-')} \[?(VALUE|URL|DIR)\b", probe["stdout"]), name
    assert "ludus.train.config" in probe["modules"]
    assert loaded(probe["modules"], ("torch", "numpy", "ludus.train.trainer", "ludus.policies")) == []


def test_envs_lists_every_builtin_without_importing_any_family():
    probe = run_probe(["envs"])
    assert probe["code"] == 0
    rows = probe["stdout"].splitlines()
    assert {"arithmetic", "math", "code", "sql", "repo"} <= set(builtins())
    for name, entry in builtins().items():
        assert any(name in row and entry.load().description in row and entry.origin in row for row in rows), name
    # a family of many environments (reasoning-gym's rg:NAME) is listed by calling its entry point: that
    # imports its audit table (and the procedural face its graders use), never reasoning-gym or sympy
    listing = ("ludus.envs.reasoning_gym", "ludus.envs.procedural")
    assert "ludus.envs.reasoning_gym.audit" in probe["modules"] and any("rg:chain_sum" in row for row in rows)
    assert [m for m in loaded(probe["modules"], HEAVY) if m != "ludus.envs" and not loaded([m], listing)] == []
    assert loaded(probe["modules"], ("reasoning_gym",)) == []


def test_source_descriptions_match_the_imported_classes():
    source = SourceReader()
    for entry in builtins().values():
        assert source.description(entry.target) == entry.load().description


THIRD_PARTY_ENVS = """\
[ludus.envs]
missing-env = no_such_module:MissingEnv
raising-env = raising_env:RaisingEnv
syntax-env = syntax_env:SyntaxEnv
inherited-env = static_envs:InheritedEnv
plain-env = static_envs:PlainEnv
renamed-env = static_pkg:RenamedEnv
computed-env = computed_env:ComputedEnv
"""

STATIC_ENVS = """\
from ludus.core.env import SingleTurnEnv


class FamilyEnv(SingleTurnEnv):
    description = "shared by the family"


class InheritedEnv(FamilyEnv):
    name = "inherited-env"


class PlainEnv(SingleTurnEnv):
    name = "plain-env"
"""

COMPUTED_ENV = """\
from ludus.core.env import SingleTurnEnv


class ComputedEnv(SingleTurnEnv):
    description = "computed " + "at import"
"""


def write_third_party_package(root: Path) -> None:
    """An installed distribution as importlib.metadata finds it: a dist-info folder and its modules."""
    dist_info = root / "oddenvs-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: oddenvs\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(THIRD_PARTY_ENVS)
    (root / "raising_env.py").write_text("raise RuntimeError('raising_env is broken on purpose')\n")
    (root / "syntax_env.py").write_text("class SyntaxEnv(:\n")
    (root / "static_envs.py").write_text(STATIC_ENVS)
    (root / "static_pkg").mkdir()
    (root / "static_pkg" / "__init__.py").write_text("from .impl import InheritedEnv as RenamedEnv\n")
    (root / "static_pkg" / "impl.py").write_text(STATIC_ENVS)
    (root / "computed_env.py").write_text(COMPUTED_ENV)


def test_envs_reports_environments_that_cannot_load_and_imports_only_unreadable_ones(tmp_path):
    write_third_party_package(tmp_path)
    probe = run_probe(["envs"], pythonpath=tmp_path)
    assert probe["code"] == 0
    rows = {row.split()[1]: row for row in probe["stdout"].splitlines() if row.split()[1:2] and "-env" in row}
    assert "cannot load" in rows["missing-env"] and "No module named 'no_such_module'" in rows["missing-env"]
    assert (
        "cannot load" in rows["raising-env"] and "RuntimeError: raising_env is broken on purpose" in rows["raising-env"]
    )
    assert "cannot load" in rows["syntax-env"] and "SyntaxError" in rows["syntax-env"]
    assert "shared by the family" in rows["inherited-env"] and "entry point (oddenvs)" in rows["inherited-env"]
    assert "shared by the family" in rows["renamed-env"]
    assert "(no description)" in rows["plain-env"]
    assert "computed at import" in rows["computed-env"]
    assert "computed_env" in probe["modules"]
    assert loaded(probe["modules"], ("static_envs", "static_pkg")) == []


@pytest.mark.parametrize(
    "body",
    [
        'description = "a" + "b"',
        'if True:\n        description = "maybe"',
        '@property\n    def description(self):\n        return "late"',
    ],
)
def test_source_reader_cannot_tell_what_only_running_the_class_says(tmp_path, monkeypatch, body):
    (tmp_path / "unsure_env.py").write_text(f"class Base:\n    pass\n\n\nclass UnsureEnv(Base):\n    {body}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(CannotTell):
        SourceReader().description("unsure_env:UnsureEnv")


@pytest.mark.parametrize(
    "source",
    [
        'import functools\n\n\n@functools.total_ordering\nclass UnsureEnv:\n    description = "decorated"\n',
        'class A:\n    description = "a"\n\n\nclass B:\n    description = "b"\n\n\nclass UnsureEnv(B, A):\n    pass\n',
        'class UnsureEnv:\n    description = "first"\n\n\nif True:\n    UnsureEnv = None\n',
    ],
)
def test_source_reader_does_not_guess_past_decorators_several_bases_or_rebinding(tmp_path, monkeypatch, source):
    (tmp_path / "unsure_env.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(CannotTell):
        SourceReader().description("unsure_env:UnsureEnv")


class RegisteredEnv(SingleTurnEnv):
    description = "as written"


def test_an_environment_registered_in_this_process_is_described_by_its_class(monkeypatch):
    monkeypatch.setattr(RegisteredEnv, "description", "as changed at run time")
    monkeypatch.setitem(registry._registered, "registered-env", RegisteredEnv)
    assert describe(entries()["registered-env"], SourceReader()) == "as changed at run time"


def test_user_error_is_one_literal_line(capsys):
    assert main(["check", "[bold]no-such-env-" + "x" * 100]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no environment named '[bold]no-such-env-")
    assert len(err.strip().splitlines()) == 1


def test_python_dash_m_runs_the_cli():
    done = subprocess.run([sys.executable, "-m", "ludus.cli", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "serve-model" in done.stdout


def test_env_server_and_its_client_import_no_torch():
    """An environment server holds environments, not models: torch would cost it a second of
    start-up and 250 MB per server process."""
    code = "import json, sys, ludus.serve.env_server, ludus.rollout.remote; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert loaded(json.loads(done.stdout), ("torch", "numpy", "transformers")) == []
