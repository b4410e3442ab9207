import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from ..envs import ENV_METRICS, TimeStep


def ended_episode_metrics(
    done: Bool[Array, "*batch"],
    episode_return: Float[Array, "*batch"],
    episode_length: Int[Array, "*batch"],
) -> dict[str, Array]:
    """Mean return and length of the episodes that ended (where `done`), and their
    count. Means are NaN when no episode ended."""
    count = done.sum()
    denominator = jnp.maximum(count, 1).astype(jnp.float32)

    def mean_over_ended(values: Array) -> Array:
        total = jnp.where(done, values.astype(jnp.float32), 0.0).sum()
        return jnp.where(count > 0, total / denominator, jnp.nan)

    return {
        "episode_return": mean_over_ended(episode_return),
        "episode_length": mean_over_ended(episode_length),
        "episode_count": count.astype(jnp.int32),
    }


def mean_environment_metrics(
    values: dict[str, Float[Array, "..."]],
) -> dict[str, Float[Array, ""]]:
    """The environment's own metrics (`extras["env_metrics"]`, see
    [`ENV_METRICS`][eqxrl.envs.ENV_METRICS], collected over the iteration's steps):
    each one's mean over every step of every environment, as float32."""
    return {name: jnp.mean(value.astype(jnp.float32)) for name, value in values.items()}


def episode_statistics(timestep: TimeStep) -> dict[str, Array | dict[str, Array]]:
    """What an iteration's episode metrics read of a (batched) step's timestep: the
    return and length [`EpisodeStatistics`][eqxrl.envs.EpisodeStatistics] recorded
    (`episode_return`, `episode_length`) and the environment's own metrics
    (`extras["env_metrics"]`, [`ENV_METRICS`][eqxrl.envs.ENV_METRICS]: domain
    parameters, a curriculum's difficulty; empty for most environments). Every
    algorithm's rollout keeps this of each step, and
    [`iteration_episode_metrics`][eqxrl.algorithms.iteration_episode_metrics]
    reduces the iteration's steps to its metrics.

    **Arguments:**

    - `timestep`: the timestep a step returned (inside
      [`AutoReset`][eqxrl.envs.AutoReset] and `EpisodeStatistics`).

    **Returns:**

    `{"episode_return": ..., "episode_length": ..., "env_metrics": {...}}`.
    """
    return {
        "episode_return": timestep.extras["episode_return"],
        "episode_length": timestep.extras["episode_length"],
        ENV_METRICS: dict(timestep.extras.get(ENV_METRICS, {})),
    }


def ended_episodes(
    timestep: TimeStep,
) -> tuple[Bool[Array, "*batch"], dict[str, Array | dict[str, Array]]]:
    """Where a (batched) step ended an episode (`terminated | truncated`), and the
    step's [`episode_statistics`][eqxrl.algorithms.episode_statistics]: what a
    rollout keeps of each step for its episode metrics. Stacked over an iteration's
    steps, they are the two arguments of
    [`iteration_episode_metrics`][eqxrl.algorithms.iteration_episode_metrics].

    **Arguments:**

    - `timestep`: the timestep a step returned (inside
      [`AutoReset`][eqxrl.envs.AutoReset] and `EpisodeStatistics`).

    **Returns:**

    `(done, statistics)`.
    """
    return timestep.terminated | timestep.truncated, episode_statistics(timestep)


def iteration_episode_metrics(
    done: Bool[Array, "*batch"], statistics: dict[str, Array | dict[str, Array]]
) -> dict[str, Array]:
    """An iteration's episode metrics: the mean return and length of the episodes
    that ended and their count
    ([`ended_episode_metrics`][eqxrl.algorithms.ended_episode_metrics]), and the
    mean of each of the environment's own metrics over every step of every
    environment (`domain_parameters/<name>`, `curriculum/difficulty`).

    **Arguments:**

    - `done`: whether an episode ended at each step (`terminated | truncated`),
      e.g. `[num_steps, num_envs]`.
    - `statistics`: [`episode_statistics`][eqxrl.algorithms.episode_statistics] of
      the same steps, stacked the same way.

    **Returns:**

    `episode_return`, `episode_length` (NaN when no episode ended),
    `episode_count`, and one scalar per environment metric.
    """
    metrics = ended_episode_metrics(
        done, statistics["episode_return"], statistics["episode_length"]
    )
    metrics.update(mean_environment_metrics(statistics[ENV_METRICS]))
    return metrics
