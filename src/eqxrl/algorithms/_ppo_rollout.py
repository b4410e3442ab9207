"""PPO's rollout: `num_steps` steps of every environment with the current policy,
the truncation bootstrap's values and the stored transitions."""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
from jaxtyping import Array, Float, PRNGKeyArray, PyTree

from .._filters import filter_scan
from .._random import split
from ..buffers import Transition
from ..envs import TimeStep
from ..nn import AbstractActorCritic, reset_carry
from ._metrics import episode_statistics
from ._observation_storage import restore_observation
from ._ppo_loss import is_squashed
from ._rollout import step_with_truncation_value
from ._row_blocks import cpu_row_blocks, map_over_row_blocks


def collect_rollout(
    ppo: Any, state: Any, key: PRNGKeyArray, *, next_observation: bool = False
) -> tuple[
    PyTree,
    TimeStep,
    PyTree[Array] | None,
    Transition,
    Float[Array, "num_steps num_envs"],
]:
    """Roll out `num_steps` steps of every environment of `ppo`'s `state`.

    Returns the environments' states, timesteps and (recurrent networks) carries
    after the rollout, the transitions, and per step the critic's value of the
    final observation where the step truncated an episode (zero elsewhere): what
    GAE bootstraps from. A recurrent network's carry flows from step to step, reset
    where an episode starts; the truncated episode's final observation is valued
    with the carry of the episode's steps before it.

    With a `separate_critic` the critic is left out of the steps (XLA drops the
    unused value head) and evaluated once on all stored observations afterwards:
    the same values, as one large batch instead of `num_steps` small ones. With
    `next_observation` (static), each transition's `extras["next_observation"]` is
    the observation its step reached, before any reset (where the episode ended,
    the final one). The steps are traced under `ppo.rollout_context`.
    """
    model = ppo.acting_model(state.model, state.observation_statistics)
    # A recurrent critic needs each step's carry: it stays in the steps.
    critic_after_rollout = model.separate_critic and not model.is_recurrent

    def step_environment(env_state, action, key, carry):
        def truncation_value(final: TimeStep) -> Float[Array, ""]:
            # GAE bootstraps a truncated episode from this value.
            return model.step_value(carry, final.observation)

        return step_with_truncation_value(
            ppo.env, truncation_value, env_state, action, key
        )

    step_environments = jax.vmap(step_environment)

    def step(carry, step_key):
        env_state, timestep, network_carry = carry
        # jax.random.split's keys, computed so that XLA fuses it.
        keys = split(step_key, (ppo.num_envs, 2))
        network_carry, stored_action, action, log_prob, value = ppo.act(
            model, timestep, keys[:, 0], network_carry
        )
        env_state, next_timestep, truncation_values = step_environments(
            env_state, action, keys[:, 1], network_carry
        )
        transition = ppo.transition(
            timestep, stored_action, log_prob, value, next_timestep
        )
        if critic_after_rollout:
            # The steps store no value (no placeholder to write at every
            # step); it is filled in after the rollout.
            transition = eqx.tree_at(lambda t: t.value, transition, None)
        if next_observation:
            # AutoReset's `final_observation` is the pre-reset observation on
            # every step (the step's own observation where no episode ended).
            transition = eqx.tree_at(
                lambda t: t.extras,
                transition,
                {
                    **transition.extras,
                    "next_observation": next_timestep.extras["final_observation"],
                },
            )
        return (env_state, next_timestep, network_carry), (
            transition,
            truncation_values,
        )

    with ppo.rollout_context(model, ppo.num_envs):
        (env_state, timestep, carry), (transitions, truncation_values) = filter_scan(
            step,
            (state.env_state, state.timestep, state.carry),
            split(key, ppo.num_steps),
        )
    if critic_after_rollout:
        observations = restore_observation(
            transitions.observation, ppo.env, ppo.observation_storage_dtype
        )
        values = critic_values(model, observations)
        transitions = eqx.tree_at(
            lambda t: t.value, transitions, values, is_leaf=lambda x: x is None
        )
    return env_state, timestep, carry, transitions, truncation_values


def critic_values(
    model: AbstractActorCritic, observations: PyTree[Array]
) -> Float[Array, "num_steps n"]:
    """A feed-forward critic's values of a rollout's observations (`[num_steps, n,
    ...]` leaves, as the environment returns them), as one batch of rows (on CPU,
    in blocks that stay in cache)."""
    num_steps, num_columns = jtu.tree_leaves(observations)[0].shape[:2]
    num_rows = num_steps * num_columns
    rows = jtu.tree_map(lambda x: x.reshape(num_rows, *x.shape[2:]), observations)
    values = map_over_row_blocks(
        jax.vmap(model.value), (rows,), cpu_row_blocks(num_rows, model)
    )
    return values.reshape(num_steps, num_columns)


def sample_action(
    model: AbstractActorCritic,
    carry: PyTree[Array] | None,
    timestep: TimeStep,
    key: PRNGKeyArray,
) -> tuple[PyTree[Array] | None, Array, Array, Float[Array, ""], Float[Array, ""]]:
    """One environment's action, sampled as `PPO.act` says (it vmaps this)."""
    if carry is not None:
        carry = reset_carry(
            carry,
            model.initial_carry(),
            timestep.terminated | timestep.truncated,
        )
    carry, distribution, value = model.step(
        carry, timestep.observation, timestep.action_mask
    )
    if is_squashed(distribution):
        pre_squash, log_prob = distribution.sample_pre_squash_and_log_prob(key)
        return carry, pre_squash, jnp.tanh(pre_squash), log_prob, value
    action, log_prob = distribution.sample_and_log_prob(key)
    return carry, action, action, log_prob, value


def rollout_transition(
    timestep: TimeStep,
    action: Array,
    log_prob: Float[Array, ""],
    value: Float[Array, ""],
    next_timestep: TimeStep,
) -> Transition:
    """The transition of one environment from `timestep` to `next_timestep`."""
    return Transition(
        observation=timestep.observation,
        action=action,
        log_prob=log_prob,
        value=value,
        reward=next_timestep.reward,
        terminated=next_timestep.terminated,
        truncated=next_timestep.truncated,
        action_mask=timestep.action_mask,
        extras=episode_statistics(next_timestep),
    )
