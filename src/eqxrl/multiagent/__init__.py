"""Several agents in one world, trained in one compiled program: independent
learners (one model per agent stacked on a leading agent axis, or one shared),
MAPPO's centralised critics on the same machinery, and cooperative value
decomposition (VDN, QMIX, PQN-VDN)."""

from ._agents import AbstractTeamAlgorithm as AbstractTeamAlgorithm
from ._independent import (
    AbstractPerAgentLearners as AbstractPerAgentLearners,
    Independent as Independent,
    IndependentState as IndependentState,
)
from ._mappo import (
    MAPPO as MAPPO,
    CentralisedCriticView as CentralisedCriticView,
    DecentralisedPolicy as DecentralisedPolicy,
    synchronised_shared_gradients as synchronised_shared_gradients,
)
from ._policy import (
    IndependentPolicy as IndependentPolicy,
    SharedPolicy as SharedPolicy,
)
from ._pqn_vdn import (
    PQNVDN as PQNVDN,
    PQNVDNRollout as PQNVDNRollout,
    PQNVDNState as PQNVDNState,
)
from ._presets import sorrel_iqn as sorrel_iqn
from ._value_decomposition import (
    QMIX as QMIX,
    VDN as VDN,
    AbstractMixer as AbstractMixer,
    AbstractTeamQLearning as AbstractTeamQLearning,
    AbstractValueDecomposition as AbstractValueDecomposition,
    MonotonicMixer as MonotonicMixer,
    SumMixer as SumMixer,
    ValueDecompositionState as ValueDecompositionState,
)
