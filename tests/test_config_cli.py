"""Configuration errors name the field; the CLI turns user errors into one line and exit code 2;
every command reads the flags that take keyword arguments the same way."""

import json
import os
import re
import subprocess
import sys

import httpx
import pytest

from ludus.cli import main
from ludus.train.config import ConfigError, TrainConfig, load_config


def test_flags_override_yaml_and_numbers_parse(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("lr: 1e-3\ngroup_size: 4\nenv_args: {digits: 3}\n")
    c = load_config(path, {"group_size": "8"})
    assert (c.lr, c.group_size, c.env_args) == (1e-3, 8, {"digits": 3})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lr: fast\n", "'lr' \\(from"),
        ("group_sise: 4\n", "did you mean 'group_size'"),
        ("scale_rewards: maybe\n", "'scale_rewards'"),
        ("group_size: 1\n", "'group_size'"),
        ("env_args: 3\n", "'env_args'"),
        ("- a\n- b\n", "must hold a mapping"),
        ("lr: [1\n", "not valid YAML"),
    ],
)
def test_bad_config_files_name_the_field_and_file(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        load_config(path)
    assert "bad.yaml" in str(info.value) or "group_size" in str(info.value)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_cli_user_errors_exit_2_with_one_line(capsys, tmp_path):
    assert main(["train", "--lr", "fast", "--runs-dir", str(tmp_path)]) == 2
    assert "config field 'lr'" in capsys.readouterr().err
    assert main(["train", "--env", "arithmetc", "--runs-dir", str(tmp_path)]) == 2
    assert "did you mean 'arithmetic'" in capsys.readouterr().err.lower()
    assert main(["train", "--env-args", "{colour: red}", "--runs-dir", str(tmp_path)]) == 2
    assert "'env_args'" in capsys.readouterr().err


def test_cli_envs_and_check(capsys):
    assert main(["envs"]) == 0
    assert main(["check", "arithmetic"]) == 0
    out = capsys.readouterr().out
    assert "meets the environment contract" in out


def test_default_env_args_do_not_follow_another_env():
    assert load_config(overrides={"env": "math"}).env_args == {}
    assert load_config(overrides={"env": "math", "env_args": "{difficulty: 1}"}).env_args == {"difficulty": 1}
    assert load_config().env_args == TrainConfig().env_args


# ---- every rule of a training config is in TrainConfig.validate --------------------------------
SERVER = "http://127.0.0.1:8000/v1"


def test_validate_refuses_env_and_envs_together():
    with pytest.raises(ConfigError, match="'env'/'env_args' and 'envs' both name the run's environments"):
        TrainConfig(env="countdown", env_args={}, envs=[{"name": "sorting"}]).validate()
    with pytest.raises(ConfigError, match="'env'/'env_args' and 'envs'"):
        TrainConfig(env_args={"digits": 3}, envs=[{"name": "sorting"}]).validate()
    TrainConfig(envs=[{"name": "sorting"}]).validate()  # env and env_args left at their defaults


@pytest.fixture
def model_folders(tmp_path):
    """A tiny model saved by ludus, and a transformers checkpoint's config.json (all that
    validate reads: it tells a folder's kind without loading weights)."""
    from ludus.policies import load_policy

    tiny = tmp_path / "tiny"
    load_policy("tiny", d_model=16, n_layers=1, n_heads=2, max_len=16).save(tiny)
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    return tiny, checkpoint


def test_validate_refuses_a_rollout_server_for_a_tiny_model_saved_or_not(model_folders):
    tiny, checkpoint = model_folders
    for model in ["tiny", str(tiny)]:
        message = (
            f"'rollout_server' needs a transformers model .*hf:PATH.*model is {re.escape(repr(model))}, the embedded"
        )
        with pytest.raises(ConfigError, match=message):
            TrainConfig(model=model, rollout_server=SERVER).validate()
    # hf:PATH is a transformers model by its name (a tiny folder is one too: it is saved as GPT-2)
    for model in [f"hf:{checkpoint}", str(checkpoint), f"hf:{tiny}"]:
        TrainConfig(model=model, rollout_server=SERVER).validate()
    with pytest.raises(ConfigError, match="'model' is 'http://.*a model server"):
        TrainConfig(model=SERVER, rollout_server=SERVER).validate()
    (checkpoint / "config.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"config field 'model' \(.*not a model's configuration \(a JSON object\)"):
        TrainConfig(model=str(checkpoint), rollout_server=SERVER).validate()


CHECK = """import json, sys
from ludus.train.config import ConfigError, load_config
errors = []
for model in sys.argv[1:]:
    try:
        load_config(overrides={"model": model, "rollout_server": "http://127.0.0.1:8000/v1"})
    except ConfigError as exc:
        errors.append(str(exc))
print(json.dumps({"errors": errors, "torch": "torch" in sys.modules}))
"""


def test_checking_a_rollout_servers_model_imports_no_torch(model_folders):
    tiny, checkpoint = model_folders
    done = subprocess.run(
        [sys.executable, "-c", CHECK, str(tiny), str(checkpoint)], capture_output=True, text=True, check=True
    )
    result = json.loads(done.stdout)
    assert len(result["errors"]) == 1 and "the embedded tiny model" in result["errors"][0]
    assert result["torch"] is False


# ---- one syntax for the flags that take keyword arguments ---------------------------------------
ARITHMETIC = "{digits: 1, ops: '+'}"  # YAML, not JSON: every command reads it the same way


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--env-args", "[1, 2]"],
        ["train", "--tiny", "[1, 2]"],
        ["warmstart", "--env-args", "[1, 2]"],
        ["eval", "arithmetic", "--env-args", "[1, 2]"],
        ["eval", "arithmetic", "--model-args", "[1, 2]"],
        ["export", "arithmetic", "-n", "1", "-o", "x.jsonl", "--env-args", "[1, 2]"],
        ["check", "arithmetic", "--env-args", "[1, 2]"],
        ["serve-env", "arithmetic", "--port", "0", "--env-args", "[1, 2]"],
        ["serve-model", "--port", "0", "--model-args", "[1, 2]"],
    ],
)
def test_every_command_refuses_a_non_mapping_with_the_same_error(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    flag = next(a for a in argv if a in ("--env-args", "--tiny", "--model-args"))
    assert (
        f"{flag} must be a mapping of names to values such as '{{digits: 3}}', got '[1, 2]'" in capsys.readouterr().err
    )
    assert not (tmp_path / "x.jsonl").exists() and not (tmp_path / "runs").exists()


def test_a_flag_that_does_not_parse_says_so(capsys):
    assert main(["check", "arithmetic", "--env-args", "{digits: 1"]) == 2
    assert "--env-args must be a mapping such as '{digits: 3}' (YAML or JSON)" in capsys.readouterr().err


def test_json_stays_json_and_yaml_is_yaml():
    from ludus.cli.common import mapping_flag

    assert mapping_flag("--env-args", '{"lr": 1e-3, "on": true}') == {"lr": 1e-3, "on": True}  # YAML: '1e-3' text
    assert mapping_flag("--env-args", "{digits: 3, ops: '+-'}") == {"digits": 3, "ops": "+-"}
    assert mapping_flag("--env-args", None) == mapping_flag("--env-args", "") == {}


def test_train_and_warmstart_read_mapping_flags_as_yaml():
    from ludus.cli import build_parser
    from ludus.cli.train import config_overrides

    for command in ("train", "warmstart"):
        args = build_parser().parse_args([command, "--env-args", ARITHMETIC, "--tiny", "{max_len: 24}"])
        config = load_config(overrides=config_overrides(args))
        assert (config.env_args, config.tiny) == ({"digits": 1, "ops": "+"}, {"max_len": 24})


def test_eval_export_and_check_read_the_same_yaml(capsys, tmp_path):
    runs = tmp_path / "runs"
    argv = ["eval", "arithmetic", "--env-args", ARITHMETIC, "--model-args", "{max_len: 128}", "--tasks", "3"]
    assert main([*argv, "--runs", str(runs), "--name", "e"]) == 0
    assert json.loads((runs / "e" / "eval.json").read_text())["model_args"] == {"max_len": 128}
    prompts = [
        json.loads(line)["task"]["prompt"] for line in (runs / "e" / "trajectories.jsonl").read_text().splitlines()
    ]
    assert len(prompts) == 3 and all(re.fullmatch(r"\D*\d\+\d\D*", p) for p in prompts), prompts
    out = tmp_path / "tasks.jsonl"
    assert main(["export", "arithmetic", "-n", "2", "-o", str(out), "--env-args", ARITHMETIC]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [json.loads(r["ludus_env_args"]) for r in rows] == [{"digits": 1, "ops": "+"}] * 2
    assert main(["check", "arithmetic", "--env-args", ARITHMETIC]) == 0
    assert "meets the environment contract" in capsys.readouterr().out


def test_the_servers_read_the_same_yaml():
    from ludus.rollout.remote import RemoteEnv
    from support import start_env_server

    proc, url = start_env_server("--env-args", ARITHMETIC)
    try:
        remote = RemoteEnv(url)
        remote.close()
        assert remote.env_args == {"digits": 1, "ops": "+"}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    cmd = [sys.executable, "-m", "ludus.cli", "serve-model", "--port", "0", "--model-args", "{max_len: 128}"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "300"})
    try:
        line = proc.stderr.readline()  # "serving tiny at URL (...)", once the socket listens
        assert " at http" in line, line
        url = line.split(" at ", 1)[1].split()[0]
        long_prompt = {"messages": [{"role": "user", "content": "x" * 100}], "max_tokens": 4}  # > the default 64
        reply = httpx.post(f"{url}/chat/completions", json=long_prompt, timeout=60)
        assert reply.status_code == 200, reply.text
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_context_hint_names_flags_its_commands_have():
    """The tiny model's context error is printed by train, eval and serve-model: each command it
    names must take the flag it names, with that value."""
    from ludus.cli import build_parser
    from ludus.cli.common import mapping_flag
    from ludus.core import Message
    from ludus.policies import SamplingParams
    from ludus.policies.tiny import TinyConfig, TinyPolicy

    with pytest.raises(ValueError, match="context") as info:
        TinyPolicy(TinyConfig(max_len=24)).generate([[Message("user", "x" * 30)]], SamplingParams(max_tokens=4))
    named = re.findall(r"`ludus ([a-z-]+) (--[a-z-]+) '([^']*)'`", str(info.value))
    assert {command for command, _, _ in named} == {"train", "eval"}
    for command, flag, value in named:
        args = build_parser().parse_args([command, *(["arithmetic"] if command == "eval" else []), flag, value])
        assert mapping_flag(flag, vars(args)["cfg_tiny" if command == "train" else "model_args"]) == {"max_len": 512}
