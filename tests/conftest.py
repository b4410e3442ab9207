import os

import jax
import pytest

# Tests always run with runtime shape checking on.
os.environ.pop("EQXRL_TYPECHECK", None)

jax.config.update("jax_numpy_rank_promotion", "raise")


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
