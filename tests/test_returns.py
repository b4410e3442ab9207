import jax.numpy as jnp
import numpy as np
import pytest

from eqxrl.algorithms import compute_gae


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
