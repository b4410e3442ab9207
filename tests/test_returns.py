import jax.numpy as jnp
import numpy as np
import pytest

from eqxrl.algorithms import compute_gae, compute_q_lambda_returns


def reference_gae(rewards, values, next_values, terminated, truncated, gamma, lam):
    num_steps, num_envs = rewards.shape
    advantages = np.zeros_like(rewards)
    for env in range(num_envs):
        running = 0.0
        for t in reversed(range(num_steps)):
            delta = (
                rewards[t, env]
                + gamma * (1.0 - terminated[t, env]) * next_values[t, env]
                - values[t, env]
            )
            episode_ended = terminated[t, env] or truncated[t, env]
            running = delta + gamma * lam * (0.0 if episode_ended else running)
            advantages[t, env] = running
    return advantages, advantages + values


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gae_matches_numpy_loop(seed):
    rng = np.random.default_rng(seed)
    shape = (64, 5)
    rewards = rng.normal(size=shape).astype(np.float32)
    values = rng.normal(size=shape).astype(np.float32)
    next_values = rng.normal(size=shape).astype(np.float32)
    terminated = rng.random(shape) < 0.1
    truncated = rng.random(shape) < 0.1
    gamma, lam = 0.97, 0.9
    expected_advantages, expected_returns = reference_gae(
        rewards, values, next_values, terminated, truncated, gamma, lam
    )
    advantages, returns = compute_gae(
        jnp.asarray(rewards),
        jnp.asarray(values),
        jnp.asarray(next_values),
        jnp.asarray(terminated),
        jnp.asarray(truncated),
        gamma,
        lam,
    )
    assert terminated.any() and truncated.any() and (terminated & truncated).any()
    np.testing.assert_allclose(advantages, expected_advantages, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(returns, expected_returns, rtol=1e-5, atol=1e-5)


def test_truncation_bootstraps_and_termination_does_not():
    ones = jnp.ones((1, 1), jnp.float32)
    no = jnp.zeros((1, 1), bool)
    yes = jnp.ones((1, 1), bool)
    truncated_advantage, _ = compute_gae(ones, 0 * ones, 10 * ones, no, yes, 0.5, 0.95)
    terminated_advantage, _ = compute_gae(ones, 0 * ones, 10 * ones, yes, no, 0.5, 0.95)
    assert float(truncated_advantage[0, 0]) == pytest.approx(1.0 + 0.5 * 10.0)
    assert float(terminated_advantage[0, 0]) == pytest.approx(1.0)


def test_gae_rejects_mismatched_shapes():
    a = jnp.zeros((4, 2), jnp.float32)
    b = jnp.zeros((4, 3), jnp.float32)
    flags = jnp.zeros((4, 2), bool)
    with pytest.raises(Exception, match="values"):
        compute_gae(a, b, a, flags, flags, 0.9, 0.9)


def reference_q_lambda(rewards, next_values, terminated, truncated, gamma, lam):
    """Peng's Q(lambda) in float64, as PQN writes it: one-step target blended with
    the next return, cut at every episode end and at the rollout's end."""
    num_steps, num_envs = rewards.shape
    returns = np.zeros(rewards.shape, np.float64)
    for env in range(num_envs):
        for t in reversed(range(num_steps)):
            bootstrap = gamma * (1.0 - terminated[t, env]) * next_values[t, env]
            one_step = rewards[t, env] + bootstrap
            ended = terminated[t, env] or truncated[t, env] or t == num_steps - 1
            if ended:
                returns[t, env] = one_step
            else:
                returns[t, env] = rewards[t, env] + gamma * (
                    (1.0 - lam) * next_values[t, env] + lam * returns[t + 1, env]
                )
    return returns


@pytest.mark.xla_defaults
@pytest.mark.parametrize("q_lambda", [0.0, 0.65, 1.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_q_lambda_returns_match_numpy_at_terminated_and_truncated_steps(seed, q_lambda):
    rng = np.random.default_rng(seed)
    shape = (64, 6)
    rewards = rng.normal(size=shape).astype(np.float32)
    next_values = rng.normal(scale=3.0, size=shape).astype(np.float32)
    terminated = rng.random(shape) < 0.08
    truncated = (rng.random(shape) < 0.08) & ~terminated
    assert terminated.any() and truncated.any()
    expected = reference_q_lambda(
        rewards, next_values, terminated, truncated, 0.99, q_lambda
    )
    returns = compute_q_lambda_returns(
        jnp.asarray(rewards),
        jnp.asarray(next_values),
        jnp.asarray(terminated),
        jnp.asarray(truncated),
        0.99,
        q_lambda,
    )
    assert returns.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(returns), expected, rtol=1e-6, atol=1e-6)
    # Where an episode ended: the one-step target, bootstrapped at a truncation only.
    one_step = rewards + 0.99 * np.where(terminated, 0.0, next_values)
    ended = terminated | truncated
    np.testing.assert_allclose(
        np.asarray(returns)[ended], one_step[ended], rtol=1e-6, atol=1e-6
    )
