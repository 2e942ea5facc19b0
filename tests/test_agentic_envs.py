"""The agentic environments end to end with every kind of model: the embedded tiny model (`ludus
eval` and `ludus train`), a transformers checkpoint, and an OpenAI-compatible server (`ludus
serve-model`'s app on 127.0.0.1) — through the rollout engine, with sql on SQLite and on
PostgreSQL, and the browser environments on a real Chromium. Random models earn nothing; what is checked is that every episode is graded (no
infrastructure error anywhere on the path)."""

import json
from pathlib import Path

import pytest

from ludus.cli import main
from ludus.core.registry import env_class
from ludus.policies import load_policy
from ludus.policies.base import SamplingParams
from ludus.policies.openai import OpenAIPolicy
from ludus.rollout.evaluate import evaluate
from ludus.serve.model_server import create_app
from ludus.train.config import ConfigError
from ludus.train.trainer import Trainer
from support import build_hf_checkpoint, serving

# label -> (environment, its arguments); "sql-postgres" runs on the session's PostgreSQL server
AGENTIC = {
    "sql": ("sql", {"difficulty": 1}),
    "sql-postgres": ("sql", {"difficulty": 1, "engine": "postgres"}),
    "repo": ("repo", {}),
    # one short page view a turn, so that the tiny model's context holds the episode
    "web": ("web", {"difficulty": 1, "max_turns": 1, "max_chars": 800}),
    "miniwob": ("miniwob", {"max_turns": 2, "max_chars": 500}),
}


@pytest.fixture(params=sorted(AGENTIC))
def agentic(request) -> tuple[str, str, dict]:
    """``(label, environment, arguments)``; PostgreSQL runs get the server through ``$LUDUS_POSTGRES_DSN``."""
    env, args = AGENTIC[request.param]
    if args.get("engine") == "postgres":
        request.getfixturevalue("postgres_dsn")
    return request.param, env, args


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A transformers checkpoint whose tokenizer learnt the environments' tool schemas: the prompts,
    mostly those schemas, then take a few hundred positions rather than one per character (3,300
    for web), which attention pays for quadratically in every update."""
    schemas = []
    for name, args in AGENTIC.values():
        if args.get("engine") != "postgres":  # sql's tools, as on SQLite
            env = env_class(name)(**args)
            schemas += [json.dumps(tool.to_openai()["function"]) for tool in env.tools()]
            env.close()
    return build_hf_checkpoint(tmp_path_factory.mktemp("hf") / "model", context=4096, texts=schemas)


def _tasks(name: str, args: dict, n: int = 3):
    env = env_class(name)(**args)
    return [env.task_source("eval").get(i) for i in range(n)]


def test_ludus_eval_with_the_tiny_model_grades_every_episode(agentic, tmp_path):
    _, name, args = agentic
    argv = ["eval", name, "--env-args", json.dumps(args), "--tasks", "3", "--samples", "2"]
    argv += ["--model", "tiny", "--model-args", '{"max_len": 2048}', "--max-tokens", "24"]
    assert main([*argv, "--runs", str(tmp_path), "--name", "tiny"]) == 0
    summary = json.loads((tmp_path / "tiny" / "summary.json").read_text())
    assert summary["samples"] == 6 and summary["infra_errors"] == 0, summary


def test_ludus_train_runs_on_the_environment(agentic, small_config):
    label, name, args = agentic
    config = small_config(
        name=f"train-{label}",
        env=name,
        env_args=args,
        tiny={"d_model": 32, "n_layers": 1, "n_heads": 2, "max_len": 2048},
        warmstart_steps=2 if name == "sql" else 0,  # a supervised warm-start needs single-turn references
        steps=2,
        prompts_per_step=2,
        group_size=2,
        max_tokens=24,
        eval_size=2,
        eval_every=2,
        temperature=1.0,
    )
    result = Trainer.create(config, log=lambda _: None).run()
    assert result.step == 2
    records = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if "reward/mean" in r]
    assert [r["step"] for r in train] == [1, 2] and all(r["masked_infra_errors"] == 0 for r in train)
    assert all(r["eval/infra_errors"] == 0 for r in records if "eval/accuracy" in r)


def test_a_transformers_model_directly_and_behind_the_model_server(agentic, checkpoint, tmp_path):
    _, name, args = agentic
    tasks = _tasks(name, args)
    factory = lambda: env_class(name)(**args)  # noqa: E731
    sampling = SamplingParams(temperature=1.0, max_tokens=24)
    policy = load_policy(f"hf:{checkpoint}")
    direct = evaluate(policy, factory, tasks, tmp_path / "direct", samples=2, sampling=sampling)
    assert direct.samples == 6 and direct.infra_errors == 0, direct.statuses
    with serving(create_app(policy, "tiny-llama")) as url:
        client = OpenAIPolicy(url, "tiny-llama", timeout_s=60)
        served = evaluate(client, factory, tasks, tmp_path / "served", samples=2, sampling=sampling)
        client.close()
    assert served.samples == 6 and served.infra_errors == 0, served.statuses


def test_training_refuses_a_context_too_short_for_the_prompts_before_sampling_anything(small_config):
    """small_config's 24 tokens of context cannot hold an SQL prompt: every sample would be an
    infrastructure failure, so the run does not start, and says what to set."""
    config = small_config(name="too-small", env="sql", env_args=AGENTIC["sql"][1], warmstart_steps=0, steps=3)
    with pytest.raises(ConfigError, match=r"max_len 24 cannot hold sql's prompts .*--tiny '\{max_len: 128\}'"):
        Trainer.create(config, log=lambda _: None).run()
    assert not (Path(config.runs_dir) / "too-small").exists()


def test_ludus_train_with_a_transformers_model(agentic, checkpoint, small_config):
    label, name, args = agentic
    config = small_config(
        name=f"hf-{label}",
        model=f"hf:{checkpoint}",
        env=name,
        env_args=args,
        steps=2,
        prompts_per_step=2,
        group_size=2,
        max_tokens=24,
        temperature=1.0,
        lr=1e-4,
        beta=0.01,  # random replies earn nothing: the KL and entropy terms still train every sample
        eval_size=2,
        eval_every=2,
    )
    result = Trainer.create(config, log=lambda _: None).run()
    records = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if "reward/mean" in r]
    assert result.step == 2 and all(r["masked_infra_errors"] == 0 and r["trained_samples"] > 0 for r in train)
