"""Issue 35, item 7: which file a config argument names when a local file and a shipped config share a name."""

import logging

import pytest

from llmgym.config import resolve_config, shipped_configs


@pytest.fixture()
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "babyai_ppo").write_text("train:\n  seed: 77\n")
    (tmp_path / "quickstart.yaml").write_text("train:\n  seed: 78\n")
    return tmp_path


def test_a_bare_shipped_name_is_the_shipped_config_with_a_warning_naming_the_local_file(here, caplog):
    with caplog.at_level(logging.WARNING, logger="llmgym.config"):
        assert resolve_config("babyai_ppo") == shipped_configs()["babyai_ppo"]
    assert "shipped config 'babyai_ppo'" in caplog.text and "./babyai_ppo" in caplog.text
    assert resolve_config("./babyai_ppo").read_text() == "train:\n  seed: 77\n"  # with a slash: the file


def test_a_yaml_file_name_is_the_local_file_with_a_warning_naming_the_shipped_config(here, caplog):
    with caplog.at_level(logging.WARNING, logger="llmgym.config"):
        assert resolve_config("quickstart.yaml").read_text() == "train:\n  seed: 78\n"
    assert "shadows the shipped config 'quickstart'" in caplog.text and "without .yaml" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="llmgym.config"):
        assert resolve_config("quickstart") == shipped_configs()["quickstart"]
        assert resolve_config("textgen_ppo.yaml") == shipped_configs()["textgen_ppo"]  # no such file here
    assert caplog.text == ""


def test_the_rule_is_in_the_config_reference():
    from pathlib import Path

    from llmgym.config import CONFIG_ARGUMENT_RULE

    docs = (Path(__file__).resolve().parents[2] / "docs" / "config.md").read_text()
    assert CONFIG_ARGUMENT_RULE in docs
