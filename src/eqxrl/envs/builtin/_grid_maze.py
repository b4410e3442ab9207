import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray, UInt8

from .._checks import check_action
from .._environment import AbstractEnvironment
from .._render import disc, paint
from .._spaces import Box, Discrete
from .._types import TimeStep

DEFAULT_LAYOUT = (
    "S..#G",
    ".#.#.",
    ".#...",
    ".###.",
    ".....",
)

# Row and column change of each action: up, right, down, left.
_MOVES = np.array([[-1, 0], [0, 1], [1, 0], [0, -1]], dtype=np.int32)


class GridMazeState(eqx.Module):
    """The agent's cell, `[row, column]`."""

    position: Int[Array, "2"]


class GridMaze(AbstractEnvironment[GridMazeState]):
    """A small maze where invalid moves are masked: a probe for action masking.

    The agent starts on `S` and must reach `G`; `#` cells are walls. Actions 0 up,
    1 right, 2 down, 3 left. `action_mask` marks moves into a wall or off the grid
    invalid; such an action, if taken anyway, leaves the agent where it is. Reward 1
    on reaching the goal (which terminates), 0 otherwise. Observation float32
    `[height, width, 3]`: walls, agent, goal. `make("GridMaze-v0")` adds a 50-step
    limit. With the default layout the shortest path takes 8 moves.

    **Arguments:**

    - `layout`: rows of equal length over the characters `.`, `#`, `S` (one) and `G`
      (one).
    """

    layout: tuple[str, ...] = eqx.field(static=True, default=DEFAULT_LAYOUT)

    def __check_init__(self):
        widths = {len(row) for row in self.layout}
        text = "".join(self.layout)
        if len(widths) != 1 or set(text) - set(".#SG"):
            raise ValueError(
                "GridMaze: layout rows must have equal length and use only '.#SG'."
            )
        if text.count("S") != 1 or text.count("G") != 1:
            raise ValueError("GridMaze: layout needs exactly one 'S' and one 'G'.")

    @property
    def _grid(self) -> np.ndarray:
        return np.array([list(row) for row in self.layout])

    @property
    def walls(self) -> Bool[Array, "height width"]:
        """Where the walls are."""
        return jnp.asarray(self._grid == "#")

    def _cell(self, character: str) -> Int[Array, "2"]:
        return jnp.asarray(np.argwhere(self._grid == character)[0], jnp.int32)

    @property
    def observation_space(self) -> Box:
        height, width = self._grid.shape
        return Box(0.0, 1.0, shape=(height, width, 3))

    @property
    def action_space(self) -> Discrete:
        return Discrete(4)

    def reset(self, key: PRNGKeyArray) -> tuple[GridMazeState, TimeStep]:
        del key  # the start cell is fixed
        state = GridMazeState(self._cell("S"))
        return state, self._timestep(state, jnp.float32(0.0), jnp.bool_(False))

    def step(
        self, state: GridMazeState, action: Int[ArrayLike, ""], key: PRNGKeyArray
    ) -> tuple[GridMazeState, TimeStep]:
        del key
        action = jnp.asarray(check_action(self.action_space, action, "GridMaze.step"))
        valid = self._action_mask(state.position)[action]
        target = state.position + jnp.asarray(_MOVES)[action]
        position = jnp.where(valid, target, state.position)
        next_state = GridMazeState(position)
        at_goal = jnp.all(position == self._cell("G"))
        reward = at_goal.astype(jnp.float32)
        return next_state, self._timestep(next_state, reward, at_goal)

    def _action_mask(self, position: Int[Array, "2"]) -> Bool[Array, "4"]:
        height, width = self._grid.shape
        targets = position[None, :] + jnp.asarray(_MOVES)
        inside = (
            (targets[:, 0] >= 0)
            & (targets[:, 0] < height)
            & (targets[:, 1] >= 0)
            & (targets[:, 1] < width)
        )
        rows = jnp.clip(targets[:, 0], 0, height - 1)
        columns = jnp.clip(targets[:, 1], 0, width - 1)
        return inside & ~self.walls[rows, columns]

    def render(
        self, state: GridMazeState, cell_pixels: int = 16
    ) -> UInt8[Array, "image_height image_width 3"]:
        """Draw a state as an RGB image, in pure `jax.numpy`: walls dark, the goal
        green, the agent a blue disc.

        **Arguments:**

        - `state`: a maze state.
        - `cell_pixels`: the side of one cell in pixels (a Python int, at least 4).

        **Returns:**

        uint8 `[height * cell_pixels, width * cell_pixels, 3]`.
        """
        if not isinstance(cell_pixels, int) or cell_pixels < 4:
            raise ValueError(
                f"GridMaze.render: cell_pixels={cell_pixels!r} must be an int >= 4."
            )
        grid = self._grid
        colours = np.full((*grid.shape, 3), 235, np.uint8)
        colours[grid == "#"] = (40, 44, 52)
        colours[grid == "G"] = (90, 200, 110)
        image = jnp.repeat(
            jnp.repeat(jnp.asarray(colours), cell_pixels, 0), cell_pixels, 1
        )
        height, width = image.shape[:2]
        centre = (state.position[::-1].astype(jnp.float32) + 0.5) * cell_pixels
        agent = disc(height, width, centre, 0.35 * cell_pixels)
        return paint(image, agent, (60, 110, 220))

    def _timestep(self, state: GridMazeState, reward, terminated) -> TimeStep:
        height, width = self._grid.shape
        agent = jnp.zeros((height, width), jnp.float32)
        agent = agent.at[state.position[0], state.position[1]].set(1.0)
        goal = jnp.asarray(self._grid == "G", jnp.float32)
        observation: Float[Array, "height width 3"] = jnp.stack(
            [self.walls.astype(jnp.float32), agent, goal], axis=-1
        )
        return TimeStep(
            observation=observation,
            reward=reward,
            terminated=terminated,
            truncated=jnp.bool_(False),
            action_mask=self._action_mask(state.position),
        )
