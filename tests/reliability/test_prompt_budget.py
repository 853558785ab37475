"""The prompt budget is fitted to the model window at start, so no step runs past the window.

Before, the shipped ``babyai_ppo_lora`` (``agent.max_prompt_tokens: 512``) on a 512-token model
died at env step 216 ("contexts[0] with its candidates needs 513 tokens, more than the model
window of 512"), the first step whose prompt filled the budget.
"""

from __future__ import annotations

import warnings

import pytest

from llmgym.config import load_config
from llmgym.errors import ConfigError
from llmgym.run.trainer import Trainer
from llmgym.testing import tiny_causal_lm

_FAST = [
    "env.num_envs=1",
    "train.eval_episodes=0",
    "train.eval_before=false",
    "logging.progress=false",
    "logging.plot=false",
    "model.lora=null",
    "algorithm.rollout_steps=2",
]


def test_babyai_ppo_lora_on_a_512_token_model_fits_every_prompt(tmp_path) -> None:
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    config = load_config("babyai_ppo_lora", [*_FAST, f"train.output_dir={tmp_path}", "train.run_name=r"])
    assert config.agent.max_prompt_tokens == 512 and model.config.max_position_embeddings == 512
    with pytest.warns(
        UserWarning, match=r"agent.max_prompt_tokens=512 plus the longest action .* prompts are cut to"
    ):
        trainer = Trainer(config, model=model, tokenizer=tokenizer)
    try:
        actions = list(trainer.envs.get_attr("action_names")[0])
        huge = "You see a wall 3 steps forward, " * 400  # fills any budget: the prompt is cut to it
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            chosen = trainer.agent.act_batch([huge], [{"valid_actions": actions}])
        assert chosen[0] in actions
        prompt_ids = trainer.agent.last_decisions[0].prompt_ids
        assert prompt_ids is not None and len(prompt_ids) < 512
    finally:
        trainer.close()


def test_an_action_that_fills_the_window_is_refused_at_start(tmp_path) -> None:
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    config = load_config(
        "textgen_ppo",
        [
            *_FAST,
            f"train.output_dir={tmp_path}",
            "train.run_name=g",
            "agent.max_new_tokens=600",
            "algorithm.kl.coef=0",
            "algorithm.kl.controller=fixed",
        ],
    )
    with pytest.raises(ConfigError, match=r"agent.max_new_tokens=600 generated tokens leave no room"):
        Trainer(config, model=model, tokenizer=tokenizer)
