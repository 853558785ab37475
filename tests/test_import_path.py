"""A config is code: import paths outside llmgym need the user's opt-in, and must name the expected kind of object."""

from __future__ import annotations

import pytest

from llmgym.config import load_config
from llmgym.envs.datapools import load_datapool
from llmgym.envs.rewards import get_reward
from llmgym.errors import ConfigError
from llmgym.import_path import import_object
from llmgym.text_metrics import get_metric


def shout(prompt, completion, references):
    """A user reward (imported by path in these tests)."""
    return float(completion.isupper())


def prompts(n: int = 2):
    """A user datapool factory."""
    return [f"prompt {i}" for i in range(n)]


@pytest.fixture()
def no_opt_in(monkeypatch):
    monkeypatch.delenv("LLMGYM_ALLOW_IMPORTS", raising=False)


def test_an_os_system_datapool_is_refused_naming_the_opt_in(no_opt_in, tmp_path):
    marker = tmp_path / "ran"
    with pytest.raises(ConfigError, match=r"module 'os', outside llmgym.*LLMGYM_ALLOW_IMPORTS=os"):
        load_datapool("os:system", command=f"touch {marker}")
    assert not marker.exists()


def test_a_builtin_is_refused_even_when_its_module_is_allowed(monkeypatch, tmp_path):
    monkeypatch.setenv("LLMGYM_ALLOW_IMPORTS", "os")
    marker = tmp_path / "ran"
    with pytest.raises(ConfigError, match="not a Python function or class"):
        load_datapool("os:system", command=f"touch {marker}")
    assert not marker.exists()


@pytest.mark.parametrize(
    ("load", "spec"),
    [
        (get_reward, "subprocess:getoutput"),
        (get_metric, "shutil:rmtree"),
    ],
)
def test_rewards_and_metrics_outside_llmgym_are_refused(no_opt_in, load, spec):
    with pytest.raises(ConfigError, match="LLMGYM_ALLOW_IMPORTS"):
        load(spec)


@pytest.mark.parametrize(
    "override",
    [
        "algorithm.name=os:system",
        "algorithm.updater=os:system",
        "env.id=os:my/Env-v0",
    ],
)
def test_a_config_naming_code_outside_llmgym_is_refused_without_the_opt_in(no_opt_in, override):
    from llmgym.algorithms import algorithm_class
    from llmgym.algorithms.updaters import resolve_updater

    with pytest.raises(ConfigError, match="LLMGYM_ALLOW_IMPORTS=os"):
        config = load_config("quickstart", [override])
        algorithm_class(config.algorithm.name)
        resolve_updater(config.algorithm)


def test_an_allowed_user_module_works(monkeypatch):
    monkeypatch.setenv("LLMGYM_ALLOW_IMPORTS", "somewhere_else, tests.test_import_path")
    assert get_reward(f"{__name__}:shout")("p", "YES", []) == 1.0
    samples = load_datapool(f"{__name__}:prompts", n=3)
    assert [s.prompt for s in samples] == ["prompt 0", "prompt 1", "prompt 2"]


def test_a_star_allows_any_module_and_a_prefix_only_whole_names(monkeypatch):
    monkeypatch.setenv("LLMGYM_ALLOW_IMPORTS", "test")  # not a prefix of 'tests' as a module name
    with pytest.raises(ConfigError, match="LLMGYM_ALLOW_IMPORTS=tests"):
        import_object(f"{__name__}:shout", "reward")
    monkeypatch.setenv("LLMGYM_ALLOW_IMPORTS", "*")
    assert import_object(f"{__name__}:shout", "reward") is shout


def test_llmgym_own_functions_need_no_opt_in(no_opt_in):
    assert get_reward("llmgym.envs.rewards:sentiment")("p", "great", []) == 1.0
    with pytest.raises(ConfigError, match="not a Python function or class"):
        import_object("llmgym.import_path:ALLOW_IMPORTS_ENV", "reward")


@pytest.mark.timeout(300)
def test_llmgym_eval_of_a_crafted_config_runs_no_shell_command(no_opt_in, tmp_path, tiny_model_dir, capsys):
    from llmgym.cli import main

    marker = tmp_path / "ran"
    path = tmp_path / "config.yaml"  # what a crafted run folder's config.yaml can say
    path.write_text(
        "model:\n"
        f"  name: {tiny_model_dir}\n"
        "env:\n"
        "  id: llmgym/TextGen-v0\n"
        "  kwargs:\n"
        "    datapool: os:system\n"
        f"    datapool_kwargs: {{command: 'touch {marker}'}}\n"
        "agent:\n"
        "  type: generative\n"
        f"train:\n  output_dir: {tmp_path / 'runs'}\n",
        encoding="utf-8",
    )
    assert main(["eval", str(path), "--episodes", "1"]) == 2
    assert "LLMGYM_ALLOW_IMPORTS=os" in capsys.readouterr().err
    assert not marker.exists()
