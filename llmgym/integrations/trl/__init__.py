"""llmgym and TRL, both ways (docs/trl.md).

- :mod:`~llmgym.integrations.trl.sft`: a supervised warm start with TRL's ``SFTTrainer`` (T5/BART: transformers' ``Seq2SeqTrainer``) on a
  datapool's references (``llmgym sft``), written as a model folder an RL run starts from.
- :mod:`~llmgym.integrations.trl.environment`: llmgym envs as ``GRPOTrainer(environment_factory=...)``
  environments (the env is a tool the model calls).
- :mod:`~llmgym.integrations.trl.rollout`: llmgym envs through ``GRPOTrainer(rollout_func=...)``,
  token ids in and out, for models without a tool-calling chat template.

The submodules import TRL when used, not when this package is imported.
"""

from llmgym.integrations.trl.environment import EnvFactory, ToolEnvironment, environment_dataset
from llmgym.integrations.trl.rollout import EnvRollout, env_return_reward
from llmgym.integrations.trl.sft import SFTResult, SFTSettings, run_sft

__all__ = [
    "EnvFactory",
    "ToolEnvironment",
    "environment_dataset",
    "EnvRollout",
    "env_return_reward",
    "SFTResult",
    "SFTSettings",
    "run_sft",
]
