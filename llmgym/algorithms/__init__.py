"""RL algorithms for LLM agents: PPO and A2C, their updaters, advantages, losses, rollout storage."""

from llmgym.algorithms.advantages import compute_gae, compute_token_gae, kl_penalized_token_rewards, whiten
from llmgym.algorithms.buffer import RolloutBatch, RolloutBuffer
from llmgym.algorithms.losses import (
    a2c_policy_loss,
    categorical_entropy,
    categorical_log_prob,
    kl_estimate,
    masked_mean,
    pad_candidate_scores,
    ppo_policy_loss,
    value_loss,
)
from llmgym.algorithms.on_policy import A2C, PPO, OnPolicyAlgorithm
from llmgym.algorithms.updaters import A2CUpdater, PolicyGradientUpdater, PPOUpdater
from llmgym.config import AlgorithmConfig

__all__ = [
    "A2C",
    "A2CUpdater",
    "AlgorithmConfig",
    "OnPolicyAlgorithm",
    "PPO",
    "PPOUpdater",
    "PolicyGradientUpdater",
    "RolloutBatch",
    "RolloutBuffer",
    "a2c_policy_loss",
    "categorical_entropy",
    "categorical_log_prob",
    "compute_gae",
    "compute_token_gae",
    "kl_estimate",
    "kl_penalized_token_rewards",
    "masked_mean",
    "pad_candidate_scores",
    "ppo_policy_loss",
    "value_loss",
    "whiten",
]
