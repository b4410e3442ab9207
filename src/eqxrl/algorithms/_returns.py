import jax.lax as lax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float


def compute_gae(
    rewards: Float[Array, "num_steps num_envs"],
    values: Float[Array, "num_steps num_envs"],
    next_values: Float[Array, "num_steps num_envs"],
    terminated: Bool[Array, "num_steps num_envs"],
    truncated: Bool[Array, "num_steps num_envs"],
    gamma: Float[ArrayLike, ""],
    gae_lambda: Float[ArrayLike, ""],
) -> tuple[Float[Array, "num_steps num_envs"], Float[Array, "num_steps num_envs"]]:
    """Generalized advantage estimation with termination and truncation kept apart.

    The TD error at step `t` is
    `rewards[t] + gamma * (1 - terminated[t]) * next_values[t] - values[t]`, so a
    truncated step still bootstraps from the value of the state it reached; the
    lambda-recursion stops at every episode end (terminated or truncated), so no
    advantage leaks across episodes.

    **Arguments:**

    - `rewards`: reward of each step.
    - `values`: value of the state each step started from.
    - `next_values`: value of the state each step led to, *before* any auto-reset
      (for a step that ended an episode, the value of its final observation).
    - `terminated`, `truncated`: how each step ended.
    - `gamma`: discount factor.
    - `gae_lambda`: the GAE lambda.

    **Returns:**

    `(advantages, returns)` with `returns = advantages + values`, all float32
    `[num_steps, num_envs]`.
    """
    gamma = jnp.asarray(gamma, jnp.float32)
    gae_lambda = jnp.asarray(gae_lambda, jnp.float32)
    not_terminated = 1.0 - terminated.astype(jnp.float32)
    continues = 1.0 - (terminated | truncated).astype(jnp.float32)
    deltas = rewards + gamma * not_terminated * next_values - values
    decay = gamma * gae_lambda * continues

    def backward(next_advantage, step):
        delta, step_decay = step
        advantage = delta + step_decay * next_advantage
        return advantage, advantage

    _, advantages = lax.scan(
        backward, jnp.zeros_like(values[0]), (deltas, decay), reverse=True
    )
    return advantages, advantages + values
