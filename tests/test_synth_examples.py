"""The three example APIs of `ludus synth` (docs/synth.md: the shop, the team calendar, the help
desk), end to end: each package is written and pip-installed, `ludus check NAME --redteam` runs
on it, the installed environment's oracle solves 30 train and 30 eval tasks, doing nothing earns
nothing on a task that asks for a change, and every kind of task occurs."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections import Counter

import pytest

from ludus.core.types import Message, Status
from ludus.envs.synth import EXAMPLES
from ludus.envs.synth.package import synthesize
from ludus.envs.synth.tasks import CHANGES, KINDS

NAMES = {"shop": "corner-shop", "calendar": "team-calendar", "ticketing": "help-desk"}  # example -> environment
LEFT_OUT = {  # what each example declares that the simulation must leave out, as SYNTH.md reports it
    "shop": [],
    "calendar": ["GET /calendars/{calendarId}/events", "POST /events/{eventId}/cancel", "GET /events/{eventId}/attendees",
                 "POST /events/{eventId}/attendees", "GET /freebusy"],
    "ticketing": ["GET /tickets/{ticketId}/comments", "POST /tickets/{ticketId}/comments",
                  "POST /tickets/{ticketId}/escalate", "GET /users/me", "GET /tickets/export"],
}  # fmt: skip


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The three packages, written by `ludus synth` and installed by pip into one folder (once)."""
    root = tmp_path_factory.mktemp("synth-examples")
    made = {stem: synthesize(EXAMPLES / f"{stem}.yaml", root / stem) for stem in NAMES}
    site = root / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(site)]
    subprocess.run([*pip, *(str(root / stem) for stem in NAMES)], check=True, capture_output=True)
    return site, made


@pytest.fixture
def installed_env(installed, monkeypatch):
    """The installed package's ``Env`` class of an example, imported from pip's folder."""
    site, made = installed
    monkeypatch.syspath_prepend(str(site))
    return lambda stem: importlib.import_module(made[stem].module).Env


@pytest.mark.parametrize("stem", list(NAMES))
def test_each_example_is_written_whole_and_its_report_lists_what_is_left_out(installed, stem):
    _, made = installed
    result = made[stem]
    assert result.env_name == NAMES[stem] and result.kinds == list(KINDS)
    report = (result.folder / "SYNTH.md").read_text()
    assert [s.where for s in result.catalog.skipped] == LEFT_OUT[stem]
    for where in LEFT_OUT[stem]:
        assert f"- {where}: " in report
    assert len(result.catalog.resources) == 3


@pytest.mark.parametrize("stem", list(NAMES))
def test_ludus_check_redteam_passes(installed, stem):
    site, _ = installed
    env = {**os.environ, "PYTHONPATH": str(site)}
    check = subprocess.run([sys.executable, "-m", "ludus.cli", "check", NAMES[stem], "--redteam"], env=env,
                           capture_output=True, text=True, timeout=600)  # fmt: skip
    out = check.stdout + check.stderr
    assert "✓ oracle" in out and "✓ floor" in out, out[-3000:]
    failed = [line for line in out.splitlines() if line.startswith("✗")]
    assert not failed, failed
    assert check.returncode == 0 and "resists the red-team" in out, out[-3000:]


@pytest.mark.parametrize("stem", list(NAMES))
def test_the_oracle_solves_train_and_eval_and_doing_nothing_changes_nothing(installed_env, stem):
    env = installed_env(stem)()
    kinds: Counter[str] = Counter()
    for split in ("train", "eval"):
        source = env.task_source(split)
        for index in range(30):
            task = source.get(index)
            kind = task.info["goal"]["kind"]
            kinds[kind] += 1
            env.reset(task, seed=index)
            for message in env.reference_actions(task):
                result = env.step(message)
                if result.done:
                    break
            assert (result.score.status, result.score.value) == (Status.CORRECT, 1.0), (task.prompt, result.score)
            if kind in CHANGES:
                env.reset(task, seed=index)
                nothing = env.step(Message("assistant", ""))
                assert nothing.done and nothing.score.value == 0.0, (task.prompt, nothing.score)
    assert set(kinds) == set(KINDS), kinds
