"""GRPOTrainer(rollout_func=EnvRollout(...)) trains a tiny model on multi-turn llmgym episodes, token ids in and out."""

from __future__ import annotations

import pickle

import pytest

from llmgym.errors import ConfigError, InputError
from llmgym.integrations.trl import EnvRollout, env_return_reward
from llmgym.testing import tiny_causal_lm
from tests.integrations.trl.scripted import changed, grpo_args, scripted_generate


def test_grpo_trains_on_countdown_episodes_with_observations_masked_out(tmp_path):
    from trl import GRPOTrainer

    model, tokenizer = tiny_causal_lm()
    episodes = [0]

    def reply(context: str, n: int) -> str:
        """Every other episode says the named action (and wins in two turns), the others the wrong one."""
        if context.count("Action:") == 1:
            episodes[0] += 1
        named = "left" if context.rsplit("Say '", 1)[1].startswith("left") else "right"
        wrong = {"left": "right", "right": "left"}[named]
        return " " + (named if episodes[0] % 2 else wrong) + tokenizer.eos_token

    model.generate = scripted_generate(tokenizer, reply)
    rollout = EnvRollout("llmgym/Countdown-v0", {"length": 2}, max_new_tokens=4)
    dataset = rollout.dataset(range(6))
    assert sorted(set(dataset["seed"])) == dataset["seed"] and len(dataset) == 2  # one row per distinct start
    rollout = pickle.loads(pickle.dumps(rollout))
    outputs = []

    def recorded(prompts, trainer):
        outputs.append(rollout(prompts, trainer))
        return outputs[-1]

    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainer = GRPOTrainer(
        model,
        reward_funcs=env_return_reward,
        args=grpo_args(tmp_path, max_completion_length=64),
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=recorded,
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2 and all(h["reward_std"] > 0 and h["loss"] != 0 for h in logs)
    assert changed(model, before) > 0
    out = outputs[0]
    assert sorted(out["env_return"]) == [0.0, 0.0, 1.0, 1.0]
    for ids, mask, logprobs, ret in zip(
        out["completion_ids"], out["env_mask"], out["logprobs"], out["env_return"]
    ):
        model_text = tokenizer.decode([i for i, m in zip(ids, mask) if m])
        env_text = tokenizer.decode([i for i, m in zip(ids, mask) if not m])
        assert len(ids) == len(mask) == len(logprobs)
        assert all(lp < 0 for lp, m in zip(logprobs, mask) if m) and all(
            lp == 0 for lp, m in zip(logprobs, mask) if not m
        )
        if ret == 1.0:  # won in two turns: action, observation, action
            assert model_text.count(tokenizer.eos_token) == 2
            assert env_text.startswith("\nSay '") and env_text.endswith(
                "1 more time in a row.\nValid actions: left, right.\nAction:"
            )
        else:  # the first action was wrong: the episode ended at once
            assert model_text.count(tokenizer.eos_token) == 1 and env_text == ""


def test_log_probs_are_the_models_at_the_temperature():
    import torch

    model, tokenizer = tiny_causal_lm()
    rollout = EnvRollout("llmgym/EchoWord-v0", temperature=0.7, max_new_tokens=3)
    context = tokenizer("Say the word: apple")["input_ids"]
    torch.manual_seed(0)
    ids, logprobs = rollout._sample(model, context, tokenizer.eos_token_id, tokenizer.pad_token_id)
    with torch.no_grad():
        logits = model(torch.tensor([context + ids])).logits[0, len(context) - 1 : -1] / 0.7
    expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids)[:, None])[:, 0]
    assert len(ids) == 3 and torch.allclose(torch.tensor(logprobs), expected, atol=1e-5)


def test_refusals():
    with pytest.raises(ConfigError, match="max_turns"):
        EnvRollout("llmgym/EchoWord-v0", max_turns=0)
    with pytest.raises(InputError, match="dataset"):
        EnvRollout("llmgym/EchoWord-v0")._seed("a prompt from elsewhere")
