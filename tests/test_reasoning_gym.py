"""reasoning-gym's datasets as rg:NAME environments: the registry family, the contract on every
dataset, difficulty levels, the full-marks-only rule, and the audit table in the docs."""

from __future__ import annotations

import decimal
import json
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
from reasoning_gym import factory

from ludus.certify.contract import check_env_by_name, format_report
from ludus.core import registry
from ludus.core.types import Message, Status
from ludus.envs.reasoning_gym import env_class, offered
from ludus.envs.reasoning_gym.audit import AUDIT
from ludus.train.config import ConfigError, TrainConfig
from ludus.train.curriculum import build_picker

DOCS = Path(__file__).parents[1] / "docs" / "reasoning_gym.md"
OFFERED = sorted(offered())


def test_every_dataset_has_a_verdict_and_with_ours_there_are_over_a_hundred_families():
    assert set(AUDIT) == set(factory.DATASETS)
    refused = {name for name, v in AUDIT.items() if v.kind == "refused"}
    assert set(OFFERED) == set(factory.DATASETS) - refused
    ours = {name for name, e in registry.entries().items() if e.origin == "builtin"}
    assert len(OFFERED) + len(ours) >= 100, (len(OFFERED), sorted(ours))
    for name, verdict in AUDIT.items():
        assert verdict.reason.strip(), name
        assert (verdict.scorer is not None) == (verdict.kind == "replaced"), name


@pytest.mark.parametrize("dataset", OFFERED)
def test_every_offered_dataset_meets_the_environment_contract(dataset):
    report = check_env_by_name(f"rg:{dataset}", seeds=range(3))
    assert report.ok, format_report(report)
    assert any(r.name == "reference" and r.ok for r in report.results)


def test_the_oracle_solves_nearly_every_task():
    """``ludus check`` tests the reference on a few seeds; here 8 tasks of every dataset (a task with
    no known answer, e.g. an integral sympy could not do, is skipped, but at most one in four)."""
    unsolved, skipped = [], 0
    for dataset in OFFERED:
        env = registry.make(f"rg:{dataset}")
        source = env.task_source("train")
        for index in range(8):
            task = source.get(index)
            reference = env.reference(task)
            if reference is None:
                skipped += 1
                continue
            env.reset(task)
            score = env.step(reference).score
            if score.value != 1.0:
                unsolved.append((dataset, index, score.reason[:120]))
    assert not unsolved
    assert skipped <= 2 * len(OFFERED)


def test_family_members_are_listed_made_and_pickled_by_name():
    entry = registry.get_entry("rg:basic_arithmetic")
    assert entry.origin == "family rg" and "basic_arithmetic" in (entry.description or "")
    listed = subprocess.run([sys.executable, "-m", "ludus.cli", "envs"], capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "rg:basic_arithmetic" in listed.stdout and "rg:zebra_puzzles" in listed.stdout
    make = registry.factory("rg:basic_arithmetic", {"difficulty": 2})
    env = pickle.loads(pickle.dumps(make))()
    assert type(env) is env_class("basic_arithmetic") and env.name == "rg:basic_arithmetic"
    assert (env.config["min_terms"], env.config["max_terms"]) == (2, 3)  # level 2: rg's first two levels
    assert env.difficulty_levels == (1, 2, 3, 4, 5)


def test_names_and_settings_that_do_not_exist_say_what_to_do():
    with pytest.raises(registry.UnknownEnvError, match="rg:basic_arithmetic"):
        registry.get_entry("rg:basic_arithmetc")
    with pytest.raises(registry.UnknownEnvError, match="ludus envs"):
        registry.get_entry("rg:composite")  # refused: a mixture, not a family
    with pytest.raises(ValueError, match="difficulty levels \\[1, 2, 3, 4, 5\\]"):
        registry.make("rg:basic_arithmetic", difficulty=9)
    with pytest.raises(ValueError, match="no config field.*max_terms"):
        registry.make("rg:basic_arithmetic", config={"terms": 3})
    with pytest.raises(ValueError, match="refuses the configuration"):
        registry.make("rg:basic_arithmetic", config={"min_terms": 5, "max_terms": 2})
    env = registry.make("rg:basic_arithmetic", config={"min_terms": 2, "max_terms": 2})
    assert env.reset(seed=0).messages[-1].content.count(" ") <= 6


def test_without_reasoning_gym_the_error_says_what_to_install(monkeypatch):
    import ludus.envs.reasoning_gym.env as rg_env

    monkeypatch.setattr(rg_env, "installed", lambda: False)
    registry._family_members.cache_clear()
    try:
        with pytest.raises(registry.UnknownEnvError, match=r"pip install 'ludus\[reasoning-gym\]'"):
            registry.get_entry("rg:anything")
        assert not any(name.startswith("rg:") for name in registry.entries())
    finally:
        monkeypatch.undo()
        registry._family_members.cache_clear()
    assert "rg:basic_arithmetic" in registry.entries()


def test_only_full_marks_count():
    """rg's base scorer pays an answer that contains the gold len(gold)/len(answer); we pay nothing."""
    env = registry.make("rg:basic_arithmetic")
    env.reset(seed=0)
    entry, dataset = env.entry(env.task), registry.make("rg:basic_arithmetic")
    hedge = f"{entry['answer']} or {entry['answer']}1"
    from ludus.envs.reasoning_gym.env import _dataset

    assert 0 < _dataset("basic_arithmetic", env.settings).score_answer(hedge, entry) < 1
    score = env.step(f"<answer>{hedge}</answer>").score
    assert score.value == 0.0 and score.status == Status.WRONG and "only full marks" in score.reason
    assert dataset.reset(env.task).messages[0].content.startswith("Give your final answer inside <answer>")


def test_hedges_and_cheats_score_zero():
    env = registry.make("rg:chain_sum")
    env.reset(seed=3)
    gold = env.entry(env.task)["answer"]
    assert env.step(f"<answer>{gold}</answer> <answer>{int(gold) + 1}</answer>").score.status == Status.AMBIGUOUS
    for name, actions in env.cheats(env.task).items():
        env.reset(env.task)
        assert env.step(actions[0]).reward == 0.0, name


def test_a_scorer_that_raises_on_model_text_is_a_format_error_not_a_crash():
    env = registry.make("rg:bitwise_arithmetic")  # rg's scorer runs int(answer, 0)
    env.reset(seed=0)
    score = env.step(Message("assistant", "<answer>0x</answer>")).score
    assert score.value == 0.0 and score.status in (Status.FORMAT_ERROR, Status.WRONG)


def test_generating_tasks_leaves_the_process_decimal_precision_alone():
    before = decimal.getcontext().prec
    env = registry.make("rg:decimal_arithmetic")  # rg sets the global precision to 12 digits
    for seed in range(3):
        env.reset(seed=seed)
        env.step(env.reference(env.task))
    assert decimal.getcontext().prec == before


def test_tasks_round_trip_through_json_and_grade_the_same():
    from ludus.core.types import Task

    env = registry.make("rg:basic_arithmetic", difficulty=3)
    env.reset(seed=1)
    task = Task.from_dict(env.task.to_dict())
    fresh = registry.make("rg:basic_arithmetic", difficulty=3)
    fresh.reset(task)
    assert fresh.step(env.reference(env.task)).reward == 1.0


def test_levels_come_from_reasoning_gyms_curricula_and_drive_ludus_curriculum():
    config = TrainConfig(env="rg:basic_arithmetic", env_args={}, curriculum=True)
    picker, _ = build_picker(config, lambda: registry.make("rg:basic_arithmetic"))
    assert [arm.key for arm in picker.ladders[0].arms] == [f"rg:basic_arithmetic/L{n}" for n in range(1, 6)]
    with pytest.raises(ConfigError, match="no difficulty levels"):
        build_picker(
            TrainConfig(env="rg:gsm_symbolic", env_args={}, curriculum=True), lambda: registry.make("rg:gsm_symbolic")
        )


def test_the_easiest_and_hardest_level_of_every_curriculum_make_solvable_tasks():
    problems = []
    for dataset in OFFERED:
        cls = env_class(dataset)
        for level in sorted({cls.difficulty_levels[0], cls.difficulty_levels[-1]}) if cls.difficulty_levels else ():
            env = cls(difficulty=level)
            env.reset(seed=0)
            reference = env.reference(env.task)
            if reference is not None and env.step(reference).reward != 1.0:
                problems.append((dataset, level))
    assert not problems


def test_the_docs_table_is_the_audit():
    rows = {}
    for line in DOCS.read_text().splitlines():
        m = re.fullmatch(r"\| `(\w+)` \| (works|replaced|refused) \| (.+) \|", line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3))
    assert set(rows) == set(AUDIT)
    for name, verdict in AUDIT.items():
        assert rows[name] == (verdict.kind, verdict.reason), name


@pytest.mark.parametrize("dataset", OFFERED)
def test_every_offered_dataset_resists_the_red_team(dataset):
    """Hedges, enormous answers, every option at once, the gold inside padding: none earns reward."""
    from ludus.certify.redteam import format_redteam, redteam_env_by_name

    report = redteam_env_by_name(f"rg:{dataset}", tasks=3)
    assert report.ok, format_redteam(report)


def _padded(gold: str) -> list[str]:
    """The gold with a junk item around it: a list item, a word, a line, a prefix, a second number glued on
    with a comma, an extra JSON entry."""
    padded = [f"{gold}{sep}xyz" for sep in (", ", ",", " ", "\n")]
    padded += [f"xyz{sep}{gold}" for sep in (", ", ",", " ", "\n", ":")] + [f"0,{gold}"]
    try:
        value = json.loads(gold)
    except ValueError:
        value = None
    if isinstance(value, dict):
        padded.append(json.dumps({**value, "xyz": 0}))
    return padded


@pytest.mark.parametrize("dataset", OFFERED)
def test_no_dataset_pays_the_gold_padded_with_junk(dataset):
    """Positional or substring credit, letters picked out of the reply, dict keys ignored: a scorer that
    pays the gold with something around it is replaced (docs/reasoning_gym.md, the audit)."""
    env = registry.make(f"rg:{dataset}")
    source = env.task_source("train")
    for index in range(2):
        task = source.get(index)
        reference = env.reference(task)
        if reference is None:
            continue
        gold = reference.removeprefix("<answer>").removesuffix("</answer>")
        for padded in _padded(gold):
            score = env.score(task, f"<answer>{padded}</answer>")
            assert score.value == 0.0, (padded[:200], score.reason)
