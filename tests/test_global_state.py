"""The multi-agent global state convention: `global_state_space` and
`timestep.extras["global_state"]`, checked by `check_environment`."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqxrl
from eqxrl.envs import (
    GLOBAL_STATE,
    AbstractMultiAgentEnvironment,
    Box,
    Discrete,
    TimeStep,
    TreasureHunt,
    check_environment,
    global_state_space_of,
)


@pytest.mark.parametrize("encoding", ["rgb", "onehot"])
def test_treasure_hunt_global_state_is_the_whole_grid(encoding):
    env = TreasureHunt(encoding=encoding, height=9, width=11)
    check_environment(env)
    state, timestep = env.reset(jax.random.key(0))
    state, timestep = env.step(state, jnp.array([1, 3], jnp.int32), jax.random.key(1))
    global_state = timestep.extras[GLOBAL_STATE]
    assert global_state.shape == (9, 11, env.num_channels)
    assert global_state.dtype == jnp.float32
    # An agent's latest view is the window of the grid around it.
    radius = env.vision_radius
    row, column = np.asarray(state.positions[0])
    padded = np.pad(
        np.asarray(global_state),
        ((radius, radius), (radius, radius), (0, 0)),
        constant_values=np.nan,
    )
    window = padded[row : row + 2 * radius + 1, column : column + 2 * radius + 1]
    view = np.asarray(timestep.observation[0, -1])
    inside = ~np.isnan(window[..., 0])
    np.testing.assert_array_equal(window[inside], view[inside])


def test_global_state_space_is_found_through_wrappers():
    env = eqxrl.envs.make("TreasureHunt-v0")
    assert global_state_space_of(env).shape == (21, 21, 3)
    assert global_state_space_of(eqxrl.envs.make("CartPole-v1")) is None


class _Declared(AbstractMultiAgentEnvironment):
    """Two agents; the global state it declares and the one it returns differ as
    `shape` says."""

    returned: tuple[int, ...] | None
    declared: tuple[int, ...] | None
    num_agents: int = 2

    @property
    def observation_space(self):
        return Box(0.0, 1.0, shape=(3,))

    @property
    def action_space(self):
        return Discrete(2)

    @property
    def global_state_space(self):
        return None if self.declared is None else Box(0.0, 1.0, shape=self.declared)

    def _timestep(self):
        extras = {}
        if self.returned is not None:
            extras[GLOBAL_STATE] = jnp.zeros(self.returned, jnp.float32)
        return TimeStep(
            observation=jnp.zeros((2, 3)),
            reward=jnp.zeros(2),
            terminated=jnp.bool_(False),
            truncated=jnp.bool_(False),
            extras=extras,
        )

    def reset(self, key):
        return jnp.int32(0), self._timestep()

    def step(self, state, action, key):
        return state, self._timestep()


def test_check_environment_accepts_a_declared_global_state():
    check_environment(_Declared(returned=(6,), declared=(6,)))
    check_environment(_Declared(returned=None, declared=None))


@pytest.mark.parametrize(
    ("returned", "declared", "message"),
    [
        ((2, 6), (6,), r"float32\[2, 6\] but global_state_space needs float32\[6\]"),
        (None, (6,), r"returns no timestep.extras\['global_state'\]"),
        ((6,), None, "declares no global_state_space"),
    ],
)
def test_check_environment_refuses_a_global_state_that_disagrees(
    returned, declared, message
):
    with pytest.raises(ValueError, match=message):
        check_environment(_Declared(returned=returned, declared=declared))


def test_independent_learners_do_not_carry_the_global_state():
    env = eqxrl.envs.make("TreasureHunt-v0")
    ppo = eqxrl.PPO(env=env, num_envs=2, num_steps=4, total_timesteps=16)
    learners = eqxrl.multiagent.Independent(ppo)
    state = eqx.filter_eval_shape(learners.init, jax.random.key(0))
    assert GLOBAL_STATE not in state.learners.timestep.extras


def _seen_in(view: np.ndarray, grid: np.ndarray) -> bool:
    """Whether an agent's view (walls outside the map) is a window of `grid`."""
    radius = view.shape[0] // 2
    wall = grid[0, 0]
    padded = np.pad(grid, ((radius, radius), (radius, radius), (0, 0)))
    padded[:radius], padded[-radius:] = wall, wall
    padded[:, :radius], padded[:, -radius:] = wall, wall
    size = view.shape[0]
    return any(
        np.array_equal(padded[r : r + size, c : c + size], view)
        for r in range(grid.shape[0])
        for c in range(grid.shape[1])
    )


def test_auto_reset_renews_the_global_state_and_keeps_the_final_one():
    env = eqxrl.envs.AutoReset(eqxrl.envs.TimeLimit(TreasureHunt(), 2))
    state, timestep = env.reset(jax.random.key(0))
    assert timestep.extras[eqxrl.envs.FINAL_GLOBAL_STATE].shape == (21, 21, 3)
    actions = jnp.array([0, 1], jnp.int32)
    state, first = env.step(state, actions, jax.random.key(1))
    np.testing.assert_array_equal(
        first.extras[GLOBAL_STATE], first.extras[eqxrl.envs.FINAL_GLOBAL_STATE]
    )
    state, second = env.step(state, actions, jax.random.key(2))  # truncated: reset
    assert bool(second.truncated)
    fresh = np.asarray(second.extras[GLOBAL_STATE])
    final = np.asarray(second.extras[eqxrl.envs.FINAL_GLOBAL_STATE])
    for agent in range(2):
        # The fresh global state is the new episode's, the final one the last
        # step's: each holds what the agents saw then.
        assert _seen_in(np.asarray(second.observation[agent, -1]), fresh)
        assert _seen_in(
            np.asarray(second.extras["final_observation"][agent, -1]), final
        )
    assert not np.array_equal(fresh, final)
