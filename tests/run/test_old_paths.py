"""The old paths of the modules that moved into ``llmgym/run/`` keep working for one release (issue 42)."""

import importlib
import subprocess
import sys

import pytest

from tests.test_import_graph import OLD_PATHS, ROOT

NAMES = {
    "llmgym.algorithms.trainer": ("Trainer", "run_training", "evaluate_run", "TrainingStopped", "build_llm"),
    "llmgym.algorithms.text_evaluation": ("evaluate_splits", "metrics_table"),
    "llmgym.algorithms.fluency": ("fluency_metrics",),
    "llmgym.build": ("build_llm", "build_agent", "make_envs"),
    "llmgym.evaluation": ("evaluate", "play_episodes"),
    "llmgym.budgets": ("fit_prompt_budget",),
    "llmgym.requirements": ("check_requirements",),
}


def test_every_old_path_is_checked():
    assert set(NAMES) == set(OLD_PATHS)


@pytest.mark.parametrize("old", sorted(NAMES))
def test_an_old_path_gives_the_new_object_with_a_deprecation_warning(old):
    new = importlib.import_module("llmgym.run." + old.rpartition(".")[2])
    module = importlib.import_module(old)
    for name in NAMES[old]:
        with pytest.warns(DeprecationWarning, match=rf"{old} moved to {new.__name__}; import {name} from"):
            assert getattr(module, name) is getattr(new, name)


@pytest.mark.parametrize("old", sorted(NAMES))
def test_a_name_the_new_module_lacks_is_an_attribute_error(old):
    module = importlib.import_module(old)
    with pytest.raises(AttributeError, match="no_such_name"):
        module.no_such_name  # noqa: B018
    assert not hasattr(module, "__path__")


def test_from_import_of_an_old_path_warns_at_the_users_line():
    with pytest.warns(DeprecationWarning) as caught:
        from llmgym.algorithms.trainer import Trainer  # noqa: F401
    assert caught[0].filename == __file__


def test_importing_an_old_path_does_not_import_run():
    code = f"import sys, {', '.join(OLD_PATHS)}; print(sorted(m for m in sys.modules if m.startswith('llmgym.run')))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
