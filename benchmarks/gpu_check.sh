#!/usr/bin/env bash
# GPU check: set up as the README says (`make setup` = scripts/setup.sh), then run benchmarks/gpu_check.py,
# which prints one `PASS|FAIL|SKIP <check>: <number> ...` line per check (placement, score equality fp32/bf16,
# score and generate speed, a PPO+LoRA quickstart run, 4-bit loading, 2 servers on one GPU) and exits 1 on a FAIL.
# With 2+ GPUs it then compares 1 vs 2 servers and model_parallelism_size 1 vs 2 (benchmarks/distributed.py).
# Sized for one H100/H200 in under 8 minutes (setup included when the wheels are cached).
#
# Usage: benchmarks/gpu_check.sh [--device cuda|cuda:N|cpu] [--tiny] [--model NAME]
#   --device cpu --tiny   the CPU smoke run (timings meaningless): tests/test_benchmarks.py runs it
#   SKIP_SETUP=1          use the current environment instead of running scripts/setup.sh
#   PYTHON=...            the python to run (default: .venv/bin/python after setup)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${SKIP_SETUP:-0}" != "1" ]; then
  bash scripts/setup.sh
fi
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
status=0
"$PY" benchmarks/gpu_check.py "$@" || status=$?
DEVICE=cuda
prev=""
for arg in "$@"; do
  if [ "$prev" = "--device" ]; then DEVICE=$arg; fi
  prev=$arg
done
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
