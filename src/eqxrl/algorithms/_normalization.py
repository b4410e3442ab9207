"""PPO's running normalization of a rollout: its observations merged into the
observation statistics, and its rewards scaled by the running standard deviation of
the discounted return (as Stable-Baselines3's `VecNormalize`)."""

import jax.lax as lax
import jax.numpy as jnp
import jax.tree_util as jtu
from jaxtyping import Array, Bool, Float, PyTree

from ..nn import RunningMeanStd, update_observation_statistics


def merged_observation_statistics(
    statistics: PyTree[RunningMeanStd | None],
    observations: PyTree[Array],
) -> PyTree[RunningMeanStd | None]:
    """`statistics` merged with every observation of a rollout (`[num_steps, n,
    ...]` leaves, as the environment returns them)."""
    rows = jtu.tree_map(lambda x: x.reshape(-1, *x.shape[2:]), observations)
    return update_observation_statistics(statistics, rows)


def normalized_rewards(
    rewards: Float[Array, "num_steps num_envs"],
    done: Bool[Array, "num_steps num_envs"],
    return_statistics: RunningMeanStd,
    discounted_returns: Float[Array, " num_envs"],
    gamma: Float[Array, ""],
) -> tuple[
    Float[Array, "num_steps num_envs"], RunningMeanStd, Float[Array, " num_envs"]
]:
    """Rewards divided by the running std of the discounted return, which is
    accumulated per environment (restarting with each episode) and merged into
    the statistics first; clipped to `+-10`.

    **Returns:**

    `(rewards, return_statistics, discounted_returns)`, the statistics and each
    environment's running discounted return after the rollout.
    """

    def accumulate(running, step):
        reward, step_done = step
        running = running * gamma + reward
        return jnp.where(step_done, 0.0, running), running

    discounted_returns, returns_seen = lax.scan(
        accumulate, discounted_returns, (rewards, done)
    )
    return_statistics = return_statistics.update(returns_seen.reshape(-1))
    scale = jnp.sqrt(return_statistics.var + 1e-8)
    rewards = jnp.clip(rewards / scale, -10.0, 10.0)
    return rewards, return_statistics, discounted_returns
