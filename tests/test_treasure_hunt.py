"""Treasure Hunt rules (a port of Sorrel 1.6.0's `treasurehunt`) and the multi-agent
conventions of the environment API, through the public API."""

import colorsys
import re

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jaxtyping
import numpy as np
import pytest

import eqxrl
from eqxrl.envs import (
    AutoReset,
    Box,
    Discrete,
    EpisodeStatistics,
    TimeLimit,
    TimeStep,
    TreasureHunt,
    TreasureHuntState,
)

UP, DOWN, LEFT, RIGHT = 0, 1, 2, 3  # Sorrel's action order
EMPTY, WALL, GEM, BONE, FOOD, AGENT = range(6)  # TreasureHuntState's codes

# Sorrel's RGB encoding, derived here the way Sorrel derives it: black for the empty
# cell, then hue i / 5 at full saturation and value, truncated to integers.
SORREL_RGB = np.array(
    [(0, 0, 0)]
    + [[int(c * 255) for c in colorsys.hsv_to_rgb(i / 5, 1.0, 1.0)] for i in range(5)],
    np.float32,
)

# Rule tests: a 7x7 grid (5x5 interior) with no spawns, so only the moves change it;
# and Sorrel's treasurehunt_mp settings (5 agents, 10x10, one-hot), also without
# spawns. Tests share these static configurations to share their compilations.
RULES = TreasureHunt(height=7, width=7, spawn_probability=0.0)
SIMULTANEOUS = TreasureHunt(
    height=7, width=7, spawn_probability=0.0, turn_order="simultaneous"
)
MP = eqxrl.envs.make("TreasureHunt-v0", preset="mp", spawn_probability=0.0).env

step = eqx.filter_jit(lambda env, state, action, key: env.step(state, action, key))
reset_batch = eqx.filter_jit(lambda env, keys: jax.vmap(env.reset)(keys))
step_one_state_many_keys = eqx.filter_jit(
    lambda env, state, action, keys: jax.vmap(env.step, in_axes=(None, None, 0))(
        state, action, keys
    )
)


def make_state(env: TreasureHunt, agents, items=()) -> TreasureHuntState:
    """Agents at `agents` ((row, column) in index order) and `items` ((row, column,
    code)) on an otherwise empty walled grid; no frames seen yet."""
    grid = np.full((env.height, env.width), WALL, np.int32)
    grid[1:-1, 1:-1] = EMPTY
    for row, column, code in items:
        grid[row, column] = code
    for row, column in agents:
        grid[row, column] = AGENT
    frames = np.zeros((len(agents), env.num_frames, env.window, env.window), np.int32)
    return TreasureHuntState(
        grid=jnp.asarray(grid),
        positions=jnp.asarray(agents, jnp.int32).reshape(len(agents), 2),
        frames=jnp.asarray(frames),
    )


def play(env, agents, actions, items=()):
    """One turn from a built state: (next state, rewards as a list)."""
    state = make_state(env, agents, items)
    next_state, timestep = step(env, state, jnp.asarray(actions, jnp.int32), jr.key(0))
    return next_state, timestep.reward.tolist()


def positions(state) -> list[tuple[int, int]]:
    return [tuple(p) for p in np.asarray(state.positions).tolist()]


def check_grid(state, items=()):
    """The grid holds exactly the border walls, the agents at their positions and
    `items`."""
    grid = np.asarray(state.grid)
    expected = np.full_like(grid, WALL)
    expected[1:-1, 1:-1] = EMPTY
    for row, column, code in items:
        expected[row, column] = code
    for row, column in positions(state):
        expected[row, column] = AGENT
    np.testing.assert_array_equal(grid, expected)


# --------------------------------------------------------------------------------------
# Reset


def test_reset(key):
    env = TreasureHunt(height=7, width=7, spawn_probability=0.1)  # 25 interior cells
    states, timesteps = reset_batch(env, jr.split(key, 5000))
    rows = np.asarray(states.positions[..., 0])
    columns = np.asarray(states.positions[..., 1])
    assert ((rows >= 1) & (rows <= 5) & (columns >= 1) & (columns <= 5)).all()
    assert (states.positions[:, 0] != states.positions[:, 1]).any(axis=-1).all()
    grids = np.asarray(states.grid)
    assert ((grids == AGENT).sum(axis=(1, 2)) == 2).all()
    assert (grids[np.arange(5000)[:, None], rows, columns] == AGENT).all()
    assert (grids[:, 0] == WALL).all() and (grids[:, :, -1] == WALL).all()
    # Each agent's cell is uniform over the 25 cells: 200 each, 5 sigma ~ 70.
    for agent in range(2):
        cells = (rows[:, agent] - 1) * 5 + columns[:, agent] - 1
        assert np.abs(np.bincount(cells, minlength=25) - 5000 / 25).max() < 70
    # The first turn's items have spawned already: 23 empty cells at 0.1 a world.
    assert 2.1 < np.isin(grids, [GEM, FOOD, BONE]).sum() / 5000 < 2.5
    assert timesteps.reward.shape == (5000, 2) and (timesteps.reward == 0).all()
    assert timesteps.terminated.shape == (5000,) and not timesteps.terminated.any()
    assert not timesteps.truncated.any() and timesteps.action_mask is None
    # Four zero frames, then the first view, with each agent in its centre.
    observation = np.asarray(timesteps.observation)
    assert observation.shape == (5000, 2, 5, 5, 5, 3)
    assert observation.dtype == np.float32
    assert (observation[:, :, :4] == 0).all()
    centre = np.broadcast_to(SORREL_RGB[AGENT] / 255, (5000, 2, 3))
    np.testing.assert_allclose(observation[:, :, 4, 2, 2], centre)


# --------------------------------------------------------------------------------------
# Moves and rewards


@pytest.mark.parametrize("env", [RULES, SIMULTANEOUS], ids=["sequential", "simult"])
@pytest.mark.parametrize("first,second", [(UP, DOWN), (LEFT, RIGHT)])
def test_walls_give_minus_one_and_the_agent_stays(env, first, second):
    state, rewards = play(env, [(1, 1), (5, 5)], [first, second])
    assert rewards == [-1.0, -1.0]
    assert positions(state) == [(1, 1), (5, 5)]
    check_grid(state)


@pytest.mark.parametrize("env", [RULES, SIMULTANEOUS], ids=["sequential", "simult"])
def test_items_are_collected_and_gone(env):
    items = [(2, 3, GEM), (3, 2, FOOD), (4, 5, BONE)]
    state, rewards = play(env, [(3, 3), (5, 5)], [UP, UP], items)
    assert rewards == [10.0, -10.0]
    assert positions(state) == [(2, 3), (4, 5)]
    check_grid(state, [(3, 2, FOOD)])  # the gem and the bone are taken
    next_state, timestep = step(env, state, jnp.array([DOWN, LEFT]), jr.key(1))
    assert timestep.reward.tolist() == [0.0, 0.0]  # the cells left behind are empty
    assert positions(next_state) == [(3, 3), (4, 4)]
    check_grid(next_state, [(3, 2, FOOD)])
    _, timestep = step(env, next_state, jnp.array([LEFT, UP]), jr.key(2))
    assert timestep.reward.tolist() == [5.0, 0.0]


@pytest.mark.parametrize("env", [RULES, SIMULTANEOUS], ids=["sequential", "simult"])
def test_moving_into_an_agent_that_stays_is_blocked_with_reward_zero(env):
    # Agent 1 walks into the wall; agent 0 walks into agent 1.
    state, rewards = play(env, [(1, 2), (1, 3)], [RIGHT, UP])
    assert rewards == [0.0, -1.0]
    assert positions(state) == [(1, 2), (1, 3)]
    check_grid(state)


@pytest.mark.parametrize("env", [RULES, SIMULTANEOUS], ids=["sequential", "simult"])
def test_agents_cannot_swap(env):
    state, rewards = play(env, [(3, 2), (3, 3)], [RIGHT, LEFT])
    assert rewards == [0.0, 0.0]
    assert positions(state) == [(3, 2), (3, 3)]


@pytest.mark.parametrize("env", [RULES, SIMULTANEOUS], ids=["sequential", "simult"])
@pytest.mark.parametrize("order", ["left first", "right first"])
def test_the_earlier_agent_wins_a_contested_cell(env, order):
    left, right = (3, 2), (3, 4)
    agents = [left, right] if order == "left first" else [right, left]
    actions = [RIGHT, LEFT] if order == "left first" else [LEFT, RIGHT]
    state, rewards = play(env, agents, actions, [(3, 3, GEM)])
    assert rewards == [10.0, 0.0]
    assert positions(state) == [(3, 3), agents[1]]
    check_grid(state)


def test_sequential_later_agents_move_in_the_updated_world():
    # Agent 1 steps into the cell agent 0 has just left.
    state, rewards = play(RULES, [(3, 3), (4, 3)], [UP, UP], [(2, 3, FOOD)])
    assert rewards == [5.0, 0.0]
    assert positions(state) == [(2, 3), (3, 3)]
    check_grid(state)
    # But agent 0 cannot step into the cell of agent 1, who has not moved yet.
    state, rewards = play(RULES, [(3, 3), (4, 3)], [DOWN, DOWN], [(5, 3, BONE)])
    assert rewards == [0.0, -10.0]
    assert positions(state) == [(3, 3), (5, 3)]
    check_grid(state)


def test_simultaneous_cells_occupied_at_the_start_of_the_turn_are_blocked():
    # Agent 1 may not follow agent 0 into the cell it leaves, whatever the order.
    for agents, actions, moved in (
        ([(3, 3), (4, 3)], [UP, UP], [(2, 3), (4, 3)]),
        ([(3, 3), (4, 3)], [DOWN, DOWN], [(3, 3), (5, 3)]),
    ):
        state, rewards = play(SIMULTANEOUS, agents, actions)
        assert rewards == [0.0, 0.0]
        assert positions(state) == moved
        check_grid(state)


def test_five_agents_in_sequence():
    # A column of agents all moving up: each follows into the cell just left, the
    # first collects the gem.
    agents = [(2, 3), (3, 3), (4, 3), (5, 3), (5, 1)]
    state, rewards = play(MP, agents, [UP, UP, UP, UP, LEFT], [(1, 3, GEM)])
    assert rewards == [10.0, 0.0, 0.0, 0.0, -1.0]
    assert positions(state) == [(1, 3), (2, 3), (3, 3), (4, 3), (5, 1)]
    check_grid(state)


# --------------------------------------------------------------------------------------
# Spawns


def spawned(env, num_agents, count, key, extra_items=()):
    """Items after one turn from a grid holding only walls, `extra_items` and agents
    in the top row walking into the wall (so only spawns change the grid)."""
    agents = [(1, 1 + agent) for agent in range(num_agents)]
    state = make_state(env, agents, extra_items)
    action = jnp.full(num_agents, UP, jnp.int32)
    states, timesteps = step_one_state_many_keys(
        env, state, action, jr.split(key, count)
    )
    assert (timesteps.reward == -1.0).all()
    return state, np.asarray(states.grid)


def test_spawn_rate_and_kinds(key):
    # Sorrel's probability on the 7x7 grid: 25 - 3 empty cells in 30,000 worlds.
    env = TreasureHunt(height=7, width=7, spawn_probability=0.005)
    before, grids = spawned(env, 2, 30_000, key, [(3, 3, BONE)])
    old = np.asarray(before.grid)
    changed = grids != old[None]
    # Only empty cells change (an item already there stays), only into items.
    assert not changed[:, old != EMPTY].any()
    assert np.isin(grids[changed], [GEM, FOOD, BONE]).all()
    trials = 30_000 * (old == EMPTY).sum()
    # Each empty cell spawns with probability 0.005: 3300 expected, sigma 57;
    # 0.004 or 0.006 would be 11 sigma away.
    assert abs(changed.sum() - 0.005 * trials) < 290
    for code in (GEM, FOOD, BONE):  # uniform kinds: 1100 each, sigma 33
        assert abs((grids[changed] == code).sum() - 0.005 * trials / 3) < 170


def test_mp_preset_spawns_gems_only(key):
    env = eqxrl.envs.make("TreasureHunt-v0", preset="mp").env
    before, grids = spawned(env, 5, 2000, key)
    old = np.asarray(before.grid)
    changed = grids != old[None]
    assert (grids[changed] == GEM).all()
    trials = 2000 * (old == EMPTY).sum()  # 8 * 8 - 5 empty cells
    assert abs(changed.sum() - 0.02 * trials) < 250  # 2360 expected, sigma 48


def test_no_spawn_with_probability_zero_and_everywhere_with_one(key):
    state = make_state(RULES, [(1, 1), (1, 3)])
    full = TreasureHunt(height=7, width=7, spawn_probability=1.0)
    grid = np.asarray(step(full, state, jnp.array([UP, UP]), key)[0].grid)
    assert np.isin(grid[1:-1, 1:-1], [GEM, FOOD, BONE, AGENT]).all()
    check_grid(step(RULES, state, jnp.array([UP, UP]), key)[0])


# --------------------------------------------------------------------------------------
# Observations


def view(observation, agent, table):
    """The newest view of `agent` decoded back to entity codes."""
    cells = np.asarray(observation)[agent, -1]
    distance = np.abs(cells[:, :, None, :] - table[None, None, :, :]).sum(-1)
    assert distance.min(axis=-1).max() < 1e-6, "not an encoded entity"
    return distance.argmin(axis=-1)


W, A, G, E = WALL, AGENT, GEM, EMPTY


def test_rgb_views_at_the_borders_read_outside_cells_as_walls():
    # Agent 0 in the top-left corner, agent 1 diagonally next to it, a gem at
    # (1, 3); agent 0 walks into the wall so nothing moves.
    items = [(1, 3, GEM), (5, 4, BONE)]
    state, _ = play(RULES, [(1, 1), (2, 2)], [UP, RIGHT], items)
    observation = RULES.observation(state)
    assert observation.shape == (2, 5, 5, 5, 3)
    table = SORREL_RGB / 255
    np.testing.assert_allclose(observation[0, -1, 0, 0], [1.0, 0.0, 0.0])  # outside
    np.testing.assert_allclose(observation[0, -1, 2, 2], [204 / 255, 0.0, 1.0])
    np.testing.assert_allclose(observation[0, -1, 2, 4], [203 / 255, 1.0, 0.0])
    assert view(observation, 0, table).tolist() == [
        [W, W, W, W, W],  # row -1: outside the map
        [W, W, W, W, W],  # row 0: the border
        [W, W, A, E, G],  # row 1: outside, border, itself, empty, the gem
        [W, W, E, E, A],  # row 2: agent 1 moved right to (2, 3)
        [W, W, E, E, E],
    ]
    # Agent 1 at (2, 3): the bone at (5, 4) is out of sight.
    assert view(observation, 1, table).tolist() == [
        [W, W, W, W, W],
        [A, E, G, E, E],
        [E, E, A, E, E],
        [E, E, E, E, E],
        [E, E, E, E, E],
    ]


def test_onehot_views_at_the_bottom_right_corner():
    agents = [(8, 8), (1, 1), (1, 2), (1, 3), (6, 6)]
    actions = [DOWN, UP, UP, UP, RIGHT]
    state, _ = play(MP, agents, actions, [(7, 8, GEM), (8, 6, GEM)])
    observation = np.asarray(MP.observation(state))
    assert observation.shape == (5, 5, 5, 5, 6)
    assert set(np.unique(observation)) == {0.0, 1.0}
    newest = observation[0, -1]
    assert (newest[..., EMPTY] == 0).all()  # Sorrel's empty channel is all zeros
    assert (newest.sum(-1) <= 1).all()
    codes = np.where(newest.sum(-1) == 0, EMPTY, newest.argmax(-1))
    assert codes.tolist() == [
        [E, A, E, W, W],  # agent 4 moved to (6, 7); the border, then outside
        [E, E, G, W, W],
        [G, E, A, W, W],
        [W, W, W, W, W],
        [W, W, W, W, W],
    ]


def test_frames_stack_oldest_first(key):
    env = TreasureHunt(height=7, width=7, spawn_probability=0.2)
    state = make_state(env, [(3, 3), (2, 2)])  # no views yet: all frames empty
    stacks, views = [], []
    for turn in range(7):
        action = jnp.array([turn % 4, 3])
        state, timestep = step(env, state, action, jr.fold_in(key, turn))
        stacks.append(np.asarray(timestep.observation))
        views.append(stacks[-1][:, -1])
        # The newest view is what each agent sees now: itself in the centre.
        assert (np.asarray(state.frames)[:, -1, 2, 2] == AGENT).all()
    assert len({view.tobytes() for view in views}) == 7  # the world changed
    for turn, stack in enumerate(stacks):
        for age in range(5):
            seen = turn - age
            expected = views[seen] if seen >= 0 else np.zeros_like(views[0])
            np.testing.assert_array_equal(stack[:, 4 - age], expected)


# --------------------------------------------------------------------------------------
# Registry, wrappers and the environment contract


def test_make_has_sorrels_settings():
    env = eqxrl.envs.make("TreasureHunt-v0")
    assert isinstance(env, TimeLimit) and env.max_episode_steps == 100
    inner = env.env
    assert (inner.height, inner.width, inner.num_agents) == (21, 21, 2)
    assert inner.spawn_probability == pytest.approx(0.005)
    assert inner.items == ("gem", "food", "bone")
    rewards = [
        inner.gem_reward,
        inner.food_reward,
        inner.bone_reward,
        inner.wall_reward,
    ]
    assert [float(r) for r in rewards] == [10.0, 5.0, -10.0, -1.0]
    assert (inner.turn_order, inner.encoding) == ("sequential", "rgb")
    assert env.observation_space.shape == (5, 5, 5, 3)  # 375 inputs
    assert env.action_space == Discrete(4)
    assert eqxrl.envs.num_agents_of(env) == 2


def test_mp_preset_and_overrides():
    env = eqxrl.envs.make("TreasureHunt-v0", preset="mp")
    assert env.max_episode_steps == 50
    inner = env.env
    assert (inner.height, inner.width, inner.num_agents) == (10, 10, 5)
    assert inner.items == ("gem",) and inner.spawn_probability == pytest.approx(0.02)
    assert env.observation_space.shape == (5, 5, 5, 6)
    custom = eqxrl.envs.make(
        "TreasureHunt-v0", preset="mp", num_agents=3, max_episode_steps=7
    )
    assert eqxrl.envs.num_agents_of(custom) == 3 and custom.max_episode_steps == 7
    assert custom.env.height == 10


def test_unknown_preset_names_the_valid_ones():
    with pytest.raises(ValueError, match=r"'huge'.*\['default', 'mp'\]"):
        eqxrl.envs.make("TreasureHunt-v0", preset="huge")


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"height": 2}, "height=2"),
        ({"width": True}, "width=True"),
        ({"num_agents": 0}, "num_agents=0"),
        ({"height": 4, "width": 4, "num_agents": 5}, "num_agents=5"),
        ({"spawn_probability": 1.5}, "spawn_probability=1.5"),
        ({"spawn_probability": -0.5}, "spawn_probability=-0.5"),
        ({"turn_order": "random"}, "turn_order='random'"),
        ({"encoding": "grey"}, "encoding='grey'"),
        ({"items": ("gold",)}, "items=('gold',)"),
        ({"items": ()}, "items=()"),
        ({"items": ("gem", "gem")}, "items=('gem', 'gem')"),
        ({"vision_radius": -1}, "vision_radius=-1"),
        ({"num_frames": 0}, "num_frames=0"),
    ],
)
def test_bad_configuration_names_the_field_and_value(kwargs, needle):
    with pytest.raises(ValueError, match=re.escape(f"TreasureHunt: {needle}")):
        TreasureHunt(**kwargs)


def test_actions_are_checked(key):
    state = make_state(RULES, [(3, 3), (4, 4)])
    with pytest.raises(
        ValueError, match=r"action 4 \(at index 1 of actions \[0, 4\]\)"
    ):
        RULES.step(state, jnp.array([0, 4], jnp.int32), key)
    with pytest.raises(ValueError, match=r"one action per agent, shape \(2,\)"):
        RULES.step(state, jnp.array([0, 1, 2], jnp.int32), key)


def test_time_limit_auto_reset_and_per_agent_returns(key):
    env = AutoReset(
        EpisodeStatistics(
            eqxrl.envs.make(
                "TreasureHunt-v0",
                height=7,
                width=7,
                spawn_probability=0.3,
                max_episode_steps=5,
            )
        )
    )

    @eqx.filter_jit
    def run(env, key):
        state, _ = env.reset(key)

        def turn(state, key):
            action_key, step_key = jr.split(key)
            action = jr.randint(action_key, (2,), 0, 4, dtype=jnp.int32)
            return env.step(state, action, step_key)

        return jax.lax.scan(turn, state, jr.split(key, 12))[1]

    timesteps = run(env, key)
    assert not timesteps.terminated.any()  # nothing ends an epoch but the limit
    assert np.flatnonzero(timesteps.truncated).tolist() == [4, 9]
    returns = timesteps.extras["episode_return"]
    assert returns.shape == (12, 2)
    rewards = np.asarray(timesteps.reward)
    np.testing.assert_allclose(returns[4], rewards[:5].sum(0), rtol=1e-6)
    np.testing.assert_allclose(returns[9], rewards[5:10].sum(0), rtol=1e-6)
    assert timesteps.extras["episode_length"].tolist() == [1, 2, 3, 4, 5] * 2 + [1, 2]
    assert (rewards != 0).any()
    # After a truncation the observation is a fresh reset's (four zero frames), the
    # final one is kept.
    observation = np.asarray(timesteps.observation)
    final = np.asarray(timesteps.extras["final_observation"])
    assert (observation[[4, 9], :, :4] == 0).all()
    assert (final[[4, 9], :, :4] != 0).any(axis=(2, 3, 4, 5)).all()
    np.testing.assert_array_equal(observation[:4], final[:4])


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"preset": "mp", "turn_order": "simultaneous"}],
)
def test_check_environment_accepts_it(kwargs):
    env = eqxrl.envs.make("TreasureHunt-v0", **kwargs)
    eqxrl.envs.check_environment(env)
    eqxrl.envs.check_environment(AutoReset(EpisodeStatistics(env)))


class ScalarRewardPair(eqxrl.envs.AbstractMultiAgentEnvironment):
    """Two agents, but one scalar reward (or observations without the agent axis)."""

    num_agents: int = eqx.field(static=True, default=2)
    broken: str = eqx.field(static=True, default="reward")

    def reset(self, key):
        return jnp.int32(0), self._timestep()

    def step(self, state, action, key):
        return state, self._timestep()

    def _timestep(self):
        observation = jnp.zeros(3 if self.broken == "observation" else (2, 3))
        reward = jnp.zeros(() if self.broken == "reward" else 2)
        false = jnp.bool_(False)
        return TimeStep(observation, reward, false, false)

    @property
    def observation_space(self):
        return Box(0.0, 1.0, shape=(3,))

    @property
    def action_space(self):
        return Discrete(2)


@pytest.mark.parametrize(
    "broken,needle",
    [
        ("reward", r"timestep.reward is float32\[\] but must be a vector \[2\]"),
        ("observation", r"of shape \(3,\) but with 2 agents .* must be \(2, 3\)"),
    ],
)
def test_check_environment_catches_missing_agent_axes(broken, needle):
    with pytest.raises(ValueError, match=needle):
        eqxrl.envs.check_environment(TimeLimit(ScalarRewardPair(broken=broken), 5))


def test_num_agents_of_single_agent_environments_is_none():
    assert eqxrl.envs.num_agents_of(eqxrl.envs.make("CartPole-v1")) is None
    assert ScalarRewardPair().num_agents == 2


def test_wrappers_forward_num_agents():
    """`env.num_agents` answers through every wrapper layer (a user types it before
    looking for `num_agents_of`); around a single-agent environment it is an
    AttributeError that names `num_agents_of`, so `hasattr` stays False."""
    env = eqxrl.envs.make("TreasureHunt-v0", num_agents=3)
    layers = [env, EpisodeStatistics(env), AutoReset(EpisodeStatistics(env))]
    for wrapped in layers:
        assert wrapped.num_agents == 3 == eqxrl.envs.num_agents_of(wrapped)
    single = AutoReset(EpisodeStatistics(eqxrl.envs.make("CartPole-v1")))
    assert not hasattr(single, "num_agents")
    with pytest.raises(AttributeError, match=r"CartPole.*num_agents_of\(env\)"):
        single.num_agents
    assert eqxrl.envs.num_agents_of(single) is None


def test_a_wrapper_cannot_declare_num_agents_as_a_field():
    """The inherited property would make such a wrapper impossible to build; the
    class statement says how to override it instead."""
    with pytest.raises(TypeError, match="override.* with a property"):

        class Renumbered(eqxrl.envs.AbstractWrapper):
            env: eqxrl.envs.AbstractEnvironment
            num_agents: int = 4

    class Renumbered(
        eqxrl.envs.AbstractWrapper, eqxrl.envs.AbstractMultiAgentEnvironment
    ):
        env: eqxrl.envs.AbstractEnvironment

        @property
        def num_agents(self) -> int:
            return 4

        def reset(self, key):
            return self.env.reset(key)

        def step(self, state, action, key):
            return self.env.step(state, action, key)

    renumbered = TimeLimit(Renumbered(ScalarRewardPair()), 5)
    assert renumbered.num_agents == 4 == eqxrl.envs.num_agents_of(renumbered)


def test_timestep_shapes_of_one_agent_or_several():
    false = jnp.bool_(False)
    TimeStep(jnp.zeros(3), jnp.zeros(2), false, false, jnp.ones((2, 4), bool))
    with pytest.raises(ValueError, match="a vector \\[num_agents\\]"):
        TimeStep(jnp.zeros(3), jnp.zeros((2, 3)), false, false)
    # A mask of two agents with the reward of one (and the other way round).
    with pytest.raises(jaxtyping.TypeCheckError):
        TimeStep(jnp.zeros(3), jnp.float32(0.0), false, false, jnp.ones((2, 4), bool))
    with pytest.raises(jaxtyping.TypeCheckError):
        TimeStep(jnp.zeros(3), jnp.zeros(3), false, false, jnp.ones((2, 4), bool))


# --------------------------------------------------------------------------------------
# Rendering


def test_render_draws_walls_items_and_agents_in_their_colours():
    state = make_state(RULES, [(3, 3), (1, 5)], [(2, 2, GEM)])
    frame = np.asarray(eqx.filter_jit(RULES.render)(state))
    assert frame.shape == (7 * 16, 7 * 16, 3) and frame.dtype == np.uint8

    def centre(row, column):
        return frame[row * 16 + 8, column * 16 + 8].tolist()

    assert centre(3, 3) == [222, 60, 75]  # agent 0
    assert centre(1, 5) == [52, 110, 220]  # agent 1
    assert centre(2, 2) == [64, 196, 255]  # gem
    assert centre(0, 0) == [84, 86, 99]  # wall
    assert centre(4, 4) == [226, 205, 160]  # floor


def test_eval_gif_path_records_and_writes_frames(key, tmp_path):
    """What `eqxrl eval --gif` runs, with a random joint policy (there is no
    multi-agent algorithm to load yet)."""
    from eqxrl.training import record_episodes, renderer, write_gif

    class RandomJointPolicy(eqxrl.nn.AbstractPolicy):
        def __call__(self, observation, key, action_mask=None):
            return jr.randint(key, (observation.shape[0],), 0, 4, dtype=jnp.int32)

    env = eqxrl.envs.make("TreasureHunt-v0", height=7, width=7, max_episode_steps=4)
    assert renderer(env) is not None
    frames = record_episodes(RandomJointPolicy(), env, key, num_episodes=2)
    assert frames.shape == (2 * 5, 112, 112, 3) and frames.dtype == np.uint8
    path = write_gif(tmp_path / "treasure.gif", frames)
    assert path.stat().st_size > 0
