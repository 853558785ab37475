#!/usr/bin/env bash
# GPU check of the distributed backend: `score` throughput on the shared workload with
#   1. one LLM server on one GPU (and the in-process baseline);
#   2. model_parallelism_size 1 vs 2 (one server sharded over 2 GPUs) when 2+ GPUs are visible;
#   3. 1 vs 2 servers of one GPU each when 2+ GPUs are visible.
# Usage: benchmarks/gpu_check.sh [MODEL]   (default SmolLM2-135M-Instruct; PYTHON=... to pick python)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python
MODEL=${1:-SmolLM2-135M-Instruct}
NGPU=$("$PY" -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)")
echo "visible GPUs: $NGPU"
if [ "$NGPU" -lt 1 ]; then
  echo "no GPU visible: nothing to check (run benchmarks/distributed.py for the CPU numbers)"
  exit 0
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
echo "== 1 server on 1 GPU vs in-process ($MODEL)"
"$PY" benchmarks/distributed.py --model "$MODEL" --servers 1
if [ "$NGPU" -ge 2 ]; then
  echo "== model_parallelism_size 1 vs 2: one server on 1 GPU, then sharded over 2 GPUs"
  "$PY" benchmarks/distributed.py --model "$MODEL" --servers 1 --no-local --model-parallelism-size 1
  "$PY" benchmarks/distributed.py --model "$MODEL" --servers 1 --no-local --model-parallelism-size 2
  echo "== 1 vs 2 servers of 1 GPU each"
  "$PY" benchmarks/distributed.py --model "$MODEL" --servers 1 2 --no-local
else
  echo "only 1 GPU: model_parallelism_size 2 and 2 servers skipped (they need 2 GPUs)"
fi
