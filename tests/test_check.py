"""``ludus check``: passes good environments and names the broken invariant in bad ones."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from ludus.certify.contract import CheckReport, check_env, check_env_by_name, format_report, malformed_actions
from ludus.core.env import EnvStateError, SingleTurnEnv, ToolEnv
from ludus.core.registry import UnknownEnvError
from ludus.core.types import Message, Observation, Score, Status, StepResult, Task, ToolSpec


class Numbered:
    size: int | None = None

    def get(self, index: int) -> Task:
        return Task(f"num/{index}", f"What is {index}+1?", answer=index + 1)


class GoodEnv(SingleTurnEnv):
    name = "good"
    description = "say the number"

    def default_tasks(self, split: str = "train") -> Numbered:  # type: ignore[override]
        return Numbered()

    def score(self, task: Task, completion: str) -> Score:
        if not completion.strip():
            return Score.zero(Status.NO_ANSWER, "empty")
        ok = completion.strip() == str(task.answer)
        return Score(float(ok), Status.CORRECT if ok else Status.WRONG)

    def reference(self, task: Task) -> str | None:
        return str(task.answer)


class GoodToolEnv(ToolEnv):
    name = "good-tools"
    description = "look the answer up, then say it"
    max_turns = 5

    def default_tasks(self, split: str = "train") -> Numbered:  # type: ignore[override]
        return Numbered()

    def begin(self, task: Task) -> Observation:
        self.lookups = 0
        return super().begin(task)

    def tool_functions(self) -> Sequence[Callable[..., Any]]:
        return [self.lookup]

    def lookup(self, key: str, times: int = 1) -> str:
        """Look a key up.

        Args:
            key: what to look up.
            times: how many times.
        """
        self.lookups += times
        return f"{key}: {self.task.answer if self.task else '?'}"

    def score(self, task: Task, completion: str) -> Score:
        ok = completion.strip() == str(task.answer)
        return Score(float(ok), Status.CORRECT if ok else Status.WRONG, f"{self.lookups} lookups")


class NonDeterministicEnv(GoodEnv):
    def prompt(self, task: Task) -> str:
        return f"{task.prompt} (nonce {random.randint(0, 10**9)})"  # global random, not self.rng


class CrashesOnEmptyEnv(GoodEnv):
    def score(self, task: Task, completion: str) -> Score:
        return super().score(task, completion.split()[0])  # IndexError on empty/whitespace replies


class RaisesOnEmptyEnv(GoodEnv):
    """Overrides step itself, so nothing turns its exception into infra_error."""

    def step(self, action: str | Message) -> StepResult:
        text = action if isinstance(action, str) else action.content
        if not text:
            raise ValueError("empty reply")
        return super().step(action)


class OutOfRangeEnv(GoodEnv):
    def score(self, task: Task, completion: str) -> Score:
        return Score(5.0, Status.WRONG, "a reward the env never declared")


class NeverEndsEnv(GoodEnv):
    max_turns = 10**9

    def transition(self, action: Message) -> StepResult:
        return StepResult(Observation([Message("user", "keep going")]))


class SameTaskEnv(GoodEnv):
    def default_tasks(self, split: str = "train") -> Numbered:  # type: ignore[override]
        class One(Numbered):
            def get(self, index: int) -> Task:
                return super().get(0)

        return One()


class WrongReferenceEnv(GoodEnv):
    def reference(self, task: Task) -> str | None:
        return "not it"


class LeakyEnv(GoodEnv):
    """Counts episodes on the instance, so a second reset differs from the first."""

    episodes = 0

    def prompt(self, task: Task) -> str:
        self.episodes += 1
        return f"{task.prompt} (episode {self.episodes})"


class LuckyStepEnv(GoodEnv):
    def score(self, task: Task, completion: str) -> Score:
        score = super().score(task, completion)
        score.reason = f"luck {random.random():.6f}"
        return score


class BadToolSpecEnv(GoodEnv):
    def tools(self) -> list[ToolSpec]:
        return [ToolSpec("look up!", "Look something up.", {"type": "string"})]


class TupleInfoEnv(GoodEnv):
    def transition(self, action: Message) -> StepResult:
        result = super().transition(action)
        result.info["span"] = (0, 1)  # JSON turns the tuple into a list
        return result


class NamelessEnv(GoodEnv):
    name = ""


class BrokenReferenceEnv(GoodEnv):
    def reference(self, task: Task) -> str | None:
        raise RuntimeError("answer key offline")


def results(report: CheckReport) -> dict[str, tuple[bool, str]]:
    return {r.name: (r.ok, r.detail) for r in report.results}


def failed(report: CheckReport) -> set[str]:
    return {r.name for r in report.failures}


def test_builtin_arithmetic_passes() -> None:
    report = check_env_by_name("arithmetic")
    assert report.ok, format_report(report)
    assert not report.warnings
    assert len(report.results) >= 14
    text = format_report(report)
    assert text.splitlines()[0] == "ludus check arithmetic"
    assert "✓ reset returns an Observation with at least one message" in text
    assert "✗" not in text
    assert text.splitlines()[-1].endswith("arithmetic meets the environment contract")


@pytest.mark.parametrize("env_cls", [GoodEnv, GoodToolEnv])
def test_good_envs_pass(env_cls: type[SingleTurnEnv]) -> None:
    report = check_env(env_cls, name=env_cls.name)
    assert report.ok, format_report(report)
    assert not report.warnings


def test_reference_is_checked_when_given_and_skipped_otherwise() -> None:
    assert results(check_env(GoodEnv, name="good"))["reference"] == (True, "the reference reply earns the full reward")
    ok, detail = results(check_env(GoodToolEnv, name="good-tools"))["reference"]
    assert ok and "reference_actions() returns None" in detail


def test_non_deterministic_env_fails_determinism() -> None:
    report = check_env(NonDeterministicEnv, name="nondet")
    assert failed(report) == {"determinism"}
    detail = results(report)["determinism"][1]
    assert detail.startswith("reset(seed=0) gave different messages on two fresh instances: messages[0].content:")
    assert "self.rng" in detail
    assert "✗ determinism: reset(seed=0) gave different messages on two fresh instances" in format_report(report)
    assert format_report(report).splitlines()[-1].endswith("nondet does NOT meet the environment contract")


def test_non_deterministic_step_fails_determinism() -> None:
    report = check_env(LuckyStepEnv, name="lucky")
    assert failed(report) == {"determinism"}
    detail = results(report)["determinism"][1]
    assert detail.startswith("seed 0, step 1 with 'I am not sure.' differed between two fresh instances: score.reason:")


def test_state_leaking_across_episodes_fails_determinism() -> None:
    report = check_env(LeakyEnv, name="leaky")
    assert failed(report) == {"determinism"}
    detail = results(report)["determinism"][1]
    assert detail.startswith("reset(seed=0) on the same instance a second time gave a different observation")
    assert "(episode 1)' vs 'What is 0+1? (episode 2)'" in detail


def test_invalid_tool_spec_fails_tools() -> None:
    report = check_env(BadToolSpecEnv, name="badtools")
    assert "tools" in failed(report)
    assert "tool name 'look up!' must be 1-64 letters" in results(report)["tools"][1]


def test_lossy_step_result_fails_step_json() -> None:
    report = check_env(TupleInfoEnv, name="tuples")
    assert failed(report) == {"step json"}
    assert "info.span: (0, 1) vs [0, 1]" in results(report)["step json"][1]


def test_env_crashing_on_empty_reply_is_reported_as_infra_error_on_model_output() -> None:
    report = check_env(CrashesOnEmptyEnv, name="crashy")
    assert "no infra_error on model output" in failed(report)
    assert "malformed actions" not in failed(report)  # the base class caught the crash, so nothing raised
    detail = results(report)["no infra_error on model output"][1]
    assert detail.startswith("empty text produced infra_error")
    assert "IndexError" in detail


def test_env_raising_on_empty_reply_fails_malformed_actions() -> None:
    report = check_env(RaisesOnEmptyEnv, name="raisy")
    assert failed(report) == {"malformed actions"}
    detail = results(report)["malformed actions"][1]
    assert detail.startswith("empty text: raised ValueError: empty reply (at ")
    assert "test_check.py" in detail  # points at the line that raised


def test_reward_out_of_range_fails_reward_range() -> None:
    report = check_env(OutOfRangeEnv, name="greedy")
    assert "reward range" in failed(report)
    assert "reward 5.0 is outside the declared reward_range (0.0, 1.0)" in results(report)["reward range"][1]


def test_never_ending_env_fails_without_hanging() -> None:
    report = check_env(NeverEndsEnv, name="forever", max_steps=20)
    assert {"episodes end", "step after end"} <= failed(report)
    detail = results(report)["episodes end"][1]
    assert "20 steps" in detail and "had not ended" in detail and "max_turns is 1000000000" in detail
    assert "did not end" in results(report)["step after end"][1]


def test_same_task_for_every_seed_is_only_a_warning() -> None:
    report = check_env(SameTaskEnv, name="same")
    assert report.ok
    assert [w.name for w in report.warnings] == ["seeds vary"]
    assert "! seeds vary: all 5 seeds gave the same first observation" in format_report(report)


def test_wrong_reference_fails() -> None:
    report = check_env(WrongReferenceEnv, name="wrongref")
    assert failed(report) == {"reference"}
    assert "'not it' scored 0.0 (wrong" in results(report)["reference"][1]


def test_missing_name_fails_metadata() -> None:
    report = check_env(NamelessEnv, name="nameless")
    assert failed(report) == {"metadata"}
    assert "NamelessEnv.name is empty" in results(report)["metadata"][1]


def test_an_exception_inside_a_check_fails_only_that_check() -> None:
    report = check_env(BrokenReferenceEnv, name="broken-reference")
    assert failed(report) == {"reference"}  # every other check still ran, and passed
    assert results(report)["reference"][1].startswith("raised RuntimeError: answer key offline (at ")
    assert len(report.results) == len(check_env(GoodEnv, name="good").results)


def test_factory_that_does_not_build_an_env_stops_early() -> None:
    report = check_env(lambda: object(), name="nothing")  # type: ignore[arg-type, return-value]
    assert [(r.name, r.ok) for r in report.results] == [("construct", False)]
    assert "not a ludus Env" in report.results[0].detail


def test_check_by_name_reports_unloadable_env_and_raises_on_typos(monkeypatch: pytest.MonkeyPatch) -> None:
    from ludus.core import registry

    declared = dict(registry._declared())
    declared["ghost"] = registry.EnvEntry("ghost", "ludus.no_such_module:Ghost", "builtin")
    monkeypatch.setattr(registry, "_declared", lambda: dict(declared))
    report = check_env_by_name("ghost")
    assert not report.ok and report.results[0].name == "load"
    assert "ModuleNotFoundError" in report.results[0].detail
    with pytest.raises(UnknownEnvError, match="arithmetic"):
        check_env_by_name("arithmetc")


def test_malformed_actions_target_the_envs_own_tools() -> None:
    actions = dict(malformed_actions(["lookup"]))
    assert actions["empty text"] == ""
    assert len(actions["a 100k-character reply"]) == 100_000
    broken = actions["tool calls with non-dict arguments"]
    assert isinstance(broken, Message)
    assert [c.name for c in broken.tool_calls] == ["lookup"] * 3
    assert [type(c.arguments) for c in broken.tool_calls] == [str, list, type(None)]
    assert dict(malformed_actions([])) == dict(malformed_actions([]))  # deterministic


def test_step_after_end_must_raise_env_state_error() -> None:
    class Lenient(GoodEnv):
        def step(self, action: str | Message) -> StepResult:
            if self.done and self.task is not None:
                return StepResult(Observation([]), terminated=True, score=Score.zero(Status.WRONG, "over"))
            return super().step(action)

    report = check_env(Lenient, name="lenient")
    assert "step after end" in failed(report)
    assert "instead of raising EnvStateError" in results(report)["step after end"][1]
    assert EnvStateError.__name__ in format_report(report)
