"""Training over several processes (`jax.distributed`): which process writes the
run folder's files, waiting for the others, and arrays gathered to every host."""

from typing import Any

import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
from jax.experimental import multihost_utils
from jaxtyping import PyTree


def primary_process() -> bool:
    """Whether this is the process that writes logs, plots and the run folder's
    files (process 0; the only one without `jax.distributed`)."""
    return jax.process_index() == 0


def sync_processes(name: str) -> None:
    """Wait for every process (with `jax.distributed`; nothing otherwise)."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


def to_host(tree: PyTree) -> PyTree:
    """`tree`'s arrays as NumPy arrays on this host. With several processes the
    arrays span processes, and every process gets the whole of each."""
    if jax.process_count() == 1:
        return jax.device_get(tree)
    return multihost_utils.process_allgather(tree, tiled=True)


def to_local(tree: PyTree) -> PyTree:
    """`tree` with arrays that span processes replaced by whole copies on this
    process's device (PRNG keys included)."""

    def local(leaf: Any) -> Any:
        if not isinstance(leaf, jax.Array):
            return leaf
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            data = jnp.asarray(to_host(jr.key_data(leaf)))
            return jr.wrap_key_data(data, impl=jr.key_impl(leaf))
        return jnp.asarray(to_host(leaf))

    return jtu.tree_map(local, tree)
