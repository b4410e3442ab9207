import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray


class AbstractSpace(eqx.Module):
    """The set of valid observations or actions of an environment."""

    @property
    @abc.abstractmethod
    def shape(self) -> tuple[int, ...]:
        """Shape of one element."""

    @property
    @abc.abstractmethod
    def dtype(self) -> jnp.dtype:
        """Dtype of one element."""

    @abc.abstractmethod
    def sample(self, key: PRNGKeyArray) -> Array:
        """A uniformly random element."""

    @abc.abstractmethod
    def contains(self, value: ArrayLike) -> Bool[Array, ""]:
        """Whether `value` (of the right shape) lies in the space."""


class Discrete(AbstractSpace):
    """The integers `0, 1, ..., num_values - 1`, as int32 scalars.

    **Arguments:**

    - `num_values`: how many values there are (at least 1).
    """

    num_values: int = eqx.field(static=True)

    def __check_init__(self):
        if self.num_values < 1:
            raise ValueError(
                f"Discrete(num_values={self.num_values}): num_values must be >= 1."
            )

    @property
    def shape(self) -> tuple[int, ...]:
        return ()

    @property
    def dtype(self) -> jnp.dtype:
        return jnp.dtype(jnp.int32)

    def sample(self, key: PRNGKeyArray) -> Int[Array, ""]:
        return jr.randint(key, (), 0, self.num_values, dtype=jnp.int32)

    def contains(self, value: ArrayLike) -> Bool[Array, ""]:
        value = jnp.asarray(value)
        return (value >= 0) & (value < self.num_values)


class Box(AbstractSpace):
    """A box `low <= x <= high` of float32 arrays (bounds may be infinite).

    **Arguments:**

    - `low`: lower bounds, broadcast to `shape`.
    - `high`: upper bounds, broadcast to `shape`.
    - `shape`: the shape of one element; defaults to the shape of `low`.
    """

    low: Float[Array, "..."]
    high: Float[Array, "..."]

    def __init__(
        self,
        low: Float[ArrayLike, "..."],
        high: Float[ArrayLike, "..."],
        shape: tuple[int, ...] | None = None,
    ):
        if shape is None:
            shape = np.broadcast_shapes(np.shape(low), np.shape(high))
        if not any(isinstance(bound, jax.core.Tracer) for bound in (low, high)):
            if np.any(np.asarray(low) > np.asarray(high)):
                raise ValueError(
                    f"Box(low={low}, high={high}): every entry of `low` must be "
                    "<= the matching entry of `high`."
                )
        self.low = jnp.broadcast_to(jnp.asarray(low, jnp.float32), shape)
        self.high = jnp.broadcast_to(jnp.asarray(high, jnp.float32), shape)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.low.shape

    @property
    def dtype(self) -> jnp.dtype:
        return jnp.dtype(jnp.float32)

    def sample(self, key: PRNGKeyArray) -> Float[Array, "..."]:
        """Uniform in the box; unbounded sides draw from a standard normal instead."""
        uniform_key, normal_key = jr.split(key)
        finite = jnp.isfinite(self.low) & jnp.isfinite(self.high)
        low = jnp.where(finite, self.low, 0.0)
        high = jnp.where(finite, self.high, 1.0)
        uniform = jr.uniform(uniform_key, self.shape, minval=low, maxval=high)
        normal = jnp.clip(jr.normal(normal_key, self.shape), self.low, self.high)
        return jnp.where(finite, uniform, normal)

    def contains(self, value: ArrayLike) -> Bool[Array, ""]:
        value = jnp.asarray(value)
        return jnp.all((value >= self.low) & (value <= self.high))
