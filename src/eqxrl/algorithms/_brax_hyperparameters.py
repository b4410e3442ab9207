"""Brax's `brax.training.agents.ppo.train` and `brax.training.agents.sac.train`
arguments as PPO's and SAC's configurations (the arithmetic behind
`PPO.from_brax_hyperparameters` and `SAC.from_brax_hyperparameters`). Brax itself is
not imported."""

import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

from ..envs import AbstractEnvironment, TimeLimit, brax_randomization, unwrap

# `brax.training.agents.ppo.train`'s defaults (Brax 0.14.2) for what is translated,
# so that an argument left out means what it means to Brax.
BRAX_PPO_DEFAULTS: dict[str, Any] = {
    "num_envs": 1,
    "episode_length": None,
    "randomization_fn": None,
    "action_repeat": 1,
    "learning_rate": 1e-4,
    "entropy_cost": 1e-4,
    "discounting": 0.9,
    "unroll_length": 10,
    "batch_size": 32,
    "num_minibatches": 16,
    "num_updates_per_batch": 2,
    "num_resets_per_eval": 0,
    "normalize_observations": False,
    "reward_scaling": 1.0,
    "clipping_epsilon": 0.3,
    "clipping_epsilon_value": None,
    "gae_lambda": 0.95,
    "max_grad_norm": None,
    "normalize_advantage": True,
    "vf_loss_coefficient": 0.5,
    "num_evals": 1,
}

# `brax.training.agents.ppo.networks.make_ppo_networks`' defaults for the network
# arguments that are translated (given directly, or through a `functools.partial`
# of `make_ppo_networks` as `network_factory`).
BRAX_NETWORK_DEFAULTS: dict[str, Any] = {
    "policy_hidden_layer_sizes": (32,) * 4,
    "value_hidden_layer_sizes": (256,) * 5,
    "activation": "swish",
    "distribution_type": "tanh_normal",
}

# Arguments that change nothing in the training program: how Brax runs on the host
# (devices, evaluation, logging, checkpoints). Accepted and not used; `seed` is the
# key passed to `train`.
HOST_ARGUMENTS = frozenset(
    {
        "seed",
        "max_devices_per_host",
        "num_eval_envs",
        "eval_env",
        "deterministic_eval",
        "run_evals",
        "log_training_metrics",
        "training_metrics_steps",
        "progress_fn",
        "policy_params_fn",
        "save_checkpoint_path",
        "use_pmap_on_reset",
    }
)

# Arguments whose only accepted value is Brax's default (what eqxrl's PPO does).
DEFAULT_ONLY = {
    "wrap_env": True,
    "vision": False,
    "augment_pixels": False,
    "wrap_env_fn": None,
    "normalize_until_count": None,
    "use_distributional_critic": False,
    "learning_rate_schedule": None,
    "restore_checkpoint_path": None,
    "restore_params": None,
}

# Arguments that only matter with another one's non-default value (refused above):
# the adaptive-KL schedule's settings, the restored value function, the
# normalizer's details (eqxrl's is a running mean and variance, Welford's merge).
IGNORED = frozenset(
    {
        "desired_kl",
        "learning_rate_schedule_min_lr",
        "learning_rate_schedule_max_lr",
        "restore_value_fn",
        "normalize_observations_std_eps",
        "normalize_observations_mode",
        "bootstrap_on_timeout",
    }
)


def _network_arguments(
    algorithm: str, factory: Any, factory_name: str, translated: str
) -> dict[str, Any]:
    """The keywords of a `network_factory` that is Brax's `factory_name` (e.g.
    `make_ppo_networks`) or a `functools.partial` of it (nothing else can be
    translated); `translated` names the keywords that can be, for the error."""
    if factory is None:
        return {}
    keywords: dict[str, Any] = {}
    if isinstance(factory, functools.partial) and not factory.args:
        keywords = dict(factory.keywords)
        factory = factory.func
    if getattr(factory, "__name__", None) != factory_name:
        raise ValueError(
            f"{algorithm}.from_brax_hyperparameters: network_factory={factory!r} "
            f"cannot be translated; give Brax's {factory_name} (or a "
            f"functools.partial of it with {translated})."
        )
    return keywords


def _activation_name(
    activation: Any, activations: Mapping[str, Callable[..., Any]]
) -> str:
    if isinstance(activation, str) and activation in activations:
        return activation
    for name, function in activations.items():
        if activation is function:
            return name
    raise ValueError(
        f"PPO.from_brax_hyperparameters: activation={activation!r} is not one of "
        f"PPO's activations {sorted(activations)} (by name or as the jax.nn / "
        "flax.linen function)."
    )


def _time_limited(
    algorithm: str, env: AbstractEnvironment, brax: Mapping[str, Any]
) -> AbstractEnvironment:
    """`env` with Brax's `episode_length` as a `TimeLimit` (Brax's
    `EpisodeWrapper`) and its `randomization_fn` as a `brax_randomization`, after
    checking the arguments both trainers share."""
    caller = f"{algorithm}.from_brax_hyperparameters"
    if brax["action_repeat"] != 1:
        raise ValueError(
            f"{caller}: action_repeat={brax['action_repeat']} has no eqxrl "
            "equivalent (only 1 is translated)."
        )
    episode_length = brax["episode_length"]
    if episode_length is None:
        raise ValueError(
            f"{caller}: episode_length is required (Brax's {algorithm.lower()}.train "
            "needs it for its EpisodeWrapper; here it is a TimeLimit)."
        )
    limits = [part for part in unwrap(env) if isinstance(part, TimeLimit)]
    if not limits:
        env = TimeLimit(env, episode_length)
    elif not (limits[0] is env and env.max_episode_steps == episode_length):
        raise ValueError(
            f"{caller}: the environment already has a time limit of "
            f"{limits[0].max_episode_steps} steps; pass it without its TimeLimit "
            f"(episode_length={episode_length} adds one) or with an outermost "
            f"TimeLimit of episode_length steps."
        )
    if brax["randomization_fn"] is not None:
        # Brax's DomainRandomizationVmapWrapper, drawn per episode here.
        env = brax_randomization(env, brax["randomization_fn"])
    return env


def _copied_arguments(
    algorithm: str, brax_arguments: Mapping[str, Any]
) -> dict[str, Any]:
    """A copy of the trainer's keyword arguments, to pop from; the environment
    comes separately."""
    if "environment" in brax_arguments:
        raise TypeError(
            f"{algorithm}.from_brax_hyperparameters: pass the environment as `env` "
            "(an eqxrl environment, e.g. eqxrl.envs.from_brax(brax_env)), not "
            "`environment`."
        )
    return dict(brax_arguments)


def _with_brax_defaults(
    algorithm: str,
    arguments: dict[str, Any],
    defaults: Mapping[str, Any],
    default_only: Mapping[str, Any],
    unused: frozenset[str],
) -> dict[str, Any]:
    """The trainer's arguments (its network's already popped) with Brax's
    `defaults` for those left out, after refusing any other value than Brax's
    default for `default_only` (what eqxrl does), dropping the `unused` ones and
    refusing unknown ones; `num_timesteps` is required."""
    caller = f"{algorithm}.from_brax_hyperparameters"
    for name, default in default_only.items():
        value = arguments.pop(name, default)
        if name == "learning_rate_schedule" and value is not None:
            # Brax's LRSchedule enum or its name; NONE is the default.
            value = None if str(getattr(value, "value", value)) == "NONE" else value
        if value is not default and value != default:
            raise ValueError(
                f"{caller}: {name}={value!r} has no eqxrl equivalent; only Brax's "
                f"default {default!r} is translated."
            )
    for name in unused:
        arguments.pop(name, None)
    unknown = sorted(set(arguments) - set(defaults) - {"num_timesteps"})
    if unknown:
        raise ValueError(
            f"{caller}: {unknown} are not arguments of "
            f"brax.training.agents.{algorithm.lower()}.train that can be translated."
        )
    if "num_timesteps" not in arguments:
        raise ValueError(f"{caller}: num_timesteps is required.")
    return {**defaults, **arguments}


def brax_ppo_arguments(
    env: AbstractEnvironment,
    brax_arguments: Mapping[str, Any],
    activations: Mapping[str, Callable[..., Any]],
) -> dict[str, Any]:
    """The `PPO` keyword arguments that run Brax's `ppo.train(environment=env,
    **brax_arguments)`: the same environment steps per iteration, minibatches,
    passes and total steps, and the same policy (see
    `PPO.from_brax_hyperparameters`)."""
    arguments = _copied_arguments("PPO", brax_arguments)
    network = dict(BRAX_NETWORK_DEFAULTS)
    network.update(
        _network_arguments(
            "PPO",
            arguments.pop("network_factory", None),
            "make_ppo_networks",
            "policy_hidden_layer_sizes, value_hidden_layer_sizes, activation",
        )
    )
    for name in BRAX_NETWORK_DEFAULTS:
        if name in arguments:
            network[name] = arguments.pop(name)
    unknown_network = sorted(set(network) - set(BRAX_NETWORK_DEFAULTS))
    if unknown_network:
        raise ValueError(
            f"PPO.from_brax_hyperparameters: make_ppo_networks arguments "
            f"{unknown_network} cannot be translated (only "
            f"{sorted(BRAX_NETWORK_DEFAULTS)} can)."
        )
    if network["distribution_type"] != "tanh_normal":
        raise ValueError(
            "PPO.from_brax_hyperparameters: only distribution_type='tanh_normal' "
            f"(Brax's default) is translated, got {network['distribution_type']!r}."
        )
    brax = _with_brax_defaults(
        "PPO", arguments, BRAX_PPO_DEFAULTS, DEFAULT_ONLY, HOST_ARGUMENTS | IGNORED
    )

    env = _time_limited("PPO", env, brax)
    num_envs, batch_size = brax["num_envs"], brax["batch_size"]
    num_minibatches, unroll_length = brax["num_minibatches"], brax["unroll_length"]
    if (batch_size * num_minibatches) % num_envs:
        raise ValueError(
            f"PPO.from_brax_hyperparameters: batch_size * num_minibatches = "
            f"{batch_size * num_minibatches} must be a multiple of num_envs="
            f"{num_envs} (Brax asserts the same)."
        )
    # Brax collects batch_size * num_minibatches unrolls of unroll_length steps per
    # training step, num_envs at a time: each environment runs
    # batch_size * num_minibatches / num_envs unrolls back to back.
    num_steps = unroll_length * (batch_size * num_minibatches // num_envs)
    steps_per_iteration = num_envs * num_steps
    # Brax runs its training steps in max(num_evals - 1, 1) epochs of equally many
    # steps, rounding up: the same number of environment steps here.
    epochs = max(brax["num_evals"] - 1, 1) * max(brax["num_resets_per_eval"], 1)
    iterations = epochs * math.ceil(
        brax["num_timesteps"] / (epochs * steps_per_iteration)
    )
    if iterations < 1:
        raise ValueError(
            f"PPO.from_brax_hyperparameters: num_timesteps={brax['num_timesteps']} "
            "runs no training step."
        )
    clip_value = brax["clipping_epsilon_value"]
    if clip_value is not None and clip_value != brax["clipping_epsilon"]:
        raise ValueError(
            f"PPO.from_brax_hyperparameters: clipping_epsilon_value={clip_value} "
            "differs from clipping_epsilon; eqxrl's PPO clips values by clip_eps "
            "(clip_value_loss) or not at all."
        )
    max_grad_norm = brax["max_grad_norm"]
    reward_scaling = brax["reward_scaling"]
    return dict(
        env=env,
        num_envs=num_envs,
        num_steps=num_steps,
        total_timesteps=iterations * steps_per_iteration,
        num_epochs=brax["num_updates_per_batch"],
        num_minibatches=num_minibatches,
        learning_rate=brax["learning_rate"],
        anneal_lr=False,
        gamma=brax["discounting"],
        gae_lambda=brax["gae_lambda"],
        clip_eps=brax["clipping_epsilon"],
        ent_coef=brax["entropy_cost"],
        vf_coef=brax["vf_loss_coefficient"],
        max_grad_norm=math.inf if max_grad_norm is None else max_grad_norm,
        clip_value_loss=clip_value is not None,
        normalize_advantages=brax["normalize_advantage"],
        normalize_observations=brax["normalize_observations"],
        # Brax merges each batch into its normalizer before the updates on it.
        update_observation_statistics_first=brax["normalize_observations"],
        reward_scale=None if reward_scaling == 1.0 else reward_scaling,
        hidden_sizes=tuple(network["policy_hidden_layer_sizes"]),
        critic_hidden_sizes=tuple(network["value_hidden_layer_sizes"]),
        activation=_activation_name(network["activation"], activations),
        squash_actions=True,
        state_dependent_std=True,
        std_parameterization="softplus",
        initialization="lecun_uniform",
    )


# `brax.training.agents.sac.train`'s defaults (Brax 0.14.2) for what is translated.
BRAX_SAC_DEFAULTS: dict[str, Any] = {
    "episode_length": None,
    "randomization_fn": None,
    "action_repeat": 1,
    "num_envs": 1,
    "learning_rate": 1e-4,
    "discounting": 0.9,
    "batch_size": 256,
    "num_evals": 1,
    "normalize_observations": False,
    "reward_scaling": 1.0,
    "tau": 0.005,
    "min_replay_size": 0,
    "max_replay_size": None,
    "grad_updates_per_step": 1,
}

# Brax's SAC tunes its temperature with its own Adam, at this fixed step size, from
# log(alpha) = 0, towards an entropy of -action_size / 2.
BRAX_SAC_ALPHA_LEARNING_RATE = 3e-4
BRAX_SAC_TARGET_ENTROPY_PER_ACTION = -0.5

# `make_sac_networks` arguments that are translated, with their defaults; the
# activation is ReLU, the only one eqxrl's SAC networks have.
BRAX_SAC_NETWORK_DEFAULTS: dict[str, Any] = {
    "hidden_layer_sizes": (256, 256),
    "activation": "relu",
}
SAC_DEFAULT_ONLY: dict[str, Any] = {
    "wrap_env": True,
    "wrap_env_fn": None,
    "restore_checkpoint_path": None,
    "policy_network_layer_norm": False,
    "q_network_layer_norm": False,
    "distribution_type": "tanh_normal",
}
SAC_HOST_ARGUMENTS = frozenset(
    {
        "seed",
        "max_devices_per_host",
        "num_eval_envs",
        "eval_env",
        "deterministic_eval",
        "progress_fn",
        "checkpoint_logdir",
    }
)


def _sac_network_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """The translated `make_sac_networks` keywords, popped from `arguments` (given
    directly or through `network_factory=functools.partial(make_sac_networks,
    ...)`); the default-only ones stay in `arguments` to be checked."""
    keywords = _network_arguments(
        "SAC",
        arguments.pop("network_factory", None),
        "make_sac_networks",
        "hidden_layer_sizes",
    )
    network = dict(BRAX_SAC_NETWORK_DEFAULTS)
    for name, value in keywords.items():
        if name in network:
            network[name] = value
        elif name in SAC_DEFAULT_ONLY:
            arguments.setdefault(name, value)
        else:
            raise ValueError(
                f"SAC.from_brax_hyperparameters: make_sac_networks argument {name!r} "
                f"cannot be translated (only {sorted(BRAX_SAC_NETWORK_DEFAULTS)} and "
                f"the defaults of {sorted(SAC_DEFAULT_ONLY)} can)."
            )
    for name in BRAX_SAC_NETWORK_DEFAULTS:
        if name in arguments:
            network[name] = arguments.pop(name)
    activation = network["activation"]
    if activation != "relu" and getattr(activation, "__name__", None) != "relu":
        raise ValueError(
            f"SAC.from_brax_hyperparameters: activation={activation!r}: eqxrl's SAC "
            "networks use ReLU (Brax's default), the only one translated."
        )
    return network


def brax_sac_arguments(
    env: AbstractEnvironment, brax_arguments: Mapping[str, Any]
) -> dict[str, Any]:
    """The `SAC` keyword arguments that run Brax's `sac.train(environment=env,
    **brax_arguments)`: the same environment steps, prefill, updates, minibatches
    and temperature (see `SAC.from_brax_hyperparameters`)."""
    caller = "SAC.from_brax_hyperparameters"
    arguments = _copied_arguments("SAC", brax_arguments)
    network = _sac_network_arguments(arguments)
    brax = _with_brax_defaults(
        "SAC", arguments, BRAX_SAC_DEFAULTS, SAC_DEFAULT_ONLY, SAC_HOST_ARGUMENTS
    )
    env = _time_limited("SAC", env, brax)

    num_envs, batch_size = brax["num_envs"], brax["batch_size"]
    # Brax first fills its buffer with min_replay_size steps (whole steps of every
    # environment), then runs max(num_evals - 1, 1) epochs of equally many training
    # steps, rounding up; each training step steps every environment once, then
    # takes grad_updates_per_step updates.
    prefill = math.ceil(brax["min_replay_size"] / num_envs) * num_envs
    epochs = max(brax["num_evals"] - 1, 1)
    training_steps = epochs * math.ceil(
        (brax["num_timesteps"] - prefill) / (epochs * num_envs)
    )
    if training_steps < 1:
        raise ValueError(
            f"{caller}: num_timesteps={brax['num_timesteps']} runs no training step "
            f"after the prefill of {prefill} steps (min_replay_size)."
        )
    buffer_size = brax["max_replay_size"] or brax["num_timesteps"]
    reward_scaling = brax["reward_scaling"]
    return dict(
        env=env,
        num_envs=num_envs,
        total_timesteps=prefill + training_steps * num_envs,
        buffer_size=buffer_size,
        # Updates start with the first training step after the prefill, which
        # collects its own num_envs steps first.
        learning_starts=max(prefill + num_envs, batch_size),
        train_frequency=1,
        gradient_steps=brax["grad_updates_per_step"],
        batch_size=batch_size,
        tau=brax["tau"],
        gamma=brax["discounting"],
        learning_rate=brax["learning_rate"],
        alpha=1.0,
        autotune_alpha=True,
        alpha_learning_rate=BRAX_SAC_ALPHA_LEARNING_RATE,
        target_entropy=BRAX_SAC_TARGET_ENTROPY_PER_ACTION
        * math.prod(env.action_space.shape),
        hidden_sizes=tuple(network["hidden_layer_sizes"]),
        normalize_observations=brax["normalize_observations"],
        reward_scale=None if reward_scaling == 1.0 else reward_scaling,
    )
