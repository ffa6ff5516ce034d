# gradacc: `make run` runs the service demo on the embedded defaults, `make test` runs the tests.
PY_VERSION ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: setup browser run test test-heavy lint typecheck bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PY_VERSION) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m pip install -q --no-deps tinker-cookbook==0.6.1  # see pyproject.toml's dev extra
	touch $(STAMP)

setup: $(STAMP)

# The embedded stack (SQLite + a filesystem broker under var/), a job per backend with K = 1 and 4.
run: setup
	$(PY) -m commands.cli demo

# The dashboard's browser test needs Debian's chromium and Playwright (a no-op once installed).
browser: setup
	sh scripts/install_browser.sh $(PY)

# Test processes take a test file each at a time, the costliest files first (tests/schedule.py
# orders them and turns xdist's reordering off). Three processes on 2 cores: the third
# fills the time the others wait on servers and workers. Figures: docs/testing.md.
test: setup browser lint typecheck
	$(PY) -m pytest -q -n 3 --dist loadfile --durations=15 -m "not heavy"

# The cases of minutes each that `make test` leaves out (Ray pause, cancel and embedded runs, a
# gang's warm-stopped node): run before a release touching executors or gangs.
test-heavy: setup
	$(PY) -m pytest -q -n 2 --dist loadfile -m heavy

# lint-imports checks the layer contracts in pyproject.toml ([tool.importlinter]).
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

typecheck: setup
	$(VENV)/bin/mypy trainer_core gradacc api worker commands

# service_poll.py measures with wrk when it is installed (a C client, lighter than Python's).
bench: setup
	command -v wrk >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get install -y -q wrk >/dev/null; } \
		|| echo "wrk is not installed: bench/service_poll.py falls back to its Python client"
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) var .mypy_cache .ruff_cache .pytest_cache
