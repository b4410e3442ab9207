"""Several agents in one world, trained in one compiled program: independent
learners (one model per agent stacked on a leading agent axis, or one shared),
MAPPO's centralized critics on the same machinery, and cooperative value
decomposition (VDN, QMIX, PQN-VDN)."""

from .._deprecation import warn_renamed as _warn_renamed
from . import _command_line as _command_line  # registers --mixer, --critic-input, ...
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
from ._mixers import (
    AbstractMixer as AbstractMixer,
    MonotonicMixer as MonotonicMixer,
    SumMixer as SumMixer,
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
from ._team_q_learning import AbstractTeamQLearning as AbstractTeamQLearning
from ._value_decomposition import QMIX as QMIX, VDN as VDN
from ._value_decomposition_base import (
    AbstractValueDecomposition as AbstractValueDecomposition,
    ValueDecompositionState as ValueDecompositionState,
)

# Renamed names, kept for one release: American spelling (as `normalize`), and
# presets as `from_<peer>` classmethods.
_RENAMED = {
    "CentralisedCriticView": "CentralizedCriticView",
    "DecentralisedPolicy": "DecentralizedPolicy",
    "synchronised_shared_gradients": "synchronized_shared_gradients",
    "sorrel_iqn": "Independent.from_sorrel",
}


def __getattr__(name: str):
    """A renamed name's old spelling: the new object, with a warning."""
    if name not in _RENAMED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    new_name = _RENAMED[name]
    _warn_renamed(f"eqxrl.multiagent.{name}", f"eqxrl.multiagent.{new_name}")
    owner, *attributes = new_name.split(".")
    found = globals()[owner]
    for attribute in attributes:
        found = getattr(found, attribute)
    return found
