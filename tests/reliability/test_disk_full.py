"""Issue 35, item 7: a full disk during a checkpoint is a typed error saying so; the previous checkpoint stays."""

import errno
import os

import pytest

from llmgym.checkpoint import latest_checkpoint, save_checkpoint
from llmgym.cli import main
from llmgym.errors import DiskFullError


def _save_llm(folder):
    folder.mkdir()
    (folder / "weights.bin").write_bytes(b"w" * 64)


def _disk_full(folder):
    folder.mkdir()
    (folder / "weights.bin").write_bytes(b"w" * 16)
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(folder / "weights.bin"))


def test_a_full_disk_during_a_checkpoint_names_the_disk_and_the_intact_previous_checkpoint(tmp_path):
    first = save_checkpoint(tmp_path, 8, _save_llm, {"steps": 8}, {}, "a: 1\n")
    with pytest.raises(
        DiskFullError, match=r"disk is full.*step-0000000016.*previous checkpoint .*step-0000000008 is intact"
    ):
        save_checkpoint(tmp_path, 16, _disk_full, {"steps": 16}, {}, "a: 1\n")
    assert latest_checkpoint(tmp_path) == first
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", "step-0000000008"]


def test_train_on_a_full_disk_ends_with_one_line_not_a_traceback(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    import llmgym.checkpoint

    def full(folder):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(llmgym.checkpoint, "write_manifest", full)
    args = [
        "train",
        f"model.name={tiny_model_dir}",
        f"train.output_dir={tmp_path}",
        "train.run_name=r",
        "env.id=llmgym/EchoWord-v0",
        "train.total_env_steps=2",
        "env.num_envs=2",
        "algorithm.rollout_steps=1",
        "algorithm.epochs=1",
        "algorithm.minibatch_size=2",
        "train.eval_episodes=0",
        "train.eval_before=false",
        "logging.progress=false",
        "logging.plot=false",
    ]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmgym train: error: the disk is full") and err.count("\n") == 1
    assert "no checkpoint was written before" in err and f"train.resume={tmp_path / 'r'}" not in err
