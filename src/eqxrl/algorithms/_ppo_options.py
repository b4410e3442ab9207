"""The checks of PPO's options, run when a `PPO` is built, and the warnings of its
deprecated ones."""

import os
import sys
import warnings
from typing import Any

import equinox
import jaxtyping

from ..envs import num_agents_of
from ._checks import check_actor_critic, refuse_auto_reset
from ._ppo_network import check_network_options

# Options kept for one release after their own measurements found no gain (see
# `docs/continuous-control.md#from-brax-to-eqxrl`).
_DEPRECATED_OPTIONS = {
    "recompute_advantages": (
        "on Playground's CartpoleBalance it solved 4 of 8 seeds against 6 of 8 without"
    ),
    "minibatch_environments": (
        "on Playground's CartpoleBalance it solved 6 of 16 seeds, as without"
    ),
}


# Where a module is built and checked (Equinox, jaxtyping's checks, this package):
# a warning points past these, at the code that built the `PPO`.
_BUILDING = (
    os.path.dirname(equinox.__file__),
    os.path.dirname(jaxtyping.__file__),
    os.path.dirname(os.path.dirname(__file__)),  # eqxrl
    "<string>",  # dataclasses' generated `__init__`
)


def _stacklevel_outside(frame: Any) -> int:
    """The `stacklevel` of a `warnings.warn` called in `frame` that names the first
    frame outside the code that builds and checks a module."""
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_BUILDING):
        frame, level = frame.f_back, level + 1
    return level


def check_options(ppo: Any) -> None:
    """Every check of `PPO.__check_init__`: a `ValueError` that names the option
    and says how to fix it, a `DeprecationWarning` for a deprecated option set."""
    for name in ("num_envs", "num_steps", "num_epochs", "num_minibatches"):
        value = getattr(ppo, name)
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"PPO: {name}={value!r} must be a positive integer.")
    batch_size = ppo.num_envs * ppo.num_steps
    if batch_size % ppo.num_minibatches:
        raise ValueError(
            f"PPO: num_envs * num_steps = {batch_size} is not divisible by "
            f"num_minibatches={ppo.num_minibatches}; choose num_minibatches "
            f"among the divisors of {batch_size} or change num_envs / num_steps."
        )
    if ppo.total_timesteps < batch_size:
        raise ValueError(
            f"PPO: total_timesteps={ppo.total_timesteps} is less than one "
            f"iteration (num_envs * num_steps = {batch_size}); raise "
            "total_timesteps or lower num_envs / num_steps."
        )
    refuse_auto_reset("PPO", ppo.env)
    check_network_options(ppo)
    network = check_actor_critic("PPO", ppo.env, ppo.make_network, ppo.network_factory)
    if ppo.update_observation_statistics_first and not ppo.normalize_observations:
        raise ValueError(
            "PPO: update_observation_statistics_first=True chooses when the "
            "observation statistics are updated; it needs "
            "normalize_observations=True."
        )
    for name, reason in _DEPRECATED_OPTIONS.items():
        if getattr(ppo, name):
            warnings.warn(
                f"PPO({name}=True) is deprecated and will be removed in the next "
                f"release: {reason}.",
                DeprecationWarning,
                stacklevel=_stacklevel_outside(sys._getframe()),
            )
    if ppo.minibatch_environments and ppo.num_envs % ppo.num_minibatches:
        raise ValueError(
            "PPO: minibatch_environments=True draws minibatches of whole "
            f"environments: num_minibatches={ppo.num_minibatches} must divide "
            f"num_envs={ppo.num_envs}; choose num_minibatches among the "
            f"divisors of {ppo.num_envs}, or change num_envs."
        )
    # A multi-agent environment's learners (Independent) may have more columns
    # than worlds: Independent checks those.
    if (
        network.is_recurrent
        and num_agents_of(ppo.env) is None
        and ppo.num_envs % ppo.num_minibatches
    ):
        raise ValueError(
            f"PPO: the recurrent {type(network).__name__} learns from whole "
            "sequences, in minibatches of environments: num_minibatches="
            f"{ppo.num_minibatches} must divide num_envs={ppo.num_envs}; "
            f"choose num_minibatches among the divisors of {ppo.num_envs}, or "
            "change num_envs."
        )
