"""``llmgym train ... distributed.llm_processes=2 distributed.sharding=fsdp`` end to end (tiny model, real Ray).

The quickstart config (bfloat16 weights, LoRA on the top blocks: FSDP's mixed precision) trains on
two sharded servers and checkpoints, resumes from its sharded checkpoint for more steps, and
exports a PEFT adapter gathered whole from the shards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[2]
SMOKE = [
    "env.num_envs=2",
    "algorithm.rollout_steps=4",
    "algorithm.epochs=1",
    "algorithm.minibatch_size=4",
    "train.eval_episodes=2",
    "train.eval_before=false",
    "logging.progress=false",
    "logging.report=false",
    "logging.plot=false",
    "env.max_episode_steps=4",
    "distributed.llm_processes=2",
    "distributed.sharding=fsdp",
]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "llmgym.cli", *args], capture_output=True, text=True, env=env, timeout=280
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_llmgym_train_on_two_sharded_servers_checkpoints_resumes_and_exports(tiny_model_dir, tmp_path):
    common = [f"model.name={tiny_model_dir}", f"train.output_dir={tmp_path}", "train.run_name=run", *SMOKE]
    _cli("train", "quickstart", "train.total_env_steps=8", *common)
    run = tmp_path / "run"
    first = sorted((run / "checkpoints").glob("step-*"))
    assert [p.name for p in first] == ["step-0000000008"]
    meta = json.loads((first[0] / "llm" / "meta.json").read_text())
    assert (meta["weights"], meta["servers"]) == ("sharded", 2)
    assert sorted(p.name for p in (first[0] / "llm" / "sharded").iterdir()) == [
        ".metadata",
        "__0_0.distcp",
        "__1_0.distcp",
    ]
    _cli("train", "quickstart", "train.total_env_steps=16", f"train.resume={run}", *common)
    assert (run / "checkpoints" / "step-0000000016").is_dir()
    _cli("export", str(run), "--out", str(tmp_path / "export"))
    assert (tmp_path / "export" / "adapter_model.safetensors").is_file()
