"""`ludus synth SPEC -o FOLDER` (issue 36, in progress): the package it writes installs with pip,
its entry point names the environment, and `ludus check --redteam` passes on it; documents it
cannot use are refused before anything is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ludus.cli import main
from ludus.envs.synth import EXAMPLES

SHOP = EXAMPLES / "shop.yaml"


def test_the_package_installs_and_passes_the_red_team(tmp_path):
    out, target = tmp_path / "pkg", tmp_path / "site"
    assert main(["synth", str(SHOP), "-o", str(out)]) == 0
    report = (out / "SYNTH.md").read_text()
    assert "`corner-shop`" in report and "'in_stock'" in report  # what the simulation left out of a tool
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(target)]
    subprocess.run([*pip, str(out)], check=True, capture_output=True)
    env = {**os.environ, "PYTHONPATH": str(target)}
    check = subprocess.run([sys.executable, "-m", "ludus.cli", "check", "corner-shop", "--redteam"], env=env,
                           capture_output=True, text=True, timeout=600)  # fmt: skip
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]
    assert "resists the red-team" in check.stdout + check.stderr


def test_an_existing_folder_is_kept_unless_it_is_a_package_synth_wrote(tmp_path, capsys):
    out = tmp_path / "pkg"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["synth", str(SHOP), "-o", str(out)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert main(["synth", str(SHOP), "-o", str(out), "--force"]) == 2  # not a package synth wrote: never removed
    assert (out / "notes.txt").read_text() == "mine"
    fresh = tmp_path / "fresh"
    assert main(["synth", str(SHOP), "-o", str(fresh), "--name", "shop-2"]) == 0
    assert main(["synth", str(SHOP), "-o", str(fresh), "--force", "--name", "shop-2"]) == 0
    assert 'shop-2 = "ludus_synth_shop_2:Env"' in (fresh / "pyproject.toml").read_text()


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"openapi": "3.1.0", "info": {"title": "Empty", "version": "1"}, "paths": {}}, "no resource can be simulated"),
        ({"swagger": "2.0", "info": {"title": "Old"}}, "Swagger 2.0"),
    ],
)
def test_documents_with_nothing_to_simulate_are_refused_before_writing(tmp_path, capsys, document, message):
    spec = tmp_path / "api.json"
    spec.write_text(json.dumps(document))
    assert main(["synth", str(spec), "-o", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_a_name_that_cannot_name_an_environment_is_refused(tmp_path, capsys):
    assert main(["synth", str(SHOP), "-o", str(tmp_path / "o"), "--name", "../evil"]) == 2
    assert "--name must be" in capsys.readouterr().err and not (tmp_path / "o").exists()
