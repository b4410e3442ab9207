"""Environments: the core types, wrappers, spaces and checks, the built-in
environments, and the bridges to other libraries.

The layout shows which is which: the core (types, spaces, wrappers, checks, the
registry, rendering) in this folder; the built-in environments in `builtin/`; the
bridges to and from gymnax, gymnasium, Brax, Jumanji and JaxMARL, and the parity
checker, in `interop/`. Every public name is re-exported here."""

from .._filters import any_in_vmapped_batch as any_in_vmapped_batch
from ._checks import (
    check_action as check_action,
    check_environment as check_environment,
    skip_action_checks as skip_action_checks,
)
from ._curriculum import (
    Curriculum as Curriculum,
    CurriculumProgress as CurriculumProgress,
    CurriculumState as CurriculumState,
    survived as survived,
)
from ._environment import (
    ENV_METRICS as ENV_METRICS,
    FINAL_GLOBAL_STATE as FINAL_GLOBAL_STATE,
    GLOBAL_STATE as GLOBAL_STATE,
    AbstractEnvironment as AbstractEnvironment,
    AbstractMultiAgentEnvironment as AbstractMultiAgentEnvironment,
    AbstractWrapper as AbstractWrapper,
    global_state_space_of as global_state_space_of,
    num_agents_of as num_agents_of,
    unwrap as unwrap,
)
from ._randomization import (
    DomainRandomization as DomainRandomization,
    DomainRandomizationState as DomainRandomizationState,
)
from ._registry import (
    make as make,
    register as register,
    registered_names as registered_names,
)
from ._render import save_gif as save_gif
from ._spaces import (
    AbstractSpace as AbstractSpace,
    Box as Box,
    Dict as Dict,
    Discrete as Discrete,
    Tuple as Tuple,
    is_leaf_space as is_leaf_space,
)
from ._types import TimeStep as TimeStep
from ._wrappers import (
    AutoReset as AutoReset,
    ClipAction as ClipAction,
    EpisodeStatistics as EpisodeStatistics,
    EpisodeStatisticsState as EpisodeStatisticsState,
    HideObservation as HideObservation,
    RescaleAction as RescaleAction,
    TimeLimit as TimeLimit,
    TimeLimitState as TimeLimitState,
)
from .builtin import (
    CartPole as CartPole,
    CartPoleState as CartPoleState,
    GridMaze as GridMaze,
    GridMazeState as GridMazeState,
    Pendulum as Pendulum,
    PendulumState as PendulumState,
    Snake as Snake,
    SnakeState as SnakeState,
    TreasureHunt as TreasureHunt,
    TreasureHuntState as TreasureHuntState,
)
from .interop import (
    FieldParity as FieldParity,
    FromBrax as FromBrax,
    FromGymnasium as FromGymnasium,
    FromGymnasiumState as FromGymnasiumState,
    FromGymnax as FromGymnax,
    FromJaxMARL as FromJaxMARL,
    FromJaxMARLState as FromJaxMARLState,
    FromJumanji as FromJumanji,
    GymnaxParams as GymnaxParams,
    ParityReport as ParityReport,
    ToBrax as ToBrax,
    ToBraxState as ToBraxState,
    ToGymnax as ToGymnax,
    brax_randomization as brax_randomization,
    check_parity as check_parity,
    from_brax as from_brax,
    from_gymnasium as from_gymnasium,
    from_gymnax as from_gymnax,
    from_jaxmarl as from_jaxmarl,
    from_jumanji as from_jumanji,
    to_brax as to_brax,
    to_gymnasium as to_gymnasium,
    to_gymnax as to_gymnax,
)
