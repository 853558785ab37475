import sys

import pytest

from llmgym.config import load_config
from llmgym.errors import ConfigError, MissingDependencyError
from llmgym.run.requirements import check_requirements


@pytest.mark.parametrize(
    ("module", "overrides", "extra"),
    [
        ("sacrebleu", ["env.id=llmgym/TextGen-v0", "env.kwargs.reward=bleu"], "metrics"),
        ("rouge_score", ["env.id=llmgym/TextGen-v0", "env.kwargs.reward=rouge"], "metrics"),
        ("tensorboard", ["logging.tensorboard=true"], "tensorboard"),
        ("bitsandbytes", ["model.load_in_4bit=true"], "quantization"),
        ("vllm", ["model.generation_engine=vllm"], "vllm"),
    ],
)
def test_check_requirements_names_the_missing_extra(monkeypatch, module, overrides, extra):
    monkeypatch.setitem(sys.modules, module, None)  # what an install without the extra looks like
    with pytest.raises(MissingDependencyError, match=rf"'{module}'.*pip install 'llmgym\[{extra}\]'"):
        check_requirements(load_config(None, overrides))
    check_requirements(load_config(None, ["env.id=llmgym/TextGen-v0"]))  # the default reward needs nothing


def test_check_requirements_rejects_an_unknown_env_id():
    with pytest.raises(ConfigError, match="llmgym envs"):
        check_requirements(load_config(None, ["env.id=llmgym/NoSuchEnv-v0"]))


def test_reward_clip_out_of_the_envs_range_is_refused_before_anything_runs():
    # the schema checks the sign; the bound is the envs' rule (config.py does not import envs/)
    with pytest.raises(ConfigError, match=r"env\.reward_clip=0"):
        load_config(None, ["env.reward_clip=0"])
    config = load_config(None, ["env.reward_clip=1e12"])
    with pytest.raises(ConfigError, match=r"env\.reward_clip=1000000000000.0 is invalid.*\(0, 1e\+09\]"):
        check_requirements(config)


def test_flash_attention_without_its_package_names_the_fix_before_anything_loads(monkeypatch):
    import importlib.util

    from llmgym.config import ModelConfig
    from llmgym.llm.models import load_model

    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "flash_attn" else found(name, *a)
    )
    config = load_config(None, ["model.attn_implementation=flash_attention_2"])
    fix = r"model.attn_implementation=flash_attention_2 needs the package 'flash_attn'.*pip install flash-attn.*sdpa"
    with pytest.raises(MissingDependencyError, match=fix):
        check_requirements(config)
    with pytest.raises(MissingDependencyError, match=fix):  # raised before the weights are looked for
        load_model(ModelConfig(name="/no/such/model", attn_implementation="flash_attention_2"))
