"""Large batches through a network in cache-sized blocks of rows, on CPU.

One CPU speed-up (see `docs/performance.md`): XLA's CPU backend runs a minibatch of
thousands of rows through a wide MLP one layer at a time, so every layer's activations
(5,120 rows x 256 floats is 5 MiB) leave the cache before the next layer, and the
backward pass reads them back from memory. In blocks of about a thousand rows they
stay in cache. Only for large networks: a block of a small one (CartPole's 64-wide
MLPs) is too little work for the loop around it, and blocks made PPO's wide CartPole
configuration 0.84x. The results are the same up to float rounding (a mean over
equal blocks is the mean over all rows).
"""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import PyTree

from .._filters import filter_scan
from .._speed_tricks import cpu_speed_tricks_apply

# Rows per block: measured on a 2-core AMD EPYC (1 MiB L2 per core) with Brax's PPO
# networks (a 256 x 5 critic): 5,120-row gradients took 1.709 s per epoch whole,
# 1.663 s in blocks of 2,560, 1.621 s of 1,280 and 1.635 s of 640.
CPU_BLOCK_ROWS = 1280
# Networks with fewer parameters go through whole: Brax's PPO critic (256 x 5) has
# 265k, CartPole's 64 x 64 actor-critic 9k.
CPU_BLOCK_MIN_PARAMETERS = 100_000


def cpu_row_blocks(rows: int, network: PyTree) -> int:
    """How many equal blocks of rows to split a batch of `rows` through `network`
    into: on the CPU backend, for a network of at least `CPU_BLOCK_MIN_PARAMETERS`
    parameters, the fewest equal blocks of `CPU_BLOCK_ROWS / 2` to `CPU_BLOCK_ROWS`
    rows (1 for a batch that small already, or for one that does not split so);
    otherwise 1, where XLA's choice for the whole batch stands."""
    if not cpu_speed_tricks_apply() or rows <= CPU_BLOCK_ROWS:
        return 1
    parameters = sum(
        x.size for x in jax.tree.leaves(network) if eqx.is_inexact_array(x)
    )
    if parameters < CPU_BLOCK_MIN_PARAMETERS:
        return 1
    smallest_block = CPU_BLOCK_ROWS // 2
    for blocks in range(-(-rows // CPU_BLOCK_ROWS), rows // smallest_block + 1):
        if rows % blocks == 0:
            return blocks
    return 1


def _blocked(inputs: PyTree, num_blocks: int) -> PyTree:
    """Every leaf `[rows, ...]` as `[num_blocks, rows // num_blocks, ...]`."""
    return jax.tree.map(
        lambda x: x.reshape(num_blocks, x.shape[0] // num_blocks, *x.shape[1:]), inputs
    )


def mean_over_row_blocks(
    function: Callable[..., PyTree], inputs: tuple[Any, ...], num_blocks: int
) -> PyTree:
    """`function(*inputs)` for a `function` whose outputs are means over the rows of
    its inputs (a loss, its gradient, metrics), computed as the mean of its outputs
    over `num_blocks` equal blocks of rows, one block after another.

    Every array leaf of `inputs` has the rows as its leading axis (`None` leaves
    pass through); `num_blocks` must divide the number of rows.
    """
    if num_blocks == 1:
        return function(*inputs)
    blocks = _blocked(inputs, num_blocks)
    first = function(*jax.tree.map(lambda x: x[0], blocks))

    def add_block(total, block):
        return jax.tree.map(jnp.add, total, function(*block)), None

    rest = jax.tree.map(lambda x: x[1:], blocks)
    total, _ = filter_scan(add_block, first, rest)
    return jax.tree.map(lambda x: x / num_blocks, total)


def map_over_row_blocks(
    function: Callable[..., PyTree], inputs: tuple[Any, ...], num_blocks: int
) -> PyTree:
    """`function(*inputs)` for a `function` that maps every row on its own (a
    network vmapped over rows), computed block after block of rows and
    concatenated."""
    if num_blocks == 1:
        return function(*inputs)
    outputs = jax.lax.map(lambda block: function(*block), _blocked(inputs, num_blocks))
    return jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), outputs)
