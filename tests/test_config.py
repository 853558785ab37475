import dataclasses
import math
import re
import warnings

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from llmgym.config import (
    Config,
    ModelConfig,
    config_to_dict,
    iter_field_help,
    load_config,
    resolve_config,
    save_config,
    shipped_configs,
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
    with pytest.raises(
        ConfigError, match=r"algorithm\.learnin_rate.*Did you mean 'algorithm\.learning_rate'"
    ):
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
        ("train.keep_checkpoints=0", r"train\.keep_checkpoints=0 must be > 0"),
        ("train.checkpoint_signals=[SIGTERM]", r"checkpoint_signals='SIGTERM'.*SIGUSR1"),
        ("train.resume=auto", r"train\.resume=auto.*train\.run_name=NAME"),
    ],
)
def test_out_of_range_values(override, pattern):
    with pytest.raises(ConfigError, match=pattern):
        load_config(None, [override])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.lora.dropout=2", "model.lora.dropout=2.0 must lie in [0, 1]."),
        (
            "model.vllm.gpu_memory_utilization=1.5",
            "model.vllm.gpu_memory_utilization=1.5 must lie in (0, 1] (a fraction of the GPU's memory), or be null "
            "to compute it from the memory free when vLLM starts.",
        ),
        ("model.forward_batch_tokens=-1", "model.forward_batch_tokens=-1 must be >= 0."),
        (
            "model.attn_implementation=flash",
            "model.attn_implementation='flash' is not allowed; expected one of "
            "['sdpa', 'eager', 'flash_attention_2'].",
        ),
        ("distributed.cpus_per_server=0", "distributed.cpus_per_server=0 must be > 0."),
        (
            "distributed.sharding=zero",
            "distributed.sharding='zero' is not allowed; expected one of ['none', 'fsdp'].",
        ),
        ("env.max_episode_steps=0", "env.max_episode_steps=0 must be > 0."),
        (
            "algorithm.kl.controller=pid",
            "algorithm.kl.controller='pid' is not allowed; expected one of ['fixed', 'adaptive'].",
        ),
        ("algorithm.kl.coef=-1", "algorithm.kl.coef=-1.0 must be >= 0."),
        ("algorithm.ppo.value_clip_range=0", "algorithm.ppo.value_clip_range=0.0 must be > 0."),
        ("algorithm.trpo.cg_damping=-1", "algorithm.trpo.cg_damping=-1.0 must be >= 0."),
        (
            "algorithm.trpo.line_search_shrink=1",
            "algorithm.trpo.line_search_shrink=1.0 must lie in (0, 1), e.g. 0.5 or 0.8.",
        ),
        ("algorithm.nlpo.mask_top_p=0", "algorithm.nlpo.mask_top_p=0.0 must lie in (0, 1]; NLPO uses 0.9."),
        ("algorithm.nlpo.min_tokens_to_keep=0", "algorithm.nlpo.min_tokens_to_keep=0 must be > 0."),
        ("algorithm.entropy_coef=-0.5", "algorithm.entropy_coef=-0.5 must be >= 0."),
        ("algorithm.gae_lambda=-0.5", "algorithm.gae_lambda=-0.5 must lie in [0, 1]."),
        ("train.eval_episodes=-1", "train.eval_episodes=-1 must be >= 0."),
        ("train.eval_max_samples=0", "train.eval_max_samples=0 must be > 0."),
        ("logging.record_episodes=-1", "logging.record_episodes=-1 must be >= 0."),
        (
            "logging.wandb.mode=cloud",
            "logging.wandb.mode='cloud' is not allowed; expected one of ['disabled', 'offline', 'online'].",
        ),
    ],
)
def test_each_sections_range_and_choice_messages(override, message):
    with pytest.raises(ConfigError) as caught:
        load_config(None, [override])
    assert str(caught.value) == message


def test_override_without_equals_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="section.key=value"):
        load_config(None, ["algorithm.epochs"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "list.yaml"
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(bad)


def test_a_shipped_config_loads_by_name_with_or_without_yaml(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # names resolve from the package, not from the working directory
    by_file = load_config(str(shipped_configs()["gotoredball"]), ["train.seed=3"])
    assert config_to_dict(load_config("gotoredball", ["train.seed=3"])) == config_to_dict(by_file)
    assert config_to_dict(load_config("gotoredball.yaml", ["train.seed=3"])) == config_to_dict(by_file)
    assert by_file.env.id == "llmgym/BabyAI-Text-GoToRedBall-v0"


def test_a_file_that_exists_wins_over_a_shipped_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quickstart.yaml").write_text("train:\n  seed: 77\n")
    assert load_config("quickstart.yaml").train.seed == 77
    assert load_config("quickstart").train.seed != 77  # no file named quickstart: the shipped config


def test_an_unknown_config_name_lists_the_shipped_ones():
    with pytest.raises(
        ConfigError, match=r"not the name of a shipped config\. Did you mean 'quickstart'\?"
    ) as info:
        resolve_config("quickstrat")
    assert all(name in str(info.value) for name in shipped_configs()) and "llmgym config list" in str(
        info.value
    )
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_config("configs/quickstart.yaml")  # a path (the old layout), not a bare name


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

    for cls in (
        cfg.Config,
        cfg.ModelConfig,
        cfg.LoRAConfig,
        cfg.EnvConfig,
        cfg.AgentConfig,
        cfg.AlgorithmConfig,
        cfg.TrainConfig,
        cfg.LoggingConfig,
        cfg.WandbConfig,
        cfg.DistributedConfig,
    ):
        walk(cls)


def _numeric_fields():
    """``(section class, field name)`` of every int or float field (optional ones included)."""
    import typing

    from llmgym import config as cfg

    rows = []
    for cls in (
        cfg.ModelConfig,
        cfg.LoRAConfig,
        cfg.DistributedConfig,
        cfg.EnvConfig,
        cfg.AgentConfig,
        cfg.AlgorithmConfig,
        cfg.TrainConfig,
        cfg.LoggingConfig,
    ):
        for name, hint in typing.get_type_hints(cls).items():
            if hint in (int, float, typing.Optional[int], typing.Optional[float]):
                rows.append((cls, name))
    return rows


NUMERIC_FIELDS = _numeric_fields()


@pytest.mark.parametrize(
    ("cls", "name"), NUMERIC_FIELDS, ids=[f"{c.__name__}.{n}" for c, n in NUMERIC_FIELDS]
)
def test_every_numeric_field_refuses_nan_inf_and_strings(cls, name):
    for bad in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(ConfigError, match=rf"{name}=.*(finite number \(not nan or inf\)|an integer)"):
            cls(**{name: bad})
    with pytest.raises(ConfigError, match=rf"{name}='fast' is a str; expected .*Fix: set .*{name}"):
        cls(**{name: "fast"})
    with pytest.raises(ConfigError, match=rf"{name}=True is a bool"):
        cls(**{name: True})


def test_nan_learning_rate_is_refused_by_load_config_and_direct_construction():
    from llmgym.config import AlgorithmConfig

    assert len(NUMERIC_FIELDS) > 30
    with pytest.raises(ConfigError, match=r"algorithm\.learning_rate=nan .*finite"):
        load_config(None, ["algorithm.learning_rate=nan"])
    with pytest.raises(ConfigError, match=r"distributed\.timeout_s=inf"):
        load_config(None, ["distributed.timeout_s=inf"])
    with pytest.raises(ConfigError, match=r"algorithm\.learning_rate='fast'"):
        AlgorithmConfig(learning_rate="fast")
    assert AlgorithmConfig(learning_rate=1).learning_rate == 1.0 and isinstance(
        AlgorithmConfig(epochs=2).epochs, int
    )


@given(value=st.floats(allow_nan=True, allow_infinity=True))
def test_float_fields_accept_exactly_the_finite_in_range_values(value):
    from llmgym.config import AgentConfig, AlgorithmConfig, PPOSection

    ok = math.isfinite(value) and value > 0
    for build in (
        lambda: AlgorithmConfig(learning_rate=value),
        lambda: AgentConfig(temperature=value),
        lambda: AlgorithmConfig(ppo=PPOSection(clip_range=value)),
        lambda: AlgorithmConfig(ppo=PPOSection(target_kl=value)),
    ):
        if ok:
            build()
        else:
            with pytest.raises(ConfigError):
                build()


def test_wrong_types_in_lists_sections_and_flags():
    from llmgym.config import AgentConfig, EnvConfig, LoggingConfig, LoRAConfig

    with pytest.raises(ConfigError, match=r"model\.lora\.layers\[1\]='x' is a str; expected an integer"):
        LoRAConfig(layers=[-1, "x"])
    with pytest.raises(ConfigError, match=r"Unknown config key 'model\.lora\.rank'"):
        ModelConfig(lora={"rank": 4})
    assert ModelConfig(lora={"r": 4}).lora == LoRAConfig(r=4)
    with pytest.raises(ConfigError, match=r"logging\.wandb=3 is a int"):
        LoggingConfig(wandb=3)
    with pytest.raises(ConfigError, match=r"agent\.use_chat_template='yes' is a str; expected true or false"):
        AgentConfig(use_chat_template="yes")
    with pytest.raises(ConfigError, match=r"env\.kwargs=\[1\] is a list; expected a mapping"):
        EnvConfig(kwargs=[1])
    with pytest.raises(ConfigError, match=r"model\.name=3 is a int; expected a string"):
        ModelConfig(name=3)


def test_a_renamed_key_still_loads_with_a_future_warning(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text("model:\n  minibatch_size: 12\n")
    with pytest.warns(FutureWarning, match="model.minibatch_size .* is renamed model.forward_batch_size"):
        assert load_config(path).model.forward_batch_size == 12
    with pytest.warns(FutureWarning, match="override 'model.minibatch_size=7'"):
        assert load_config(None, ["model.minibatch_size=7"]).model.forward_batch_size == 7
    assert load_config(None, ["algorithm.minibatch_size=7"]).algorithm.minibatch_size == 7  # not renamed


def test_the_flat_algorithm_keys_load_into_their_sections_with_a_future_warning(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text("algorithm:\n  name: trpo\n  max_kl: 0.05\n  group_size: 6\n  trpo:\n    cg_steps: 3\n")
    with pytest.warns(FutureWarning, match="algorithm.max_kl .* is renamed algorithm.trpo.max_kl"):
        algorithm = load_config(path, ["algorithm.clip_range=0.3", "algorithm.mask_top_p=0.5"]).algorithm
    assert (algorithm.trpo.max_kl, algorithm.trpo.cg_steps, algorithm.group.size) == (0.05, 3, 6)
    assert (algorithm.ppo.clip_range, algorithm.nlpo.mask_top_p) == (0.3, 0.5)
    with pytest.raises(ConfigError, match="algorithm.trpo.max_kl=0"):
        load_config(None, ["algorithm.trpo.max_kl=0"])


def test_the_flat_target_kl_loads_into_the_ppo_section_with_a_future_warning(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text("algorithm:\n  target_kl: 0.05\n")
    expected = load_config(None, ["algorithm.ppo.target_kl=0.05"])
    with pytest.warns(
        FutureWarning,
        match=r"algorithm\.target_kl \(in config file .*\) is renamed algorithm\.ppo\.target_kl",
    ):
        assert load_config(path) == expected
    with pytest.warns(
        FutureWarning, match=r"algorithm\.target_kl \(in override .*\) is renamed algorithm\.ppo\.target_kl"
    ):
        assert load_config(None, ["algorithm.target_kl=0.05"]) == expected
    with pytest.warns(FutureWarning):  # both names with the same value: one setting
        assert load_config(None, ["algorithm.target_kl=0.05", "algorithm.ppo.target_kl=0.05"]) == expected
    with (
        pytest.raises(ConfigError, match=r"algorithm\.ppo\.target_kl=0\.0 must be > 0"),
        pytest.warns(FutureWarning),
    ):
        load_config(None, ["algorithm.target_kl=0"])  # the old key gets the new key's range check


def test_the_new_target_kl_key_works_in_yaml_and_overrides(tmp_path):
    path = tmp_path / "new.yaml"
    path.write_text("algorithm:\n  ppo:\n    target_kl: 0.05\n")
    assert load_config(path).algorithm.ppo.target_kl == 0.05
    assert load_config(path, ["algorithm.ppo.target_kl=0.2"]).algorithm.ppo.target_kl == 0.2
    assert load_config(path, ["algorithm.ppo.target_kl=null"]).algorithm.ppo.target_kl is None
    assert load_config(None).algorithm.ppo.target_kl is None
    with pytest.raises(ConfigError, match=r"algorithm\.ppo\.target_kl=0\.0 must be > 0"):
        load_config(None, ["algorithm.ppo.target_kl=0"])


@pytest.mark.parametrize(
    ("yaml_text", "overrides", "message"),
    [
        (
            "algorithm:\n  target_kl: 0.05\n  ppo:\n    target_kl: 0.1\n",
            [],
            r"algorithm\.target_kl=0\.05 and algorithm\.ppo\.target_kl=0\.1 are both set \(in config file '.*'\), "
            r"but algorithm\.target_kl is the old name of algorithm\.ppo\.target_kl\. Fix: keep only algorithm\.ppo\.target_kl\.",
        ),
        (
            "",
            ["algorithm.ppo.target_kl=0.1", "algorithm.target_kl=0.05"],
            r"algorithm\.target_kl=0\.05 and algorithm\.ppo\.target_kl=0\.1 are both set \(by override "
            r"'algorithm\.target_kl=0\.05' and override 'algorithm\.ppo\.target_kl=0\.1'\)",
        ),
        (
            "algorithm:\n  clip_range: 0.3\n  ppo:\n    clip_range: 0.1\n",
            [],
            r"algorithm\.clip_range=0\.3 and algorithm\.ppo\.clip_range=0\.1 are both set",
        ),
        (
            "algorithm:\n  target_kl: 0.05\n  ppo: 3\n",
            [],
            r"algorithm\.ppo=3 \(in config file '.*'\) is not a mapping; algorithm\.ppo holds target_kl\.",
        ),
    ],
)
def test_a_renamed_key_set_under_both_names_with_different_values_is_refused(
    tmp_path, yaml_text, overrides, message
):
    path = tmp_path / "both.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError, match=message), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the renamed key's own warning may come first
        load_config(path, overrides)


def test_a_run_saved_with_the_flat_target_kl_loads_and_resumes(tmp_path):
    """A run folder written before the move (``algorithm.target_kl`` beside ``algorithm.ppo``) still loads and resumes."""
    from llmgym.checkpoint import check_resume_config, load_checkpoint_config

    current = load_config(None, ["algorithm.ppo.target_kl=0.02"])
    saved = config_to_dict(current)
    saved["algorithm"]["target_kl"] = saved["algorithm"]["ppo"].pop(
        "target_kl"
    )  # as the old version saved it
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    with pytest.warns(FutureWarning, match=r"algorithm\.target_kl .* is renamed algorithm\.ppo\.target_kl"):
        assert load_config(tmp_path / "config.yaml") == current  # llmgym eval RUN_DIR reads it so
    with pytest.warns(FutureWarning, match=r"algorithm\.target_kl"):
        renamed = load_checkpoint_config(tmp_path)
    assert renamed == config_to_dict(current)
    assert check_resume_config(renamed, config_to_dict(current), tmp_path) == []


@pytest.mark.parametrize("name", ["babyai_ppo", "babyai_ppo_lora"])
def test_the_glam_configs_train_glams_policy(name):
    """Lamorel's PPO examples (GLAM) sample from the softmax over the LLM's log-probs: no action head."""
    config = load_config(name)
    assert config.agent.type == "scoring"
    assert config.agent.action_head is False


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"backend": "mpi"}, r"distributed.backend='mpi' is not allowed; expected one of \['ray'\]"),
        ({"backend": "spawn"}, r"distributed.backend='spawn' was removed .* set distributed.backend=ray"),
        ({"call_timeout_s": 0}, r"distributed.call_timeout_s=0.0 must be > 0"),
        (
            {"gpus_per_server": 0.5, "model_parallelism_size": 2},
            r"gpus_per_server=0.5 does not fit model_parallelism_size=2",
        ),
        ({"gpus_per_server": 3.0, "model_parallelism_size": 2}, r"gpus_per_server=3.0 does not fit"),
        ({"gpus_per_server": -1.0}, r"gpus_per_server=-1.0 does not fit"),
        ({"cpus_per_server": 0}, r"distributed.cpus_per_server=0 must be > 0"),
    ],
)
def test_distributed_ray_settings_are_checked(overrides, message):
    from llmgym.config import DistributedConfig

    with pytest.raises(ConfigError, match=message):
        DistributedConfig(**overrides)
    for fits in (
        {"gpus_per_server": 0.25},
        {"gpus_per_server": 2.0, "model_parallelism_size": 2},
        {"gpus_per_server": 0.0},
    ):
        assert DistributedConfig(**fits).gpus_per_server == fits["gpus_per_server"]


def test_sharding_needs_several_servers_and_names_its_choices():
    from llmgym.config import DistributedConfig

    with pytest.raises(ConfigError, match=r"distributed.sharding='zero3' is not allowed; expected one of"):
        DistributedConfig(sharding="zero3")
    with pytest.raises(
        ConfigError, match=r"sharding=fsdp .* llm_processes=1 .* set distributed.llm_processes to 2"
    ):
        DistributedConfig(sharding="fsdp")
    with pytest.raises(ConfigError, match=r"model_parallelism_size=2: .* with model_parallelism_size=1"):
        DistributedConfig(sharding="fsdp", llm_processes=2, model_parallelism_size=2)
    assert DistributedConfig(sharding="fsdp", llm_processes=2).sharding == "fsdp"


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("model.generation_engine=vllm", "model.generation_engine=vllm"),
        ("model.dtype=float16", "model.dtype=float16"),
        ("model.load_in_4bit=true", "model.load_in_4bit"),
        ("algorithm.name=trpo", "algorithm.name=trpo"),
    ],
)
def test_sharding_refuses_what_sharded_servers_cannot_run(override, named):
    sharded = ["distributed.llm_processes=2", "distributed.sharding=fsdp"]
    with pytest.raises(
        ConfigError, match=rf"sharding=fsdp cannot run with {re.escape(named)}.* distributed.sharding=none"
    ):
        load_config("quickstart", [*sharded, override])
    assert load_config("quickstart", [override, "distributed.llm_processes=2"]).distributed.sharding == "none"


def test_make_backend_refuses_a_sharded_vllm_engine_before_starting_ray():
    from llmgym.config import DistributedConfig, ModelConfig
    from llmgym.llm.distributed.backend import make_backend

    with pytest.raises(ConfigError, match=r"sharding=fsdp cannot run with model.generation_engine=vllm"):
        make_backend(
            ModelConfig(name="tiny", generation_engine="vllm"),
            distributed=DistributedConfig(llm_processes=2, sharding="fsdp"),
        )


@pytest.mark.parametrize("key", ["nnodes", "node_rank", "master_addr", "master_port"])
def test_the_removed_launchers_keys_name_what_replaces_them(key):
    with pytest.raises(
        ConfigError,
        match=rf"Unknown config key 'distributed.{key}'.* removed with `llmgym launch`.*ray_address",
    ):
        load_config("quickstart", [f"distributed.{key}=1"])


@pytest.mark.parametrize("value", ["-1", "100000000000000000000", "4294967296"])
@pytest.mark.parametrize("key", ["train.seed", "model.seed"])
def test_a_seed_out_of_range_is_refused_by_the_config_check(key, value):
    with pytest.raises(ConfigError, match=rf"{key}=.*\[0, 2147483647\].*Fix: set {key}"):
        load_config("quickstart", [f"{key}={value}"])


def test_a_float_seed_is_refused_as_not_an_integer():
    with pytest.raises(ConfigError, match="train.seed"):
        load_config("quickstart", ["train.seed=1e20"])


def test_the_largest_seed_is_accepted():
    assert load_config("quickstart", ["train.seed=2147483647"]).train.seed == 2**31 - 1


@pytest.mark.parametrize(
    ("runtime_env", "message"),
    [
        ({"pip": ["numpy"]}, r"distributed.runtime_env.pip is not supported: only env_vars"),
        (
            {"env_vars": ["NCCL_DEBUG"]},
            r"runtime_env.env_vars=\['NCCL_DEBUG'\] is a list; expected a mapping",
        ),
        ({"env_vars": {"NCCL DEBUG": "INFO"}}, r"'NCCL DEBUG' is not an environment variable name"),
        ({"env_vars": {"PYTHONPATH": "/x"}}, r"env_vars.PYTHONPATH may not be set here: llmgym sets it"),
        (
            {"env_vars": {"CUDA_VISIBLE_DEVICES": "0"}},
            r"CUDA_VISIBLE_DEVICES may not be set here: Ray sets it",
        ),
        ({"env_vars": {"NCCL_IB_DISABLE": True}}, r"NCCL_IB_DISABLE=True is a bool; expected a string"),
        ({"env_vars": {"HF_HOME": None}}, r"HF_HOME=None is a NoneType; expected a string"),
    ],
)
def test_distributed_runtime_env_is_checked(runtime_env, message):
    from llmgym.config import DistributedConfig

    with pytest.raises(ConfigError, match=message):
        DistributedConfig(runtime_env=runtime_env)


def test_distributed_runtime_env_takes_env_vars_from_an_override():
    config = load_config(
        "quickstart",
        ["distributed.runtime_env.env_vars.NCCL_IB_DISABLE=1", "distributed.collective_timeout_s=1200"],
    )
    assert config.distributed.runtime_env == {"env_vars": {"NCCL_IB_DISABLE": "1"}}
    assert config.distributed.collective_timeout_s == 1200.0
    assert load_config("quickstart").distributed.runtime_env == {}
