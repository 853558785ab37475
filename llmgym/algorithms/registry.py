"""The algorithms ``algorithm.name`` selects, one class each."""

from __future__ import annotations

from llmgym.algorithms.a2c import A2C
from llmgym.algorithms.grpo import GRPO
from llmgym.algorithms.nlpo import NLPO
from llmgym.algorithms.on_policy import OnPolicyAlgorithm
from llmgym.algorithms.ppo import PPO
from llmgym.algorithms.rloo import RLOO
from llmgym.algorithms.trpo import TRPO
from llmgym.errors import ConfigError

__all__ = ["ALGORITHMS", "algorithm_class"]

#: ``algorithm.name`` → its class (kept equal to :data:`llmgym.config.ALGORITHM_NAMES`, a test checks it).
ALGORITHMS: dict[str, type[OnPolicyAlgorithm]] = {cls.name: cls for cls in (PPO, A2C, GRPO, RLOO, NLPO, TRPO)}


def algorithm_class(name: str) -> type[OnPolicyAlgorithm]:
    """The class of ``algorithm.name``.

    Raises:
        ConfigError: An unknown name; the message lists the known ones.
    """
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ConfigError(f"algorithm.name={name!r} is not an algorithm; choose one of {sorted(ALGORITHMS)}.") from None

