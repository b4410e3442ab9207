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
    advantages = _backward_sums(deltas, decay)
    return advantages, advantages + values


def _backward_sums(
    terms: Float[Array, "num_steps num_envs"], decay: Float[Array, "num_steps num_envs"]
) -> Float[Array, "num_steps num_envs"]:
    """`x[t] = terms[t] + decay[t] * x[t + 1]`, backwards from `x[num_steps] = 0`:
    the recursion of GAE and of Q(lambda)."""

    def backward(next_sum, step):
        term, step_decay = step
        total = term + step_decay * next_sum
        return total, total

    _, sums = lax.scan(backward, jnp.zeros_like(terms[0]), (terms, decay), reverse=True)
    return sums


def compute_q_lambda_returns(
    rewards: Float[Array, "num_steps num_envs"],
    next_values: Float[Array, "num_steps num_envs"],
    terminated: Bool[Array, "num_steps num_envs"],
    truncated: Bool[Array, "num_steps num_envs"],
    gamma: Float[ArrayLike, ""],
    q_lambda: Float[ArrayLike, ""],
) -> Float[Array, "num_steps num_envs"]:
    """Peng's Q(lambda) returns over a rollout (PQN's targets), with termination and
    truncation kept apart.

    With `next_values[t]` the greedy value `max_a Q(s_{t+1}, a)` of the state step
    `t` led to (before any auto-reset), the return is

        G[t] = rewards[t] + gamma * (1 - terminated[t]) * next_values[t]
               + gamma * q_lambda * continues[t] * (G[t + 1] - next_values[t])

    where `continues[t]` is 0 at the rollout's last step and wherever an episode
    ended (terminated or truncated). So a truncated step bootstraps from the value of
    its final state, a terminated one from nothing, and no return crosses an episode
    end. `q_lambda = 0` gives one-step Q-learning targets, `q_lambda = 1` the
    discounted return to the end of the episode or rollout, bootstrapped there.

    It is the recursion of [`compute_gae`][eqxrl.algorithms.compute_gae] (one
    implementation for both), with its terms grouped as the reference writes them,
    `rewards[t] + gamma * next_values[t] * (1 - q_lambda)` where the return
    continues: summing GAE's advantages and values instead would cancel large
    values and lose digits on small returns.

    **Arguments:**

    - `rewards`: reward of each step.
    - `next_values`: the greedy value of the state each step led to, before any
      auto-reset (for a step that ended an episode, its final observation's).
    - `terminated`, `truncated`: how each step ended.
    - `gamma`: discount factor.
    - `q_lambda`: the lambda of Q(lambda), in [0, 1].

    **Returns:**

    The float32 returns, `[num_steps, num_envs]`.
    """
    gamma = jnp.asarray(gamma, jnp.float32)
    q_lambda = jnp.asarray(q_lambda, jnp.float32)
    not_terminated = 1.0 - terminated.astype(jnp.float32)
    continues = 1.0 - (terminated | truncated).astype(jnp.float32)
    continues = continues.at[-1].set(0.0)  # the rollout's end: bootstrap there
    # One-step target, less the part the next return replaces where it continues.
    terms = rewards + gamma * next_values * (not_terminated - q_lambda * continues)
    return _backward_sums(terms, gamma * q_lambda * continues)
