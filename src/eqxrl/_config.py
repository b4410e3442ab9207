"""Helpers for configuration fields shared by environments and algorithms."""

import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike


def float32(value: ArrayLike) -> Array:
    """Field converter: a number (or array of them) as a float32 array, so that it is
    a sweepable leaf rather than a constant baked into the compiled program."""
    return jnp.asarray(value, dtype=jnp.float32)


def in_range(
    name: str,
    low: float,
    high: float,
    *,
    finite: bool = False,
    optional: bool = False,
) -> Callable[[ArrayLike | None], Array | None]:
    """Field converter for a sweepable number: a float32 scalar in `[low, high]`.

    A concrete value outside the range (or NaN, or infinite with `finite`) raises a
    `ValueError` at construction. A traced value (the algorithm built inside
    `jax.vmap` or `jit`, for a sweep) cannot be checked then: it goes through
    `eqx.error_if`, so the compiled program raises when it runs with such a value.

    **Arguments:**

    - `name`: the field's name, for the message.
    - `low`, `high`: the bounds (inclusive; `math.inf` for none).
    - `finite`: reject infinite values even where `high` is `math.inf`.
    - `optional`: keep `None` (a setting switched off).
    """
    bounds = f"[{low:g}, {high:g}]"
    if finite:
        bounds += " and finite"

    def convert(value: ArrayLike | None) -> Array | None:
        if value is None and optional:
            return None
        value = float32(value)
        if value.shape != ():
            raise ValueError(
                f"{name} must be a scalar, got shape {value.shape}; to sweep over "
                "values, build the algorithm inside jax.vmap."
            )
        if isinstance(value, jax.core.Tracer):
            outside = ~((value >= low) & (value <= high))  # NaN is outside
            if finite:
                outside = outside | ~jnp.isfinite(value)
            return eqx.error_if(
                value,
                outside,
                f"{name} must lie in {bounds}; a value swept over does not.",
            )
        number = float(value)
        if not low <= number <= high or (finite and not math.isfinite(number)):
            raise ValueError(f"{name}={number} must lie in {bounds}.")
        return value

    return convert
