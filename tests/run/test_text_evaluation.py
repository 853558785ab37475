"""Split evaluation (``train.eval_splits``): greedy, or sampled as the rollouts sample, reproducibly."""

import dataclasses
import json

import pytest
import torch

from llmgym.errors import ConfigError
from llmgym.run.text_evaluation import evaluate_splits
from llmgym.run.trainer import Trainer
from llmgym.testing import tiny_causal_lm
from tests.algorithms.helpers import tiny_config

# Six copies of one prompt, completed token by token: every greedy completion is the same text.
SPLIT_TEXTGEN = [
    "env.kwargs.datapool=dummy_pool",
    "env.kwargs.datapool_kwargs={prompt: 'Once upon a', n_samples: 6}",
    "env.kwargs.reward=keywords",
    "env.kwargs.reward_kwargs={keywords: [k]}",
    "env.kwargs.mode=token",
    "env.kwargs.max_tokens=4",
    "agent.type=token",
    "algorithm.gamma=1.0",
    "algorithm.gae_lambda=1.0",
    "env.num_envs=2",
    "train.eval_splits=[val]",
    "train.eval_metrics=[{id: diversity}]",
    "agent.max_prompt_tokens=64",
]


def _completions(path):
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [r["completion"] for r in rows], {r["decoding"] for r in rows}


def test_sampled_split_evaluation_repeats_with_its_seed_and_differs_from_greedy(tmp_path):
    config = tiny_config(tmp_path, "llmgym/TextGen-v0", *SPLIT_TEXTGEN, "train.eval_split_decoding=sample")
    model, tokenizer = tiny_causal_lm("llama", seed=0)  # untrained: a nearly flat next-token distribution
    trainer = Trainer(config, model=model, tokenizer=tokenizer)
    try:
        first = trainer.evaluate("a")
        torch.rand(100)  # the caller's random state moves on: the seed alone decides the samples
        second = trainer.evaluate("b")
        run = trainer.run_dir
        greedy_config = dataclasses.replace(
            config, train=dataclasses.replace(config.train, eval_split_decoding="greedy")
        )
        greedy = evaluate_splits(
            trainer.eval_agent, greedy_config, ["val"], run_dir=run, label="g", env_steps=0
        )
    finally:
        trainer.close()
    predictions = run / "predictions"
    sampled_a, decodings = _completions(predictions / "a_0_val_sampled.jsonl")
    sampled_b, _ = _completions(predictions / "b_0_val_sampled.jsonl")
    greedy_texts, greedy_decodings = _completions(predictions / "g_0_val.jsonl")
    assert (decodings, greedy_decodings) == ({"sample"}, {"greedy"})
    # the same seed: the same predictions and scores, under names that say they were sampled
    assert sampled_a == sampled_b and len(sampled_a) == 6
    sampled_keys = {k for k in first if k.startswith("val/")}
    assert {"val/sampled/episode_return", "val/sampled/diversity_metrics/distinct-1"} <= sampled_keys
    assert not any(k.startswith("val/") and "/sampled/" not in k for k in first)
    assert all(first[k] == second[k] for k in sampled_keys)
    # greedy: one completion for the six copies of the prompt; sampled: drawn, so they differ
    assert len(set(greedy_texts)) == 1 and len(set(sampled_a)) > 1
    assert "val/episode_return" in greedy and not any("sampled" in k for k in greedy)


def test_a_changed_seed_samples_other_predictions(tmp_path):
    config = tiny_config(tmp_path, "llmgym/TextGen-v0", *SPLIT_TEXTGEN, "train.eval_split_decoding=sample")
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    trainer = Trainer(config, model=model, tokenizer=tokenizer)
    try:
        for seed, label in ((1, "one"), (2, "two"), (1, "again")):
            evaluate_splits(
                trainer.eval_agent,
                config,
                ["val"],
                run_dir=trainer.run_dir,
                label=label,
                env_steps=0,
                seed=seed,
            )
    finally:
        trainer.close()
    texts = {
        label: _completions(trainer.run_dir / "predictions" / f"{label}_0_val_sampled.jsonl")[0]
        for label in ("one", "two", "again")
    }
    assert texts["one"] == texts["again"] != texts["two"]


def test_an_unknown_split_decoding_is_refused_by_name(tmp_path):
    with pytest.raises(ConfigError, match=r"train\.eval_split_decoding='beam'.*\['greedy', 'sample'\]"):
        tiny_config(tmp_path, "llmgym/TextGen-v0", "train.eval_split_decoding=beam")


# NLPO's mask keeps one token (the mask policy's argmax: the tiny model's distribution is nearly flat, so
# 0.0001 is below its top probability) and the special tokens (RL4LMs unmasks them too).
NLPO_SPLIT = [
    "algorithm.name=nlpo",
    "algorithm.nlpo.mask_top_p=0.0001",
    "algorithm.nlpo.min_tokens_to_keep=1",
    "env.kwargs.mode=completion",
    "agent.type=generative",
    "agent.max_new_tokens=4",
]


def _replayed(model, mask_model, decision, special_ids, masked):
    """The greedy tokens of ``decision``'s prompt, replayed: the argmax, or the argmax over the mask's kept set."""
    ids = list(decision.prompt_ids)
    for _ in decision.choice.token_ids:
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1]
            kept = {int(mask_model(torch.tensor([ids])).logits[0, -1].argmax()), *special_ids}
        ids.append(max(kept, key=lambda t: float(logits[t])) if masked else int(logits.argmax()))
    return ids[len(decision.prompt_ids) :]


@pytest.mark.parametrize("decoding", ["greedy", "sample"])
def test_an_nlpo_split_evaluation_decodes_under_the_mask_when_asked(tmp_path, decoding):
    config = tiny_config(
        tmp_path, "llmgym/TextGen-v0", *SPLIT_TEXTGEN, *NLPO_SPLIT, f"train.eval_split_decoding={decoding}"
    )
    unmasked = dataclasses.replace(
        config,
        algorithm=dataclasses.replace(
            config.algorithm, nlpo=dataclasses.replace(config.algorithm.nlpo, evaluate_masked=False)
        ),
    )
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    mask_model, _ = tiny_causal_lm("llama", seed=0)  # the mask policy: the weights NLPO snapshot at setup
    trainer = Trainer(config, model=model, tokenizer=tokenizer)
    agent = trainer.eval_agent
    kwargs = {"run_dir": trainer.run_dir, "env_steps": 0, "seed": 5}
    try:
        with torch.no_grad():  # the policy moves away from its mask policy, as training moves it
            noise = torch.Generator().manual_seed(0)
            for param in trainer.llm.model.parameters():
                param.add_(torch.randn(param.shape, generator=noise) * 0.2)
        policy = agent.policy
        on = evaluate_splits(agent, config, ["val"], label="on", **kwargs)
        on_decisions = list(agent.last_decisions)
        assert agent.policy is policy and not policy.sampling.is_masked  # restored: training untouched
        assert trainer.agent.policy.sampling.mask_top_p == 0.0001  # the training agent keeps its mask
        off = evaluate_splits(agent, unmasked, ["val"], label="off", **kwargs)
        off_decisions = list(agent.last_decisions)
        today = evaluate_splits(agent, unmasked, ["val"], label="today", **kwargs)
        assert off == today and on != off
        special = set(tokenizer.all_special_ids)
        model = trainer.llm.model
        for decision in on_decisions:
            tokens = list(decision.choice.token_ids)
            kept_only = _replayed(model, mask_model, decision, special, masked=True)
            if decoding == "greedy":
                assert tokens == kept_only
            else:  # each drawn token is the mask policy's argmax or a special token
                prefix = list(decision.prompt_ids)
                for token in tokens:
                    with torch.no_grad():
                        top = int(mask_model(torch.tensor([prefix])).logits[0, -1].argmax())
                    assert token in {top, *special}
                    prefix.append(token)
        if decoding == "greedy":
            for decision in off_decisions:
                assert list(decision.choice.token_ids) == _replayed(
                    model, mask_model, decision, special, False
                )
    finally:
        trainer.close()
    suffix = "_sampled" if decoding == "sample" else ""
    on_texts, _ = _completions(trainer.run_dir / "predictions" / f"on_0_val{suffix}.jsonl")
    off_texts, _ = _completions(trainer.run_dir / "predictions" / f"off_0_val{suffix}.jsonl")
    today_texts, _ = _completions(trainer.run_dir / "predictions" / f"today_0_val{suffix}.jsonl")
    assert on_texts != off_texts and off_texts == today_texts
