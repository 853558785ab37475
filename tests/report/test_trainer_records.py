"""The trainer's episode records: one set per evaluation, the agent's own probabilities, trimmed on resume."""

import math

import pytest
import torch

from llmgym.report.records import EpisodeRecorder, read_episode_records
from llmgym.run.evaluation import evaluate
from llmgym.run.trainer import Trainer
from llmgym.testing import tiny_causal_lm
from tests.algorithms.helpers import tiny_config

RUN = [
    "env.kwargs.length=2",
    "algorithm.rollout_steps=4",
    "env.num_envs=2",
    "train.total_env_steps=16",
    "train.checkpoint_every=8",
    "train.eval_every=8",
    "train.eval_episodes=3",
    "logging.record_episodes=2",
    "logging.report=false",
    "train.run_name=src",
    "train.eval_before=true",
]


def _trainer(config):
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    return Trainer(config, model=model, tokenizer=tokenizer)


def test_each_evaluation_records_its_first_episodes_and_a_resume_drops_the_later_ones(tmp_path):
    trainer = _trainer(tiny_config(tmp_path, "llmgym/Countdown-v0", *RUN))
    trainer.train()
    trainer.close()
    run = tmp_path / "src"
    everything = read_episode_records(run / "episodes.jsonl")
    records = [r for r in everything if r.policy == "greedy"]
    assert [(r.env_steps, r.evaluation, r.episode) for r in records] == [
        (0, 0, 0),
        (0, 0, 1),
        (8, 1, 0),
        (8, 1, 1),
        (16, 2, 0),
        (16, 2, 1),
    ]
    # after each evaluation but the last, env 0's next training episode (Countdown: 2 steps; env 0 ends its
    # first episode at vector step 2 of the 4, so the recorded one ends at step 4: 8 env steps later)
    training = [r for r in everything if r.policy == "training"]
    assert [(r.env_steps, r.evaluation, r.label, r.seed, r.length) for r in training] == [
        (8, 0, "train", -1, 2),
        (16, 1, "train", -1, 2),
    ]
    for record in training:
        assert [s.action for s in record.steps] and all(
            math.isclose(sum(s.probs), 1.0, abs_tol=2e-3) for s in record.steps
        )
    assert not (run / "report.html").exists()  # logging.report=false
    for record in records:
        assert record.steps and record.length == len(record.steps)
        assert record.episode_return == sum(s.reward for s in record.steps)
        for step in record.steps:
            assert (
                step.candidates
                and step.chosen is not None
                and math.isclose(sum(step.probs), 1.0, abs_tol=2e-3)
            )
    # a crash after the checkpoint at 8 (its checkpoint at 16 lost): the resumed run records 16 once
    (run / "checkpoints" / "step-0000000016" / "llm" / "updater.pt").write_bytes(b"corrupted")
    resumed = _trainer(tiny_config(tmp_path, "llmgym/Countdown-v0", *RUN, f"train.resume={run}"))
    assert [(r.env_steps, r.policy) for r in read_episode_records(run / "episodes.jsonl")] == [
        (0, "greedy"),
        (0, "greedy"),
        (8, "training"),
        (8, "greedy"),
        (8, "greedy"),
    ]
    resumed.train()
    resumed.close()
    assert [r.to_json() for r in read_episode_records(run / "episodes.jsonl")] == [
        r.to_json() for r in everything
    ]


def test_the_recorded_probabilities_are_the_agents_decisions(tmp_path):
    trainer = _trainer(tiny_config(tmp_path, "llmgym/Countdown-v0", *RUN))
    recorder = EpisodeRecorder(1, trainer.llm.tokenizer)
    agent = trainer.eval_agent
    decisions = []
    original = agent._decide

    def spy(prompts, candidates, greedy):
        out = original(prompts, candidates, greedy)
        decisions.append(out[0])
        return out

    agent._decide = spy
    evaluate(agent, trainer.config, 1, seed=4, recorder=recorder)
    trainer.close()
    [record] = recorder.records(0, "before", 0)
    assert len(record.steps) == len(decisions)
    for step, decision in zip(record.steps, decisions):
        probs = dict(zip(step.candidates, step.probs))
        expected = {
            c.strip(): math.exp(lp) for c, lp in zip(decision.choice.candidates, decision.choice.log_probs)
        }
        assert probs.keys() == expected.keys()
        assert all(math.isclose(probs[c], p, rel_tol=1e-3) for c, p in expected.items())
        assert step.action == decision.action and step.log_prob == float(f"{decision.log_prob:.4g}")
        assert torch.isclose(torch.tensor(sum(expected.values())), torch.tensor(1.0), atol=1e-5)


@pytest.mark.parametrize("name", ["grpo", "rloo"])
def test_group_baseline_runs_record_training_episodes_too(tmp_path, name):
    # GRPO and RLOO collect through their own round loop; it calls the same step helper and callbacks
    # (they used to record no training episode): after each evaluation but the last, one whole episode
    # of env 0, from the round after the one where its episode running at the evaluation ended
    group = [f"algorithm.name={name}", "algorithm.group.size=2", "agent.action_head=false"]
    trainer = _trainer(tiny_config(tmp_path, "llmgym/Countdown-v0", *RUN, *group))
    trainer.train()
    trainer.close()
    everything = read_episode_records(tmp_path / "src" / "episodes.jsonl")
    training = [r for r in everything if r.policy == "training"]
    assert [(r.evaluation, r.label, r.seed) for r in training] == [(0, "train", -1), (1, "train", -1)]
    assert 0 < training[0].env_steps < training[1].env_steps <= 16
    for record in training:
        assert 1 <= record.length == len(record.steps)
        assert record.episode_return == sum(s.reward for s in record.steps)
        assert all(math.isclose(sum(s.probs), 1.0, abs_tol=2e-3) for s in record.steps)
