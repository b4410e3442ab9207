"""Parity of eqxrl's TreasureHunt with Sorrel 1.6.0's `treasurehunt` example, turn
by turn.

Sorrel needs Python >= 3.12 and PyTorch: `.venv-sorrel` (README: "Parity with
Sorrel"). Per configuration, Sorrel's own world and eqxrl's `TreasureHunt` play the
same random actions, Sorrel replaying eqxrl's placements and spawns; every turn the
worlds, views, model inputs, observations and rewards are compared, reporting the
first difference by episode, turn, agent and cell. `--spawn-samples` also compares
the spawn distribution. (`eqxrl.envs.check_parity` compares per field, and its
reference steps as a `step(action)` environment: Sorrel's turn does not.)

    .venv-sorrel/bin/python benchmarks/sorrel_parity.py
"""

import collections
import math
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import torch
from _harness import command_line, timed

import eqxrl

try:
    from sorrel.examples.treasurehunt import entities as sorrel_entities
    from sorrel.examples.treasurehunt.env import TreasurehuntEnv
    from sorrel.examples.treasurehunt.world import TreasurehuntWorld
except ImportError:
    sys.exit(
        "sorrel_parity.py needs sorrel 1.6.0 (Python >= 3.12): see "
        "benchmarks/README.md for its venv."
    )

# Sorrel's models share memory between processes only in its multiprocessing mode,
# which hangs on CPU without this; harmless here (one process).
torch.multiprocessing.set_sharing_strategy("file_system")

# eqxrl's cell codes (`TreasureHuntState.grid`), by Sorrel's entity kind.
CODES = {
    "EmptyEntity": 0,
    "Wall": 1,
    "Gem": 2,
    "Bone": 3,
    "Food": 4,
    "TreasurehuntAgent": 5,
}
KINDS = {code: kind for kind, code in CODES.items()}
ITEMS = (2, 3, 4)
TOP = 1  # Sorrel's layer of walls, items and agents (layer 0 is sand)

# name: (eqxrl.envs.TreasureHunt keyword arguments, Sorrel's observation spec).
CONFIGS = {
    # Sorrel's shipped example: 21 x 21, 2 agents, p = 0.005, RGB.
    "default": ({}, "rgb"),
    "default-onehot": ({"encoding": "onehot"}, "onehot"),
    # Crowded: agents block each other, items spawn and are collected often.
    "crowded": (
        {"height": 7, "width": 7, "num_agents": 5, "spawn_probability": 0.1},
        "rgb",
    ),
    "crowded-onehot": (
        {
            "height": 7,
            "width": 7,
            "num_agents": 5,
            "spawn_probability": 0.1,
            "encoding": "onehot",
        },
        "onehot",
    ),
}


class Mismatch(Exception):
    """The first difference between the two worlds, described precisely."""


class ReplayedRandom:
    """Stands in for `numpy.random` in Sorrel's treasurehunt entities: the spawn
    draws give eqxrl's outcome for the cell being processed."""

    def __init__(self):
        self.cell = None  # (row, column) whose transition is drawing
        self.spawns = None  # {(row, column): code}, or None: Sorrel's own draws
        self.cells_drawn = []

    def random(self):
        if self.spawns is None:
            return np.random.random()
        self.cells_drawn.append(self.cell)
        return 0.0 if self.cell in self.spawns else 1.0

    def choice(self, options):
        if self.spawns is None:
            return np.random.choice(options)
        kind = KINDS[self.spawns[self.cell]]
        return next(option for option in options if option.kind == kind)


class ReplayedNumpy:
    """The `np` that Sorrel's treasurehunt entities module sees: NumPy, with
    `random` replaced."""

    def __init__(self, random):
        self.random = random

    def __getattr__(self, name):
        return getattr(np, name)


REPLAY = ReplayedRandom()
sorrel_entities.np = ReplayedNumpy(REPLAY)
_sorrel_transition = sorrel_entities.EmptyEntity.transition


def _transition(entity, world):
    REPLAY.cell = tuple(int(x) for x in entity.location[:2])
    _sorrel_transition(entity, world)


sorrel_entities.EmptyEntity.transition = _transition


def sorrel_env(kwargs: dict, encoding: str) -> TreasurehuntEnv:
    """Sorrel's treasurehunt, configured as its `main.py` with eqxrl's settings."""
    defaults = eqxrl.envs.TreasureHunt()
    config = {
        "experiment": {"epochs": 1, "max_turns": 100, "record_period": 50},
        "model": {
            "agent_vision_radius": kwargs.get("vision_radius", 2),
            "observation_spec": encoding,
            "num_agents": kwargs.get("num_agents", defaults.num_agents),
        },
        "world": {
            "height": kwargs.get("height", defaults.height),
            "width": kwargs.get("width", defaults.width),
            "gem_value": 10,
            "food_value": 5,
            "bone_value": -10,
            "spawn_prob": kwargs.get("spawn_probability", 0.005),
        },
    }
    world = TreasurehuntWorld(
        config=config, default_entity=sorrel_entities.EmptyEntity()
    )
    return TreasurehuntEnv(world, config)


def sorrel_grid(env: TreasurehuntEnv) -> np.ndarray:
    """Sorrel's top layer as eqxrl's cell codes."""
    top = env.world.map[:, :, TOP]
    return np.vectorize(lambda entity: CODES[entity.kind], otypes=[np.int32])(top)


def where(grid: np.ndarray, row: int, column: int) -> str:
    """A 5 x 5 excerpt of a grid of codes around a cell, for reports."""
    rows = slice(max(row - 2, 0), row + 3)
    columns = slice(max(column - 2, 0), column + 3)
    return "\n".join("    " + " ".join(map(str, line)) for line in grid[rows, columns])


def compare_grids(what: str, eqxrl_grid, sorrel: np.ndarray, turn: str) -> None:
    eqxrl_grid = np.asarray(eqxrl_grid)
    if not np.array_equal(eqxrl_grid, sorrel):
        row, column = np.argwhere(eqxrl_grid != sorrel)[0]
        raise Mismatch(
            f"{turn}: {what} differs first at cell ({row}, {column}): eqxrl "
            f"{KINDS[int(eqxrl_grid[row, column])]}, Sorrel "
            f"{KINDS[int(sorrel[row, column])]} "
            f"({int((eqxrl_grid != sorrel).sum())} cells differ).\n  eqxrl around "
            f"it:\n{where(eqxrl_grid, row, column)}\n  Sorrel around it:\n"
            f"{where(sorrel, row, column)}"
        )


def compare_views(
    what: str, eqxrl_view: np.ndarray, sorrel_view: np.ndarray, shape, turn: str
) -> float:
    """Compare flat observations laid out as `shape` (Sorrel's channel-first order);
    return the largest difference."""
    eqxrl_view = np.asarray(eqxrl_view, np.float64).reshape(-1)
    sorrel_view = np.asarray(sorrel_view, np.float64).reshape(-1)
    if eqxrl_view.shape != sorrel_view.shape:
        raise Mismatch(
            f"{turn}: {what} has {eqxrl_view.size} values in eqxrl, "
            f"{sorrel_view.size} in Sorrel."
        )
    difference = np.abs(eqxrl_view - sorrel_view)
    if np.any(difference > 1e-6):
        index = int(np.argmax(difference > 1e-6))
        position = np.unravel_index(index, shape)
        names = ("frame", "channel", "row", "column")[-len(shape) :]
        at = ", ".join(f"{name} {int(p)}" for name, p in zip(names, position))
        raise Mismatch(
            f"{turn}: {what} differs first at {at}: eqxrl {eqxrl_view[index]:.6g}, "
            f"Sorrel {sorrel_view[index]:.6g} ({int((difference > 1e-6).sum())} "
            "values differ)."
        )
    return float(difference.max(initial=0.0))


def channels_first(frames) -> np.ndarray:
    """eqxrl's `[..., window, window, channels]` in Sorrel's `[..., channels,
    window, window]` layout."""
    frames = np.asarray(frames)
    return np.moveaxis(frames, -1, -3)


def run_config(name: str, episodes: int, turns: int, seed: int) -> dict:
    kwargs, encoding = CONFIGS[name]
    env = eqxrl.envs.TreasureHunt(**kwargs)
    reset = eqx.filter_jit(lambda env, key: env.reset(key))
    step = eqx.filter_jit(lambda env, state, action, key: env.step(state, action, key))
    np.random.seed(seed)  # Sorrel's own placements (then overwritten) and models
    torch.manual_seed(seed)
    sorrel = sorrel_env(kwargs, encoding)
    agents = sorrel.agents
    num_agents, num_frames = env.num_agents, env.num_frames
    frame_shape = (env.num_channels, env.window, env.window)
    rng = np.random.default_rng(seed)
    key = jr.key(seed)
    largest = collections.defaultdict(float)
    counts = collections.Counter()

    # Hooks into each Sorrel agent: its model returns the scripted action and keeps
    # the input it was given; its `act` keeps the reward.
    scripted = {}
    inputs = {}
    rewards = {}
    start_of_turn = []  # callbacks run when agent 0 is about to act

    def hook(index, agent):
        act = agent.act

        def take_action(model_input):
            if index == 0:
                for check in start_of_turn:
                    check()
            inputs[index] = np.asarray(model_input)
            return scripted[index]

        def recorded_act(world, action):
            rewards[index] = act(world, action)
            return rewards[index]

        agent.model.take_action = take_action
        agent.act = recorded_act

    for index, agent in enumerate(agents):
        hook(index, agent)

    for episode in range(episodes):
        # Sorrel's epoch start (`run_experiment`), then eqxrl's placements.
        sorrel.reset()
        for agent in agents:
            agent.model.start_epoch_action(epoch=episode)
        key, reset_key = jr.split(key)
        state, timestep = reset(env, reset_key)
        positions = np.asarray(state.positions)
        for agent in agents:
            sorrel.world.remove(agent.location)
        for agent, (row, column) in zip(agents, positions):
            sorrel.world.add((int(row), int(column), TOP), agent)
        # Before the first turn's spawns: walls and agents.
        previous_grid = np.asarray(state.grid)
        previous_grid = np.where(np.isin(previous_grid, ITEMS), 0, previous_grid)
        views = [collections.deque(maxlen=num_frames) for _ in range(num_agents)]

        for turn in range(1, turns + 1):
            at = f"episode {episode}, turn {turn}"
            grid = np.asarray(state.grid)
            # The items eqxrl spawned for this turn: item cells that held no item
            # before (an item stays until collected, and then an agent stands there).
            spawned = np.isin(grid, ITEMS) & ~np.isin(previous_grid, ITEMS)
            REPLAY.spawns = {
                (int(r), int(c)): int(grid[r, c]) for r, c in np.argwhere(spawned)
            }
            REPLAY.cells_drawn = []
            empty_before_spawns = int(((grid == 0) | spawned).sum())
            actions = rng.integers(0, 4, num_agents).astype(np.int32)
            scripted.update(enumerate(int(a) for a in actions))
            inputs.clear()
            rewards.clear()
            observation = np.asarray(timestep.observation)

            def check_start_of_turn(state=state, at=at, observation=observation):
                # Sorrel's world after its spawns, before any agent moves.
                if len(REPLAY.cells_drawn) != empty_before_spawns:
                    raise Mismatch(
                        f"{at}: Sorrel drew spawns for {len(REPLAY.cells_drawn)} "
                        f"cells, eqxrl's grid had {empty_before_spawns} empty cells."
                    )
                compare_grids(
                    "the world after the spawns", state.grid, sorrel_grid(sorrel), at
                )
                sorrel_positions = np.array([agent.location[:2] for agent in agents])
                eqxrl_positions = np.asarray(state.positions)
                if not np.array_equal(eqxrl_positions, sorrel_positions):
                    raise Mismatch(
                        f"{at}: positions eqxrl {eqxrl_positions.tolist()}, "
                        f"Sorrel {sorrel_positions.tolist()}."
                    )
                for i, agent in enumerate(agents):
                    view = agent.pov(sorrel.world)  # Sorrel's encoding, flat
                    largest["current view"] = max(
                        largest["current view"],
                        compare_views(
                            f"agent {i}'s current view",
                            channels_first(observation[i, -1]),
                            view,
                            frame_shape,
                            at,
                        ),
                    )
                    views[i].append(view.reshape(frame_shape))
                counts["start of turn"] += 1

            start_of_turn[:] = [check_start_of_turn]
            sorrel.take_turn()
            if counts["start of turn"] != (episode * turns) + turn:
                raise Mismatch(f"{at}: Sorrel's agent 0 did not act.")

            # Observations: agent 0's model input is exactly eqxrl's; the others'
            # against the stack of their start-of-turn views.
            stacked_shape = (num_frames, *frame_shape)
            largest["agent 0 model input"] = max(
                largest["agent 0 model input"],
                compare_views(
                    "agent 0's model input (stacked frames)",
                    channels_first(observation[0]),
                    inputs[0],
                    stacked_shape,
                    at,
                ),
            )
            for i in range(num_agents):
                stack = np.zeros(stacked_shape)
                stack[num_frames - len(views[i]) :] = np.stack(views[i])
                largest["stacked views"] = max(
                    largest["stacked views"],
                    compare_views(
                        f"agent {i}'s stacked observation",
                        channels_first(observation[i]),
                        stack,
                        stacked_shape,
                        at,
                    ),
                )
                if i > 0:
                    counts["later agents' inputs"] += 1
                    ported = channels_first(observation[i]).reshape(-1)
                    if not np.allclose(ported, inputs[i].reshape(-1), atol=1e-6):
                        counts["later agents' inputs after earlier moves"] += 1

            key, step_key = jr.split(key)
            previous_grid = grid
            state, timestep = step(env, state, jnp.asarray(actions), step_key)
            reward = np.asarray(timestep.reward)
            sorrel_reward = np.array([rewards[i] for i in range(num_agents)])
            if not np.array_equal(reward, sorrel_reward):
                i = int(np.argmax(reward != sorrel_reward))
                raise Mismatch(
                    f"{at}: agent {i}'s reward (action {actions[i]}) eqxrl "
                    f"{reward[i]:g}, Sorrel {sorrel_reward[i]:g}; all eqxrl "
                    f"{reward.tolist()}, Sorrel {sorrel_reward.tolist()}."
                )
            counts["rewards"] += num_agents
            counts["nonzero rewards"] += int((reward != 0).sum())
            counts["wall bumps"] += int((reward == -1).sum())
            counts["items collected"] += int((np.abs(reward) >= 5).sum())
            # The world after the moves: eqxrl's next grid before its spawns.
            grid = np.asarray(state.grid)
            new_items = np.isin(grid, ITEMS) & ~np.isin(previous_grid, ITEMS)
            compare_grids(
                "the world after the moves",
                np.where(new_items, 0, grid),
                sorrel_grid(sorrel),
                at,
            )
            sorrel_positions = np.array([agent.location[:2] for agent in agents])
            if not np.array_equal(np.asarray(state.positions), sorrel_positions):
                i = int(
                    np.argmax(
                        np.any(np.asarray(state.positions) != sorrel_positions, -1)
                    )
                )
                raise Mismatch(
                    f"{at}: agent {i} (action {actions[i]}) is at "
                    f"{np.asarray(state.positions)[i].tolist()} in eqxrl, "
                    f"{sorrel_positions[i].tolist()} in Sorrel."
                )
            counts["turns"] += 1
            counts["blocked by agents"] += int(
                np.sum(
                    np.all(np.asarray(state.positions) == positions, -1) & (reward == 0)
                )
            )
            positions = np.asarray(state.positions)
            counts["spawns"] += len(REPLAY.spawns)
    REPLAY.spawns = None
    return {"largest": dict(largest), "counts": counts}


def spawn_distribution(samples: int, probability: float, seed: int) -> None:
    """Sorrel's own spawn draws against eqxrl's: the spawn rate per empty cell and
    the share of each kind, on a 21 x 21 world after one turn's spawns."""
    REPLAY.spawns = None
    np.random.seed(seed)
    kwargs = {"spawn_probability": probability}
    sorrel = sorrel_env(kwargs, "rgb")
    env = eqxrl.envs.TreasureHunt(**kwargs)
    counts = {"eqxrl": collections.Counter(), "Sorrel": collections.Counter()}
    seen = []

    for agent in sorrel.agents:
        agent.model.take_action = lambda model_input: 0
    original = sorrel.agents[0].model.take_action

    def snapshot(model_input):
        seen.append(sorrel_grid(sorrel))
        return original(model_input)

    sorrel.agents[0].model.take_action = snapshot
    for _ in range(samples):
        sorrel.reset()
        sorrel.take_turn()
    grids = {
        "Sorrel": np.stack(seen),
        "eqxrl": np.asarray(
            jax.vmap(lambda key: env.reset(key)[0].grid)(
                jr.split(jr.key(seed), samples)
            )
        ),
    }
    print(f"\nspawn distribution, p = {probability}, {samples} worlds of 21 x 21:")
    rates = {}
    for side, grid in grids.items():
        interior = grid[:, 1:-1, 1:-1]
        items = np.isin(interior, ITEMS)
        empty = int(((interior == 0) | items).sum())
        rates[side] = items.sum() / empty
        counts[side].update({KINDS[c]: int((interior == c).sum()) for c in ITEMS})
        shares = ", ".join(
            f"{kind} {counts[side][kind] / max(items.sum(), 1):.3f}"
            for kind in ("Gem", "Food", "Bone")
        )
        print(
            f"  {side:<6} {int(items.sum()):6,} spawns on {empty:,} empty cells: "
            f"rate {rates[side]:.5f}; {shares}"
        )
    error = math.sqrt(probability * (1 - probability) / empty)
    z = (rates["eqxrl"] - rates["Sorrel"]) / (error * math.sqrt(2))
    print(f"  rate difference: {z:+.2f} standard errors")
    if abs(z) > 5:
        raise Mismatch(f"the spawn rates differ by {z:.1f} standard errors.")


def main() -> None:
    args = command_line(
        __doc__,
        configs=tuple(CONFIGS),
        episodes=3,
        turns=100,
        spawn_samples=300,
        seed=0,
    ).parse_args()
    total = 0
    try:
        for name in args.configs:
            seconds, result = timed(
                run_config, name, args.episodes, args.turns, args.seed
            )
            counts = result["counts"]
            total += counts["turns"]
            kwargs, encoding = CONFIGS[name]
            env = eqxrl.envs.TreasureHunt(**kwargs)
            fields = {
                name: eqxrl.envs.FieldParity(largest_difference=value)
                for name, value in result["largest"].items()
            }
            report = eqxrl.envs.ParityReport(
                fields=fields, episodes=args.episodes, steps=counts["turns"]
            )
            print(
                f"\n{name}: {env.height}x{env.width}, {env.num_agents} agents, "
                f"{encoding}, spawn probability {float(env.spawn_probability):g} "
                f"({seconds:.1f} s)"
            )
            print(report)
            print(
                f"  equal on every turn: world after spawns and after moves, "
                f"positions, {counts['rewards']} rewards ({counts['nonzero rewards']} "
                f"nonzero: {counts['wall bumps']} wall bumps, "
                f"{counts['items collected']} items collected), {counts['spawns']} "
                f"replayed spawns, {counts['blocked by agents']} moves blocked by "
                "agents"
            )
            moved = counts["later agents' inputs after earlier moves"]
            later = counts["later agents' inputs"]
            print(
                f"  Sorrel's inputs of agents 1.. that differ because earlier agents "
                f"moved first: {moved} of {later} (the documented difference)"
            )
        if args.spawn_samples:
            spawn_distribution(args.spawn_samples, 0.05, args.seed)
    except Mismatch as mismatch:
        print(f"\nMISMATCH: {mismatch}")
        sys.exit(1)
    print(f"\nparity: {total} turns compared, every check equal")


if __name__ == "__main__":
    main()
