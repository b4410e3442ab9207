"""The algorithm registry: the names `eqxrl.train` and `eqxrl train --algo` know, and
the command-line options that algorithms and multi-agent wrappers bring with them.
`eqxrl train` builds its flags from here, so adding an algorithm (and its options)
touches this registry, not the command line."""

from collections.abc import Callable, Mapping
from typing import Any

import equinox as eqx

from ..nn import GRUActorCritic, LSTMActorCritic
from ._base import AbstractAlgorithm
from ._dqn import DQN
from ._iqn import IQN
from ._ppo import PPO
from ._pqn import PQN
from ._sac import SAC
from ._td3 import DDPG, TD3


class CommandLineOption(eqx.Module):
    """A flag of `eqxrl train` that an algorithm or a multi-agent wrapper brings,
    registered with [`register_algorithm`][eqxrl.algorithms.register_algorithm] or
    [`register_command_line_option`][eqxrl.algorithms.register_command_line_option].
    Every registered option is a flag of every algorithm's `eqxrl train`, and a key
    of config files (underscored: `--critic-input` is `critic_input`); its hooks
    refuse it, with a message saying what to do instead, where it does not apply.
    (The algorithm's own fields are flags already, from its dataclass fields.)

    **Arguments:**

    - `flag`: the flag, e.g. `"--network"`.
    - `help`: its line in `eqxrl train --help`.
    - `choices`: the values it takes (checked by the parser; values from a config
      file reach the hooks unchecked), or `None` for any text.
    - `configure`: `configure(value, algorithm_class, options) -> options`, before the
      algorithm is built: the keyword arguments it will be built with (its
      hyperparameters, from flags and config files), changed for `value`. Raise a
      `ValueError` to refuse.
    - `wrap`: `wrap(algorithm, value, run_options) -> algorithm or None`, after the
      algorithm is built: the algorithm to train instead (e.g. a multi-agent
      wrapper around it), or `None` to leave the choice to the next option.
      `run_options` holds `env` (the environment's id), `share_parameters` and
      every registered option given, by name (e.g. `critic_input`). Raise a
      `ValueError` to refuse. The
      first option to return an algorithm wins; when none does, a multi-agent
      environment trains [`Independent`][eqxrl.multiagent.Independent] learners.

    !!! example

        ```python
        def choose_size(value, algorithm_class, options):
            if "hidden_sizes" in options:
                raise ValueError(f"--size {value} and --hidden-sizes: keep one.")
            sizes = {"small": (64, 64), "large": (256, 256)}[value]
            return {**options, "hidden_sizes": sizes}

        eqxrl.algorithms.register_algorithm(
            "my_algorithm",
            MyAlgorithm,
            command_line_options=(
                eqxrl.algorithms.CommandLineOption(
                    "--size",
                    help="the network: small (64,64) or large (256,256)",
                    choices=("small", "large"),
                    configure=choose_size,
                ),
            ),
        )
        ```
    """

    flag: str = eqx.field(static=True)
    help: str = eqx.field(static=True)
    choices: tuple[str, ...] | None = eqx.field(static=True, default=None)
    configure: (
        Callable[[Any, type[AbstractAlgorithm], dict[str, Any]], dict[str, Any]] | None
    ) = eqx.field(static=True, default=None)
    wrap: (
        Callable[[AbstractAlgorithm, Any, Mapping[str, Any]], AbstractAlgorithm | None]
        | None
    ) = eqx.field(static=True, default=None)

    def __check_init__(self):
        if not self.flag.startswith("--") or self.flag != self.flag.lower():
            raise ValueError(
                f"CommandLineOption: flag={self.flag!r} must be a lower-case long "
                "flag such as '--network'."
            )

    @property
    def name(self) -> str:
        """The option's key in config files and `run_options`: `critic_input` for
        `--critic-input`."""
        return self.flag.removeprefix("--").replace("-", "_")


_ALGORITHMS: dict[str, type[AbstractAlgorithm]] = {}
_OPTIONS: dict[str, CommandLineOption] = {}


def register_algorithm(
    name: str,
    algorithm: type[AbstractAlgorithm],
    *,
    command_line_options: tuple[CommandLineOption, ...] = (),
) -> None:
    """Make `name` (e.g. `"ppo"`) refer to an algorithm class in
    [`eqxrl.train`][eqxrl.train] and the command line.

    **Arguments:**

    - `name`: a lower-case name, not taken already.
    - `algorithm`: a concrete subclass of
      [`AbstractAlgorithm`][eqxrl.AbstractAlgorithm] whose first field is `env`.
    - `command_line_options`: flags of `eqxrl train` beyond the algorithm's fields
      (which are flags already), each a
      [`CommandLineOption`][eqxrl.algorithms.CommandLineOption], e.g. PPO's
      `--network`.
    """
    if name in _ALGORITHMS:
        raise ValueError(f"An algorithm named {name!r} is registered already.")
    for option in command_line_options:
        register_command_line_option(option)
    _ALGORITHMS[name] = algorithm


def register_command_line_option(option: CommandLineOption) -> None:
    """Add a flag to `eqxrl train`, for an option that belongs to no one registered
    algorithm, e.g. a multi-agent wrapper's (MAPPO's `--critic-input`). An
    algorithm's own options go to
    [`register_algorithm`][eqxrl.algorithms.register_algorithm].

    **Arguments:**

    - `option`: a [`CommandLineOption`][eqxrl.algorithms.CommandLineOption] whose
      flag is not taken already.
    """
    if option.flag in _OPTIONS:
        raise ValueError(f"The flag {option.flag} is registered already.")
    _OPTIONS[option.flag] = option


def algorithm_names() -> list[str]:
    """The registered algorithm names, sorted."""
    return sorted(_ALGORITHMS)


def command_line_options() -> tuple[CommandLineOption, ...]:
    """The registered [`CommandLineOption`][eqxrl.algorithms.CommandLineOption]s, in
    the order they were registered (the order `eqxrl train` applies them in)."""
    return tuple(_OPTIONS.values())


def get_algorithm(name: str) -> type[AbstractAlgorithm]:
    """The algorithm class registered as `name` (case-insensitive)."""
    try:
        return _ALGORITHMS[name.lower()]
    except KeyError:
        raise ValueError(
            f"Unknown algorithm {name!r}; registered: {algorithm_names()}."
        ) from None


# PPO's `--network`: its network factory by name, so that config.json and checkpoint
# headers name the factory too and `eqxrl eval` rebuilds the network.
_PPO_NETWORKS = {
    "mlp": None,
    "gru": GRUActorCritic.from_env,
    "lstm": LSTMActorCritic.from_env,
}
# Fields that shape PPO's default network only.
_DEFAULT_NETWORK_FIELDS = (
    "hidden_sizes",
    "actor_hidden_sizes",
    "critic_hidden_sizes",
    "activation",
    "actor_keys",
    "critic_keys",
    "squash_actions",
    "state_dependent_std",
    "std_parameterization",
)


def _ppo_network(
    network: Any, algorithm: type[AbstractAlgorithm], options: dict[str, Any]
) -> dict[str, Any]:
    """`options` with the `network_factory` that `--network` names (none for PPO's
    default), refused for algorithms without actor-critics and beside options that
    only shape the default network."""
    name = str(network).strip().lower()
    if name not in _PPO_NETWORKS:
        raise ValueError(
            f"--network {network!r}: choose among {', '.join(_PPO_NETWORKS)}."
        )
    factory = _PPO_NETWORKS[name]
    if factory is None:
        return options
    if algorithm is PQN:
        raise ValueError(
            f"--network {name}: PQN's recurrent network (PQN-RNN) is a GRU after "
            "its hidden layers: --gru-size N (e.g. --gru-size 256), with "
            "--hidden-sizes and --layer-norm."
        )
    if algorithm is not PPO:
        algo = next((k for k, v in _ALGORITHMS.items() if v is algorithm), None)
        raise ValueError(
            f"--network {name}: recurrent networks are actor-critics for PPO (and "
            f"independent PPO on multi-agent environments); "
            f"{algo or algorithm.__name__} does not take one. Use --algo ppo, or "
            "drop --network."
        )
    if options.get("network_factory") is not None:
        raise ValueError(
            f"--network {name} and network_factory both choose the network; keep one."
        )
    default_only = [
        "--" + option.replace("_", "-")
        for option in _DEFAULT_NETWORK_FIELDS
        if option in options
    ]
    if default_only:
        raise ValueError(
            f"--network {name}: {', '.join(default_only)} shape the default (mlp) "
            "network only; the recurrent networks have their default sizes from the "
            "command line. Drop them, or build the network in Python "
            "(network_factory=functools.partial("
            "eqxrl.nn.GRUActorCritic.from_env, hidden_size=...))."
        )
    return {**options, "network_factory": factory}


register_algorithm(
    "ppo",
    PPO,
    command_line_options=(
        CommandLineOption(
            "--network",
            help="PPO's network: mlp (its feed-forward default: an MLP, or "
            "MultiInputActorCritic's encoders for Dict and image observations), gru "
            "or lstm (eqxrl.nn.GRUActorCritic / LSTMActorCritic with their default "
            "sizes: a policy with memory, for partially observed environments) "
            "(default: mlp; PQN's recurrent network is --gru-size N)",
            choices=tuple(_PPO_NETWORKS),
            configure=_ppo_network,
        ),
    ),
)
register_algorithm("dqn", DQN)
register_algorithm("iqn", IQN)
register_algorithm("sac", SAC)
register_algorithm("pqn", PQN)
register_algorithm("td3", TD3)
register_algorithm("ddpg", DDPG)
