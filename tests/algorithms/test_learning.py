"""Learning checks on tiny envs with a fixed budget (tiny model).

A learning result is a distribution over seeds, so every check runs on seeds 0, 1 and 2 (the seed
of the run and of the tiny model's weights) and must pass on each; a check tuned on one seed and
one CPU can fail on another CPU's rounding.

The PPO/A2C checks use GLAM's policy (the softmax of the candidates' log-probs,
``agent.action_head=false``): a tiny random model has no prior to correct, and matching a candidate
to the context is what its LM head does best (a bilinear match of the candidate's embedding with
the context's state). The action head (the default, for pretrained LLMs whose prior is skewed) is
checked on SmolLM2 by ``llmgym sweep quickstart`` (docs/results.md); on this tiny model it learned
EchoWord on 2 of 3 seeds only (0.875 on the third at 4096 steps), since it must compare the
candidate with the context inside the candidate's hidden state.
"""

import pytest

from llmgym.run.evaluation import evaluate
from tests.algorithms.helpers import build, tiny_config
from tests.algorithms.test_nlpo import TOKEN_TEXTGEN

SEEDS = [0, 1, 2]

# Single-token words of the tiny tokenizer: multi-token words start far less likely and are barely explored.
# At learning rate 3e-3 full fine-tuning of the tiny model is unstable on this env (greedy success
# 0.28-1.0 over seeds, and worse with more steps); 1e-3 reaches 1.0 on seeds 0-5.
ECHO = [
    "env.kwargs.words=[banana,cherry,dog,cat]",
    "algorithm.learning_rate=1e-3",
    "algorithm.head_learning_rate=1e-3",
]
GLAM = ["agent.action_head=false"]
# PPO reaches 1.0 on seeds 0-2 at OMP_NUM_THREADS 1 and 2 by 1536 steps; A2C (one pass per rollout)
# was at 0.875 on seed 1 at 1536 and needs 2048.
IDENTITY_STEPS = {"ppo": 1536, "a2c": 2048}


def _build(tmp_path, env_id, seed, *overrides):
    config = tiny_config(tmp_path, env_id, f"train.seed={seed}", *GLAM, *overrides)
    return config, *build(config, seed=seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("algo", ["ppo", "a2c"])
def test_identity_env_is_learned(tmp_path, algo, seed):
    extra = ["algorithm.epochs=1"] if algo == "a2c" else []
    config, llm, envs, agent, algorithm = _build(
        tmp_path, "llmgym/EchoWord-v0", seed, f"algorithm.name={algo}", *ECHO, *extra
    )
    before = evaluate(agent, config, episodes=40, seed=1000)
    algorithm.learn(total_env_steps=IDENTITY_STEPS[algo])
    result = evaluate(agent, config, episodes=40, seed=1000)
    envs.close()
    assert before["success_rate"] < 0.5, before
    assert result["success_rate"] >= 0.9, result


# Countdown's failure mode is a collapse to one action whatever the state (greedy success 0.4-0.6):
# the tiny model's last hidden state barely depends on the named action (initial p(left) equal across
# the six states within 0.01), so the first updates move the action prior shared by all states. With
# lr 1e-3, 8-step rollouts and entropy_coef 0.01 the entropy fell to 0.07-0.2 within 256 env steps and
# seeds 2 and 3 of 0-5 ended at 0.4; entropy_coef 0.05 and 16-step rollouts alone still failed seeds 4
# and 5 (0.6, 0.4: near-solved at 1024 steps, then drifted back to one action). lr 5e-4 over 3072
# steps with both reached 1.0 on seeds 0-5 on one CPU, but on another (AMD EPYC, OMP_NUM_THREADS=1)
# seeds 2 and 4 reached 1.0 at 2048 steps and drifted back to 0.6 by 3072, and seed 5 stayed at 0.4:
# once the task is solved the whitened advantages are the critic's noise, and full-size steps on it
# undo the policy. Annealing the learning rate to 0 (algorithm.anneal_lr, as CleanRL) ends all of
# seeds 0-5 at 1.0 on both thread counts, over 3072 steps and over 2048 (docs/algorithms.md).
MULTISTEP = [
    "env.kwargs.length=3",
    "algorithm.gamma=0.95",
    "algorithm.learning_rate=5e-4",
    "algorithm.entropy_coef=0.05",
    "algorithm.rollout_steps=16",
    "algorithm.anneal_lr=true",
]


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_ppo_solves_multistep_sparse_env(tmp_path, seed):
    config, llm, envs, agent, algorithm = _build(tmp_path, "llmgym/Countdown-v0", seed, *MULTISTEP)
    algorithm.learn(total_env_steps=2048)
    result = evaluate(agent, config, episodes=40, seed=1000)
    envs.close()
    assert result["success_rate"] >= 0.9, result


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_value_head_learns_bootstrapped_constant_return(tmp_path, seed):
    gamma = 0.9
    config, llm, envs, agent, algorithm = _build(
        tmp_path,
        "llmgym/ConstantReward-v0",
        seed,
        "env.kwargs.horizon=5",
        f"algorithm.gamma={gamma}",
        "algorithm.gae_lambda=1.0",
        "algorithm.learning_rate=1e-3",
        "algorithm.head_learning_rate=1e-2",
        "algorithm.ppo.value_clip_range=null",
        "algorithm.normalize_advantages=false",
        "algorithm.rollout_steps=16",
    )
    algorithm.learn(total_env_steps=1024)  # 9.72 / 9.99 / 9.81 on seeds 0-2 (target 10)
    value = agent.values_of({0: "Every step earns one point."})[0]
    envs.close()
    # Truncation is bootstrapped, so the value of the (only) state is the infinite-horizon 1/(1-gamma).
    assert value == pytest.approx(1 / (1 - gamma), rel=0.15)


# GRPO and RLOO have no critic: 16 envs in 2 groups of 8 reset from one seed each (the same word),
# each episode baselined against its group. On this tiny model at 2048 steps they improve the
# zero-shot greedy success on seeds 0-2 at OMP_NUM_THREADS 1 and 2 (0.45/0.45/0.275 -> 0.425-0.875;
# docs/algorithms.md) but do not solve the env as PPO with a critic does in the same budget.
GROUP = ["env.num_envs=16", "algorithm.group.size=8", "algorithm.epochs=2", "algorithm.entropy_coef=0.01"]


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("algo", ["grpo", "rloo"])
def test_group_baselines_improve_on_the_identity_env(tmp_path, algo, seed):
    config, llm, envs, agent, algorithm = _build(
        tmp_path, "llmgym/EchoWord-v0", seed, f"algorithm.name={algo}", *ECHO, *GROUP
    )
    before = evaluate(agent, config, episodes=40, seed=1000)
    algorithm.learn(total_env_steps=2048)
    result = evaluate(agent, config, episodes=40, seed=1000)
    envs.close()
    assert result["success_rate"] >= before["success_rate"] + 0.1, (before, result)


# ReBN has no critic and no groups: 16 envs each from its own seed, every turn's return z-scored over the
# round's 16 episodes. On this tiny model at 2048 steps (OMP_NUM_THREADS=1) the greedy success went
# 0.45/0.45/0.275 -> 1.0/1.0/0.85 on seeds 0-2 (about 20-40 s each); on Countdown (3 steps, sparse) with
# the PPO recipe below it stayed at one action (0.6), as PPO does without annealing and entropy tuning.
REBN = ["algorithm.name=rebn", "env.num_envs=16", "algorithm.rollout_steps=1", "algorithm.epochs=2"]


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_rebn_learns_the_identity_env(tmp_path, seed):
    config, llm, envs, agent, algorithm = _build(
        tmp_path, "llmgym/EchoWord-v0", seed, *ECHO, *REBN, "algorithm.entropy_coef=0.01"
    )
    before = evaluate(agent, config, episodes=40, seed=1000)
    algorithm.learn(total_env_steps=2048)
    result = evaluate(agent, config, episodes=40, seed=1000)
    envs.close()
    assert before["success_rate"] < 0.5, before
    assert result["success_rate"] >= before["success_rate"] + 0.3, (before, result)


# NLPO at its home, token-level text generation (RL4LMs): each token of a 3-token completion of a review
# opening is an action, and the completion earns 1 when it contains a "k" (5-10% of the tiny model's sampled
# completions at first, over 40 episodes). 8 envs, the mask policy's top 90% refreshed every 5 updates,
# 2048 env steps. Without anneal_lr the greedy return reached 1.0 on seeds 0-2 at OMP_NUM_THREADS=1 but
# 0.975 / 1.0 / 0.725 at =2 (seed 2 drifted back); annealed, as the Countdown test, it ends at 1.0 on every
# seed at both thread counts (docs/algorithms.md), in about 18 s each at OMP_NUM_THREADS=1.
@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_nlpo_learns_token_level_generation(tmp_path, seed):
    config = tiny_config(
        tmp_path,
        "llmgym/TextGen-v0",
        f"train.seed={seed}",
        "env.num_envs=8",
        *TOKEN_TEXTGEN,
        "algorithm.anneal_lr=true",
    )
    llm, envs, agent, algorithm = build(config, seed=seed)
    before = evaluate(agent, config, episodes=40, seed=1000, greedy=False)
    algorithm.learn(total_env_steps=2048)
    result = evaluate(agent, config, episodes=40, seed=1000)
    envs.close()
    assert before["episode_return"] <= 0.2, before
    assert result["episode_return"] >= 0.9, result


# TRPO takes one natural-gradient step per 32-transition rollout (32 steps in 1024 env steps), each
# within a mean KL of max_kl from the behaviour policy. At max_kl 0.05 (line_search_shrink 0.5, the
# default) seeds 0-2 go 0.45/0.45/0.275 -> 1.0/1.0/1.0 at OMP_NUM_THREADS 1 and 2 (all at 1.0 by 512
# steps with evaluations along the way); with SB3-contrib's shrink 0.8 at max_kl 0.1, seed 2 had
# its steps rejected after the first and stayed at 0.15; at 1536 steps seed 0 fell back to 0.725 at OMP 2 (steps on
# the critic's noise once solved), hence the shorter budget. docs/algorithms.md.
TRPO_RECIPE = ["algorithm.name=trpo", "algorithm.trpo.max_kl=0.05"]


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_trpo_learns_the_identity_env(tmp_path, seed):
    config, llm, envs, agent, algorithm = _build(tmp_path, "llmgym/EchoWord-v0", seed, *ECHO, *TRPO_RECIPE)
    before = evaluate(agent, config, episodes=40, seed=1000)
    algorithm.learn(total_env_steps=1024)
    result = evaluate(agent, config, episodes=40, seed=1000)
    envs.close()
    assert before["success_rate"] < 0.5, before
    assert result["success_rate"] >= 0.9, result
