"""Continuous control: Gaussian policies, Pendulum, action wrappers, normalization."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl
from eqxrl.distributions import DiagonalGaussian
from eqxrl.envs import ClipAction, Pendulum, PendulumState, RescaleAction
from eqxrl.nn import MLPGaussianActorCritic, RunningMeanStd

# optax.adam computes `b1 ** count` with an int32 count.
STANDARD_DTYPE_PROMOTION = True


def test_gaussian_log_prob_matches_formula():
    mean = jnp.array([0.5, -1.0], jnp.float32)
    log_std = jnp.array([0.0, -0.5], jnp.float32)
    action = jnp.array([0.1, -0.7], jnp.float32)
    std = np.exp(np.asarray(log_std))
    expected = np.sum(
        -0.5 * ((np.asarray(action) - np.asarray(mean)) / std) ** 2
        - np.log(std)
        - 0.5 * np.log(2 * np.pi)
    )
    distribution = DiagonalGaussian(mean, log_std)
    assert float(distribution.log_prob(action)) == pytest.approx(expected, rel=1e-5)
    expected_entropy = np.sum(0.5 * np.log(2 * np.pi * np.e) + np.asarray(log_std))
    assert float(distribution.entropy()) == pytest.approx(expected_entropy, rel=1e-5)
    assert distribution.mode().tolist() == mean.tolist()


def test_squashed_gaussian_samples_and_log_probs():
    distribution = DiagonalGaussian(
        jnp.array([3.0, 0.0], jnp.float32), jnp.array([1.0, 0.0], jnp.float32), True
    )
    actions, log_probs = jax.vmap(distribution.sample_and_log_prob)(
        jr.split(jr.key(0), 2000)
    )
    assert (jnp.abs(actions) <= 1).all()
    assert np.isfinite(log_probs).all()
    np.testing.assert_allclose(
        jax.vmap(distribution.log_prob)(actions), log_probs, rtol=1e-6
    )
    # Saturated actions (tanh rounding to +-1) still have finite log-probs.
    assert np.isfinite(float(distribution.log_prob(jnp.ones(2, jnp.float32))))
    # The change of variables: density of tanh(x) at y is N(atanh y) / (1 - y^2).
    unit = DiagonalGaussian(jnp.zeros(1), jnp.zeros(1), True)
    y = 0.5
    expected = -0.5 * np.arctanh(y) ** 2 - 0.5 * np.log(2 * np.pi) - np.log(1 - y**2)
    assert float(unit.log_prob(jnp.array([y]))) == pytest.approx(expected, rel=1e-5)


def test_gaussian_actor_critic_state_dependent_and_independent_std():
    observation = jnp.ones(3, jnp.float32)
    independent = MLPGaussianActorCritic(3, 2, initial_log_std=-1.0, key=jr.key(0))
    distribution, value = independent(observation)
    assert distribution.log_std.tolist() == [-1.0, -1.0]
    assert distribution.sample(jr.key(1)).shape == (2,) and value.shape == ()
    dependent = MLPGaussianActorCritic(
        3, 2, state_dependent_std=True, initial_log_std=-1.0, key=jr.key(0)
    )
    assert dependent.log_std is None
    np.testing.assert_allclose(dependent(observation)[0].log_std, -1.0, atol=0.1)


@pytest.mark.parametrize("seed", range(3))
def test_pendulum_matches_gymnasium(seed):
    gymnasium = pytest.importorskip("gymnasium")
    reference = gymnasium.make("Pendulum-v1").unwrapped
    reference.reset(seed=seed)
    env = Pendulum()
    state, _ = env.reset(jr.key(seed))
    step = eqx.filter_jit(env.step)
    rng = np.random.default_rng(seed)
    for t in range(200):
        # Step by step from the same state: float32 here vs float64 there would
        # otherwise drift apart over a long swing.
        reference.state = np.array([float(state.theta), float(state.theta_dot)])
        torque = rng.uniform(-3.0, 3.0, size=(1,)).astype(np.float32)
        observation, reward, terminated, truncated, _ = reference.step(torque)
        state, timestep = step(state, jnp.asarray(torque), jr.key(t))
        np.testing.assert_allclose(
            timestep.observation, observation, rtol=1e-4, atol=1e-4
        )
        assert float(timestep.reward) == pytest.approx(reward, rel=1e-4, abs=1e-4)
        assert not bool(timestep.terminated) and not terminated


def test_pendulum_time_limit_and_reset_distribution():
    env = eqxrl.envs.make("Pendulum-v1")
    assert env.max_episode_steps == 200
    states, timesteps = jax.vmap(env.reset)(jr.split(jr.key(0), 4000))
    theta = np.asarray(states.env_state.theta)
    assert theta.min() >= -np.pi and theta.max() <= np.pi and theta.std() > 1.5
    assert np.abs(np.asarray(timesteps.observation)[:, 2]).max() <= 1.0


def test_clip_and_rescale_action():
    pendulum = Pendulum()
    state = PendulumState(jnp.float32(0.0), jnp.float32(0.0))
    key = jr.key(0)
    _, clipped = ClipAction(pendulum).step(state, jnp.array([5.0]), key)
    _, at_bound = pendulum.step(state, jnp.array([2.0]), key)
    assert float(clipped.reward) == float(at_bound.reward)
    rescaled_env = RescaleAction(pendulum)
    assert rescaled_env.action_space.low.tolist() == [-1.0]
    next_rescaled, _ = rescaled_env.step(state, jnp.array([0.5]), key)
    next_direct, _ = pendulum.step(state, jnp.array([1.0]), key)
    assert float(next_rescaled.theta_dot) == float(next_direct.theta_dot)
    with pytest.raises(ValueError, match="Box"):
        ClipAction(eqxrl.envs.CartPole())
    with pytest.raises(ValueError, match="low"):
        RescaleAction(pendulum, low=1.0, high=-1.0)


def test_running_mean_std_matches_numpy():
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=(n, 2)).astype(np.float32) for n in (5, 50, 7)]
    statistics = RunningMeanStd.zeros((2,))
    for batch in batches:
        statistics = statistics.update(jnp.asarray(batch))
    everything = np.concatenate(batches)
    np.testing.assert_allclose(statistics.mean, everything.mean(0), rtol=1e-4)
    np.testing.assert_allclose(statistics.var, everything.var(0), rtol=1e-3)
    normalized = jax.vmap(statistics.normalize)(jnp.asarray(everything))
    np.testing.assert_allclose(normalized.mean(0), 0.0, atol=1e-3)


def test_normalized_ppo_exports_normalizer_with_policy():
    env = eqxrl.envs.make("Pendulum-v1")
    ppo = eqxrl.PPO(
        env=env,
        num_envs=4,
        num_steps=32,
        total_timesteps=4 * 32 * 3,
        num_minibatches=4,
        normalize_observations=True,
        normalize_rewards=True,
    )
    state, metrics = ppo.train(jr.key(0))
    assert "max_entropy" not in metrics and "invalid_action_count" not in metrics
    assert np.isfinite(metrics["total_loss"]).all()
    assert float(state.observation_statistics.count) > 4 * 32 * 2
    assert float(state.return_statistics.var) > 0
    assert state.discounted_returns.shape == (4,)
    policy = ppo.policy(state, deterministic=True)
    assert isinstance(policy.model, eqxrl.nn.NormalizedActorCritic)
    raw = jnp.array([1.0, 0.0, 0.5], jnp.float32)
    expected = state.model(state.observation_statistics.normalize(raw))[0].mode()
    np.testing.assert_allclose(policy.act(raw, jr.key(0)), expected, rtol=1e-6)


@pytest.mark.slow
def test_ppo_learns_pendulum():
    """Four seeds in one vmapped program; three must swing up (a random policy
    scores about -1200; float rounding differs between CPUs, and so do the runs)."""
    ppo = eqxrl.PPO(
        env=eqxrl.envs.make("Pendulum-v1"),
        num_envs=16,
        num_steps=256,
        num_epochs=10,
        num_minibatches=32,
        learning_rate=1e-3,
        gamma=0.95,
        gae_lambda=0.95,
        ent_coef=0.0,
        total_timesteps=16 * 256 * 60,
        normalize_observations=True,
        normalize_rewards=True,
    )
    _, metrics = eqx.filter_vmap(ppo.train)(jr.split(jr.key(0), 4))
    returns = np.asarray(metrics["episode_return"])
    first = np.nanmean(returns[:, :5], axis=1)
    final = np.nanmean(returns[:, -5:], axis=1)
    print("Pendulum return per seed, first and last 5 iterations:", first, final)
    assert np.sum(final > -400) >= 3, final
    assert np.sum(final > first + 500) >= 3, (first, final)
