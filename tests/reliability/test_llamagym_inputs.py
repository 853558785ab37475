"""LlamaGym compat: bad ``ppo_config_dict`` sizes are refused when the agent is built.

Before, ``batch_size=0`` or ``-3`` was accepted and failed (or trained on empty batches) much
later with a confusing error; string rewards are covered in ``test_rewards.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from llmgym.compat.llamagym import PPOConfig
from llmgym.errors import ConfigError


@pytest.mark.parametrize(
    "key", ["batch_size", "mini_batch_size", "ppo_epochs", "gradient_accumulation_steps"]
)
@pytest.mark.parametrize("value", [0, -3, 2.5, "8", True, None])
def test_ppo_sizes_must_be_positive_integers(key: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=rf"ppo_config_dict\['{key}'\]=.* expected an integer >= 1"):
        PPOConfig.from_dict({key: value})


def test_valid_sizes_still_build() -> None:
    assert PPOConfig.from_dict({"batch_size": 8, "mini_batch_size": 4}).batch_size == 8
