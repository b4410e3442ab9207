"""Adapters between eqxrl and gymnax: `from_gymnax` (gymnax 0.x and 1.0 step APIs)
and `to_gymnax` (a PureJaxRL-style rollout loop against eqxrl environments)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

gymnax = pytest.importorskip("gymnax")

from flax import struct  # noqa: E402  (installed with gymnax)
from gymnax.environments import spaces  # noqa: E402

import eqxrl  # noqa: E402
from eqxrl.envs import AutoReset, Box, Discrete, from_gymnax, to_gymnax  # noqa: E402

# gymnax's own code (e.g. CartPole's `1.0 - prev_terminal`) relies on standard
# promotion, and the PPO runs use optax's Adam.
STANDARD_DTYPE_PROMOTION = True


def rollout(env, actions, key=jr.key(0)):
    """Step one eqxrl environment through `actions` (no auto-reset); stack the
    timesteps."""
    state, first = env.reset(key)

    def step(state, inputs):
        action, key = inputs
        state, timestep = env.step(state, action, key)
        return state, timestep

    keys = jr.split(jr.fold_in(key, 1), len(actions))
    _, timesteps = jax.lax.scan(step, state, (actions, keys))
    return first, timesteps


# -- from_gymnax with gymnax 1.0 (six-value step) ------------------------------------


def test_cartpole_matches_gymnax_step_env():
    gymnax_env, params = gymnax.make("CartPole-v1")
    env = from_gymnax(gymnax_env, params)
    assert env.six_value_step
    assert env.action_space == Discrete(2)
    assert isinstance(env.observation_space, Box)
    assert env.observation_space.shape == (4,)
    actions = jnp.array([1, 0, 1, 1, 0, 0, 1, 0], jnp.int32)
    first, timesteps = rollout(env, actions)

    observation, state = gymnax_env.reset_env(jr.key(0), params)
    np.testing.assert_array_equal(first.observation, observation)
    keys = jr.split(jr.fold_in(jr.key(0), 1), len(actions))
    step_env = jax.jit(gymnax_env.step_env)
    for t, action in enumerate(actions):
        observation, state, reward, done, _ = step_env(keys[t], state, action, params)
        np.testing.assert_allclose(timesteps.observation[t], observation, atol=1e-6)
        assert float(timesteps.reward[t]) == float(reward)
        assert bool(timesteps.terminated[t]) == bool(done)
    assert timesteps.observation.dtype == jnp.float32
    assert timesteps.reward.dtype == jnp.float32
    assert timesteps.terminated.dtype == jnp.bool_
    assert "discount" in timesteps.extras["info"]


def test_cartpole_termination_is_not_truncation():
    env = from_gymnax(*gymnax.make("CartPole-v1"))
    _, timesteps = rollout(env, jnp.ones(30, jnp.int32))  # always push right
    terminated = np.asarray(timesteps.terminated)
    assert terminated.any()
    first_end = int(np.argmax(terminated))
    assert 5 < first_end < 30
    assert not np.asarray(timesteps.truncated)[: first_end + 1].any()


def test_time_limit_from_params_is_truncation():
    gymnax_env, params = gymnax.make("CartPole-v1")
    params = params.replace(max_steps_in_episode=10)
    env = AutoReset(from_gymnax(gymnax_env, params))
    alternate = jnp.tile(jnp.array([0, 1], jnp.int32), 15)  # keeps the pole up
    _, timesteps = rollout(env, alternate)
    truncated = np.asarray(timesteps.truncated)
    assert truncated.tolist() == ([False] * 9 + [True]) * 3
    assert not np.asarray(timesteps.terminated).any()
    # AutoReset started new episodes: the observation after a truncation is a
    # fresh reset, the final one is kept for bootstrapping.
    final = np.asarray(timesteps.extras["final_observation"])
    observation = np.asarray(timesteps.observation)
    assert not np.allclose(final[9], observation[9])
    np.testing.assert_array_equal(final[8], observation[8])


def test_acrobot_truncates_at_its_limit():
    gymnax_env, params = gymnax.make("Acrobot-v1")
    params = params.replace(max_steps_in_episode=20)
    env = from_gymnax(gymnax_env, params)
    assert env.action_space == Discrete(3)
    assert env.observation_space.shape == (6,)
    _, timesteps = rollout(env, jnp.ones(20, jnp.int32))
    assert np.asarray(timesteps.truncated).tolist() == [False] * 19 + [True]
    assert not np.asarray(timesteps.terminated).any()
    assert (np.asarray(timesteps.reward) == -1.0).all()


def test_minatar_breakout_frames_become_float_boxes():
    env = from_gymnax(*gymnax.make("Breakout-MinAtar"))
    space = env.observation_space
    assert isinstance(space, Box) and space.shape == (10, 10, 4)
    assert (space.low == 0.0).all() and (space.high == 1.0).all()
    assert env.action_space == Discrete(3)
    actions = jax.vmap(env.action_space.sample)(jr.split(jr.key(1), 60))
    first, timesteps = rollout(env, actions)
    assert first.observation.dtype == jnp.float32
    assert timesteps.observation.shape == (60, 10, 10, 4)
    assert set(np.unique(timesteps.observation).tolist()) == {0.0, 1.0}
    assert np.asarray(timesteps.terminated).any()  # random play loses the ball
    assert not np.asarray(timesteps.truncated).any()


def test_continuous_action_box():
    gymnax_env, params = gymnax.make("Pendulum-v1")
    env = from_gymnax(gymnax_env, params)
    assert isinstance(env.action_space, Box)
    assert env.action_space.shape == (1,)
    _, timesteps = rollout(env, jnp.full((5, 1), 0.5, jnp.float32))
    assert timesteps.reward.shape == (5,)
    assert (np.asarray(timesteps.reward) < 0).all()


def test_vmapped_params_randomize_the_domain():
    gymnax_env, params = gymnax.make("CartPole-v1")

    def first_steps(gravity):
        env = from_gymnax(gymnax_env, params.replace(gravity=gravity))
        return rollout(env, jnp.ones(5, jnp.int32))[1].observation

    observations = jax.vmap(first_steps)(jnp.array([1.0, 9.8, 30.0], jnp.float32))
    assert observations.shape == (3, 5, 4)
    assert not np.allclose(observations[0], observations[2])


@pytest.mark.learning
def test_ppo_learns_gymnax_cartpole():
    """Four seeds in one vmapped program; three must learn (runs differ between
    CPUs: no single float trajectory is relied on)."""
    env = from_gymnax(*gymnax.make("CartPole-v1"))
    ppo = eqxrl.PPO(
        env=env, num_envs=8, num_steps=128, total_timesteps=40_000, learning_rate=1e-3
    )
    _, metrics = eqx.filter_vmap(ppo.train)(jr.split(jr.key(0), 4))
    returns = np.asarray(metrics["episode_return"])
    first = np.nanmean(returns[:, :5], axis=1)
    final = np.nanmean(returns[:, -5:], axis=1)
    print("episode return per seed, first and last 5 iterations:", first, final)
    # Random play lasts ~20 steps; 8 seeds ended at 208-394 on an AMD EPYC.
    assert np.sum((final > 120) & (final > 3 * first)) >= 3, (first, final)


# -- from_gymnax with the gymnax 0.x API (five-value step, merged done) ---------------


@struct.dataclass
class CounterState:
    position: jax.Array
    time: jax.Array


@struct.dataclass
class CounterParams:
    target: int = 5
    max_steps_in_episode: int = 8


class GymnaxZeroCounter:
    """A gymnax-0.x-style environment (as in gymnax 0.0.9): `step_env`'s `done`
    merges reaching the target with the time limit, `step` auto-resets and returns
    five values. The observation reads `max_steps_in_episode`, like bsuite's
    DiscountingChain in gymnax 0.x. Action 1 moves towards the target."""

    @property
    def default_params(self) -> CounterParams:
        return CounterParams()

    def reset_env(self, key, params):
        del key
        state = CounterState(position=jnp.int32(0), time=0)
        return self.get_obs(state, params), state

    def step_env(self, key, state, action, params):
        del key
        state = CounterState(state.position + action, state.time + 1)
        done = (state.position >= params.target) | (
            state.time >= params.max_steps_in_episode
        )
        reward = (state.position >= params.target).astype(jnp.float32)
        return self.get_obs(state, params), state, reward, done, {"moved": action}

    def step(self, key, state, action, params=None):
        params = self.default_params if params is None else params
        key_step, key_reset = jr.split(key)
        obs_st, state_st, reward, done, info = self.step_env(
            key_step, state, action, params
        )
        obs_re, state_re = self.reset_env(key_reset, params)
        state = jax.tree.map(lambda x, y: jnp.where(done, x, y), state_re, state_st)
        obs = jnp.where(done, obs_re, obs_st)
        return obs, state, reward, done, info

    def reset(self, key, params=None):
        params = self.default_params if params is None else params
        return self.reset_env(key, params)

    def get_obs(self, state, params):
        return jnp.stack(
            [state.position / params.target, state.time / params.max_steps_in_episode]
        ).astype(jnp.float32)

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (2,), jnp.float32)

    def action_space(self, params=None):
        return spaces.Discrete(2)


def test_five_value_api_is_detected():
    env = from_gymnax(GymnaxZeroCounter())
    assert not env.six_value_step
    assert env.observation_space.shape == (2,)


@pytest.mark.parametrize(
    "action, target, end, terminated, truncated",
    [
        (1, 5, 5, True, False),  # reaches the target first: termination
        (0, 5, 8, False, True),  # never moves: the time limit truncates
        (1, 8, 8, True, False),  # both on the same step: reported as termination
    ],
)
def test_five_value_done_is_split(action, target, end, terminated, truncated):
    gymnax_env = GymnaxZeroCounter()
    env = from_gymnax(gymnax_env, CounterParams(target=target))
    _, timesteps = rollout(env, jnp.full(end, action, jnp.int32))
    expected_terminated = [False] * (end - 1) + [terminated]
    expected_truncated = [False] * (end - 1) + [truncated]
    assert np.asarray(timesteps.terminated).tolist() == expected_terminated
    assert np.asarray(timesteps.truncated).tolist() == expected_truncated


def test_five_value_observation_uses_the_real_time_limit():
    gymnax_env = GymnaxZeroCounter()
    env = from_gymnax(gymnax_env)
    _, timesteps = rollout(env, jnp.zeros(4, jnp.int32))
    # time / max_steps_in_episode with the real limit (8), not the lifted one.
    np.testing.assert_allclose(
        timesteps.observation[:, 1], [1 / 8, 2 / 8, 3 / 8, 4 / 8]
    )
    assert timesteps.extras["info"]["moved"].dtype == jnp.int32


def test_five_value_without_time_limit_field_is_all_termination():
    @struct.dataclass
    class NoLimitParams:
        target: int = 2
        max_steps_in_episode_: int = 8  # not gymnax's field name

    class NoLimitCounter(GymnaxZeroCounter):
        def step_env(self, key, state, action, params):
            state = CounterState(state.position + action, state.time + 1)
            done = state.position >= params.target
            obs = jnp.zeros(2, jnp.float32)
            return obs, state, jnp.float32(0.0), done, {}

        def get_obs(self, state, params):
            return jnp.zeros(2, jnp.float32)

    env = from_gymnax(NoLimitCounter(), NoLimitParams())
    _, timesteps = rollout(env, jnp.ones(2, jnp.int32))
    assert np.asarray(timesteps.terminated).tolist() == [False, True]
    assert not np.asarray(timesteps.truncated).any()


def test_unsupported_spaces_and_step_arity_raise():
    class DictObservation(GymnaxZeroCounter):
        def observation_space(self, params):
            return spaces.Dict({"a": spaces.Box(0.0, 1.0, (2,), jnp.float32)})

    env = from_gymnax(DictObservation())
    with pytest.raises(ValueError, match="Discrete and Box"):
        env.observation_space

    class FourValues(GymnaxZeroCounter):
        def step(self, key, state, action, params=None):
            return super().step(key, state, action, params)[:4]

    with pytest.raises(ValueError, match="returned 4 values"):
        from_gymnax(FourValues())


# -- to_gymnax: eqxrl environments behind gymnax's interface --------------------------


def purejaxrl_rollout(env, env_params, num_envs: int, num_steps: int, key):
    """The environment part of PureJaxRL's `ppo.py`: vmapped reset and step with
    gymnax's argument order, a random policy, `lax.scan` over steps."""
    reset_key, key = jr.split(key)
    obsv, env_state = jax.vmap(env.reset, in_axes=(0, None))(
        jr.split(reset_key, num_envs), env_params
    )
    num_actions = env.action_space(env_params).n

    def env_step(runner_state, unused):
        env_state, last_obs, rng = runner_state
        rng, action_rng, step_rng = jr.split(rng, 3)
        action = jr.randint(action_rng, (num_envs,), 0, num_actions)
        obsv, env_state, reward, done, info = jax.vmap(
            env.step, in_axes=(0, 0, 0, None)
        )(jr.split(step_rng, num_envs), env_state, action, env_params)
        transition = (last_obs, action, reward, done, info)
        return (env_state, obsv, rng), transition

    _, transitions = jax.lax.scan(env_step, (env_state, obsv, key), None, num_steps)
    return obsv, transitions


def test_purejaxrl_style_rollout_on_cartpole():
    env, env_params = to_gymnax(eqxrl.envs.make("CartPole-v1"))
    assert env.num_actions == 2
    assert env.observation_space(env_params).shape == (4,)
    assert isinstance(env.action_space(env_params), spaces.Discrete)
    assert isinstance(env.observation_space(env_params), spaces.Box)

    # Like PureJaxRL's `make_train`, the jitted function closes over the environment.
    run = jax.jit(lambda key: purejaxrl_rollout(env, env_params, 8, 200, key))
    first_obs, (obs, action, reward, done, info) = run(jr.key(0))
    assert first_obs.shape == (8, 4) and obs.shape == (200, 8, 4)
    assert reward.dtype == jnp.float32 and done.dtype == jnp.bool_
    done = np.asarray(done)
    assert done.sum() > 8  # random play ends CartPole episodes in ~20 steps
    np.testing.assert_array_equal(done, np.asarray(info["terminated"]))
    assert not np.asarray(info["truncated"]).any()
    # Auto-reset: where an episode ended, the next observation is a fresh start,
    # and the final observation is in info; elsewhere they agree.
    final = np.asarray(info["final_observation"])
    next_obs = np.concatenate([np.asarray(obs)[1:], np.asarray(first_obs)[None]])
    assert np.abs(next_obs[done][:, [0, 2]]).max() <= 0.05
    assert np.abs(final[done]).max() > 0.05
    not_last = np.arange(200) < 199
    keep = ~done & not_last[:, None]
    np.testing.assert_array_equal(final[keep], next_obs[keep])
    np.testing.assert_array_equal(np.asarray(info["discount"]), 1.0 - done)


@pytest.mark.slow
def test_step_matches_eqxrl_auto_reset():
    eqxrl_env = eqxrl.envs.make("CartPole-v1")
    env, env_params = to_gymnax(eqxrl_env)
    obs, state = env.reset(jr.key(0), env_params)
    reference_state, timestep = AutoReset(eqxrl_env).reset(jr.key(0))
    np.testing.assert_array_equal(obs, timestep.observation)
    for t in range(40):
        key = jr.key(t + 1)
        obs, state, reward, done, info = env.step(key, state, jnp.int32(1), None)
        reference_state, timestep = AutoReset(eqxrl_env).step(
            reference_state, jnp.int32(1), key
        )
        # The export is jitted (as gymnax's methods are), the reference eager: the
        # same up to XLA's float fusion.
        np.testing.assert_allclose(obs, timestep.observation, rtol=1e-6, atol=1e-7)
        assert bool(done) == bool(timestep.terminated | timestep.truncated)


def test_six_value_step_works_with_gymnax_wrappers():
    from gymnax.wrappers.purerl import FlattenObservationWrapper, LogWrapper

    env, env_params = to_gymnax(eqxrl.envs.make("CartPole-v1"), six_value_step=True)
    env = LogWrapper(FlattenObservationWrapper(env))
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(
        jr.split(jr.key(0), 4), env_params
    )

    def step(carry, key):
        state = carry
        action = jr.randint(key, (4,), 0, 2)
        obs, state, reward, terminated, truncated, info = jax.vmap(
            env.step, in_axes=(0, 0, 0, None)
        )(jr.split(key, 4), state, action, env_params)
        return state, (terminated, info["returned_episode_returns"])

    _, (terminated, returns) = jax.lax.scan(step, state, jr.split(jr.key(1), 200))
    assert np.asarray(terminated).any()
    assert np.asarray(returns)[np.asarray(terminated)].min() >= 1.0


def test_params_are_the_environment_arrays():
    env, env_params = to_gymnax(eqxrl.envs.CartPole())
    assert isinstance(env_params.arrays, eqxrl.envs.CartPole)
    heavy = env_params.replace(
        arrays=eqx.tree_at(lambda e: e.gravity, env_params.arrays, jnp.float32(50.0))
    )
    _, state = env.reset(jr.key(0), env_params)
    obs_default = env.step_env(jr.key(1), state, jnp.int32(0), env_params)[0]
    obs_heavy = env.step_env(jr.key(1), state, jnp.int32(0), heavy)[0]
    assert not np.allclose(obs_default, obs_heavy)


def test_methods_can_be_jitted_like_gymnax_methods():
    env, env_params = to_gymnax(eqxrl.envs.make("CartPole-v1"))
    obs, state = jax.jit(env.reset)(jr.key(0), env_params)
    step = jax.jit(env.step)
    obs, state, reward, done, info = step(jr.key(1), state, jnp.int32(1), env_params)
    assert obs.shape == (4,) and float(reward) == 1.0 and not bool(done)


def test_to_gymnax_rejects_auto_reset():
    with pytest.raises(ValueError, match="AutoReset"):
        to_gymnax(AutoReset(eqxrl.envs.CartPole()))


def test_round_trip_is_the_same_environment():
    cartpole = eqxrl.envs.CartPole()
    round_trip = from_gymnax(*to_gymnax(cartpole))
    actions = jnp.ones(12, jnp.int32)
    _, expected = rollout(cartpole, actions)
    _, actual = rollout(round_trip, actions)
    np.testing.assert_array_equal(actual.observation, expected.observation)
    np.testing.assert_array_equal(actual.terminated, expected.terminated)


def test_actions_from_python_and_numpy_give_the_same_step():
    env, env_params = to_gymnax(eqxrl.envs.make("CartPole-v1"))
    _, state = env.reset(jr.key(0), env_params)
    reference = env.step(jr.key(1), state, jnp.int32(1), env_params)
    for action in (1, np.int64(1), np.array(1), np.array([1])[0]):
        obs, *_ = env.step(jr.key(1), state, action, env_params)
        np.testing.assert_array_equal(obs, reference[0])


def test_calls_give_the_same_bits_inside_and_outside_jit():
    env, env_params = to_gymnax(eqxrl.envs.make("CartPole-v1"))
    obs, state = env.reset(jr.key(0), env_params)
    direct = env.step(jr.key(1), state, 1, env_params)
    wrapped = jax.jit(lambda k, s, p: env.step(k, s, 1, p))(
        jr.key(1), state, env_params
    )
    for a, b in zip(jax.tree.leaves(direct), jax.tree.leaves(wrapped)):
        np.testing.assert_array_equal(a, b)


def test_params_have_gymnax_time_limit_and_replace():
    env, env_params = to_gymnax(eqxrl.envs.make("CartPole-v1"))
    assert env_params.max_steps_in_episode == 500
    short = env_params.replace(max_steps_in_episode=10)
    assert short.max_steps_in_episode == 10 and env_params.max_steps_in_episode == 500
    _, state = env.reset(jr.key(0), short)
    dones = []
    for t in range(10):  # alternate pushes: the pole stays up, the limit ends it
        _, state, _, done, info = env.step(jr.key(t), state, t % 2, short)
        dones.append(bool(done))
    assert dones == [False] * 9 + [True] and bool(info["truncated"])
    unlimited, unlimited_params = to_gymnax(eqxrl.envs.CartPole())
    assert unlimited_params.max_steps_in_episode == 10_000
    space = env.state_space(env_params)
    assert isinstance(space, gymnax.environments.spaces.Dict)


def test_gymnax_gym_wrapper_drives_the_export_with_numpy():
    from gymnax.wrappers.gym import GymnaxToGymWrapper

    # gymnax 1.0's wrapper unpacks its six-value step.
    env, env_params = to_gymnax(eqxrl.envs.make("CartPole-v1"), six_value_step=True)
    gym_env = GymnaxToGymWrapper(env, env_params, seed=0)
    observation, _ = gym_env.reset(seed=0)
    assert np.asarray(observation).shape == (4,)
    for action in (np.int64(0), np.int64(1), 0):
        observation, reward, terminated, truncated, _ = gym_env.step(action)
        assert float(reward) == 1.0
