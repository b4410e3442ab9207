# Two set-up commands: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint format docs docs-serve bench bench-peers clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e ".[training]"
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e ".[dev]"
	touch $@ $(VENV)/.installed

# The demo's own folders start anew each time (a run folder is never overwritten).
demo: $(VENV)/.installed
	rm -rf runs/demo
	$(BIN)/python examples/cartpole_ppo.py --out runs/demo/cartpole
	$(BIN)/python examples/snake_ppo.py --out runs/demo/snake

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check src tests examples benchmarks
	$(BIN)/ruff format --check src tests examples benchmarks

format: $(VENV)/.installed-dev
	$(BIN)/ruff check --fix src tests examples benchmarks
	$(BIN)/ruff format src tests examples benchmarks

docs: $(VENV)/.installed-dev
	$(BIN)/mkdocs build --strict

docs-serve: $(VENV)/.installed-dev
	$(BIN)/mkdocs serve

# Two test processes: most of the suite is single-threaded compilation, so two keep
# both cores of a 2-core machine busy. Two passes: the tests not marked slow (and
# the slow ones marked compile_bound) are mostly XLA compiling small programs, which
# XLA's CPU fusion emitters off makes about a third faster (the compiled code runs
# slower: the other slow tests, long runs, keep XLA's defaults, as users run). See
# CHANGELOG, Internal.
FAST_COMPILE := --xla_cpu_use_fusion_emitters=false
test: lint
	XLA_FLAGS="$$XLA_FLAGS $(FAST_COMPILE)" $(BIN)/python -m pytest -n 2 --dist worksteal -m "not slow or compile_bound"
	$(BIN)/python -m pytest -n 2 --dist worksteal -m "slow and not compile_bound"
	$(BIN)/mkdocs build --strict

bench: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/env_throughput.py
	$(BIN)/python benchmarks/ppo_cartpole.py
	$(BIN)/python benchmarks/trainer_overhead.py
	$(BIN)/python benchmarks/gymnasium_bridge.py
	$(BIN)/python benchmarks/snake.py
	$(BIN)/python benchmarks/value_based.py --parts buffer defaults
	$(BIN)/python benchmarks/scaling.py
	$(BIN)/python benchmarks/multiagent.py

# Peers (gymnax, rejax) live in their own venv: rejax 0.1.3 needs gymnax 0.0.9.
PEERS := .venv-peers
$(PEERS)/.installed: benchmarks/requirements-peers.txt
	$(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install --upgrade pip
	$(PEERS)/bin/python -m pip install -r benchmarks/requirements-peers.txt
	$(PEERS)/bin/python -m pip install -e .
	touch $@

bench-peers: $(PEERS)/.installed
	$(PEERS)/bin/python benchmarks/peers.py
	$(PEERS)/bin/python benchmarks/snake.py
	$(PEERS)/bin/python benchmarks/value_based.py --parts peers

clean:
	rm -rf $(VENV) $(PEERS) site runs .pytest_cache .ruff_cache
