"""Helpers the adapters from other JAX suites (Brax, Jumanji, JaxMARL) share."""

from typing import Any

import jax
import jax.lax as lax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
from jaxtyping import Array, PRNGKeyArray, PyTree


def is_typed_key(key: Array) -> bool:
    """Whether `key` is a typed key (`jax.random.key`), not raw uint32 words."""
    return jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)


def legacy_key(key: PRNGKeyArray) -> Array:
    """A key as suites written for `jax.random.PRNGKey` take it: its uint32 words
    (a typed key unwrapped, raw words as they are). States that keep the key then
    hold plain uint32 arrays, as those suites expect."""
    return jr.key_data(key) if is_typed_key(key) else key


def strongly_typed(tree: PyTree) -> PyTree:
    """Every leaf as a strongly typed JAX array. Other suites' states and rewards
    hold Python values on some steps (a Brax `step` setting `reward=1.0`,
    Jumanji's Tetris `is_reset=True`) where `reset` returned arrays; `reset` and
    `step` must return identical types to be carried through a scan."""

    def leaf(x: Any) -> Array:
        x = jnp.asarray(x)
        if is_typed_key(x):
            return x
        return lax.convert_element_type(x, x.dtype)

    return jtu.tree_map(leaf, tree)


def make_by_name(
    caller: str, library: str, make: Any, env: Any, make_kwargs: dict[str, Any]
) -> Any:
    """`make(env, **make_kwargs)` when `env` is a registered name, else `env`
    itself; keyword arguments without a name to build are a `TypeError` naming
    `caller` and where they belong."""
    if isinstance(env, str):
        return make(env, **make_kwargs)
    if make_kwargs:
        raise TypeError(
            f"{caller}: keyword arguments {sorted(make_kwargs)} configure an "
            f"environment built by name; pass them to the {library} environment's "
            "constructor instead."
        )
    return env
