"""Configuration errors name the field; the CLI turns user errors into one line and exit code 2."""

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
