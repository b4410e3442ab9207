"""Snake rules, through the public API (eqxrl.envs.Snake / SnakeState / make)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl
from eqxrl.envs import Snake, SnakeState

UP, RIGHT, DOWN, LEFT = 0, 1, 2, 3


def make_state(env: Snake, cells, food, direction, **counters) -> SnakeState:
    """A state with the snake on `cells` (head first, as (row, column)) and the food."""
    body = np.zeros(env.height * env.width, np.int32)
    for order, (row, column) in enumerate(cells):
        body[row * env.width + column] = len(cells) - order
    head_row, head_column = cells[0]
    return SnakeState(
        body=jnp.asarray(body),
        head=jnp.int32(head_row * env.width + head_column),
        direction=jnp.int32(direction),
        length=jnp.int32(len(cells)),
        food=jnp.int32(food[0] * env.width + food[1]),
        step_count=jnp.int32(counters.get("step_count", 0)),
        steps_since_food=jnp.int32(counters.get("steps_since_food", 0)),
    )


def snake_cells(env: Snake, state: SnakeState) -> list[tuple[int, int]]:
    """The body as (row, column) cells, head first."""
    body = np.asarray(state.body)
    order = np.argsort(-body)[: int(state.length)]
    return [divmod(int(cell), env.width) for cell in order]


step = eqx.filter_jit(lambda env, state, action, key: env.step(state, action, key))
render = eqx.filter_jit(lambda env, state, **kwargs: env.render(state, **kwargs))
render_batch = eqx.filter_jit(lambda env, states: jax.vmap(env.render)(states))
reset_batch = eqx.filter_jit(lambda env, keys: jax.vmap(env.reset)(keys))


def test_reset(key):
    env = Snake(height=5, width=7)
    states, timesteps = reset_batch(env, jr.split(key, 500))
    assert timesteps.observation.shape == (500, 5, 7, 3)
    assert timesteps.observation.dtype == jnp.float32
    assert (states.length == 1).all()
    assert (states.head != states.food).all()
    counts = np.asarray(timesteps.observation).sum(axis=(1, 2))
    assert (counts == np.array([1.0, 0.0, 1.0])).all()
    assert timesteps.action_mask.all()
    assert not timesteps.terminated.any() and not timesteps.truncated.any()
    assert (timesteps.reward == 0).all()
    # Head and food both cover the whole board.
    assert len(np.unique(states.head)) == 35 and len(np.unique(states.food)) == 35


def test_reset_and_step_timesteps_have_the_same_structure(key):
    env = Snake()
    state, first = eqx.filter_jit(env.reset)(key)
    _, second = step(env, state, jnp.int32(1), key)
    assert jax.tree.structure(first) == jax.tree.structure(second)
    for a, b in zip(jax.tree.leaves(first), jax.tree.leaves(second)):
        assert a.shape == b.shape and a.dtype == b.dtype


def test_observation_channels(key):
    env = Snake(height=5, width=5)
    state = make_state(env, [(2, 2), (2, 1), (1, 1)], food=(4, 4), direction=RIGHT)
    observation = env.observation(state)
    assert observation[2, 2].tolist() == [1.0, 0.0, 0.0]
    assert observation[2, 1].tolist() == [0.0, 1.0, 0.0]
    assert observation[1, 1].tolist() == [0.0, 1.0, 0.0]
    assert observation[4, 4].tolist() == [0.0, 0.0, 1.0]
    assert observation.sum() == 4.0
    # Every entry is 0 or 1: stored exactly in uint8.
    stored = observation.astype(jnp.uint8).astype(jnp.float32)
    assert (stored == observation).all()


@pytest.mark.parametrize(
    "cells, action",
    [
        ([(0, 3)], UP),
        ([(4, 3)], DOWN),
        ([(2, 0)], LEFT),
        ([(2, 4)], RIGHT),
        ([(0, 0), (1, 0)], LEFT),
    ],
)
def test_walls_terminate(key, cells, action):
    env = Snake(height=5, width=5)
    state = make_state(env, cells, food=(3, 3), direction=UP)
    next_state, timestep = step(env, state, jnp.int32(action), key)
    assert timestep.terminated and not timestep.truncated
    assert timestep.reward == -1.0
    # On a collision the snake stays where it was.
    assert snake_cells(env, next_state) == cells


def test_self_collision_terminates(key):
    env = Snake(height=5, width=5)
    # Head at (2, 2) moving up into (1, 2), which is the body (not the tail).
    cells = [(2, 2), (2, 3), (1, 3), (1, 2), (1, 1)]
    state = make_state(env, cells, food=(4, 4), direction=LEFT)
    _, timestep = step(env, state, jnp.int32(UP), key)
    assert timestep.terminated and timestep.reward == -1.0


def test_vacating_tail_cell_is_free(key):
    env = Snake(height=5, width=5)
    # A 2x2 loop: the head moves into the cell the tail leaves on this step.
    cells = [(1, 1), (1, 2), (2, 2), (2, 1)]
    state = make_state(env, cells, food=(4, 4), direction=LEFT)
    next_state, timestep = step(env, state, jnp.int32(DOWN), key)
    assert not timestep.terminated
    assert timestep.reward == 0.0
    assert snake_cells(env, next_state) == [(2, 1), (1, 1), (1, 2), (2, 2)]


def test_eating_grows_by_one_and_moves_food_to_a_free_cell(key):
    env = Snake(height=4, width=4)
    cells = [(1, 1), (1, 0), (0, 0)]
    state = make_state(env, cells, food=(1, 2), direction=RIGHT)
    keys = jr.split(key, 4000)
    next_states, timesteps = eqx.filter_jit(
        lambda env, state, keys: jax.vmap(env.step, in_axes=(None, None, 0))(
            state, jnp.int32(RIGHT), keys
        )
    )(env, state, keys)
    assert (timesteps.reward == 1.0).all() and not timesteps.terminated.any()
    assert (next_states.length == 4).all()
    assert snake_cells(env, jax.tree.map(lambda x: x[0], next_states)) == [
        (1, 2),
        *cells,
    ]
    assert (next_states.steps_since_food == 0).all()
    body = np.asarray(next_states.body)
    food = np.asarray(next_states.food)
    assert (body[np.arange(len(food)), food] == 0).all()  # always on a free cell
    counts = np.bincount(food, minlength=16)
    free = body[0] == 0
    assert (counts[~free] == 0).all()
    # Uniform over the 12 free cells: 4000 / 12 = 333 each; 5 sigma ~ 90.
    assert np.abs(counts[free] - 4000 / 12).max() < 90


def test_reverse_move_is_masked_and_ignored(key):
    env = Snake(height=5, width=5)
    state = make_state(env, [(2, 2), (2, 1)], food=(4, 4), direction=RIGHT)
    assert env.observation(state).shape == (5, 5, 3)
    _, timestep = env.reset(key)
    assert timestep.action_mask.all()  # length 1: no neck, every move is valid
    masked_state, masked = step(env, state, jnp.int32(LEFT), key)
    straight_state, straight = step(env, state, jnp.int32(RIGHT), key)
    assert snake_cells(env, masked_state) == [(2, 3), (2, 2)]
    assert eqx.tree_equal(masked_state, straight_state)
    assert not masked.terminated
    assert masked.action_mask.tolist() == [True, True, True, False]
    # The mask follows the direction of travel.
    down_state, down = step(env, state, jnp.int32(DOWN), key)
    assert down.action_mask.tolist() == [False, True, True, True]


def test_step_limit_sets_truncated_only(key):
    env = Snake(height=5, width=5, max_steps=3)
    state = make_state(env, [(0, 0)], food=(4, 4), direction=RIGHT)
    flags = []
    for _ in range(3):
        state, timestep = step(env, state, jnp.int32(RIGHT), key)
        flags.append((bool(timestep.terminated), bool(timestep.truncated)))
    assert flags == [(False, False), (False, False), (False, True)]


def test_hunger_limit_sets_truncated_only_and_eating_resets_it(key):
    env = Snake(height=5, width=5, max_steps_without_food=2)
    state = make_state(env, [(0, 0)], food=(0, 2), direction=RIGHT)
    state, timestep = step(env, state, jnp.int32(RIGHT), key)
    assert not timestep.truncated
    state, timestep = step(env, state, jnp.int32(RIGHT), key)  # eats at (0, 2)
    assert timestep.reward == 1.0 and not timestep.truncated
    state, timestep = step(env, state, jnp.int32(DOWN), key)
    assert not timestep.truncated
    state, timestep = step(env, state, jnp.int32(DOWN), key)
    assert timestep.truncated and not timestep.terminated


def test_full_board_is_a_win(key):
    env = Snake(height=1, width=2)
    state = make_state(env, [(0, 0)], food=(0, 1), direction=RIGHT)
    state, timestep = step(env, state, jnp.int32(RIGHT), key)
    assert timestep.terminated and timestep.reward == 1.0
    assert state.length == 2 and state.food == -1
    assert timestep.observation[..., 2].sum() == 0.0  # no food left


def test_rewards_are_configurable(key):
    env = Snake(height=3, width=3, food_reward=2.0, step_reward=-0.5, death_reward=-3.0)
    state = make_state(env, [(1, 1)], food=(1, 2), direction=RIGHT)
    _, eat = step(env, state, jnp.int32(RIGHT), key)
    _, move = step(env, state, jnp.int32(DOWN), key)
    wall_state = make_state(env, [(0, 1)], food=(1, 2), direction=RIGHT)
    _, die = step(env, wall_state, jnp.int32(UP), key)
    assert (float(eat.reward), float(move.reward), float(die.reward)) == (
        1.5,
        -0.5,
        -3.5,
    )


def test_random_play_keeps_the_invariants(key):
    env = eqxrl.envs.AutoReset(Snake(height=4, width=5))
    inner = Snake(height=4, width=5)

    def body(carry, key):
        state, timestep = carry
        action_key, step_key = jr.split(key)
        action = jr.randint(action_key, (), 0, 4)
        state, timestep = env.step(state, action, step_key)
        return (state, timestep), state

    _, states = jax.jit(
        lambda key: jax.lax.scan(body, env.reset(key), jr.split(key, 2000))
    )(key)
    body_values = np.sort(np.asarray(states.body), axis=1)
    lengths = np.asarray(states.length)
    for values, length, food, head in zip(
        body_values, lengths, np.asarray(states.food), np.asarray(states.head)
    ):
        # The body holds exactly the values 1..length; head = length; food is free.
        assert (values[-length:] == np.arange(1, length + 1)).all()
        assert (values[:-length] == 0).all()
    flat_body = np.asarray(states.body)
    index = np.arange(len(lengths))
    assert (flat_body[index, np.asarray(states.head)] == lengths).all()
    assert (flat_body[index, np.asarray(states.food)] == 0).all()
    assert lengths.max() > 1  # some food was eaten
    assert inner.num_cells == 20


def test_render_is_deterministic_and_vmappable(key):
    env = Snake(height=4, width=6)
    states, _ = reset_batch(env, jr.split(key, 3))
    frames = render_batch(env, states)
    assert frames.shape == (3, 64, 96, 3) and frames.dtype == jnp.uint8
    for index in range(3):
        state = jax.tree.map(lambda x: x[index], states)
        np.testing.assert_array_equal(render(env, state), frames[index])
        np.testing.assert_array_equal(render(env, state), render(env, state))
    assert not (frames[0] == frames[1]).all()
    big = render(env, jax.tree.map(lambda x: x[0], states), cell_pixels=10)
    assert big.shape == (40, 60, 3)
    with pytest.raises(ValueError, match="cell_pixels"):
        env.render(jax.tree.map(lambda x: x[0], states), cell_pixels=2)


def test_render_shows_head_body_and_food():
    env = Snake(height=3, width=3)
    state = make_state(env, [(0, 0), (0, 1)], food=(2, 2), direction=LEFT)
    frame = np.asarray(render(env, state, cell_pixels=8))
    centre = lambda row, column: frame[row * 8 + 4, column * 8 + 4]  # noqa: E731
    empty, head, body, food = centre(1, 1), centre(0, 0), centre(0, 1), centre(2, 2)
    colours = {tuple(c) for c in (empty, head, body, food)}
    assert len(colours) == 4
    assert food[0] > 200 and food[1] < 100  # red
    assert head[1] > 200  # bright green
    # The gap between head and neck is filled; the one below the head is not.
    assert tuple(frame[4, 7]) == tuple(head) or tuple(frame[4, 8]) == tuple(body)
    assert tuple(frame[7, 4]) != tuple(head)


def test_save_gif(tmp_path, key):
    Image = pytest.importorskip("PIL.Image")
    env = Snake(height=4, width=4)
    states, _ = reset_batch(env, jr.split(key, 5))
    frames = render_batch(env, states)
    path = tmp_path / "snake.gif"
    eqxrl.envs.save_gif(frames, path, fps=5)
    with Image.open(path) as image:
        assert image.n_frames == 5
        assert image.size == (64, 64)
    with pytest.raises((TypeError, ValueError), match="uint8|UInt8"):
        eqxrl.envs.save_gif(np.zeros((2, 4, 4, 3), np.float32), path)


def test_make_and_config_errors():
    env = eqxrl.envs.make("Snake-v0", height=6, width=8)
    assert isinstance(env, Snake)
    assert env.observation_space.shape == (6, 8, 3)
    assert env.action_space.num_values == 4
    assert env.step_limit == 40 * 48 and env.hunger_limit == 48
    with pytest.raises(ValueError, match="height"):
        Snake(height=0)
    with pytest.raises(ValueError, match="at least 2 cells"):
        Snake(height=1, width=1)
    with pytest.raises(ValueError, match="max_steps"):
        Snake(max_steps=0)
    with pytest.raises(ValueError, match="scalar"):
        Snake(food_reward=jnp.ones(2))


def test_rewards_can_be_swept_with_vmap(key):
    def first_reward(food_reward):
        env = Snake(height=3, width=3, food_reward=food_reward)
        state = make_state(env, [(1, 1)], food=(1, 2), direction=RIGHT)
        return env.step(state, jnp.int32(RIGHT), key)[1].reward

    rewards = jax.jit(jax.vmap(first_reward))(jnp.array([1.0, 2.0, 5.0]))
    np.testing.assert_allclose(rewards, [1.0, 2.0, 5.0])
