"""Ludus in verl: `ludus export --format verl` read by verl's RLHFDataset, `compute_score` loaded by
verl's custom reward function loader and run by its naive reward manager, and the Ludus agent
loop run by verl's own AgentLoopWorker from the documented agent-loop file, several samples a
batch, playing tool episodes with a tiny transformers model. No GPU, no Ray cluster.

verl 0.9.1 pins transformers<5.11, which this project does not follow; its import-time
dependencies are in the dev extra, and the verl wheel itself is installed here without its
dependencies (pip install --no-deps, into Ludus's cache directory) unless verl is importable
already."""

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VERL_USE_EXTERNAL_PLUGINS", "none")

import ludus.integrations.verl as ludus_verl  # noqa: E402
from integrations_support import AddEnv, FlakyGraderEnv, closed_port_url, teach  # noqa: E402
from ludus.cli import main  # noqa: E402
from ludus.core import registry  # noqa: E402
from ludus.core.registry import make  # noqa: E402
from ludus.integrations.common import RowError  # noqa: E402
from support import build_hf_checkpoint, package_without_dependencies  # noqa: E402

VERL = "verl==0.9.1"


def ensure_verl() -> None:
    """Import verl, installing the wheel alone (no dependencies) into the cache if it is missing."""
    try:
        import verl  # noqa: F401
    except ImportError:
        package_without_dependencies(VERL, "verl/__init__.py")


ensure_verl()

from omegaconf import OmegaConf  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls  # noqa: E402
from verl.trainer.ppo.reward import get_custom_reward_fn  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: E402


@pytest.fixture
def envs(monkeypatch):
    monkeypatch.setitem(registry._registered, "add-tool", AddEnv)
    monkeypatch.setitem(registry._registered, "flaky-grader", FlakyGraderEnv)
    AddEnv.calls.clear()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_hf_checkpoint(tmp_path_factory.mktemp("verl") / "model", context=1024)


def export(tmp_path: Path, env: str, n: int, split: str = "train") -> Path:
    out = tmp_path / f"{env}-{split}.parquet"
    assert main(["export", env, "--format", "verl", "--split", split, "-n", str(n), "-o", str(out)]) == 0
    return out


def dataset(files: list[Path], tokenizer) -> RLHFDataset:
    config = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": 1024, "filter_overlong_prompts": False})
    return RLHFDataset(data_files=[str(f) for f in files], tokenizer=tokenizer, config=config)


def reward_fn(**reward_kwargs):
    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": ludus_verl.__file__,
                    "name": "compute_score",
                    "reward_kwargs": reward_kwargs,
                }
            }
        }
    )
    return get_custom_reward_fn(config)


def test_verl_reads_the_exported_rows(tmp_path, tiny, envs):
    rows = dataset(
        [export(tmp_path, "arithmetic", 3, "eval"), export(tmp_path, "add-tool", 2)],
        AutoTokenizer.from_pretrained(tiny),
    )
    assert len(rows) == 5
    env = make("arithmetic")
    for i in range(3):
        item, task = rows[i], env.task_source("eval").get(i)
        assert item["raw_prompt"] == [{"role": m.role, "content": m.content} for m in env.reset(task, seed=i).messages]
        assert item["data_source"] == "ludus/arithmetic" and item["reward_model"]["ground_truth"] == task.id
        assert item["index"] == i and item["extra_info"]["split"] == "eval"
        assert str(task.answer) not in repr({k: v for k, v in item.items() if k != "raw_prompt"})
        assert "agent_name" not in item or item["agent_name"] is None
    assert rows[3]["agent_name"] == "ludus_agent" and rows[3]["data_source"] == "ludus/add-tool"


def test_compute_score_through_verls_loader(tmp_path, tiny, envs):
    rows = dataset(
        [export(tmp_path, "arithmetic", 2), export(tmp_path, "flaky-grader", 2)], AutoTokenizer.from_pretrained(tiny)
    )
    score = reward_fn()
    answer = make("arithmetic").task_source("train").get(0).answer

    def call(item, text, fn=score):
        return fn(
            data_source=item["data_source"],
            solution_str=text,
            ground_truth=item["reward_model"]["ground_truth"],
            extra_info=item["extra_info"],
        )

    assert call(rows[0], str(answer)) == {"score": 1.0, "acc": 1.0, "ludus_infra_error": 0.0}
    assert call(rows[0], str(answer + 1)) == {"score": 0.0, "acc": 0.0, "ludus_infra_error": 0.0}
    assert call(rows[2], "1")["score"] == 1.0  # flaky task 0 grades
    with pytest.raises(RuntimeError, match="infra_error"):  # flaky task 1's grader fails: no made-up 0
        call(rows[3], "2")
    assert call(rows[3], "2", reward_fn(on_infra_error="zero")) == {"score": 0.0, "acc": 0.0, "ludus_infra_error": 1.0}
    with pytest.raises(RowError, match="not a Ludus environment"):
        score(data_source="openai/gsm8k", solution_str="1", ground_truth="1", extra_info={"index": 0})
    tampered = {**rows[0]["extra_info"], "task_id": "arithmetic/train/0/9"}
    with pytest.raises(RowError, match="ground_truth"):
        call({**rows[0], "extra_info": tampered}, "1")


def test_compute_score_honours_on_infra_error_when_the_env_server_is_down(tmp_path, tiny, envs):
    row = dataset([export(tmp_path, "arithmetic", 1)], AutoTokenizer.from_pretrained(tiny))[0]
    url = closed_port_url()

    def call(**reward_kwargs):
        return reward_fn(env_server=url, **reward_kwargs)(
            data_source=row["data_source"],
            solution_str="1",
            ground_truth=row["reward_model"]["ground_truth"],
            extra_info=row["extra_info"],
        )

    assert call(on_infra_error="zero") == {"score": 0.0, "acc": 0.0, "ludus_infra_error": 1.0}
    with pytest.raises(RuntimeError, match=r"(?s)infra_error: the environment could not be made.*on_infra_error=zero"):
        call()  # the default: no made-up 0, and how to choose one


def test_row_errors_name_verls_columns_and_export(tmp_path, tiny, envs):
    row = dataset([export(tmp_path, "arithmetic", 1)], AutoTokenizer.from_pretrained(tiny))[0]
    score = reward_fn()
    with pytest.raises(RowError) as missing:
        score(data_source="ludus/arithmetic", solution_str="1", ground_truth="x", extra_info={"index": 0})
    with pytest.raises(RowError) as stale:  # a task id the environment no longer gives there
        other = "arithmetic/train/0/9"
        score(
            data_source="ludus/arithmetic",
            solution_str="1",
            ground_truth=other,
            extra_info={**row["extra_info"], "task_id": other},
        )
    assert "extra_info.split" in str(missing.value)
    for error in (missing, stale):
        assert "--format verl" in str(error.value) and "ludus_" not in str(error.value), error.value
    assert "`ludus export arithmetic --format verl -n N -o FILE.parquet`" in str(stale.value)


def test_naive_reward_manager_scores_decoded_responses(tmp_path, tiny, envs):
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    rows = dataset([export(tmp_path, "arithmetic", 2)], tokenizer)
    answers = [make("arithmetic").task_source("train").get(i).answer for i in range(2)]

    async def score(item, text: str) -> dict:
        manager = get_reward_manager_cls("naive")(OmegaConf.create({}), tokenizer, reward_fn())
        response = tokenizer(text + tokenizer.eos_token, add_special_tokens=False, return_tensors="pt")["input_ids"][0]
        padded = torch.cat([response, torch.full((4,), tokenizer.pad_token_id)])
        data = DataProto.from_dict(
            tensors={
                "prompts": torch.zeros((1, 3), dtype=torch.long),
                "responses": padded[None],
                "attention_mask": torch.cat([torch.ones(3 + len(response)), torch.zeros(4)]).long()[None],
            },
            non_tensors={k: [item[k]] for k in ("data_source", "reward_model", "extra_info")},
        )
        return await manager.run_single(data)

    assert asyncio.run(score(rows[0], str(answers[0])))["reward_score"] == 1.0
    wrong = asyncio.run(score(rows[1], str(answers[1] + 3)))
    assert wrong["reward_score"] == 0.0 and wrong["reward_extra_info"]["acc"] == 0.0


class TinyServer:
    """A generation server as verl's agent loops call it (``generate`` on token ids), sampling
    from a transformers model in this process. Each request's randomness follows from its prompt
    and how many times that prompt came before, so a batch samples the same whatever order its
    concurrent loops reach the server in."""

    def __init__(self, folder: Path):
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(folder).eval()
        self.eos = AutoTokenizer.from_pretrained(folder).eos_token_id
        self.seen: Counter[tuple[int, ...]] = Counter()

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        from verl.workers.rollout.replica import TokenOutput

        key = tuple(prompt_ids)
        generator = torch.Generator().manual_seed(hash((key, self.seen[key])) & 0xFFFFFFFF)
        self.seen[key] += 1
        step, past, out, logps = torch.tensor([prompt_ids]), None, [], []
        with torch.no_grad():
            for _ in range(48):
                result = self.model(step, past_key_values=past, use_cache=True)
                past = result.past_key_values
                probs = torch.softmax(result.logits[0, -1].float() / max(sampling_params["temperature"], 1e-3), -1)
                token = int(torch.multinomial(probs, 1, generator=generator))
                out.append(token)
                logps.append(float(torch.log(probs[token])))
                step = torch.tensor([[token]])
                if token == self.eos:
                    break
        return TokenOutput(token_ids=out, log_probs=logps, stop_reason="completed", num_preempted=0)


def agent_loops(folder: Path, **arguments: str) -> Path:
    """The agent-loop config file docs/integrations.md shows, with ``arguments`` for the loop."""
    entry = {"name": "ludus_agent", "_target_": "ludus.integrations.verl.LudusAgentLoop", **arguments}
    path = folder / "agent_loops.yaml"
    OmegaConf.save(OmegaConf.create([entry]), path)
    return path


def play(folder: Path, loops: Path, rows: list[dict], n: int) -> DataProto:
    """``rows`` played by verl's own AgentLoopWorker as its trainer hands them over: collated,
    each repeated ``n`` times (a GRPO group), all samples at once. The worker reads the agent-loop
    file into verl's registry and makes each sample's loop with hydra from it; only the LLM server
    is ours (TinyServer)."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.trainer.config import __file__ as config_dir
    from verl.utils.dataset.rl_dataset import collate_fn

    config = OmegaConf.load(Path(config_dir).parent / "_generated_ppo_trainer.yaml")  # verl's defaults
    config.actor_rollout_ref.model.path = str(folder)
    rollout = config.actor_rollout_ref.rollout
    rollout.name = "vllm"  # the rollout config needs a backend's name; nothing of vLLM runs here
    rollout.prompt_length, rollout.response_length = 512, 256
    rollout.multi_turn.max_assistant_turns = 4
    rollout.agent.agent_loop_config_path = str(loops)
    batch = DataProto.from_single_dict(collate_fn(rows)).repeat(repeat_times=n, interleave=True)
    worker = AgentLoopWorker(config, TinyServer(folder))
    return asyncio.run(worker.generate_sequences(batch))


def test_agent_loop_worker_plays_tool_episodes_from_the_documented_config(tmp_path, tiny, envs):
    folder = tmp_path / "model"
    shutil.copytree(tiny, folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    rows = dataset([export(tmp_path, "add-tool", 4)], tokenizer)
    from verl.tools.schemas import OpenAIFunctionToolSchema
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    spec = AddEnv().reset(AddEnv().task_source().get(0)).tools[0]
    tools = [
        OpenAIFunctionToolSchema.model_validate(spec.to_openai()).model_dump(exclude_unset=True, exclude_none=True)
    ]
    call = {"type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}
    builder = create_continuous_token_builder(tokenizer, hf_model_type="llama")  # the prompt as verl's loop renders it
    first = builder.build_initial_tokens(rows[0]["raw_prompt"], tools=tools)
    turn = [
        *rows[0]["raw_prompt"],
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "3"},
    ]
    second = tokenizer.apply_chat_template(turn, tools=tools, tokenize=False, add_generation_prompt=True)
    teach(
        folder,
        [(first, '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call></s>'), (second, "3</s>")],
    )

    out = play(folder, agent_loops(tmp_path), [rows[i] for i in (0, 1, 3)], n=2)  # six samples in one batch
    statuses = list(out.non_tensor_batch["ludus_status"])
    assert "correct" in statuses[:2], statuses  # task 0: add(1, 2), then 3
    assert all(s in ("wrong", "format_error", "truncated") for s in statuses[2:4]), statuses  # task 1 is 2+2
    assert "infra_error" in statuses[4:], statuses  # task 3's tool is down
    assert sum(t == "add/3" for t, _, _ in AddEnv.calls) == statuses.count("infra_error")
    assert ("add/0", 1, 2) in AddEnv.calls
    rewards = out.batch["rm_scores"].sum(-1).tolist()  # the loop's scores, where verl's trainer reads them
    masks, lengths = out.batch["response_mask"].sum(-1), out.batch["attention_mask"][:, 512:].sum(-1)
    for i, status in enumerate(statuses):
        assert rewards[i] == (1.0 if status == "correct" else 0.0)
        if status == "infra_error":
            assert masks[i] == 0  # masked from the loss
        if status == "correct":
            assert 0 < masks[i] < lengths[i]  # the tool's reply is in the response, not trained on
    # compute_score, should verl call it on a row the loop played, returns the loop's score
    played = {**rows[0]["extra_info"], "ludus_score": out.non_tensor_batch["ludus_score"][0]}
    assert (
        reward_fn()(
            data_source="ludus/add-tool",
            solution_str="ignored",
            ground_truth=rows[0]["reward_model"]["ground_truth"],
            extra_info=played,
        )["score"]
        == rewards[0]
    )


def test_agent_loop_masks_the_samples_of_an_env_server_that_is_down(tmp_path, tiny, envs):
    url = closed_port_url()
    rows = dataset([export(tmp_path, "add-tool", 2)], AutoTokenizer.from_pretrained(tiny))
    out = play(tiny, agent_loops(tmp_path, env_server=url), [rows[0], rows[1]], n=2)
    assert list(out.non_tensor_batch["ludus_status"]) == ["infra_error"] * 4  # no sample raised
    for text in out.non_tensor_batch["ludus_score"]:  # every sample's loop got the file's env_server
        reason = json.loads(text)["reason"]
        assert "could not be made" in reason and url in reason, reason
    assert out.batch["response_mask"].sum() == 0 and out.batch["rm_scores"].sum() == 0
    assert set(out.non_tensor_batch["ludus_masked"]) == {True}


def test_the_agent_loop_is_found_by_its_documented_path_without_importing_verl_before(tmp_path):
    from hydra.utils import get_class

    from ludus.integrations.verl_agent_loop import LudusAgentLoop

    assert get_class("ludus.integrations.verl.LudusAgentLoop") is LudusAgentLoop
    assert get_class(f"{LudusAgentLoop.__module__}.{LudusAgentLoop.__qualname__}") is LudusAgentLoop
    probe = "import sys, ludus.integrations.verl; print(sorted(m for m in sys.modules if m.split('.')[0] == 'verl'))"
    verl_folder = str(Path(sys.modules["verl"].__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([verl_folder, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.strip() == "[]"


def test_the_verl_example_checks_rewards_through_verls_loader(tmp_path, envs):
    import importlib.util

    path = Path(__file__).parents[1] / "examples" / "verl_reward.py"
    spec = importlib.util.spec_from_file_location(path.stem, path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    summary = example.main(["--env", "arithmetic", "--tasks", "8", "--out", str(tmp_path / "a")])
    assert summary["checked"] == {"reference": 8, "empty": 8, "no_reference": 0}
    assert (tmp_path / "a" / "eval.parquet").exists() and not (tmp_path / "a" / "agent_loops.yaml").exists()
    summary = example.main(["--env", "add-tool", "--tasks", "4", "--out", str(tmp_path / "b")])
    config = OmegaConf.load(tmp_path / "b" / "agent_loops.yaml")
    assert config[0].name == "ludus_agent" and config[0]._target_ == "ludus.integrations.verl.LudusAgentLoop"
    assert any("agent_loop_config_path" in o for o in summary["overrides"])
