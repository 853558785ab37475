# Two commands: `make train` (set up, then train the default agent) and `make test` (set up, lint, type-check, test).
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup train test lint typecheck unit clean

setup:
	@bash scripts/setup.sh

train: setup
	$(VENV)/bin/llmgym train $(ARGS)

lint: setup
	$(VENV)/bin/ruff check llmgym tests benchmarks examples scripts

typecheck: setup
	$(VENV)/bin/mypy llmgym

unit: setup
	$(PY) -m pytest -q --timeout=300 $(PYTEST_ARGS)

test: lint typecheck unit

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
