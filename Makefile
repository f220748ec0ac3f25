# trainguard — developer and CI entry points (docs/interfaces.md §6). Run from the repository root.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Debian packages the lab and the real-service tests need (installed by `make install-lab` as root).
LAB_PACKAGES := prometheus prometheus-alertmanager slurm-wlm munge ripgrep systemd victoria-metrics postgresql
# Where pip finds torch for the lab. Empty: your pip index (PyPI's Linux wheel is the CUDA build, about
# 2.5 GB with its nvidia-* wheels). The lab needs only the CPU build:
#   make install-lab TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
export PROMETHEUS_DISABLE_CREATED_SERIES := True

.PHONY: doctor install install-lab test test-fast lint fmt demo demo-stop demo-replay bench bench-quick bench-scale dist dist-check clean help

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/'

doctor:  ## check this machine's prerequisites (README) and say what to install
	@scripts/doctor.sh

install: $(BIN)/trainguard  ## create .venv/ with trainguard and its pinned dependencies

$(BIN)/trainguard: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	@touch $@

install-lab: install  ## the lab's needs: Debian packages (as root) and CPU PyTorch + matplotlib in .venv
	@if [ "$$(id -u)" = 0 ]; then \
	  missing=$$(for p in $(LAB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	  if [ -n "$$missing" ]; then \
	    echo "apt-get install $$missing"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=600 $$missing; \
	  fi; \
	else echo "not root: skipping apt-get install $(LAB_PACKAGES) (the lab needs root anyway)"; fi
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt \
	  $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) -e '.[dev,lab]'

test: install  ## every test; real-service tests skip (with the reason) where a service is missing
	$(BIN)/pytest

test-fast: install  ## unit tests only, no real services
	$(BIN)/pytest -m 'not prometheus and not postgres and not slurm and not e2e'

lint: install  ## ruff (banned-api: no subprocess/kubernetes outside responder/schedulers/), mypy --strict, structure, promtool and amtool checks
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python scripts/check_structure.py
	$(BIN)/python scripts/lint_monitoring.py
	$(BIN)/python -m dashboards.generate --check

fmt: install  ## ruff format and autofix
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

demo: install-lab  ## the whole stack on real Slurm: a GPU fault in real training, detected, isolated, recovered (KEEP=1: leave it running; MODE=approve: an operator approves)
	$(BIN)/python scripts/lab/demo.py $(if $(KEEP),--keep) $(if $(MODE),--mode $(MODE))

demo-stop:  ## end the lab that `make demo KEEP=1` left running
	$(BIN)/python scripts/lab/demo.py --stop

demo-replay: install  ## no root needed: replay recorded incidents through a real `trainguard serve`
	$(BIN)/python scripts/demo.py

bench: install-lab  ## all benchmarks; JSON and reports under bench/results/ (about an hour)
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/reliability.py
	$(BIN)/python bench/corpus.py
	$(BIN)/python bench/corpus_fresh.py
	$(BIN)/python bench/scan.py
	$(BIN)/python bench/slurm_action.py --trials 10
	$(BIN)/python bench/detection.py --trials 20
	$(BIN)/python bench/lab.py --trials 3
	$(BIN)/python -m bench.ha --trials 10
	$(BIN)/python -m bench.ha --signal stop --trials 3

bench-quick: install-lab  ## one lab trial per fault class plus two healthy runs (under 10 minutes)
	$(BIN)/python bench/lab.py --quick

bench-scale: install-lab  ## fleets of 100-4,000 simulated nodes through Prometheus and VictoriaMetrics+vmalert (docs/scale.md; over an hour)
	$(BIN)/python -m bench.fleet.scale --storm 100
	$(BIN)/python -m bench.fleet.report

dist: install  ## the wheel and sdist under dist/ (python -m build): rules, dashboards, examples and units inside
	$(BIN)/python -m build --no-isolation --outdir dist .

dist-check: install  ## build, install the wheel into a clean venv outside the checkout, check every export
	PYTHON=$(BIN)/python scripts/check_dist.sh

clean:  ## remove the virtualenv, caches and outputs
	rm -rf $(VENV) dist build .mypy_cache .ruff_cache .pytest_cache *.egg-info demo-output test-artifacts
