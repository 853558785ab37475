import json
import logging
import os
import random
import re

import numpy as np
import pytest
import torch

from llmgym.atomic_io import write_atomic_dir
from llmgym.checkpoint import (
    capture_rng_state,
    check_resume_config,
    clean_crash_leftovers,
    latest_checkpoint,
    load_checkpoint_config,
    load_trainer_state,
    restore_rng_state,
    save_checkpoint,
    verify_manifest,
    write_manifest,
)
from llmgym.errors import CheckpointError, ConfigError


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

    return save_checkpoint(
        run_dir, step, save_llm, {"env_steps": step}, {"t": torch.arange(3)}, "a: 1\n", keep=2
    )


def test_save_points_latest_and_prunes(tmp_path):
    for step in (10, 20, 30):
        _save(tmp_path, step)
    latest = latest_checkpoint(tmp_path)
    assert latest.name == "step-0000000030"
    state, tensors = load_trainer_state(latest)
    assert state == {"env_steps": 30} and torch.equal(tensors["t"], torch.arange(3))
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step-*")) == [
        "step-0000000020",
        "step-0000000030",
    ]


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


def test_manifest_names_a_missing_or_corrupted_file(tmp_path):
    folder = _save(tmp_path, 10)
    verify_manifest(folder)
    (folder / "llm" / "weights.txt").write_text("bit rot")
    with pytest.raises(CheckpointError, match=r"weights.txt is corrupted"):
        verify_manifest(folder)
    (folder / "llm" / "weights.txt").unlink()
    with pytest.raises(CheckpointError, match=r"weights.txt is missing"):
        verify_manifest(folder)


def test_nested_manifest_is_verified_through_the_outer_one(tmp_path):
    (tmp_path / "inner").mkdir()
    (tmp_path / "inner" / "a.bin").write_bytes(b"a")
    write_manifest(tmp_path / "inner")
    write_manifest(tmp_path)
    assert json.loads((tmp_path / "manifest.json").read_text())["sha256"].keys() == {"inner/manifest.json"}
    (tmp_path / "inner" / "a.bin").write_bytes(b"b")
    with pytest.raises(CheckpointError, match=r"a.bin is corrupted"):
        verify_manifest(tmp_path)


@pytest.mark.parametrize(
    "damage",
    [
        lambda f: (f / "trainer_tensors.pt").write_bytes(b"not a pickle"),
        lambda f: (f / "trainer_state.json").write_text("{truncated"),
        lambda f: (f / "trainer_state.json").unlink(),
        lambda f: (f / "manifest.json").unlink(),
        lambda f: (f / "manifest.json").write_text("[]"),
    ],
    ids=["tensors-garbage", "state-truncated", "state-missing", "manifest-missing", "manifest-garbage"],
)
def test_damaged_latest_falls_back_to_the_older_checkpoint_with_a_warning(tmp_path, caplog, damage):
    _save(tmp_path, 10)
    damage(_save(tmp_path, 20))
    with caplog.at_level(logging.WARNING, logger="llmgym.checkpoint"):
        folder = latest_checkpoint(tmp_path)
    assert folder.name == "step-0000000010"
    assert "older checkpoint" in caplog.text and "step-0000000020" in caplog.text
    assert load_trainer_state(folder)[0] == {"env_steps": 10}


def test_no_complete_checkpoint_is_a_checkpoint_error_naming_the_files(tmp_path):
    (_save(tmp_path, 10) / "trainer_tensors.pt").write_bytes(b"x")
    (_save(tmp_path, 20) / "llm" / "weights.txt").unlink()
    with pytest.raises(
        CheckpointError, match=r"(?s)20.*weights.txt is missing.*10.*trainer_tensors.pt is corrupted.*new run"
    ):
        latest_checkpoint(tmp_path)


@pytest.mark.parametrize(
    "pointer", [None, "garbage\n", "step-0000000099\n"], ids=["missing", "garbage", "dangling"]
)
def test_a_bad_latest_pointer_falls_back_to_the_newest_complete_checkpoint(tmp_path, caplog, pointer):
    _save(tmp_path, 10)
    _save(tmp_path, 20)
    latest = tmp_path / "checkpoints" / "latest"
    latest.unlink() if pointer is None else latest.write_text(pointer)
    with caplog.at_level(logging.WARNING, logger="llmgym.checkpoint"):
        assert latest_checkpoint(tmp_path).name == "step-0000000020"
    assert "latest" in caplog.text


def test_saving_after_a_fallback_drops_the_abandoned_newer_checkpoint(tmp_path):
    for step in (10, 20, 30):
        _save(tmp_path, step)
    (tmp_path / "checkpoints" / "step-0000000030" / "trainer_state.json").unlink()
    assert latest_checkpoint(tmp_path).name == "step-0000000020"
    _save(tmp_path, 25)
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step-*")) == [
        "step-0000000020",
        "step-0000000025",
    ]


def test_crash_leftovers_are_cleaned_and_an_orphaned_old_folder_moved_back(tmp_path):
    good = _save(tmp_path, 10, payload="good")
    root = tmp_path / "checkpoints"
    (root / ".step-0000000020-tmp-abc" / "llm").mkdir(parents=True)
    (root / ".latest-xyz").write_text("step-0000000020\n")
    os.replace(good, root / ".step-0000000010-old-4242")  # killed between the two renames of a rewrite
    (tmp_path / ".metrics.jsonl-q").write_text("")
    (tmp_path / ".config.yaml-q").write_text("")
    (root / "notes.txt").write_text("mine")
    clean_crash_leftovers(tmp_path)
    assert sorted(p.name for p in root.iterdir()) == ["latest", "notes.txt", "step-0000000010"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert (latest_checkpoint(tmp_path) / "llm" / "weights.txt").read_text() == "good"
    _save(tmp_path, 20)
    os.makedirs(root / ".step-0000000020-old-7")  # its replacement did take its place: just delete it
    clean_crash_leftovers(tmp_path)
    assert sorted(p.name for p in root.iterdir()) == [
        "latest",
        "notes.txt",
        "step-0000000010",
        "step-0000000020",
    ]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to name fsynced descriptors")
def test_every_checkpoint_file_and_folder_is_fsynced(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        path = os.path.relpath(os.readlink(f"/proc/self/fd/{fd}"), tmp_path / "checkpoints")
        synced.append(
            re.sub(r"^\.step-0000000010-tmp-[^/]+", "step", re.sub(r"^\.latest-.*", "latest", path))
        )
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    _save(tmp_path, 10)
    files = {"llm/weights.txt", "trainer_state.json", "trainer_tensors.pt", "config.yaml", "manifest.json"}
    assert set(synced) == {f"step/{f}" for f in files} | {"step", "step/llm", "latest", "."}
    assert synced.count(".") == 2  # the checkpoints folder, after each rename into it


SAVED = {
    "model": {"name": "m", "lora": {"r": 4}},
    "env": {"id": "a", "num_envs": 2, "kwargs": {"length": 2}},
    "train": {"seed": 0, "total_env_steps": 16, "resume": None},
    "logging": {"log_every": 1},
}


def _changed(**sections):
    new = json.loads(json.dumps(SAVED))
    for dotted, value in sections.items():
        *path, leaf = dotted.split("__")
        node = new
        for key in path:
            node = node[key]
        node[leaf] = value
    return new


def test_resume_config_refuses_changes_that_break_exactness_naming_each():
    new = _changed(
        model__lora__r=8, env__num_envs=4, env__kwargs__length=3, train__seed=1, train__total_env_steps=32
    )
    with pytest.raises(ConfigError) as info:
        check_resume_config(SAVED, new, "ckpt")
    message = str(info.value)
    for change in (
        "model.lora.r: 4 -> 8",
        "env.num_envs: 2 -> 4",
        "env.kwargs.length: 2 -> 3",
        "train.seed: 0 -> 1",
    ):
        assert change in message
    assert "total_env_steps" not in message and "train.run_name" in message
    with pytest.raises(ConfigError, match=r"model.lora: \{'r': 4\} -> None"):
        check_resume_config(SAVED, _changed(model__lora=None), "ckpt")


def test_resume_config_accepts_harmless_changes_in_one_log_line(caplog):
    new = _changed(train__total_env_steps=32, logging__log_every=2, train__resume="runs/a")
    with caplog.at_level(logging.WARNING, logger="llmgym.checkpoint"):
        accepted = check_resume_config(SAVED, new, "ckpt")
    assert accepted == ["train.total_env_steps: 16 -> 32", "logging.log_every: 1 -> 2"]
    assert len(caplog.records) == 1 and "train.total_env_steps: 16 -> 32" in caplog.text
    assert check_resume_config(SAVED, SAVED, "ckpt") == []


def test_checkpoint_config_is_read_safely_and_must_be_a_mapping(tmp_path):
    assert load_checkpoint_config(_save(tmp_path, 10)) == {"a": 1}
    folder = save_checkpoint(tmp_path, 20, lambda f: f.mkdir(), {}, {}, "- !!python/object:os.system x\n")
    with pytest.raises(CheckpointError, match="config.yaml is unreadable"):
        load_checkpoint_config(folder)
    folder = save_checkpoint(tmp_path, 30, lambda f: f.mkdir(), {}, {}, "[1, 2]\n")
    with pytest.raises(CheckpointError, match="holds no config mapping"):
        load_checkpoint_config(folder)


def test_cuda_rng_states_restore_by_device_number_not_by_name():
    from llmgym.checkpoint import cuda_rng_states

    tensors = {"torch": "cpu-state", **{f"cuda{i}": f"state-{i}" for i in (10, 2, 0, 1, 11, 3)}}
    assert [i for i, _ in cuda_rng_states(tensors, 12)] == [0, 1, 2, 3, 10, 11]
    assert cuda_rng_states(tensors, 12)[4] == (10, "state-10")  # cuda10's state goes to device 10, not 2
    assert cuda_rng_states(tensors, 2) == [
        (0, "state-0"),
        (1, "state-1"),
    ]  # devices this machine lacks: skipped


def test_a_checkpoint_config_written_before_a_rename_reads_under_the_new_keys(tmp_path):
    (tmp_path / "config.yaml").write_text("algorithm:\n  name: grpo\n  group_size: 8\n  clip_range: 0.1\n")
    with pytest.warns(FutureWarning, match="algorithm.group_size"):
        saved = load_checkpoint_config(tmp_path)
    assert saved == {"algorithm": {"name": "grpo", "group": {"size": 8}, "ppo": {"clip_range": 0.1}}}


def test_a_run_saved_before_eval_split_decoding_resumes_with_it_set():
    # the split evaluation's decoding changes what is evaluated, not what is trained (a separate agent, its own
    # seeded generators): a checkpoint written without the key resumes under either value
    for decoding in ("greedy", "sample"):
        new = _changed(train__eval_split_decoding=decoding)
        assert check_resume_config(SAVED, new, "ckpt") == [
            f"train.eval_split_decoding: '<absent>' -> '{decoding}'"
        ]


def test_an_nlpo_run_saved_before_evaluate_masked_resumes_with_it_set():
    # it decides how the separate evaluation agent decodes, not what is collected or trained
    saved = {**SAVED, "algorithm": {"name": "nlpo", "nlpo": {"mask_top_p": 0.9}}}
    for masked in (True, False):
        new = json.loads(json.dumps(saved))
        new["algorithm"]["nlpo"]["evaluate_masked"] = masked
        assert check_resume_config(saved, new, "ckpt") == [
            f"algorithm.nlpo.evaluate_masked: '<absent>' -> {masked!r}"
        ]
