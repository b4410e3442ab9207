"""What a PPO run carries from one iteration to the next, and its first value."""

from typing import Any

import equinox as eqx
import jax.numpy as jnp
import jax.tree_util as jtu
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree

from ..envs import TimeStep
from ..nn import AbstractActorCritic, RunningMeanStd, empty_observation_statistics


class PPOState(eqx.Module):
    """Everything a PPO run carries from one iteration to the next.

    Environment fields are batched over `num_envs`.

    **Arguments:**

    - `model`: the actor-critic being trained.
    - `optimizer_state`: optax state of the optimizer.
    - `env_state`: state of every environment, `[num_envs, ...]` leaves.
    - `timestep`: the latest timestep of every environment.
    - `key`: the PRNG key for the next iteration.
    - `iteration`: how many iterations have run (int32).
    - `observation_statistics`: running observation statistics (with
      `normalize_observations`), else `None`: a `RunningMeanStd`, or for
      structured observations one per `Box` leaf in the observation's structure.
    - `return_statistics`: running statistics of the discounted return (with
      `normalize_rewards`), else `None`.
    - `discounted_returns`: each environment's running discounted return (with
      `normalize_rewards`), else `None`.
    - `carry`: with a recurrent network, each environment's carry as the network
      returned it at the latest step, `[num_envs, ...]` leaves (reset to the
      initial carry where `timestep` starts an episode, when the next step reads
      it), else `None`.
    """

    model: AbstractActorCritic
    optimizer_state: PyTree
    env_state: PyTree
    timestep: TimeStep
    key: PRNGKeyArray
    iteration: Int[Array, ""]
    observation_statistics: PyTree[RunningMeanStd | None] = None
    return_statistics: RunningMeanStd | None = None
    discounted_returns: Float[Array, " num_envs"] | None = None
    carry: PyTree[Array] | None = None


def initial_state(
    ppo: Any,
    model: AbstractActorCritic,
    optimizer_state: PyTree,
    env_state: PyTree,
    timestep: TimeStep,
    key: PRNGKeyArray,
) -> PPOState:
    """`ppo`'s first state (of a run, or of a learner): empty running statistics
    where it normalizes, and with a recurrent network every environment's initial
    carry."""
    observation_statistics = return_statistics = discounted_returns = None
    if ppo.normalize_observations:
        observation_statistics = empty_observation_statistics(ppo.env.observation_space)
    if ppo.normalize_rewards:
        return_statistics = RunningMeanStd.zeros(())
        num_columns = timestep.reward.shape[0]
        discounted_returns = jnp.zeros(num_columns, jnp.float32)
    carry = None
    if model.is_recurrent:
        num_columns = timestep.reward.shape[0]
        carry = jtu.tree_map(
            lambda x: jnp.broadcast_to(x, (num_columns, *x.shape)),
            model.initial_carry(),
        )
    return PPOState(
        model=model,
        optimizer_state=optimizer_state,
        env_state=env_state,
        timestep=timestep,
        key=key,
        iteration=jnp.int32(0),
        observation_statistics=observation_statistics,
        return_statistics=return_statistics,
        discounted_returns=discounted_returns,
        carry=carry,
    )
