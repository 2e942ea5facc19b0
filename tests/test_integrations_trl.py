"""Ludus in TRL: datasets from `ludus export`, graders as reward_funcs and tool environments as
environment_factory, each trained for two steps by a real GRPOTrainer on a tiny model on CPU."""

import math
import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the Hub
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from datasets import load_dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from integrations_support import RESPONSE_TEMPLATE, AddEnv, FlakyGraderEnv, closed_port_url, teach  # noqa: E402
from ludus.cli import main  # noqa: E402
from ludus.core import registry  # noqa: E402
from ludus.core.registry import make  # noqa: E402
from ludus.core.types import ToolSpec  # noqa: E402
from ludus.integrations.common import RowError  # noqa: E402
from ludus.integrations.trl import LudusEnvironment, LudusReward, tool_method, tool_schemas  # noqa: E402
from support import build_hf_checkpoint, serving  # noqa: E402


@pytest.fixture
def envs(monkeypatch):
    monkeypatch.setitem(registry._registered, "add-tool", AddEnv)
    monkeypatch.setitem(registry._registered, "flaky-grader", FlakyGraderEnv)
    AddEnv.calls.clear()


def export(tmp_path: Path, env: str, n: int, *extra: str) -> Path:
    out = tmp_path / f"{env}.parquet"
    assert main(["export", env, "-n", str(n), "-o", str(out), *extra]) == 0
    return out


def batch_kwargs(rows: list[dict]) -> dict:
    return {k: [r[k] for r in rows] for k in rows[0] if k != "prompt"}


def test_export_writes_prompts_and_task_names_not_answers(tmp_path):
    data = load_dataset("parquet", data_files=str(export(tmp_path, "arithmetic", 5)))["train"]
    assert data.column_names == [
        "prompt",
        "ludus_env",
        "ludus_env_args",
        "ludus_split",
        "ludus_index",
        "ludus_seed",
        "ludus_task_id",
    ]
    env = make("arithmetic")
    for i, row in enumerate(data):
        task = env.task_source("train").get(i)
        assert row["prompt"] == [{"role": m.role, "content": m.content} for m in env.reset(task, seed=i).messages]
        assert (row["ludus_index"], row["ludus_seed"], row["ludus_task_id"]) == (i, i, task.id)
        assert str(task.answer) not in {str(v) for k, v in row.items() if k != "prompt"}


def test_reward_grades_with_the_environment_and_refuses_rows_it_cannot_trust(tmp_path, envs):
    rows = list(load_dataset("parquet", data_files=str(export(tmp_path, "arithmetic", 3)))["train"])
    reward = LudusReward()
    answers = [str(make("arithmetic").task_source("train").get(i).answer) for i in range(3)]
    completions = [[{"role": "assistant", "content": answers[0]}], answers[1] + "1", "no idea"]
    prompts = [r["prompt"] for r in rows]
    assert reward(prompts, completions, **batch_kwargs(rows)) == [1.0, 0.0, 0.0]
    assert reward.status.counts == {"correct": 1, "wrong": 1, "format_error": 1}

    other = [dict(rows[0], ludus_env_args='{"digits": 3}')]  # exported with other arguments
    with pytest.raises(RowError, match="export it again"):
        reward([other[0]["prompt"]], ["1"], **batch_kwargs(other))
    changed = [{**rows[0], "prompt": [{"role": "user", "content": "2+2="}]}]
    with pytest.raises(RowError, match="the row's prompt differs from the one arithmetic shows") as edited:
        reward([changed[0]["prompt"]], ["4"], **batch_kwargs(changed))
    message = str(edited.value)  # what differs, how to opt out, and the export that matches the grader
    assert "message 0 is user: '2+2=' in the row" in message and "check_prompt=False" in message
    assert "`ludus export arithmetic -n N -o FILE.parquet`" in message
    assert LudusReward(check_prompt=False)([changed[0]["prompt"]], [answers[0]], **batch_kwargs(changed)) == [1.0]
    with pytest.raises(RowError, match="lacks the columns ludus_task_id"):
        reward(prompts, completions, **{k: v for k, v in batch_kwargs(rows).items() if k != "ludus_task_id"})

    flaky = list(load_dataset("parquet", data_files=str(export(tmp_path, "flaky-grader", 2)))["train"])
    scores = LudusReward()([r["prompt"] for r in flaky], ["1", "2"], **batch_kwargs(flaky))
    assert scores == [1.0, None]  # the grader failed on task 1: left out, not 0


def test_an_env_server_that_is_down_gives_infra_errors_once_set_up(tmp_path, envs):
    from ludus.rollout.remote import RemoteEnv, RemoteEnvError
    from ludus.serve.env_server import EnvServer

    down = closed_port_url()
    rows = list(load_dataset("parquet", data_files=str(export(tmp_path, "arithmetic", 2)))["train"])
    reward = LudusReward(lambda: RemoteEnv(down, retries=0))
    assert reward([r["prompt"] for r in rows], ["1", "2"], **batch_kwargs(rows)) == [None, None]  # not a crash
    assert reward.status.counts == {"infra_error": 2}

    with pytest.raises(RemoteEnvError, match="Connection refused"):  # set-up reads the tools: nothing trained yet
        LudusEnvironment(lambda: RemoteEnv(down, retries=0))
    rows = list(load_dataset("parquet", data_files=str(export(tmp_path, "add-tool", 2)))["train"])
    with serving(EnvServer(AddEnv)) as url:
        environment = LudusEnvironment(lambda: RemoteEnv(url.removesuffix("/v1"), retries=0))
        playing, later = environment(), environment()  # as TRL makes them, before training
        playing.reset(**rows[0])
        assert playing.add(a=1, b=2) == "3"
    # the server is gone: the episode in flight and the next one are infra_error, left out
    later.reset(**rows[1])
    assert later.add(a=2, b=2) == "Error: the episode has ended (infra_error); give your final answer"
    assert environment.reward(["3", "4"], environments=[playing, later]) == [None, None]
    assert environment.status.counts == {"infra_error": 2}


def test_tool_methods_carry_the_environments_schemas():
    spec = ToolSpec(
        "search",
        "Search the\n index.",
        {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "what to find"},
                "limit": {"type": "integer", "default": 5},
                "kinds": {"type": "array", "items": {"type": "string"}},
                "mode": {"enum": ["fast", "exact"]},
                "after": {"anyOf": [{"type": "number"}, {"type": "null"}], "default": None},
            },
            "required": ["query", "kinds", "mode"],
        },
    )
    from transformers.utils import get_json_schema

    schema = get_json_schema(tool_method(spec))["function"]
    assert schema["name"] == "search" and schema["description"] == "Search the index."
    assert schema["parameters"]["required"] == ["query", "kinds", "mode"]
    props = schema["parameters"]["properties"]
    assert props["query"] == {"type": "string", "description": "what to find"}
    assert props["limit"]["type"] == "integer" and props["kinds"]["items"] == {"type": "string"}
    assert props["mode"]["enum"] == ["fast", "exact"] and props["after"]["nullable"] is True
    for bad in ("reset", "_hidden", "class", "two words"):
        with pytest.raises(ValueError, match="cannot be a TRL environment method"):
            tool_method(ToolSpec(bad, "x"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_hf_checkpoint(tmp_path_factory.mktemp("trl") / "model", context=1024)


def tokenizer_for(folder: Path):
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"
    tokenizer.response_template = RESPONSE_TEMPLATE
    return tokenizer


def grpo_args(tmp_path: Path, completion_length: int, **kw) -> GRPOConfig:
    return GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=completion_length,
        max_steps=2,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        seed=0,
        **kw,
    )


def weights(folder_or_model) -> torch.Tensor:
    model = folder_or_model
    if isinstance(folder_or_model, Path):
        model = AutoModelForCausalLM.from_pretrained(folder_or_model)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_grpo_trainer_trains_on_ludus_rewards_and_leaves_infra_errors_out(tmp_path, tiny, envs):
    folder = tmp_path / "model"
    folder.mkdir()
    for f in tiny.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    files = [str(export(tmp_path, "arithmetic", 2)), str(export(tmp_path, "flaky-grader", 2))]
    data = load_dataset("parquet", data_files=files)["train"]
    tokenizer = tokenizer_for(folder)
    answers = {r["ludus_task_id"]: make(r["ludus_env"]).task_source("train").get(r["ludus_index"]).answer for r in data}
    render = [tokenizer.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True) for r in data]
    teach(folder, [(p, f"{answers[r['ludus_task_id']]}</s>") for p, r in zip(render, data, strict=True)], steps=25)
    before = weights(folder)

    reward = LudusReward()
    trainer = GRPOTrainer(
        model=str(folder),
        reward_funcs=reward,
        args=grpo_args(tmp_path, 8),
        train_dataset=data,
        processing_class=tokenizer,
    )
    trainer.train()

    counts = reward.status.counts
    assert sum(counts.values()) == 16 and counts["infra_error"] == 4  # 2 steps × 8; flaky's task 1 × 4
    assert counts["correct"] > 0 and counts["correct"] < 12  # the warm-up teaches, sampling still errs
    steps = [h for h in trainer.state.log_history if "rewards/ludus/mean" in h]
    assert len(steps) == 2
    for h in steps:  # TRL's reward is the Ludus value over the gradable samples only
        gradable = 1 - h["ludus/infra_error"]
        assert math.isclose(h["rewards/ludus/mean"], h["ludus/correct"] / gradable, abs_tol=1e-6)
    assert any(h["grad_norm"] > 0 for h in steps)
    assert not torch.equal(before, weights(trainer.model))


def ids(tokenized) -> list[int]:
    return list(tokenized["input_ids"])


def teach_tool_use(folder: Path, environment: LudusEnvironment, rows: list[dict]) -> None:
    """Teach on task 0: call add(1, 2), then reply 3 (what the model then does on the other tasks is wrong)."""
    tokenizer = tokenizer_for(folder)
    tools = tool_schemas(environment)
    call = {"type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}
    examples = []
    for row in rows[:1]:
        # token ids rendered exactly as TRL renders its prompts (tokenize=True), not text tokenized again
        first = ids(
            tokenizer.apply_chat_template(row["prompt"], tools=tools, add_generation_prompt=True, return_dict=True)
        )
        examples.append((first, '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call></s>'))
        turn = [
            *row["prompt"],
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "name": "add", "content": "3"},
        ]
        second = ids(tokenizer.apply_chat_template(turn, tools=tools, add_generation_prompt=True, return_dict=True))
        examples.append((second, "3</s>"))
    # the first token after "<|assistant|>" must tell a first turn from one after the tool result:
    # 80 steps were not always enough to learn it (the model then answered "3" at once)
    teach(folder, examples, steps=300)


def run_environment(tmp_path: Path, tiny: Path, environment: LudusEnvironment):
    folder = tmp_path / "model"
    folder.mkdir()
    for f in tiny.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    data = load_dataset("parquet", data_files=str(export(tmp_path, "add-tool", 4)))["train"]
    teach_tool_use(folder, environment, list(data))
    trainer = GRPOTrainer(
        model=str(folder),
        reward_funcs=environment.reward,
        environment_factory=environment,
        args=grpo_args(tmp_path, 64, max_tool_calling_iterations=3),
        train_dataset=data,
        processing_class=tokenizer_for(folder),
    )
    trainer.train()
    return trainer


def check_episodes(trainer, environment: LudusEnvironment) -> None:
    counts = environment.status.counts
    assert sum(counts.values()) == 16  # two steps of 8 rollouts, every one scored
    assert counts["correct"] > 0  # task 0: add(1, 2) then 3
    assert counts["wrong"] + counts["format_error"] + counts["truncated"] > 0
    ran = {task for task, a, b in AddEnv.calls}
    assert "add/0" in ran and all((a, b) == (1, 2) for _, a, b in AddEnv.calls)
    assert ("add/3" in ran) == (counts["infra_error"] > 0)  # task 3's tool is down: masked, not 0
    steps = [h for h in trainer.state.log_history if "ludus/correct" in h]
    assert len(steps) == 2 and any(h["tools/call_frequency"] > 0 for h in steps)
    for h in steps:
        gradable = 1 - h["ludus/infra_error"]
        if gradable:
            assert math.isclose(h["rewards/ludus_env/mean"], h["ludus/correct"] / gradable, abs_tol=1e-6)


def test_grpo_trainer_plays_a_tool_environment_episode_by_episode(tmp_path, tiny, envs):
    environment = LudusEnvironment("add-tool")
    assert [t.name for t in environment.tools] == ["add"]
    schema = tool_schemas(environment)[0]["function"]
    spec = AddEnv().tools()[0] if AddEnv().tools() else environment.tools[0]
    assert schema["description"] == spec.description and schema["parameters"]["required"] == ["a", "b"]
    trainer = run_environment(tmp_path, tiny, environment)
    check_episodes(trainer, environment)
    environment.close()


def test_grpo_trainer_plays_episodes_on_an_env_server(tmp_path, tiny, envs):
    from ludus.rollout.remote import RemoteEnv
    from ludus.serve.env_server import EnvServer

    with serving(EnvServer(AddEnv)) as url:
        base = url.removesuffix("/v1")
        environment = LudusEnvironment(lambda: RemoteEnv(base))
        trainer = run_environment(tmp_path, tiny, environment)
        check_episodes(trainer, environment)
        environment.close()


def load_example(name: str):
    import importlib.util

    path = Path(__file__).parents[1] / "examples" / name
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_trl_example_runs(tmp_path, tiny):
    summary = load_example("trl_grpo.py").main(
        [
            "--model",
            str(tiny),
            "--env",
            "arithmetic",
            "--tasks",
            "4",
            "--max-completion-length",
            "6",
            "--out",
            str(tmp_path),
        ]
    )
    assert summary["steps"] == 2 and sum(summary["statuses"].values()) == 16


def test_export_help_imports_no_trainer():
    from test_cli_startup import loaded, run_probe

    probe = run_probe(["export", "--help"])
    assert probe["code"] == 0 and "--format {trl,verl}" in probe["stdout"]
    assert loaded(probe["modules"], ("ludus.integrations", "trl", "datasets", "pyarrow", "torch", "verl")) == []
