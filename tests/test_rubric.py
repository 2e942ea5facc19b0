"""Rubrics: weighted criteria, gates, components, and a broken criterion is infra_error, never a number."""

import pytest
import yaml

from ludus.core.rubric import Criterion, Rubric, reward_function
from ludus.core.types import InfraError, Score, Status, Task

TASK = Task(id="t", prompt="Say hello in a box.", answer="hello")
calls: list[str] = []


def boxed(task, completion):
    return "\\boxed{" in completion


def says_answer(task, completion):
    calls.append(completion)
    return Score(1.0) if task.answer in completion else Score.zero(Status.WRONG, f"no {task.answer!r}")


def short(task, completion):
    return max(0.0, 1 - len(completion) / 100)


RUBRIC = Rubric(
    [
        Criterion("format", boxed),
        Criterion("answer", says_answer, weight=3, gate="format"),
        Criterion("short", short, pass_at=0.5),
    ]
)


def test_every_criterion_passes():
    score = RUBRIC.score(TASK, "\\boxed{hello}")
    assert score.status == "correct" and score.correct
    assert score.components == {"format": 1.0, "answer": 1.0, "short": pytest.approx(0.87)}
    assert score.value == pytest.approx((1 + 3 + 0.87) / 5)


def test_a_gate_keeps_the_gated_criterion_from_running():
    calls.clear()
    score = RUBRIC.score(TASK, "hello")
    assert calls == []  # the answer check never saw an unboxed completion
    assert score.components == {"format": 0.0, "answer": 0.0, "short": pytest.approx(0.95)}
    assert score.status == "partial" and not score.correct
    assert "answer: not run, format did not pass" in score.reason


def test_a_failing_criterion_names_itself_and_keeps_its_status():
    score = RUBRIC.score(TASK, "\\boxed{goodbye}")
    assert score.status == "partial" and "answer: no 'hello'" in score.reason
    alone = Rubric([Criterion("answer", says_answer)]).score(TASK, "goodbye")
    assert alone.value == 0 and alone.status == "wrong"


@pytest.mark.parametrize(
    "broken",
    [
        lambda task, completion: 1 / 0,
        lambda task, completion: 1.7,
        lambda task, completion: float("nan"),
        lambda task, completion: "1",
        lambda task, completion: Score.zero(Status.INFRA_ERROR, "judge server down"),
        lambda task, completion: (_ for _ in ()).throw(InfraError("judge server down")),
    ],
)
def test_a_broken_criterion_makes_the_whole_score_infra_error(broken):
    score = Rubric([Criterion("format", boxed), Criterion("judge", broken)]).score(TASK, "\\boxed{hello}")
    assert score.status == "infra_error" and score.value == 0.0
    assert "criterion 'judge' failed" in score.reason


def test_bad_rubrics_are_refused_when_built():
    with pytest.raises(ValueError, match="not a criterion before it"):
        Rubric([Criterion("a", boxed, gate="b"), Criterion("b", boxed)])
    with pytest.raises(ValueError, match="two criteria"):
        Rubric([Criterion("a", boxed), Criterion("a", short)])
    with pytest.raises(ValueError, match="weight"):
        Criterion("a", boxed, weight=-1)
    with pytest.raises(ValueError, match="weight above 0"):
        Rubric([Criterion("a", boxed, weight=0)])
    with pytest.raises(ValueError, match="at least one"):
        Rubric([])


def test_from_config_loads_functions_by_import_path():
    rubric = Rubric.from_config(
        [
            {"function": "test_rubric:boxed", "name": "format"},
            {"function": "test_rubric:says_answer", "weight": 3, "gate": "format"},
        ]
    )
    score = rubric.score(TASK, "\\boxed{hello}")
    assert score.correct and score.components == {"format": 1.0, "says_answer": 1.0}
    with pytest.raises(ValueError, match="no reward function 'no-such-reward'"):
        reward_function("no-such-reward")
    with pytest.raises(ValueError, match="could not be loaded"):
        reward_function("test_rubric:missing")
    with pytest.raises(ValueError, match="unknown keys"):
        Rubric.from_config([{"function": "test_rubric:boxed", "wieght": 2}])


def test_a_weight_zero_criterion_is_measured_not_rewarded():
    rubric = Rubric([Criterion("format", boxed), Criterion("short", short, weight=0)])
    score = rubric.score(TASK, "\\boxed{" + "x" * 99 + "}")
    assert score.components["short"] == 0.0 and score.value == 1.0 and score.correct
    assert rubric.score(TASK, "x").components["short"] == pytest.approx(0.99)


def length_at_least(minimum: int):
    """A reward source: a factory called once with its options."""
    return lambda task, completion: len(completion) >= minimum


def test_options_make_a_reward_function_from_a_factory():
    rubric = Rubric.from_config([{"function": "test_rubric:length_at_least", "options": {"minimum": 5}}])
    assert [rubric.score(TASK, text).correct for text in ("four", "fives")] == [False, True]
    with pytest.raises(ValueError, match="refused its options"):
        Rubric.from_config([{"function": "test_rubric:length_at_least", "options": {"maximum": 5}}])


ENTRY_POINTS = """\
[ludus.rewards]
mentions = reward_plugin:mentions
at-least = reward_plugin:at_least
"""
PLUGIN = """\
def mentions(task, completion):
    return task.answer in completion


def at_least(argument, scale=1):
    return lambda task, completion: len(completion) * scale >= int(argument)
"""


def test_reward_functions_registered_by_another_package_resolve_by_name(tmp_path, monkeypatch):
    dist_info = tmp_path / "reward_plugin-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: reward-plugin\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(ENTRY_POINTS)
    (tmp_path / "reward_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    rubric = Rubric.from_config(
        [
            {"function": "mentions"},
            {"function": "at-least:6", "name": "long"},  # a registered source with its argument
            {"function": "at-least", "name": "scaled", "options": {"argument": 6, "scale": 2}},
        ]
    )
    score = rubric.score(TASK, "hello")
    assert score.components == {"mentions": 1.0, "long": 0.0, "scaled": 1.0}
    with pytest.raises(ValueError, match="mentions, rm"):  # the error lists what is installed
        reward_function("mention")


def test_an_environment_takes_a_rubric_from_its_arguments():
    from ludus.core import registry

    env = registry.make(
        "arithmetic",
        digits=1,
        rubric=[
            {"function": "env", "name": "correct", "weight": 3},
            {"function": "test_rubric:short", "name": "short"},
        ],
    )
    task = env.task_source("eval").get(0)
    env.reset(task)
    result = env.step(env.reference(task))
    assert set(result.score.components) == {"correct", "short"}
    assert result.score.components["correct"] == 1.0 and result.reward == result.score.value > 0.75
    env.reset(task)
    assert env.step("no idea").score.components["correct"] == 0.0
    with pytest.raises(ValueError, match="takes no options"):
        registry.make("arithmetic", rubric=[{"function": "env", "options": {"x": 1}}])
    # scored inline on the engine's loop only while every criterion is known to be quick
    assert env.quick is False and registry.make("arithmetic", rubric=[{"function": "env", "weight": 2}]).quick


def test_an_environment_grading_in_its_own_transition_refuses_a_rubric():
    from ludus.core import registry
    from ludus.core.env import SingleTurnEnv
    from ludus.core.types import StepResult

    class StateGraded(SingleTurnEnv):
        name = "state-graded"

        def score(self, task, completion):
            return Score(1.0)

        def transition(self, action):
            return StepResult(terminated=True, score=Score(1.0))

    registry.register("state-graded", StateGraded)
    with pytest.raises(ValueError, match="grades in its own transition"):
        registry.make("state-graded", rubric=[{"function": "env"}])


def test_a_tool_environment_graded_by_a_rubric_keeps_its_tools_and_honeypots_and_its_factory_pickles(monkeypatch):
    """The rubric replaces the grade and nothing else of the environment; its factory travels
    pickled (to Ray actors, say) and makes the same graded environment there."""
    import pickle

    from ludus.core import registry
    from ludus.core.types import Message
    from test_tool_env import Vault, _call

    monkeypatch.setitem(registry._registered, "vault", Vault)
    spec = [{"function": "env", "name": "balance"}, {"function": "test_rubric:short", "pass_at": 0.5}]
    make = pickle.loads(pickle.dumps(registry.factory("vault", {"rubric": spec})))
    env = make()
    assert isinstance(env, Vault) and env.name == "vault"
    env.reset(seed=0)
    assert env.step(_call("read_balance")).observation.messages[0].content == "120"
    score = env.step(Message("assistant", "120")).score
    assert score.status == Status.CORRECT and score.components == {"balance": 1.0, "short": 0.97}
    env.reset(seed=1)
    assert env.step(Message("assistant", "121")).score.components == {"balance": 0.0, "short": 0.97}
    env.reset(seed=2)
    assert env.step(_call("grant_admin", user="me")).score.status == Status.HONEYPOT


@pytest.mark.parametrize("document", ["name: yes", "name: true", "name: on", "name: 1", "gate: true"])
def test_a_criterion_name_that_yaml_reads_as_something_else_is_refused(document):
    item = {"function": "env", **yaml.safe_load(document)}
    with pytest.raises(ValueError, match=r"must be a string, got (True|1) .*quote"):
        Rubric.from_config([{"function": "env", "name": "yes"}, item], functions={"env": boxed})


def test_a_quoted_yaml_name_is_read_as_written():
    spec = yaml.safe_load('[{function: env, name: "yes"}, {function: env, name: "on", gate: "yes"}]')
    rubric = Rubric.from_config(spec, functions={"env": boxed})
    assert rubric.score(TASK, "\\boxed{hello}").components == {"yes": 1.0, "on": 1.0}


def pure_and_quick(task, completion):
    return completion.strip() == task.answer


pure_and_quick.quick = True


def test_a_criterion_declared_quick_keeps_a_quick_environment_quick():
    from ludus.core import registry

    own_and_quick = [{"function": "env"}, {"function": "test_rubric:pure_and_quick"}]
    assert registry.make("arithmetic", rubric=own_and_quick).quick
    undeclared = [{"function": "env"}, {"function": "test_rubric:short"}]  # could block: runs on a thread
    assert not registry.make("arithmetic", rubric=undeclared).quick


def test_a_rubric_made_for_every_episode_reads_the_installed_packages_once(tmp_path, monkeypatch):
    """EnvFactory builds the rubric for each episode; scanning every installed package each time
    made a training step with an import-path criterion many times slower."""
    from ludus.core import registry, rubric

    scans = []
    real = rubric.entry_points
    monkeypatch.setattr(rubric, "entry_points", lambda **kw: scans.append(kw) or real(**kw))
    monkeypatch.syspath_prepend(str(tmp_path))  # a search path not read yet
    make = registry.factory("arithmetic", {"rubric": [{"function": "env"}, {"function": "test_rubric:short"}]})
    episodes = [make() for _ in range(20)]
    assert len(scans) == 1
    assert len({id(env.graded_by) for env in episodes}) == len(episodes)  # each its own rubric


def test_the_docs_rubric_example_has_criteria_that_pass_and_fail_on_real_replies(tmp_path, monkeypatch):
    """docs/rewards.md's `ludus train` rubric on the math environment, with the docs' own reward
    module: on a short right reply, a long right one and a wrong one, each criterion both passes
    and fails (a criterion that never passes keeps every reply from counting as correct)."""
    import json
    import re
    import shlex
    from pathlib import Path

    from ludus.core import registry

    doc = (Path(__file__).resolve().parents[1] / "docs" / "rewards.md").read_text()
    module = re.search(r"```python\n(# my_package/rewards\.py\n.*?)```", doc, re.S).group(1)
    (tmp_path / "my_package").mkdir()
    (tmp_path / "my_package" / "rewards.py").write_text(module)
    monkeypatch.syspath_prepend(str(tmp_path))
    command = next(b for b in re.findall(r"```bash\n(.*?)```", doc, re.S) if "my_package.rewards:concise" in b)
    words = shlex.split(command)
    env = registry.make(words[words.index("--env") + 1], **json.loads(words[words.index("--env-args") + 1]))
    task = env.task_source("eval").get(0)
    right = env.reference(task)
    scores = {}
    for name, reply in {"short": right, "long": "Let me add the digits. " * 60 + right, "wrong": "\\boxed{-1}"}.items():
        env.reset(task)
        scores[name] = env.step(reply).score
    assert scores["short"].status == "correct"
    assert scores["long"].status == "partial" and "concise" in scores["long"].reason
    assert scores["wrong"].status == "wrong" and "concise: not run" in scores["wrong"].reason
    for criterion in scores["short"].components:
        passing = [s.components[criterion] >= 0.5 for s in scores.values()]
        assert True in passing and False in passing, (criterion, scores)
