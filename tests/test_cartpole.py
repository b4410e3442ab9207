import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl
from eqxrl.envs import CartPole, CartPoleState


def test_make_cartpole_has_gymnasium_time_limit():
    env = eqxrl.envs.make("CartPole-v1")
    assert isinstance(env, eqxrl.envs.TimeLimit)
    assert env.max_episode_steps == 500
    assert isinstance(env.env, CartPole)
    assert env.action_space == eqxrl.envs.Discrete(2)
    assert env.observation_space.shape == (4,)


def test_make_unknown_name_lists_registered():
    with pytest.raises(ValueError, match="CartPole-v1"):
        eqxrl.envs.make("CartPole-v0")


@pytest.mark.parametrize("seed", range(5))
def test_trajectory_matches_gymnasium(seed):
    gymnasium = pytest.importorskip("gymnasium")
    reference = gymnasium.make("CartPole-v1").unwrapped
    reference.reset(seed=seed)
    env = CartPole()
    state, timestep = env.reset(jr.key(seed))
    # Start gymnasium from our initial state, then replay the same actions.
    reference.state = np.asarray(timestep.observation, dtype=np.float64)
    step = eqx.filter_jit(env.step)
    rng = np.random.default_rng(seed)
    for t in range(500):
        action = int(rng.integers(2)) if t % 3 else int(t % 2)
        observation, reward, terminated, truncated, _ = reference.step(action)
        state, timestep = step(state, jnp.int32(action), jr.key(t))
        np.testing.assert_allclose(
            timestep.observation, observation, rtol=1e-4, atol=1e-5
        )
        assert float(timestep.reward) == reward
        assert bool(timestep.terminated) == terminated
        assert not bool(timestep.truncated) and not truncated
        if terminated:
            break
    assert terminated, "a random policy should drop the pole within 500 steps"


def test_reset_distribution_is_gymnasiums():
    env = CartPole()
    _, timesteps = jax.vmap(env.reset)(jr.split(jr.key(0), 10_000))
    observations = np.asarray(timesteps.observation)
    assert observations.min() >= -0.05 and observations.max() <= 0.05
    assert observations.std() == pytest.approx(0.1 / np.sqrt(12), rel=0.05)
    assert not timesteps.terminated.any() and not timesteps.truncated.any()
    assert (timesteps.reward == 0).all()


def test_termination_thresholds():
    env = CartPole()
    key = jr.key(0)
    beyond_x = CartPoleState(jnp.array([2.39, 1.0, 0.0, 0.0], jnp.float32))
    _, timestep = env.step(beyond_x, jnp.int32(1), key)
    assert bool(timestep.terminated)
    upright = CartPoleState(jnp.zeros(4, jnp.float32))
    _, timestep = env.step(upright, jnp.int32(1), key)
    assert not bool(timestep.terminated)
    tilted = CartPoleState(jnp.array([0.0, 0.0, 0.209, 1.0], jnp.float32))
    _, timestep = env.step(tilted, jnp.int32(0), key)
    assert bool(timestep.terminated)


def test_physics_constants_are_vmappable():
    gravities = jnp.array([9.8, 20.0], jnp.float32)
    state = CartPoleState(jnp.array([0.0, 0.0, 0.1, 0.0], jnp.float32))

    def theta_dot_after_one_step(gravity):
        next_state, _ = CartPole(gravity=gravity).step(state, jnp.int32(0), jr.key(0))
        return next_state.theta_dot

    theta_dots = jax.vmap(theta_dot_after_one_step)(gravities)
    assert theta_dots[1] > theta_dots[0]
