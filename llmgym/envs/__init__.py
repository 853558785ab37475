"""Gymnasium text environments and the vector layer that batches them into prompts.

Importing this package is light: the env modules that need minigrid load on first use.
"""

from llmgym.envs.checker import check_text_env
from llmgym.envs.core import PROSE_CHARSET, TextEnv, TextSpace, observation_text
from llmgym.envs.datapools import Sample, list_datapools, load_datapool, register_datapool
from llmgym.envs.registration import list_envs, register_envs
from llmgym.envs.rewards import Reward, get_reward, list_rewards, register_reward
from llmgym.envs.rl4lms_pools import DatasetUnavailableError
from llmgym.envs.vector import TextVectorEnv, make_vec

__all__ = [
    "DatasetUnavailableError",
    "PROSE_CHARSET",
    "Reward",
    "Sample",
    "TextEnv",
    "TextSpace",
    "TextVectorEnv",
    "check_text_env",
    "get_reward",
    "list_datapools",
    "list_envs",
    "list_rewards",
    "load_datapool",
    "make_vec",
    "observation_text",
    "register_datapool",
    "register_envs",
    "register_reward",
]
