"""PPO's default actor-critic, built from PPO's network options, and the checks of
those options."""

from collections.abc import Callable
from typing import Any, Literal

import jax
import numpy as np
from jaxtyping import Array, PRNGKeyArray

from ..envs import AbstractEnvironment, Box, Dict, Discrete
from ..nn import (
    AbstractActorCritic,
    MLPActorCritic,
    MLPGaussianActorCritic,
    MultiInputActorCritic,
)

NetworkFactory = Callable[[AbstractEnvironment, PRNGKeyArray], AbstractActorCritic]
Activation = Literal["tanh", "relu", "swish", "elu", "gelu"]
StdParameterization = Literal["log", "softplus"]
Initialization = Literal["orthogonal", "lecun_uniform"]
# The activations PPO's default network can use, by name (a name, unlike a
# function, is written to configs and checkpoint headers).
ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "tanh": jax.nn.tanh,
    "relu": jax.nn.relu,
    "swish": jax.nn.swish,
    "elu": jax.nn.elu,
    "gelu": jax.nn.gelu,
}
# The default network's options and their defaults: with `network_factory`, none
# of them may be set.
_NETWORK_OPTIONS = (
    ("actor_hidden_sizes", None),
    ("critic_hidden_sizes", None),
    ("activation", "tanh"),
    ("squash_actions", False),
    ("state_dependent_std", False),
    ("std_parameterization", "log"),
    ("initialization", "orthogonal"),
)
_GAUSSIAN_OPTIONS = ("squash_actions", "state_dependent_std", "std_parameterization")


def key_tuple(name: str, keys: Any) -> tuple[str, ...] | None:
    """`actor_keys` / `critic_keys` as a tuple of names; a lone string or an empty
    sequence is refused (`tuple("state")` would read it as five keys)."""
    if keys is None:
        return None
    if isinstance(keys, str) or not all(isinstance(k, str) for k in keys):
        raise TypeError(
            f"PPO: {name} must be a tuple of key names, e.g. ('state',); got {keys!r}."
        )
    if not keys:
        raise ValueError(f"PPO: {name} is empty; give at least one key, or None.")
    return tuple(keys)


def optional_tuple(sizes: Any) -> tuple[int, ...] | None:
    return None if sizes is None else tuple(sizes)


def default_network(ppo: Any, key: PRNGKeyArray) -> AbstractActorCritic:
    """`ppo`'s default actor-critic: an MLP (`MLPActorCritic` for `Discrete`
    actions, `MLPGaussianActorCritic` for `Box` ones) on `Box` observations, else
    (or with `actor_keys` / `critic_keys`) a `MultiInputActorCritic`."""
    env = ppo.env
    action_space = env.action_space
    sizes = dict(
        hidden_sizes=ppo.actor_hidden_sizes or ppo.hidden_sizes,
        critic_hidden_sizes=ppo.critic_hidden_sizes or ppo.hidden_sizes,
        activation=ACTIVATIONS[ppo.activation],
        initialization=ppo.initialization,
    )
    gaussian = {}
    if isinstance(action_space, Box):
        gaussian = dict(
            state_dependent_std=ppo.state_dependent_std,
            squash=ppo.squash_actions,
            std_parameterization=ppo.std_parameterization,
        )
    if (
        not isinstance(env.observation_space, Box)
        or ppo.actor_keys is not None
        or ppo.critic_keys is not None
    ):
        return MultiInputActorCritic(
            env.observation_space,
            action_space,
            actor_keys=ppo.actor_keys,
            critic_keys=ppo.critic_keys,
            **sizes,
            **gaussian,
            key=key,
        )
    if isinstance(action_space, Box):
        return MLPGaussianActorCritic.from_env(env, key, **sizes, **gaussian)
    return MLPActorCritic.from_env(env, key, **sizes)


def check_network_options(ppo: Any) -> None:
    """The default network's options: positive layer widths, a known activation,
    initialization and standard deviation; none of them with `network_factory`;
    the Gaussian ones for `Box` actions only, `squash_actions` for `[-1, 1]`
    bounds; `actor_keys` / `critic_keys` naming keys of a `Dict` observation."""
    for name in ("hidden_sizes", "actor_hidden_sizes", "critic_hidden_sizes"):
        sizes = getattr(ppo, name)
        if sizes is not None and any(not isinstance(w, int) or w < 1 for w in sizes):
            raise ValueError(f"PPO: {name}={sizes} must be positive integers.")
    if ppo.activation not in ACTIVATIONS:
        raise ValueError(
            f"PPO: activation={ppo.activation!r} is not one of "
            f"{sorted(ACTIVATIONS)}; for another, pass network_factory."
        )
    network_options = [
        name for name, default in _NETWORK_OPTIONS if getattr(ppo, name) != default
    ]
    if ppo.network_factory is not None and network_options:
        raise ValueError(
            f"PPO: {', '.join(network_options)} only apply to the default "
            "network; with network_factory, build your network with them "
            "instead."
        )
    if ppo.initialization not in ("orthogonal", "lecun_uniform"):
        raise ValueError(
            f"PPO: initialization={ppo.initialization!r} must be 'orthogonal' "
            "or 'lecun_uniform'."
        )
    if ppo.std_parameterization not in ("log", "softplus"):
        raise ValueError(
            f"PPO: std_parameterization={ppo.std_parameterization!r} must be "
            "'log' or 'softplus'."
        )
    gaussian_options = [name for name in _GAUSSIAN_OPTIONS if name in network_options]
    space = ppo.env.action_space
    if gaussian_options and not isinstance(space, Box):
        raise ValueError(
            f"PPO: {', '.join(gaussian_options)} only apply to a Gaussian policy "
            f"(a Box action space); the action space is {type(space).__name__}."
        )
    if ppo.squash_actions:
        bounds = (space.low, space.high)
        if not any(isinstance(b, jax.core.Tracer) for b in bounds) and not (
            np.all(np.asarray(space.low) == -1.0)
            and np.all(np.asarray(space.high) == 1.0)
        ):
            raise ValueError(
                "PPO: squash_actions gives actions in (-1, 1), but the action "
                f"space is Box(low={space.low}, high={space.high}); wrap the "
                "environment in eqxrl.envs.RescaleAction(env) to map (-1, 1) "
                "onto its bounds."
            )
    if ppo.network_factory is None and not isinstance(space, Discrete | Box):
        raise ValueError(
            f"PPO: the default network needs a Discrete or Box action space, got "
            f"{type(space).__name__}; pass network_factory."
        )
    if ppo.actor_keys is not None or ppo.critic_keys is not None:
        _check_observation_keys(ppo)


def _check_observation_keys(ppo: Any) -> None:
    if ppo.network_factory is not None:
        raise ValueError(
            "PPO: actor_keys / critic_keys choose what the default network "
            "reads; with network_factory, pass them to your network instead."
        )
    space = ppo.env.observation_space
    if not isinstance(space, Dict):
        raise ValueError(
            "PPO: actor_keys / critic_keys select keys of a Dict observation, "
            f"but the observation space is {type(space).__name__}."
        )
    for name in ("actor_keys", "critic_keys"):
        keys = getattr(ppo, name)
        missing = [k for k in keys or () if k not in space.keys()]
        if missing:
            raise ValueError(
                f"PPO: {name}={keys} names {missing}, which the observation "
                f"does not have; its keys are {space.keys()}."
            )
