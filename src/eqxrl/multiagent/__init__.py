"""Several agents in one world, trained in one compiled program: independent
learners (one model per agent stacked on a leading agent axis, or one shared),
MAPPO's centralized critics on the same machinery, and cooperative value
decomposition (VDN, QMIX, PQN-VDN)."""

from ._agents import AbstractTeamAlgorithm as AbstractTeamAlgorithm
from ._independent import (
    AbstractPerAgentLearners as AbstractPerAgentLearners,
    Independent as Independent,
    IndependentState as IndependentState,
)
from ._mappo import (
    MAPPO as MAPPO,
    CentralizedCriticView as CentralizedCriticView,
    DecentralizedPolicy as DecentralizedPolicy,
    synchronized_shared_gradients as synchronized_shared_gradients,
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

# Names renamed to American spelling (as `normalize`), kept for one release.
_DEPRECATED_NAMES = {
    "CentralisedCriticView": "CentralizedCriticView",
    "DecentralisedPolicy": "DecentralizedPolicy",
    "synchronised_shared_gradients": "synchronized_shared_gradients",
}


def __getattr__(name: str):
    """The renamed names' old spellings: the new objects, with a warning."""
    if name in _DEPRECATED_NAMES:
        import warnings

        new_name = _DEPRECATED_NAMES[name]
        warnings.warn(
            f"eqxrl.multiagent.{name} is deprecated and will be removed in the next "
            f"release: use eqxrl.multiagent.{new_name}.",
            DeprecationWarning,
            stacklevel=2,
        )
        return globals()[new_name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
