import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

import equinox as eqx
import jax
import jax.lax as lax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np
import optax
from jaxtyping import Array, Bool, Float, Int, Key, PRNGKeyArray, PyTree

from .._config import in_range
from .._filters import filter_scan
from .._random import split
from ..buffers import Transition
from ..distributions import DiagonalGaussian, MaskedCategorical
from ..envs import (
    AbstractEnvironment,
    AutoReset,
    Box,
    Dict,
    Discrete,
    EpisodeStatistics,
    TimeStep,
    num_agents_of,
    skip_action_checks,
)
from ..nn import (
    AbstractActorCritic,
    ActorCriticPolicy,
    MLPActorCritic,
    MLPGaussianActorCritic,
    MultiInputActorCritic,
    NormalizedActorCritic,
    RunningMeanStd,
    batch_size_hint,
    empty_observation_statistics,
    reset_carry,
    sequence_batch_hint,
    update_observation_statistics,
)
from ._base import injected_learning_rate
from ._brax_hyperparameters import brax_ppo_arguments
from ._checks import (
    check_actor_critic,
    refuse_auto_reset,
    refuse_multi_agent,
    samples_only_valid_actions,
)
from ._epochs import minibatch_epochs, take_rows
from ._metrics import episode_statistics, iteration_episode_metrics
from ._on_policy import AbstractOnPolicyAlgorithm
from ._purejaxrl_config import purejaxrl_ppo_arguments
from ._returns import compute_gae
from ._rollout import step_with_truncation_value
from ._row_blocks import cpu_row_blocks, map_over_row_blocks, mean_over_row_blocks
from ._schedules import learning_rate_schedule


def _key_tuple(name: str, keys: Any) -> tuple[str, ...] | None:
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


def _optional_tuple(sizes: Any) -> tuple[int, ...] | None:
    return None if sizes is None else tuple(sizes)


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


def _is_squashed(distribution: Any) -> bool:
    """Whether PPO stores this distribution's samples before the `tanh`."""
    return isinstance(distribution, DiagonalGaussian) and distribution.squash


class PPOState(eqx.Module):
    """Everything a PPO run carries from one iteration to the next.

    Environment fields are batched over `num_envs`.

    **Arguments:**

    - `model`: the actor-critic being trained.
    - `optimizer_state`: optax state of the optimizer.
    - `env_state`: state of every environment, `[num_envs, ...]` leaves.
    - `timestep`: the latest timestep of every environment.
    - `key`: the PRNG key for the next iteration.
    - `iteration`: how many iterations have run (int32).
    - `observation_statistics`: running observation statistics (with
      `normalize_observations`), else `None`: a `RunningMeanStd`, or for
      structured observations one per `Box` leaf in the observation's structure.
    - `return_statistics`: running statistics of the discounted return (with
      `normalize_rewards`), else `None`.
    - `discounted_returns`: each environment's running discounted return (with
      `normalize_rewards`), else `None`.
    - `carry`: with a recurrent network, each environment's carry as the network
      returned it at the latest step, `[num_envs, ...]` leaves (reset to the
      initial carry where `timestep` starts an episode, when the next step reads
      it), else `None`.
    """

    model: AbstractActorCritic
    optimizer_state: PyTree
    env_state: PyTree
    timestep: TimeStep
    key: PRNGKeyArray
    iteration: Int[Array, ""]
    observation_statistics: PyTree[RunningMeanStd | None] = None
    return_statistics: RunningMeanStd | None = None
    discounted_returns: Float[Array, " num_envs"] | None = None
    carry: PyTree[Array] | None = None


NetworkFactory = Callable[[AbstractEnvironment, PRNGKeyArray], AbstractActorCritic]


class PPO(AbstractOnPolicyAlgorithm[PPOState]):
    """Proximal policy optimization (clipped surrogate), discrete or continuous.

    One iteration collects `num_steps` steps from each of `num_envs` auto-resetting
    environments, computes GAE advantages (bootstrapping through truncation), then runs
    `num_epochs` passes of `num_minibatches` minibatch updates. Action masks returned
    by the environment are stored with each transition and applied identically when
    acting and when updating (masked actions are never taken). Continuous (`Box`)
    action spaces get a diagonal Gaussian policy, optionally squashed by `tanh`
    with a state-dependent softplus scale as in Brax's PPO (`squash_actions`,
    `state_dependent_std`, `std_parameterization`; see
    [Continuous control](../continuous-control.md) and
    [`from_brax_hyperparameters`][eqxrl.PPO.from_brax_hyperparameters]).

    Sweepable numbers (`learning_rate`, `gamma`, `gae_lambda`, `clip_eps`, `ent_coef`,
    `vf_coef`, `max_grad_norm`, `reward_scale`) are float32 array leaves: build PPO
    inside `jax.vmap` over a batch of them to train a sweep in one compilation. The
    rest is static: changing it compiles a new program.

    **Arguments:**

    - `env`: the environment (one, not auto-resetting: PPO adds `AutoReset` and
      `EpisodeStatistics` itself).
    - `num_envs`: environments stepped in parallel.
    - `num_steps`: steps per environment per iteration.
    - `total_timesteps`: environment steps of the whole run; the run has
      `total_timesteps // (num_envs * num_steps)` iterations.
    - `num_epochs`: passes over each rollout.
    - `num_minibatches`: minibatches per pass; must divide `num_envs * num_steps`
      (with a recurrent network, whose minibatches are whole sequences, it must
      divide `num_envs`).
    - `learning_rate`: Adam step size.
    - `anneal_lr`: decay the learning rate linearly to zero over the run.
    - `gamma`: discount factor.
    - `gae_lambda`: GAE lambda.
    - `clip_eps`: PPO ratio clip (also the value clip).
    - `ent_coef`: entropy bonus coefficient.
    - `vf_coef`: value-loss coefficient.
    - `max_grad_norm`: global gradient-norm clip.
    - `clip_value_loss`: use the clipped value loss of the PPO paper's code.
    - `normalize_advantages`: standardize advantages per minibatch.
    - `normalize_observations`: normalize observations by running mean and variance,
      shared by all environments, frozen within an iteration and exported with the
      policy.
    - `normalize_rewards`: scale rewards by the running standard deviation of the
      discounted return (as Stable-Baselines3's `VecNormalize`).
    - `reward_scale`: multiply every reward by this constant before computing
      advantages and value targets (Brax's `reward_scaling`), so the critic learns
      scaled returns; reported episode returns stay unscaled. Applied before
      `normalize_rewards` (which then cancels it up to its clipping). `None`
      (default): rewards as they come.
    - `hidden_sizes`: widths of the default MLP layers. The default network is
      `MLPActorCritic` (`Discrete` actions) or `MLPGaussianActorCritic` (`Box`
      actions) for `Box` observations, and
      [`MultiInputActorCritic`][eqxrl.nn.MultiInputActorCritic] for structured
      (`Dict`, `Tuple`) or `Discrete` observations: one-hot discrete leaves, a CNN
      for image leaves, flattened vectors.
    - `actor_hidden_sizes`: widths of the default network's actor (policy) layers;
      `None`: `hidden_sizes`.
    - `critic_hidden_sizes`: widths of the default network's critic (value) layers;
      `None`: `hidden_sizes`. Brax's PPO uses `(32, 32, 32, 32)` and
      `(256, 256, 256, 256, 256)`.
    - `activation`: the default network's activation between layers: `"tanh"`
      (default), `"relu"`, `"swish"` (Brax's), `"elu"` or `"gelu"`.
    - `squash_actions`: (`Box` actions) squash the default network's Gaussian
      samples into `(-1, 1)` with `tanh`, as Brax's `NormalTanhDistribution`; the
      action space must be `[-1, 1]` (wrap it in
      [`RescaleAction`][eqxrl.envs.RescaleAction] otherwise). The rollout stores
      the sample before the `tanh`, so log-probabilities are exact (see
      [`DiagonalGaussian`][eqxrl.distributions.DiagonalGaussian]), and the entropy
      bonus uses the squashed distribution's one-sample estimate
      (`entropy_estimate`), as Brax does. This holds for any network whose
      distribution is a squashed `DiagonalGaussian`, `network_factory`'s included.
    - `state_dependent_std`: (`Box` actions) the default network's actor outputs
      the standard deviation's parameters too, instead of a learned vector.
    - `std_parameterization`: (`Box` actions) `"log"` (default: the parameter is
      the log-std) or `"softplus"` (the std is `softplus(parameter) + 0.001`, as
      Brax's); see [`MLPGaussianActorCritic`][eqxrl.nn.MLPGaussianActorCritic].
      Brax's PPO policy is `squash_actions=True, state_dependent_std=True,
      std_parameterization="softplus"`.
    - `initialization`: the default network's initial weights: `"orthogonal"`
      (default; PureJaxRL's and CleanRL's gains) or `"lecun_uniform"` (Brax's MLPs:
      every layer uniform in `+-sqrt(3 / fan_in)`, zero biases); see
      [`MLPActorCritic`][eqxrl.nn.MLPActorCritic].
    - `recompute_advantages`: at the start of every epoch, value the rollout's
      observations again with the critic as it is then and recompute the
      advantages and value targets from those values (Andrychowicz et al. 2021,
      "What Matters In On-Policy Reinforcement Learning?", recommend it; Brax
      recomputes them in every minibatch). `False` (default): once per
      iteration, with the values the rollout stored. It costs one pass of the
      critic over the rollout per epoch; a feed-forward critic only. On
      Playground's `CartpoleBalance` it did not help (see [Continuous
      control](../continuous-control.md#from-brax-to-eqxrl)).
    - `minibatch_environments`: each minibatch is the whole rollouts of
      `num_envs / num_minibatches` environments (as a recurrent network's always
      are, and as Brax's PPO draws its minibatches), instead of steps drawn from
      every environment (`False`, default). `num_minibatches` must divide
      `num_envs`.
    - `update_observation_statistics_first`: (with `normalize_observations`) merge
      the rollout's observations into the statistics before the epochs, as Brax's
      PPO does, so that every update (and the values `learn` computes) sees
      observations normalized by statistics that include them; the rollout's
      stored values and log-probabilities keep the statistics it acted with.
      `False` (default): after the epochs, so the updates see the statistics the
      rollout acted with and the first importance ratios are exactly one. On
      Playground's `CartpoleBalance` under randomization Brax's order solved more
      seeds (see [Continuous control](../continuous-control.md#from-brax-to-eqxrl));
      [`from_brax_hyperparameters`][eqxrl.PPO.from_brax_hyperparameters] sets it.
    - `actor_keys`: with a `Dict` observation space, the keys the default
      network's actor reads (e.g. `("state",)`); `None` reads all.
    - `critic_keys`: the keys the default network's critic reads (e.g.
      `("privileged_state",)` for an asymmetric actor-critic); `None` reads all.
    - `network_factory`: optional `factory(env, key) -> AbstractActorCritic` replacing
      the default MLP.
    - `observation_storage_dtype`: store rollout observations in this dtype (e.g.
      `jnp.uint8` or `jnp.bfloat16`) and cast them back to the environment's dtype
      before the network sees them in the update. Rollout memory for observations
      is `num_steps * num_envs * observation size * itemsize`, so `uint8` cuts it 4x
      from float32. Lossless only when every observation value is exact in the
      smaller dtype (e.g. 0/1 grids such as `Snake`'s); `None` (default) stores
      observations as they come.
    - `gradient_transform`: an optax transformation applied to every minibatch's
      gradients before the clip and Adam (e.g. `optax.add_noise(...)`);
      [`MAPPO`][eqxrl.multiagent.MAPPO] uses it to keep the agents' shared
      parameters in step. `None` (default): none.

    !!! example

        ```python
        env = eqxrl.envs.make("CartPole-v1")
        ppo = eqxrl.PPO(env=env, total_timesteps=500_000)
        state, metrics = ppo.train(jax.random.key(0))
        keys = jax.random.split(jax.random.key(0), 8)
        states, metrics = eqx.filter_vmap(ppo.train)(keys)  # 8 seeds, one program
        ```
    """

    # env, num_envs=4, num_steps=128, total_timesteps=500_000, num_epochs=4,
    # num_minibatches=4: AbstractOnPolicyAlgorithm's fields and defaults.
    learning_rate: Float[Array, ""] = eqx.field(
        default=2.5e-4, converter=in_range("learning_rate", 0.0, math.inf, finite=True)
    )
    anneal_lr: bool = eqx.field(static=True, default=True)
    gamma: Float[Array, ""] = eqx.field(
        default=0.99, converter=in_range("gamma", 0.0, 1.0)
    )
    gae_lambda: Float[Array, ""] = eqx.field(
        default=0.95, converter=in_range("gae_lambda", 0.0, 1.0)
    )
    clip_eps: Float[Array, ""] = eqx.field(
        default=0.2, converter=in_range("clip_eps", 0.0, math.inf)
    )
    ent_coef: Float[Array, ""] = eqx.field(
        default=0.01, converter=in_range("ent_coef", 0.0, math.inf, finite=True)
    )
    vf_coef: Float[Array, ""] = eqx.field(
        default=0.5, converter=in_range("vf_coef", 0.0, math.inf, finite=True)
    )
    max_grad_norm: Float[Array, ""] = eqx.field(
        default=0.5, converter=in_range("max_grad_norm", 0.0, math.inf)
    )
    clip_value_loss: bool = eqx.field(static=True, default=True)
    normalize_advantages: bool = eqx.field(static=True, default=True)
    normalize_observations: bool = eqx.field(static=True, default=False)
    normalize_rewards: bool = eqx.field(static=True, default=False)
    reward_scale: Float[Array, ""] | None = eqx.field(
        default=None,
        converter=in_range("reward_scale", 0.0, math.inf, finite=True, optional=True),
    )
    hidden_sizes: tuple[int, ...] = eqx.field(static=True, default=(64, 64))
    actor_hidden_sizes: tuple[int, ...] | None = eqx.field(
        static=True, default=None, converter=_optional_tuple
    )
    critic_hidden_sizes: tuple[int, ...] | None = eqx.field(
        static=True, default=None, converter=_optional_tuple
    )
    activation: Activation = eqx.field(static=True, default="tanh")
    squash_actions: bool = eqx.field(static=True, default=False)
    state_dependent_std: bool = eqx.field(static=True, default=False)
    std_parameterization: StdParameterization = eqx.field(static=True, default="log")
    network_factory: NetworkFactory | None = eqx.field(static=True, default=None)
    actor_keys: tuple[str, ...] | None = eqx.field(
        static=True, default=None, converter=lambda k: _key_tuple("actor_keys", k)
    )
    critic_keys: tuple[str, ...] | None = eqx.field(
        static=True, default=None, converter=lambda k: _key_tuple("critic_keys", k)
    )
    observation_storage_dtype: jnp.dtype | None = eqx.field(
        static=True,
        default=None,
        converter=lambda d: None if d is None else jnp.dtype(d),
    )
    gradient_transform: optax.GradientTransformation | None = eqx.field(
        static=True, default=None
    )
    initialization: Initialization = eqx.field(static=True, default="orthogonal")
    recompute_advantages: bool = eqx.field(static=True, default=False)
    minibatch_environments: bool = eqx.field(static=True, default=False)
    update_observation_statistics_first: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        for name in ("num_envs", "num_steps", "num_epochs", "num_minibatches"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"PPO: {name}={value!r} must be a positive integer.")
        batch_size = self.num_envs * self.num_steps
        if batch_size % self.num_minibatches:
            raise ValueError(
                f"PPO: num_envs * num_steps = {batch_size} is not divisible by "
                f"num_minibatches={self.num_minibatches}; choose num_minibatches "
                f"among the divisors of {batch_size} or change num_envs / num_steps."
            )
        if self.total_timesteps < batch_size:
            raise ValueError(
                f"PPO: total_timesteps={self.total_timesteps} is less than one "
                f"iteration (num_envs * num_steps = {batch_size}); raise "
                "total_timesteps or lower num_envs / num_steps."
            )
        for name in ("hidden_sizes", "actor_hidden_sizes", "critic_hidden_sizes"):
            sizes = getattr(self, name)
            if sizes is not None and any(
                not isinstance(w, int) or w < 1 for w in sizes
            ):
                raise ValueError(f"PPO: {name}={sizes} must be positive integers.")
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"PPO: activation={self.activation!r} is not one of "
                f"{sorted(ACTIVATIONS)}; for another, pass network_factory."
            )
        refuse_auto_reset("PPO", self.env)
        self._check_gaussian_options()
        if self.network_factory is None and not isinstance(
            self.env.action_space, Discrete | Box
        ):
            raise ValueError(
                f"PPO: the default network needs a Discrete or Box action space, got "
                f"{type(self.env.action_space).__name__}; pass network_factory."
            )
        if self.actor_keys is not None or self.critic_keys is not None:
            if self.network_factory is not None:
                raise ValueError(
                    "PPO: actor_keys / critic_keys choose what the default network "
                    "reads; with network_factory, pass them to your network instead."
                )
            space = self.env.observation_space
            if not isinstance(space, Dict):
                raise ValueError(
                    "PPO: actor_keys / critic_keys select keys of a Dict observation, "
                    f"but the observation space is {type(space).__name__}."
                )
            for name in ("actor_keys", "critic_keys"):
                keys = getattr(self, name)
                missing = [k for k in keys or () if k not in space.keys()]
                if missing:
                    raise ValueError(
                        f"PPO: {name}={keys} names {missing}, which the observation "
                        f"does not have; its keys are {space.keys()}."
                    )
        network = check_actor_critic(
            "PPO", self.env, self.make_network, self.network_factory
        )
        if self.update_observation_statistics_first and not self.normalize_observations:
            raise ValueError(
                "PPO: update_observation_statistics_first=True chooses when the "
                "observation statistics are updated; it needs "
                "normalize_observations=True."
            )
        if self.minibatch_environments and self.num_envs % self.num_minibatches:
            raise ValueError(
                "PPO: minibatch_environments=True draws minibatches of whole "
                f"environments: num_minibatches={self.num_minibatches} must divide "
                f"num_envs={self.num_envs}; choose num_minibatches among the "
                f"divisors of {self.num_envs}, or change num_envs."
            )
        # A multi-agent environment's learners (Independent) may have more
        # columns than worlds: Independent checks those.
        if (
            network.is_recurrent
            and num_agents_of(self.env) is None
            and self.num_envs % self.num_minibatches
        ):
            raise ValueError(
                f"PPO: the recurrent {type(network).__name__} learns from whole "
                "sequences, in minibatches of environments: num_minibatches="
                f"{self.num_minibatches} must divide num_envs={self.num_envs}; "
                f"choose num_minibatches among the divisors of {self.num_envs}, or "
                "change num_envs."
            )

    @classmethod
    def from_brax_hyperparameters(
        cls, env: AbstractEnvironment, **brax_arguments: Any
    ) -> "PPO":
        """PPO configured as Brax's `brax.training.agents.ppo.train(environment,
        **brax_arguments)` (Brax 0.14): the same environment steps per iteration,
        minibatch size, passes and total environment steps, and Brax's policy
        (tanh-squashed Gaussian with a softplus scale from the actor, swish
        layers of `(32,) * 4` for the policy and `(256,) * 5` for the value, from
        Brax's initial weights).

        Brax's hyperparameters, e.g. the published ones of its training notebook,
        go in unchanged: `PPO.from_brax_hyperparameters(env, **train_fn.keywords)`
        for a `functools.partial(ppo.train, ...)`. Arguments left out take Brax's
        defaults. The table of what becomes what (and what differs) is in
        [Continuous control](../continuous-control.md#from-brax-to-eqxrl). In short,
        with `U = unroll_length`, `B = batch_size`, `M = num_minibatches`,
        `E = num_envs`:

        - `num_steps = U * B * M / E`, so an iteration collects `B * M * U` steps
          (Brax's `env_step_per_training_step`); `num_minibatches = M` (minibatches
          of `B * U` transitions); `num_epochs = num_updates_per_batch`;
        - `total_timesteps`: the steps Brax runs, `num_timesteps` rounded up to
          whole training steps in each of its `max(num_evals - 1, 1)` epochs;
        - `discounting`, `entropy_cost`, `clipping_epsilon`, `reward_scaling`,
          `vf_loss_coefficient`, `normalize_advantage`, `max_grad_norm` (`None`:
          no clipping) become `gamma`, `ent_coef`, `clip_eps`, `reward_scale`,
          `vf_coef`, `normalize_advantages`, `max_grad_norm`; no learning-rate
          annealing; no value clipping unless `clipping_epsilon_value`;
        - `episode_length` adds a [`TimeLimit`][eqxrl.envs.TimeLimit] (Brax's
          `EpisodeWrapper`); the environment's actions must lie in `[-1, 1]`, as
          Brax's do (see [`from_brax`][eqxrl.envs.from_brax]);
        - `randomization_fn` (a Brax or Playground domain randomizer) wraps the
          time-limited environment in
          [`brax_randomization`][eqxrl.envs.brax_randomization] (drawn per
          episode, where Brax draws once per environment);
        - host-side arguments (`seed`, `num_evals` apart from the rounding above,
          `num_eval_envs`, `deterministic_eval`, `progress_fn`, ...) are accepted
          and not used; arguments with no eqxrl equivalent (`action_repeat != 1`,
          learning-rate schedules, vision, ...) raise a `ValueError` naming them.

        **Arguments:**

        - `env`: the eqxrl environment (e.g. `eqxrl.envs.from_brax(brax_env)`),
          without a time limit (`episode_length` adds it).
        - `**brax_arguments`: keyword arguments of Brax's `ppo.train`, and
          optionally `policy_hidden_layer_sizes`, `value_hidden_layer_sizes` and
          `activation` of its `make_ppo_networks` (directly, or as a
          `network_factory=functools.partial(make_ppo_networks, ...)`).

        **Returns:**

        The `PPO`.

        !!! example

            ```python
            # Brax's published settings for inverted_pendulum (training notebook).
            env = eqxrl.envs.from_brax("inverted_pendulum", backend="spring")
            ppo = eqxrl.PPO.from_brax_hyperparameters(
                env, num_timesteps=2_000_000, num_evals=20, reward_scaling=10,
                episode_length=1000, normalize_observations=True, action_repeat=1,
                unroll_length=5, num_minibatches=32, num_updates_per_batch=4,
                discounting=0.97, learning_rate=3e-4, entropy_cost=1e-2,
                num_envs=2048, batch_size=1024, seed=1,
            )
            ppo.num_steps, ppo.total_timesteps  # 80, 3_112_960 (as Brax runs)
            ```
        """
        return cls(**brax_ppo_arguments(env, brax_arguments, ACTIVATIONS))

    @classmethod
    def from_purejaxrl_config(
        cls, env: AbstractEnvironment, config: Mapping[str, Any], **overrides: Any
    ) -> "PPO":
        """PPO configured by a [PureJaxRL](https://github.com/luchris429/purejaxrl)
        PPO `config` dict (`purejaxrl/ppo.py`, `ppo_continuous_action.py`), or a
        [JaxMARL](https://github.com/FLAIROx/JaxMARL) IPPO one (e.g.
        `baselines/IPPO/config/ippo_ff_mpe.yaml`, which uses the same keys; wrap
        the result in [`Independent`][eqxrl.multiagent.Independent]).

        The keys become PPO's arguments (the table is in
        [Migrating from PureJaxRL][purejaxrl-config]):

        - `LR`, `NUM_ENVS`, `NUM_STEPS`, `TOTAL_TIMESTEPS` (a whole number: `5e5`
          is accepted), `UPDATE_EPOCHS`, `NUM_MINIBATCHES`, `GAMMA`, `GAE_LAMBDA`,
          `CLIP_EPS`, `ENT_COEF`, `VF_COEF`, `MAX_GRAD_NORM`, `ANNEAL_LR` become
          `learning_rate`, `num_envs`, `num_steps`, `total_timesteps`,
          `num_epochs`, `num_minibatches`, `gamma`, `gae_lambda`, `clip_eps`,
          `ent_coef`, `vf_coef`, `max_grad_norm`, `anneal_lr`;
        - `ACTIVATION` becomes `activation`, `"tanh"` or `"relu"` (the two
          PureJaxRL's network knows; it takes any other value for tanh, here an
          error);
        - `NORMALIZE_ENV` (PureJaxRL's continuous-action script) becomes
          `normalize_observations=True, normalize_rewards=True`;
        - `SCALE_CLIP_EPS` (JaxMARL) divides `clip_eps` by the agent count;
        - `NUM_UPDATES`, `MINIBATCH_SIZE` and `NUM_ACTORS`, which `make_train`
          derives and writes into the config, are checked: a `ValueError` where
          they disagree with the keys above (`MINIBATCH_SIZE` counts every agent's
          transitions, as JaxMARL's does);
        - `ENV_NAME`, `ENV_KWARGS`, `MAP_NAME`, `SEED`, `NUM_SEEDS`, `DEBUG`,
          `ENTITY`, `PROJECT`, `WANDB_MODE`, `DEVICE`, `DISABLE_JIT` are ignored:
          the environment is `env`, the seed is `train`'s key, the rest is the
          script's bookkeeping.

        The network is PPO's default MLP with PureJaxRL's layers: `(64, 64)` for
        `Discrete` actions (`ppo.py`, JaxMARL's feed-forward IPPO), `(256, 256)`
        for `Box` actions (`ppo_continuous_action.py`); the optimizer (Adam, eps
        1e-5, after global-norm clipping), the linear annealing, the clipped value
        loss and the per-minibatch advantage normalization are PPO's own, which
        are PureJaxRL's. A key left out takes PPO's default, which is the value of
        PureJaxRL's `ppo.py` CartPole config. Any other key (an RNN's
        `GRU_HIDDEN_DIM`, Overcooked's `REW_SHAPING_HORIZON`, ...) is a
        `ValueError` naming it. One difference stays: PureJaxRL's `done` merges
        termination and truncation, while eqxrl bootstraps through truncation
        (see [Migrating from PureJaxRL](../migrating-from-purejaxrl.md)).

        **Arguments:**

        - `env`: the eqxrl environment (e.g. `eqxrl.envs.from_gymnax(*gymnax.make(
          config["ENV_NAME"]))` or `eqxrl.envs.from_jaxmarl(config["ENV_NAME"],
          **config["ENV_KWARGS"])`).
        - `config`: the config dict, as written (JaxMARL's `make_train` divides
          `CLIP_EPS` in place under `SCALE_CLIP_EPS`: pass the config before).
        - `**overrides`: PPO keyword arguments that replace the translated ones or
          add to them (e.g. `network_factory=...`).

        **Returns:**

        The `PPO`.

        **Raises:**

        `ValueError` naming a key that cannot be translated, a count that is not a
        whole number, a flag that is not a bool, or a derived key that disagrees.

        !!! example

            ```python
            config = {"LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128,
                      "TOTAL_TIMESTEPS": 5e5, "UPDATE_EPOCHS": 4,
                      "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95,
                      "CLIP_EPS": 0.2, "ENT_COEF": 0.01, "VF_COEF": 0.5,
                      "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh",
                      "ENV_NAME": "CartPole-v1", "ANNEAL_LR": True}
            env = eqxrl.envs.from_gymnax(*gymnax.make(config["ENV_NAME"]))
            ppo = eqxrl.PPO.from_purejaxrl_config(env, config)
            ppo.num_iterations  # 976, PureJaxRL's NUM_UPDATES
            ```
        """
        defaults = {
            field.name: field.default
            for field in dataclasses.fields(cls)
            if field.default is not dataclasses.MISSING
        }
        arguments = purejaxrl_ppo_arguments(env, config, defaults)
        return cls(env=env, **{**arguments, **overrides})

    @property
    def training_env(self) -> AbstractEnvironment:
        """The environment as PPO resets and steps it:
        `AutoReset(EpisodeStatistics(env))` (the rollout adds an `on_truncation`
        hook for the truncation bootstrap, which changes nothing else)."""
        return AutoReset(EpisodeStatistics(self.env))

    def make_network(self, key: PRNGKeyArray) -> AbstractActorCritic:
        """The initial actor-critic: `network_factory(env, key)` or the default MLP."""
        if self.network_factory is not None:
            return self.network_factory(self.env, key)
        action_space = self.env.action_space
        sizes = dict(
            hidden_sizes=self.actor_hidden_sizes or self.hidden_sizes,
            critic_hidden_sizes=self.critic_hidden_sizes or self.hidden_sizes,
            activation=ACTIVATIONS[self.activation],
            initialization=self.initialization,
        )
        gaussian = {}
        if isinstance(action_space, Box):
            gaussian = dict(
                state_dependent_std=self.state_dependent_std,
                squash=self.squash_actions,
                std_parameterization=self.std_parameterization,
            )
        if (
            not isinstance(self.env.observation_space, Box)
            or self.actor_keys is not None
            or self.critic_keys is not None
        ):
            return MultiInputActorCritic(
                self.env.observation_space,
                action_space,
                actor_keys=self.actor_keys,
                critic_keys=self.critic_keys,
                **sizes,
                **gaussian,
                key=key,
            )
        if isinstance(action_space, Box):
            return MLPGaussianActorCritic.from_env(self.env, key, **sizes, **gaussian)
        return MLPActorCritic.from_env(self.env, key, **sizes)

    def _check_gaussian_options(self) -> None:
        """The default network's options: not with `network_factory`; the Gaussian
        ones for `Box` actions only, `squash_actions` for `[-1, 1]` bounds."""
        network_options = [
            name
            for name, default in (
                ("actor_hidden_sizes", None),
                ("critic_hidden_sizes", None),
                ("activation", "tanh"),
                ("squash_actions", False),
                ("state_dependent_std", False),
                ("std_parameterization", "log"),
                ("initialization", "orthogonal"),
            )
            if getattr(self, name) != default
        ]
        if self.network_factory is not None and network_options:
            raise ValueError(
                f"PPO: {', '.join(network_options)} only apply to the default "
                "network; with network_factory, build your network with them "
                "instead."
            )
        if self.initialization not in ("orthogonal", "lecun_uniform"):
            raise ValueError(
                f"PPO: initialization={self.initialization!r} must be 'orthogonal' "
                "or 'lecun_uniform'."
            )
        if self.std_parameterization not in ("log", "softplus"):
            raise ValueError(
                f"PPO: std_parameterization={self.std_parameterization!r} must be "
                "'log' or 'softplus'."
            )
        gaussian_options = [
            name
            for name in (
                "squash_actions",
                "state_dependent_std",
                "std_parameterization",
            )
            if name in network_options
        ]
        space = self.env.action_space
        if gaussian_options and not isinstance(space, Box):
            raise ValueError(
                f"PPO: {', '.join(gaussian_options)} only apply to a Gaussian policy "
                f"(a Box action space); the action space is {type(space).__name__}."
            )
        if self.squash_actions:
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

    def acting_model(
        self, model: AbstractActorCritic, statistics: PyTree[RunningMeanStd | None]
    ) -> AbstractActorCritic:
        """The model as it sees raw observations: behind the observation normalizer
        when there is one."""
        if statistics is None:
            return model
        return NormalizedActorCritic(model, statistics)

    def make_optimizer(self) -> optax.GradientTransformation:
        """`gradient_transform` (if any), then global-norm clipping and Adam with
        the (optionally annealed) step size injected so that it is logged and
        sweepable, over the parameters flattened into one vector (`optax.flatten`).
        The annealed step size decays linearly to zero at `num_iterations` and
        stays zero after."""
        schedule = learning_rate_schedule(
            self.learning_rate,
            anneal=self.anneal_lr,
            decay_steps=self.num_iterations,
            updates_per_step=self.num_epochs * self.num_minibatches,
        )
        # Flattened: clipping and Adam run on one vector instead of once per
        # parameter array, far fewer (tiny) operations per minibatch update.
        optimizer = optax.flatten(
            optax.chain(
                optax.clip_by_global_norm(self.max_grad_norm),
                optax.inject_hyperparams(
                    optax.adam, static_args=("b1", "b2", "eps", "eps_root")
                )(learning_rate=schedule, eps=1e-5),
            )
        )
        if self.gradient_transform is None:
            return optimizer
        return optax.chain(self.gradient_transform, optimizer)

    def current_learning_rate(self, optimizer_state: PyTree) -> Float[Array, ""]:
        """The step size of the latest update, from `make_optimizer`'s state."""
        return injected_learning_rate(optimizer_state)

    def init(self, key: PRNGKeyArray) -> PPOState:
        refuse_multi_agent("PPO", self.env)
        network_key, reset_key, state_key = jr.split(key, 3)
        model, optimizer_state = self._initial_model(network_key)
        env_state, timestep = jax.vmap(self.training_env.reset)(
            jr.split(reset_key, self.num_envs)
        )
        return self._initial_state(
            model, optimizer_state, env_state, timestep, state_key
        )

    def init_learner(self, key: PRNGKeyArray, timestep: TimeStep) -> PPOState:
        """The state of a learner that does not step environments itself (one agent
        of a multi-agent environment, see
        [`Independent`][eqxrl.multiagent.Independent]): a new actor-critic, its
        optimizer state and empty running statistics, with `env_state = None`.

        **Arguments:**

        - `key`: a PRNG key (the network's initial weights, and the state's key).
        - `timestep`: the learner's view of the first timestep of every environment
          it learns from, `[num_columns, ...]` leaves.

        **Returns:**

        A [`PPOState`][eqxrl.algorithms.PPOState].
        """
        network_key, state_key = jr.split(key)
        model, optimizer_state = self._initial_model(network_key)
        return self._initial_state(model, optimizer_state, None, timestep, state_key)

    def _initial_model(self, key: PRNGKeyArray) -> tuple[AbstractActorCritic, PyTree]:
        model = self.make_network(key)
        optimizer_state = self.make_optimizer().init(eqx.filter(model, eqx.is_array))
        return model, optimizer_state

    def _initial_state(
        self,
        model: AbstractActorCritic,
        optimizer_state: PyTree,
        env_state: PyTree,
        timestep: TimeStep,
        key: PRNGKeyArray,
    ) -> PPOState:
        observation_statistics = return_statistics = discounted_returns = None
        if self.normalize_observations:
            observation_statistics = empty_observation_statistics(
                self.env.observation_space
            )
        if self.normalize_rewards:
            return_statistics = RunningMeanStd.zeros(())
            num_columns = timestep.reward.shape[0]
            discounted_returns = jnp.zeros(num_columns, jnp.float32)
        carry = None
        if model.is_recurrent:
            num_columns = timestep.reward.shape[0]
            carry = jtu.tree_map(
                lambda x: jnp.broadcast_to(x, (num_columns, *x.shape)),
                model.initial_carry(),
            )
        return PPOState(
            model=model,
            optimizer_state=optimizer_state,
            env_state=env_state,
            timestep=timestep,
            key=key,
            iteration=jnp.int32(0),
            observation_statistics=observation_statistics,
            return_statistics=return_statistics,
            discounted_returns=discounted_returns,
            carry=carry,
        )

    def environment_axes(self, state: PPOState) -> PyTree[int]:
        """Environments come first in the environment states, the timesteps, the
        running discounted returns of reward normalization and the recurrent
        carries."""
        axes = super().environment_axes(state)
        if state.discounted_returns is not None:
            axes = eqx.tree_at(lambda tree: tree.discounted_returns, axes, 0)
        if state.carry is not None:
            axes = eqx.tree_at(
                lambda tree: tree.carry,
                axes,
                jtu.tree_map(lambda _: 0, state.carry),
            )
        return axes

    def policy(self, state: PPOState, deterministic: bool = False) -> ActorCriticPolicy:
        model = self.acting_model(state.model, state.observation_statistics)
        return ActorCriticPolicy(model, deterministic)

    def _act(
        self,
        model: AbstractActorCritic,
        carry: PyTree[Array] | None,
        timestep: TimeStep,
        key: PRNGKeyArray,
    ) -> tuple[PyTree[Array] | None, Array, Array, Float[Array, ""], Float[Array, ""]]:
        """One environment: sample an action (`act` vmaps it over environments)."""
        if carry is not None:
            carry = reset_carry(
                carry,
                model.initial_carry(),
                timestep.terminated | timestep.truncated,
            )
        carry, distribution, value = model.step(
            carry, timestep.observation, timestep.action_mask
        )
        if _is_squashed(distribution):
            pre_squash, log_prob = distribution.sample_pre_squash_and_log_prob(key)
            return carry, pre_squash, jnp.tanh(pre_squash), log_prob, value
        action, log_prob = distribution.sample_and_log_prob(key)
        return carry, action, action, log_prob, value

    def act(
        self,
        model: AbstractActorCritic,
        timestep: TimeStep,
        keys: Key[Array, " n"],
        carry: PyTree[Array] | None = None,
    ) -> tuple[
        PyTree[Array] | None,
        PyTree[Array],
        PyTree[Array],
        Float[Array, " n"],
        Float[Array, " n"],
    ]:
        """Sample every environment's action, as each step of the rollout does.

        **Arguments:**

        - `model`: the acting model (`acting_model(state.model,
          state.observation_statistics)`).
        - `timestep`: the latest timestep of every environment, `[n, ...]` leaves.
        - `keys`: one PRNG key per environment, `[n]`.
        - `carry`: a recurrent network's carries, `[n, ...]` leaves, as it
          returned them at the previous step (`state.carry`); `None` for a
          feed-forward network. Where `timestep` starts an episode, the network
          reads its initial carry instead.

        **Returns:**

        `(carry, stored_action, action, log_prob, value)`, each `[n, ...]`: the
        carries after this step (`None` for a feed-forward network), what the
        rollout stores (for a squashed Gaussian the sample before the `tanh`, else
        the action), the action to step with, its log-probability and the
        critic's value.
        """
        return eqx.filter_vmap(self._act, in_axes=(None, 0, 0, 0))(
            model, carry, timestep, keys
        )

    def transition(
        self,
        timestep: TimeStep,
        stored_action: PyTree[Array],
        log_prob: Float[Array, " n"],
        value: Float[Array, " n"],
        next_timestep: TimeStep,
    ) -> Transition:
        """What the rollout stores of one step of every environment (`[n, ...]`
        leaves): `act`'s outputs, the step's reward and episode flags, the episode
        statistics, and the observation in `observation_storage_dtype`."""
        transition = jax.vmap(_transition)(
            timestep, stored_action, log_prob, value, next_timestep
        )
        return eqx.tree_at(
            lambda t: t.observation,
            transition,
            self._store_observation(transition.observation),
        )

    def _squashed_policy(self, state: PPOState) -> bool:
        """Whether the model's distribution is a squashed `DiagonalGaussian`, whose
        rollout stores samples before the `tanh` (decided from shapes: nothing
        runs)."""
        distribution, _ = eqx.filter_eval_shape(
            lambda model, timestep: jax.vmap(model)(
                timestep.observation, timestep.action_mask
            ),
            state.model,
            state.timestep,
        )
        return _is_squashed(distribution)

    def _store_observation(self, observation: PyTree[Array]) -> PyTree[Array]:
        """The observation as the rollout stores it (`observation_storage_dtype`):
        float leaves cast, integer (`Discrete`) leaves kept, since a state index
        cast to `uint8` would wrap past 255."""
        if self.observation_storage_dtype is None:
            return observation
        dtype = self.observation_storage_dtype

        def store(x: Array) -> Array:
            return x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x

        return jtu.tree_map(store, observation)

    def _restore_observation(self, observation: PyTree[Array]) -> PyTree[Array]:
        """Stored observations (any batch shape) cast back to the dtypes the
        environment returns."""
        if self.observation_storage_dtype is None:
            return observation
        _, timestep = jax.eval_shape(self.env.reset, jr.key(0))
        return jtu.tree_map(
            lambda x, like: x.astype(like.dtype), observation, timestep.observation
        )

    @property
    def compiler_options(self) -> dict[str, Any]:
        """On CPU, [`cpu_compiler_options()`][eqxrl.algorithms.cpu_compiler_options]
        and `xla_cpu_multi_thread_eigen=False`: the update's weight-gradient products
        (small matrices contracted over the minibatch) run on one thread instead of
        being split over XLA's thread pool, whose hand-offs cost more than they save
        at these sizes (about 4% faster on the contract CartPole config and with 8
        seeds vmapped; no change with 512 environments). Elsewhere, `{}`."""
        if jax.default_backend() != "cpu":
            return {}
        return {**super().compiler_options, "xla_cpu_multi_thread_eigen": False}

    def _collect(
        self, state: PPOState, key: PRNGKeyArray, *, next_observation: bool = False
    ) -> tuple[
        PyTree,
        TimeStep,
        PyTree[Array] | None,
        Transition,
        Float[Array, "num_steps num_envs"],
    ]:
        """Roll out `num_steps` steps of every environment.

        Returns the environments' states, timesteps and (recurrent networks)
        carries after the rollout, the transitions, and per step the critic's
        value of the final observation where the step truncated an episode (zero
        elsewhere): what GAE bootstraps from. A recurrent network's carry flows
        from step to step, reset where an episode starts; the truncated
        episode's final observation is valued with the carry of the episode's
        steps before it.

        With a `separate_critic` the critic is left out of the steps (XLA drops the
        unused value head) and evaluated once on all stored observations afterwards:
        the same values, as one large batch instead of `num_steps` small ones.
        With `next_observation` (static; off in PPO's own iterations), each
        transition's `extras["next_observation"]` is the observation its step
        reached, before any reset (where the episode ended, the final one): what
        [`AMP`][eqxrl.algorithms.AMP]'s discriminator reads.
        The steps are traced under `batch_size_hint(num_envs)` (on CPU, narrow
        policy layers of a handful of environments run without matrix products)
        and, when the policy samples valid actions only (a masked categorical over
        the checked number of actions, or a `Box` space), `skip_action_checks()`.
        """
        model = self.acting_model(state.model, state.observation_statistics)
        # A recurrent critic needs each step's carry: it stays in the steps.
        critic_after_rollout = model.separate_critic and not model.is_recurrent

        def step_environment(env_state, action, key, carry):
            def truncation_value(final: TimeStep) -> Float[Array, ""]:
                # GAE bootstraps a truncated episode from this value.
                return model.step_value(carry, final.observation)

            return step_with_truncation_value(
                self.env, truncation_value, env_state, action, key
            )

        step_environments = jax.vmap(step_environment)

        def step(carry, step_key):
            env_state, timestep, network_carry = carry
            # jax.random.split's keys, computed so that XLA fuses it.
            keys = split(step_key, (self.num_envs, 2))
            network_carry, stored_action, action, log_prob, value = self.act(
                model, timestep, keys[:, 0], network_carry
            )
            env_state, next_timestep, truncation_values = step_environments(
                env_state, action, keys[:, 1], network_carry
            )
            transition = self.transition(
                timestep, stored_action, log_prob, value, next_timestep
            )
            if critic_after_rollout:
                # The steps store no value (no placeholder to write at every
                # step); it is filled in after the rollout.
                transition = eqx.tree_at(lambda t: t.value, transition, None)
            if next_observation:
                # AutoReset's `final_observation` is the pre-reset observation on
                # every step (the step's own observation where no episode ended).
                transition = eqx.tree_at(
                    lambda t: t.extras,
                    transition,
                    {
                        **transition.extras,
                        "next_observation": next_timestep.extras["final_observation"],
                    },
                )
            return (env_state, next_timestep, network_carry), (
                transition,
                truncation_values,
            )

        with self.rollout_context(model, self.num_envs):
            (env_state, timestep, carry), (transitions, truncation_values) = (
                filter_scan(
                    step,
                    (state.env_state, state.timestep, state.carry),
                    split(key, self.num_steps),
                )
            )
        if critic_after_rollout:
            values = self._rollout_values(model, transitions.observation)
            transitions = eqx.tree_at(
                lambda t: t.value, transitions, values, is_leaf=lambda x: x is None
            )
        return env_state, timestep, carry, transitions, truncation_values

    def _rollout_values(
        self, model: AbstractActorCritic, observations: PyTree[Array]
    ) -> Float[Array, "num_steps n"]:
        """A feed-forward critic's values of a rollout's stored observations
        (`[num_steps, n, ...]` leaves), as one batch of rows (on CPU, in blocks
        that stay in cache)."""
        observations = self._restore_observation(observations)
        num_steps, num_columns = jtu.tree_leaves(observations)[0].shape[:2]
        num_rows = num_steps * num_columns
        rows = jtu.tree_map(lambda x: x.reshape(num_rows, *x.shape[2:]), observations)
        values = map_over_row_blocks(
            jax.vmap(model.value), (rows,), cpu_row_blocks(num_rows, model)
        )
        return values.reshape(num_steps, num_columns)

    def _loss(
        self,
        model: AbstractActorCritic,
        observation_statistics: PyTree[RunningMeanStd | None],
        batch: Transition,
        advantages: Float[Array, "*minibatch"],
        returns: Float[Array, "*minibatch"],
        noise: Float[Array, "..."] | None = None,
        carry: PyTree[Array] | None = None,
    ) -> tuple[Float[Array, ""], dict[str, Array]]:
        """The PPO loss of a minibatch, or of a block of its rows: every term is a
        mean over rows, and `advantages` come normalized over the whole minibatch.
        For a squashed Gaussian policy, `noise` (standard normal, one draw per action
        entry) samples the estimate of the squashed distribution's entropy; `None`
        otherwise. A recurrent network's minibatch is `[num_steps, n]` sequences,
        replayed from `carry` (see `replay`)."""
        network = self.acting_model(model, observation_statistics)
        if carry is None:

            def evaluate(observation, action_mask, action, noise):
                observation = self._restore_observation(observation)
                distribution, value = network(observation, action_mask)
                return self._judge(distribution, value, action_mask, action, noise)

            log_prob, entropy, max_entropy, value = jax.vmap(evaluate)(
                batch.observation, batch.action_mask, batch.action, noise
            )
        else:
            log_prob, entropy, max_entropy, value = self.replay(
                network, carry, batch, noise
            )
        log_ratio = log_prob - batch.log_prob
        ratio = jnp.exp(log_ratio)
        clipped_ratio = jnp.clip(ratio, 1.0 - self.clip_eps, 1.0 + self.clip_eps)
        policy_loss = -jnp.minimum(ratio * advantages, clipped_ratio * advantages)
        policy_loss = policy_loss.mean()
        value_error = jnp.square(value - returns)
        if self.clip_value_loss:
            clipped_value = batch.value + jnp.clip(
                value - batch.value, -self.clip_eps, self.clip_eps
            )
            value_error = jnp.maximum(value_error, jnp.square(clipped_value - returns))
        value_loss = 0.5 * value_error.mean()
        entropy = entropy.mean()
        total_loss = policy_loss + self.vf_coef * value_loss - self.ent_coef * entropy
        statistics = {
            "total_loss": total_loss,
            "policy_loss": policy_loss,
            "value_loss": value_loss,
            "entropy": entropy,
            "approx_kl": jnp.mean((ratio - 1.0) - log_ratio),
            "clip_fraction": jnp.mean(
                (jnp.abs(ratio - 1.0) > self.clip_eps).astype(jnp.float32)
            ),
        }
        if isinstance(self.env.action_space, Discrete):
            statistics["max_entropy"] = max_entropy.mean()
        return total_loss, statistics

    def _judge(
        self,
        distribution: Any,
        value: Float[Array, ""],
        action_mask: Bool[Array, " num_actions"] | None,
        action: Array,
        noise: Array | None,
    ) -> tuple[Array, Array, Array, Array]:
        """One stored step's action judged by the network's new outputs: its
        log-probability, the entropy, the entropy of the uniform policy over the
        valid actions (NaN for `Box` actions) and the value."""
        if isinstance(distribution, MaskedCategorical):
            # The entropy of the uniform distribution over the valid actions
            # (all actions when none or all are masked, as MaskedCategorical
            # treats them).
            num_actions = distribution.categorical.logits.shape[-1]
            num_valid = num_actions if action_mask is None else action_mask.sum()
            num_valid = jnp.where(num_valid > 0, num_valid, num_actions)
            max_entropy = jnp.log(jnp.asarray(num_valid, jnp.float32))
        else:
            max_entropy = jnp.float32(jnp.nan)
        if _is_squashed(distribution):
            # The rollout stored the sample before the tanh (see `_act`).
            entropy = distribution.entropy_estimate(noise)
            log_prob = distribution.log_prob_pre_squash(action)
            return log_prob, entropy, max_entropy, value
        entropy = distribution.entropy()
        return distribution.log_prob(action), entropy, max_entropy, value

    def starting_carries(
        self,
        model: AbstractActorCritic,
        carry: PyTree[Array] | None,
        timestep: TimeStep,
    ) -> PyTree[Array] | None:
        """The carries a network reads `timestep`'s observations with (`[n, ...]`
        leaves): its initial carry where an observation starts an episode (the
        timestep of a terminated or truncated step, which `AutoReset` shows with
        the next episode's first observation), else `carry`. `None`
        (feed-forward) stays `None`.

        **Arguments:**

        - `model`: the network.
        - `carry`: the carries it returned at the previous step, `[n, ...]`.
        - `timestep`: the timesteps about to be read, `[n, ...]` leaves.

        **Returns:**

        The carries, `[n, ...]` leaves.
        """
        if carry is None:
            return None
        return jax.vmap(reset_carry, in_axes=(0, None, 0))(
            carry, model.initial_carry(), timestep.terminated | timestep.truncated
        )

    def replay(
        self,
        network: AbstractActorCritic,
        carry: PyTree[Array],
        sequences: Transition,
        noise: Array | None = None,
    ) -> tuple[
        Float[Array, "num_steps n"],
        Float[Array, "num_steps n"],
        Float[Array, "num_steps n"],
        Float[Array, "num_steps n"],
    ]:
        """A recurrent network re-reads stored sequences (backpropagation through
        time goes through this): from `carry`, step by step, with the carry reset
        where `sequences.extras["episode_start"]` says an episode starts, as the
        rollout did.

        **Arguments:**

        - `network`: the acting model (behind the observation normalizer, if any).
        - `carry`: the carries the sequences' first step was read with, `[n, ...]`.
        - `sequences`: transitions `[num_steps, n, ...]`, with
          `extras["episode_start"]` (bool `[num_steps, n]`).
        - `noise`: for a squashed Gaussian, standard normal `[num_steps, n, ...]`
          samples of the entropy estimate; else `None`.

        **Returns:**

        `(log_prob, entropy, max_entropy, value)`, each `[num_steps, n]`: the
        stored actions' log-probabilities, the entropies, the uniform policy's
        entropies (NaN for `Box` actions) and the values.
        """
        observations = self._restore_observation(sequences.observation)
        # Each environment's sequence unrolled (batched over environments): time
        # stays the leading axis.
        _, distributions, values = jax.vmap(
            network.unroll, in_axes=(0, 1, 1, 1), out_axes=(0, 1, 1)
        )(
            carry,
            observations,
            sequences.extras["episode_start"],
            sequences.action_mask,
        )
        judge = jax.vmap(
            jax.vmap(self._judge, in_axes=(0, 0, 0, 0, None if noise is None else 0)),
            in_axes=(0, 0, 0, 0, None if noise is None else 0),
        )
        return judge(
            distributions, values, sequences.action_mask, sequences.action, noise
        )

    def train_iteration(self, state: PPOState) -> tuple[PPOState, dict[str, Array]]:
        """One rollout of `num_steps` x `num_envs` steps, then the PPO updates.

        **Returns:**

        `(state, metrics)` with scalar metrics: `episode_return` (mean undiscounted
        return of the episodes that ended during the iteration, NaN when none did),
        `episode_length`, `episode_count`, the losses (`total_loss`, `policy_loss`,
        `value_loss`), `entropy`, `approx_kl`, `clip_fraction` (averaged over all
        minibatch updates) and `learning_rate` (of this iteration's last update);
        and the environment's own metrics, from `extras["env_metrics"]`
        ([`ENV_METRICS`][eqxrl.envs.ENV_METRICS]: e.g. the parameters a
        [`DomainRandomization`][eqxrl.envs.DomainRandomization] samples), averaged
        over every step of every environment.
        """
        key, collect_key, update_key = split(state.key, 3)
        state, transitions, truncation_values, segment_carry = self.rollout(
            state, collect_key
        )
        state = eqx.tree_at(lambda s: s.key, state, key)
        return self.learn(
            state, transitions, truncation_values, update_key, segment_carry
        )

    def rollout(
        self,
        state: PPOState,
        key: PRNGKeyArray,
        *,
        next_observation: bool = False,
    ) -> tuple[PPOState, Transition, Float[Array, "num_steps n"], PyTree | None]:
        """An iteration's rollout: `num_steps` steps of every environment with the
        current policy.

        **Arguments:**

        - `state`: the training state before the rollout.
        - `key`: the rollout's PRNG key (actions and environment steps).
        - `next_observation`: (static) also keep, in each transition's
          `extras["next_observation"]`, the observation its step reached before
          any reset (the final one where an episode ended): what
          [`AMP`][eqxrl.algorithms.AMP]'s discriminator reads.

        **Returns:**

        `(state, transitions, truncation_values, segment_carry)`: the state with
        the environments, latest timesteps and carries after the rollout (its key
        unchanged), and what [`learn`][eqxrl.PPO.learn] takes: the stacked
        transitions `[num_steps, n, ...]`, the truncation values, and a recurrent
        network's carries at the rollout's first step (`None` otherwise).
        """
        env_state, timestep, carry, transitions, truncation_values = self._collect(
            state, key, next_observation=next_observation
        )
        # The carries the rollout's first step read its observations with.
        segment_carry = self.starting_carries(state.model, state.carry, state.timestep)
        state = eqx.tree_at(
            lambda s: (s.env_state, s.timestep, s.carry),
            state,
            (env_state, timestep, carry),
            is_leaf=lambda x: x is None,
        )
        return state, transitions, truncation_values, segment_carry

    @contextlib.contextmanager
    def rollout_context(
        self, model: AbstractActorCritic, num_columns: int
    ) -> Iterator[None]:
        """What the rollout's steps are traced under:
        [`batch_size_hint`][eqxrl.nn.batch_size_hint]`(num_columns)` and, when the
        policy samples valid actions only (a masked categorical over the checked
        number of actions, or a `Box` space),
        [`skip_action_checks`][eqxrl.envs.skip_action_checks]`()`.

        **Arguments:**

        - `model`: the acting model.
        - `num_columns`: the environments stepped together.
        """
        checks = (
            skip_action_checks()
            if samples_only_valid_actions(model, self.env)
            else contextlib.nullcontext()
        )
        with batch_size_hint(num_columns), checks:
            yield

    def learn(
        self,
        state: PPOState,
        transitions: Transition,
        truncation_values: Float[Array, "num_steps n"],
        key: PRNGKeyArray,
        segment_carry: PyTree[Array] | None = None,
    ) -> tuple[PPOState, dict[str, Array]]:
        """Everything an iteration does after its rollout: the advantages (GAE),
        `num_epochs` passes of minibatch updates over the rollout, the running
        statistics and the metrics.

        A recurrent network learns by backpropagation through time over the
        whole rollout: each minibatch is a set of environments' sequences
        (`num_minibatches` must divide their number), replayed from
        `segment_carry` with the carry reset where an episode starts, as the
        rollout did.

        **Arguments:**

        - `state`: the state after the rollout (its `timestep` the rollout's last,
          whose value GAE bootstraps from).
        - `transitions`: the rollout, `[num_steps, n, ...]` leaves (`transition`'s,
          stacked).
        - `truncation_values`: per step, the critic's value of the final
          observation where the step truncated an episode, else zero.
        - `key`: the PRNG key of the updates (minibatch order).
        - `segment_carry`: a recurrent network's carries at the rollout's first
          step, as it read the first observations (`[n, ...]` leaves, already
          reset where those start episodes); `None` for a feed-forward network.

        **Returns:**

        `(state, metrics)`, with `state.iteration` one more; see `train_iteration`.
        """
        # The statistics the updates normalize observations by: the rollout's
        # own, or (Brax's order) those merged with the rollout's observations.
        observation_statistics = state.observation_statistics
        if (
            observation_statistics is not None
            and self.update_observation_statistics_first
        ):
            observation_statistics = self._updated_observation_statistics(
                observation_statistics, transitions
            )
        acting = self.acting_model(state.model, observation_statistics)
        recurrent = acting.is_recurrent
        if recurrent and segment_carry is None:
            raise ValueError(
                "PPO.learn: a recurrent network needs the carries its rollout "
                "started from (segment_carry)."
            )
        if recurrent and self.recompute_advantages:
            raise ValueError(
                "PPO: recompute_advantages=True needs a feed-forward critic (a "
                "recurrent one would replay every sequence at each epoch)."
            )
        last_carries = self.starting_carries(acting, state.carry, state.timestep)

        def next_state_values(acting, values):
            # The value of the state each step led to: the next step's value, the
            # last observation's after the rollout, and the final observation's
            # where an episode was truncated (AutoReset already shows the next
            # episode there; valued by the rollout's critic).
            last_value = jax.vmap(acting.step_value)(
                last_carries, state.timestep.observation
            )
            next_values = jnp.concatenate([values[1:], last_value[None]])
            return jnp.where(transitions.truncated, truncation_values, next_values)

        next_values = next_state_values(acting, transitions.value)
        rewards = transitions.reward
        if self.reward_scale is not None:
            rewards = rewards * self.reward_scale
        return_statistics = state.return_statistics
        discounted_returns = state.discounted_returns
        if self.normalize_rewards:
            rewards, return_statistics, discounted_returns = self._normalize_rewards(
                transitions, return_statistics, discounted_returns
            )

        def advantages_and_returns(values, next_values):
            return compute_gae(
                rewards,
                values,
                next_values,
                transitions.terminated,
                transitions.truncated,
                self.gamma,
                self.gae_lambda,
            )

        advantages, returns = advantages_and_returns(transitions.value, next_values)

        num_steps, num_columns = transitions.reward.shape
        batch_size = num_steps * num_columns
        minibatch_size = batch_size // self.num_minibatches
        flat = jtu.tree_map(
            lambda x: x.reshape(batch_size, *x.shape[2:]),
            (transitions, advantages, returns),
        )

        def current_advantages(model):
            # The advantages and value targets of the critic as it is now, the
            # rollout's observations valued once more.
            acting = self.acting_model(model, observation_statistics)
            values = self._rollout_values(acting, transitions.observation)
            advantages, returns = advantages_and_returns(
                values, next_state_values(acting, values)
            )
            return (
                flat[0],
                advantages.reshape(batch_size),
                returns.reshape(batch_size),
            )

        optimizer = self.make_optimizer()
        grad_fn = eqx.filter_value_and_grad(self._loss, has_aux=True)
        squashed = self._squashed_policy(state)
        if recurrent:
            # Minibatches of whole sequences: environments, not steps.
            sequences = self._sequences(transitions, advantages, returns)
        if recurrent or self.minibatch_environments:
            num_rows, minibatch_rows = num_columns, num_columns // self.num_minibatches
        else:
            num_rows, minibatch_rows = batch_size, minibatch_size

        def sequence_rows(rows, environments):
            sequences, carry = rows
            return (
                jtu.tree_map(lambda x: x[:, environments], sequences),
                jtu.tree_map(lambda x: x[environments], carry),
            )

        def environment_rows(x, environments):
            # The rows of whole environments' rollouts (rows are step-major).
            by_environment = x.reshape(num_steps, num_columns, *x.shape[1:])
            return by_environment[:, environments].reshape(-1, *x.shape[1:])

        def minibatch_update(carry, minibatch, noise_key):
            model, optimizer_state = carry
            if recurrent:
                (batch, batch_advantages, batch_returns), batch_carry = minibatch
            else:
                batch, batch_advantages, batch_returns = minibatch
            noise = None
            if squashed:
                noise = jr.normal(noise_key, batch.action.shape, jnp.float32)
            if self.normalize_advantages:
                batch_advantages = (batch_advantages - batch_advantages.mean()) / (
                    batch_advantages.std() + 1e-8
                )
            if recurrent:
                with sequence_batch_hint(minibatch_rows):
                    (_, statistics), grads = grad_fn(
                        model,
                        observation_statistics,
                        batch,
                        batch_advantages,
                        batch_returns,
                        noise,
                        batch_carry,
                    )
            else:
                # On CPU a large network takes a large minibatch in blocks of rows
                # that stay in cache; the loss is a mean over rows, so its
                # gradient is the mean of the blocks' gradients.
                (_, statistics), grads = mean_over_row_blocks(
                    lambda *rows: grad_fn(model, observation_statistics, *rows),
                    (batch, batch_advantages, batch_returns, noise),
                    cpu_row_blocks(minibatch_size, model),
                )
            updates, optimizer_state = optimizer.update(
                grads, optimizer_state, eqx.filter(model, eqx.is_array)
            )
            model = eqx.apply_updates(model, updates)
            return (model, optimizer_state), statistics

        if recurrent:
            rows, gather = (sequences, segment_carry), sequence_rows
        elif self.minibatch_environments:
            rows, gather = (
                flat,
                lambda rows, indices: jtu.tree_map(
                    lambda x: environment_rows(x, indices), rows
                ),
            )
        else:
            rows, gather = flat, take_rows
        (model, optimizer_state), statistics = minibatch_epochs(
            minibatch_update,
            (state.model, state.optimizer_state),
            rows,
            key,
            num_epochs=self.num_epochs,
            num_minibatches=self.num_minibatches,
            num_rows=num_rows,
            gather=gather,
            minibatch_keys=squashed,
            epoch_rows=(
                (lambda carry: current_advantages(carry[0]))
                if self.recompute_advantages
                else None
            ),
        )
        if (
            observation_statistics is not None
            and not self.update_observation_statistics_first
        ):
            observation_statistics = self._updated_observation_statistics(
                observation_statistics, transitions
            )
        metrics = jtu.tree_map(jnp.mean, statistics)
        metrics.update(episode_metrics(transitions))
        if transitions.action_mask is not None:
            taken_valid = jnp.take_along_axis(
                transitions.action_mask, transitions.action[..., None], axis=-1
            )
            metrics["invalid_action_count"] = jnp.sum(~taken_valid).astype(jnp.int32)
        metrics["learning_rate"] = self.current_learning_rate(optimizer_state)
        state = PPOState(
            model=model,
            optimizer_state=optimizer_state,
            env_state=state.env_state,
            timestep=state.timestep,
            key=state.key,
            iteration=state.iteration + 1,
            observation_statistics=observation_statistics,
            return_statistics=return_statistics,
            discounted_returns=discounted_returns,
            carry=state.carry,
        )
        return state, metrics

    def _updated_observation_statistics(
        self, statistics: PyTree[RunningMeanStd | None], transitions: Transition
    ) -> PyTree[RunningMeanStd | None]:
        """The observation statistics merged with every observation of the
        rollout."""
        observations = jtu.tree_map(
            lambda x: x.reshape(-1, *x.shape[2:]), transitions.observation
        )
        return update_observation_statistics(
            statistics, self._restore_observation(observations)
        )

    def _sequences(
        self,
        transitions: Transition,
        advantages: Float[Array, "num_steps n"],
        returns: Float[Array, "num_steps n"],
    ) -> tuple[Transition, Float[Array, "num_steps n"], Float[Array, "num_steps n"]]:
        """The rollout as sequences for a recurrent network: the transitions with
        `extras["episode_start"]`, whether each step's observation is the first
        of an episode (the step after a terminated or truncated one; the first
        step's carry comes reset already), and the advantages and returns."""
        done = transitions.terminated | transitions.truncated
        episode_start = jnp.concatenate([jnp.zeros_like(done[:1]), done[:-1]])
        if self.num_minibatches > done.shape[1] or done.shape[1] % self.num_minibatches:
            raise ValueError(
                "PPO: a recurrent network learns from whole sequences, in "
                "minibatches of environments: num_minibatches="
                f"{self.num_minibatches} must divide the {done.shape[1]} "
                "environments stepped together."
            )
        extras = {**transitions.extras, "episode_start": episode_start}
        transitions = eqx.tree_at(lambda t: t.extras, transitions, extras)
        return transitions, advantages, returns

    def _normalize_rewards(
        self,
        transitions: Transition,
        return_statistics: RunningMeanStd,
        discounted_returns: Float[Array, " num_envs"],
    ) -> tuple[
        Float[Array, "num_steps num_envs"], RunningMeanStd, Float[Array, " num_envs"]
    ]:
        """Rewards divided by the running std of the discounted return, which is
        accumulated per environment (restarting with each episode) and merged into
        the statistics first."""
        done = transitions.terminated | transitions.truncated

        def accumulate(running, step):
            reward, step_done = step
            running = running * self.gamma + reward
            return jnp.where(step_done, 0.0, running), running

        discounted_returns, returns_seen = lax.scan(
            accumulate, discounted_returns, (transitions.reward, done)
        )
        return_statistics = return_statistics.update(returns_seen.reshape(-1))
        scale = jnp.sqrt(return_statistics.var + 1e-8)
        rewards = jnp.clip(transitions.reward / scale, -10.0, 10.0)
        return rewards, return_statistics, discounted_returns


def episode_metrics(transitions: Transition) -> dict[str, Array]:
    """Mean return and length of the episodes that ended in a rollout, and their count,
    and the mean of each of the environment's own metrics
    ([`iteration_episode_metrics`][eqxrl.algorithms.iteration_episode_metrics] of
    the transitions).

    Means are NaN when no episode ended.
    """
    return iteration_episode_metrics(
        transitions.terminated | transitions.truncated, transitions.extras
    )


def _transition(
    timestep: TimeStep,
    action: Array,
    log_prob: Float[Array, ""],
    value: Float[Array, ""],
    next_timestep: TimeStep,
) -> Transition:
    """The transition of one environment from `timestep` to `next_timestep`."""
    return Transition(
        observation=timestep.observation,
        action=action,
        log_prob=log_prob,
        value=value,
        reward=next_timestep.reward,
        terminated=next_timestep.terminated,
        truncated=next_timestep.truncated,
        action_mask=timestep.action_mask,
        extras=episode_statistics(next_timestep),
    )
