"""Recurrent networks' carries (a GRU's, an LSTM's, an asymmetric actor-critic's
pair), the one rule that resets a carry where an episode starts, and the check of a
carry's shape."""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, PyTree


class GRUCarry(eqx.Module):
    """The recurrent state of a GRU: its hidden vector.

    One environment's carry is `[hidden_size]`; a batch of them (e.g. one per
    environment of a rollout) has leading axes, `[num_envs, hidden_size]`.

    **Arguments:**

    - `hidden`: float32 `[*batch, hidden_size]`.
    """

    hidden: Float[Array, "*batch hidden_size"]


class LSTMCarry(eqx.Module):
    """The recurrent state of an LSTM: its hidden and cell vectors.

    **Arguments:**

    - `hidden`: float32 `[*batch, hidden_size]`.
    - `cell`: float32 `[*batch, hidden_size]`.
    """

    hidden: Float[Array, "*batch hidden_size"]
    cell: Float[Array, "*batch hidden_size"]


class ActorCriticCarry(eqx.Module):
    """The carry of an actor-critic whose actor and critic have a recurrent core
    each (an asymmetric network: the critic reads what the actor must not).

    **Arguments:**

    - `actor`: the actor core's carry.
    - `critic`: the critic core's carry.
    """

    actor: GRUCarry | LSTMCarry
    critic: GRUCarry | LSTMCarry


def reset_carry(
    carry: PyTree[Array],
    initial: PyTree[Array],
    episode_start: Bool[Array, ""],
) -> PyTree[Array]:
    """`initial` where an episode starts, else `carry` (one environment; vmap it
    over a batch).

    **Arguments:**

    - `carry`: the carry the network returned at the previous step.
    - `initial`: the network's `initial_carry()`.
    - `episode_start`: bool scalar, `True` when the observation about to be read is
      the first of an episode.

    **Returns:**

    The carry to read that observation with.
    """
    return jax.tree.map(lambda c, i: jnp.where(episode_start, i, c), carry, initial)


def check_carry(owner: str, carry: Any, expected: Any) -> None:
    """A `ValueError` naming the carry's type and both shapes when `carry` is not
    shaped as `expected` (checked at trace time: shapes are static)."""

    def describe(tree: Any) -> str:
        shapes = ", ".join(
            f"{name}={list(np.shape(leaf))}" for name, leaf in _named_leaves(tree)
        )
        return f"{type(tree).__name__}({shapes})"

    def signature(tree: Any) -> list[tuple[str, tuple[int, ...]]]:
        # np.shape: static under every tracer (jax2onnx's tracing patches
        # jnp.shape to return an array).
        return [(name, np.shape(leaf)) for name, leaf in _named_leaves(tree)]

    if type(carry) is not type(expected) or signature(carry) != signature(expected):
        raise ValueError(
            f"{owner}.step: the carry is {describe(carry)}, but this network "
            f"reads one environment's {describe(expected)} (batch carries with "
            "jax.vmap, and start each episode from initial_carry())."
        )


def _named_leaves(tree: Any) -> list[tuple[str, Any]]:
    return [
        (jax.tree_util.keystr(path, simple=True, separator="."), leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
    ]
