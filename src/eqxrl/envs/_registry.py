from collections.abc import Callable

from ._environment import AbstractEnvironment
from ._wrappers import HideObservation, TimeLimit
from .builtin._cartpole import CartPole
from .builtin._grid_maze import GridMaze
from .builtin._pendulum import Pendulum
from .builtin._snake import Snake
from .builtin._treasure_hunt import TreasureHunt, treasure_hunt_preset

_REGISTRY: dict[str, Callable[..., AbstractEnvironment]] = {}


def register(name: str, factory: Callable[..., AbstractEnvironment]) -> None:
    """Make `make(name)` build an environment with `factory(**kwargs)`.

    **Arguments:**

    - `name`: the environment's id, e.g. `"MyEnv-v0"`; must not be taken already.
    - `factory`: a callable returning an
      [`AbstractEnvironment`][eqxrl.envs.AbstractEnvironment].
    """
    if name in _REGISTRY:
        raise ValueError(f"An environment named {name!r} is registered already.")
    _REGISTRY[name] = factory


def registered_names() -> list[str]:
    """The ids that [`make`][eqxrl.envs.make] accepts, sorted."""
    return sorted(_REGISTRY)


def make(name: str, **kwargs) -> AbstractEnvironment:
    """Build a registered environment by id, with its standard wrappers.

    **Arguments:**

    - `name`: the environment id, e.g. `"CartPole-v1"`.
    - `**kwargs`: passed to the environment's factory (e.g. physics constants).

    **Returns:**

    The environment: `"CartPole-v1"` is `TimeLimit(CartPole(), 500)` and
    `"Pendulum-v1"` is `TimeLimit(Pendulum(), 200)`, like gymnasium;
    `"GridMaze-v0"` is `TimeLimit(GridMaze(), 50)`; `"Snake-v0"` is `Snake()`
    (10x10 by default, with its own step limits); `"TreasureHunt-v0"` is
    `TimeLimit(TreasureHunt(), 100)`, Sorrel's `treasurehunt`, and with
    `preset="mp"` Sorrel's `treasurehunt_mp` settings: 5 agents on 10x10, gems only,
    spawn probability 0.02, one-hot views, `TimeLimit` 50 (other keyword arguments
    override the preset's; `max_episode_steps` the limit).
    `"StatelessCartPole-v1"` is `"CartPole-v1"` observing only the cart position
    and the pole angle (float32 `[x, theta]`, popgym's name), a task that needs
    memory: `TimeLimit(HideObservation(CartPole(), hidden=(1, 3)), 500)`.

    !!! example

        ```python
        env = eqxrl.envs.make("CartPole-v1")
        state, timestep = env.reset(jax.random.key(0))
        ```
    """
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"Unknown environment {name!r}; registered: {registered_names()}."
        ) from None
    return factory(**kwargs)


def _cartpole_v1(max_episode_steps: int = 500, **kwargs) -> AbstractEnvironment:
    return TimeLimit(CartPole(**kwargs), max_episode_steps)


def _pendulum_v1(max_episode_steps: int = 200, **kwargs) -> AbstractEnvironment:
    return TimeLimit(Pendulum(**kwargs), max_episode_steps)


def _grid_maze_v0(max_episode_steps: int = 50, **kwargs) -> AbstractEnvironment:
    return TimeLimit(GridMaze(**kwargs), max_episode_steps)


def _stateless_cartpole_v1(
    max_episode_steps: int = 500, **kwargs
) -> AbstractEnvironment:
    # The velocities (entries 1 and 3) are hidden: a policy must infer them from
    # the positions it saw before.
    return TimeLimit(
        HideObservation(CartPole(**kwargs), hidden=(1, 3)), max_episode_steps
    )


def _snake_v0(**kwargs) -> AbstractEnvironment:
    return Snake(**kwargs)


def _treasure_hunt_v0(
    preset: str = "default", max_episode_steps: int | None = None, **kwargs
) -> AbstractEnvironment:
    settings, turns = treasure_hunt_preset(preset)
    settings.update(kwargs)
    limit = turns if max_episode_steps is None else max_episode_steps
    return TimeLimit(TreasureHunt(**settings), limit)


register("CartPole-v1", _cartpole_v1)
register("StatelessCartPole-v1", _stateless_cartpole_v1)
register("Pendulum-v1", _pendulum_v1)
register("GridMaze-v0", _grid_maze_v0)
register("Snake-v0", _snake_v0)
register("TreasureHunt-v0", _treasure_hunt_v0)
