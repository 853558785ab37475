"""Benchmark scripts that a results page quotes run end to end (on the tiny model, in seconds)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_babyai_bc_probe_clones_the_scripted_policy(tiny_model_dir):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "babyai_bc_probe.py",
            "gotoredball",
            f"model.name={tiny_model_dir}",
            "model.trunk_cache_mb=0",
            "--steps",
            "4",
            "--minibatch",
            "4",
            "--train-states",
            "16",
            "--test-states",
            "8",
            "--log-every",
            "2",
            "--eval-episodes",
            "2",
            "--learning-rate",
            "1e-2",
        ],
        cwd=ROOT / "benchmarks",
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "16 train states, 8 test states" in proc.stdout
    losses = [float(x) for x in re.findall(r"loss (\d+\.\d+)", proc.stdout)]
    accuracies = [float(x) for x in re.findall(r"test accuracy (\d\.\d+)", proc.stdout)]
    assert len(losses) == 2 and len(accuracies) == 3 and all(0.0 <= a <= 1.0 for a in accuracies)
    assert re.search(r"cloned policy, greedy: success \d\.\d\d on 2 episodes", proc.stdout)


def test_babyai_bc_probe_refuses_a_config_without_the_action_head():
    proc = subprocess.run(
        [sys.executable, "babyai_bc_probe.py", "gotoredball", "agent.action_head=false"],
        cwd=ROOT / "benchmarks",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "agent.action_head=true" in proc.stderr


def test_gpu_check_runs_end_to_end_on_cpu():
    """benchmarks/gpu_check.sh --device cpu --tiny: every check runs (timings not judged), none fails."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "SKIP_SETUP": "1",
        "PYTHON": sys.executable,
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--device", "cpu", "--tiny"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    lines = {
        line.split(":")[0].split()[1]: line.split()[0]
        for line in proc.stdout.splitlines()
        if line.startswith(("PASS", "FAIL", "SKIP"))
    }
    assert lines == {
        "placement": "PASS",
        "score_equal_fp32": "PASS",
        "score_speed": "PASS",
        "generate_speed": "PASS",
        "fused_attention": "SKIP",
        "vllm_generate_speed": "SKIP",
        "vllm_after_update": "SKIP",
        "score_equal_bf16": "PASS",
        "score_bf16_vs_fp32": "PASS",
        "peak_memory": "SKIP",
        "ppo_lora_update": "PASS",
        "quickstart": "PASS",
        "qlora": "SKIP",
        "two_servers_one_gpu": "SKIP",
        "fsdp": "SKIP",
        "all": "PASS",
    }
    assert re.search(r"PASS quickstart: [\d.]+ env steps/s \(32 env steps\)", proc.stdout)


def test_textgen_table_summarises_a_setting_over_its_seeds(monkeypatch):
    spec = importlib.util.spec_from_file_location("textgen_table", ROOT / "benchmarks" / "textgen_table.py")
    table = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "textgen_table", table)  # its dataclasses look their module up
    spec.loader.exec_module(table)
    fluency = {"kl_ref": 1.0, "perplexity_ref": 4.0, "distinct-2": 0.5}
    rows = [
        table.PolicyRow("zero-shot", [0.0, 0.0], fluency, None, []),
        table.PolicyRow("ppo (kl-s0)", [1.0, 1.0], fluency, 60.0, []),
        table.PolicyRow("ppo (kl-s1)", [0.0, 0.0], {**fluency, "kl_ref": 3.0}, 60.0, []),
        table.PolicyRow("ppo (kl-s2)", [0.5, 0.5], fluency, 60.0, []),
        table.PolicyRow("ppo (warm)", [1.0, 0.0], fluency, 60.0, []),
    ]
    groups = table.seed_groups(rows)
    assert list(groups) == ["ppo (kl)", "ppo (warm)"] and len(groups["ppo (kl)"]) == 3
    # seed means 1.0, 0.0, 0.5: their IQM (the mean, with fewer than 4) and the pooled mean are 0.5; KL (1 + 3 + 1) / 3
    line = table.group_line("ppo (kl)", groups["ppo (kl)"])
    assert (
        line.startswith("| ppo (kl) | 3 | 0.500 [0.000, 1.000] | 0.500 [")
        and "| 1.667 | 4.00 | 0.500 |" in line
    )


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_sharding_memory_prints_half_a_replicas_state_per_fsdp_server():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "sharding_memory.py", "--hidden-size", "64", "--layers", "2"],
        cwd=ROOT / "benchmarks",
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(re.findall(r"^(none|fsdp) +[01] ", proc.stdout, re.MULTILINE)) == 4
    ratio = float(re.search(r"largest fsdp server / replica: (\d\.\d+) with 2 servers", proc.stdout)[1])
    assert 0.45 < ratio < 0.6
