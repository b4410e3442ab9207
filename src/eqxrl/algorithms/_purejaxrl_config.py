"""A PureJaxRL / JaxMARL PPO config dict as PPO's configuration (the translation
behind `PPO.from_purejaxrl_config`). Neither library is imported."""

import numbers
from collections.abc import Mapping
from typing import Any

from ..envs import AbstractEnvironment, Box, num_agents_of

CALLER = "PPO.from_purejaxrl_config"

# Keys that become one PPO argument each, unchanged.
TRANSLATED: dict[str, str] = {
    "LR": "learning_rate",
    "NUM_ENVS": "num_envs",
    "NUM_STEPS": "num_steps",
    "TOTAL_TIMESTEPS": "total_timesteps",
    "UPDATE_EPOCHS": "num_epochs",
    "NUM_MINIBATCHES": "num_minibatches",
    "GAMMA": "gamma",
    "GAE_LAMBDA": "gae_lambda",
    "CLIP_EPS": "clip_eps",
    "ENT_COEF": "ent_coef",
    "VF_COEF": "vf_coef",
    "MAX_GRAD_NORM": "max_grad_norm",
    "ANNEAL_LR": "anneal_lr",
}

# Keys that count something, so must be whole numbers (PureJaxRL's YAML configs
# write `TOTAL_TIMESTEPS: 1e7`, a float).
COUNTS = (
    "NUM_ENVS",
    "NUM_STEPS",
    "TOTAL_TIMESTEPS",
    "UPDATE_EPOCHS",
    "NUM_MINIBATCHES",
)

# Keys that are true or false.
FLAGS = ("ANNEAL_LR", "NORMALIZE_ENV", "SCALE_CLIP_EPS")

# Keys with a meaning of their own: the network's activation, PureJaxRL's
# continuous-action script's normalization wrappers, JaxMARL's clip scaling.
SPECIAL = frozenset({"ACTIVATION", "NORMALIZE_ENV", "SCALE_CLIP_EPS"})

# Keys that `make_train` derives from the others and writes into the config: a
# config that went through it has them, and they must agree.
DERIVED = frozenset({"NUM_UPDATES", "MINIBATCH_SIZE", "NUM_ACTORS"})

# Keys for the script around the training function (which environment to build,
# seeds, printing, Weights & Biases, devices): accepted and not used.
IGNORED = frozenset(
    {
        "ENV_NAME",
        "ENV_KWARGS",
        "MAP_NAME",
        "SEED",
        "NUM_SEEDS",
        "DEBUG",
        "ENTITY",
        "PROJECT",
        "WANDB_MODE",
        "DEVICE",
        "DISABLE_JIT",
    }
)

# PureJaxRL's actor-critic: two layers of 64 in `ppo.py` (and JaxMARL's
# feed-forward IPPO), two of 256 in `ppo_continuous_action.py`.
DISCRETE_HIDDEN_SIZES = (64, 64)
CONTINUOUS_HIDDEN_SIZES = (256, 256)


def _count(config: Mapping[str, Any], key: str) -> int:
    value = config[key]
    whole = isinstance(value, numbers.Integral) or (
        isinstance(value, numbers.Real) and float(value).is_integer()
    )
    if isinstance(value, bool) or not whole:
        raise ValueError(f"{CALLER}: config[{key!r}]={value!r} must be a whole number.")
    return int(value)


def _flag(config: Mapping[str, Any], key: str) -> bool:
    value = config[key]
    if not isinstance(value, bool):
        raise ValueError(f"{CALLER}: config[{key!r}]={value!r} must be True or False.")
    return value


def _check_derived(config: Mapping[str, Any], expected: Mapping[str, int]) -> None:
    for key, want in expected.items():
        if key in config and config[key] != want:
            raise ValueError(
                f"{CALLER}: config[{key!r}]={config[key]!r} disagrees with the other "
                f"keys, which give {want}; drop it (make_train derives it) or fix "
                "them."
            )


def purejaxrl_ppo_arguments(
    env: AbstractEnvironment, config: Mapping[str, Any], defaults: Mapping[str, Any]
) -> dict[str, Any]:
    """The `PPO` keyword arguments of a PureJaxRL / JaxMARL PPO config (see
    `PPO.from_purejaxrl_config`); `defaults` are PPO's, for the keys left out."""
    if not isinstance(config, Mapping):
        raise TypeError(
            f"{CALLER}: config must be a dict of PureJaxRL's keys (e.g. "
            f"{{'LR': 2.5e-4, 'NUM_ENVS': 4, ...}}), got {type(config).__name__}."
        )
    unknown = sorted(
        str(key)
        for key in config
        if key not in TRANSLATED and key not in SPECIAL | DERIVED | IGNORED
    )
    if unknown:
        raise ValueError(
            f"{CALLER}: config keys {unknown} have no PPO equivalent; remove them, "
            "or give what they do as PPO keyword arguments (e.g. "
            "network_factory=...). Translated keys: "
            f"{sorted([*TRANSLATED, *SPECIAL])}; checked: {sorted(DERIVED)}; "
            f"ignored: {sorted(IGNORED)}."
        )
    for key in COUNTS:
        if key in config:
            _count(config, key)
    for key in FLAGS:
        if key in config:
            _flag(config, key)

    arguments: dict[str, Any] = {}
    for key, name in TRANSLATED.items():
        if key in config:
            arguments[name] = _count(config, key) if key in COUNTS else config[key]
    activation = config.get("ACTIVATION", "tanh")
    if activation not in ("tanh", "relu"):
        raise ValueError(
            f"{CALLER}: config['ACTIVATION']={activation!r}: PureJaxRL's actor-critic "
            "knows 'tanh' and 'relu' (and uses tanh for any other value); drop the key "
            "and pass activation=... for another of PPO's."
        )
    arguments["activation"] = activation
    continuous = isinstance(env.action_space, Box)
    arguments["hidden_sizes"] = (
        CONTINUOUS_HIDDEN_SIZES if continuous else DISCRETE_HIDDEN_SIZES
    )
    if config.get("NORMALIZE_ENV", False):
        arguments["normalize_observations"] = True
        arguments["normalize_rewards"] = True
    num_agents = num_agents_of(env) or 1
    if config.get("SCALE_CLIP_EPS", False):
        # JaxMARL divides the clip by the agent count (and writes the result back
        # into the config: pass the config as written, not after make_train).
        arguments["clip_eps"] = (
            config.get("CLIP_EPS", defaults["clip_eps"]) / num_agents
        )

    def final(name: str) -> int:
        return arguments.get(name, defaults[name])

    num_envs, num_steps = final("num_envs"), final("num_steps")
    total_timesteps, num_minibatches = (
        final("total_timesteps"),
        final("num_minibatches"),
    )
    _check_derived(
        config,
        {
            "NUM_UPDATES": total_timesteps // num_steps // num_envs,
            "NUM_ACTORS": num_agents * num_envs,
            "MINIBATCH_SIZE": num_agents * num_envs * num_steps // num_minibatches,
        },
    )
    return arguments
