"""eqxrl: reinforcement learning that runs end to end on the accelerator.

Runtime shape checking (jaxtyping + beartype) is on for the whole package unless the
environment variable `EQXRL_TYPECHECK` is set to `0` before `eqxrl` is first imported.
Checks run when JAX traces a function, so they cost nothing inside compiled code.
"""

import os as _os

from ._version import __version__ as __version__

TYPECHECK: bool = _os.environ.get("EQXRL_TYPECHECK", "1") != "0"

if TYPECHECK:
    from jaxtyping import install_import_hook as _install_import_hook

    with _install_import_hook("eqxrl", "beartype.beartype"):
        from . import (
            algorithms as algorithms,
            buffers as buffers,
            distributions as distributions,
            envs as envs,
            multiagent as multiagent,
            nn as nn,
            training as training,
        )
else:
    from . import (
        algorithms as algorithms,
        buffers as buffers,
        distributions as distributions,
        envs as envs,
        multiagent as multiagent,
        nn as nn,
        training as training,
    )

from ._export import (  # noqa: E402
    ExportedPolicy as ExportedPolicy,
    ExportError as ExportError,
    check_export as check_export,
    export_policy as export_policy,
)
from .algorithms import (  # noqa: E402
    DDPG as DDPG,
    DQN as DQN,
    IQN as IQN,
    PPO as PPO,
    PQN as PQN,
    SAC as SAC,
    TD3 as TD3,
    AbstractAlgorithm as AbstractAlgorithm,
    EntropyCollapseWarning as EntropyCollapseWarning,
    PPOState as PPOState,
    PQNState as PQNState,
    QLearningState as QLearningState,
    SACState as SACState,
    TD3State as TD3State,
    TrainResult as TrainResult,
    train as train,
    train_seeds as train_seeds,
)
from .training import (  # noqa: E402
    Trainer as Trainer,
    load_checkpoint as load_checkpoint,
    load_policy as load_policy,
    save_checkpoint as save_checkpoint,
)
