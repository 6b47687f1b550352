# connscale: `make demo` runs the main jobs on bundled data, `make test` the tests.
# Both create .venv (seeing system packages, so a CUDA torch installed there is
# used) and install the CPU build of torch only when no torch is importable.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_CPU ?= torch==2.13.0

.PHONY: install demo test lint bench clean docs

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet $(TORCH_CPU)
	$(PY) -m pip install --quiet -e ".[test,lint]"
	touch $@

install: $(VENV)/.installed

demo: install
	$(VENV)/bin/connscale demo --out demo_output

# pytest-xdist: one worker per core, at most 4 (the suite's heaviest tests use a few
# GB each); the slowest tests are listed at the end (--durations in pyproject.toml).
test: install
	$(PY) -m pytest -q -n auto --maxprocesses 4

# ruff (rules and formatting in pyproject.toml) and the import-layer contract
# (import-linter, also in pyproject.toml; ARCHITECTURE.md explains the layers).
lint: install
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/lint-imports

# The documentation site (docs/_build/html): the API reference, the user guide,
# the gallery (every example in examples/ runs), the CLI and BIDS outputs
# references. Warnings are errors; offline (no intersphinx).
$(VENV)/.docs-installed: $(VENV)/.installed
	$(PY) -m pip install --quiet -e ".[docs]"
	touch $@

docs: $(VENV)/.docs-installed
	$(PY) -m sphinx -b html -W --keep-going docs docs/_build/html

bench: install
	$(PY) benchmarks/bench_static.py --device cpu --quick

clean:
	rm -rf $(VENV) demo_output .pytest_cache docs/_build docs/api docs/auto_examples
