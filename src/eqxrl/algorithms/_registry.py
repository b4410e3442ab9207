from ._base import AbstractAlgorithm
from ._dqn import DQN
from ._iqn import IQN
from ._ppo import PPO
from ._pqn import PQN
from ._sac import SAC
from ._td3 import DDPG, TD3

_ALGORITHMS: dict[str, type[AbstractAlgorithm]] = {}


def register_algorithm(name: str, algorithm: type[AbstractAlgorithm]) -> None:
    """Make `name` (e.g. `"ppo"`) refer to an algorithm class in
    [`eqxrl.train`][eqxrl.train] and the command line.

    **Arguments:**

    - `name`: a lower-case name, not taken already.
    - `algorithm`: a concrete subclass of
      [`AbstractAlgorithm`][eqxrl.AbstractAlgorithm] whose first field is `env`.
    """
    if name in _ALGORITHMS:
        raise ValueError(f"An algorithm named {name!r} is registered already.")
    _ALGORITHMS[name] = algorithm


def algorithm_names() -> list[str]:
    """The registered algorithm names, sorted."""
    return sorted(_ALGORITHMS)


def get_algorithm(name: str) -> type[AbstractAlgorithm]:
    """The algorithm class registered as `name` (case-insensitive)."""
    try:
        return _ALGORITHMS[name.lower()]
    except KeyError:
        raise ValueError(
            f"Unknown algorithm {name!r}; registered: {algorithm_names()}."
        ) from None


register_algorithm("ppo", PPO)
register_algorithm("dqn", DQN)
register_algorithm("iqn", IQN)
register_algorithm("sac", SAC)
register_algorithm("pqn", PQN)
register_algorithm("td3", TD3)
register_algorithm("ddpg", DDPG)
