"""Learning checks on tiny envs with a fixed budget (tiny model, fixed seed)."""

import pytest

from llmgym.algorithms.trainer import evaluate
from tests.algorithms.helpers import build, tiny_config

# Single-token words of the tiny tokenizer: multi-token words start far less likely and are barely explored.
# At learning rate 3e-3 full fine-tuning of the tiny model is unstable on this env (greedy success
# 0.28-1.0 over seeds, and worse with more steps); 1e-3 reaches 1.0 on seeds 0-5.
ECHO = ["env.kwargs.words=[banana,cherry,dog,cat]", "algorithm.learning_rate=1e-3", "algorithm.head_learning_rate=1e-3"]


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo", "a2c"])
def test_identity_env_is_learned(tmp_path, algo):
    extra = ["algorithm.epochs=1"] if algo == "a2c" else []
    config = tiny_config(tmp_path, "llmgym/EchoWord-v0", f"algorithm.name={algo}", *ECHO, *extra)
    llm, envs, agent, algorithm = build(config)
    before = evaluate(agent, config, episodes=40, seed=1000)
    algorithm.learn(total_env_steps=2048)
    result = evaluate(agent, config, episodes=40, seed=1000)
    envs.close()
    assert before["success_rate"] < 0.5, before
    assert result["success_rate"] >= 0.9, result


@pytest.mark.slow
def test_ppo_solves_multistep_sparse_env(tmp_path):
    config = tiny_config(
        tmp_path, "llmgym/Countdown-v0", "env.kwargs.length=3", "algorithm.gamma=0.95",
        "algorithm.learning_rate=1e-3", "algorithm.entropy_coef=0.01",
    )
    llm, envs, agent, algorithm = build(config)
    algorithm.learn(total_env_steps=2048)
    result = evaluate(agent, config, episodes=40, seed=1000)
    envs.close()
    assert result["success_rate"] >= 0.9, result


@pytest.mark.slow
def test_value_head_learns_bootstrapped_constant_return(tmp_path):
    gamma = 0.9
    config = tiny_config(
        tmp_path, "llmgym/ConstantReward-v0", "env.kwargs.horizon=5", f"algorithm.gamma={gamma}",
        "algorithm.gae_lambda=1.0", "algorithm.learning_rate=1e-3", "algorithm.head_learning_rate=1e-2",
        "algorithm.value_clip_range=null", "algorithm.normalize_advantages=false", "algorithm.rollout_steps=16",
    )
    llm, envs, agent, algorithm = build(config)
    algorithm.learn(total_env_steps=2048)
    value = agent.values_of({0: "Every step earns one point."})[0]
    envs.close()
    # Truncation is bootstrapped, so the value of the (only) state is the infinite-horizon 1/(1-gamma).
    assert value == pytest.approx(1 / (1 - gamma), rel=0.15)
