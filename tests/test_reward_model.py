"""Learned reward models: ``ludus train-rm`` learns a preference rule (tiny and transformers backbones),
the folder round-trips, ``rm:PATH`` scores in [0, 1] through a rubric, concurrent calls share forward
passes, and bad data or a broken model give clear errors, never a reward."""

import json
import os
import random
import threading
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the Hub

from ludus.cli import main  # noqa: E402
from ludus.core.rubric import Rubric  # noqa: E402
from ludus.core.types import InfraError, Message, Status, Task  # noqa: E402
from ludus.rewards import reward_model as rm  # noqa: E402
from ludus.rewards.reward_model import RewardModel, rm_reward  # noqa: E402
from ludus.train.reward_model import RMTrainConfig, read_preferences, save, train_reward_model  # noqa: E402
from support import build_hf_checkpoint  # noqa: E402

WORDS = ["apple", "river", "stone", "cloud", "maple", "tiger", "lemon", "otter", "piano", "quilt", "robin", "sugar"]


def preference_rows(n: int, seed: int = 0) -> list[dict]:
    """Raters prefer a reply in lower case to the same kind of reply shouted in capitals."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.sample(WORDS, 2)
        rows.append({"prompt": f"name a {a}", "chosen": f"{b} {rng.choice(WORDS)}", "rejected": f"{b.upper()} ok"})
    return rows


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def conversation(prompt: str, reply: str) -> list[Message]:
    return [Message("user", prompt), Message("assistant", reply)]


@pytest.fixture(scope="module")
def tiny_rm(tmp_path_factory) -> Path:
    """A tiny reward model trained through the command line, as a user would."""
    folder = tmp_path_factory.mktemp("rm")
    data = write_jsonl(folder / "prefs.jsonl", preference_rows(240))
    code = main(
        ["train-rm", "--data", str(data), "--out", str(folder / "rm"), "--epochs", "2", "--lr", "1e-3",
         "--eval-frac", "0.25", "--max-len", "48"]
    )  # fmt: skip
    assert code == 0
    return folder / "rm"


def test_train_rm_learns_the_preference_and_writes_a_reward_model_folder(tiny_rm, capsys):
    metrics = json.loads((tiny_rm / "metrics.json").read_text())
    assert metrics["eval_pairs"] == 60 and metrics["train_pairs"] == 180
    assert metrics["eval_accuracy"] >= 0.95 and metrics["train_loss"] < 0.3
    config = json.loads((tiny_rm / "config.json").read_text())
    assert config["kind"] == "reward-model" and config["backbone"] == "tiny" and config["max_len"] == 48
    assert config["scale"] > 0 and config["center"] == metrics["center"]


def test_save_and_load_score_identically(tiny_rm, tmp_path):
    model = RewardModel.load(tiny_rm)
    convs = [conversation("name a tiger", "maple sugar"), conversation("name a tiger", "MAPLE ok")]
    with torch.no_grad():
        before = model.rewards(convs)
        model.save(tmp_path / "copy")
        after = RewardModel.load(tmp_path / "copy").rewards(convs)
    assert torch.equal(before, after) and before[0] > before[1]


def test_a_transformers_backbone_learns_the_same_preference(tmp_path):
    checkpoint = build_hf_checkpoint(tmp_path / "llama")
    pairs = read_preferences(write_jsonl(tmp_path / "prefs.jsonl", preference_rows(200, seed=1)))
    model = RewardModel.create(f"hf:{checkpoint}", max_len=32)
    result = train_reward_model(pairs, model, RMTrainConfig(epochs=3, lr=3e-3, batch_size=16, eval_frac=0.25))
    assert result.metrics["eval_accuracy"] >= 0.9
    save(result, tmp_path / "rm")
    assert json.loads((tmp_path / "rm" / "config.json").read_text())["backbone"] == "hf"
    convs = [pair.chosen for pair in pairs[:4]] + [pair.rejected for pair in pairs[:4]]
    with torch.no_grad():
        assert torch.allclose(RewardModel.load(tmp_path / "rm").rewards(convs), model.rewards(convs), atol=1e-5)
    score = rm_reward(str(tmp_path / "rm"))(Task("t", "name a river"), "lemon piano")
    assert 0 <= score.value <= 1


def test_rm_reward_gives_values_in_0_1_that_rank_like_the_model(tiny_rm):
    reward = rm_reward(str(tiny_rm))
    task = Task("t", "name a stone")
    good, bad = reward(task, "otter quilt"), reward(task, "OTTER ok")
    assert 0 <= bad.value < 0.5 < good.value <= 1
    assert good.status == bad.status == Status.PARTIAL and "reward model" in good.reason
    assert rm_reward(str(tiny_rm), threshold=0.5)(task, "otter quilt").status == Status.CORRECT
    with pytest.raises(ValueError, match="threshold"):
        rm_reward(str(tiny_rm), threshold=2)
    with pytest.raises(FileNotFoundError, match="not a reward model"):
        rm_reward(str(tiny_rm.parent / "nowhere"))


def test_rm_through_a_rubric_from_config(tiny_rm):
    task = Task("t", "name a cloud")
    for item in ({"function": f"rm:{tiny_rm}", "name": "rm"}, {"function": "rm", "options": {"path": str(tiny_rm)}}):
        rubric = Rubric.from_config([item])
        good, bad = rubric.score(task, "robin lemon"), rubric.score(task, "ROBIN ok")
        assert good.components["rm"] > 0.5 > bad.components["rm"] and good.status == Status.PARTIAL


def test_concurrent_calls_are_batched_and_each_gets_its_own_score(tiny_rm):
    reward = rm_reward(str(tiny_rm), max_batch=64, wait_ms=50)
    replies = [f"{w} {WORDS[-1 - i % 12]}" if i % 2 else f"{w.upper()} ok" for i, w in enumerate(WORDS * 3)]
    task = Task("t", "name a lemon")
    scorer = rm.batcher(str(tiny_rm), 64, 50)
    passes_before = scorer.forward_passes
    results: list = [None] * len(replies)
    start = threading.Barrier(len(replies))

    def call(i: int) -> None:
        start.wait()
        results[i] = reward(task, replies[i]).value

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(replies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert scorer.forward_passes - passes_before < len(replies)
    with torch.no_grad():
        raw = scorer.model.rewards([conversation(task.prompt, r) for r in replies]).tolist()
    assert results == pytest.approx([scorer.model.value(r) for r in raw], abs=1e-5)


def test_a_failing_model_is_an_infra_error_never_a_reward(tiny_rm, tmp_path, monkeypatch):
    scorer = rm.batcher(str(tiny_rm), 8, 1.0)

    def broken(conversations):
        raise RuntimeError("CUDA error: device lost")

    monkeypatch.setattr(scorer.model, "rewards", broken)
    reward = rm_reward(str(tiny_rm), max_batch=8, wait_ms=1.0)
    with pytest.raises(InfraError, match="device lost"):
        reward(Task("t", "name a piano"), "quilt")
    score = Rubric.from_config([{"function": "rm", "options": {"path": str(tiny_rm), "max_batch": 8, "wait_ms": 1.0}}])
    verdict = score.score(Task("t", "name a piano"), "quilt")
    assert verdict.status == Status.INFRA_ERROR and "device lost" in verdict.reason
    # a folder that vanished before the first call: loading fails, also an infra_error
    RewardModel.load(tiny_rm).save(tmp_path / "gone")
    late = rm_reward(str(tmp_path / "gone"))
    (tmp_path / "gone" / "model.pt").unlink()
    with pytest.raises(InfraError, match="could not be loaded"):
        late(Task("t", "x"), "y")


def test_implicit_prompt_and_conversational_rows_read_like_explicit_ones(tmp_path):
    rows = [
        {"prompt": "2+2=", "chosen": "4", "rejected": "5", "margin": 1},
        {"chosen": "2+2=4", "rejected": "2+2=5"},
        {
            "prompt": [{"role": "user", "content": "2+2="}],
            "chosen": [{"role": "assistant", "content": "4"}],
            "rejected": [{"role": "assistant", "content": "5"}],
        },
        {
            "chosen": [{"role": "user", "content": "2+2="}, {"role": "assistant", "content": "4"}],
            "rejected": [{"role": "user", "content": "2+2="}, {"role": "assistant", "content": "5"}],
        },
    ]
    pairs = read_preferences(write_jsonl(tmp_path / "p.jsonl", rows))
    assert [p.margin for p in pairs] == [1.0, 0.0, 0.0, 0.0]
    for p in pairs:
        assert p.chosen == conversation("2+2=", "4") and p.rejected == conversation("2+2=", "5")


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", r"p.jsonl:2: not valid JSON"),
        ("[1, 2]", r"p.jsonl:2: a row must be a JSON object"),
        ('{"prompt": "x", "chosen": "a"}', r"p.jsonl:2: missing 'rejected'"),
        ('{"prompt": "x", "chosen": "a", "rejected": ["b"]}', r"p.jsonl:2: 'chosen' and 'rejected' must both be"),
        ('{"prompt": "x", "chosen": "a", "rejected": "b", "margin": "big"}', r"p.jsonl:2: 'margin' must be a number"),
        ('{"chosen": [{"role": "robot", "content": "a"}], "rejected": []}', r"p.jsonl:2: 'chosen' has a bad message"),
    ],
)
def test_malformed_rows_are_named_by_line(tmp_path, line, message):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "x", "chosen": "a", "rejected": "b"}, line])
    with pytest.raises(ValueError, match=message):
        read_preferences(path)


def test_the_command_reports_bad_data_in_one_sentence(tmp_path, capsys):
    empty = write_jsonl(tmp_path / "empty.jsonl", ["", "  "])
    assert main(["train-rm", "--data", str(empty), "--out", str(tmp_path / "rm")]) == 2
    assert "has no preference pairs" in capsys.readouterr().err
    broken = write_jsonl(tmp_path / "broken.jsonl", ['{"prompt": "x", "chosen": "a", "rejected": "b"}', "{"])
    assert main(["train-rm", "--data", str(broken), "--out", str(tmp_path / "rm")]) == 2
    assert "broken.jsonl:2: not valid JSON" in capsys.readouterr().err.replace("\n", "")
    assert main(["train-rm", "--data", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "rm")]) == 2
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    assert main(["train-rm", "--data", str(broken), "--out", str(tmp_path / "busy")]) == 2
    assert "not a reward model folder" in capsys.readouterr().err.replace("\n", "")


@pytest.mark.slow
def test_the_rlhf_example_runs_from_anywhere_and_writes_only_into_its_work_folder(tmp_path):
    """examples/rlhf.py at small sizes, started outside the repository: its data, its runs and its
    plot go to --out, nothing to the working directory or the repository's docs/images."""
    import subprocess
    import sys

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    example = Path(__file__).resolve().parents[1] / "examples" / "rlhf.py"
    small = ["--pairs", "16", "--rm-epochs", "1", "--rl-minutes", "0.01", "--warmstart-steps", "5", "--out", "work"]
    env = {**os.environ, "LUDUS_CACHE": str(tmp_path / "cache"), "MPLBACKEND": "Agg"}
    run = subprocess.run([sys.executable, str(example), *small], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout[run.stdout.index("{\n") :])
    assert summary["plot"] == "work/rlhf_overoptimisation.png" and summary["rl_steps"] >= 1
    assert (elsewhere / summary["plot"]).read_bytes().startswith(b"\x89PNG")
    assert [p.name for p in elsewhere.iterdir()] == ["work"]
    assert {p.name for p in (elsewhere / "work").iterdir()} == {"prefs.jsonl", "rm", "rl", "rlhf_overoptimisation.png"}
