"""What a config needs installed and registered before it can run: :func:`check_requirements`."""

from __future__ import annotations

from collections.abc import Callable

from llmgym.config import Config
from llmgym.errors import require_installed

__all__ = ["check_requirements"]

#: ``(setting, whether the config uses it, module, extra)`` of each setting that needs an optional package.
_SETTING_EXTRAS: tuple[tuple[str, Callable[[Config], bool], str, str], ...] = (
    ("logging.tensorboard=true", lambda c: c.logging.tensorboard, "tensorboard", "tensorboard"),
    ("model.load_in_4bit=true", lambda c: c.model.load_in_4bit, "bitsandbytes", "quantization"),
    ("model.generation_engine=vllm", lambda c: c.model.generation_engine == "vllm", "vllm", "vllm"),
)


def check_requirements(config: Config) -> None:
    """Check that a config can run: its env id is registered and every optional package it needs is installed.

    Fast (nothing is imported or built): meant to run before a model loads or a run directory exists.

    Args:
        config: The run config.

    Raises:
        ConfigError: If ``env.id`` is not registered (with close matches), or ``env.reward_clip`` is
            over the largest reward the envs accept.
        MissingDependencyError: If the env (with ``env.kwargs``) or a setting needs an optional
            package that is not installed (``model.attn_implementation=flash_attention_2`` included);
            the message names what to install.
    """
    from llmgym.envs.registration import check_env_id
    from llmgym.envs.reward_checks import check_reward_clip
    from llmgym.llm.validation import check_attention_implementation

    check_reward_clip(config.env.reward_clip, "env.reward_clip")
    check_env_id(config.env.id, config.env.kwargs)
    check_attention_implementation(config.model)
    for setting, uses, module, extra in _SETTING_EXTRAS:
        if uses(config):
            require_installed(module, extra, setting)
