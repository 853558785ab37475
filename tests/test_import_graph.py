"""The package's layers import one way: llm <- agents <- algorithms; envs imports none of them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "llmgym"

# layer -> the llmgym subpackages it must never import (at module level or inside a function)
FORBIDDEN = {
    "llm": ("llmgym.agents", "llmgym.algorithms", "llmgym.envs"),
    "agents": ("llmgym.algorithms",),
    "envs": ("llmgym.llm", "llmgym.agents", "llmgym.algorithms"),
}


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_no_upward_import(layer):
    offending = [
        f"{path.relative_to(PACKAGE.parent)} imports {name}"
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        for name in _imports(path)
        if any(name == banned or name.startswith(banned + ".") for banned in FORBIDDEN[layer])
    ]
    assert not offending, offending


def test_no_string_dispatch_on_the_algorithm_name():
    hits = [
        str(path.relative_to(PACKAGE.parent))
        for path in PACKAGE.rglob("*.py")
        if 'name == "ppo"' in path.read_text() or 'name == "a2c"' in path.read_text()
    ]
    assert not hits, hits


def test_generation_and_masking_do_not_import_each_other():
    generation = _imports(PACKAGE / "llm" / "generation.py")
    masking = _imports(PACKAGE / "llm" / "masking.py")
    assert not ("llmgym.llm.masking" in generation and "llmgym.llm.generation" in masking)
