"""Observations stored in a smaller dtype (`PPO(observation_storage_dtype=...)`) and
cast back before a network reads them: PPO's rollout and updates, and AMP's
discriminator, which reads PPO's rollout."""

import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
from jaxtyping import Array, PyTree

from ..envs import AbstractEnvironment


def store_observation(
    observation: PyTree[Array], dtype: jnp.dtype | None
) -> PyTree[Array]:
    """The observation as a rollout stores it: float leaves cast to `dtype`,
    integer (`Discrete`) leaves kept, since a state index cast to `uint8` would
    wrap past 255; unchanged when `dtype` is `None`."""
    if dtype is None:
        return observation

    def store(x: Array) -> Array:
        return x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x

    return jtu.tree_map(store, observation)


def restore_observation(
    observation: PyTree[Array], env: AbstractEnvironment, dtype: jnp.dtype | None
) -> PyTree[Array]:
    """Observations stored in `dtype` (any batch shape) cast back to the dtypes
    `env` returns; unchanged when `dtype` is `None`."""
    if dtype is None:
        return observation
    _, timestep = jax.eval_shape(env.reset, jr.key(0))
    return jtu.tree_map(
        lambda x, like: x.astype(like.dtype), observation, timestep.observation
    )
