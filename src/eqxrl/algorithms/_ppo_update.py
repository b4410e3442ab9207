"""PPO's epochs in parts: the optimizer, one gradient step on a minibatch, and the
ways a rollout's rows are gathered into minibatches (steps from every environment,
whole sequences, whole environments' steps)."""

import functools
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import optax
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree

from ..nn import sequence_batch_hint
from ._epochs import take_rows
from ._row_blocks import mean_over_row_blocks


def gradient_step(
    loss: Callable[..., tuple[Array, dict[str, Array]]],
    optimizer: optax.GradientTransformation,
    observation_statistics: PyTree,
    carry: tuple[Any, PyTree],
    minibatch: tuple[Any, Array, Array, PyTree[Array] | None],
    noise_key: PRNGKeyArray | None,
    *,
    normalize_advantages: bool,
    num_sequences: int,
    row_blocks: int,
) -> tuple[tuple[Any, PyTree], dict[str, Array]]:
    """One update of `carry = (model, optimizer_state)` on a minibatch
    `(transitions, advantages, returns, carries)` by `loss`'s gradient, and the
    loss terms. With `noise_key` (a squashed Gaussian policy), the standard normal
    noise of the entropy estimate is drawn from it. A recurrent network's
    minibatch is `num_sequences` sequences replayed from its `carries`; a
    feed-forward one's rows go through the loss in `row_blocks` blocks."""
    model, optimizer_state = carry
    batch, advantages, returns, batch_carry = minibatch
    noise = None
    if noise_key is not None:
        noise = jr.normal(noise_key, batch.action.shape, jnp.float32)
    if normalize_advantages:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    grad_fn = eqx.filter_value_and_grad(loss, has_aux=True)
    rows = (batch, advantages, returns, noise)
    if batch_carry is not None:
        with sequence_batch_hint(num_sequences):
            (_, statistics), grads = grad_fn(
                model, observation_statistics, *rows, batch_carry
            )
    else:
        # On CPU a large network takes a large minibatch in blocks of rows that
        # stay in cache; the loss is a mean over rows, so its gradient is the mean
        # of the blocks' gradients.
        (_, statistics), grads = mean_over_row_blocks(
            lambda *rows: grad_fn(model, observation_statistics, *rows),
            rows,
            row_blocks,
        )
    updates, optimizer_state = optimizer.update(
        grads, optimizer_state, eqx.filter(model, eqx.is_array)
    )
    return (eqx.apply_updates(model, updates), optimizer_state), statistics


def clipped_adam(
    learning_rate: optax.Schedule,
    max_grad_norm: Float[Array, ""],
    gradient_transform: optax.GradientTransformation | None,
) -> optax.GradientTransformation:
    """`gradient_transform` (if any), then global-norm clipping and Adam (eps
    1e-5) with the step size of `learning_rate` (a schedule) injected so that it is
    logged and sweepable, over the parameters flattened into one vector."""
    # Flattened: clipping and Adam run on one vector instead of once per
    # parameter array, far fewer (tiny) operations per minibatch update.
    optimizer = optax.flatten(
        optax.chain(
            optax.clip_by_global_norm(max_grad_norm),
            optax.inject_hyperparams(
                optax.adam, static_args=("b1", "b2", "eps", "eps_root")
            )(learning_rate=learning_rate, eps=1e-5),
        )
    )
    if gradient_transform is None:
        return optimizer
    return optax.chain(gradient_transform, optimizer)


def step_rows(
    rows: tuple[Any, Array, Array], indices: Int[Array, " minibatch"]
) -> tuple[Any, Array, Array, None]:
    """The minibatch of steps `indices` (rows: a rollout's steps, flattened)."""
    return (*take_rows(rows, indices), None)


def sequence_rows(
    rows: tuple[Any, Array, Array, PyTree[Array]],
    environments: Int[Array, " minibatch"],
) -> tuple[Any, Array, Array, PyTree[Array]]:
    """The minibatch of whole sequences: `environments`' steps (rows: the
    rollout's `[num_steps, n, ...]` transitions, advantages and returns) and their
    carries (`[n, ...]`)."""
    *sequences, carry = rows
    return (
        *jtu.tree_map(lambda x: x[:, environments], sequences),
        take_rows(carry, environments),
    )


def environment_rows(num_steps: int, num_columns: int) -> Callable[..., Any]:
    """The gather of whole environments' steps from a rollout flattened step-major
    (`num_steps` steps of `num_columns` environments), as `minibatch_epochs` calls
    it: `gather(rows, environments)`."""

    def take(environments: Int[Array, " minibatch"], x: Array) -> Array:
        by_environment = x.reshape(num_steps, num_columns, *x.shape[1:])
        return by_environment[:, environments].reshape(-1, *x.shape[1:])

    def gather(rows: PyTree[Array], environments: Int[Array, " minibatch"]) -> Any:
        return (*jtu.tree_map(functools.partial(take, environments), rows), None)

    return gather
