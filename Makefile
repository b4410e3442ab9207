# Two set-up commands: `make demo` and `make test`. Both create .venv on first use.
#
# The Python: 3.11 where it runs, else 3.12, 3.13, then `python3` (eqxrl needs 3.11 or
# newer). 3.11 first on purpose: pip gives it jax 0.10.2, the JAX every figure in
# benchmarks/ and the docs was measured with; 3.12 and 3.13 get jax 0.12, and
# `make test-pythons` runs the quick pass on all three. Choose another with
# `make PYTHON=python3.13 VENV=.venv-py3.13 test`. (A pyenv shim can exist for a
# version that is not selected, and fail when run: hence the check that it runs.)
PYTHON ?= $(shell for p in python3.11 python3.12 python3.13 python3; do \
	$$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
	&& { command -v $$p; break; }; done)
VENV ?= .venv
BIN := $(VENV)/bin

# Python's compiled bytecode lives in the venv (never beside the sources) and is
# written even where PYTHONDONTWRITEBYTECODE is set, as in CI's environment: there,
# every process compiled every module it imported again (eqxrl's type-checked
# modules, the test files' rewritten asserts: seconds per process, and the suite
# starts dozens). So pip compiles nothing when it installs (`--no-compile`: 30 of the
# 46 s of installing the dev extras went to compiling packages the suite never
# imports), and each module is compiled once, when it is first imported.
export PYTHONPYCACHEPREFIX := $(abspath $(VENV))/pycache
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test test-quick test-pythons test-floors lint format docs docs-serve \
	bench bench-peers bench-check venv-robot clean

$(BIN)/python:
	@test -n "$(PYTHON)" || { echo "make: no Python 3.11 or newer found (tried python3.11, python3.12, python3.13, python3); set PYTHON=/path/to/python3.x"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --no-compile -e ".[training]"
	touch $@

# The extras of a test venv: dev (every optional peer, linters, docs), or test (the
# suite alone; the peers' tests are skipped).
EXTRAS ?= dev
# FLOORS=1: every `>=` floor of pyproject.toml (core and EXTRAS) pinned exactly.
FLOORS ?=
$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(if $(FLOORS),$(BIN)/python tools/floor_constraints.py $(EXTRAS) > $(VENV)/floors.txt)
	$(BIN)/python -m pip install --no-compile $(if $(FLOORS),-c $(VENV)/floors.txt) \
		-e ".[$(EXTRAS)]"
	touch $@ $(VENV)/.installed

# The demo's own folders start anew each time (a run folder is never overwritten).
demo: $(VENV)/.installed
	rm -rf runs/demo
	$(BIN)/python examples/cartpole_ppo.py --out runs/demo/cartpole
	$(BIN)/python examples/snake_ppo.py --out runs/demo/snake

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check src tests examples benchmarks tools
	$(BIN)/ruff format --check src tests examples benchmarks tools

format: $(VENV)/.installed-dev
	$(BIN)/ruff check --fix src tests examples benchmarks tools
	$(BIN)/ruff format src tests examples benchmarks tools

docs: $(VENV)/.installed-dev
	$(BIN)/mkdocs build --strict

docs-serve: $(VENV)/.installed-dev
	$(BIN)/mkdocs serve

# Two test processes: most of the suite is single-threaded compilation, so two keep
# both cores of a 2-core machine busy. Two passes:
# - the first, every test but the `run_bound` and `xla_defaults` ones, is mostly
#   XLA compiling small programs that then run for milliseconds, so it trades run
#   speed for compile speed: LLVM without optimization
#   (`--xla_backend_optimization_level=0`: PPO's CartPole program compiles 3x
#   faster, DQN's 4x), XLA's CPU fusion emitters off (a third faster again) and
#   each program's code generated as one LLVM module
#   (`--xla_cpu_parallel_codegen_split_count=1`: splitting it for a thread pool
#   costs CPU time, and the suite's processes already keep every core busy; 8-10%
#   less CPU time over four test files). Each option is passed only where a probe
#   with it runs (jax 0.11 and newer reject the second, fatally), so the same
#   command works with every JAX. (`echo` without quotes joins the options with no
#   stray space: XLA reads an XLA_FLAGS of " " as a file name, fatally.)
# - the second keeps XLA's defaults, as users run: the `run_bound` tests (long
#   learning runs, whose code runs 2-3x slower unoptimized) and the `xla_defaults`
#   ones (floats compared bit for bit, whose last bits LLVM without optimization
#   computes otherwise).
# The second pass (one process) and the docs build run beside the first pass,
# their output kept in $(SECOND_PASS_LOG) and $(DOCS_LOG) and shown when the
# first ends (Ctrl-C stops all three): the processes keep both cores busy to the end
# (one pass after the other, each left a core idle while its last file ran, and the
# second started two processes that collected their files again).
# Each test file runs whole in one process (`--dist loadfile`): the tests of a file
# share its compiled programs, and each file's programs are released when it ends
# (tests/conftest.py), which a file split between the processes would undo. Both
# passes append each test's seconds to $(TEST_COSTS), and `make test` ends with the
# slowest tests and the cost of each file (tests/costs.py). See tests/README.md.
FAST_COMPILE := --xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false \
	--xla_cpu_parallel_codegen_split_count=1
KNOWN_FAST_COMPILE = $$(for option in $(FAST_COMPILE); do \
	XLA_FLAGS="$$XLA_FLAGS $$option" $(BIN)/python -c "import jax; jax.devices()" \
	>/dev/null 2>&1 && echo "$$option"; done)
TEST_COSTS := $(VENV)/test-costs.jsonl
SECOND_PASS_LOG := $(VENV)/second-pass.log
DOCS_LOG := $(VENV)/docs-build.log
# Compiled programs are shared through JAX's persistent cache (every program, however
# small: `--xla_...` flags are part of its key, so the passes never share one). The
# suite compiles about 13,000 programs, most of them the eager operations of network
# initialization and of the tests themselves, and each file's are released when it
# ends (tests/conftest.py): from the cache, the 5,900 compiled again in later files
# and in the other processes cost a read. Local runs keep the cache in the user's
# cache folder (never in the repository), so a second run compiles less. CI (CI=true)
# starts each run with an empty cache, in a temporary folder removed when the run
# ends: every figure in tests/README.md is such a run.
ifeq ($(filter true 1 yes,$(CI)),)
WITH_TEST_CACHE := export JAX_COMPILATION_CACHE_DIR="$${XDG_CACHE_HOME:-$$HOME/.cache}/eqxrl/jax-tests";
else
WITH_TEST_CACHE := export JAX_COMPILATION_CACHE_DIR="$$(mktemp -d -t eqxrl-jax-tests.XXXXXX)"; \
	trap 'rm -rf "$$JAX_COMPILATION_CACHE_DIR"' EXIT;
endif
WITH_TEST_CACHE += export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0;
PYTEST := EQXRL_TEST_COSTS=$(TEST_COSTS) $(BIN)/python -m pytest
TWO_PROCESSES := -n 2 --dist loadfile --no-loadscope-reorder
FAST_COMPILE_PYTEST = XLA_FLAGS="$$(echo $$XLA_FLAGS $(KNOWN_FAST_COMPILE))" $(PYTEST) \
	$(TWO_PROCESSES)
PRINT_VERSIONS := $(BIN)/python -c \
	"import sys, jax; print('Python', sys.version.split()[0], '| jax', jax.__version__)"
test: lint
	$(PRINT_VERSIONS)
	rm -f $(TEST_COSTS) $(SECOND_PASS_LOG) $(DOCS_LOG)
	@echo "The second pass (run_bound, xla_defaults) and the docs build run beside the first pass; their output follows it."
	$(WITH_TEST_CACHE) \
	$(PYTEST) -n 0 -m "run_bound or xla_defaults" > $(SECOND_PASS_LOG) 2>&1 & second=$$!; \
	$(BIN)/mkdocs build --strict > $(DOCS_LOG) 2>&1 & docs=$$!; \
	trap 'kill $$second $$docs 2>/dev/null; exit 130' INT TERM; \
	$(FAST_COMPILE_PYTEST) -m "not (run_bound or xla_defaults)"; first=$$?; \
	wait $$second; second=$$?; wait $$docs; docs=$$?; \
	echo "== the second pass ($(SECOND_PASS_LOG))"; cat $(SECOND_PASS_LOG); \
	echo "== the docs build ($(DOCS_LOG))"; cat $(DOCS_LOG); \
	test $$first -eq 0 && test $$second -eq 0 && test $$docs -eq 0
	$(BIN)/python tests/costs.py $(TEST_COSTS)

# The edit loop: the first pass without its learning runs, subprocesses, benchmark
# smoke runs and other tests over about 3 s (no lint, no docs): what test-pythons
# runs.
test-quick: $(VENV)/.installed-dev
	$(PRINT_VERSIONS)
	rm -f $(TEST_COSTS)
	$(WITH_TEST_CACHE) $(FAST_COMPILE_PYTEST) -m \
		"not (run_bound or xla_defaults or learning or subprocess or benchmark or slow)"
	$(BIN)/python tests/costs.py $(TEST_COSTS)

# The quick pass on each Python in PYTHONS, each in a venv of its own
# (.venv-py3.X, with the JAX pip picks for that Python and the dev extras), then on
# the newest Python with the test extras alone (.venv-py3.X-core: the newest JAX,
# which gymnax's cap holds back in the dev venv; the peers' tests are skipped).
# pyenv's installs are found where `python3.X` itself does not run.
PYTHONS ?= 3.11 3.12 3.13
test-pythons:
	@failed=""; for entry in $(PYTHONS) $(lastword $(PYTHONS))-core; do \
		version=$${entry%-core}; extras=dev; \
		test "$$entry" = "$$version" || extras=test; \
		python=$$(command -v python$$version); \
		$$python -c 'import sys' 2>/dev/null || \
			python=$$(ls -d $$HOME/.pyenv/versions/$$version.*/bin/python$$version 2>/dev/null | tail -n 1); \
		test -n "$$python" || { echo "test-pythons: no Python $$version found"; exit 1; }; \
		echo "== Python $$version ($$extras extras): $$python"; \
		$(MAKE) --no-print-directory PYTHON=$$python VENV=.venv-py$$entry \
			EXTRAS=$$extras test-quick || failed="$$failed $$entry"; \
	done; \
	test -z "$$failed" || { echo "test-pythons: failed on$$failed"; exit 1; }; \
	echo "test-pythons: passed on $(PYTHONS) $(lastword $(PYTHONS))-core"

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

# The robot kit's venv (benchmarks/sim_to_sim.py): MuJoCo Playground (with Brax and
# MJX), host MuJoCo, and the export and deploy extras. Playground pins its own JAX
# stack, so it is kept out of .venv.
ROBOT := .venv-robot
$(ROBOT)/.installed: pyproject.toml
	$(PYTHON) -m venv $(ROBOT)
	$(ROBOT)/bin/python -m pip install --upgrade pip
	$(ROBOT)/bin/python -m pip install -e ".[export,deploy,test]" playground
	touch $@

venv-robot: $(ROBOT)/.installed

# The quick pass on the oldest versions pyproject.toml claims (each `>=` floor of
# the core dependencies and the test extras installed exactly), in .venv-floor.
test-floors:
	$(MAKE) --no-print-directory VENV=.venv-floor EXTRAS=test FLOORS=1 test-quick

# The speed guard: the working tree against BASE (default: the upstream, else HEAD),
# each side in its own process, alternating; see benchmarks/bench_check.py. Run it on
# an idle machine before a stop that touches src/.
BASE ?=
bench-check: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/bench_check.py $(if $(BASE),--base $(BASE))

clean:
	rm -rf $(VENV) .venv-py3.* .venv-floor $(PEERS) site runs .pytest_cache .ruff_cache
