"""Issue 35, item 1: an export never replaces what it exports, nor anything but a previous export."""

import shutil
from pathlib import Path

import pytest

from llmgym.cli import main
from llmgym.errors import CheckpointError, ExportError
from llmgym.export import export_run
from llmgym.run.trainer import Trainer
from tests.algorithms.helpers import tiny_config

RUN = [
    "env.kwargs.length=2",
    "algorithm.rollout_steps=4",
    "env.num_envs=2",
    "train.total_env_steps=16",
    "train.checkpoint_every=8",
    "model.lora.r=4",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model_dir):
    """Two LoRA runs side by side (checkpoints at 8 and 16 env steps), copied per test."""
    root = tmp_path_factory.mktemp("runs")
    for name in ("run", "other"):
        trainer = Trainer(
            tiny_config(
                root, "llmgym/Countdown-v0", *RUN, f"model.name={tiny_model_dir}", f"train.run_name={name}"
            )
        )
        trainer.train()
        trainer.close()
    return root


@pytest.fixture()
def runs(trained, tmp_path):
    root = Path(shutil.copytree(trained, tmp_path / "runs"))
    (root / "notes.txt").write_text("mine")
    return root


def _snapshot(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("where", ["the run", "its checkpoints", "a checkpoint", "the folder above the run"])
def test_force_never_replaces_the_run_its_checkpoints_or_a_folder_above(runs, where):
    run = runs / "run"
    out = {
        "the run": run,
        "its checkpoints": run / "checkpoints",
        "a checkpoint": run / "checkpoints" / "step-0000000016",
        "the folder above the run": runs,
    }[where]
    before = _snapshot(runs)
    with pytest.raises(
        ExportError,
        match="--out .* (is|holds|lies inside) .*what is exported|--out .*is not a previous export",
    ):
        export_run(run, out, force=True)
    assert _snapshot(runs) == before
    assert (runs / "notes.txt").read_text() == "mine"


def test_force_replaces_a_previous_export_only(runs, tmp_path, capsys):
    run = runs / "run"
    out = tmp_path / "export"
    export_run(run, out)
    assert export_run(run, out, force=True).path == out  # a previous export: replaced
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    assert main(["export", str(run), "--out", str(mine), "--force"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmgym export: error: --out ") and "not a previous export" in err
    assert (mine / "thesis.tex").read_text() == "years of work"


def test_out_dot_is_a_typed_error(runs, tmp_path, monkeypatch, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    assert main(["export", str(runs / "run"), "--out", "."]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmgym export: error: --out . is the current folder")
    assert list(empty.iterdir()) == []


@pytest.mark.parametrize(
    "name", ["../../other/checkpoints/step-0000000016", "ABSOLUTE", "step-0000000016/..", "latest"]
)
def test_checkpoint_takes_only_a_checkpoint_name_of_the_run(runs, tmp_path, name):
    if name == "ABSOLUTE":
        name = str(runs / "other" / "checkpoints" / "step-0000000016")
    with pytest.raises(
        CheckpointError, match=r"--checkpoint .* is not a checkpoint name of .*step-0000000008"
    ):
        export_run(runs / "run", tmp_path / "out", checkpoint=name)
    assert not (tmp_path / "out").exists()


def test_force_never_deletes_what_an_export_did_not_write(runs, tmp_path, capsys):
    """Issue 44, item 1: a previous export plus a git clone, notes and a model folder: --force touches nothing."""
    run = runs / "run"
    out = tmp_path / "hub-clone"
    export_run(run, out)
    (out / ".git" / "objects").mkdir(parents=True)
    (out / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (out / "notes.md").write_text("my notes")
    (out / "base-model").mkdir()
    (out / "base-model" / "config.json").write_text("{}")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert main(["export", str(run), "--out", str(out), "--force"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"llmgym export: error: --out {out} holds a previous export and 3 entries")
    assert ".git" in err and "notes.md" in err and "base-model" in err and "nothing was touched" in err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    (out / "notes.md").unlink()
    shutil.rmtree(out / ".git")
    shutil.rmtree(out / "base-model")
    assert export_run(run, out, force=True).path == out  # only the export's own files: replaced


def test_force_refuses_a_folder_with_the_marker_files_but_no_file_list(runs, tmp_path):
    """Two marker files (what --force once trusted) no longer make a folder replaceable."""
    out = tmp_path / "looks-like-an-export"
    out.mkdir()
    (out / "llmgym_heads.json").write_text("{}")
    (out / "llmgym_config.yaml").write_text("{}")
    (out / "thesis.tex").write_text("years of work")
    with pytest.raises(ExportError, match=r"not a previous export \(it lacks llmgym_export.json"):
        export_run(runs / "run", out, force=True)
    assert (out / "thesis.tex").read_text() == "years of work"
