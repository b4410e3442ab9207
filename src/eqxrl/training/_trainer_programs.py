"""The Trainer's compiled programs: a chunk of training iterations, the initial
training state and an evaluation, each over one seed or vmapped over several."""

import equinox as eqx
import jax
import jax.lax as lax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
from jax.sharding import Mesh
from jaxtyping import Array, Bool, Int, PyTree

from ..algorithms import AbstractAlgorithm, vmap_over_seeds
from ._evaluation import run_episodes


def run_chunk(
    algorithm: AbstractAlgorithm,
    state: PyTree,
    num_iterations: Int[Array, ""],
    chunk_size: int,
    batched: bool,
    mesh: Mesh | None = None,
) -> tuple[PyTree, dict[str, Array], Bool[Array, " chunk_size"]]:
    """Up to `chunk_size` iterations as one compiled program: `num_iterations` (a
    traced number, so every chunk reuses one compilation) run, the rest of the
    `lax.scan` skips them through a `lax.cond`. Metrics of skipped iterations are
    zeros, to be dropped on the host. Also returns, per iteration, whether the
    algorithm's `diverged` holds (for any seed). With `batched`, the seeds are
    vmapped (over the mesh's `"seeds"` axis when it has one)."""

    def one_run(state: PyTree) -> tuple[PyTree, dict[str, Array], Array]:
        dynamic, static = eqx.partition(state, eqx.is_array)

        def run(dynamic):
            new_state, metrics = algorithm.train_iteration(eqx.combine(dynamic, static))
            if mesh is not None:
                new_state = algorithm.shard_state(new_state, mesh)
            new_dynamic, new_static = eqx.partition(new_state, eqx.is_array)
            if jtu.tree_structure(new_static) != jtu.tree_structure(static):
                raise ValueError(
                    "train_iteration changed the structure of the non-array part of "
                    "the training state; the Trainer needs the same structure every "
                    "iteration."
                )
            return new_dynamic, (metrics, algorithm.diverged(new_state, metrics))

        metric_shapes = jax.eval_shape(run, dynamic)[1]

        def skip(dynamic):
            zeros = jtu.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), metric_shapes)
            return dynamic, zeros

        def body(dynamic, index):
            return lax.cond(index < num_iterations, run, skip, dynamic)

        dynamic, (metrics, diverged_flags) = lax.scan(
            body, dynamic, jnp.arange(chunk_size, dtype=jnp.int32)
        )
        return eqx.combine(dynamic, static), metrics, diverged_flags

    if not batched:
        return one_run(state)
    state, metrics, diverged_flags = vmap_over_seeds(one_run, mesh, in_axes=(0,))(state)
    # Seeds first inside the vmap, iterations first on the host.
    metrics = jtu.tree_map(lambda x: jnp.moveaxis(x, 0, 1), metrics)
    return state, metrics, jnp.any(diverged_flags, axis=0)


@eqx.filter_jit
def init_state(algorithm: AbstractAlgorithm, key, num_seeds: int | None) -> PyTree:
    """The initial training state; with `num_seeds`, a batch of them from as many
    keys split from `key`."""
    if num_seeds is None:
        return algorithm.init(key)
    return eqx.filter_vmap(algorithm.init)(jr.split(key, num_seeds))


@eqx.filter_jit
def evaluate_state(
    algorithm: AbstractAlgorithm,
    env,
    state: PyTree,
    key,
    num_episodes: int,
    max_steps: int,
    deterministic: bool,
    num_seeds: int | None,
):
    """`(returns, lengths)` of `num_episodes` episodes of the state's policy (of each
    seed's with `num_seeds`)."""

    def one(state, key):
        policy = algorithm.policy(state, deterministic)
        return run_episodes(policy, env, key, num_episodes, max_steps)

    if num_seeds is None:
        return one(state, key)
    return eqx.filter_vmap(one)(state, jr.split(key, num_seeds))
