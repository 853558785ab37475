import json
import random

import numpy as np
import pytest
import torch

from llmgym.checkpoint import (
    capture_rng_state,
    latest_checkpoint,
    load_trainer_state,
    restore_rng_state,
    save_checkpoint,
    write_atomic_dir,
)
from llmgym.errors import CheckpointError


def _draws():
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_rng_state_round_trip_through_json():
    json_part, tensors = capture_rng_state()
    json_part = json.loads(json.dumps(json_part))
    first = _draws()
    restore_rng_state(json_part, tensors)
    assert _draws() == first


def _save(run_dir, step, payload="w"):
    def save_llm(folder):
        folder.mkdir(parents=True)
        (folder / "weights.txt").write_text(payload)

    return save_checkpoint(run_dir, step, save_llm, {"env_steps": step}, {"t": torch.arange(3)}, "a: 1\n", keep=2)


def test_save_points_latest_and_prunes(tmp_path):
    for step in (10, 20, 30):
        _save(tmp_path, step)
    latest = latest_checkpoint(tmp_path)
    assert latest.name == "step-0000000030"
    state, tensors = load_trainer_state(latest)
    assert state == {"env_steps": 30} and torch.equal(tensors["t"], torch.arange(3))
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step-*")) == ["step-0000000020", "step-0000000030"]


def test_crash_while_writing_keeps_last_good_checkpoint(tmp_path):
    _save(tmp_path, 10, payload="good")

    def crashing_llm_save(folder):
        folder.mkdir(parents=True)
        (folder / "weights.txt").write_text("half")
        raise KeyboardInterrupt  # killed mid-write

    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, 20, crashing_llm_save, {}, {}, "")
    latest = latest_checkpoint(tmp_path)
    assert latest.name == "step-0000000010"
    assert (latest / "llm" / "weights.txt").read_text() == "good"
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".")]


def test_rewriting_a_folder_replaces_it_whole(tmp_path):
    write_atomic_dir(tmp_path / "x", lambda d: (d / "a").write_text("1"))
    write_atomic_dir(tmp_path / "x", lambda d: (d / "b").write_text("2"))
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["b"]


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="checkpoints/latest"):
        latest_checkpoint(tmp_path)
