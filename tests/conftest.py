import collections
import functools
import json
import os
import runpy
import sys

import jax
import pytest

import costs

# Tests always run with runtime shape checking on: through the jaxtyping pytest
# plugin (`--jaxtyping-packages` in pyproject.toml) and eqxrl's own import hook.
# Both hooks wrap the same path finder, so the first to find a module is the one
# that instruments it: every module is instrumented once.
os.environ.pop("EQXRL_TYPECHECK", None)

jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, config):
    """Every run ends with its cost per test file (setup, call and teardown summed,
    in worker-seconds), beside pytest's slowest tests: the numbers that
    `tests/README.md`'s budget table is kept against. Where `EQXRL_TEST_COSTS`
    names a file, each test's seconds are appended to it instead, and
    `tests/costs.py` reports the passes of `make test` together."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller reports
        return
    seconds: dict[str, float] = collections.defaultdict(float)
    for reports in terminalreporter.stats.values():
        for report in reports:
            if isinstance(report, pytest.TestReport):
                seconds[report.nodeid] += report.duration
    costs_file = os.environ.get("EQXRL_TEST_COSTS")
    if costs_file:
        with open(costs_file, "a") as file:
            for nodeid, duration in seconds.items():
                file.write(json.dumps({"test": nodeid, "seconds": duration}) + "\n")
        return
    if seconds:
        terminalreporter.write_sep("=", "worker-seconds per test file")
        for line in costs.per_file_lines(seconds):
            terminalreporter.write_line(line)


# The second pass of `make test` runs the tests with these markers (XLA's defaults).
SECOND_PASS = "run_bound or xla_defaults"
SECOND_PASS_MARKERS = ("run_bound", "xla_defaults")


@functools.cache
def _names_a_second_pass_marker(path) -> bool:
    text = path.read_text()
    return any(marker in text for marker in SECOND_PASS_MARKERS)


def pytest_ignore_collect(collection_path, config):
    """The second pass (`-m "run_bound or xla_defaults"`) imports only the test
    files whose text names one of its markers: each test process imports every file
    it collects, all of them in about 14 s, these in about 10 s. (Every other
    collection checks that no test gets those markers from elsewhere.)"""
    if config.option.markexpr != SECOND_PASS:
        return None
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    return True if not _names_a_second_pass_marker(collection_path) else None


def _check_second_pass_files(items):
    """Every `run_bound` or `xla_defaults` test is in a file whose text names its
    marker, which is what the second pass collects (`pytest_ignore_collect`)."""
    unnamed = sorted(
        {
            item.path.name
            for item in items
            if any(item.get_closest_marker(m) for m in SECOND_PASS_MARKERS)
            and not _names_a_second_pass_marker(item.path)
        }
    )
    if unnamed:
        raise pytest.UsageError(
            f"{unnamed} hold run_bound or xla_defaults tests without naming the "
            "marker in their text, so make test's second pass would not collect "
            "them: mark the tests in their own file (tests/conftest.py)."
        )


# Why a test is slow (pyproject.toml names each marker's reason).
SLOW_MARKERS = ("run_bound", "subprocess", "benchmark", "learning", "slow")


def pytest_collection_modifyitems(items):
    """The longest test files first, and in each file its slow tests first. `make
    test` runs each file whole in one process (`pytest -n 2 --dist loadfile
    --no-loadscope-reorder`, which keeps this order); a long file that starts last
    keeps one process busy while the other idles, so the suite's wall time is best
    when the short files come at the end. A file's length is its current cost in
    `tests/README.md`'s budget table."""
    _check_second_pass_files(items)
    file_costs = costs.budget_table_costs()

    def order(item):
        file_cost = file_costs.get(item.path.name, 0.0)
        fast = not any(item.get_closest_marker(m) for m in SLOW_MARKERS)
        return -file_cost, item.path.name, fast

    items.sort(key=order)


@pytest.fixture(autouse=True, scope="module")
def release_compiled_programs():
    """Each test module's compiled programs are released when it ends. A test
    process runs hundreds of modules, and their compiled code otherwise stays: 7 GB
    per process by the end of `make test`'s first pass (where one test process
    crashed inside XLA's compiler). Tests that share a program are in one module,
    and `make test` runs each module whole in one process (`--dist loadfile`): a
    module split between processes would be released and compiled again."""
    yield
    jax.clear_caches()


@pytest.fixture(autouse=True)
def strict_dtype_promotion(request):
    """Strict dtype promotion, except in modules that run optax's Adam: its bias
    correction raises a float to an int32 count, which strict mode forbids."""
    if getattr(request.module, "STANDARD_DTYPE_PROMOTION", False):
        yield
    else:
        with jax.numpy_dtype_promotion("strict"):
            yield


@pytest.fixture
def key():
    return jax.random.key(0)


@pytest.fixture
def run_script(monkeypatch, capsys):
    """`run_script(path, *arguments)` runs a script as `python path arguments...`
    would, in the test process (it shares the process's import of JAX and eqxrl,
    a fresh interpreter costs seconds), and returns what it printed."""

    def run(path, *arguments: str) -> str:
        monkeypatch.setattr(sys, "argv", [str(path), *arguments])
        capsys.readouterr()
        runpy.run_path(str(path), run_name="__main__")
        return capsys.readouterr().out

    return run
