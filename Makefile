# trainguard — developer and CI entry points (CONTRACT §6). Run from the repository root.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
export PROMETHEUS_DISABLE_CREATED_SERIES := True

.PHONY: install test test-fast lint fmt demo bench bench-quick clean help

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/'

install: $(BIN)/trainguard  ## create .venv/ with trainguard and its pinned dependencies

$(BIN)/trainguard: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	@touch $@

test: install  ## every test; real-service tests skip (with the reason) where a service is missing
	$(BIN)/pytest

test-fast: install  ## unit tests only, no real services
	$(BIN)/pytest -m 'not prometheus and not slurm and not e2e'

lint: install  ## ruff, mypy --strict, promtool and amtool checks
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python scripts/lint_monitoring.py

fmt: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

demo: install  ## replay realistic incidents through a real `trainguard serve` and show its decisions
	$(BIN)/python scripts/demo.py

bench: install  ## benchmarks; JSON under bench/results/
	$(BIN)/python bench/ingest.py

bench-quick: install
	$(BIN)/python bench/ingest.py --quick

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache *.egg-info
