"""GRPOTrainer(environment_factory=EnvFactory(...)) trains a tiny model on an llmgym env through the act tool."""

from __future__ import annotations

import pickle

import pytest

from llmgym.errors import InvalidActionError
from llmgym.integrations.trl import EnvFactory, ToolEnvironment, environment_dataset
from llmgym.testing import tiny_causal_lm, tiny_tool_tokenizer
from tests.integrations.trl.scripted import TOOL_CALL, changed, cycle, grpo_args, scripted_generate

WORDS = ("apple", "banana")


def test_the_env_is_a_tool_reset_by_the_rows_seed():
    factory = pickle.loads(pickle.dumps(EnvFactory("llmgym/Countdown-v0", {"length": 2})))
    env = factory()
    first = env.reset(seed=3, prompt="ignored")
    assert first == factory().reset(seed=3) and first.endswith("Valid actions: left, right.")
    target = "left" if "'left'" in first else "right"
    assert env.act(target).startswith("Reward: 0.\nSay")
    assert env.act(target) == "Reward: 1. The episode is over; its return is 1."
    assert env.actions == [target, target] and env.over and env.get_reward() == 1.0
    with pytest.raises(InvalidActionError, match="episode is over"):
        env.act(target)
    env.reset(seed=3)
    with pytest.raises(InvalidActionError):
        env.act("jump")
    assert env.actions == [] and env.get_reward() == 0.0
    # TRL's tools are the class's public functions but reset and get_reward: act only.
    import inspect

    assert [
        n for n, _ in inspect.getmembers(ToolEnvironment, inspect.isfunction) if not n.startswith("_")
    ] == ["act", "get_reward", "reset"]


def test_grpo_trains_through_the_environment_factory(tmp_path):
    from trl import GRPOTrainer

    tokenizer = tiny_tool_tokenizer()
    model, _ = tiny_causal_lm(tokenizer=tokenizer)
    action = cycle(WORDS)

    def reply(context: str, n: int) -> str:
        done = "<tool_response>" in context
        return "Done.<|im_end|>" if done else TOOL_CALL.format(action=action(n))

    model.generate = scripted_generate(tokenizer, reply)
    factory = EnvFactory("llmgym/EchoWord-v0", {"words": WORDS})
    dataset = environment_dataset(factory, range(2))
    assert dataset["seed"] == [0, 1] and "act tool" in dataset["prompt"][0][0]["content"]
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainer = GRPOTrainer(
        model,
        args=grpo_args(tmp_path, max_completion_length=128),
        train_dataset=dataset,
        processing_class=tokenizer,
        environment_factory=factory,
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2 and all(
        h["tools/call_frequency"] == 1 and h["tools/failure_frequency"] == 0 for h in logs
    )
    assert all(h["reward_std"] > 0 and h["loss"] != 0 for h in logs)
    assert changed(model, before) > 0
    envs = trainer._environment_pool[None]
    assert sorted(e.actions[0] for e in envs) == ["apple", "apple", "banana", "banana"]
    # Each env's reward is 1 exactly when it said the word it was shown (one group: one seed, one word).
    assert sorted(e.get_reward() for e in envs) == [0.0, 0.0, 1.0, 1.0]
