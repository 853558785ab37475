"""Small training setups shared by the algorithm tests (tiny model, short prompts)."""

from __future__ import annotations

from llmgym.config import Config, load_config

FAST = [
    "agent.use_chat_template=false",
    "agent.history_length=0",
    "agent.system_prompt=",
    "algorithm.rollout_steps=8",
    "algorithm.minibatch_size=16",
    "algorithm.learning_rate=3e-3",
    "algorithm.head_learning_rate=3e-3",
    "algorithm.entropy_coef=0.0",
    "logging.progress=false",
    "logging.plot=false",
    "train.eval_episodes=0",
    "train.eval_before=false",
]


def tiny_config(tmp_path, env_id: str, *overrides: str) -> Config:
    """A config for a tiny-model run of ``env_id`` writing under ``tmp_path``."""
    return load_config(
        None, [f"env.id={env_id}", "env.num_envs=4", f"train.output_dir={tmp_path}", *FAST, *overrides]
    )


def build(config: Config, seed: int = 0, arch: str = "llama"):
    """(llm, envs, agent, algorithm) for a config, on a fresh tiny model."""
    from llmgym.algorithms import algorithm_class
    from llmgym.run.build import build_agent, build_llm, make_envs
    from llmgym.testing import tiny_causal_lm

    model, tokenizer = tiny_causal_lm(arch, seed=seed)
    llm = build_llm(config, model=model, tokenizer=tokenizer)
    envs = make_envs(config)
    agent = build_agent(config, llm, envs.num_envs)
    cls = algorithm_class(config.algorithm.name)
    return llm, envs, agent, cls(agent, envs, config.algorithm, seed=config.train.seed)


def one_round_on_countdown(tmp_path, *overrides: str):
    """(algorithm, rollout) after one collected round on 4 Countdown envs without an action head.

    The rollout is ``algorithm.rollout_targets(algorithm.buffer)``: the batch with its credit.
    """
    config = tiny_config(tmp_path, "llmgym/Countdown-v0", "agent.action_head=false", *overrides)
    _, envs, _, algorithm = build(config)
    algorithm.collect_rollout()
    rollout = algorithm.rollout_targets(algorithm.buffer)
    envs.close()
    return algorithm, rollout
