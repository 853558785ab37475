"""The package's layers import one way: llm <- agents <- algorithms; envs imports none of them.

``LAYERS`` is the intended layering, lowest floor first: a room (a top-level module or a folder of
``llmgym/``) may import its own floor and the floors below, never a floor above.
``scripts/import_graph.py`` measures the graph against it (rooms, floors, arrows, circles).
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "llmgym"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "import_path", "atomic_io", "jsonl", "yaml_limits", "version", "lifetime", "stats", "testing"),
    ("config",),  # the schema: it knows no env, no model and no other library's format
    ("run_lock", "checkpoint"),  # run-folder formats (llm/persistence.py writes verified manifests)
    ("envs", "text_metrics"),
    ("llm",),
    ("agents",),
    ("algorithms",),
    ("report",),  # episode records and the readers of run folders, under the HTML report
    ("compat",),
    # orchestration: a run is built, trained, evaluated, logged, swept and exported here; build,
    # evaluation, budgets and requirements are the old paths of run/'s modules (OLD_PATHS)
    ("run", "metrics", "sweep", "export", "integrations", "build", "evaluation", "budgets", "requirements"),
    ("cli",),
    ("llmgym",),  # the package's public names (llmgym/__init__.py)
)

#: Old import paths kept for one release (issue 42 moved the modules into ``run/``): they reach their new
#: module through ``importlib`` when a name is read, never at import, so they draw no arrow back up
#: (``llmgym.import_path.moved_module``, tests/run/test_old_paths.py); llmgym's own code imports the new
#: paths.
OLD_PATHS = (
    "llmgym.algorithms.trainer",
    "llmgym.algorithms.text_evaluation",
    "llmgym.algorithms.fluency",
    "llmgym.build",
    "llmgym.evaluation",
    "llmgym.budgets",
    "llmgym.requirements",
)

#: Arrows back up that stay, with why.
ALLOWED_BACK_UP: dict[tuple[str, str], str] = {}

# layer -> the llmgym subpackages it must never import (at module level or inside a function)
FORBIDDEN = {
    "llm": ("llmgym.agents", "llmgym.algorithms", "llmgym.envs"),
    "agents": ("llmgym.algorithms",),
    "envs": ("llmgym.llm", "llmgym.agents", "llmgym.algorithms"),
    "algorithms": ("llmgym.report", "llmgym.metrics", "llmgym.run", *OLD_PATHS),
    "config.py": ("llmgym.compat", "llmgym.envs", "llmgym.llm"),
    "report": ("llmgym.sweep", "llmgym.run", "llmgym.metrics", "llmgym.cli", *OLD_PATHS),
}


def _graph_tool():
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up while it is built
    spec.loader.exec_module(module)
    return module


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _files(layer: str) -> list[Path]:
    return [PACKAGE / layer] if layer.endswith(".py") else sorted((PACKAGE / layer).rglob("*.py"))


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_no_upward_import(layer):
    offending = [
        f"{path.relative_to(PACKAGE.parent)} imports {name}"
        for path in _files(layer)
        for name in _imports(path)
        if any(name == banned or name.startswith(banned + ".") for banned in FORBIDDEN[layer])
    ]
    assert not offending, offending


def test_the_package_does_not_import_the_old_paths():
    offending = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            offending += [f"{path.relative_to(PACKAGE.parent)} imports {n}" for n in names if n in OLD_PATHS]
    assert not offending, offending


def test_no_arrow_back_up_from_the_layering():
    tool = _graph_tool()
    graph = tool.measure(PACKAGE, LAYERS)
    assert not graph.unplaced, f"rooms without a floor: {graph.unplaced}; place them in LAYERS"
    back = {arrow: graph.room_imports[arrow] for arrow in graph.back if arrow not in ALLOWED_BACK_UP}
    assert not back, back


def test_no_circle_across_folders():
    graph = _graph_tool().measure(PACKAGE, LAYERS)
    assert not graph.across, graph.across


def test_the_graph_tool_sees_relative_imports_function_imports_and_circles(tmp_path):
    package = tmp_path / "pkg"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("from . import a\n")
    (package / "low" / "a.py").write_text("def f():\n    from pkg.high import g\n")
    (package / "high.py").write_text("from .low.a import f\n")
    graph = _graph_tool().measure(package, [("low",), ("high",), ("pkg",)])
    assert graph.arrows == [("high", "low"), ("low", "high")]
    assert graph.back == [("low", "high")] and graph.floors == 1
    assert graph.circles == [["pkg.high", "pkg.low.a"]] and graph.across == graph.circles


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
