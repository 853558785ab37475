"""The categorical math of the policies: the temperature is applied in one function, the old names still import."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import llmgym.agents.policies as policies
from llmgym.agents import actions, distributions
from llmgym.agents.distributions import masked_log_softmax, pad_candidate_scores, tempered_logits
from llmgym.agents.policies import CandidatePolicy
from llmgym.errors import InputError

AGENTS = Path(distributions.__file__).parent


def test_tempered_logits_divides_by_the_temperature_and_refuses_a_non_positive_one():
    scores = torch.tensor([-1.0, -2.0, -4.0])
    torch.testing.assert_close(tempered_logits(scores, 2.0), torch.tensor([-0.5, -1.0, -2.0]))
    assert torch.equal(tempered_logits(scores, 1.0), scores)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(InputError, match="temperature"):
            tempered_logits(scores, bad)


def test_act_and_evaluate_see_the_same_tempered_softmax():
    """The candidate policy's per-prompt log-probs (act) equal the padded batch's (evaluate, reference KL)."""
    policy = CandidatePolicy(temperature=0.7)
    rows = [torch.tensor([-1.0, -3.0]), torch.tensor([-0.5, -0.25, -2.0])]
    logits, mask = pad_candidate_scores(rows, temperature=policy.temperature)
    batch = masked_log_softmax(logits, mask)
    for i, row in enumerate(rows):
        torch.testing.assert_close(policy.log_probs(row), batch[i, : row.numel()])


def _temperature_divisions(path: Path) -> list[str]:
    """``x / temperature`` and ``x / self.temperature`` in ``path``, with the function they stand in."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                right = node.right
                name = right.attr if isinstance(right, ast.Attribute) else getattr(right, "id", None)
                if name == "temperature":
                    found.append(f"{path.name}:{node.lineno} in {function.name}")
    return found


def test_the_temperature_is_applied_in_one_function():
    found = [hit for path in sorted(AGENTS.glob("*.py")) for hit in _temperature_divisions(path)]
    assert len(found) == 1 and found[0].endswith("in tempered_logits"), found


@pytest.mark.parametrize("module", [actions, distributions])
def test_the_moved_names_still_import_from_policies(module):
    moved = [name for name in module.__all__ if name in policies.__all__]
    assert moved, module.__name__
    for name in moved:
        assert getattr(policies, name) is getattr(module, name), name
