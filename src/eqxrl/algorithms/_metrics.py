import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int


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
