"""Treasure Hunt: a pure-JAX port of the `treasurehunt` example of Sorrel 1.6.0
(social-ai-uoft/sorrel), a multi-agent gridworld."""

from typing import Any

import equinox as eqx
import jax.lax as lax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray, UInt8

from ..._config import float32, in_range
from ..._random import random_bits, split, uniform
from .._checks import check_action
from .._environment import GLOBAL_STATE, AbstractMultiAgentEnvironment
from .._spaces import Box, Discrete
from .._types import TimeStep

# Entity codes, in the order of Sorrel's `entity_list` for treasurehunt, so that the
# one-hot channel of an entity is its code.
EMPTY, WALL, GEM, BONE, FOOD, AGENT = range(6)
_NUM_KINDS = 6
# The items that can spawn, in the order Sorrel draws them from.
_ITEM_CODES = {"gem": GEM, "food": FOOD, "bone": BONE}
# Sorrel's RGBObservationSpec: black for EmptyEntity, then for the n = 5 other kinds
# in list order `colorsys.hsv_to_rgb(i / n, 1, 1)` truncated to integers (which
# gives 203 for the gem's red and 204 for the agent's).
_RGB = (
    (0, 0, 0),  # empty
    (255, 0, 0),  # wall
    (203, 255, 0),  # gem
    (0, 255, 102),  # bone
    (0, 102, 255),  # food
    (204, 0, 255),  # agent
)
# Sorrel's ActionSpec(["up", "down", "left", "right"]), as (row, column) moves.
_MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))
_TURN_ORDERS = ("sequential", "simultaneous")
_ENCODINGS = ("rgb", "onehot")

# Render colours (RGB).
_FLOOR = (226, 205, 160)
_FLOOR_LINE = (206, 184, 138)
_WALL_FILL = (84, 86, 99)
_WALL_LINE = (62, 63, 74)
_GEM_FILL = (64, 196, 255)
_FOOD_FILL = (86, 176, 64)
_BONE_FILL = (246, 242, 226)
_AGENT_PALETTE = (
    (222, 60, 75),
    (52, 110, 220),
    (250, 160, 30),
    (150, 70, 200),
    (30, 170, 150),
    (230, 90, 190),
    (120, 120, 40),
    (40, 40, 40),
)


def _items(value: Any) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class TreasureHuntState(eqx.Module):
    """The state of one [`TreasureHunt`][eqxrl.envs.TreasureHunt] world.

    Cells hold entity codes: 0 empty, 1 wall, 2 gem, 3 bone, 4 food, 5 agent (the
    order of Sorrel's entity list, which is also the order of the one-hot channels).

    **Arguments:**

    - `grid`: int32 `[height, width]`, the code of every cell; walls line the border
      and every agent's cell holds 5.
    - `positions`: int32 `[num_agents, 2]`, each agent's `(row, column)`; row 0 is
      the top.
    - `frames`: int32 `[num_agents, num_frames, window, window]`, the codes each agent
      saw in its last `num_frames` turns, oldest first (`window = 2 * vision_radius
      + 1`, cells outside the map read as walls); frames from before `reset` are
      empty (code 0, which encodes to zeros).
    """

    grid: Int[Array, "height width"]
    positions: Int[Array, "num_agents 2"]
    frames: Int[Array, "num_agents num_frames window window"]


class TreasureHunt(AbstractMultiAgentEnvironment[TreasureHuntState]):
    """Sorrel's Treasure Hunt: agents roam a walled grid collecting items that
    spawn at random.

    A port of the `treasurehunt` example of
    [Sorrel](https://github.com/social-ai-uoft/sorrel) 1.6.0, with its settings as
    defaults: a 21x21 grid with walls on the border, 2 agents, an egocentric 5x5
    view in Sorrel's RGB encoding, the last 5 views stacked.
    `eqxrl.envs.make("TreasureHunt-v0")` adds Sorrel's 100 turns per epoch as a
    [`TimeLimit`][eqxrl.envs.TimeLimit] (truncation: nothing terminates), and
    `make("TreasureHunt-v0", preset="mp")` gives the settings of Sorrel's
    `treasurehunt_mp` (5 agents, 10x10, gems only, spawn probability 0.02, one-hot
    views, 50 turns). See [multi-agent environments][multi-agent].

    **A turn** (one `step`): every agent moves, then every empty cell spawns an item
    with probability `spawn_probability`, uniformly one of `items`. `reset` places
    the agents uniformly at random on distinct interior cells and runs the first
    turn's spawns, so an observation always shows the items the next moves can
    reach: Sorrel's turn (spawns, then the agents' moves) is the end of one `step`
    and the start of the next.

    **Actions** (one per agent, int32 `[num_agents]`): 0 up, 1 down, 2 left,
    3 right (Sorrel's order); there is no no-op and no action mask. Moving into a
    wall gives `wall_reward` (-1) and the agent stays; moving into another agent is
    blocked with reward 0; moving onto an item collects it (`gem_reward` 10,
    `food_reward` 5, `bone_reward` -10) and leaves the cell empty once the agent
    moves on.

    **Turn order.** `"sequential"` (Sorrel's): agents move one after another in
    index order, each against the world as the earlier ones left it, so an earlier
    agent wins a contested cell (the later one is blocked by it, reward 0), an
    agent can step into a cell an earlier agent just left, but not into the cell
    of a later agent that has not moved yet. `"simultaneous"`: every move is
    resolved against the world at the start of the turn: a cell occupied by an agent
    then is blocked for the whole turn (even if that agent leaves it; so swaps are
    blocked too), and when several agents move into the same free cell the lowest
    index gets it and the others are blocked (reward 0).

    **Observations** (float32 `[num_agents, num_frames, window, window,
    channels]`, `window = 2 * vision_radius + 1`): each agent's view of the cells
    around it (row offsets `-vision_radius ... vision_radius` top to bottom, then
    columns left to right, the agent in the centre), cells outside the map reading
    as walls. Agents see themselves and each other with the same appearance.
    `encoding="rgb"` has Sorrel's colours scaled by 1/255 (3 channels: empty black,
    wall `(255, 0, 0)`, gem `(203, 255, 0)`, bone `(0, 255, 102)`, food
    `(0, 102, 255)`, agent `(204, 0, 255)`); `encoding="onehot"` has Sorrel's 6
    channels in the order empty, wall, gem, bone, food, agent, the empty channel
    always 0. The last `num_frames` views are stacked, oldest first; at `reset` the
    earlier ones are zeros. Sorrel's model input is this array as
    `observation.transpose(0, 1, 4, 2, 3).reshape(num_agents, -1)` (375 values per
    agent with the defaults: 5 frames of 3 x 5 x 5).

    **Global state** (`timestep.extras["global_state"]`, float32 `[height, width,
    channels]`): the whole grid in the same encoding, for centralized critics and
    mixers ([`global_state_space`][eqxrl.envs.TreasureHunt.global_state_space]).

    **Where this port differs from Sorrel**, on purpose:

    - Sorrel's agent `i` takes its view after agents `0 .. i - 1` have moved in the
      same turn. Here all agents act on views taken at the start of the turn (one
      joint action per `step`); the moves are still resolved in order as above. For
      agent 0 the views are exactly Sorrel's.
    - Sorrel fills the stack at the start of an epoch from 4 replay-buffer slots it
      skips, which hold zeros until its 1,024-entry buffer first wraps and stale
      views after; here they are always zeros (its intent, and what
      `treasurehunt_mp` does by clearing the buffer).
    - `treasurehunt_mp`'s own one-hot list adds a channel for its floor layer (1 on
      every interior cell) and counts its border walls twice (2 in the wall channel
      inside the map, 1 outside); the `"mp"` preset keeps this environment's 6
      channels.

    **Arguments:**

    - `height`, `width`: grid size including the border walls (at least 3).
    - `num_agents`: how many agents (at least 1, at most the interior cells).
    - `spawn_probability`: per empty cell and turn, in `[0, 1]` (default 0.005).
    - `gem_reward`, `food_reward`, `bone_reward`: rewards for collecting each item
      (defaults 10, 5, -10).
    - `wall_reward`: reward for moving into a wall (default -1).
    - `items`: the kinds that spawn, a tuple of `"gem"`, `"food"`, `"bone"`
      (default all three, equally likely).
    - `turn_order`: `"sequential"` (default) or `"simultaneous"`.
    - `encoding`: `"rgb"` (default, Sorrel's shipped choice) or `"onehot"`.
    - `vision_radius`: cells seen in every direction (default 2: a 5x5 view).
    - `num_frames`: views stacked in an observation (default 5).

    The rewards and `spawn_probability` are float32 array fields, sweepable with
    `jax.vmap`; the rest sets shapes or control flow and is static.

    !!! example

        ```python
        env = eqxrl.envs.TreasureHunt()
        state, timestep = env.reset(jax.random.key(0))
        timestep.observation.shape  # (2, 5, 5, 5, 3)
        actions = jnp.array([0, 3], jnp.int32)  # agent 0 up, agent 1 right
        state, timestep = env.step(state, actions, jax.random.key(1))
        timestep.reward  # float32 [2]
        frame = env.render(state)  # uint8 [336, 336, 3]
        ```
    """

    height: int = eqx.field(static=True, default=21)
    width: int = eqx.field(static=True, default=21)
    num_agents: int = eqx.field(static=True, default=2)
    spawn_probability: Float[Array, ""] = eqx.field(
        default=0.005, converter=in_range("TreasureHunt: spawn_probability", 0.0, 1.0)
    )
    gem_reward: Float[Array, ""] = eqx.field(default=10.0, converter=float32)
    food_reward: Float[Array, ""] = eqx.field(default=5.0, converter=float32)
    bone_reward: Float[Array, ""] = eqx.field(default=-10.0, converter=float32)
    wall_reward: Float[Array, ""] = eqx.field(default=-1.0, converter=float32)
    items: tuple[str, ...] = eqx.field(
        static=True, default=("gem", "food", "bone"), converter=_items
    )
    turn_order: str = eqx.field(static=True, default="sequential")
    encoding: str = eqx.field(static=True, default="rgb")
    vision_radius: int = eqx.field(static=True, default=2)
    num_frames: int = eqx.field(static=True, default=5)

    def __check_init__(self):
        for name in ("height", "width"):
            value = getattr(self, name)
            if not _is_int(value) or value < 3:
                raise ValueError(
                    f"TreasureHunt: {name}={value!r} must be an int >= 3 (the border "
                    "walls take two rows and two columns)."
                )
        for name, low in (("num_agents", 1), ("vision_radius", 0), ("num_frames", 1)):
            value = getattr(self, name)
            if not _is_int(value) or value < low:
                raise ValueError(
                    f"TreasureHunt: {name}={value!r} must be an int >= {low}."
                )
        interior = (self.height - 2) * (self.width - 2)
        if self.num_agents > interior:
            raise ValueError(
                f"TreasureHunt: num_agents={self.num_agents} agents do not fit on the "
                f"{interior} interior cells of a {self.height}x{self.width} grid; "
                "use fewer agents or a larger grid."
            )
        if self.turn_order not in _TURN_ORDERS:
            raise ValueError(
                f"TreasureHunt: turn_order={self.turn_order!r} is not one of "
                f"{list(_TURN_ORDERS)}."
            )
        if self.encoding not in _ENCODINGS:
            raise ValueError(
                f"TreasureHunt: encoding={self.encoding!r} is not one of "
                f"{list(_ENCODINGS)}."
            )
        unknown = [item for item in self.items if item not in _ITEM_CODES]
        if not self.items or unknown or len(set(self.items)) != len(self.items):
            raise ValueError(
                f"TreasureHunt: items={self.items!r} must be a non-empty tuple of "
                f"distinct kinds among {list(_ITEM_CODES)}."
            )
        for name in ("gem_reward", "food_reward", "bone_reward", "wall_reward"):
            value = getattr(self, name)
            if value.shape != ():
                raise ValueError(
                    f"TreasureHunt: {name} must be a scalar, got shape {value.shape}; "
                    "to sweep over values, build TreasureHunt inside jax.vmap."
                )

    @property
    def window(self) -> int:
        """The side of an agent's view, `2 * vision_radius + 1`."""
        return 2 * self.vision_radius + 1

    @property
    def num_channels(self) -> int:
        """Channels per cell of an observation: 3 (RGB) or 6 (one-hot)."""
        return 3 if self.encoding == "rgb" else _NUM_KINDS

    @property
    def observation_space(self) -> Box:
        """One agent's observations: `[num_frames, window, window, num_channels]` in
        `[0, 1]`."""
        shape = (self.num_frames, self.window, self.window, self.num_channels)
        return Box(0.0, 1.0, shape=shape)

    @property
    def global_state_space(self) -> Box:
        """The whole grid, every cell in the observations' encoding:
        `[height, width, num_channels]` in `[0, 1]` (agents all read as the agent
        code; which one is where is in their observations). Every timestep carries it
        as `extras["global_state"]`, for centralized critics and mixers."""
        return Box(0.0, 1.0, shape=(self.height, self.width, self.num_channels))

    @property
    def action_space(self) -> Discrete:
        """One agent's actions: `Discrete(4)` (up, down, left, right)."""
        return Discrete(4)

    def reset(self, key: PRNGKeyArray) -> tuple[TreasureHuntState, TimeStep]:
        placement_key, spawn_key = split(key)
        inner_height, inner_width = self.height - 2, self.width - 2
        # Distinct uniform cells: the cells of the num_agents largest of one random
        # word per interior cell, largest first, so which agent gets which is
        # uniform too. A tie with one of them (probability about num_agents * cells
        # / 2**32) goes to the lower cell.
        bits = random_bits(placement_key, (inner_height * inner_width,))
        _, cells = lax.top_k(bits, self.num_agents)
        positions = jnp.stack(
            [cells // inner_width + 1, cells % inner_width + 1], axis=1
        ).astype(jnp.int32)
        grid = self._walls().at[positions[:, 0], positions[:, 1]].set(AGENT)
        grid = self._spawn(grid, spawn_key)
        window = self.window
        empty = jnp.full(
            (self.num_agents, self.num_frames, window, window), EMPTY, jnp.int32
        )
        state = TreasureHuntState(
            grid=grid,
            positions=positions,
            frames=self._push(empty, grid, positions),
        )
        reward = jnp.zeros(self.num_agents, jnp.float32)
        return state, self._timestep(state, reward)

    def step(
        self,
        state: TreasureHuntState,
        action: Int[ArrayLike, " num_agents"],
        key: PRNGKeyArray,
    ) -> tuple[TreasureHuntState, TimeStep]:
        action = jnp.asarray(
            check_action(self.action_space, action, "TreasureHunt.step")
        )
        if action.shape != (self.num_agents,):
            raise ValueError(
                f"TreasureHunt.step: action has shape {action.shape} but the "
                f"environment has {self.num_agents} agents: give one action per "
                f"agent, shape ({self.num_agents},)."
            )
        targets = state.positions + jnp.asarray(_MOVES, jnp.int32)[action]
        # Reward per entity code: what an agent gets for moving into that cell.
        zero = jnp.float32(0.0)
        values = jnp.stack(
            [
                zero,
                self.wall_reward,
                self.gem_reward,
                self.bone_reward,
                self.food_reward,
                zero,
            ]
        )
        if self.turn_order == "sequential":
            grid, positions, reward = self._sequential(state, targets, values)
        else:
            grid, positions, reward = self._simultaneous(state, targets, values)
        grid = self._spawn(grid, key)
        next_state = TreasureHuntState(
            grid=grid,
            positions=positions,
            frames=self._push(state.frames, grid, positions),
        )
        return next_state, self._timestep(next_state, reward)

    def _sequential(
        self,
        state: TreasureHuntState,
        targets: Int[Array, "num_agents 2"],
        values: Float[Array, " 6"],
    ) -> tuple[
        Int[Array, "height width"],
        Int[Array, "num_agents 2"],
        Float[Array, " num_agents"],
    ]:
        def move(grid, position_and_target):
            position, target = position_and_target
            code = grid[target[0], target[1]]
            blocked = (code == WALL) | (code == AGENT)
            new = jnp.where(blocked, position, target)
            grid = grid.at[position[0], position[1]].set(EMPTY)
            grid = grid.at[new[0], new[1]].set(AGENT)
            return grid, (new, values[code])

        grid, (positions, reward) = lax.scan(
            move, state.grid, (state.positions, targets), unroll=True
        )
        return grid, positions, reward

    def _simultaneous(
        self,
        state: TreasureHuntState,
        targets: Int[Array, "num_agents 2"],
        values: Float[Array, " 6"],
    ) -> tuple[
        Int[Array, "height width"],
        Int[Array, "num_agents 2"],
        Float[Array, " num_agents"],
    ]:
        code = state.grid[targets[:, 0], targets[:, 1]]
        free = (code != WALL) & (code != AGENT)
        same_target = jnp.all(targets[:, None, :] == targets[None, :, :], axis=-1)
        index = jnp.arange(self.num_agents)
        earlier = index[None, :] < index[:, None]  # [i, j]: agent j moves before i
        beaten = jnp.any(same_target & earlier & free[None, :], axis=1)
        moves = free & ~beaten
        positions = jnp.where(moves[:, None], targets, state.positions)
        reward = jnp.where(moves | (code == WALL), values[code], 0.0)
        old_rows, old_columns = state.positions[:, 0], state.positions[:, 1]
        grid = state.grid.at[old_rows, old_columns].set(jnp.where(moves, EMPTY, AGENT))
        grid = grid.at[positions[:, 0], positions[:, 1]].set(AGENT)
        return grid, positions, reward

    def _walls(self) -> Int[Array, "height width"]:
        grid = np.full((self.height, self.width), WALL, np.int32)
        grid[1:-1, 1:-1] = EMPTY
        return jnp.asarray(grid)

    def _spawn(
        self, grid: Int[Array, "height width"], key: PRNGKeyArray
    ) -> Int[Array, "height width"]:
        """Every empty cell becomes an item with probability `spawn_probability`,
        the kind uniform among `items`."""
        # One uniform per cell of the whole grid (walls are never empty): drawing
        # for the interior only and writing it back costs more under vmap than
        # the extra draws.
        u = uniform(key, grid.shape)
        probability = self.spawn_probability
        spawns = (grid == EMPTY) & (u < probability)
        codes = [_ITEM_CODES[item] for item in self.items]
        # The same draw gives the kind: given u < p, u / p is uniform on [0, 1).
        tiny = jnp.finfo(jnp.float32).tiny
        scaled = u * (len(codes) / jnp.maximum(probability, tiny))
        item = jnp.int32(codes[0])
        for index in range(1, len(codes)):
            item = jnp.where(scaled >= index, codes[index], item)
        return jnp.where(spawns, item, grid)

    def _views(
        self, grid: Int[Array, "height width"], positions: Int[Array, "num_agents 2"]
    ) -> Int[Array, "num_agents window window"]:
        """The codes around every agent, cells outside the map read as walls."""
        offsets = jnp.arange(-self.vision_radius, self.vision_radius + 1)[None, :]
        rows = positions[:, :1] + offsets  # [num_agents, window]
        columns = positions[:, 1:] + offsets
        row_inside = (rows >= 0) & (rows < self.height)
        column_inside = (columns >= 0) & (columns < self.width)
        rows = jnp.clip(rows, 0, self.height - 1)
        columns = jnp.clip(columns, 0, self.width - 1)
        codes = grid[rows[:, :, None], columns[:, None, :]]
        inside = row_inside[:, :, None] & column_inside[:, None, :]
        return jnp.where(inside, codes, WALL)

    def _push(
        self,
        frames: Int[Array, "num_agents num_frames window window"],
        grid: Int[Array, "height width"],
        positions: Int[Array, "num_agents 2"],
    ) -> Int[Array, "num_agents num_frames window window"]:
        views = self._views(grid, positions)[:, None]
        return jnp.concatenate([frames[:, 1:], views], axis=1)

    def _timestep(
        self, state: TreasureHuntState, reward: Float[Array, " num_agents"]
    ) -> TimeStep:
        false = jnp.bool_(False)
        return TimeStep(
            observation=self.observation(state),
            reward=reward,
            terminated=false,
            truncated=false,
            extras={GLOBAL_STATE: self._encoded(state.grid)},
        )

    def _encoded(self, codes: Int[Array, "*cells"]) -> Float[Array, "*cells channels"]:
        """Entity codes in the environment's `encoding`."""
        if self.encoding == "rgb":
            table = np.asarray(_RGB, np.float32) / 255.0
        else:
            table = np.eye(_NUM_KINDS, dtype=np.float32)
            table[EMPTY] = 0.0  # Sorrel encodes the empty cell as all zeros.
        return jnp.asarray(table)[codes]

    def observation(
        self, state: TreasureHuntState
    ) -> Float[Array, "num_agents num_frames window window channels"]:
        """The observations of a state (what `reset` and `step` return).

        **Arguments:**

        - `state`: a world state.

        **Returns:**

        float32 `[num_agents, num_frames, window, window, channels]`: every agent's
        last `num_frames` views, oldest first, in the environment's `encoding`.
        """
        return self._encoded(state.frames)

    def render(
        self, state: TreasureHuntState, cell_pixels: int = 16
    ) -> UInt8[Array, "image_height image_width 3"]:
        """Draw a state as an RGB image, in pure `jax.numpy`.

        Jit- and vmap-able: `jax.vmap(env.render)(states)` draws a batch of frames
        inside a compiled program. Sand floor, grey walls, a blue diamond for a gem,
        a green disc for food, a white bone for a bone, and each agent as a disc of
        its own colour (agent 0 red, 1 blue, 2 orange, 3 purple, 4 teal, ...,
        repeating after 8).

        **Arguments:**

        - `state`: a world state.
        - `cell_pixels`: the side of one cell in pixels (a Python int, at least 4).

        **Returns:**

        uint8 `[height * cell_pixels, width * cell_pixels, 3]`. Write a sequence of
        frames to a file with [`save_gif`][eqxrl.envs.save_gif].
        """
        if not _is_int(cell_pixels) or cell_pixels < 4:
            raise ValueError(
                f"TreasureHunt.render: cell_pixels={cell_pixels!r} must be an int >= 4."
            )
        height, width, size = self.height, self.width, cell_pixels
        margin = max(1, size // 8)

        def rgb(colour):
            return jnp.asarray(colour, jnp.float32).reshape(1, 1, 3)

        def upsample(grid: Array) -> Array:
            return jnp.repeat(jnp.repeat(grid, size, axis=0), size, axis=1)

        def tile(mask: np.ndarray) -> Array:
            return jnp.tile(jnp.asarray(mask), (height, width))

        # Shapes within one cell, as NumPy constants.
        offset = np.arange(size, dtype=np.float32) - (size - 1) / 2
        dy, dx = offset[:, None], offset[None, :]
        radius = size / 2 - margin
        pixel = np.arange(size)
        inside = (pixel >= margin) & (pixel < size - margin)
        inner_square = inside[:, None] & inside[None, :]
        disc = dy**2 + dx**2 <= radius**2
        diamond = np.abs(dy) + np.abs(dx) <= radius
        food = dy**2 + dx**2 <= (0.75 * radius) ** 2
        knob = max(1.0, size / 7)
        bone = (np.abs(dy) <= max(0.5, size / 12)) & (np.abs(dx) <= 0.6 * radius)
        for side in (-1.0, 1.0):
            for lift in (-1.0, 1.0):
                bone = bone | (
                    (dx - side * 0.6 * radius) ** 2 + (dy - lift * knob * 0.6) ** 2
                    <= knob**2
                )

        code = upsample(state.grid)
        owner = jnp.full((height, width), -1, jnp.int32)
        owner = owner.at[state.positions[:, 0], state.positions[:, 1]].set(
            jnp.arange(self.num_agents, dtype=jnp.int32)
        )
        palette = jnp.asarray(_AGENT_PALETTE, jnp.float32)
        agent_colour = upsample(palette[jnp.maximum(owner, 0) % len(_AGENT_PALETTE)])

        image = jnp.where(tile(inner_square)[..., None], rgb(_FLOOR), rgb(_FLOOR_LINE))
        is_wall = code == WALL
        wall = jnp.where(
            tile(inner_square)[..., None], rgb(_WALL_FILL), rgb(_WALL_LINE)
        )
        image = jnp.where(is_wall[..., None], wall, image)
        for kind, mask, colour in (
            (GEM, diamond, _GEM_FILL),
            (FOOD, food, _FOOD_FILL),
            (BONE, bone, _BONE_FILL),
        ):
            drawn = (code == kind) & tile(mask)
            image = jnp.where(drawn[..., None], rgb(colour), image)
        drawn = (code == AGENT) & tile(disc)
        image = jnp.where(drawn[..., None], agent_colour, image)
        return jnp.round(image).astype(jnp.uint8)


# The settings of Sorrel's examples: keyword arguments of TreasureHunt and the turns
# per epoch (the TimeLimit `make` adds).
_PRESETS: dict[str, tuple[dict[str, Any], int]] = {
    # sorrel/examples/treasurehunt (Sorrel 1.6.0).
    "default": ({}, 100),
    # sorrel/examples/treasurehunt_mp (repository history, not in the 1.6.0 wheel).
    "mp": (
        {
            "num_agents": 5,
            "height": 10,
            "width": 10,
            "items": ("gem",),
            "spawn_probability": 0.02,
            "encoding": "onehot",
        },
        50,
    ),
}


def treasure_hunt_preset(preset: str) -> tuple[dict[str, Any], int]:
    """The keyword arguments and turns per episode of a named preset."""
    try:
        kwargs, turns = _PRESETS[preset]
    except (KeyError, TypeError):
        raise ValueError(
            f"TreasureHunt-v0: unknown preset {preset!r}; valid presets are "
            f"{sorted(_PRESETS)}."
        ) from None
    return dict(kwargs), turns
