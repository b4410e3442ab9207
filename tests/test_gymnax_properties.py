"""The properties gymnax asks of its own environments, checked on eqxrl's exported
CartPole, Pendulum and Snake (`eqxrl.envs.to_gymnax`), and gymnax's wrappers on top
of them. docs/api/adapters.md lists each property and the one that does not carry
over (Snake's `max_steps_in_episode`).

The exports use gymnax 1.0's six-value `step`, which gymnax's wrappers unpack; the
five-value flavour and PureJaxRL-style loops are covered in tests/test_gymnax.py.
"""

import functools
import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.lax as lax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

gymnax = pytest.importorskip("gymnax")

from gymnax.experimental import RolloutWrapper  # noqa: E402
from gymnax.wrappers import (  # noqa: E402
    FlattenObservationWrapper,
    GymnaxToDmEnvWrapper,
    GymnaxToGymWrapper,
    LogWrapper,
)
from gymnax.wrappers.dm_env import TimeStep as dm_env_timestep  # noqa: E402

import eqxrl  # noqa: E402
from eqxrl.envs import to_gymnax  # noqa: E402

# gymnax's wrappers mix float32 returns with int32 "1 - done" factors, which strict
# dtype promotion refuses.
STANDARD_DTYPE_PROMOTION = True

NAMES = ["CartPole-v1", "Pendulum-v1", "Snake-v0"]
# A time limit short enough that every test crosses a few episode ends, long enough
# for CartPole to topple and Snake to hit a wall before it.
LIMIT = 12


class Exported(NamedTuple):
    name: str
    env: object  # the export of `eqxrl.envs.make(name)`
    params: object  # its default params
    short_env: object  # the same environment with a LIMIT-step time limit...
    short_params: object  # ...set through these params where the export allows


@functools.cache
def export(name: str, short: bool = False):
    """The export of `eqxrl.envs.make(name)` and its params; `short=True`: with a
    LIMIT-step time limit.

    One export per environment and parameter set for the whole module: the export's
    jitted methods are compiled once per instance and parameter set, and compiling
    is most of the time these tests take.
    """
    if not short:
        return to_gymnax(eqxrl.envs.make(name), six_value_step=True)
    if name == "Snake-v0":
        # Snake-v0 has no TimeLimit, so its params' `max_steps_in_episode` is only
        # informative (see test_snake_limit_is_its_own): shorten it with Snake's own
        # `max_steps` instead.
        return to_gymnax(eqxrl.envs.make(name, max_steps=LIMIT), six_value_step=True)
    env, params = export(name)
    return env, params.replace(max_steps_in_episode=LIMIT)


@pytest.fixture(scope="module", params=NAMES)
def exported(request) -> Exported:
    name = request.param
    return Exported(name, *export(name), *export(name, short=True))


def safe_action(name: str, observation, t: int):
    """An action that cannot end the episode within 2 * LIMIT steps of a reset.

    CartPole alternates pushes (the pole stays up); Pendulum has no terminal state;
    Snake circles clockwise inside the aligned 2x2 block holding its head: never off
    the board, never back into its neck. (Actions are arrays of the action space's
    dtype, as sampled ones are, so the export's jitted methods compile once.)
    """
    if name == "CartPole-v1":
        return jnp.int32(t % 2)
    if name == "Pendulum-v1":
        return jnp.zeros(1, jnp.float32)
    head = np.asarray(observation)[..., 0]
    row, column = np.argmax(head.sum(axis=1)), np.argmax(head.sum(axis=0))
    return jnp.int32([[1, 2], [0, 3]][row % 2][column % 2])  # right, down / up, left


def fresh_start(name: str, observation) -> bool:
    """Whether an observation looks like one from `reset` (a loose check: a later
    observation may pass it too)."""
    observation = np.asarray(observation)
    if name == "CartPole-v1":  # every component uniform in [-0.05, 0.05]
        return bool(np.abs(observation).max() <= 0.05)
    if name == "Pendulum-v1":  # angular velocity uniform in [-1, 1]
        return bool(abs(observation[2]) <= 1.0)
    counts = observation.sum(axis=(0, 1))  # Snake: a one-cell snake and one food
    return counts.tolist() == [1.0, 0.0, 1.0]


class Transition(NamedTuple):
    observation: jax.Array
    state: object
    action: jax.Array
    step_key: jax.Array  # as `jr.key_data`, so that NumPy can hold it
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    next_observation: jax.Array
    info: dict


def rollout(env, params, key, num_steps: int) -> Transition:
    """`num_steps` steps of gymnax's `step` (auto-reset) with actions sampled from the
    action space, in one `lax.scan`; `reset` gets the first half of `split(key)`."""
    reset_key, key = jr.split(key)
    observation, state = env.reset(reset_key, params)

    def one_step(carry, key):
        observation, state = carry
        action_key, step_key = jr.split(key)
        action = env.action_space(params).sample(action_key)
        next_observation, next_state, reward, terminated, truncated, info = env.step(
            step_key, state, action, params
        )
        transition = Transition(
            observation,
            state,
            action,
            jr.key_data(step_key),
            reward,
            terminated,
            truncated,
            next_observation,
            info,
        )
        return (next_observation, next_state), transition

    keys = jr.split(key, num_steps)
    return lax.scan(one_step, (observation, state), keys)[1]


def to_numpy(tree):
    """Outputs as NumPy arrays, to index and compare them on the host: indexing JAX
    arrays eagerly compiles one small program per shape."""
    return jax.tree.map(np.asarray, tree)


def random_rollout(env, params, key, num_steps: int) -> Transition:
    return to_numpy(eqx.filter_jit(rollout)(env, params, key, num_steps))


@functools.cache
def batched_rollout(name: str) -> tuple[np.ndarray, Transition]:
    """Three rollouts of the short export in one `jit(vmap(...))` program, shared by
    the jit / vmap test and the spaces test (one compilation), and the data of the
    keys their `reset` got."""

    def run(key):
        return jr.key_data(jr.split(key)[0]), rollout(env, params, key, 48)

    env, params = export(name, short=True)
    return to_numpy(jax.jit(jax.vmap(run))(jr.split(jr.key(1), 3)))


@functools.cache
def dm_env_wrapper(env) -> GymnaxToDmEnvWrapper:
    """One dm_env wrapper per export: its methods are jitted with a static `self`."""
    return GymnaxToDmEnvWrapper(env)


def assert_trees_close(actual, expected):
    for a, b in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


# -- reset and step -------------------------------------------------------------------


def test_reset_and_step_under_jit_and_vmap(exported):
    name, env, params = exported.name, exported.short_env, exported.short_params
    reset_keys, transitions = batched_rollout(name)
    shape = env.observation_space(params).shape
    assert transitions.observation.shape == (3, 48, *shape)
    assert transitions.observation.dtype == jnp.float32
    assert transitions.next_observation.shape == (3, 48, *shape)
    assert transitions.info["final_observation"].shape == (3, 48, *shape)
    assert transitions.reward.shape == (3, 48)
    assert transitions.reward.dtype == jnp.float32
    assert transitions.terminated.shape == transitions.truncated.shape == (3, 48)
    assert transitions.terminated.dtype == transitions.truncated.dtype == jnp.bool_
    # Each key gives its own start.
    assert len({o.tobytes() for o in transitions.observation[:, 0]}) == 3

    # A member of the batch is the unbatched (jitted) call with its key.
    for i in range(3):
        member = jax.tree.map(lambda x: x[i, 0], transitions)
        observation, state = env.reset(jr.wrap_key_data(reset_keys[i]), params)
        assert_trees_close((observation, state), (member.observation, member.state))
        step_key = jr.wrap_key_data(member.step_key)
        outputs = env.step(step_key, state, member.action, params)
        expected = (
            member.next_observation,
            member.reward,
            member.terminated,
            member.truncated,
            member.info["final_observation"],
        )
        actual = (*outputs[0:1], *outputs[2:5], outputs[5]["final_observation"])
        assert_trees_close(actual, expected)


def test_observations_actions_and_states_stay_in_their_spaces(exported):
    name, env, params = exported.name, exported.short_env, exported.short_params
    transitions = batched_rollout(name)[1]
    # Episodes ended (and restarted) along the way.
    assert (transitions.terminated | transitions.truncated).any(axis=1).all()
    observation_space = env.observation_space(params)
    action_space = env.action_space(params)
    state_space = env.state_space(params)

    @jax.jit
    def membership(transitions):
        def everywhere(space, tree):
            return jax.vmap(jax.vmap(space.contains))(tree).all()

        far = jnp.full(observation_space.shape, 1e6, jnp.float32)
        return {
            "observation": everywhere(observation_space, transitions.observation),
            "next": everywhere(observation_space, transitions.next_observation),
            "final": everywhere(
                observation_space, transitions.info["final_observation"]
            ),
            "action": everywhere(action_space, transitions.action),
            "state": everywhere(state_space, transitions.state),
            # The checks can fail: far-off observations and actions and foreign
            # states are outside.
            "far observation": observation_space.contains(far),
            "far action": action_space.contains(jnp.full(action_space.shape, 99)),
            "foreign state": state_space.contains(jnp.zeros(3)),
        }

    results = {k: bool(v) for k, v in membership(transitions).items()}
    inside = ["observation", "next", "final", "action", "state"]
    assert results == {k: k in inside for k in results}


# -- episode ends ---------------------------------------------------------------------


def test_time_limit_truncates_and_step_resets(exported):
    name, env, params = exported.name, exported.short_env, exported.short_params
    observation, state = env.reset(jr.key(2), params)
    truncations = []
    for t in range(2 * LIMIT):
        key = jr.key(100 + t)
        action = safe_action(name, observation, t)
        unreset = env.step_env(key, state, action, params)  # no auto-reset
        observation, state, _, terminated, truncated, info = env.step(
            key, state, action, params
        )
        assert not bool(terminated) and not bool(info["terminated"])
        truncations.append(bool(truncated))
        np.testing.assert_array_equal(info["final_observation"], unreset[0])
        if truncated:
            # `step` started a new episode; `step_env` did not.
            assert fresh_start(name, observation)
            assert not np.array_equal(observation, info["final_observation"])
            assert bool(unreset[4])  # step_env reports the same truncation
    # The limit ends every episode after LIMIT steps: the counter restarts.
    assert truncations == ([False] * (LIMIT - 1) + [True]) * 2


def test_cartpole_terminal_states_end_the_episode():
    env, params = export("CartPole-v1", short=True)
    observation, state = env.reset(jr.key(3), params)
    angles = []
    for t in range(LIMIT):  # pushing right topples the pole before the limit
        observation, state, reward, terminated, truncated, info = env.step(
            jr.key(t), state, jnp.int32(1), params
        )
        final = np.asarray(info["final_observation"])
        angles.append(abs(final[2]))
        if terminated:
            break
    assert bool(terminated) and not bool(truncated) and float(reward) == 1.0
    assert float(info["discount"]) == 0.0
    # It ends on the first step past 12 degrees (or 2.4 m), not before.
    threshold = 12 * 2 * math.pi / 360
    assert angles[-1] > threshold or abs(final[0]) > 2.4
    assert max(angles[:-1]) <= threshold
    assert fresh_start("CartPole-v1", observation)

    # As in gymnax 1.0, a terminal state reached on the last allowed step reports
    # both causes; with a step to spare it is termination only.
    toppled = eqx.tree_at(
        lambda s: s.env_state.physics, state, jnp.array([0, 0, 1, 0.0])
    )
    toppled = eqx.tree_at(lambda s: s.step_count, toppled, jnp.int32(LIMIT - 1))
    for limit, expected_truncated in ((LIMIT, True), (LIMIT + 1, False)):
        longer = params.replace(max_steps_in_episode=limit)
        *_, terminated, truncated, _ = env.step(
            jr.key(0), toppled, jnp.int32(0), longer
        )
        assert bool(terminated) and bool(truncated) == expected_truncated
    # Termination wins in dm_env's discount.
    timestep = dm_env_timestep(
        state=toppled,
        reward=jnp.float32(0.0),
        discount=jnp.float32(1.0),
        observation=observation,
        final_observation=observation,
    )
    timestep = dm_env_wrapper(env).step(jr.key(0), timestep, jnp.int32(0), params)
    assert float(timestep.discount) == 0.0


def test_snake_collisions_end_the_episode():
    env, params = export("Snake-v0", short=True)
    observation, state = env.reset(jr.key(4), params)
    row = int(state.head) // 10
    for t in range(row + 1):  # up until the top wall
        observation, state, reward, terminated, truncated, info = env.step(
            jr.key(t), state, jnp.int32(0), params
        )
        assert bool(terminated) == (t == row)
    assert float(reward) == -1.0 and not bool(truncated)
    assert float(info["discount"]) == 0.0
    assert fresh_start("Snake-v0", observation)


def test_snake_limit_is_its_own():
    """Snake-v0 has no TimeLimit: its params' `max_steps_in_episode` (10,000) only
    tells tools an episode length, and replacing it does not shorten episodes
    (documented in docs/api/adapters.md)."""
    env, params = export("Snake-v0")
    assert params.max_steps_in_episode == 10_000
    short = params.replace(max_steps_in_episode=2)
    # No step counter is added to the state...
    assert env.state_space(short).spaces.keys() == env.state_space(params).spaces.keys()
    # ...and a game past the replaced limit goes on.
    observation, state = env.reset(jr.key(5), params)
    state = eqx.tree_at(lambda s: s.step_count, state, jnp.int32(2))
    action = safe_action("Snake-v0", observation, 0)
    *_, terminated, truncated, _ = env.step_env(jr.key(0), state, action, short)
    assert not bool(terminated) and not bool(truncated)


# -- gymnax's wrappers ----------------------------------------------------------------


def test_log_and_flatten_observation_wrappers(exported):
    name, env, params = exported.name, exported.short_env, exported.short_params
    size = math.prod(env.observation_space(params).shape)
    wrapped = LogWrapper(FlattenObservationWrapper(env))
    transitions = random_rollout(wrapped, params, jr.key(6), 4 * LIMIT)

    # Flat observations, in the flattened space; the pre-reset one is flat too.
    flat_space = FlattenObservationWrapper(env).observation_space(params)
    assert tuple(flat_space.shape) == (size,)
    assert transitions.observation.shape == (4 * LIMIT, size)
    assert transitions.info["final_observation"].shape == (4 * LIMIT, size)
    inside = jax.jit(jax.vmap(flat_space.contains))(transitions.observation)
    assert np.asarray(inside).all()
    reset_key = jr.split(jr.key(6))[0]  # random_rollout's reset key
    first, _ = env.reset(reset_key, params)
    np.testing.assert_array_equal(transitions.observation[0], np.ravel(first))

    # LogWrapper's returns and lengths are those of the episodes that ended.
    reward = transitions.reward
    done = transitions.terminated | transitions.truncated
    info = transitions.info
    np.testing.assert_array_equal(info["returned_episode"], done)
    assert done.sum() >= 3, name
    start = 0
    for end in np.flatnonzero(done):
        np.testing.assert_allclose(
            info["returned_episode_returns"][end], reward[start : end + 1].sum(), 1e-5
        )
        assert int(info["returned_episode_lengths"][end]) == end + 1 - start
        start = end + 1


def test_gym_wrapper_drives_the_export_with_numpy(exported):
    env, params = exported.short_env, exported.short_params
    gym_env = GymnaxToGymWrapper(env, params, seed=0)
    gym_env.action_space.seed(0)
    observation, _ = gym_env.reset(seed=3)
    # gymnax's wrapper keeps one key and resets with the second half of its split.
    key, reset_key = jr.split(jr.key(3))
    expected, state = env.reset(reset_key, params)
    np.testing.assert_array_equal(observation, expected)

    ends = 0
    for _ in range(3 * LIMIT):
        action = gym_env.action_space.sample()  # a NumPy number or array
        assert isinstance(action, np.ndarray | np.integer)
        observation, reward, terminated, truncated, info = gym_env.step(action)
        key, step_key = jr.split(key)
        expected = env.step(step_key, state, jnp.asarray(action), params)
        expected_observation, state, expected_reward = expected[:3]
        np.testing.assert_array_equal(observation, expected_observation)
        assert float(reward) == float(expected_reward)
        assert gym_env.observation_space.contains(np.asarray(observation))
        assert info["final_observation"].shape == np.shape(observation)
        ends += bool(terminated) or bool(truncated)
    assert ends >= 2


def test_dm_env_wrapper(exported):
    name, env, params = exported.name, exported.short_env, exported.short_params
    dm_env = dm_env_wrapper(env)
    shape = env.observation_space(params).shape
    keys = jr.split(jr.key(8), 2)
    first = to_numpy(jax.vmap(dm_env.reset, in_axes=(0, None))(keys, params))
    assert first.observation.shape == (2, *shape)
    assert first.reward.shape == first.discount.shape == (2,)
    np.testing.assert_array_equal(first.discount, 1.0)

    # Driven side by side with the export: the same transitions, and a discount
    # that is 0 only at termination (a time limit keeps it at 1).
    timestep = jax.tree.map(lambda x: x[0], first)
    observation, state = env.reset(keys[0], params)
    np.testing.assert_array_equal(timestep.observation, observation)
    ends = truncations = 0
    for t in range(3 * LIMIT):
        action_key, step_key = jr.split(jr.key(200 + t))
        action = env.action_space(params).sample(action_key)
        timestep = to_numpy(dm_env.step(step_key, timestep, action, params))
        observation, state, reward, terminated, truncated, info = env.step(
            step_key, state, action, params
        )
        np.testing.assert_array_equal(timestep.observation, observation)
        np.testing.assert_array_equal(
            timestep.final_observation, info["final_observation"]
        )
        assert float(timestep.reward) == float(reward)
        assert float(timestep.discount) == 1.0 - float(terminated)
        ends += bool(terminated) or bool(truncated)
        truncations += bool(truncated) and not bool(terminated)
    assert ends >= 3
    if name == "Pendulum-v1":
        assert truncations == 3


def test_rollout_wrapper_default_episode_length(exported):
    name, env, params = exported.name, exported.env, exported.params
    manager = RolloutWrapper(env=env)  # random actions, default params
    assert manager.num_env_steps == params.max_steps_in_episode
    assert manager.num_env_steps == {"CartPole-v1": 500, "Pendulum-v1": 200}.get(
        name, 10_000
    )
    steps = manager.num_env_steps
    shape = env.observation_space(params).shape
    action_shape = env.action_space(params).shape

    outputs = to_numpy(manager.single_rollout(jr.key(10), None))
    obs, action, reward, next_obs, done, cum_return = outputs
    assert obs.shape == next_obs.shape == (steps, *shape)
    assert action.shape == (steps, *action_shape)
    assert reward.shape == done.shape == (steps,)
    assert cum_return.shape == (1,)
    # The return counts the first episode only, up to its end.
    first_end = int(np.argmax(done)) if done.any() else steps - 1
    np.testing.assert_allclose(cum_return[0], reward[: first_end + 1].sum(), rtol=1e-5)
    if name == "Pendulum-v1":  # no terminal state: the time limit ends it
        assert done.tolist() == [False] * (steps - 1) + [True]
    else:  # random play ends CartPole and Snake episodes early, many times
        assert done.sum() > 5
