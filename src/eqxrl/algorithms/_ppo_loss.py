"""PPO's objective: the stored actions judged by the network's new outputs, and the
clipped surrogate loss with its value and entropy terms (Schulman et al. 2017)."""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, PyTree

from ..buffers import Transition
from ..distributions import DiagonalGaussian, MaskedCategorical
from ..envs import TimeStep
from ..nn import AbstractActorCritic

# Stored steps judged anew (see `judge`): the log-probabilities, entropies, entropies
# of the uniform policy and values, each `[num_steps, n]` for a replayed sequence.
JudgedSteps = tuple[
    Float[Array, "*steps"],
    Float[Array, "*steps"],
    Float[Array, "*steps"],
    Float[Array, "*steps"],
]


def is_squashed(distribution: Any) -> bool:
    """Whether PPO stores this distribution's samples before the `tanh`."""
    return isinstance(distribution, DiagonalGaussian) and distribution.squash


def squashes_samples(model: AbstractActorCritic, timestep: TimeStep) -> bool:
    """Whether `model`'s distribution (for `timestep`'s `[n, ...]` leaves) is a
    squashed `DiagonalGaussian`, whose rollout stores samples before the `tanh`
    (decided from shapes: nothing runs)."""
    distribution, _ = eqx.filter_eval_shape(
        lambda model, timestep: jax.vmap(model)(
            timestep.observation, timestep.action_mask
        ),
        model,
        timestep,
    )
    return is_squashed(distribution)


def judge(
    distribution: Any,
    value: Float[Array, ""],
    action_mask: Bool[Array, " num_actions"] | None,
    action: Array,
    noise: Array | None,
) -> tuple[Array, Array, Array, Array]:
    """One stored step's action judged by the network's new outputs: its
    log-probability, the entropy, the entropy of the uniform policy over the
    valid actions (NaN for `Box` actions) and the value. For a squashed Gaussian,
    `action` is the sample before the `tanh` and the entropy is the estimate that
    `noise` samples."""
    if isinstance(distribution, MaskedCategorical):
        # The entropy of the uniform distribution over the valid actions (all
        # actions when none or all are masked, as MaskedCategorical treats them).
        num_actions = distribution.categorical.logits.shape[-1]
        num_valid = num_actions if action_mask is None else action_mask.sum()
        num_valid = jnp.where(num_valid > 0, num_valid, num_actions)
        max_entropy = jnp.log(jnp.asarray(num_valid, jnp.float32))
    else:
        max_entropy = jnp.float32(jnp.nan)
    if is_squashed(distribution):
        # The rollout stored the sample before the tanh (see `PPO.act`).
        entropy = distribution.entropy_estimate(noise)
        log_prob = distribution.log_prob_pre_squash(action)
        return log_prob, entropy, max_entropy, value
    entropy = distribution.entropy()
    return distribution.log_prob(action), entropy, max_entropy, value


def judge_sequences(
    network: AbstractActorCritic,
    carry: PyTree[Array],
    observations: PyTree[Array],
    sequences: Transition,
    noise: Array | None,
) -> JudgedSteps:
    """`judge` over a recurrent network's replay of stored sequences (`[num_steps,
    n, ...]` leaves, `observations` as the environment returns them): each
    environment's sequence unrolled from `carry`, reset where
    `sequences.extras["episode_start"]` says, time staying the leading axis."""
    _, distributions, values = jax.vmap(
        network.unroll, in_axes=(0, 1, 1, 1), out_axes=(0, 1, 1)
    )(
        carry,
        observations,
        sequences.extras["episode_start"],
        sequences.action_mask,
    )
    noise_axis = None if noise is None else 0
    judge_all = jax.vmap(
        jax.vmap(judge, in_axes=(0, 0, 0, 0, noise_axis)),
        in_axes=(0, 0, 0, 0, noise_axis),
    )
    return judge_all(
        distributions, values, sequences.action_mask, sequences.action, noise
    )


def clipped_surrogate_loss(
    judged: JudgedSteps,
    batch: Transition,
    advantages: Float[Array, "*minibatch"],
    returns: Float[Array, "*minibatch"],
    *,
    clip_eps: Float[Array, ""],
    clip_value_loss: bool,
    vf_coef: Float[Array, ""],
    ent_coef: Float[Array, ""],
    discrete: bool,
) -> tuple[Float[Array, ""], dict[str, Array]]:
    """PPO's loss of a minibatch from its stored steps `judge`d anew: the clipped
    surrogate policy loss, plus `vf_coef` times the (optionally clipped) value
    loss, minus `ent_coef` times the entropy; every term a mean over rows. Also
    returns the terms and `approx_kl`, `clip_fraction` (and `max_entropy` for
    `discrete` actions)."""
    log_prob, entropy, max_entropy, value = judged
    log_ratio = log_prob - batch.log_prob
    ratio = jnp.exp(log_ratio)
    clipped_ratio = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    policy_loss = -jnp.minimum(ratio * advantages, clipped_ratio * advantages)
    policy_loss = policy_loss.mean()
    value_error = jnp.square(value - returns)
    if clip_value_loss:
        clipped_value = batch.value + jnp.clip(value - batch.value, -clip_eps, clip_eps)
        value_error = jnp.maximum(value_error, jnp.square(clipped_value - returns))
    value_loss = 0.5 * value_error.mean()
    entropy = entropy.mean()
    total_loss = policy_loss + vf_coef * value_loss - ent_coef * entropy
    statistics = {
        "total_loss": total_loss,
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "entropy": entropy,
        "approx_kl": jnp.mean((ratio - 1.0) - log_ratio),
        "clip_fraction": jnp.mean(
            (jnp.abs(ratio - 1.0) > clip_eps).astype(jnp.float32)
        ),
    }
    if discrete:
        statistics["max_entropy"] = max_entropy.mean()
    return total_loss, statistics
