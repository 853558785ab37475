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
