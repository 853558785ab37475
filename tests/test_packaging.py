"""What a wheel ships and declares: configs as package data, dependencies that llmgym uses, extras that exist."""

import fnmatch
import importlib.resources
import re
from pathlib import Path

import pytest

from llmgym.config import shipped_configs
from llmgym.envs.registration import ENV_SPECS
from llmgym.run.requirements import _SETTING_EXTRAS

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SOURCE = {p: p.read_text() for p in (ROOT / "llmgym").rglob("*.py")}
# Declared dependencies that llmgym needs without importing them, and why.
USED_INDIRECTLY = {"gguf": "transformers reads .gguf weights (the default model) with it"}
IMPORT_NAMES = {"pyyaml": "yaml", "rouge-score": "rouge_score"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower()


def test_every_config_is_package_data_found_through_importlib_resources():
    on_disk = sorted(p.name for p in (ROOT / "llmgym" / "configs").glob("*.yaml"))
    assert len(on_disk) >= 7 and not (ROOT / "configs").exists()
    folder = importlib.resources.files("llmgym") / "configs"
    assert sorted(f.name for f in folder.iterdir() if f.name.endswith(".yaml")) == on_disk
    assert [f"{name}.yaml" for name in shipped_configs()] == on_disk
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["llmgym"]
    assert all(any(fnmatch.fnmatch(f"configs/{name}", pattern) for pattern in patterns) for name in on_disk)
    for name, file in shipped_configs().items():
        assert file.read_text().startswith("# "), (
            f"{name}.yaml has no header comment for `llmgym config list`"
        )


@pytest.mark.parametrize("requirement", PYPROJECT["project"]["dependencies"])
def test_every_dependency_is_imported_by_llmgym(requirement):
    name = _name(requirement)
    if name in USED_INDIRECTLY:
        return
    module = IMPORT_NAMES.get(name, name.replace("-", "_"))
    pattern = re.compile(rf"^\s*(import|from) {module}\b", re.MULTILINE)
    assert any(pattern.search(text) for text in SOURCE.values()), (
        f"{name} is declared but llmgym never imports it"
    )


def test_minigrid_and_trl_are_core_and_babyai_stays_an_alias():
    core = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    assert "minigrid" in core and "trl" in core  # trl: llmgym sft and llmgym.integrations.trl
    assert [_name(r) for r in PYPROJECT["project"]["optional-dependencies"]["babyai"]] == ["minigrid"]


def test_every_extra_named_in_an_error_exists():
    extras = set(PYPROJECT["project"]["optional-dependencies"])
    named = {
        m.group(1)
        for text in SOURCE.values()
        for m in re.finditer(r'require(?:_installed)?\(\s*"[^"]+",\s*"([^"]+)"', text)
    }
    named |= {extra.extra for entry in ENV_SPECS for extra in entry.extras}
    named |= {extra for _, _, _, extra in _SETTING_EXTRAS}
    assert named and named <= extras, f"errors name extras that pyproject lacks: {named - extras}"
