# streamstate developer targets. Needs Java 17 and Python >= 3.11 on the PATH.
#
#   make venv         .venv with streamstate installed editable (+ dev tools)
#   make demo         the temperature-alert showcase (examples/temperature_alerts.py)
#   make test         unit + integration tests, then ruff, mypy and the import layers
#   make test-unit    the unit tests only: no Spark, well under a minute
#   make test-cluster the cluster bed (tests/cluster: machines in network namespaces; root)
#   make lint         ruff + mypy + import-linter layers (enforced; ruff format is reported only)
#   make bench        the keyed-count benchmark (installs the "bench" extra)
#   make bench-peers  the same workload on Spark's stateful APIs and on PyFlink
#   make bench-docs   regenerate docs/benchmarks.md from benchmarks/results/*.json

PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
DEMO_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help venv demo test test-unit test-cluster lint bench bench-install bench-peers bench-docs clean

help:
	@sed -n 's/^#   //p' Makefile

# The interpreter: $(PY) if it is >= 3.11, otherwise python3.11.
$(BIN)/python:
	@py="$(PY)"; \
	if ! "$$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then \
		echo "$$py is missing or older than 3.11; trying python3.11"; py=python3.11; \
	fi; \
	echo "creating $(VENV) with $$py"; \
	"$$py" -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Re-installed whenever pyproject.toml changes.
$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@touch $@

$(VENV)/.installed-bench: pyproject.toml | $(VENV)/.installed-dev
	$(BIN)/python -m pip install --quiet -e ".[bench]"
	@touch $@

venv: $(VENV)/.installed-dev

demo: venv
	$(BIN)/python examples/temperature_alerts.py $(DEMO_ARGS)

test: venv
	$(BIN)/python -m pytest -q tests --ignore=tests/cluster $(PYTEST_ARGS)
	$(BIN)/python -m ruff check src tests examples tools
	$(BIN)/python -m mypy src
	$(BIN)/lint-imports

# its own step in .ci/run: many JVMs at once, a few minutes
test-cluster: venv
	$(BIN)/python -m pytest -q tests/cluster $(PYTEST_ARGS)

test-unit: venv
	$(BIN)/python -m pytest -q tests/unit $(PYTEST_ARGS)

lint: venv
	$(BIN)/python -m ruff check src tests examples tools
	$(BIN)/python -m ruff format --check src tests examples || echo "ruff format: the files above would be reformatted (not enforced)"
	$(BIN)/python -m mypy src
	$(BIN)/lint-imports

bench-install: $(VENV)/.installed-bench

bench: bench-install
	$(BIN)/python -m benchmarks.keyed_count

# Peers: bench-spark-peers (project .venv) and bench-pyflink (its own venv).
-include benchmarks/peers/Makefile.inc
ifeq ($(wildcard benchmarks/peers/Makefile.inc),)
bench-pyflink bench-spark-peers:
	@echo "benchmarks/peers/Makefile.inc is missing: no peer benchmarks to run"
endif

bench-peers: bench bench-spark-peers bench-pyflink

bench-docs: venv
	$(BIN)/python -m benchmarks.report

clean:
	rm -rf build dist .pytest_cache .ruff_cache .mypy_cache src/*.egg-info
