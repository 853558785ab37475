"""A run's config file: llmgym's schema knows no RL4LMs; the run level converts an RL4LMs task file."""

from pathlib import Path

import pytest

from llmgym.config import load_config
from llmgym.errors import ConfigError
from llmgym.run import load_run_config

RL4LMS = Path(__file__).resolve().parents[1] / "compat" / "rl4lms_configs"


def test_load_config_reads_only_llmgym_configs_and_names_the_converting_loader():
    path = str(RL4LMS / "synthetic_generate_increasing_numbers_gpt2_ppo.yml")
    with pytest.raises(
        ConfigError, match=r"Unknown config key 'tokenizer'.*RL4LMs task file\?.*load_run_config"
    ):
        load_config(path)


def test_load_run_config_converts_an_rl4lms_file_and_loads_an_llmgym_one_as_load_config_does(
    tiny_model_dir, tmp_path
):
    path = str(RL4LMS / "synthetic_generate_increasing_numbers_gpt2_ppo.yml")
    config = load_run_config(path, [f"model.name={tiny_model_dir}", "train.seed=3"])
    assert (config.algorithm.name, config.model.name, config.train.seed) == ("ppo", str(tiny_model_dir), 3)
    assert load_run_config("quickstart", ["train.seed=2"]) == load_config("quickstart", ["train.seed=2"])
    assert load_run_config(None, ["train.seed=2"]) == load_config(None, ["train.seed=2"])
    (tmp_path / "bad.yaml").write_text("model:\n  nme: x\n")
    with pytest.raises(ConfigError, match=r"Unknown config key 'model.nme' in config file '.*bad.yaml'"):
        load_run_config(str(tmp_path / "bad.yaml"))
