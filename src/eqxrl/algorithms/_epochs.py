"""The epochs of shuffled minibatch updates that PPO, PQN (and PQN-VDN) and AMP's
discriminator take over the rows of their latest rollout."""

from collections.abc import Callable
from typing import Any, TypeVar

import jax.tree_util as jtu
from jaxtyping import Array, Int, PRNGKeyArray, PyTree

from .._filters import filter_scan
from .._random import permutation, split

Carry = TypeVar("Carry")
Statistics = TypeVar("Statistics")


def take_rows(rows: PyTree[Array], indices: Int[Array, " minibatch"]) -> PyTree[Array]:
    """The rows `indices` of every leaf of `rows` (rows on the leading axis)."""
    return jtu.tree_map(lambda x: x[indices], rows)


def minibatch_epochs(
    update: Callable[[Carry, Any, PRNGKeyArray | None], tuple[Carry, Statistics]],
    carry: Carry,
    rows: Any,
    key: PRNGKeyArray,
    *,
    num_epochs: int,
    num_minibatches: int,
    num_rows: int | None = None,
    gather: Callable[[Any, Int[Array, " minibatch"]], Any] = take_rows,
    minibatch_keys: bool = False,
    epoch_rows: Callable[[Carry], Any] | None = None,
) -> tuple[Carry, Statistics]:
    """`num_epochs` passes over `rows`, each a new random order of them cut into
    `num_minibatches` minibatches, one `update` per minibatch; the whole loop is
    two nested scans.

    **Arguments:**

    - `update`: `update(carry, minibatch, key) -> (carry, statistics)`, e.g. one
      gradient step of a model and its optimizer state; `key` is the minibatch's
      own PRNG key with `minibatch_keys`, else `None`.
    - `carry`: what the updates carry from one to the next (it may hold non-array
      leaves, which must not change).
    - `rows`: what the minibatches are drawn from: a pytree whose leaves have the
      rows on their leading axis, or anything `gather` reads.
    - `key`: the PRNG key of the epochs (each epoch's order of the rows).
    - `num_epochs`: passes over the rows.
    - `num_minibatches`: minibatches per pass; must divide `num_rows`.
    - `num_rows`: how many rows there are; `None`: the leading axis of `rows`'
      leaves.
    - `gather`: `gather(rows, indices)`, the minibatch of the rows `indices` (e.g.
      a rollout's whole environments where `rows` are its steps); by default every
      leaf's rows `indices`.
    - `minibatch_keys`: give every `update` its own PRNG key (e.g. for noise it
      samples), split from each epoch's key after that epoch's order is drawn.
    - `epoch_rows`: `epoch_rows(carry)`, the rows recomputed at the start of every
      epoch from the carry as it is then (e.g. advantages from the current
      critic), instead of `rows`.

    **Returns:**

    `(carry, statistics)`: the carry after the last update, and every update's
    statistics stacked, with leading axes `[num_epochs, num_minibatches]`.

    !!! example

        ```python
        def update(carry, minibatch, key):
            model, optimizer_state = carry
            grads = eqx.filter_grad(loss)(model, *minibatch)
            updates, optimizer_state = optimizer.update(grads, optimizer_state)
            return (eqx.apply_updates(model, updates), optimizer_state), {}

        (model, optimizer_state), _ = eqxrl.algorithms.minibatch_epochs(
            update, (model, optimizer_state), (observations, targets), key,
            num_epochs=4, num_minibatches=8,
        )
        ```
    """
    if num_rows is None:
        num_rows = jtu.tree_leaves(rows)[0].shape[0]
    if num_rows % num_minibatches:
        raise ValueError(
            f"minibatch_epochs: num_minibatches={num_minibatches} must divide the "
            f"{num_rows} rows."
        )
    minibatch_rows = num_rows // num_minibatches

    def minibatch_update(rows, carry, inputs):
        indices, minibatch_key = inputs if minibatch_keys else (inputs, None)
        return update(carry, gather(rows, indices), minibatch_key)

    def epoch(carry, epoch_key):
        current_rows = rows if epoch_rows is None else epoch_rows(carry)
        if minibatch_keys:
            epoch_key, updates_key = split(epoch_key)
        order = permutation(epoch_key, num_rows)
        inputs = order.reshape(num_minibatches, minibatch_rows)
        if minibatch_keys:
            inputs = (inputs, split(updates_key, num_minibatches))
        return filter_scan(
            lambda carry, inputs: minibatch_update(current_rows, carry, inputs),
            carry,
            inputs,
        )

    return filter_scan(epoch, carry, split(key, num_epochs))
