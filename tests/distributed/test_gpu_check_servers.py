"""benchmarks/gpu_check.py's "2 servers on one GPU" check, run on the CPU through the real Ray backend."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]
ROOT = Path(__file__).resolve().parents[2]


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module
    spec.loader.exec_module(module)
    return module


def test_two_servers_check_scores_like_one_in_process_llm(tiny_model_dir, capsys):
    gpu_check = _gpu_check()
    contexts, candidates = gpu_check.workload(tiny=True)
    gpu_check.check_two_servers(
        str(tiny_model_dir), torch.device("cpu"), contexts[:4], candidates[:4], on_cpu=True
    )
    out = capsys.readouterr().out
    assert out.startswith("PASS two_servers_one_gpu:"), out
    assert "2 Ray servers on cpu (0 GPU each)" in out and not gpu_check.FAILED
