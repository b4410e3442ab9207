"""Environments: the core types, wrappers, spaces, the built-in environments and
adapters to and from gymnax and gymnasium."""

from .._filters import any_in_vmapped_batch as any_in_vmapped_batch
from ._brax import (
    FromBrax as FromBrax,
    ToBrax as ToBrax,
    ToBraxState as ToBraxState,
    from_brax as from_brax,
    to_brax as to_brax,
)
from ._cartpole import CartPole as CartPole, CartPoleState as CartPoleState
from ._checks import (
    check_action as check_action,
    check_environment as check_environment,
    skip_action_checks as skip_action_checks,
)
from ._environment import (
    AbstractEnvironment as AbstractEnvironment,
    AbstractMultiAgentEnvironment as AbstractMultiAgentEnvironment,
    AbstractWrapper as AbstractWrapper,
    num_agents_of as num_agents_of,
    unwrap as unwrap,
)
from ._grid_maze import GridMaze as GridMaze, GridMazeState as GridMazeState
from ._gymnasium import (
    FromGymnasium as FromGymnasium,
    FromGymnasiumState as FromGymnasiumState,
    from_gymnasium as from_gymnasium,
    to_gymnasium as to_gymnasium,
)
from ._gymnax import (
    FromGymnax as FromGymnax,
    GymnaxParams as GymnaxParams,
    ToGymnax as ToGymnax,
    from_gymnax as from_gymnax,
    to_gymnax as to_gymnax,
)
from ._jaxmarl import (
    FromJaxMARL as FromJaxMARL,
    FromJaxMARLState as FromJaxMARLState,
    from_jaxmarl as from_jaxmarl,
)
from ._jumanji import FromJumanji as FromJumanji, from_jumanji as from_jumanji
from ._parity import (
    FieldParity as FieldParity,
    ParityReport as ParityReport,
    check_parity as check_parity,
)
from ._pendulum import Pendulum as Pendulum, PendulumState as PendulumState
from ._registry import (
    make as make,
    register as register,
    registered_names as registered_names,
)
from ._render import save_gif as save_gif
from ._snake import Snake as Snake, SnakeState as SnakeState
from ._spaces import (
    AbstractSpace as AbstractSpace,
    Box as Box,
    Dict as Dict,
    Discrete as Discrete,
    Tuple as Tuple,
    is_leaf_space as is_leaf_space,
)
from ._treasure_hunt import (
    TreasureHunt as TreasureHunt,
    TreasureHuntState as TreasureHuntState,
)
from ._types import TimeStep as TimeStep
from ._wrappers import (
    AutoReset as AutoReset,
    ClipAction as ClipAction,
    EpisodeStatistics as EpisodeStatistics,
    EpisodeStatisticsState as EpisodeStatisticsState,
    RescaleAction as RescaleAction,
    TimeLimit as TimeLimit,
    TimeLimitState as TimeLimitState,
)
