"""The gymnasium host bridge, `from_gymnasium`: semantics against gymnasium itself,
state handling, errors and a short PPO run on gymnasium's CartPole-v1."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")

import eqxrl  # noqa: E402
from eqxrl.envs import AutoReset, Box, Discrete, from_gymnasium  # noqa: E402

# The PPO run uses optax's Adam.
STANDARD_DTYPE_PROMOTION = True


@pytest.fixture
def cartpole():
    env = from_gymnasium("CartPole-v1")
    yield env
    env.close()


def seed_of(state) -> int:
    high, low = np.asarray(state.seed).tolist()
    return high << 32 | low


def test_spaces_and_types(cartpole):
    assert cartpole.action_space == Discrete(2)
    assert isinstance(cartpole.observation_space, Box)
    assert cartpole.observation_space.shape == (4,)
    state, timestep = cartpole.reset(jr.key(0))
    assert int(state.episode) == -1 and int(state.step_count) == 0
    assert timestep.observation.dtype == jnp.float32
    state, timestep = cartpole.step(state, jnp.int32(1), jr.key(1))
    assert timestep.reward.dtype == jnp.float32 and float(timestep.reward) == 1.0
    assert timestep.terminated.dtype == jnp.bool_
    assert int(state.episode) >= 0 and int(state.step_count) == 1


def test_episode_matches_gymnasium(cartpole):
    state, timestep = cartpole.reset(jr.key(3))
    reference = gymnasium.make("CartPole-v1")
    observation, _ = reference.reset(seed=seed_of(state))
    np.testing.assert_array_equal(timestep.observation, observation)
    step = jax.jit(cartpole.step)
    for t in range(100):
        action = t % 3 == 0
        state, timestep = step(state, jnp.int32(action), jr.key(t))
        observation, reward, terminated, truncated, _ = reference.step(int(action))
        np.testing.assert_array_equal(timestep.observation, observation)
        assert float(timestep.reward) == reward
        assert bool(timestep.terminated) == terminated
        assert bool(timestep.truncated) == truncated
        if terminated or truncated:
            break
    assert terminated  # this action pattern drops the pole within 100 steps


def test_reset_is_a_function_of_the_key(cartpole):
    _, first = cartpole.reset(jr.key(0))
    _, again = cartpole.reset(jr.key(0))
    _, other = cartpole.reset(jr.key(1))
    np.testing.assert_array_equal(first.observation, again.observation)
    assert not np.array_equal(first.observation, other.observation)


def test_first_step_of_a_reset_state_is_pure(cartpole):
    state, _ = cartpole.reset(jr.key(0))
    one, first = cartpole.step(state, jnp.int32(1), jr.key(1))
    two, again = cartpole.step(state, jnp.int32(1), jr.key(1))
    np.testing.assert_array_equal(first.observation, again.observation)
    assert int(one.episode) != int(two.episode)  # two instances, same episode start


def test_stepping_a_state_twice_raises(cartpole):
    state, _ = cartpole.reset(jr.key(0))
    state, _ = cartpole.step(state, jnp.int32(1), jr.key(1))
    cartpole.step(state, jnp.int32(1), jr.key(2))
    with pytest.raises(eqx.EquinoxRuntimeError, match="stepped before"):
        cartpole.step(state, jnp.int32(1), jr.key(3))


def test_stepping_an_ended_episode_raises(cartpole):
    state, _ = cartpole.reset(jr.key(0))
    step = eqx.filter_jit(cartpole.step)
    for _ in range(100):
        state, timestep = step(state, jnp.int32(1), jr.key(0))
        if timestep.terminated:
            break
    assert timestep.terminated
    assert len(cartpole.host.running) == 0 and len(cartpole.host.idle) == 1
    with pytest.raises(eqx.EquinoxRuntimeError, match="no host environment runs"):
        step(state, jnp.int32(1), jr.key(0))


def test_vmapped_auto_reset_rollout_reuses_instances(cartpole):
    env = AutoReset(cartpole)
    num_envs, num_steps = 5, 120
    state, timestep = jax.vmap(env.reset)(jr.split(jr.key(0), num_envs))

    def step(carry, key):
        state, timestep = carry
        action_key, step_key = jr.split(key)
        action = jr.randint(action_key, (num_envs,), 0, 2)
        state, timestep = jax.vmap(env.step)(
            state, action, jr.split(step_key, num_envs)
        )
        return (state, timestep), timestep

    run = jax.jit(
        lambda carry: jax.lax.scan(step, carry, jr.split(jr.key(1), num_steps))
    )
    (state, _), timesteps = run((state, timestep))
    done = np.asarray(timesteps.terminated | timesteps.truncated)
    assert done.sum() > num_envs  # random play: episodes of ~20 steps
    # After an episode ends the next observation is a fresh reset (|x| <= 0.05).
    observation = np.asarray(timesteps.observation)
    assert np.abs(observation[done]).max() <= 0.05
    # One instance per environment (plus a few waiting): ended episodes give theirs
    # back to the pool.
    host = cartpole.host
    assert len(host.running) == num_envs
    assert len(host.running) + len(host.idle) <= 2 * num_envs
    # The same key gives the same rollout (seeds come from the keys).
    state, timestep = jax.vmap(env.reset)(jr.split(jr.key(0), num_envs))
    _, again = run((state, timestep))
    np.testing.assert_array_equal(again.observation, timesteps.observation)


def test_discrete_observations_and_box_actions():
    lake = from_gymnasium("FrozenLake-v1", is_slippery=False)
    assert lake.observation_space == Discrete(16)
    state, timestep = lake.reset(jr.key(0))
    assert timestep.observation.dtype == jnp.int32 and int(timestep.observation) == 0
    _, timestep = lake.step(state, jnp.int32(2), jr.key(0))  # right
    assert int(timestep.observation) == 1
    lake.close()

    pendulum = from_gymnasium("Pendulum-v1")
    assert isinstance(pendulum.action_space, Box)
    state, _ = pendulum.reset(jr.key(0))
    _, timestep = pendulum.step(state, jnp.array([2.0], jnp.float32), jr.key(0))
    assert timestep.observation.shape == (3,) and float(timestep.reward) < 0
    pendulum.close()


def test_accepts_an_environment_or_a_factory():
    template = gymnasium.make("CartPole-v1")
    from_object = from_gymnasium(template)
    from_factory = from_gymnasium(lambda: gymnasium.make("CartPole-v1"))
    for env in (from_object, from_factory):
        state, first = env.reset(jr.key(0))
        _, timestep = env.step(state, jnp.int32(0), jr.key(0))
        assert timestep.observation.shape == (4,)
        env.close()
    with pytest.raises(ValueError, match="gymnasium.make"):
        from_gymnasium(template, max_episode_steps=10)


def test_unsupported_space_raises():
    """Observations convert from Dict and Tuple spaces too
    (tests/test_structured_observations.py); actions only from Discrete and Box."""

    def multi_discrete_actions():
        env = gymnasium.make("CartPole-v1")
        env.action_space = gymnasium.spaces.MultiDiscrete([2, 2])
        return env

    with pytest.raises(ValueError, match="Discrete and Box action spaces"):
        from_gymnasium(multi_discrete_actions)


@pytest.mark.learning
def test_ppo_learns_gymnasium_cartpole(cartpole):
    """The unchanged PPO trainer on the host environment, four seeds in one vmap (so
    the callbacks see a [seeds, envs] batch): 16k steps lift the return from ~30 to
    well above 100 on three seeds of four at least (runs differ between CPUs)."""
    num_seeds = 4
    ppo = eqxrl.PPO(
        env=cartpole,
        num_envs=8,
        num_steps=128,
        total_timesteps=8 * 128 * 16,
        learning_rate=1e-3,
    )
    states, metrics = eqx.filter_vmap(ppo.train)(jr.split(jr.key(0), num_seeds))
    assert states.iteration.tolist() == [16] * num_seeds
    assert np.isfinite(metrics["total_loss"]).all()
    returns = np.asarray(metrics["episode_return"])
    lengths = np.asarray(metrics["episode_length"])
    np.testing.assert_allclose(returns, lengths)  # CartPole: reward 1 per step
    counts = np.asarray(metrics["episode_count"])

    def mean_return(window):
        # Over episodes, not iterations: an iteration in which no episode ended has a
        # NaN return (likely late, once episodes outlast an iteration's 128 steps).
        return np.nansum((returns * counts)[:, window], axis=1) / np.sum(
            counts[:, window], axis=1
        )

    # 5 iterations = 640 steps: the 500-step limit ends an episode in every env.
    first, last = mean_return(slice(0, 5)), mean_return(slice(-5, None))
    print("mean episode return, first and last 5 iterations per seed:", first, last)
    # 8 seeds ended at 165-236 on an AMD EPYC.
    assert np.sum((last > 100) & (last > 3 * first)) >= 3, (first, last)
    # One instance per environment at most (an episode that ended on the last step
    # has none yet), and ended episodes gave theirs back to be reused.
    host = cartpole.host
    assert len(host.running) <= num_seeds * 8
    assert len(host.running) + len(host.idle) <= 2 * num_seeds * 8
