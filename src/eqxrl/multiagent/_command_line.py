"""The multi-agent wrappers' flags of `eqxrl train`, registered with the algorithm
registry: MAPPO's `--share-critic` and `--critic-input`, value decomposition's
`--mixer` (VDN, QMIX, PQN-VDN). `--share-parameters` and the default
(`Independent` learners) belong to every multi-agent run and stay in the CLI."""

from collections.abc import Mapping
from typing import Any

from ..algorithms import (
    DQN,
    PPO,
    PQN,
    AbstractAlgorithm,
    CommandLineOption,
    register_command_line_option,
)
from ..envs import num_agents_of
from ._mappo import CRITIC_INPUTS, MAPPO
from ._pqn_vdn import PQNVDN
from ._value_decomposition import QMIX, VDN

_MIXERS = {"vdn": VDN, "qmix": QMIX}


def _refuse_single_agent(flag: str, algorithm: AbstractAlgorithm, run: Mapping) -> None:
    if num_agents_of(algorithm.env) is None:
        raise ValueError(f"{flag}: {run['env']} has a single agent; drop the flag.")


def _value_decomposition(
    algorithm: AbstractAlgorithm, mixer: Any, run: Mapping[str, Any]
) -> VDN | QMIX | PQNVDN:
    """`--mixer`'s VDN or QMIX around the DQN the other flags configured (PQN-VDN
    around a PQN with `vdn`), refused beside another algorithm and beside
    `--critic-input` (MAPPO's)."""
    _refuse_single_agent(f"--mixer {mixer}", algorithm, run)
    name = str(mixer).strip().lower()
    if name not in _MIXERS:
        raise ValueError(f"--mixer {mixer!r}: choose among {', '.join(_MIXERS)}.")
    if isinstance(algorithm, PQN) and name != "vdn":
        raise ValueError(
            f"--mixer {name}: PQN's agents train as a team with vdn (PQN-VDN: "
            "eqxrl.multiagent.PQNVDN); for QMIX use --algo dqn."
        )
    if not isinstance(algorithm, DQN | PQN):
        raise ValueError(
            f"--mixer {name}: value decomposition trains DQN's agents as a team; "
            f"{type(algorithm).__name__} does not take a mixer. Use --algo dqn (or "
            "--algo pqn with --mixer vdn), or drop --mixer."
        )
    if run.get("critic_input") is not None:
        raise ValueError(
            f"--mixer {name} and --critic-input: a mixer is for DQN's agents, a "
            "centralized critic for MAPPO's (--algo ppo); keep one."
        )
    share_parameters = bool(run.get("share_parameters"))
    if isinstance(algorithm, PQN):
        return PQNVDN(algorithm, share_parameters=share_parameters)
    return _MIXERS[name](algorithm, share_parameters=share_parameters)


def _check_share_critic(
    algorithm: AbstractAlgorithm, share_critic: Any, run: Mapping[str, Any]
) -> None:
    """`--share-critic` only chooses MAPPO's critics: `--critic-input` builds
    MAPPO."""
    if run.get("critic_input") is None:
        raise ValueError(
            "--share-critic: a critic apart from the actor is MAPPO's; give "
            "--critic-input (global_state, concatenated or agent_specific) or drop "
            "the flag."
        )


def _mappo(
    algorithm: AbstractAlgorithm, critic_input: Any, run: Mapping[str, Any]
) -> MAPPO:
    """`--critic-input`'s MAPPO around the PPO the other flags configured."""
    _refuse_single_agent("--critic-input", algorithm, run)
    if type(algorithm) is not PPO:
        raise ValueError(
            f"--critic-input: a centralized critic is MAPPO's, which trains PPO, not "
            f"{type(algorithm).__name__}; use --algo ppo or drop the flag."
        )
    share_critic = run.get("share_critic")
    if not isinstance(share_critic, bool | None):  # a config file may say true/false
        if str(share_critic).strip().lower() not in ("yes", "no"):
            raise ValueError(f"--share-critic {share_critic!r}: choose yes or no.")
        share_critic = str(share_critic).strip().lower() == "yes"
    return MAPPO(
        algorithm,
        share_parameters=bool(run.get("share_parameters")),
        critic_input=critic_input,
        share_critic=share_critic,
    )


# In the order `eqxrl train` applies them: a mixer first (it names --critic-input
# when both are given), then MAPPO's two.
register_command_line_option(
    CommandLineOption(
        "--mixer",
        help="multi-agent environments with DQN: train the agents as a team on the "
        "team reward, their values summed (vdn: eqxrl.multiagent.VDN) or mixed by "
        "a monotonic network reading the global state (qmix: "
        "eqxrl.multiagent.QMIX) (default: independent DQN, each agent on its own "
        "reward); with PQN, vdn trains eqxrl.multiagent.PQNVDN",
        choices=tuple(_MIXERS),
        wrap=_value_decomposition,
    )
)
register_command_line_option(
    CommandLineOption(
        "--share-critic",
        help="MAPPO (with --critic-input): one critic for all agents (yes) or one "
        "per agent (no), whatever --share-parameters chose for the actor (default: "
        "as --share-parameters)",
        choices=("yes", "no"),
        wrap=_check_share_critic,
    )
)
register_command_line_option(
    CommandLineOption(
        "--critic-input",
        help="multi-agent environments with PPO: MAPPO (eqxrl.multiagent.MAPPO), "
        "a centralized critic reading the global state, every agent's observations "
        "concatenated, or the global state with the agent's index (default: "
        "independent PPO, each critic reading its agent's observation)",
        choices=CRITIC_INPUTS,
        wrap=_mappo,
    )
)
