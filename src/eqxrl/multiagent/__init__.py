"""Several agents in one world: independent learners, one model per agent, stacked
with a leading agent axis and trained vmapped in one compiled program."""

from ._independent import (
    Independent as Independent,
    IndependentState as IndependentState,
)
from ._mappo import (
    MAPPO as MAPPO,
    CentralisedCriticView as CentralisedCriticView,
    DecentralisedPolicy as DecentralisedPolicy,
)
from ._policy import (
    IndependentPolicy as IndependentPolicy,
    SharedPolicy as SharedPolicy,
)
from ._presets import sorrel_iqn as sorrel_iqn
from ._value_decomposition import (
    QMIX as QMIX,
    VDN as VDN,
    AbstractMixer as AbstractMixer,
    AbstractValueDecomposition as AbstractValueDecomposition,
    MonotonicMixer as MonotonicMixer,
    SumMixer as SumMixer,
    ValueDecompositionState as ValueDecompositionState,
)
