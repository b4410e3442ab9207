"""Helpers for configuration fields shared by environments and algorithms."""

import math

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike


def float32(value: ArrayLike) -> Array:
    """Field converter: a number (or array of them) as a float32 array, so that it is
    a sweepable leaf rather than a constant baked into the compiled program."""
    return jnp.asarray(value, dtype=jnp.float32)


def optional_float32(value: ArrayLike | None) -> Array | None:
    """Field converter: `None` kept (a setting switched off, a static choice), else
    as [`float32`][eqxrl._config.float32]."""
    return None if value is None else float32(value)


def check_range(owner: str, name: str, value: Array, low: float, high: float) -> None:
    """Raise a ValueError if a concrete scalar setting is outside `[low, high]`.

    Inside `vmap`/`jit` the value is a tracer and cannot be checked eagerly; it is
    then skipped.
    """
    if isinstance(value, jax.core.Tracer):
        return
    if value.shape != ():
        raise ValueError(
            f"{owner}: {name} must be a scalar, got shape {value.shape}; to sweep over "
            f"values, build {owner} inside jax.vmap."
        )
    number = float(value)
    if not (low <= number <= high) or math.isnan(number):
        raise ValueError(f"{owner}: {name}={number} must lie in [{low}, {high}].")
