"""Hostile YAML (nested aliases, interpolation chains) is refused quickly with a ConfigError."""

from pathlib import Path

import pytest

from llmgym.cli import main
from llmgym.config import load_config
from llmgym.errors import ConfigError

LAUGHS = "".join(
    f"    {name}: &{name} [{', '.join([f'*{prev}'] * 9) if prev else ', '.join(['lol'] * 9)}]\n"
    for prev, name in zip(["", *"abcdefgh"], "abcdefghi")
)


def _config(tmp_path: Path, kwargs: str) -> Path:
    path = tmp_path / "hostile.yaml"
    path.write_text("env:\n  kwargs:\n" + kwargs, encoding="utf-8")
    return path


@pytest.mark.timeout(60)
def test_a_1kb_billion_laughs_is_refused_by_load_config_and_llmgym_config(tmp_path, capsys):
    path = _config(tmp_path, LAUGHS)
    assert path.stat().st_size < 1024
    with pytest.raises(ConfigError, match="nested aliases"):
        load_config(path)
    assert main(["config", str(path)]) == 2
    assert "nested aliases" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_billion_laughs_in_an_override_is_refused():
    value = "[&a [1,1,1,1,1,1,1,1,1], " + ", ".join(
        f"&{b} [{', '.join([f'*{a}'] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi")
    )
    with pytest.raises(ConfigError, match="nested aliases"):
        load_config(None, [f"env.kwargs.x={value}]"])


@pytest.mark.timeout(60)
def test_a_recursive_alias_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="contains itself"):
        load_config(_config(tmp_path, "    a: &a [1, *a]\n"))


@pytest.mark.timeout(60)
def test_doubling_interpolations_are_refused(tmp_path):
    chain = "    a0: x\n" + "".join(f"    a{i}: ${{.a{i - 1}}}${{.a{i - 1}}}\n" for i in range(1, 40))
    assert len(chain) < 1024
    with pytest.raises(ConfigError, match="more than 10,000 interpolations"):
        load_config(_config(tmp_path, chain))


@pytest.mark.timeout(60)
def test_a_long_interpolation_chain_is_refused(tmp_path):
    chain = "    a0: x\n" + "".join(f"    a{i}: ${{env.kwargs.a{i - 1}}}\n" for i in range(1, 200))
    with pytest.raises(ConfigError, match="chain of more than 32 interpolations"):
        load_config(_config(tmp_path, chain))


@pytest.mark.timeout(60)
def test_a_self_referring_interpolation_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="refers back to itself"):
        load_config(_config(tmp_path, "    a: ${.b}\n    b: x${.a}\n"))


def test_ordinary_aliases_and_interpolations_still_load(tmp_path):
    path = tmp_path / "fine.yaml"
    path.write_text(
        "train:\n  seed: 3\n  eval_episodes: ${train.seed}\n"
        "env:\n  kwargs:\n    common: &common {size: 5}\n    a: *common\n    b: *common\n"
        "    depth: ${.a.size}\n",
        encoding="utf-8",
    )
    config = load_config(path)
    assert config.train.eval_episodes == 3
    assert config.env.kwargs["b"] == {"size": 5}
    assert config.env.kwargs["depth"] == 5


@pytest.mark.timeout(60)
def test_llmgym_convert_refuses_billion_laughs(tmp_path, capsys):
    path = tmp_path / "rl4lms.yaml"
    path.write_text("tokenizer:\n  laughs:\n" + LAUGHS, encoding="utf-8")
    assert main(["convert", str(path)]) == 2
    assert "nested aliases" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_a_lamorel_config_with_billion_laughs_is_refused(tmp_path):
    from llmgym.compat.lamorel_config import load_lamorel_config

    path = tmp_path / "lamorel.yaml"
    path.write_text("lamorel_args:\n  laughs:\n" + LAUGHS, encoding="utf-8")
    with pytest.raises(ConfigError, match="nested aliases"):
        load_lamorel_config(path)
