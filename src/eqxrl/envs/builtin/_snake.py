import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray, UInt8, UInt32

from ..._config import float32
from ..._random import random_bits
from .._checks import check_action
from .._environment import AbstractEnvironment
from .._spaces import Box, Discrete
from .._types import TimeStep


def _indicator(condition: Bool[Array, ""]) -> Int[Array, ""]:
    return condition.astype(jnp.int32)


def _uniform_below(bits: UInt32[Array, ""], bound: ArrayLike) -> Int[Array, ""]:
    """An int32 in `[0, bound)` from 32 random bits (`bound >= 1`; `0` if `bound < 1`).

    The modulo bias is below `bound / 2**32` (under 1e-7 on a 20x20 board): cheaper
    than `jax.random.randint`, which draws twice to shave it further.
    """
    bound = jnp.maximum(jnp.asarray(bound, jnp.int32), 1).astype(jnp.uint32)
    return (bits % bound).astype(jnp.int32)


class SnakeState(eqx.Module):
    """The state of one [`Snake`][eqxrl.envs.Snake] game.

    Cells are numbered row by row: cell `row * width + column`.

    **Arguments:**

    - `body`: int32 `[height * width]`, for every cell the number of steps until it
      is free again: 0 on free cells, 1 on the tail, ..., `length` on the head. This
      fixed-capacity buffer is the whole body, whatever its length: moving decrements
      every occupied cell and writes `length` on the new head; eating skips the
      decrement, which grows the snake by one.
    - `head`: int32 scalar, the head's cell.
    - `direction`: int32 scalar, the last move (0 up, 1 right, 2 down, 3 left; 0 after
      `reset`).
    - `length`: int32 scalar, the number of cells of the snake.
    - `food`: int32 scalar, the food's cell (`-1` once the board is full).
    - `step_count`: int32 scalar, steps since `reset`.
    - `steps_since_food`: int32 scalar, steps since the snake last ate (or since
      `reset`).
    """

    body: Int[Array, " num_cells"]
    head: Int[Array, ""]
    direction: Int[Array, ""]
    length: Int[Array, ""]
    food: Int[Array, ""]
    step_count: Int[Array, ""]
    steps_since_food: Int[Array, ""]


# Render colours (RGB).
_BACKGROUND = (22, 24, 33)
_GRID = (34, 37, 50)
_HEAD = (170, 240, 90)
_NECK = (60, 190, 90)
_TAIL = (20, 100, 70)
_FOOD = (235, 70, 80)
_EYE = (20, 24, 30)
# Eye centres in a head cell (row, column as fractions of the cell) per direction.
_EYES = (
    ((0.3, 0.3), (0.3, 0.7)),  # up
    ((0.3, 0.7), (0.7, 0.7)),  # right
    ((0.7, 0.3), (0.7, 0.7)),  # down
    ((0.3, 0.3), (0.7, 0.3)),  # left
)


def _rgb(colour: tuple[int, int, int]) -> Float[Array, "1 1 3"]:
    return jnp.array(colour, jnp.float32).reshape(1, 1, 3)


class Snake(AbstractEnvironment[SnakeState]):
    """The game of Snake on a `height x width` board, with fixed shapes throughout.

    **Actions** are absolute directions: 0 up, 1 right, 2 down, 3 left. While the snake
    is longer than one cell, `action_mask` marks the move back into the neck invalid;
    if that masked action is taken anyway, the snake keeps its current direction.

    **Observations** are float32 `[height, width, 3]`: channel 0 is 1 on the head,
    channel 1 is 1 on every other body cell, channel 2 is 1 on the food. Every entry is
    0 or 1, so observations are stored exactly in `uint8` (see PPO's
    `observation_storage_dtype`).

    **Dynamics.** Moving into a wall or into the body terminates the episode; the tail
    cell that moves away on this step is free, so following one's own tail is safe. On
    a collision the snake does not move. Eating grows the snake by one cell (the tail
    stays where it is for that step) and a new food appears uniformly at random on a
    free cell, in bounded time (the `u`-th free cell for a uniform `u`, found with two
    prefix sums over rows and over one row: no rejection loop). Filling the board
    ends the episode as a win (`terminated`, with the last food's reward).

    **Rewards** (float32 array fields, so they can be swept with `jax.vmap`): every
    step earns `step_reward`, plus `food_reward` when the snake eats, plus
    `death_reward` when it collides.

    **Truncation**: `truncated` is set (and never `terminated`) after `max_steps`
    steps or after `max_steps_without_food` steps without eating; episodes that end
    with a collision on that very step have both flags set.

    **Reset**: a snake of length 1 and the food at two distinct uniformly random cells.

    **Arguments:**

    - `height`, `width`: board size (at least 2 cells in all).
    - `food_reward`: reward for eating (default 1.0).
    - `step_reward`: reward on every step (default 0.0; a small negative value
      hurries the snake).
    - `death_reward`: reward for colliding with a wall or the body (default -1.0).
    - `max_steps`: step limit per episode; `None` (default) means
      `40 * height * width`.
    - `max_steps_without_food`: steps allowed between two meals; `None` (default)
      means `height * width`.

    !!! example

        ```python
        env = eqxrl.envs.Snake(height=10, width=10)
        state, timestep = env.reset(jax.random.key(0))
        state, timestep = env.step(state, jnp.int32(1), jax.random.key(1))
        frame = env.render(state)  # uint8 [160, 160, 3]
        ```
    """

    height: int = eqx.field(static=True, default=10)
    width: int = eqx.field(static=True, default=10)
    food_reward: Float[Array, ""] = eqx.field(default=1.0, converter=float32)
    step_reward: Float[Array, ""] = eqx.field(default=0.0, converter=float32)
    death_reward: Float[Array, ""] = eqx.field(default=-1.0, converter=float32)
    max_steps: int | None = eqx.field(static=True, default=None)
    max_steps_without_food: int | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        for name in ("height", "width"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"Snake: {name}={value!r} must be a positive integer.")
        if self.height * self.width < 2:
            raise ValueError(
                f"Snake: a {self.height}x{self.width} board has no room for the snake "
                "and the food; use at least 2 cells."
            )
        for name in ("max_steps", "max_steps_without_food"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(
                    f"Snake: {name}={value!r} must be a positive integer or None "
                    "(the default)."
                )
        for name in ("food_reward", "step_reward", "death_reward"):
            value = getattr(self, name)
            if value.shape != ():
                raise ValueError(
                    f"Snake: {name} must be a scalar, got shape {value.shape}; to "
                    "sweep over values, build Snake inside jax.vmap."
                )

    @property
    def num_cells(self) -> int:
        """`height * width`."""
        return self.height * self.width

    @property
    def step_limit(self) -> int:
        """The step limit in effect: `max_steps`, or `40 * height * width`."""
        return 40 * self.num_cells if self.max_steps is None else self.max_steps

    @property
    def hunger_limit(self) -> int:
        """The limit in effect on steps without food: `max_steps_without_food`, or
        `height * width`."""
        if self.max_steps_without_food is None:
            return self.num_cells
        return self.max_steps_without_food

    @property
    def observation_space(self) -> Box:
        return Box(0.0, 1.0, shape=(self.height, self.width, 3))

    @property
    def action_space(self) -> Discrete:
        return Discrete(4)

    def reset(self, key: PRNGKeyArray) -> tuple[SnakeState, TimeStep]:
        head_bits, food_bits = random_bits(key, (2,))
        head = _uniform_below(head_bits, self.num_cells)
        # Uniform over the other cells: draw among num_cells - 1 and skip the head.
        food = _uniform_below(food_bits, self.num_cells - 1)
        food = food + _indicator(food >= head)
        cells = jnp.arange(self.num_cells, dtype=jnp.int32)
        zero = jnp.int32(0)
        state = SnakeState(
            body=(cells == head).astype(jnp.int32),
            head=head,
            direction=zero,
            length=jnp.int32(1),
            food=food,
            step_count=zero,
            steps_since_food=zero,
        )
        false = jnp.bool_(False)
        return state, self._timestep(state, jnp.float32(0.0), false, false)

    def step(
        self, state: SnakeState, action: Int[ArrayLike, ""], key: PRNGKeyArray
    ) -> tuple[SnakeState, TimeStep]:
        action = jnp.asarray(check_action(self.action_space, action, "Snake.step"))
        action = action.astype(jnp.int32)
        valid = (action != (state.direction + 2) % 4) | (state.length == 1)
        direction = jnp.where(valid, action, state.direction)
        row = state.head // self.width
        column = state.head % self.width
        row = row + _indicator(direction == 2) - _indicator(direction == 0)
        column = column + _indicator(direction == 1) - _indicator(direction == 3)
        hits_wall = (row < 0) | (row >= self.height) | (column < 0)
        hits_wall = hits_wall | (column >= self.width)
        new_head = jnp.where(hits_wall, state.head, row * self.width + column)
        # The tail (value 1) moves away on this step; food is never on the body, so
        # whether the snake eats does not change what it collides with.
        hits_body = ~hits_wall & (state.body[new_head] > 1)
        dies = hits_wall | hits_body
        eats = ~dies & (new_head == state.food)
        length = state.length + eats.astype(jnp.int32)
        moved = jnp.where(eats, state.body, jnp.maximum(state.body - 1, 0))
        cells = jnp.arange(self.num_cells, dtype=jnp.int32)
        moved = jnp.where(cells == new_head, length, moved)
        body = jnp.where(dies, state.body, moved)
        won = length == self.num_cells
        food = jnp.where(
            eats,
            jnp.where(won, -1, self._sample_food(body, length, key)),
            state.food,
        )
        step_count = state.step_count + 1
        steps_since_food = jnp.where(eats, 0, state.steps_since_food + 1)
        next_state = SnakeState(
            body=body,
            head=jnp.where(dies, state.head, new_head),
            direction=direction,
            length=length,
            food=food,
            step_count=step_count,
            steps_since_food=steps_since_food,
        )
        reward = (
            self.step_reward
            + jnp.where(eats, self.food_reward, 0.0)
            + jnp.where(dies, self.death_reward, 0.0)
        )
        truncated = (step_count >= self.step_limit) | (
            steps_since_food >= self.hunger_limit
        )
        return next_state, self._timestep(next_state, reward, dies | won, truncated)

    def _sample_food(
        self, body: Int[Array, " num_cells"], length: Int[Array, ""], key: PRNGKeyArray
    ) -> Int[Array, ""]:
        """A uniformly random free cell, in O(height * width) without a loop.

        Draws `u` uniform in `[0, free cells)` and finds the `u`-th free cell with a
        prefix sum over rows, then over the chosen row (two short prefix sums are much
        cheaper under `vmap` than one over the whole board).
        """
        u = _uniform_below(random_bits(key), self.num_cells - length)
        free = (body == 0).astype(jnp.int32).reshape(self.height, self.width)
        free_per_row = free.sum(axis=1)
        free_up_to_row = jnp.cumsum(free_per_row)
        row = jnp.argmax(free_up_to_row > u).astype(jnp.int32)
        u_in_row = u - (free_up_to_row[row] - free_per_row[row])
        column = jnp.argmax(jnp.cumsum(free[row]) > u_in_row).astype(jnp.int32)
        return row * self.width + column

    def _action_mask(self, state: SnakeState) -> Bool[Array, " 4"]:
        reverse = (state.direction + 2) % 4
        return (jnp.arange(4, dtype=jnp.int32) != reverse) | (state.length == 1)

    def _timestep(
        self,
        state: SnakeState,
        reward: Float[Array, ""],
        terminated: Bool[Array, ""],
        truncated: Bool[Array, ""],
    ) -> TimeStep:
        return TimeStep(
            observation=self.observation(state),
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            action_mask=self._action_mask(state),
        )

    def observation(self, state: SnakeState) -> Float[Array, "height width 3"]:
        """The observation of a state (what `reset` and `step` return).

        **Arguments:**

        - `state`: a game state.

        **Returns:**

        float32 `[height, width, 3]`: head, the rest of the body, food.
        """
        cells = jnp.arange(self.num_cells, dtype=jnp.int32)
        # One code per cell (0 head, 1 body, 2 food, 3 empty) compared with the
        # channel index: much faster under vmap than stacking three planes.
        code = jnp.where(
            cells == state.head,
            0,
            jnp.where(state.body > 0, 1, jnp.where(cells == state.food, 2, 3)),
        )
        planes = code[:, None] == jnp.arange(3, dtype=jnp.int32)[None, :]
        return planes.astype(jnp.float32).reshape(self.height, self.width, 3)

    def render(
        self, state: SnakeState, cell_pixels: int = 16
    ) -> UInt8[Array, "image_height image_width 3"]:
        """Draw a state as an RGB image, in pure `jax.numpy`.

        Jit- and vmap-able: `jax.vmap(env.render)(states)` draws a batch of frames
        inside a compiled program. The body shades from the head to the tail, with the
        gaps between consecutive segments filled, and eyes on the head look where the
        snake last moved; the food is a disc.

        **Arguments:**

        - `state`: a game state.
        - `cell_pixels`: the side of one cell in pixels (a Python int, at least 4).

        **Returns:**

        uint8 `[height * cell_pixels, width * cell_pixels, 3]`. Write a sequence of
        frames to a file with [`save_gif`][eqxrl.envs.save_gif].
        """
        if not isinstance(cell_pixels, int) or cell_pixels < 4:
            raise ValueError(
                f"Snake.render: cell_pixels={cell_pixels!r} must be an int >= 4."
            )
        height, width, size = self.height, self.width, cell_pixels
        margin = max(1, size // 8)
        body = state.body.reshape(height, width)
        occupied = body > 0
        # Consecutive segments differ by exactly one in `body` (head = length).
        joins_right = (
            occupied[:, :-1]
            & occupied[:, 1:]
            & (jnp.abs(body[:, :-1] - body[:, 1:]) == 1)
        )
        joins_down = (
            occupied[:-1, :]
            & occupied[1:, :]
            & (jnp.abs(body[:-1, :] - body[1:, :]) == 1)
        )
        no_row = jnp.zeros((1, width), bool)
        no_column = jnp.zeros((height, 1), bool)
        right = jnp.concatenate([joins_right, no_column], axis=1)
        left = jnp.concatenate([no_column, joins_right], axis=1)
        down = jnp.concatenate([joins_down, no_row], axis=0)
        up = jnp.concatenate([no_row, joins_down], axis=0)

        # Colour per cell: head bright, then from the neck to the tail darker.
        segments = jnp.maximum(state.length - 1, 1).astype(jnp.float32)
        fraction = (body.astype(jnp.float32) / segments)[..., None]
        neck, tail = _rgb(_NECK), _rgb(_TAIL)
        colour = tail + (neck - tail) * jnp.clip(fraction, 0.0, 1.0)
        is_head = jnp.arange(height * width).reshape(height, width) == state.head
        colour = jnp.where(is_head[..., None], _rgb(_HEAD), colour)

        def upsample(grid: Array) -> Array:
            return jnp.repeat(jnp.repeat(grid, size, axis=0), size, axis=1)

        pixel = jnp.arange(size)
        inside = (pixel >= margin) & (pixel < size - margin)
        y_inside = jnp.tile(inside, height)[:, None]
        x_inside = jnp.tile(inside, width)[None, :]
        y_low = jnp.tile(pixel < margin, height)[:, None]
        y_high = jnp.tile(pixel >= size - margin, height)[:, None]
        x_low = jnp.tile(pixel < margin, width)[None, :]
        x_high = jnp.tile(pixel >= size - margin, width)[None, :]
        painted = upsample(occupied) & (
            (y_inside & x_inside)
            | (y_inside & x_high & upsample(right))
            | (y_inside & x_low & upsample(left))
            | (x_inside & y_high & upsample(down))
            | (x_inside & y_low & upsample(up))
        )

        centre = (size - 1) / 2
        radius = size / 2 - margin
        offset = jnp.arange(size, dtype=jnp.float32) - centre
        disc = (offset[:, None] ** 2 + offset[None, :] ** 2) <= radius**2
        is_food = (jnp.arange(height * width) == state.food).reshape(height, width)
        food = upsample(is_food) & jnp.tile(disc, (height, width))

        # Eyes on the head, looking where the snake last moved.
        eyes = jnp.array(_EYES, jnp.float32)[state.direction] * size  # [2, 2]
        local = jnp.arange(size, dtype=jnp.float32) + 0.5
        local_y = jnp.tile(local, height)[:, None]
        local_x = jnp.tile(local, width)[None, :]
        eye_radius = max(1.0, size / 9)
        near_eye = jnp.zeros((height * size, width * size), bool)
        for eye in range(2):
            distance = (local_y - eyes[eye, 0]) ** 2 + (local_x - eyes[eye, 1]) ** 2
            near_eye = near_eye | (distance <= eye_radius**2)
        eye = upsample(is_head) & near_eye

        background = jnp.where(
            (y_inside & x_inside)[..., None],
            _rgb(_GRID),
            _rgb(_BACKGROUND),
        )
        image = jnp.where(painted[..., None], upsample(colour), background)
        image = jnp.where(food[..., None], _rgb(_FOOD), image)
        image = jnp.where(eye[..., None], _rgb(_EYE), image)
        return jnp.round(image).astype(jnp.uint8)
