# gradacc: `make run` trains on the embedded defaults, `make test` runs the test suite.
PY_VERSION ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: setup run test lint typecheck bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PY_VERSION) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(PY) -m trainer_core run examples/sentiment_k4.json --output-dir var/runs/demo

test: setup lint typecheck
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: setup
	$(VENV)/bin/mypy trainer_core

bench: setup
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) var .mypy_cache .ruff_cache .pytest_cache
