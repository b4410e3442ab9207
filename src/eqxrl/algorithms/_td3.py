import math
from typing import ClassVar

import equinox as eqx
import jax
import jax.lax as lax
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree

from .._config import in_range
from ..buffers import ReplayBuffer, ReplaySample
from ..envs import TimeStep
from ..nn import (
    DeterministicPolicy,
    MLPDeterministicActor,
    MLPTwinCritic,
    RunningMeanStd,
)
from ._checks import refuse_multi_agent
from ._off_policy import (
    AbstractOffPolicyActorCritic,
    polyak_update,
)


class TD3State(eqx.Module):
    """Everything a TD3 run carries from one iteration to the next.

    **Arguments:**

    - `actor`: the deterministic actor being trained.
    - `target_actor`: its slowly updated (Polyak-averaged) copy that bootstrap
      targets act with.
    - `critic`: the critics being trained (two for TD3, one for DDPG).
    - `target_critic`: their Polyak-averaged copy.
    - `actor_optimizer_state`, `critic_optimizer_state`: optax states of the
      actor's and the critics' optimizers.
    - `buffer`: the replay buffer (actions stored in `[-1, 1]`, before rescaling to
      the action space's bounds).
    - `env_state`: state of every environment, `[num_envs, ...]` leaves.
    - `timestep`: the latest timestep of every environment.
    - `key`: the PRNG key for the next iteration.
    - `iteration`: how many iterations have run (int32).
    - `num_updates`: how many critic updates have run (int32).
    - `observation_statistics`: running mean and variance of the collected
      observations (with `normalize_observations`), else `None`.
    """

    actor: MLPDeterministicActor
    target_actor: MLPDeterministicActor
    critic: MLPTwinCritic
    target_critic: MLPTwinCritic
    actor_optimizer_state: PyTree
    critic_optimizer_state: PyTree
    buffer: ReplayBuffer
    env_state: PyTree
    timestep: TimeStep
    key: PRNGKeyArray
    iteration: Int[Array, ""]
    num_updates: Int[Array, ""]
    observation_statistics: RunningMeanStd | None = None


class _Learner(eqx.Module):
    """What a gradient step changes (the part of `TD3State` the update loop
    carries)."""

    actor: MLPDeterministicActor
    target_actor: MLPDeterministicActor
    critic: MLPTwinCritic
    target_critic: MLPTwinCritic
    actor_optimizer_state: PyTree
    critic_optimizer_state: PyTree


class AbstractTD3(AbstractOffPolicyActorCritic[TD3State]):
    """What [`TD3`][eqxrl.TD3] and [`DDPG`][eqxrl.DDPG] share: everything but the
    defaults of `policy_delay`, `policy_noise` and `num_critics`, which each declares
    (TD3: 2, 0.2, 2; DDPG: 1, 0, 1). Subclass it, declaring those three, for a
    variant of your own (say other networks, through `make_networks`); the
    arguments are [`TD3`][eqxrl.TD3]'s.
    """

    learner_type: ClassVar[type[eqx.Module]] = _Learner
    # `actor_loss` is NaN on updates without an actor step; the iteration's is the
    # mean of the others (NaN if there were none).
    update_metric_names: ClassVar[tuple[str, ...]] = (
        "critic_loss",
        "actor_loss",
        "q_value",
    )
    # The target policy smoothing noise.
    noise_draws_per_update: ClassVar[int] = 1

    policy_delay: eqx.AbstractVar[int]
    policy_noise: eqx.AbstractVar[Float[Array, ""]]
    num_critics: eqx.AbstractVar[int]

    # The schedule's fields (`env` to `batch_size`) are the base's, at its defaults.
    tau: Float[Array, ""] = eqx.field(
        default=0.005, converter=in_range("tau", 0.0, 1.0)
    )
    gamma: Float[Array, ""] = eqx.field(
        default=0.99, converter=in_range("gamma", 0.0, 1.0)
    )
    learning_rate: Float[Array, ""] = eqx.field(
        default=1e-3, converter=in_range("learning_rate", 0.0, math.inf, finite=True)
    )
    exploration_noise: Float[Array, ""] = eqx.field(
        default=0.1,
        converter=in_range("exploration_noise", 0.0, math.inf, finite=True),
    )
    noise_clip: Float[Array, ""] = eqx.field(
        default=0.5, converter=in_range("noise_clip", 0.0, math.inf, finite=True)
    )
    hidden_sizes: tuple[int, ...] = eqx.field(static=True, default=(256, 256))
    normalize_observations: bool = eqx.field(static=True, default=False)
    reward_scale: Float[Array, ""] | None = eqx.field(
        default=None,
        converter=in_range("reward_scale", 0.0, math.inf, finite=True, optional=True),
    )

    def __check_init__(self):
        self.check_configuration(type(self).__name__, ("policy_delay", "num_critics"))

    def make_networks(
        self, key: PRNGKeyArray
    ) -> tuple[MLPDeterministicActor, MLPTwinCritic]:
        """The initial actor and critics (the targets start as copies)."""
        actor_key, critic_key = jr.split(key)
        actor = MLPDeterministicActor(
            self.observation_size,
            self.action_size,
            hidden_sizes=self.hidden_sizes,
            key=actor_key,
        )
        critic = MLPTwinCritic(
            self.observation_size,
            self.action_size,
            hidden_sizes=self.hidden_sizes,
            num_critics=self.num_critics,
            key=critic_key,
        )
        return actor, critic

    def init(self, key: PRNGKeyArray) -> TD3State:
        refuse_multi_agent(type(self).__name__, self.env, independent=False)
        network_key, reset_key, state_key = jr.split(key, 3)
        actor, critic = self.make_networks(network_key)
        optimizer = self.make_optimizer()
        env_state, timestep = self.reset_environments(reset_key)
        example = self.example_transition(timestep)
        return TD3State(
            actor=actor,
            target_actor=actor,
            critic=critic,
            target_critic=critic,
            actor_optimizer_state=optimizer.init(eqx.filter(actor, eqx.is_array)),
            critic_optimizer_state=optimizer.init(eqx.filter(critic, eqx.is_array)),
            buffer=ReplayBuffer.empty(example, self.buffer_capacity),
            env_state=env_state,
            timestep=timestep,
            key=state_key,
            iteration=jnp.int32(0),
            num_updates=jnp.int32(0),
            observation_statistics=self.empty_observation_statistics(),
        )

    def policy(
        self, state: TD3State, deterministic: bool = False
    ) -> DeterministicPolicy:
        """The actor with the exploration noise of training (or with
        `deterministic`, without), on observations normalized as in training, its
        actions mapped onto the action space's bounds."""
        space = self.env.action_space
        return DeterministicPolicy(
            state.actor,
            space.low,
            space.high,
            self.exploration_noise,
            deterministic,
            observation_statistics=state.observation_statistics,
        )

    def diverged(self, state: TD3State, metrics: dict[str, Array]) -> Array:
        """Whether the critic loss is NaN or infinite, or the actor loss infinite,
        on an iteration with updates (`actor_loss` is NaN by design on iterations
        without an actor update; a NaN actor reaches the critic loss at the next
        update)."""
        broken = ~jnp.isfinite(metrics["critic_loss"]) | jnp.isinf(
            metrics["actor_loss"]
        )
        return (state.num_updates > 0) & broken

    # ------------------------------------------------------------------ losses
    def critic_target(
        self,
        target_actor: MLPDeterministicActor,
        target_critic: MLPTwinCritic,
        batch: ReplaySample,
        noise: Float[Array, "batch_size action_size"],
    ) -> Float[Array, " batch_size"]:
        """The bootstrap target of each transition of a minibatch:
        `reward + discount * min_k Q_target,k(s', a')` with
        `a' = clip(target_actor(s') + clip(policy_noise * noise, -noise_clip,
        noise_clip), -1, 1)`.

        `discount` is the buffer's: `0` after a termination, `gamma` otherwise
        (a truncated episode bootstraps from its final observation). `reward` is
        multiplied by `reward_scale` when there is one.
        """
        smoothing = jnp.clip(
            self.policy_noise * noise, -self.noise_clip, self.noise_clip
        )
        next_action = jax.vmap(target_actor)(batch.next_observation)
        next_action = jnp.clip(next_action + smoothing, -1.0, 1.0)
        next_q = jax.vmap(target_critic)(batch.next_observation, next_action)
        reward = batch.reward
        if self.reward_scale is not None:
            reward = reward * self.reward_scale
        return reward + batch.discount * jnp.min(next_q, axis=1)

    def actor_loss(
        self,
        actor: MLPDeterministicActor,
        critic: MLPTwinCritic,
        observation: Float[Array, "batch_size ..."],
    ) -> Float[Array, ""]:
        """`-mean(Q_1(s, actor(s)))`: the deterministic policy gradient through the
        first critic."""
        action = jax.vmap(actor)(observation)
        q = jax.vmap(critic)(observation, action)
        return -jnp.mean(q[:, 0])

    # -------------------------------------------------------------- iteration
    def exploration_action(
        self,
        actor: MLPDeterministicActor,
        observation: Float[Array, "..."],
        noise: Float[Array, " action_size"],
    ) -> Float[Array, " action_size"]:
        """`clip(actor(observation) + exploration_noise * noise, -1, 1)`."""
        return jnp.clip(actor(observation) + self.exploration_noise * noise, -1.0, 1.0)

    def gradient_step(
        self,
        learner: _Learner,
        batch: ReplaySample,
        noise: Float[Array, "1 batch_size action_size"],
        update_index: Int[Array, ""],
    ) -> tuple[_Learner, dict[str, Array]]:
        """One critic update; every `policy_delay`-th, then an actor update against
        the updated critics and the targets' Polyak step."""
        optimizer = self.make_optimizer()

        def step(params, grads, optimizer_state):
            updates, optimizer_state = optimizer.update(grads, optimizer_state, params)
            return optax.apply_updates(params, updates), optimizer_state

        target = self.critic_target(
            learner.target_actor, learner.target_critic, batch, noise[0]
        )
        critic_params, critic_static = eqx.partition(learner.critic, eqx.is_array)
        (_, statistics), critic_grads = eqx.filter_value_and_grad(
            self.critic_loss, has_aux=True
        )(learner.critic, batch, target)
        critic_params, critic_optimizer_state = step(
            critic_params, critic_grads, learner.critic_optimizer_state
        )
        learner = eqx.tree_at(
            lambda learner: (learner.critic, learner.critic_optimizer_state),
            learner,
            (eqx.combine(critic_params, critic_static), critic_optimizer_state),
        )

        def update_actor_and_targets(
            learner: _Learner,
        ) -> tuple[_Learner, Float[Array, ""]]:
            actor_params, actor_static = eqx.partition(learner.actor, eqx.is_array)
            actor_loss, actor_grads = eqx.filter_value_and_grad(self.actor_loss)(
                learner.actor, learner.critic, batch.observation
            )
            actor_params, actor_optimizer_state = step(
                actor_params, actor_grads, learner.actor_optimizer_state
            )
            target_actor = polyak_update(
                actor_params,
                eqx.filter(learner.target_actor, eqx.is_array),
                self.tau,
                update_index,
                1,
            )
            target_critic = polyak_update(
                critic_params,
                eqx.filter(learner.target_critic, eqx.is_array),
                self.tau,
                update_index,
                1,
            )
            learner = _Learner(
                actor=eqx.combine(actor_params, actor_static),
                target_actor=eqx.combine(target_actor, actor_static),
                critic=learner.critic,
                target_critic=eqx.combine(target_critic, critic_static),
                actor_optimizer_state=actor_optimizer_state,
                critic_optimizer_state=learner.critic_optimizer_state,
            )
            return learner, actor_loss

        if self.policy_delay == 1:
            learner, actor_loss = update_actor_and_targets(learner)
        else:
            dynamic, static = eqx.partition(learner, eqx.is_array)

            def update(dynamic):
                learner, actor_loss = update_actor_and_targets(
                    eqx.combine(dynamic, static)
                )
                return eqx.partition(learner, eqx.is_array)[0], actor_loss

            def skip(dynamic):
                return dynamic, jnp.full((), jnp.nan, jnp.float32)

            due = (update_index + 1) % self.policy_delay == 0
            dynamic, actor_loss = lax.cond(due, update, skip, dynamic)
            learner = eqx.combine(dynamic, static)
        return learner, {**statistics, "actor_loss": actor_loss}

    def summarize_updates(self, statistics: dict[str, Array]) -> dict[str, Array]:
        """Means over the iteration's updates; `actor_loss` over those with an actor
        update (NaN when none had one)."""
        summary = {
            name: jnp.mean(values)
            for name, values in statistics.items()
            if name != "actor_loss"
        }
        actor_loss = statistics["actor_loss"]
        updated = ~jnp.isnan(actor_loss)
        count = jnp.sum(updated)
        summary["actor_loss"] = jnp.where(
            count > 0,
            jnp.sum(jnp.where(updated, actor_loss, 0.0)) / jnp.maximum(count, 1),
            jnp.nan,
        )
        return summary


class TD3(AbstractTD3):
    """Twin delayed deep deterministic policy gradient (Fujimoto et al., 2018) for
    `Box` action spaces. [`DDPG`][eqxrl.DDPG] is the same algorithm with other
    defaults (both are [`AbstractTD3`][eqxrl.algorithms.AbstractTD3]).

    Each iteration steps `num_envs` auto-resetting environments `train_frequency`
    times with the actor's action plus Gaussian exploration noise (uniformly random
    actions before `learning_starts`), stores every step in an on-device replay
    buffer, then takes `gradient_steps` updates on uniformly sampled minibatches:

    - critics: the squared error of every `Q_k(s, a)` against
      `r + discount * min_k Q_target,k(s', a')`, where `a'` is the target actor's
      action at `s'` plus clipped Gaussian noise (target policy smoothing:
      `clip(policy_noise * N(0, 1), -noise_clip, noise_clip)`), clipped to
      `[-1, 1]`. `discount` is zero after a termination but not after a
      truncation, which bootstraps from the episode's final observation;
    - every `policy_delay` critic updates (the delayed policy update): the actor,
      by ascending the first critic's `Q_1(s, actor(s))`, then the target actor
      and critics by Polyak averaging with `tau`.

    The actor's actions lie in `[-1, 1]` (noise scales are in those units); they
    are stored so in the buffer and seen so by the critics, and mapped linearly
    onto the action space's bounds (which must be finite) only when stepping the
    environment and in the policy
    ([`DeterministicPolicy`][eqxrl.nn.DeterministicPolicy]). The collection, the
    replay, the observation normalization and the truncation handling are SAC's
    ([`AbstractOffPolicyActorCritic`][eqxrl.algorithms.AbstractOffPolicyActorCritic]).

    The defaults (the paper's: Adam at `1e-3` for both networks, batches of 256,
    `gamma = 0.99`, `tau = 0.005`, exploration noise `0.1`, smoothing noise `0.2`
    clipped at `0.5`, a policy delay of 2; 256x256 ReLU networks) learn
    Pendulum-v1 in 20k environment steps: a mean training return over the last 2k
    above -250 on each of 4 seeds (-121 to -187; 4 seeds vmapped, 4.7 minutes on a
    2-core CPU, where the 256-wide networks dominate). Sweepable numbers
    (`learning_rate`, `gamma`, `tau`, `exploration_noise`, `policy_noise`,
    `noise_clip`, `reward_scale`) are float32 array leaves: build TD3 inside
    `jax.vmap` over a batch of them to train a sweep in one compilation.

    **Arguments:**

    - `env`: the environment (one, a `Box` action space with finite bounds, `Box`
      observations, not auto-resetting: TD3 adds `AutoReset` and
      `EpisodeStatistics` itself).
    - `num_envs`: environments stepped in parallel.
    - `total_timesteps`: environment steps of the whole run; the run has
      `total_timesteps // (num_envs * train_frequency)` iterations.
    - `buffer_size`: transitions the replay buffer keeps (at least
      `learning_starts` and `batch_size`).
    - `learning_starts`: environment steps collected (with uniformly random actions)
      before the first update.
    - `train_frequency`: steps of every environment per iteration.
    - `gradient_steps`: critic updates per iteration.
    - `batch_size`: transitions per update.
    - `policy_delay`: critic updates per actor and target update.
    - `tau`: Polyak coefficient of the target updates (`1`: a copy).
    - `gamma`: discount factor.
    - `learning_rate`: Adam step size of the actor and the critics.
    - `exploration_noise`: standard deviation of the Gaussian noise added to the
      actor's actions while collecting.
    - `policy_noise`: standard deviation of the target policy smoothing noise
      (`0`: none, as DDPG).
    - `noise_clip`: bound of the smoothing noise's magnitude.
    - `num_critics`: Q-networks whose smallest value is the target (2: clipped
      double Q-learning; 1: DDPG).
    - `hidden_sizes`: widths of the hidden layers of the actor and of each critic.
    - `normalize_observations`: the networks see observations normalized by the
      running mean and variance of every observation collected so far (as SAC's),
      exported with the policy.
    - `reward_scale`: multiply rewards by this constant in the critics' targets;
      reported episode returns stay unscaled. `None` (default): rewards as they
      come.

    !!! example

        ```python
        env = eqxrl.envs.make("Pendulum-v1")
        td3 = eqxrl.TD3(env=env, total_timesteps=20_000)
        state, metrics = td3.train(jax.random.key(0))
        action = td3.policy(state, deterministic=True).act(observation, key)
        ```
    """

    policy_delay: int = eqx.field(static=True, default=2)
    policy_noise: Float[Array, ""] = eqx.field(
        default=0.2, converter=in_range("policy_noise", 0.0, math.inf, finite=True)
    )
    num_critics: int = eqx.field(static=True, default=2)


class DDPG(AbstractTD3):
    """Deep deterministic policy gradient (Lillicrap et al., 2016): [`TD3`][eqxrl.TD3]
    with one critic, an actor update after every critic update and no target policy
    smoothing (`policy_delay=1`, `policy_noise=0`, `num_critics=1`: the defaults that
    differ; its arguments and other defaults are TD3's).

    !!! example

        ```python
        ddpg = eqxrl.DDPG(env=eqxrl.envs.make("Pendulum-v1"), total_timesteps=20_000)
        state, metrics = ddpg.train(jax.random.key(0))
        ```
    """

    policy_delay: int = eqx.field(static=True, default=1)
    policy_noise: Float[Array, ""] = eqx.field(
        default=0.0, converter=in_range("policy_noise", 0.0, math.inf, finite=True)
    )
    num_critics: int = eqx.field(static=True, default=1)
