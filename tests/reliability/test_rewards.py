"""Bad rewards are named where they enter: env steps, TextGen reward functions, LlamaGym's ``assign_reward``.

Before, a nan, inf or 1e38 reward passed every step and the run died at the first update with an
unrelated message ("an action index points at a padded or masked-out candidate", a torch nan
error), and ``assign_reward(nan)`` through the LlamaGym compat layer turned every weight into nan.
"""

from __future__ import annotations

import math
import re
import warnings
from typing import Any

import gymnasium as gym
import pytest
import torch

from llmgym.config import load_config
from llmgym.envs.generation import TextGenEnv
from llmgym.envs.reward_checks import MAX_ABS_REWARD, check_reward, check_reward_clip
from llmgym.envs.vector import make_vec
from llmgym.errors import ConfigError, InputError

_ID = "reliability/BadReward-v0"


class BadRewardEnv(gym.Env[str, str]):
    """Pays 0 until step ``bad_step``, then ``bad_reward``."""

    def __init__(self, bad_reward: Any = math.nan, bad_step: int = 3) -> None:
        self.observation_space = gym.spaces.Text(64)
        self.action_space = gym.spaces.Text(64)
        self.bad_reward, self.bad_step, self.steps = bad_reward, bad_step, 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self.steps = 0
        return "obs", {"valid_actions": ["a", "b"]}

    def step(self, action: str) -> tuple[str, Any, bool, bool, dict[str, Any]]:
        self.steps += 1
        reward = self.bad_reward if self.steps == self.bad_step else 0.0
        return "obs", reward, False, False, {"valid_actions": ["a", "b"]}


if _ID not in gym.registry:
    gym.register(_ID, entry_point=BadRewardEnv)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 1e38, "1.0", None])
def test_env_reward_is_named_at_the_step_it_comes_out(bad: Any) -> None:
    envs = make_vec(_ID, num_envs=2, env_kwargs={"bad_reward": bad, "bad_step": 3})
    envs.reset(seed=0)
    envs.step(["a", "a"])
    envs.step(["a", "a"])
    with pytest.raises(
        InputError, match=rf"reward={re.escape(repr(bad))}.* from env 0 \('{_ID}'\) at step 3"
    ):
        envs.step(["a", "b"])
    envs.close()


def test_env_reward_clip_is_opt_in_and_recorded() -> None:
    envs = make_vec(_ID, num_envs=1, env_kwargs={"bad_reward": math.inf, "bad_step": 1}, reward_clip=5.0)
    envs.reset(seed=0)
    with pytest.warns(RuntimeWarning, match="clipped to 5.0"):
        _, rewards, _, _, infos = envs.step(["a"])
    assert rewards.tolist() == [5.0] and infos[0]["reward_clipped_from"] == math.inf
    envs.close()
    nan_envs = make_vec(_ID, num_envs=1, env_kwargs={"bad_reward": math.nan, "bad_step": 1}, reward_clip=5.0)
    nan_envs.reset(seed=0)
    with pytest.warns(RuntimeWarning):
        _, rewards, _, _, _ = nan_envs.step(["a"])
    assert rewards.tolist() == [0.0]
    nan_envs.close()


def test_async_workers_check_rewards_too() -> None:
    envs = make_vec(
        _ID,
        num_envs=2,
        vectorization_mode="async",
        num_workers=2,
        context="fork",
        env_kwargs={"bad_reward": math.nan, "bad_step": 1},
    )
    try:
        envs.reset(seed=0)
        with pytest.raises(InputError, match=r"reward=nan from env 0 .* at step 1"):
            envs.step(["a", "a"])
    finally:
        envs.close()


def test_run_config_reward_clip_reaches_the_vector_env() -> None:
    from llmgym.run.build import make_envs

    config = load_config(
        None,
        [
            f"env.id={_ID}",
            "env.num_envs=1",
            "env.reward_clip=2",
            "env.kwargs.bad_step=1",
            "env.kwargs.bad_reward=1e38",
        ],
    )
    envs = make_envs(config)
    envs.reset(seed=0)
    with pytest.warns(RuntimeWarning):
        assert envs.step(["a"])[1].tolist() == [2.0]
    envs.close()


@pytest.mark.parametrize("value", [0, -1, math.nan, math.inf, 2 * MAX_ABS_REWARD, "5", True])
def test_bad_reward_clip_settings_are_config_errors(value: Any) -> None:
    with pytest.raises(ConfigError, match="reward_clip"):
        check_reward_clip(value)


def test_bound_keeps_float32_squares_finite() -> None:
    assert check_reward(-MAX_ABS_REWARD, source="s", step="t") == -MAX_ABS_REWARD
    returns = torch.full((4096,), MAX_ABS_REWARD * 1e5, dtype=torch.float32)  # 10^5 steps at the bound
    assert torch.isfinite(returns.square().sum())


@pytest.mark.parametrize("bad", [math.nan, math.inf, 1e38, "high"])
def test_textgen_reward_function_is_named(bad: Any) -> None:
    env = TextGenEnv(["Hello"], reward=lambda prompt, completion, refs: bad)
    env.reset(seed=0)
    with pytest.raises(
        InputError,
        match=r"from reward function '<lambda>' of TextGenEnv at step 1 of the episode on prompt 0",
    ):
        env.step(" there")


def test_textgen_reward_clip() -> None:
    env = TextGenEnv(["Hello"], reward=lambda prompt, completion, refs: -math.inf, reward_clip=3.0)
    env.reset(seed=0)
    with pytest.warns(RuntimeWarning, match="clipped to -3.0"):
        assert env.step(" there")[1] == -3.0


# ---- LlamaGym compat ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def llamagym_agent(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from llmgym.compat.llamagym import Agent, AutoModelForCausalLMWithValueHead
    from llmgym.testing import save_tiny_model

    path = str(save_tiny_model(tmp_path_factory.mktemp("rewards") / "llama", "llama"))

    class EchoAgent(Agent):
        def get_system_prompt(self) -> str:
            return "Play."

        def format_observation(self, observation: Any) -> str:
            return str(observation)

        def extract_action(self, response: str) -> Any:
            return 0

    from transformers import AutoTokenizer

    model = AutoModelForCausalLMWithValueHead.from_pretrained(path)
    return EchoAgent(
        model,
        AutoTokenizer.from_pretrained(path),
        "cpu",
        {"max_new_tokens": 2, "do_sample": False},
        {"batch_size": 1, "mini_batch_size": 1},
    )


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1e38, 1e5, "1.0", None])
def test_assign_reward_refuses_bad_rewards_and_weights_stay_finite(llamagym_agent: Any, bad: Any) -> None:
    agent = llamagym_agent
    agent.act(1)
    with pytest.raises(InputError, match=r"assign_reward"):
        agent.assign_reward(bad)
    agent.assign_reward(1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stats = agent.terminate_episode()
    assert stats and math.isfinite(stats["ppo/loss/total"])
    assert all(torch.isfinite(p).all() for p in agent.policy.model.parameters())


def test_llamagym_step_refuses_a_nan_reward(llamagym_agent: Any) -> None:
    with pytest.raises(InputError, match=r"reward=nan from EchoAgent\.step at turn 0"):
        llamagym_agent.step([torch.tensor([1, 2])], [torch.tensor([3])], [torch.tensor(float("nan"))])


def test_training_stops_at_the_step_that_returned_nan_not_at_the_update(tmp_path) -> None:
    from llmgym.run.trainer import Trainer
    from llmgym.testing import tiny_causal_lm

    model, tokenizer = tiny_causal_lm("llama", seed=0)
    config = load_config(
        None,
        [
            f"env.id={_ID}",
            "env.num_envs=2",
            "env.kwargs.bad_step=3",
            f"train.output_dir={tmp_path}",
            "train.run_name=n",
            "agent.use_chat_template=false",
            "agent.history_length=0",
            "agent.max_prompt_tokens=64",
            "algorithm.rollout_steps=8",
            "train.eval_episodes=0",
            "train.eval_before=false",
            "logging.progress=false",
            "logging.plot=false",
        ],
    )
    trainer = Trainer(config, model=model, tokenizer=tokenizer)
    try:
        with pytest.raises(InputError, match=rf"reward=nan from env 0 \('{_ID}'\) at step 3"):
            trainer.train()
        assert trainer.algorithm.updates == 0
    finally:
        trainer.close()
