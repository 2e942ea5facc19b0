"""The runs a newcomer makes first, on the embedded model: ``ludus train`` on a task file and on
built-in prompts (finite lists, which the warm start reads round), on environments whose prompts
outgrow the model's default context (sized to them, or refused with the value to set); ``ludus
eval`` of a model that cannot take the prompts; a held-out evaluation that grades nothing."""

import json
from pathlib import Path

import pytest
import yaml

from ludus.cli import main
from ludus.core import InfraError, Score, SingleTurnEnv, Status, Task, register
from ludus.core.registry import make
from ludus.train.config import TrainConfig
from ludus.train.curriculum import build_picker
from ludus.train.supervised import WARMSTART_TASK_OFFSET, fit_context, reference_batch
from ludus.train.trainer import make_env_factory, warmstart_envs
from support import DigitTasks

# seconds of training: a one-layer model, a few warm-start and RL samples; max_len is left to the run
SMALL = [
    "--tiny", "{d_model: 32, n_layers: 1, n_heads: 2}",
    "--warmstart-steps", "2", "--warmstart-batch", "4",
    "--steps", "1", "--prompts-per-step", "2", "--group-size", "2", "--eval-size", "4",
    "--time-limit-min", "0", "--threads", "1",
]  # fmt: skip

MATH_ROWS = [{"prompt": f"What is {i} + {i + 1}?", "answer": str(2 * i + 1)} for i in range(20)]
CODE_ROWS = [
    {
        "task_id": i,
        "text": f"Write a function add{i}(x) that returns x + {i}.",
        "code": f"def add{i}(x):\n    return x + {i}",
        "test_list": [f"assert add{i}(1) == {1 + i}", f"assert add{i}(-{i}) == 0"],
    }
    for i in range(12)
]


@pytest.fixture
def runs(tmp_path, monkeypatch) -> Path:
    """Runs go under ``tmp_path/runs``, base models to a cache of the test's own."""
    monkeypatch.setenv("LUDUS_CACHE", str(tmp_path / "cache"))
    return tmp_path / "runs"


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def train(runs: Path, name: str, *flags: str) -> int:
    return main(["train", *SMALL, *flags, "--runs-dir", str(runs), "--name", name])


def test_the_warm_start_reads_a_finite_train_split_round_and_never_its_held_out_tasks(tmp_path):
    env = make("math", path=str(write_jsonl(tmp_path / "tasks.jsonl", MATH_ROWS)))
    train_split, held_out = env.task_source("train"), env.task_source("eval")
    prompts = {
        split.get(i).prompt: name
        for name, split in (("train", train_split), ("eval", held_out))
        for i in range(split.size)
    }
    conversations, _ = reference_batch(env, range(WARMSTART_TASK_OFFSET, WARMSTART_TASK_OFFSET + 3 * train_split.size))
    seen = [prompts[conversation[-1].content] for conversation in conversations]
    assert held_out.size >= 1 and seen == ["train"] * len(seen)
    shown = {conversation[-1].content for conversation in conversations}
    assert len(shown) == train_split.size  # round and round: every train task, three times


@pytest.mark.parametrize(
    ("env", "rows"),
    [("math", MATH_ROWS), ("code", CODE_ROWS), ("judged", None)],  # judged: its built-in prompts, a finite list
)
def test_ludus_train_runs_on_a_finite_task_list(runs, tmp_path, env, rows):
    args = [] if rows is None else ["--env-args", f"{{path: {write_jsonl(tmp_path / 'tasks.jsonl', rows)}}}"]
    assert train(runs, env, "--env", env, *args) == 0
    evals = [
        r for r in map(json.loads, (runs / env / "metrics.jsonl").read_text().splitlines()) if "eval/accuracy" in r
    ]
    assert [r["step"] for r in evals] == [0, 1] and all(r["eval/infra_errors"] == 0 for r in evals)
    assert (runs / env / "final" / "config.json").is_file()


@pytest.mark.parametrize(("env", "context"), [("countdown", 128), ("sql", 512)])
def test_ludus_train_sizes_the_embedded_model_s_context_to_long_prompts(runs, capsys, env, context):
    """A countdown prompt alone fills the default 64 tokens, an SQL schema and query far more: the
    run takes a context that holds them, and records it."""
    assert train(runs, env, "--env", env) == 0
    assert f"the embedded model's context is {context} tokens" in capsys.readouterr().err
    assert yaml.safe_load((runs / env / "config.yaml").read_text())["tiny"]["max_len"] == context
    assert json.loads((runs / env / "final" / "config.json").read_text())["max_len"] == context


def test_ludus_warmstart_makes_the_base_that_a_run_with_a_sized_context_starts_from(runs, tmp_path):
    assert main(["warmstart", "--env", "countdown", *SMALL[: SMALL.index("--steps")], "--threads", "1"]) == 0
    (made,) = (tmp_path / "cache" / "base").iterdir()
    assert json.loads((made / "config.json").read_text())["max_len"] == 128
    assert train(runs, "countdown", "--env", "countdown") == 0
    assert list((tmp_path / "cache" / "base").iterdir()) == [made]  # the run started from it, made none


def test_the_default_recipe_keeps_the_default_context():
    config = TrainConfig()
    picker, arm_envs = build_picker(config, *make_env_factory(config))
    envs = warmstart_envs(config, arm_envs)
    assert not fit_context(config, zip(picker.arms.values(), arm_envs, strict=True), envs, print) and config.tiny == {}


@pytest.mark.parametrize(
    ("env", "flags", "advice"),
    [
        ("countdown", ["--tiny", "{max_len: 48}"], "max_len 48 cannot hold"),  # set too short
        ("instruct", [], "lengthens it by itself only up to 512"),  # too long to pick unasked
    ],
)
def test_a_context_that_cannot_hold_the_prompts_is_refused_before_the_run_with_the_length_to_set(
    runs, capsys, env, flags, advice
):
    assert train(runs, env, "--env", env, *flags) == 2
    err = capsys.readouterr().err
    fitting = {"countdown": 128, "instruct": 2048}[env]
    assert advice in err and f"--tiny '{{max_len: {fitting}}}'" in err
    assert not (runs / env).exists()


def test_ludus_eval_of_a_model_that_cannot_take_the_prompts_exits_1_and_says_why(runs, capsys):
    base = ["eval", "countdown", "--tasks", "2", "--runs", str(runs)]
    assert main([*base, "--name", "short"]) == 1
    err = capsys.readouterr().err
    assert "no sample could be graded" in err and "exceeds the tiny model's context" in err and "--model-args" in err
    assert (
        "exceeds the tiny model's context" in json.loads((runs / "short" / "summary.json").read_text())["infra_reason"]
    )
    assert main([*base, "--name", "long", "--model-args", "{max_len: 128}"]) == 0
    assert "no sample could be graded" not in capsys.readouterr().err


class _HeldOutDown(SingleTurnEnv):
    """Training tasks are graded; the grader of held-out tasks is down - from the start, or
    (``later``) once a training sample has been graded."""

    name = "held-out-down"
    quick = True
    later = False
    trained = False

    def default_tasks(self, split="train"):
        return DigitTasks(split)

    def score(self, task: Task, completion: str) -> Score:
        if task.id.startswith("train/"):
            type(self).trained = True
            return Score.zero(Status.WRONG, "graded")
        if not self.later or self.trained:
            raise InfraError("the held-out grader is down")
        return Score.zero(Status.WRONG, "graded")


class _HeldOutDownLater(_HeldOutDown):
    name = "held-out-down-later"
    later = True


def test_a_held_out_evaluation_that_grades_nothing_stops_the_run_instead_of_reporting_0(runs, capsys):
    register("held-out-down", _HeldOutDown)
    assert train(runs, "down", "--env", "held-out-down", "--warmstart-steps", "0") == 1
    err = capsys.readouterr().err
    assert "held-out evaluation at step 0 could not grade any of its samples" in err
    assert "the held-out grader is down" in err and "held-out accuracy" not in err
    assert not (runs / "down").exists()  # nothing was trained: no run folder, as for a start that failed


def test_a_held_out_evaluation_that_stops_grading_mid_run_stops_it_with_the_way_to_resume(runs, capsys):
    register("held-out-down-later", _HeldOutDownLater)
    assert (
        train(
            runs, "later", "--env", "held-out-down-later", "--warmstart-steps", "0", "--steps", "2", "--eval-every", "1"
        )
        == 1
    )
    err = capsys.readouterr().err
    assert "held-out evaluation at step 1 could not grade any of its samples" in err and "--resume" in err
    records = [json.loads(line) for line in (runs / "later" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "eval/accuracy" in r] == [0]  # the failed evaluation left no number
