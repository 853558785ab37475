"""Reading sharded (DCP) LLM checkpoints in one process: a crafted index runs no code."""

from __future__ import annotations

import json
import os
import pickle

import pytest

from llmgym.checkpoint import write_manifest
from llmgym.config import ModelConfig
from llmgym.errors import CheckpointError
from llmgym.llm.local import LocalLLM
from llmgym.llm.modules import ValueHead
from llmgym.llm.sharded_state import SHARDED_DIR
from llmgym.testing import tiny_causal_lm


class Payload:
    """What a crafted pickle would run on load: creates a file."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.mkdir, (self.target,))


def test_a_sharded_checkpoint_whose_index_runs_code_is_refused(tmp_path):
    folder = tmp_path / "llm"
    (folder / SHARDED_DIR).mkdir(parents=True)
    (folder / SHARDED_DIR / ".metadata").write_bytes(pickle.dumps(Payload(str(tmp_path / "pwned"))))
    meta = {"format": 1, "weights": "sharded", "sharding": "fsdp", "servers": 2, "modules": ["value"]}
    (folder / "meta.json").write_text(json.dumps(meta))
    write_manifest(folder)
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    llm = LocalLLM(ModelConfig(name="tiny"), {"value": ValueHead()}, model=model, tokenizer=tokenizer)
    with pytest.raises(CheckpointError, match=r"asks for posix.mkdir, which a DCP index never holds"):
        llm.load(folder)
    assert not (tmp_path / "pwned").exists()
