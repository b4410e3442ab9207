"""`from_jumanji`: Jumanji environments as eqxrl environments (spaces, action masks,
termination vs truncation from the discount), and masked PPO learning on one."""

import sys
from functools import cached_property
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

jumanji = pytest.importorskip("jumanji")

from jumanji import specs  # noqa: E402
from jumanji.environments.logic.minesweeper.generator import (  # noqa: E402
    UniformSamplingGenerator,
)
from jumanji.types import StepType, TimeStep  # noqa: E402
from jumanji.wrappers import AutoResetWrapper  # noqa: E402

import eqxrl  # noqa: E402
from eqxrl.envs import (  # noqa: E402
    AutoReset,
    Box,
    Dict,
    Discrete,
    FromJumanji,
    check_environment,
    from_jumanji,
)

# Jumanji's own code (e.g. Snake's `jnp.asarray(fruit_eaten, float)` additions)
# relies on standard promotion, and the PPO run uses optax's Adam.
STANDARD_DTYPE_PROMOTION = True


class CountdownObservation(NamedTuple):
    steps_left: jax.Array
    action_mask: jax.Array


class Countdown(jumanji.env.Environment):
    """A Jumanji environment whose episodes end both ways: action 1 terminates
    (`discount == 0`), and the third step truncates (`discount == 1`). Action 1 is
    masked on the last step; the reward is the step count."""

    time_limit = 3

    def _observation(self, step_count):
        steps_left = self.time_limit - step_count
        mask = jnp.stack([jnp.bool_(True), steps_left > 1])
        return CountdownObservation(steps_left, mask)

    def reset(self, key):
        del key
        state = {"step_count": jnp.int32(0)}
        timestep = TimeStep(
            step_type=StepType.FIRST,
            reward=jnp.float32(0.0),
            discount=jnp.float32(1.0),
            observation=self._observation(state["step_count"]),
        )
        return state, timestep

    def step(self, state, action):
        step_count = state["step_count"] + 1
        ended_by_action = action == 1
        last = ended_by_action | (step_count >= self.time_limit)
        timestep = TimeStep(
            step_type=jnp.where(last, StepType.LAST, StepType.MID),
            reward=step_count.astype(jnp.float32),
            discount=jnp.where(ended_by_action, 0.0, 1.0).astype(jnp.float32),
            observation=self._observation(step_count),
        )
        return {"step_count": step_count}, timestep

    @cached_property
    def observation_spec(self):
        return specs.Spec(
            CountdownObservation,
            "CountdownObservation",
            steps_left=specs.DiscreteArray(self.time_limit + 1, name="steps_left"),
            action_mask=specs.BoundedArray((2,), bool, False, True, "action_mask"),
        )

    @cached_property
    def action_spec(self):
        return specs.DiscreteArray(2, name="action")


# --------------------------------------------------------------------------------------
# Conversion


def test_snake_spaces_and_contract():
    env = from_jumanji("Snake-v1", num_rows=6, num_cols=6)
    assert isinstance(env, FromJumanji)
    check_environment(env)
    space = env.observation_space
    assert isinstance(space, Dict) and space.keys() == ["grid", "step_count"]
    assert isinstance(space["grid"], Box) and space["grid"].shape == (6, 6, 5)
    assert float(space["grid"].low.min()) == 0.0
    assert float(space["grid"].high.max()) == 1.0
    assert space["step_count"] == Discrete(4000)  # Snake-v1's time limit
    assert env.action_space == Discrete(4)


def test_snake_matches_jumanji_step_by_step():
    jumanji_env = jumanji.make("Snake-v1", num_rows=6, num_cols=6)
    env = from_jumanji(jumanji_env)
    reset, step = jax.jit(env.reset), jax.jit(env.step)
    jumanji_reset, jumanji_step = jax.jit(jumanji_env.reset), jax.jit(jumanji_env.step)
    state, timestep = reset(jr.key(0))
    reference_state, reference = jumanji_reset(jr.key_data(jr.key(0)))
    rewards = []
    for t in range(30):
        observation = reference.observation
        np.testing.assert_array_equal(timestep.observation["grid"], observation.grid)
        assert timestep.observation["grid"].dtype == jnp.float32
        assert timestep.observation["step_count"] == observation.step_count
        assert timestep.observation["step_count"].dtype == jnp.int32
        np.testing.assert_array_equal(timestep.action_mask, observation.action_mask)
        assert float(timestep.reward) == (0.0 if t == 0 else float(reference.reward))
        rewards.append(float(timestep.reward))
        if reference.last():
            break
        # A valid move, varied by the step number.
        valid = np.flatnonzero(np.asarray(observation.action_mask))
        action = jnp.int32(valid[t % len(valid)])
        state, timestep = step(state, action, jr.key(t))
        reference_state, reference = jumanji_step(reference_state, action)
    assert t >= 5  # the walk went somewhere
    assert timestep.reward.dtype == jnp.float32 and timestep.reward.shape == ()


def test_snake_death_is_termination():
    env = from_jumanji("Snake-v1", num_rows=6, num_cols=6)
    state, timestep = env.reset(jr.key(0))
    step = jax.jit(env.step)
    up = jnp.int32(0)  # moving up from the top row leaves the board
    for t in range(6):
        assert not timestep.terminated and not timestep.truncated
        state, timestep = step(state, up, jr.key(t))
        if timestep.terminated:
            break
    assert bool(timestep.terminated) and not bool(timestep.truncated)
    assert not bool(timestep.action_mask[0])  # the step that killed was masked


def test_discount_zero_terminates_and_nonzero_discount_truncates():
    env = from_jumanji(Countdown())
    check_environment(env)
    assert env.observation_space == Discrete(4)  # the one field left: steps_left
    assert env.action_space == Discrete(2)
    state, timestep = env.reset(jr.key(0))
    assert int(timestep.observation) == 3 and timestep.observation.dtype == jnp.int32
    np.testing.assert_array_equal(timestep.action_mask, [True, True])

    # Action 0 until the time limit: truncated (discount 1) on the third step.
    flags = []
    for t in range(3):
        state, timestep = env.step(state, jnp.int32(0), jr.key(t))
        flags.append((bool(timestep.terminated), bool(timestep.truncated)))
    assert flags == [(False, False), (False, False), (False, True)]
    assert float(timestep.reward) == 3.0
    np.testing.assert_array_equal(timestep.action_mask, [True, False])

    # Action 1: terminated (discount 0).
    state, _ = env.reset(jr.key(0))
    state, timestep = env.step(state, jnp.int32(1), jr.key(0))
    assert bool(timestep.terminated) and not bool(timestep.truncated)
    assert float(timestep.reward) == 1.0


def test_multi_discrete_actions_are_flattened_with_the_joint_mask():
    # Minesweeper's action is [row, column], its mask [num_rows, num_cols].
    generator = UniformSamplingGenerator(num_rows=6, num_cols=10, num_mines=4)
    jumanji_env = jumanji.make("Minesweeper-v0", generator=generator)
    env = from_jumanji(jumanji_env)
    check_environment(env)
    assert env.action_space == Discrete(60)
    space = env.observation_space
    assert space.keys() == ["board", "num_mines", "step_count"]
    assert space["board"].shape == (6, 10)
    assert float(space["board"].low.min()) == -1.0  # unexplored

    state, timestep = env.reset(jr.key(0))
    reference_state, reference = jumanji_env.reset(jr.key_data(jr.key(0)))
    step, jumanji_step = jax.jit(env.step), jax.jit(jumanji_env.step)
    for action in (37, 12):  # row 3, column 7; then row 1, column 2
        np.testing.assert_array_equal(
            timestep.action_mask, np.ravel(reference.observation.action_mask)
        )
        state, timestep = step(state, jnp.int32(action), jr.key(0))
        reference_state, reference = jumanji_step(
            reference_state, jnp.array(divmod(action, 10), jnp.int32)
        )
        # Integer boards are cast to float32, values unchanged.
        assert timestep.observation["board"].dtype == jnp.float32
        np.testing.assert_array_equal(
            timestep.observation["board"], reference.observation.board
        )
        assert float(timestep.reward) == float(reference.reward)
        assert not bool(timestep.action_mask[action])  # explored now
    with pytest.raises(ValueError, match=r"outside the action space Discrete\(60\)"):
        env.step(state, jnp.int32(60), jr.key(0))  # not read as some valid cell


def test_nested_observations_become_nested_dicts():
    env = from_jumanji("Maze-v0")
    check_environment(env)
    space = env.observation_space
    assert space.keys() == ["agent_position", "step_count", "target_position", "walls"]
    assert isinstance(space["agent_position"], Dict)
    assert space["agent_position"].keys() == ["col", "row"]
    _, timestep = env.reset(jr.key(0))
    assert timestep.observation["agent_position"]["row"].dtype == jnp.float32
    assert timestep.observation["walls"].shape == (10, 10)
    assert timestep.action_mask.shape == (4,)


def test_jit_vmap_and_scan():
    env = from_jumanji("Snake-v1", num_rows=5, num_cols=5)
    num_envs, num_steps = 8, 20
    jax.jit(env.reset)(jr.key(0))  # hashes by identity, as gymnax environments
    auto_reset = AutoReset(env)

    @eqx.filter_jit
    def rollout(env, key):
        states, timesteps = jax.vmap(env.reset)(jr.split(key, num_envs))

        def step(carry, key):
            states, timesteps = carry
            actions = jnp.zeros(num_envs, jnp.int32)  # up, until the wall
            states, timesteps = jax.vmap(env.step)(
                states, actions, jr.split(key, num_envs)
            )
            return (states, timesteps), timesteps

        return jax.lax.scan(step, (states, timesteps), jr.split(key, num_steps))[1]

    timesteps = rollout(auto_reset, jr.key(0))
    assert timesteps.observation["grid"].shape == (num_steps, num_envs, 5, 5, 5)
    assert timesteps.action_mask.shape == (num_steps, num_envs, 4)
    assert timesteps.terminated.shape == (num_steps, num_envs)
    # Moving up leaves the 5x5 board within 5 steps; AutoReset starts again.
    assert int(timesteps.terminated.sum()) >= 3 * num_envs
    # The Jumanji environment is static: one trace serves every call.
    reset = eqx.filter_jit(eqx.debug.assert_max_traces(env.reset, max_traces=1))
    for seed in range(3):
        reset(jr.key(seed))


def test_unsupported_specs_are_refused_with_the_reason():
    with pytest.raises(ValueError, match=r"action_mask has shape \(3, 4\)"):
        from_jumanji("Cleaner-v0")  # one mask row per agent
    with pytest.raises(ValueError, match=r"reward_spec has shape \(2,\)"):
        from_jumanji("LevelBasedForaging-v0")  # a reward per agent
    with pytest.raises(ValueError, match=r"BoundedArray.*int16.*no eqxrl equivalent"):
        from_jumanji("MultiCVRP-v0")  # integer vector actions
    with pytest.raises(ValueError, match="AutoResetWrapper"):
        from_jumanji(AutoResetWrapper(jumanji.make("Snake-v1")))
    with pytest.raises(TypeError, match="built by name"):
        from_jumanji(jumanji.make("Snake-v1"), num_rows=5)
    with pytest.raises(TypeError, match="expected a jumanji Environment, got str"):
        FromJumanji("Snake-v1")


def test_missing_jumanji_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "jumanji", None)  # `import jumanji` fails
    with pytest.raises(ImportError, match=r"pip install 'eqxrl\[jumanji\]'"):
        from_jumanji("Snake-v1")


# --------------------------------------------------------------------------------------
# Learning


@eqx.filter_jit
def random_return(env, key, num_games, num_steps):
    """Mean return of a uniformly random valid move over `num_games` full games of at
    most `num_steps` steps."""
    states, timesteps = jax.vmap(env.reset)(jr.split(key, num_games))

    def step(carry, key):
        states, timesteps, ended, total = carry
        action_key, step_key = jr.split(key)
        logits = jnp.where(timesteps.action_mask, 0.0, -jnp.inf)
        actions = jr.categorical(action_key, logits).astype(jnp.int32)
        states, timesteps = jax.vmap(env.step)(
            states, actions, jr.split(step_key, num_games)
        )
        total = total + jnp.where(ended, 0.0, timesteps.reward)
        ended = ended | timesteps.terminated | timesteps.truncated
        return (states, timesteps, ended, total), None

    carry = (states, timesteps, jnp.zeros(num_games, bool), jnp.zeros(num_games))
    (_, _, ended, total), _ = jax.lax.scan(step, carry, jr.split(key, num_steps))
    return total.mean(), ended.all()


@pytest.mark.learning
def test_masked_ppo_learns_small_snake_better_than_random():
    # Snake-v1 on a 5x5 board, games of at most 50 steps: the grid goes through
    # the default network's CNN, the step count is one-hot.
    env = from_jumanji("Snake-v1", num_rows=5, num_cols=5, time_limit=50)
    random, ended = random_return(env, jr.key(1), num_games=256, num_steps=50)
    assert bool(ended)
    ppo = eqxrl.PPO(
        env=env,
        num_envs=16,
        num_steps=64,
        total_timesteps=16 * 64 * 12,
        learning_rate=2.5e-3,
    )
    _, metrics = eqx.filter_vmap(ppo.train)(jr.split(jr.key(0), 4))
    returns = np.asarray(metrics["episode_return"])  # [seeds, iterations]
    first = np.nanmean(returns[:, :2], axis=1)
    last = np.nanmean(returns[:, -2:], axis=1)
    # On an AMD EPYC: random 1.3 fruit per game; the sampled policy goes from
    # 1.0-1.5 to 3.0-5.6 in 12 iterations.
    assert np.sum(last > 1.5 * float(random)) >= 3, (first, last, float(random))
    assert np.sum(last > first) >= 3, (first, last)
