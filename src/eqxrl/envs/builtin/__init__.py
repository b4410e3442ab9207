"""The built-in environments, written in JAX: CartPole, Pendulum, Snake, GridMaze and
TreasureHunt. Re-exported by `eqxrl.envs` under the same names."""

from ._cartpole import CartPole as CartPole, CartPoleState as CartPoleState
from ._grid_maze import GridMaze as GridMaze, GridMazeState as GridMazeState
from ._pendulum import Pendulum as Pendulum, PendulumState as PendulumState
from ._snake import Snake as Snake, SnakeState as SnakeState
from ._treasure_hunt import (
    TreasureHunt as TreasureHunt,
    TreasureHuntState as TreasureHuntState,
)
