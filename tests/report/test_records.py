"""Episode records: what the recorder keeps of the agent's decisions, the JSONL file, the W&B / TensorBoard views."""

import json
import math

import pytest
import torch

from llmgym.agents.policies import CandidateChoice, Decision, TokenChoice
from llmgym.algorithms.advantages import compute_gae
from llmgym.config import LoggingConfig, WandbConfig
from llmgym.metrics import RunLogger
from llmgym.report import records as rec
from llmgym.report.records import (
    EpisodeRecord,
    EpisodeRecorder,
    append_episode_records,
    episode_markdown,
    episode_rows,
    read_episode_records,
    trim_episode_records,
)


def scoring_decision(log_probs, index, value=0.5):
    candidates = [f"action {i}" for i in range(len(log_probs))]
    return Decision(
        prompt="p",
        prompt_ids=[1],
        action=candidates[index],
        response=candidates[index],
        log_prob=log_probs[index],
        value=value,
        choice=CandidateChoice(candidates, index, list(log_probs)),
    )


def generative_decision(text, token_ids, token_log_probs, failed):
    return Decision(
        prompt="p",
        prompt_ids=[1],
        action="stay",
        response=text,
        log_prob=float(sum(token_log_probs)),
        value=0.25,
        choice=TokenChoice(list(token_ids), list(token_log_probs)),
        parse_failed=failed,
    )


class CharTokenizer:
    def decode(self, ids):
        return "".join(chr(ord("a") + i) for i in ids)


def test_scoring_steps_hold_every_candidate_probability_and_the_advantages_are_gae():
    recorder = EpisodeRecorder(1, gamma=0.9, gae_lambda=0.8)
    log_probs = torch.log_softmax(torch.tensor([0.1, 2.0, -1.0]), -1).tolist()
    rewards, values = [0.0, 0.5, 1.0], [0.2, 0.4, 0.6]
    assert recorder.wants(0) and not recorder.wants(1)
    for reward, value in zip(rewards, values):
        recorder.add_step(0, "you see a ball", scoring_decision(log_probs, 2, value), reward)
    recorder.end_episode(0, seed=7, success=True, terminated=True)
    [record] = recorder.records(env_steps=64, label="periodic", evaluation=3)
    assert (record.env_steps, record.label, record.evaluation, record.seed, record.length) == (
        64,
        "periodic",
        3,
        7,
        3,
    )
    assert record.episode_return == pytest.approx(1.5) and record.success
    step = record.steps[0]
    # sorted by probability, the chosen one marked
    assert step.candidates == ["action 1", "action 0", "action 2"] and step.chosen == 2
    assert step.probs == pytest.approx([math.exp(log_probs[i]) for i in (1, 0, 2)], rel=1e-3)
    expected, _ = compute_gae(
        torch.tensor([rewards]).T,
        torch.tensor([values]).T,
        torch.tensor([[False, False, True]]).T,
        torch.tensor([[False, False, True]]).T,
        torch.tensor([0.6]),
        0.9,
        0.8,
    )
    assert [s.advantage for s in record.steps] == pytest.approx(expected[:, 0].tolist(), rel=1e-3)


def test_generative_steps_hold_the_text_tokens_log_probs_and_the_fallback_flag():
    recorder = EpisodeRecorder(2, tokenizer=CharTokenizer())
    recorder.add_step(
        1, "cards sum to 12", generative_decision("xyz", [0, 1, 2], [-0.5, -1.0, -2.0], True), -1.5
    )
    recorder.end_episode(1, seed=3, success=False, terminated=True)
    [record] = recorder.records(0, "before", 0)
    step = record.steps[0]
    assert (step.text, step.tokens, step.parse_failed, step.action) == ("xyz", ["a", "b", "c"], True, "stay")
    assert step.token_log_probs == pytest.approx([-0.5, -1.0, -2.0]) and step.candidates is None


def test_records_are_bounded(monkeypatch):
    monkeypatch.setattr(rec, "MAX_STEPS", 5)
    monkeypatch.setattr(rec, "MAX_CANDIDATES", 4)
    recorder = EpisodeRecorder(1)
    log_probs = torch.log_softmax(torch.arange(10.0), -1).tolist()
    for _ in range(12):
        recorder.add_step(0, "x" * 10_000, scoring_decision(log_probs, 0), 1.0)
    recorder.end_episode(0, 0, False, terminated=False)
    [record] = recorder.records(0, "after", 0)
    assert record.length == 12 and record.episode_return == 12.0 and len(record.steps) == 5
    step = record.steps[0]
    assert len(step.observation) == rec.MAX_TEXT_CHARS and step.observation.endswith("…")
    # the three most probable and the chosen (least probable) one
    assert step.candidates == ["action 9", "action 8", "action 7", "action 0"] and step.chosen == 3
    assert len(record.to_json()) < 5 * (rec.MAX_TEXT_CHARS + 300)


def test_an_evaluation_stores_at_most_max_evaluation_bytes(monkeypatch, caplog):
    recorder = EpisodeRecorder(5)
    for episode in range(5):
        recorder.add_step(episode, "y" * 900, scoring_decision([-0.1, -2.4], 0), 1.0)
        recorder.end_episode(episode, episode, True, True)
    size = len(recorder.records(0, "after", 0)[0].to_json()) + 1  # the five are the same size
    monkeypatch.setattr(rec, "MAX_EVALUATION_BYTES", 3 * size + size // 2)
    kept = recorder.records(0, "after", 0)
    assert [r.episode for r in kept] == [0, 1, 2]
    assert "Recorded 3 of the 5 episodes of evaluation 0" in caplog.text
    monkeypatch.setattr(rec, "MAX_EVALUATION_BYTES", 10)
    assert [r.episode for r in recorder.records(0, "after", 0)] == [0]  # the first always


def test_append_read_and_trim_round_trip(tmp_path):
    path = tmp_path / "episodes.jsonl"
    first = EpisodeRecord(8, "before", 0, 0, 1, "greedy", 0.5, False, 2)
    second = EpisodeRecord(16, "after", 1, 0, 1, "greedy", 1.0, True, 1)
    recorder = EpisodeRecorder(1)
    recorder.add_step(0, "o", scoring_decision([-0.1, -2.4], 0), 1.0)
    recorder.end_episode(0, 1, True, True)
    [with_steps] = recorder.records(24, "after", 2)
    append_episode_records(path, [first])
    append_episode_records(path, [second, with_steps])
    assert read_episode_records(path) == [first, second, with_steps]
    assert json.loads(path.read_text().splitlines()[2])["steps"][0]["probs"] == with_steps.steps[0].probs
    assert trim_episode_records(path, 16) == 1
    assert read_episode_records(path) == [first, second]
    assert not list(tmp_path.glob(".episodes.jsonl-*")), "atomic writes leave no temporary file"


def _one_record():
    recorder = EpisodeRecorder(1)
    recorder.add_step(0, "you see a red ball", scoring_decision([-0.2, -1.7], 1), 1.0)
    recorder.end_episode(0, 5, True, True)
    return recorder.records(32, "after", 1)


def test_rows_and_markdown_show_the_probabilities():
    records = _one_record()
    columns, rows = episode_rows(records)
    row = dict(zip(columns, rows[0]))
    assert (
        row["observation"] == "you see a red ball" and row["action"] == "action 1" and row["env_steps"] == 32
    )
    assert row["probabilities"] == "; ".join(
        f"{c}: {p}" for c, p in zip(records[0].steps[0].candidates, records[0].steps[0].probs)
    )
    text = episode_markdown(records[0])
    assert "you see a red ball" in text and "**→** `action 1`" in text and "success" in text


def test_wandb_offline_gets_a_table_of_the_episodes(tmp_path):
    wandb = pytest.importorskip("wandb")
    logger = RunLogger(tmp_path, LoggingConfig(progress=False, wandb=WandbConfig(mode="offline")))
    try:
        logger.log_episodes(32, _one_record())
    finally:
        logger.close()
        wandb.teardown()  # its wandb-core service process would outlive the test
    tables = list(tmp_path.glob("wandb/offline-run-*/files/media/table/eval/episodes_*.table.json"))
    assert len(tables) == 1, list(tmp_path.rglob("*"))
    table = json.loads(tables[0].read_text())
    assert table["columns"][:6] == ["env_steps", "label", "episode", "step", "observation", "action"]
    assert table["data"][0][4] == "you see a red ball"


def test_tensorboard_gets_the_episodes_as_text(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = RunLogger(tmp_path, LoggingConfig(progress=False, tensorboard=True))
    logger.log_episodes(32, _one_record())
    logger.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    [tag] = [t for t in events.Tags()["tensors"] if t.startswith("eval/episode_0")]
    [event] = events.Tensors(tag)
    assert event.step == 32
    assert "you see a red ball" in event.tensor_proto.string_val[0].decode()


def _rollout_step(n, decision, done0, reward0=0.0, live0=True, start0=False):
    import numpy as np

    from llmgym.algorithms.on_policy import RolloutStep

    return RolloutStep(
        env_steps=n,
        observations=[f"o{n}", "other"],
        actions=[1, 1],
        decisions=[decision, decision],
        rewards=np.array([reward0, 5.0], dtype=np.float32),
        penalties=np.zeros(2),
        terminated=np.array([done0, True]),
        truncated=np.array([False, False]),
        truncation_values=np.zeros(2, dtype=np.float32),
        next_observations=["next", "next"],
        infos=[{"success": reward0 > 0}, {}],
        live=np.array([live0, True]),
        episode_starts=np.array([start0, True]),
    )


def test_the_training_sampler_records_env_0s_next_whole_episode_after_each_arm():
    from llmgym.report.records import TrainingEpisodeSampler

    sampler = TrainingEpisodeSampler(lambda obs: f"seen {obs}", gamma=1.0, gae_lambda=1.0)
    decision = scoring_decision([math.log(0.25), math.log(0.75)], 1)

    def step(n, done0, reward0=0.0, start0=False):
        sampler.on_step(None, _rollout_step(n, decision, done0, reward0, start0=start0))

    step(2, False, start0=True)  # not armed: nothing
    sampler.arm(3)
    step(4, False)  # env 0 mid-episode: wait for its end
    step(6, True)
    step(8, False, start0=True)  # the next episode, whole
    step(10, True, reward0=1.0)
    step(12, True, start0=True)  # done: nothing more until the next arm
    [record] = sampler.take()
    assert sampler.take() == []
    assert (record.env_steps, record.label, record.evaluation, record.seed, record.policy) == (
        10,
        "train",
        3,
        -1,
        "training",
    )
    assert record.length == 2 and record.success and record.episode_return == 1.0
    assert [s.observation for s in record.steps] == ["seen o8", "seen o10"]
    assert record.steps[0].probs == [0.75, 0.25] and record.steps[0].chosen == 0
    assert [s.advantage for s in record.steps] == [
        pytest.approx(0.5),
        pytest.approx(0.5),
    ]  # return 1 - value 0.5


def test_the_training_sampler_skips_steps_outside_the_episodes_trained_on_and_restarts_a_cut_episode():
    # GRPO and RLOO: env 0 steps on, not live, after its episode of the round ended; a round that ends
    # with env 0's episode still running cuts it, and the next round's first step starts a new one
    from llmgym.report.records import TrainingEpisodeSampler

    sampler = TrainingEpisodeSampler(lambda obs: f"seen {obs}", gamma=1.0, gae_lambda=1.0)
    decision = scoring_decision([math.log(0.25), math.log(0.75)], 1)
    sampler.arm(0)
    sampler.on_step(None, _rollout_step(2, decision, True, start0=True))  # round 1 ends env 0's episode
    sampler.on_step(None, _rollout_step(4, decision, False, live0=False))  # discarded steps: not recorded
    sampler.on_step(None, _rollout_step(6, decision, False, start0=True))  # round 2: recorded...
    sampler.on_step(None, _rollout_step(8, decision, False, start0=True))  # ...cut by round 3: start over
    sampler.on_step(None, _rollout_step(10, decision, True, reward0=1.0))
    [record] = sampler.take()
    assert [s.observation for s in record.steps] == ["seen o8", "seen o10"]
    assert (record.env_steps, record.evaluation, record.length, record.success) == (10, 0, 2, True)
