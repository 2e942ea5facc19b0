"""Mixtures, the adaptive curriculum and dynamic sampling: the picker's rules, then real training runs."""

import json
from collections import Counter
from pathlib import Path

import pytest
import torch

from ludus.core import InfraError, Score, SingleTurnEnv, Status, Task, register
from ludus.core.types import Trajectory, Turn
from ludus.train.config import ConfigError, TrainConfig, load_config
from ludus.train.curriculum import FAILING_GROUPS, MAX_VISITS, PROBE_EVERY, Arm, CurriculumSettings, TaskPicker
from ludus.train.trainer import Trainer
from support import DigitTasks


class _Numbered:
    size = None

    def __init__(self, name: str):
        self.name = name

    def get(self, index: int) -> Task:
        return Task(id=f"{self.name}-{index}", prompt=str(index), answer="1")


def _arm(label: str, level: int | None = None) -> Arm:
    return Arm(label, level, lambda: None, _Numbered(f"{label}{level}"), ())  # type: ignore[arg-type, return-value]


def _group(*outcomes: float | None) -> list[Trajectory]:
    """A group from outcomes: 1 correct, 0 wrong, None an infrastructure failure."""
    group = []
    for outcome in outcomes:
        if outcome is None:
            score = Score.zero(Status.INFRA_ERROR, "down")
        else:
            score = Score(outcome, Status.CORRECT if outcome == 1 else Status.WRONG)
        turns = [Turn([], [], [], reward=score.value)]
        group.append(Trajectory(Task("t", "p"), [], turns=turns, score=score))
    return group


def _ladder(levels=(1, 2, 3), **settings) -> TaskPicker:
    return TaskPicker([([_arm("count", lv) for lv in levels], 1.0)], curriculum=CurriculumSettings(**settings))


def _current(picker: TaskPicker) -> int:
    return picker.ladders[0].arms[picker.ladders[0].current].level  # type: ignore[return-value]


# ---- the curriculum's rules ----


def test_a_level_is_promoted_above_the_band_and_demoted_below_it_on_full_windows_only():
    picker = _ladder(window=3, band=(0.2, 0.7), review=0.0)
    at_1 = picker.pick()
    assert at_1.arm.level == 1 and at_1.index == 0
    picker.observe(at_1, _group(1, 1, 1, 1))
    picker.observe(at_1, _group(1, 1, 1, 1))
    assert _current(picker) == 1  # two groups are not a window
    picker.observe(at_1, _group(1, 1, 1, 0))  # mean rate 11/12 > 0.7
    assert _current(picker) == 2
    assert picker.pick().arm.level == 2
    at_2 = picker.pick()
    for _ in range(2):
        picker.observe(at_2, _group(0, 0, 0, 0))
    assert _current(picker) == 2
    picker.observe(at_2, _group(0, 0, 0, 1))  # 1/12 < 0.2
    assert _current(picker) == 1
    # back at level 1, its old window was cleared: one easy group does not promote again
    picker.observe(at_1, _group(1, 1, 1, 1))
    assert _current(picker) == 1
    metrics = picker.metrics()
    assert metrics["curriculum/count/level"] == 1
    assert metrics["curriculum/count/band"] == 0  # the window is not full yet
    assert metrics["curriculum/count/rate/L2"] == pytest.approx(1 / 12, abs=1e-4)


def test_in_band_rates_keep_the_level_and_the_top_and_bottom_levels_stay():
    picker = _ladder(levels=(1, 2), window=2, band=(0.2, 0.8), review=0.0)
    arm = picker.pick()
    for _ in range(5):
        picker.observe(arm, _group(1, 0, 1, 0))
    assert _current(picker) == 1 and picker.metrics()["curriculum/count/band"] == 0
    for _ in range(2):
        picker.observe(arm, _group(0, 0, 0, 0))
    assert _current(picker) == 1  # nothing below the first level
    for _ in range(2):
        picker.observe(arm, _group(1, 1, 1, 1))
    top = picker.pick()
    assert top.arm.level == 2
    for _ in range(4):
        picker.observe(top, _group(1, 1, 1, 1))
    assert _current(picker) == 2 and picker.metrics()["curriculum/count/band"] == 1  # above, nowhere to go


def test_by_default_a_level_is_demoted_only_when_nothing_in_a_window_was_solved():
    picker = _ladder(levels=(1, 2), window=2, review=0.0)  # the default band: (0.0, 0.6)
    picker.ladders[0].current = 1
    hard = picker.pick()
    picker.observe(hard, _group(0, 0, 0, 0, 0, 0, 0, 1))
    picker.observe(hard, _group(0, 0, 0, 0, 0, 0, 0, 0))
    assert _current(picker) == 2  # one success in 16: hard, not hopeless
    picker.observe(hard, _group(0, 0, 0, 0, 0, 0, 0, 0))
    assert _current(picker) == 1


def test_review_draws_the_levels_below_the_current_one():
    picker = _ladder(levels=(1, 2, 3), window=1, review=0.25)
    picker.ladders[0].current = 2
    levels = Counter(picker.pick().arm.level for _ in range(4000))
    assert levels[3] == pytest.approx(3000, abs=150)
    assert levels[1] == pytest.approx(500, abs=100) and levels[2] == pytest.approx(500, abs=100)


def test_infrastructure_failures_are_not_outcomes():
    picker = _ladder(window=1, review=0.0)
    arm = picker.pick()
    picker.observe(arm, _group(None, None, 1, 1))  # two measured, both right: promote
    assert _current(picker) == 2
    picker.observe(picker.pick(), _group(None, None, None, None))
    assert _current(picker) == 2 and "curriculum/count/rate/L2" not in picker.metrics()


def test_each_arm_walks_its_own_task_stream():
    picker = TaskPicker([([_arm("a")], 1.0), ([_arm("b")], 3.0)], seed=1)
    picks = [picker.pick() for _ in range(400)]
    counts = Counter(p.arm.label for p in picks)
    assert counts["b"] == pytest.approx(300, abs=40)
    for label in "ab":
        assert [p.index for p in picks if p.arm.label == label] == list(range(counts[label]))


def test_revisits_re_ask_tasks_whose_group_had_variance_at_most_three_times():
    picker = TaskPicker([([_arm("a")], 1.0)], revisit=0.999)
    first = picker.pick()
    picker.observe(first, _group(1, 0, 0, 0))  # variance: queued
    again = picker.pick()
    assert (again.index, again.visits) == (first.index, 1)
    picker.observe(again, _group(1, 1, 1, 1))  # no variance: not queued again
    assert picker.pick().index == 1
    visits = [first]
    picker.observe(first, _group(0, 1, 1, 1))
    for _ in range(MAX_VISITS + 1):
        nxt = picker.pick()
        visits.append(nxt)
        picker.observe(nxt, _group(0, 1, 1, 1))
    asked = [p.index for p in visits]
    assert asked.count(0) == MAX_VISITS  # the first ask and two revisits
    assert [p.visits for p in visits[:MAX_VISITS]] == list(range(MAX_VISITS))


def test_an_environment_whose_groups_all_fail_rests_and_is_probed():
    picker = TaskPicker([([_arm("up")], 1.0), ([_arm("down")], 1.0)], seed=3)
    down = next(p for p in iter(picker.pick, None) if p.arm.label == "down")
    for _ in range(FAILING_GROUPS):
        picker.observe(down, _group(None, None))
    assert picker.metrics()["mix/down/resting"] == 1
    picks = [picker.pick() for _ in range(4 * PROBE_EVERY)]
    chosen = [i for i, p in enumerate(picks) if p.arm.label == "down"]
    assert 1 <= len(chosen) <= 4  # probes only
    picker.observe(picks[chosen[0]], _group(1, 0))  # it is back
    assert picker.metrics()["mix/down/resting"] == 0


def test_the_state_dict_continues_the_same_picks():
    def run(picker: TaskPicker, n: int) -> list[tuple[str, int]]:
        out = []
        for i in range(n):
            pick = picker.pick()
            picker.observe(pick, _group(1, i % 3 == 0, 1, 0))
            out.append((pick.arm.key, pick.index))
        return out

    def make() -> TaskPicker:
        ladders = [([_arm("x", 1), _arm("x", 2)], 1.0), ([_arm("y")], 2.0)]
        return TaskPicker(ladders, seed=7, curriculum=CurriculumSettings(window=2, band=(0.1, 0.6)), revisit=0.3)

    straight = run(make(), 60)
    first = make()
    head = run(first, 25)
    state = json.loads(json.dumps(first.state_dict()))
    resumed = make()
    resumed.load_state_dict(state)
    assert head + run(resumed, 35) == straight
    assert {key for key, _ in straight} >= {"x/L1", "x/L2", "y"}


def test_settings_are_checked():
    with pytest.raises(ValueError, match="band"):
        CurriculumSettings(band=(0.8, 0.2))
    with pytest.raises(ValueError, match="window"):
        CurriculumSettings(window=0)
    with pytest.raises(ValueError, match="revisit"):
        TaskPicker([([_arm("a")], 1.0)], revisit=1.0)


# ---- configuration ----

DEFAULT_ARGS = TrainConfig().env_args  # a mixture leaves env_args alone
SMALL_TINY = {"d_model": 32, "n_layers": 1, "n_heads": 2, "max_len": 24}  # small_config's


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"envs": "[{weight: 1}]"}, "must be a mapping with a name"),
        ({"envs": "[{name: sorting, weigth: 1}]"}, "unknown keys"),
        ({"envs": "[{name: sorting, weight: 0}]"}, "weight must be a number > 0"),
        ({"envs": "[{name: sorting}, {name: sorting}]"}, "distinct labels"),
        ({"envs": "[{name: sorting}]", "env": "countdown"}, "keep one"),
        ({"envs": "[{name: sorting}]", "ray": "true"}, "threads here"),
        ({"curriculum_band": "[0.9, 0.1]"}, "curriculum_band"),
        ({"curriculum_levels": "[1, 2]"}, "applies with curriculum: true"),
        ({"curriculum_levels": "[1, x]", "curriculum": "true"}, "a list of ints"),
        ({"dynamic_sampling_rounds": "0"}, "dynamic_sampling_rounds"),
    ],
)
def test_bad_mixture_and_curriculum_settings_name_the_field(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(overrides=overrides)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"env": "code", "env_args": {}, "curriculum": "true"}, "has no difficulty levels"),
        ({"env": "sorting", "env_args": "{difficulty: 2}", "curriculum": "true"}, "sets difficulty"),
        ({"env": "sorting", "env_args": {}, "curriculum": "true", "curriculum_levels": "[1, 9]"}, r"not \[9\]"),
        ({"envs": "[{name: sortingg}]", "env_args": DEFAULT_ARGS}, "no environment named 'sortingg'"),
        ({"envs": "[{name: sorting, args: {difficulty: 99}}]", "env_args": DEFAULT_ARGS}, "do not fit"),
    ],
)
def test_a_run_whose_environments_cannot_be_made_says_why(small_config, overrides, message):
    with pytest.raises(ConfigError, match=message):
        Trainer.create(small_config(name="bad", **overrides), log=lambda _: None).run()


# ---- training runs ----


class _Parity(SingleTurnEnv):
    """Reward 1 when the reply's first byte is odd: about half of a random model's samples."""

    name = "parity"
    quick = True

    def default_tasks(self, split="train"):
        return DigitTasks(split)

    def score(self, task: Task, completion: str) -> Score:
        if completion and ord(completion[0]) % 2:
            return Score(1.0, Status.CORRECT)
        return Score.zero(Status.WRONG, "even or empty")


class _Down(_Parity):
    """An environment whose infrastructure always fails."""

    name = "down"

    def score(self, task: Task, completion: str) -> Score:
        raise InfraError("the grading server is down")


class _Steps(_Parity):
    """Two levels: at level 1 an odd first byte is right (about half of a random model's replies),
    at level 2 nothing is."""

    name = "steps"
    difficulty_levels = (1, 2)

    def __init__(self, tasks=None, *, difficulty: int = 1):
        super().__init__(tasks)
        self.difficulty = difficulty

    def score(self, task: Task, completion: str) -> Score:
        return super().score(task, completion) if self.difficulty == 1 else Score.zero(Status.WRONG, "level 2")


class _Fixed(_Parity):
    """Every reply gets the same reward: no group ever has variance."""

    name = "fixed"

    def score(self, task: Task, completion: str) -> Score:
        return Score.zero(Status.WRONG, "always wrong")


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _groups_by_env(run_dir: Path) -> list[set[str]]:
    """The environments of each group in samples.jsonl (samples_per_step covers whole groups)."""
    groups: dict[tuple[int, str], set[str]] = {}
    for line in (run_dir / "samples.jsonl").read_text().splitlines():
        sample = json.loads(line)
        groups.setdefault((sample["step"], sample["info"]["group"]), set()).add(sample["env"])
    return list(groups.values())


def test_a_mixture_trains_every_environment_with_metrics_and_evaluation_per_environment(small_config):
    register("parity", _Parity)
    envs = "[{name: parity, weight: 1}, {name: arithmetic, args: {digits: 1, ops: '+'}, weight: 1, label: add}]"
    cfg = small_config(
        name="mix", envs=envs, env_args=DEFAULT_ARGS, steps=4, warmstart_steps=0, samples_per_step=16, temperature=1.0
    )
    result = Trainer.create(cfg, log=lambda _: None).run()
    records = _records(result.run_dir)
    train = [r for r in records if "reward/mean" in r]
    assert sum(r["mix/parity/groups"] + r["mix/add/groups"] for r in train) == 4 * cfg.prompts_per_step
    evals = [r for r in records if "eval/accuracy" in r]
    for r in evals:
        assert {"eval/parity/accuracy", "eval/add/accuracy"} <= set(r)
        assert r["eval/accuracy"] == pytest.approx((r["eval/parity/accuracy"] + r["eval/add/accuracy"]) / 2, abs=1e-4)
    assert all(len(envs) == 1 for envs in _groups_by_env(result.run_dir))  # each group from one environment
    assert {e for envs in _groups_by_env(result.run_dir) for e in envs} == {"parity", "arithmetic"}


def test_a_failing_environment_of_a_mixture_rests_while_the_other_trains(small_config):
    register("parity", _Parity)
    register("down", _Down)
    envs = "[{name: parity}, {name: down}]"
    cfg = small_config(
        name="mix-down", envs=envs, env_args=DEFAULT_ARGS, steps=6, warmstart_steps=0, temperature=1.0, eval_every=0
    )
    result = Trainer.create(cfg, log=lambda _: None).run()
    train = [r for r in _records(result.run_dir) if "reward/mean" in r]
    assert len(train) == 6  # never halted: the parity groups measured the policy every step
    assert sum(r.get("mix/down/infra_errors", 0) for r in train) >= FAILING_GROUPS * cfg.group_size
    assert train[-1]["mix/down/resting"] == 1
    late = train[3:]
    assert sum(r.get("mix/down/groups", 0) for r in late) <= 1  # a probe at most
    assert all(r["mix/parity/groups"] >= cfg.prompts_per_step - 1 for r in late)
    final = [r for r in _records(result.run_dir) if "eval/accuracy" in r][-1]
    assert final["eval/down/infra_errors"] == cfg.eval_size


def test_curriculum_training_moves_levels_logs_them_and_resumes_exactly(small_config):
    register("steps", _Steps)
    settings = dict(
        env="steps",
        env_args={},
        warmstart_steps=0,
        curriculum=True,
        curriculum_window=1,
        curriculum_band=[0.05, 0.3],  # level 1 (about half right) promotes, level 2 (none) demotes
        dynamic_sampling=True,
        revisit=0.25,
        steps=6,
        temperature=1.0,
    )
    straight = Trainer.create(small_config(name="cur", **settings), log=lambda _: None).run()
    trainer = Trainer.create(small_config(name="cur-cut", **settings), log=lambda _: None)

    def stop_at_3(record):
        if record.get("step") == 3 and "reward/mean" in record:
            trainer.stop.requested = True

    first = trainer.run(stop_at_3)
    second = Trainer.resume_from(first.run_dir, log=lambda _: None).run()
    a, b = (torch.load(r.run_dir / "final" / "pytorch_model.bin", weights_only=True) for r in (straight, second))
    assert all(torch.equal(a[k], b[k]) for k in a)
    train = [r for r in _records(straight.run_dir) if "reward/mean" in r]
    resumed = [r for r in _records(second.run_dir) if "reward/mean" in r]
    assert [r["curriculum/steps/level"] for r in train] == [r["curriculum/steps/level"] for r in resumed]
    assert {r["curriculum/steps/level"] for r in train} == {1, 2}
    evals = [r for r in _records(straight.run_dir) if "eval/accuracy" in r]
    assert all(r["eval/accuracy"] == r["eval/steps/L2/accuracy"] == 0 for r in evals)  # the target: the top level
    assert any(r["eval/steps/L1/accuracy"] > 0 for r in evals)


def test_dynamic_sampling_keeps_only_groups_with_variance_and_caps_its_rounds(small_config):
    register("parity", _Parity)
    register("fixed", _Fixed)
    cfg = small_config(
        name="dyn", env="parity", env_args={}, steps=3, warmstart_steps=0, temperature=1.0, dynamic_sampling=True
    )
    result = Trainer.create(cfg, log=lambda _: None).run()
    train = [r for r in _records(result.run_dir) if "reward/mean" in r]
    for r in train:
        assert r["dynamic/groups_kept"] <= cfg.prompts_per_step <= r["dynamic/groups_sampled"]
        assert r["trained_samples"] == r["dynamic/groups_kept"] * cfg.group_size  # only groups with signal

    flat = small_config(name="flat", env="fixed", env_args={}, steps=2, warmstart_steps=0, dynamic_sampling=True)
    flat.dynamic_sampling_rounds = 2
    train = [r for r in _records(Trainer.create(flat, log=lambda _: None).run().run_dir) if "reward/mean" in r]
    assert [r["dynamic/rounds"] for r in train] == [2, 2]  # gave up at the cap instead of sampling forever
    assert all(r["dynamic/groups_kept"] == 0 and r["trained_samples"] == 0 for r in train)


def test_dynamic_sampling_ahead_drops_flat_groups_within_its_budget(small_config):
    register("parity", _Parity)
    cfg = small_config(
        name="dyn-ahead", env="parity", env_args={}, steps=4, warmstart_steps=0, temperature=1.0, max_staleness=1
    )
    cfg.dynamic_sampling = True
    result = Trainer.create(cfg, log=lambda _: None).run()
    train = [r for r in _records(result.run_dir) if "reward/mean" in r]
    assert len(train) == 4
    budget = (cfg.dynamic_sampling_rounds - 1) * cfg.prompts_per_step
    for r in train:
        assert r["dynamic/groups_kept"] == cfg.prompts_per_step
        assert r["dynamic/groups_sampled"] - r["dynamic/groups_kept"] <= budget


def test_ludus_warmstart_makes_the_base_a_mixture_run_makes(small_config, tmp_path, monkeypatch):
    from ludus.cli import main

    envs = "[{name: arithmetic, args: {digits: 1}}, {name: sorting, args: {difficulty: 1}}]"
    logs: list[str] = []
    cfg = small_config(name="mixed-base", envs=envs, env_args=DEFAULT_ARGS, warmstart_steps=3, steps=1)
    Trainer.create(cfg, log=logs.append).run()
    made_by_train = Path(next(line for line in logs if line.startswith("created base model")).split()[-1])
    monkeypatch.setenv("LUDUS_CACHE", str(tmp_path / "other-cache"))
    flags = ["--envs", envs, "--env-args", json.dumps(DEFAULT_ARGS), "--tiny", json.dumps(SMALL_TINY)]
    assert main(["warmstart", "--warmstart-steps", "3", *flags]) == 0
    made_by_cli = tmp_path / "other-cache" / made_by_train.relative_to(made_by_train.parents[1])
    a, b = (torch.load(p / "pytorch_model.bin", weights_only=True) for p in (made_by_train, made_by_cli))
    assert all(torch.equal(a[k], b[k]) for k in a)  # warm-started on the same environments
