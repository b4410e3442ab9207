import os
import runpy
import sys

import jax
import pytest

# Tests always run with runtime shape checking on: through the jaxtyping pytest
# plugin (`--jaxtyping-packages` in pyproject.toml) and eqxrl's own import hook.
# Both hooks wrap the same path finder, so the first to find a module is the one
# that instruments it: every module is instrumented once.
os.environ.pop("EQXRL_TYPECHECK", None)

jax.config.update("jax_numpy_rank_promotion", "raise")


def pytest_collection_modifyitems(items):
    """Slow tests (learning runs) first: with `pytest -n 2`, a long test that
    starts last keeps one worker busy while the other idles, so the suite's wall
    time is best when the short tests come at the end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


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
