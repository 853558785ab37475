"""Malformed RL4LMs values are ConfigErrors naming their key, from `llmgym convert` and `llmgym train`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from llmgym.cli import main
from llmgym.compat.rl4lms import convert_rl4lms_config
from llmgym.config import load_config
from llmgym.errors import ConfigError
from llmgym.run import load_run_config

CONFIGS = Path(__file__).parent / "rl4lms_configs"
BASE = "synthetic_generate_increasing_numbers_gpt2_ppo.yml"

MALFORMED = [
    ("env.args.max_episode_length", "abc", "an integer"),
    ("env.args.max_episode_length", 2.5, "an integer"),
    ("alg.args.n_steps", float("inf"), "an integer"),
    ("alg.args.n_steps", None, "an integer"),
    ("alg.args.target_kl", None, None),  # null: no target, as in RL4LMs
    ("alg.args.learning_rate", "fast", "a finite number"),
    ("alg.args.learning_rate", float("nan"), "a finite number"),
    ("alg.kl_div.coeff", [0.1], "a finite number"),
    ("env.n_envs", True, "an integer"),
    ("env.args.terminate_on_eos", "yes please", "true or false"),
    ("train_evaluation.metrics", "meteor", "a list of"),
    ("train_evaluation.metrics", ["meteor"], "a mapping"),
    ("train_evaluation.n_iters", "10**100", "an integer"),
    ("datapool.args", "numbers", "a mapping"),
]


def _with(key: str, value):
    raw = yaml.safe_load((CONFIGS / BASE).read_text())
    node = raw
    *parents, leaf = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return raw


@pytest.mark.parametrize(("key", "value", "expected"), MALFORMED)
def test_a_malformed_value_names_its_key(key, value, expected, tiny_model_dir):
    raw = _with(key, value)
    if expected is None:
        convert_rl4lms_config(raw, model_name=str(tiny_model_dir))
        return
    pattern = "RL4LMs config: " + re.escape(key) + r"(\[0\])?=.*expected " + re.escape(expected)
    with pytest.raises(ConfigError, match=pattern):
        convert_rl4lms_config(raw, model_name=str(tiny_model_dir))


@pytest.mark.parametrize(
    ("key", "value", "text"),
    [
        ("env.args.max_episode_length", "abc", "env.args.max_episode_length='abc'"),
        ("alg.args.n_steps", float("inf"), "alg.args.n_steps=inf"),
        ("train_evaluation.metrics", "meteor", "train_evaluation.metrics='meteor'"),
    ],
)
def test_llmgym_convert_and_train_give_the_typed_error(key, value, text, tiny_model_dir, tmp_path, capsys):
    path = tmp_path / "task.yml"
    path.write_text(yaml.safe_dump(_with(key, value)))
    assert main(["convert", str(path), "--model", str(tiny_model_dir)]) == 2
    assert text in capsys.readouterr().err
    with pytest.raises(ConfigError, match="RL4LMs config: " + re.escape(text)):
        load_run_config(str(path), [f"model.name={tiny_model_dir}"])


def test_numbers_written_as_strings_still_convert(tiny_model_dir):
    raw = _with("alg.args.learning_rate", "1e-5")  # PyYAML reads 1e-5 (no dot) as a string
    converted = convert_rl4lms_config(raw, model_name=str(tiny_model_dir))
    assert converted.config["algorithm"]["learning_rate"] == 1e-5


def test_ppos_target_kl_converts_into_the_ppo_section(tiny_model_dir):
    """SB3's ``alg.args.target_kl`` (the epochs' early stop) is ``algorithm.ppo.target_kl``, not a flat key."""
    converted = convert_rl4lms_config(_with("alg.args.target_kl", 0.05), model_name=str(tiny_model_dir))
    assert converted.config["algorithm"]["ppo"]["target_kl"] == 0.05
    assert "target_kl" not in converted.config["algorithm"]
    assert load_config(converted.config).algorithm.ppo.target_kl == 0.05


def test_an_absent_top_k_samples_top_50_as_transformers_generate_does(tiny_model_dir):
    """RL4LMs' rollouts call ``generate(do_sample=True)``: without ``top_k`` it cuts to the config's 50; 0: no cut."""
    absent = convert_rl4lms_config(
        _with("alg.policy.args.generation_kwargs.do_sample", True), model_name=str(tiny_model_dir)
    )
    assert absent.config["agent"]["top_k"] == 50
    none = convert_rl4lms_config(
        _with("alg.policy.args.generation_kwargs.top_k", 0), model_name=str(tiny_model_dir)
    )
    assert none.config["agent"]["top_k"] == 0
    twenty = convert_rl4lms_config(
        _with("alg.policy.args.generation_kwargs.top_k", 20), model_name=str(tiny_model_dir)
    )
    assert twenty.config["agent"]["top_k"] == 20
