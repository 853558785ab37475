"""The algorithms ``algorithm.name`` selects, one class each."""

from __future__ import annotations

from llmgym.algorithms.a2c import A2C
from llmgym.algorithms.grpo import GRPO
from llmgym.algorithms.nlpo import NLPO
from llmgym.algorithms.on_policy import OnPolicyAlgorithm
from llmgym.algorithms.ppo import PPO
from llmgym.algorithms.rebn import ReBN
from llmgym.algorithms.rloo import RLOO
from llmgym.algorithms.trpo import TRPO
from llmgym.algorithms.user_classes import import_class, is_import_path
from llmgym.errors import ConfigError

__all__ = ["ALGORITHMS", "algorithm_class"]

#: ``algorithm.name`` → its class (kept equal to :data:`llmgym.config.ALGORITHM_NAMES`, a test checks it).
ALGORITHMS: dict[str, type[OnPolicyAlgorithm]] = {
    cls.name: cls for cls in (PPO, A2C, GRPO, RLOO, ReBN, NLPO, TRPO)
}


def algorithm_class(name: str) -> type[OnPolicyAlgorithm]:
    """The class of ``algorithm.name``: a registered name, or a user class ``'package.module:ClassName'``.

    A user class implements the algorithm protocol by subclassing
    :class:`~llmgym.algorithms.on_policy.OnPolicyAlgorithm` and defining its
    :meth:`~llmgym.algorithms.on_policy.OnPolicyAlgorithm.objective` and
    :meth:`~llmgym.algorithms.on_policy.OnPolicyAlgorithm.train`.

    Raises:
        ConfigError: An unknown name (the message lists the known ones); a user class that cannot be
            imported, is not an ``OnPolicyAlgorithm`` subclass, or leaves an abstract method undefined.
    """
    if is_import_path(name):
        cls = import_class(name, "algorithm.name", OnPolicyAlgorithm, "llmgym.OnPolicyAlgorithm subclass")  # type: ignore[type-abstract]
        missing = sorted(getattr(cls, "__abstractmethods__", ()))
        if missing:
            raise ConfigError(
                f"algorithm.name={name!r} leaves {', '.join(missing)} undefined; an algorithm defines objective() "
                "(its loss) and train() (its epoch loop on one rollout)."
            )
        return cls
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ConfigError(
            f"algorithm.name={name!r} is not an algorithm; choose one of {sorted(ALGORITHMS)}, or name your own "
            "OnPolicyAlgorithm subclass as 'package.module:ClassName'."
        ) from None
