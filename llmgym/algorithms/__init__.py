"""RL algorithms for LLM agents, one class each (PPO, A2C, GRPO, RLOO, ReBN, NLPO, TRPO), with the pieces they share.

Each algorithm's math and loop live in its own module (:mod:`~llmgym.algorithms.ppo`,
:mod:`~llmgym.algorithms.a2c`); :class:`~llmgym.algorithms.updaters.PolicyUpdater` runs any of their
objectives next to the model; :mod:`~llmgym.algorithms.registry` maps ``algorithm.name`` to a class.
"""

from llmgym.agents.distributions import (
    categorical_entropy,
    categorical_log_prob,
    kl_estimate,
    pad_candidate_scores,
)
from llmgym.algorithms.a2c import A2C, A2CObjective, a2c_policy_loss
from llmgym.algorithms.advantages import compute_gae, whiten
from llmgym.algorithms.batch import PolicyOutputs, SampleTargets, UpdateBatch
from llmgym.algorithms.buffer import RolloutBatch, RolloutBuffer
from llmgym.algorithms.grpo import GRPO, grpo_advantages
from llmgym.algorithms.losses import masked_mean, value_loss
from llmgym.algorithms.nlpo import NLPO
from llmgym.algorithms.on_policy import OnPolicyAlgorithm
from llmgym.algorithms.ppo import PPO, PPOObjective, ppo_policy_loss
from llmgym.algorithms.protocols import (
    MaskedPolicyBackend,
    NaturalGradientObjective,
    Objective,
    PolicyBackend,
)
from llmgym.algorithms.rebn import ReBN, return_batch_normalization, turn_returns
from llmgym.algorithms.registry import ALGORITHMS, algorithm_class
from llmgym.algorithms.rloo import RLOO, rloo_advantages
from llmgym.algorithms.trpo import TRPO, TRPOObjective, conjugate_gradient, line_search, trpo_step_size
from llmgym.algorithms.updaters import PolicyUpdater, UpdateContext
from llmgym.config import AlgorithmConfig

__all__ = [
    "A2C",
    "A2CObjective",
    "ALGORITHMS",
    "AlgorithmConfig",
    "GRPO",
    "MaskedPolicyBackend",
    "NLPO",
    "NaturalGradientObjective",
    "Objective",
    "OnPolicyAlgorithm",
    "PPO",
    "PPOObjective",
    "PolicyBackend",
    "PolicyOutputs",
    "PolicyUpdater",
    "RLOO",
    "ReBN",
    "RolloutBatch",
    "RolloutBuffer",
    "SampleTargets",
    "TRPO",
    "TRPOObjective",
    "UpdateBatch",
    "UpdateContext",
    "a2c_policy_loss",
    "algorithm_class",
    "categorical_entropy",
    "categorical_log_prob",
    "compute_gae",
    "conjugate_gradient",
    "grpo_advantages",
    "kl_estimate",
    "line_search",
    "masked_mean",
    "pad_candidate_scores",
    "ppo_policy_loss",
    "return_batch_normalization",
    "rloo_advantages",
    "trpo_step_size",
    "turn_returns",
    "value_loss",
    "whiten",
]
