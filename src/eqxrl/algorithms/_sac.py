import math
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.lax as lax
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree

from .._config import in_range
from ..buffers import ReplayBuffer, ReplaySample
from ..envs import AbstractEnvironment, TimeStep
from ..nn import (
    MLPTanhGaussianActor,
    MLPTwinCritic,
    RunningMeanStd,
    TanhGaussianPolicy,
)
from ._brax_hyperparameters import brax_sac_arguments
from ._checks import refuse_multi_agent
from ._off_policy import (
    AbstractOffPolicyActorCritic,
    polyak_update,
)


class SACState(eqx.Module):
    """Everything a SAC run carries from one iteration to the next.

    **Arguments:**

    - `actor`: the tanh-Gaussian actor being trained.
    - `critic`: the twin Q-critics being trained.
    - `target_critic`: their slowly updated (Polyak-averaged) copy that bootstrap
      targets use.
    - `log_alpha`: float32 log of the entropy temperature.
    - `actor_optimizer_state`, `critic_optimizer_state`: optax states of the
      actor's and the critics' optimizers.
    - `alpha_optimizer_state`: optax state of the temperature's optimizer (`None`
      unless `autotune_alpha`).
    - `buffer`: the replay buffer (actions stored in `(-1, 1)`, before rescaling to
      the action space's bounds).
    - `env_state`: state of every environment, `[num_envs, ...]` leaves.
    - `timestep`: the latest timestep of every environment.
    - `key`: the PRNG key for the next iteration.
    - `iteration`: how many iterations have run (int32).
    - `num_updates`: how many gradient steps have run (int32).
    - `observation_statistics`: running mean and variance of the collected
      observations (with `normalize_observations`), else `None`.
    """

    actor: MLPTanhGaussianActor
    critic: MLPTwinCritic
    target_critic: MLPTwinCritic
    log_alpha: Float[Array, ""]
    actor_optimizer_state: PyTree
    critic_optimizer_state: PyTree
    alpha_optimizer_state: PyTree
    buffer: ReplayBuffer
    env_state: PyTree
    timestep: TimeStep
    key: PRNGKeyArray
    iteration: Int[Array, ""]
    num_updates: Int[Array, ""]
    observation_statistics: RunningMeanStd | None = None


class _Learner(eqx.Module):
    """What a gradient step changes: the networks, the temperature and their
    optimizer states (the part of `SACState` the update loop carries)."""

    actor: MLPTanhGaussianActor
    critic: MLPTwinCritic
    target_critic: MLPTwinCritic
    log_alpha: Float[Array, ""]
    actor_optimizer_state: PyTree
    critic_optimizer_state: PyTree
    alpha_optimizer_state: PyTree


class SAC(AbstractOffPolicyActorCritic[SACState]):
    """Soft actor-critic (Haarnoja et al., 2018) for `Box` action spaces, with twin
    critics, target networks and an automatically tuned entropy temperature.

    Each iteration steps `num_envs` auto-resetting environments `train_frequency`
    times, stores every step in an on-device replay buffer, then (after
    `learning_starts` environment steps, collected with uniformly random actions)
    takes `gradient_steps` updates on uniformly sampled minibatches:

    - critics: the squared error of both `Q_k(s, a)` against
      `r + discount * (min_k Q_target,k(s', a') - alpha * log pi(a' | s'))`, with
      `a'` sampled from the actor. `discount` is zero after a termination but not
      after a truncation, which bootstraps from the episode's final observation;
    - actor: `alpha * log pi(a | s) - min_k Q_k(s, a)` with the updated critics and
      reparameterized samples `a = tanh(mean + std * noise)`, whose log-density
      includes the tanh change of variables
      ([`MLPTanhGaussianActor`][eqxrl.nn.MLPTanhGaussianActor]);
    - temperature (with `autotune_alpha`): `-log(alpha) * (log pi(a | s) +
      target_entropy)`, which raises `alpha` while the policy's entropy is below
      `target_entropy` and lowers it above;
    - target critics: Polyak averaging with `tau` every `target_update_interval`
      updates.

    The actor's actions lie in `(-1, 1)`; they are stored so in the buffer and seen
    so by the critics, and mapped linearly onto the action space's bounds (which must
    be finite) only when stepping the environment and in the exported policy
    ([`TanhGaussianPolicy`][eqxrl.nn.TanhGaussianPolicy]). A run has
    `total_timesteps // (num_envs * train_frequency)` iterations and
    `gradient_steps / (num_envs * train_frequency)` updates per environment step.

    The defaults (those of Stable-Baselines3's tuned SAC for Pendulum-v1: Adam at
    `1e-3`, batches of 256, `gamma = 0.99`, `tau = 0.005`, 256x256 ReLU networks, a
    target entropy of `-action_size`) learn Pendulum-v1: a mean return above -250
    on each of 4 seeds from 8k environment steps on (4 seeds vmapped in one
    program, 20k steps: 12 minutes on a shared 2-core CPU, where the 256-wide
    networks dominate; `hidden_sizes=(64, 64)` learns as fast per step at a
    fraction of the cost). Sweepable numbers (`learning_rate`, `gamma`, `tau`,
    `alpha`, `target_entropy`, `reward_scale`, `alpha_learning_rate`) are float32
    array leaves: build SAC inside
    `jax.vmap` over a batch of them to train a sweep in one compilation.

    **Arguments:**

    - `env`: the environment (one, a `Box` action space with finite bounds, `Box`
      observations, not auto-resetting: SAC adds `AutoReset` and
      `EpisodeStatistics` itself).
    - `num_envs`: environments stepped in parallel.
    - `total_timesteps`: environment steps of the whole run; the run has
      `total_timesteps // (num_envs * train_frequency)` iterations.
    - `buffer_size`: transitions the replay buffer keeps (at least
      `learning_starts` and `batch_size`).
    - `learning_starts`: environment steps collected (with uniformly random actions)
      before the first update.
    - `train_frequency`: steps of every environment per iteration.
    - `gradient_steps`: updates per iteration.
    - `batch_size`: transitions per update.
    - `target_update_interval`: updates between two target-critic updates.
    - `tau`: Polyak coefficient of the target update (`1`: a copy).
    - `gamma`: discount factor.
    - `learning_rate`: Adam step size of the actor and the critics (and of the
      temperature unless `alpha_learning_rate`).
    - `alpha`: the entropy temperature; with `autotune_alpha`, its initial value.
    - `autotune_alpha`: learn the temperature so that the policy's entropy tracks
      `target_entropy`.
    - `target_entropy`: the entropy the tuned temperature aims at; `None`:
      `-action_size` (minus the number of action entries).
    - `hidden_sizes`: widths of the hidden layers of the actor and of each critic.
    - `normalize_observations`: the networks see observations normalized by the
      running mean and variance of every observation collected so far (as Brax's
      SAC: each step acts with the statistics of the steps before it, and the
      updates use those of every step collected; the buffer keeps raw
      observations), exported with the policy.
    - `reward_scale`: multiply rewards by this constant in the critics' targets
      (Brax's `reward_scaling`), so the critics learn scaled returns; reported
      episode returns stay unscaled. `None` (default): rewards as they come.
    - `alpha_learning_rate`: Adam step size of the temperature; `None` (default):
      `learning_rate`.

    !!! example

        ```python
        env = eqxrl.envs.make("Pendulum-v1")
        sac = eqxrl.SAC(env=env, total_timesteps=20_000)
        state, metrics = sac.train(jax.random.key(0))
        keys = jax.random.split(jax.random.key(0), 4)
        states, metrics = eqx.filter_vmap(sac.train)(keys)  # 4 seeds, one program
        action = sac.policy(state, deterministic=True).act(observation, key)
        ```
    """

    learner_type: ClassVar[type[eqx.Module]] = _Learner
    update_metric_names: ClassVar[tuple[str, ...]] = (
        "critic_loss",
        "actor_loss",
        "q_value",
        "entropy",
    )
    # The target's next actions and the actor loss's reparameterized actions.
    noise_draws_per_update: ClassVar[int] = 2

    # The schedule's fields (`env` to `batch_size`) are the base's, at its defaults.
    target_update_interval: int = eqx.field(static=True, default=1)
    tau: Float[Array, ""] = eqx.field(
        default=0.005, converter=in_range("tau", 0.0, 1.0)
    )
    gamma: Float[Array, ""] = eqx.field(
        default=0.99, converter=in_range("gamma", 0.0, 1.0)
    )
    learning_rate: Float[Array, ""] = eqx.field(
        default=1e-3, converter=in_range("learning_rate", 0.0, math.inf, finite=True)
    )
    alpha: Float[Array, ""] = eqx.field(
        default=1.0, converter=in_range("alpha", 0.0, math.inf, finite=True)
    )
    autotune_alpha: bool = eqx.field(static=True, default=True)
    target_entropy: Float[Array, ""] | None = eqx.field(
        default=None,
        converter=in_range(
            "target_entropy", -math.inf, math.inf, finite=True, optional=True
        ),
    )
    hidden_sizes: tuple[int, ...] = eqx.field(static=True, default=(256, 256))
    normalize_observations: bool = eqx.field(static=True, default=False)
    reward_scale: Float[Array, ""] | None = eqx.field(
        default=None,
        converter=in_range("reward_scale", 0.0, math.inf, finite=True, optional=True),
    )
    alpha_learning_rate: Float[Array, ""] | None = eqx.field(
        default=None,
        converter=in_range(
            "alpha_learning_rate", 0.0, math.inf, finite=True, optional=True
        ),
    )

    def __check_init__(self):
        self.check_configuration("SAC", ("target_update_interval",))
        if (
            self.autotune_alpha
            and not isinstance(self.alpha, jax.core.Tracer)
            and float(self.alpha) == 0.0
        ):
            raise ValueError(
                "SAC: alpha=0.0 cannot be tuned (the temperature is learned as "
                "log(alpha)); give a positive initial alpha, or autotune_alpha=False "
                "for no entropy bonus."
            )

    # ------------------------------------------------------------------ config
    @classmethod
    def from_brax_hyperparameters(
        cls, env: AbstractEnvironment, **brax_arguments: Any
    ) -> "SAC":
        """The SAC that runs Brax's `brax.training.agents.sac.train(environment=env,
        **brax_arguments)`: the same environment steps, updates, minibatches,
        networks' sizes and temperature.

        Brax's hyperparameters, e.g. the published ones for hopper, go in
        unchanged; arguments left out take Brax's defaults. The table of what
        becomes what (and what differs) is in
        [Continuous control](../continuous-control.md#sac-from-brax-to-eqxrl). In
        short, with `E = num_envs`:

        - Brax prefills its buffer with `min_replay_size` steps (rounded up to
          whole steps of every environment) and then runs training steps that
          step every environment once and take `grad_updates_per_step` updates:
          `train_frequency = 1`, `gradient_steps = grad_updates_per_step`,
          `learning_starts` = the prefill plus one step of every environment (the
          first training step's), `total_timesteps` = the prefill plus
          `num_timesteps` rounded up to whole training steps in each of Brax's
          `max(num_evals - 1, 1)` epochs;
        - `batch_size`, `tau`, `discounting`, `learning_rate`,
          `normalize_observations`, `reward_scaling`, `max_replay_size` (`None`:
          `num_timesteps`) become `batch_size`, `tau`, `gamma`, `learning_rate`,
          `normalize_observations`, `reward_scale`, `buffer_size`;
        - the temperature as Brax tunes it: from `alpha = 1`, its own Adam at
          `3e-4` (`alpha_learning_rate`), towards an entropy of
          `-action_size / 2`;
        - `hidden_layer_sizes` of `make_sac_networks` (directly or through a
          `network_factory=functools.partial(make_sac_networks, ...)`) becomes
          `hidden_sizes`; ReLU as in Brax;
        - `episode_length` adds a [`TimeLimit`][eqxrl.envs.TimeLimit], and
          `randomization_fn` a [`brax_randomization`][eqxrl.envs.brax_randomization]
          around it (drawn per episode);
          host-side arguments (`seed`, `num_eval_envs`, `deterministic_eval`,
          `progress_fn`, ...) are accepted and not used; arguments with no eqxrl
          equivalent (`action_repeat != 1`, layer norms, ...) raise a `ValueError`
          naming them.

        **Arguments:**

        - `env`: the eqxrl environment (e.g. `eqxrl.envs.from_brax(brax_env)`),
          without a time limit (`episode_length` adds it).
        - `**brax_arguments`: keyword arguments of Brax's `sac.train`, and
          optionally `hidden_layer_sizes` of its `make_sac_networks`.

        **Returns:**

        The `SAC`.

        !!! example

            ```python
            # Brax's published SAC settings for hopper (training notebook).
            env = eqxrl.envs.from_brax("hopper", backend="spring")
            sac = eqxrl.SAC.from_brax_hyperparameters(
                env, num_timesteps=6_553_600, num_evals=20, reward_scaling=30,
                episode_length=1000, normalize_observations=True, action_repeat=1,
                discounting=0.997, learning_rate=6e-4, num_envs=128,
                batch_size=512, grad_updates_per_step=64, max_devices_per_host=1,
                max_replay_size=1048576, min_replay_size=8192, seed=1,
            )
            ```
        """
        return cls(**brax_sac_arguments(env, brax_arguments))

    @property
    def effective_target_entropy(self) -> Float[Array, ""]:
        """The entropy the tuned temperature aims at: `target_entropy`, or
        `-action_size` when it is `None`."""
        if self.target_entropy is None:
            return jnp.float32(-self.action_size)
        return self.target_entropy

    def make_networks(
        self, key: PRNGKeyArray
    ) -> tuple[MLPTanhGaussianActor, MLPTwinCritic]:
        """The initial actor and critics (the target critics start as a copy)."""
        actor_key, critic_key = jr.split(key)
        actor = MLPTanhGaussianActor(
            self.observation_size,
            self.action_size,
            hidden_sizes=self.hidden_sizes,
            key=actor_key,
        )
        critic = MLPTwinCritic(
            self.observation_size,
            self.action_size,
            hidden_sizes=self.hidden_sizes,
            key=critic_key,
        )
        return actor, critic

    def make_alpha_optimizer(self) -> optax.GradientTransformation:
        """Adam for the temperature, with step size `alpha_learning_rate` (or
        `learning_rate`)."""
        if self.alpha_learning_rate is None:
            return self.make_optimizer()
        return optax.adam(self.alpha_learning_rate)

    # ------------------------------------------------------------------ state
    def init(self, key: PRNGKeyArray) -> SACState:
        refuse_multi_agent("SAC", self.env, independent=False)
        network_key, reset_key, state_key = jr.split(key, 3)
        actor, critic = self.make_networks(network_key)
        optimizer = self.make_optimizer()
        log_alpha = jnp.log(self.alpha)
        env_state, timestep = self.reset_environments(reset_key)
        example = self.example_transition(timestep)
        return SACState(
            actor=actor,
            critic=critic,
            target_critic=critic,
            log_alpha=log_alpha,
            actor_optimizer_state=optimizer.init(eqx.filter(actor, eqx.is_array)),
            critic_optimizer_state=optimizer.init(eqx.filter(critic, eqx.is_array)),
            alpha_optimizer_state=(
                self.make_alpha_optimizer().init(log_alpha)
                if self.autotune_alpha
                else None
            ),
            buffer=ReplayBuffer.empty(example, self.buffer_capacity),
            env_state=env_state,
            timestep=timestep,
            key=state_key,
            iteration=jnp.int32(0),
            num_updates=jnp.int32(0),
            observation_statistics=self.empty_observation_statistics(),
        )

    def policy(
        self, state: SACState, deterministic: bool = False
    ) -> TanhGaussianPolicy:
        """The actor, sampling (or with `deterministic`, acting with `tanh(mean)`),
        on observations normalized as in training, its actions mapped onto the
        action space's bounds."""
        space = self.env.action_space
        return TanhGaussianPolicy(
            state.actor,
            space.low,
            space.high,
            deterministic,
            observation_statistics=state.observation_statistics,
        )

    # ------------------------------------------------------------------ losses
    def critic_target(
        self,
        actor: MLPTanhGaussianActor,
        target_critic: MLPTwinCritic,
        log_alpha: Float[Array, ""],
        batch: ReplaySample,
        noise: Float[Array, "batch_size action_size"],
    ) -> Float[Array, " batch_size"]:
        """The soft bootstrap target of each transition of a minibatch:
        `reward + discount * (min_k Q_target,k(s', a') - alpha * log pi(a' | s'))`
        with `a' = actor`'s sample at `s'` from `noise`.

        `discount` is the buffer's: `0` after a termination, `gamma` otherwise
        (a truncated episode bootstraps from its final observation). `reward` is
        multiplied by `reward_scale` when there is one.
        """
        sample = jax.vmap(actor.sample_and_log_prob)
        next_action, next_log_prob = sample(batch.next_observation, noise)
        next_q = jax.vmap(target_critic)(batch.next_observation, next_action)
        soft_value = jnp.min(next_q, axis=1) - jnp.exp(log_alpha) * next_log_prob
        reward = batch.reward
        if self.reward_scale is not None:
            reward = reward * self.reward_scale
        return reward + batch.discount * soft_value

    def actor_loss(
        self,
        actor: MLPTanhGaussianActor,
        critic: MLPTwinCritic,
        log_alpha: Float[Array, ""],
        observation: Float[Array, "batch_size ..."],
        noise: Float[Array, "batch_size action_size"],
    ) -> tuple[Float[Array, ""], Float[Array, " batch_size"]]:
        """`mean(alpha * log pi(a | s) - min_k Q_k(s, a))` over reparameterized
        samples `a` (from `noise`).

        **Returns:**

        `(loss, log_prob)`: the loss and the log-density of each sample.
        """
        action, log_prob = jax.vmap(actor.sample_and_log_prob)(observation, noise)
        q = jax.vmap(critic)(observation, action)
        loss = jnp.mean(jnp.exp(log_alpha) * log_prob - jnp.min(q, axis=1))
        return loss, log_prob

    def alpha_loss(
        self, log_alpha: Float[Array, ""], log_prob: Float[Array, " batch_size"]
    ) -> Float[Array, ""]:
        """`-log(alpha) * mean(log pi(a | s) + target_entropy)`: its gradient
        step raises `alpha` when the policy's entropy `-mean(log pi)` is below the
        target and lowers it when above."""
        target = self.effective_target_entropy
        return -log_alpha * jnp.mean(lax.stop_gradient(log_prob) + target)

    # -------------------------------------------------------------- iteration
    def exploration_action(
        self,
        actor: MLPTanhGaussianActor,
        observation: Float[Array, "..."],
        noise: Float[Array, " action_size"],
    ) -> Float[Array, " action_size"]:
        """The actor's sample at one observation, from standard normal `noise`."""
        return actor.sample_and_log_prob(observation, noise)[0]

    def iteration_metrics(
        self, state: SACState, collected: Int[Array, ""], statistics: dict[str, Array]
    ) -> dict[str, Array]:
        """`alpha`: the temperature after the iteration's updates."""
        return {"alpha": jnp.exp(state.log_alpha)}

    def gradient_step(
        self,
        learner: _Learner,
        batch: ReplaySample,
        noise: Float[Array, "2 batch_size action_size"],
        update_index: Int[Array, ""],
    ) -> tuple[_Learner, dict[str, Array]]:
        """One update of the critics, then the actor (against the updated critics),
        then the temperature, then (when due) the target critics."""
        optimizer = self.make_optimizer()

        def step(optimizer, params, grads, optimizer_state):
            updates, optimizer_state = optimizer.update(grads, optimizer_state, params)
            return optax.apply_updates(params, updates), optimizer_state

        target = self.critic_target(
            learner.actor, learner.target_critic, learner.log_alpha, batch, noise[0]
        )
        critic_params, critic_static = eqx.partition(learner.critic, eqx.is_array)
        (_, statistics), critic_grads = eqx.filter_value_and_grad(
            self.critic_loss, has_aux=True
        )(learner.critic, batch, target)
        critic_params, critic_optimizer_state = step(
            optimizer, critic_params, critic_grads, learner.critic_optimizer_state
        )
        critic = eqx.combine(critic_params, critic_static)

        actor_params, actor_static = eqx.partition(learner.actor, eqx.is_array)
        (actor_loss, log_prob), actor_grads = eqx.filter_value_and_grad(
            self.actor_loss, has_aux=True
        )(learner.actor, critic, learner.log_alpha, batch.observation, noise[1])
        actor_params, actor_optimizer_state = step(
            optimizer, actor_params, actor_grads, learner.actor_optimizer_state
        )

        log_alpha, alpha_optimizer_state = learner.log_alpha, None
        if self.autotune_alpha:
            alpha_grad = jax.grad(self.alpha_loss)(log_alpha, log_prob)
            log_alpha, alpha_optimizer_state = step(
                self.make_alpha_optimizer(),
                log_alpha,
                alpha_grad,
                learner.alpha_optimizer_state,
            )

        target_params, _ = eqx.partition(learner.target_critic, eqx.is_array)
        target_params = polyak_update(
            critic_params,
            target_params,
            self.tau,
            update_index,
            self.target_update_interval,
        )
        learner = _Learner(
            actor=eqx.combine(actor_params, actor_static),
            critic=critic,
            target_critic=eqx.combine(target_params, critic_static),
            log_alpha=log_alpha,
            actor_optimizer_state=actor_optimizer_state,
            critic_optimizer_state=critic_optimizer_state,
            alpha_optimizer_state=alpha_optimizer_state,
        )
        statistics = {
            **statistics,
            "actor_loss": actor_loss,
            "entropy": -jnp.mean(log_prob),
        }
        return learner, statistics
