"""Lamorel's YAML schema (``lamorel_args`` and ``rl_script_args``) mapped onto llmgym's model config.

Lamorel configures its LLM servers with a Hydra file whose ``lamorel_args`` section holds
``distributed_setup_args``, ``accelerate_args``, ``llm_args`` (with ``parallelism``) and
``updater_args``; ``rl_script_args`` belongs to the user's script. This module validates such a
section (a plain mapping or an OmegaConf ``DictConfig``), rejects what the compatibility layer
cannot honour with a :class:`~llmgym.errors.ConfigError` naming the key, and turns the rest into a
:class:`~llmgym.config.ModelConfig` and, for several LLM servers, a
:class:`~llmgym.config.DistributedConfig` (the servers become Ray actors):

* ``n_llm_processes: N`` -> ``llm_processes=N`` (one Ray server each; the RL script is the driver);
* ``num_machines: M > 1`` -> ``ray_address="auto"``: the machines form a Ray cluster (``ray start
  --head`` on the one that runs the script, ``ray start --address HEAD:6379`` on the others) and
  Ray places the servers; the script runs once, so ``machine_rank`` must be 0 (or left unset);
* ``model_parallelism_size: P > 1`` -> ``model_parallelism_size=P`` (P GPUs per server);
* ``use_gpu: false`` -> ``gpus_per_server=0``; ``gloo_timeout`` -> ``timeout_s``.

With one server on one machine and no model parallelism the LLM runs in the RL process.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmgym.config import DistributedConfig, ModelConfig
from llmgym.errors import ConfigError

__all__ = ["LamorelSettings", "load_lamorel_config", "parse_lamorel_args", "to_plain_dict"]

#: Keys of ``lamorel_args`` and of its sub-sections; ``None`` marks a leaf, ``...`` a free-form mapping.
_SCHEMA: dict[str, Any] = {
    "log_level": None,
    "allow_subgraph_use_whith_gradient": None,
    "gloo_timeout": None,
    "distributed_setup_args": {"n_rl_processes": None, "n_llm_processes": None},
    "accelerate_args": {
        "config_file": None,
        "machine_rank": None,
        "num_machines": None,
        "main_process_ip": None,
        "main_process_port": None,
    },
    "llm_args": {
        "model_type": None,
        "model_path": None,
        "pretrained": None,
        "minibatch_size": None,
        "pre_encode_inputs": None,
        "load_in_4bit": None,
        "seed": None,
        "parallelism": {
            "use_gpu": None,
            "model_parallelism_size": None,
            "synchronize_gpus_after_scoring": None,
            "empty_cuda_cache_after_scoring": None,
        },
    },
    "updater_args": ...,
}

_TOP_LEVEL = ("lamorel_args", "rl_script_args", "hydra")


@dataclass
class LamorelSettings:
    """What the compatibility layer takes from a ``lamorel_args`` section.

    Attributes:
        model: The llmgym model config (``model_path``, ``pretrained``, ``minibatch_size``,
            ``load_in_4bit``, ``use_gpu``); the model type is detected from the model.
        model_type: ``"causal"`` or ``"seq2seq"`` as Lamorel's ``llm_args.model_type`` says
            (checked against the loaded model by the ``Caller``).
        minibatch_size: Rows (context-candidate pairs) per forward pass of custom module functions.
        pre_encode_inputs: Encode each context once and give custom module functions rows that
            hold only the candidates (``llm_args.pre_encode_inputs``).
        log_level: Level of the ``lamorel_logger`` logger.
        synchronize_gpus_after_scoring: Call ``torch.cuda.synchronize()`` after each forward.
        empty_cuda_cache_after_scoring: Call ``torch.cuda.empty_cache()`` after each forward.
        updater_args: The free-form ``updater_args`` mapping (empty when absent).
        seed: Seed of Python's, NumPy's and torch's random generators, set when the ``Caller`` is
            built and on every LLM server before it builds its modules (``llm_args.seed``; 42 when
            absent, as in Lamorel).
        distributed: The Ray servers (``n_llm_processes``, ``num_machines``, parallelism), or
            ``None`` for the in-process LLM.
        find_unused_parameters: ``allow_subgraph_use_whith_gradient``: the servers' gradient
            all-reduce (DistributedDataParallel, as in Lamorel) accepts parameters an update leaves unused.
    """

    model: ModelConfig
    model_type: str
    minibatch_size: int
    pre_encode_inputs: bool = True
    log_level: int = logging.INFO
    synchronize_gpus_after_scoring: bool = False
    empty_cuda_cache_after_scoring: bool = False
    updater_args: dict[str, Any] = field(default_factory=dict)
    seed: int = 42
    distributed: DistributedConfig | None = None
    find_unused_parameters: bool = False


def to_plain_dict(config: Any, name: str = "config") -> dict[str, Any]:
    """Turn a mapping or an OmegaConf ``DictConfig`` into a plain nested ``dict``.

    Args:
        config: A mapping, a ``DictConfig``, or ``None`` (an empty section).
        name: How the config is named in error messages.

    Returns:
        A plain ``dict`` (interpolations resolved; ``???`` values kept as strings).

    Raises:
        ConfigError: When ``config`` is not a mapping.
    """
    if config is None:
        return {}
    from omegaconf import DictConfig, OmegaConf

    if isinstance(config, DictConfig):
        plain = OmegaConf.to_container(config, resolve=False)
        return {str(k): v for k, v in plain.items()} if isinstance(plain, dict) else {}
    if isinstance(config, Mapping):
        return {
            str(k): to_plain_dict(v, f"{name}.{k}") if isinstance(v, (Mapping, DictConfig)) else v
            for k, v in config.items()
        }
    raise ConfigError(
        f"{name} is a {type(config).__name__}; expected a mapping (dict) or an OmegaConf DictConfig such as "
        "Hydra's config_args.lamorel_args."
    )


def _check_keys(section: Mapping[str, Any], schema: Mapping[str, Any], prefix: str) -> None:
    for key, value in section.items():
        if key not in schema:
            raise ConfigError(
                f"{prefix}.{key} is not supported by llmgym.compat.lamorel; supported keys of {prefix}: "
                f"{sorted(schema)}. Remove it, or use llmgym's own API (llmgym.LLM, llmgym.ModelConfig) for this setting."
            )
        sub = schema[key]
        if isinstance(sub, dict):
            if value is None:
                continue
            if not isinstance(value, Mapping):
                raise ConfigError(f"{prefix}.{key}={value!r} must be a mapping with keys {sorted(sub)}.")
            _check_keys(value, sub, f"{prefix}.{key}")
        elif sub is ... and value is not None and not isinstance(value, Mapping):
            raise ConfigError(f"{prefix}.{key}={value!r} must be a mapping of keyword arguments.")


def _int(section: Mapping[str, Any], key: str, prefix: str, default: int) -> int:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{prefix}.{key}={value!r} must be a positive integer.")
    return value


def _bool(section: Mapping[str, Any], key: str, prefix: str, default: bool) -> bool:
    value = section.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{prefix}.{key}={value!r} must be true or false.")
    return value


def parse_lamorel_args(config: Any) -> LamorelSettings:
    """Validate a ``lamorel_args`` section and map it onto llmgym settings.

    Args:
        config: Lamorel's ``lamorel_args`` section, or a whole Lamorel config holding one, as a
            mapping or an OmegaConf ``DictConfig``.

    Returns:
        The settings the compatibility layer runs with.

    Raises:
        ConfigError: On an unknown key, a wrong type, a missing ``llm_args.model_path``,
            ``n_rl_processes`` > 1 or a ``machine_rank`` other than 0.
    """
    args = to_plain_dict(config, "lamorel_args")
    if "lamorel_args" in args:
        args = to_plain_dict(args["lamorel_args"], "lamorel_args")
    _check_keys(args, _SCHEMA, "lamorel_args")
    prefix = "lamorel_args"
    level_name = str(args.get("log_level", "info"))
    level = logging.getLevelName(level_name.upper())
    if not isinstance(level, int):
        raise ConfigError(f"{prefix}.log_level={level_name!r} must be one of debug, info, warning, error.")
    dist = args.get("distributed_setup_args") or {}
    if _int(dist, "n_rl_processes", f"{prefix}.distributed_setup_args", 1) != 1:
        raise ConfigError(
            f"{prefix}.distributed_setup_args.n_rl_processes={dist['n_rl_processes']} is not supported: llmgym runs "
            "one RL process, which drives every LLM server. Set it to 1."
        )
    servers = _int(dist, "n_llm_processes", f"{prefix}.distributed_setup_args", 1)
    accelerate = args.get("accelerate_args") or {}
    machines = _int(accelerate, "num_machines", f"{prefix}.accelerate_args", 1)
    rank = accelerate.get("machine_rank")
    if isinstance(rank, int) and not isinstance(rank, bool) and rank != 0:
        raise ConfigError(
            f"{prefix}.accelerate_args.machine_rank={rank}: with llmgym the RL script runs once, on the machine of "
            "the Ray head (machine_rank 0); on the other machines run `ray start --address HEAD_IP:6379` instead."
        )
    llm = args.get("llm_args")
    if not isinstance(llm, Mapping) or not llm.get("model_path") or llm.get("model_path") == "???":
        raise ConfigError(
            f"{prefix}.llm_args.model_path is missing; give a local model folder (or the alias "
            "SmolLM2-135M-Instruct), e.g. llm_args: {model_type: causal, model_path: /path/to/model}."
        )
    model_type = llm.get("model_type", "causal")
    if model_type not in ("causal", "seq2seq"):
        raise ConfigError(f"{prefix}.llm_args.model_type={model_type!r} must be 'causal' or 'seq2seq'.")
    lp = f"{prefix}.llm_args"
    minibatch_size = _int(llm, "minibatch_size", lp, 64)
    parallelism = llm.get("parallelism") or {}
    pp = f"{lp}.parallelism"
    gpus_per_model = _int(parallelism, "model_parallelism_size", pp, 1)
    use_gpu = _bool(parallelism, "use_gpu", pp, True)
    distributed = None
    if servers > 1 or machines > 1 or gpus_per_model > 1:
        distributed = DistributedConfig(
            llm_processes=servers,
            model_parallelism_size=gpus_per_model,
            gpus_per_server=None if use_gpu else 0.0,
            ray_address="auto" if machines > 1 else None,
            timeout_s=float(_int(args, "gloo_timeout", prefix, 60)),
        )
    model = ModelConfig(
        name=str(llm["model_path"]),
        pretrained=_bool(llm, "pretrained", lp, True),
        load_in_4bit=_bool(llm, "load_in_4bit", lp, False),
        forward_batch_size=minibatch_size,
        device="auto" if use_gpu else "cpu",
    )
    return LamorelSettings(
        model=model,
        model_type=model_type,
        minibatch_size=minibatch_size,
        pre_encode_inputs=_bool(llm, "pre_encode_inputs", lp, True),
        log_level=level,
        synchronize_gpus_after_scoring=_bool(parallelism, "synchronize_gpus_after_scoring", pp, False),
        empty_cuda_cache_after_scoring=_bool(parallelism, "empty_cuda_cache_after_scoring", pp, False),
        updater_args=dict(args.get("updater_args") or {}),
        seed=_seed(llm, lp),
        distributed=distributed,
        find_unused_parameters=_bool(args, "allow_subgraph_use_whith_gradient", prefix, False),
    )


def _seed(llm: Mapping[str, Any], prefix: str) -> int:
    """``llm_args.seed``: 42 when absent or null (Lamorel's default), else a non-negative integer."""
    value = llm.get("seed")
    if value is None:
        return 42
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(
            f"{prefix}.seed={value!r} must be a non-negative integer (Lamorel's default is 42)."
        )
    return value


def load_lamorel_config(path: str | Path, overrides: Sequence[str] = ()) -> Any:
    """Load a Lamorel YAML file as an OmegaConf ``DictConfig`` (what ``@hydra.main`` would pass).

    Args:
        path: The YAML file, with ``lamorel_args`` and optionally ``rl_script_args``.
        overrides: Hydra-style ``dotted.key=value`` overrides (``+key=value`` and ``++key=value``
            add or force a key, as in Hydra), e.g. ``["lamorel_args.llm_args.model_path=/models/t5"]``.

    Returns:
        The config; ``config.lamorel_args`` goes to :class:`~llmgym.compat.lamorel.Caller`.

    Raises:
        ConfigError: On a missing file, an unknown top-level key, a malformed override or an
            invalid ``lamorel_args`` section.
    """
    from omegaconf import DictConfig, OmegaConf

    from llmgym.yaml_limits import check_yaml_aliases

    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"Lamorel config path={str(file)!r} does not exist; give the path of a YAML file.")
    text = file.read_text(encoding="utf-8")
    check_yaml_aliases(text, f"Lamorel config {str(file)!r}")
    config = OmegaConf.create(text)
    if not isinstance(config, DictConfig):
        raise ConfigError(f"Lamorel config {str(file)!r} must hold a mapping with a lamorel_args section.")
    for override in overrides:
        if "=" not in override or override.startswith("~"):
            raise ConfigError(
                f"override {override!r} is not supported; write dotted.key=value (or Hydra's +key=value)."
            )
        merged = OmegaConf.merge(config, OmegaConf.from_dotlist([override.lstrip("+")]))
        if isinstance(merged, DictConfig):
            config = merged
    for key in config:
        if key not in _TOP_LEVEL:
            raise ConfigError(
                f"Lamorel config key {key!r} is not supported; top-level keys are {list(_TOP_LEVEL)}."
            )
    parse_lamorel_args(config.get("lamorel_args"))
    return config
