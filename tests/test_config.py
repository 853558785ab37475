import dataclasses

import pytest

from llmgym.config import (
    Config,
    ModelConfig,
    config_to_dict,
    iter_field_help,
    load_config,
    save_config,
)
from llmgym.errors import ConfigError


def test_defaults_load_without_file():
    config = load_config()
    assert isinstance(config, Config)
    assert config.model.name == "SmolLM2-135M-Instruct"
    assert config.model.lora is None


def test_yaml_then_overrides_in_order(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("algorithm:\n  learning_rate: 0.001\n  epochs: 2\nenv:\n  num_envs: 8\n")
    config = load_config(path, ["algorithm.learning_rate=3e-4", "model.lora.r=4", "train.seed=7"])
    assert config.algorithm.learning_rate == pytest.approx(3e-4)
    assert config.algorithm.epochs == 2
    assert config.env.num_envs == 8
    assert config.model.lora is not None and config.model.lora.r == 4 and config.model.lora.alpha == 16
    assert config.train.seed == 7


def test_unknown_key_suggests_close_match(tmp_path):
    with pytest.raises(ConfigError, match=r"algorithm\.learnin_rate.*Did you mean 'algorithm\.learning_rate'"):
        load_config(None, ["algorithm.learnin_rate=1e-5"])
    path = tmp_path / "bad.yaml"
    path.write_text("algorthm:\n  epochs: 2\n")
    with pytest.raises(ConfigError, match=r"Did you mean 'algorithm'"):
        load_config(path)


def test_wrong_type_names_key():
    with pytest.raises(ConfigError, match=r"algorithm\.epochs"):
        load_config(None, ["algorithm.epochs=many"])
    with pytest.raises(ConfigError, match=r"env\.num_envs"):
        load_config(None, ["env.num_envs=1.5"])


@pytest.mark.parametrize(
    ("override", "pattern"),
    [
        ("model.dtype=int8", r"model\.dtype='int8'.*float32"),
        ("algorithm.gamma=1.5", r"algorithm\.gamma=1\.5 must lie in \[0, 1\]"),
        ("env.vectorization_mode=threads", r"env\.vectorization_mode"),
        ("algorithm.updater=MyUpdater", r"module:Class|package\.module:ClassName"),
        ("distributed.rl_processes=2", r"rl_processes=2"),
        ("train.total_env_steps=0", r"total_env_steps=0 must be > 0"),
        ("agent.score_normalize=max", r"agent\.score_normalize='max'.*mean"),
    ],
)
def test_out_of_range_values(override, pattern):
    with pytest.raises(ConfigError, match=pattern):
        load_config(None, [override])


def test_override_without_equals_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="section.key=value"):
        load_config(None, ["algorithm.epochs"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "list.yaml"
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(bad)


def test_config_error_is_value_error():
    with pytest.raises(ValueError):
        ModelConfig(dtype="int4")


def test_save_and_reload_round_trip(tmp_path):
    config = load_config(None, ["model.lora.r=2", "train.seed=11", "env.kwargs.foo=bar"])
    path = save_config(config, tmp_path / "run" / "config.yaml")
    again = load_config(path)
    assert config_to_dict(again) == config_to_dict(config)


def test_every_field_has_help():
    rows = iter_field_help()
    keys = [key for key, _, _ in rows]
    assert "algorithm.learning_rate" in keys and "model.lora.r" in keys and "logging.wandb.mode" in keys
    for key, help_text, _ in rows:
        assert help_text.strip(), f"{key} has no help text"

    def walk(cls):
        for f in dataclasses.fields(cls):
            assert f.metadata.get("help"), f"{cls.__name__}.{f.name} has no help"

    from llmgym import config as cfg

    for cls in (cfg.Config, cfg.ModelConfig, cfg.LoRAConfig, cfg.EnvConfig, cfg.AgentConfig,
                cfg.AlgorithmConfig, cfg.TrainConfig, cfg.LoggingConfig, cfg.WandbConfig, cfg.DistributedConfig):
        walk(cls)
