"""Issue 44, item 10: ``${oc.env:VAR}`` in a config is resolved to run, and never written into a saved file.

config.yaml, the checkpoints' configs, the report and the export keep the interpolation itself; a
secret in the environment appears in no file of the run folder nor of its export.
"""

import secrets

import pytest

from llmgym.cli import main
from llmgym.config import config_to_dict, load_config
from tests.reliability.test_run_folders import SMOKE

VAR = "LLMGYM_TEST_SECRET_44"


def _files_holding(folder, secret):
    return [str(p) for p in folder.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_an_env_secret_is_used_but_written_nowhere(tiny_model_dir, tmp_path, monkeypatch, capsys):
    secret = f"s3cr3t-{secrets.token_hex(8)}"
    monkeypatch.setenv(VAR, secret)
    config = tmp_path / "mine.yaml"
    config.write_text(
        "logging:\n  wandb:\n    entity: ${oc.env:" + VAR + "}\n    project: p-${logging.wandb.entity}\n",
        encoding="utf-8",
    )
    loaded = load_config(config)
    assert loaded.logging.wandb.entity == secret and loaded.logging.wandb.project == f"p-{secret}"  # used
    saved = config_to_dict(loaded)["logging"]["wandb"]
    assert saved["entity"] == "${oc.env:" + VAR + "}" and saved["project"] == "p-${logging.wandb.entity}"

    runs = tmp_path / "runs"
    args = [
        "train",
        str(config),
        f"model.name={tiny_model_dir}",
        f"train.output_dir={runs}",
        *SMOKE,
        "model.lora.r=4",
    ]
    assert main([*args, "train.run_name=run", "logging.report=true"]) == 0
    run = runs / "run"
    assert "${oc.env:" + VAR + "}" in (run / "config.yaml").read_text()
    assert main([*args, f"train.resume={run}", "train.total_env_steps=8"]) == 0  # resumes: same config
    assert main(["report", str(run)]) == 0
    assert main(["export", str(run), "--out", str(tmp_path / "export")]) == 0
    assert main(["config", "show", str(run / "config.yaml")]) == 0
    assert secret not in capsys.readouterr().out
    assert (run / "report.html").is_file() and (tmp_path / "export" / "llmgym_config.yaml").is_file()
    assert _files_holding(tmp_path, secret) == []


def test_a_saved_interpolation_resolves_again_when_loaded(tmp_path, monkeypatch):
    monkeypatch.setenv(VAR, "first")
    loaded = load_config(None, ["logging.wandb.entity=${oc.env:" + VAR + "}"])
    path = tmp_path / "config.yaml"
    import yaml

    path.write_text(yaml.safe_dump(config_to_dict(loaded)))
    monkeypatch.setenv(VAR, "second")
    assert load_config(path).logging.wandb.entity == "second"
    monkeypatch.delenv(VAR)
    with pytest.raises(Exception, match=VAR):
        load_config(path)
