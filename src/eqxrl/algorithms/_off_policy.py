"""What the replay-based learners share: the iteration (collect, then update once
`learning_starts` is reached), also value decomposition's (VDN, QMIX); the base
class of the replay-based algorithms (DQN, IQN, SAC, TD3: the collection schedule's
fields and what follows from them), the checks of that schedule, and the target
networks' Polyak averaging and periodic copies; and what the continuous-control
actor-critics (SAC, TD3) share on top: the collection with an exploring actor and
the updates on minibatches gathered up front."""

import abc
import dataclasses
import math
from collections.abc import Callable
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.lax as lax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np
import optax
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray, PyTree

from .._filters import scan_or_step
from .._random import split as random_split, uniform as random_uniform
from ..buffers import ReplayBuffer, ReplaySample, ReplayTransition
from ..envs import (
    AbstractEnvironment,
    AutoReset,
    Box,
    EpisodeStatistics,
    TimeStep,
    check_environment,
)
from ..nn import RunningMeanStd
from ._base import AbstractAlgorithm, StateT, with_replay_environment_axes
from ._checks import refuse_auto_reset
from ._metrics import ended_episodes, iteration_episode_metrics


class AbstractOffPolicyIteration(AbstractAlgorithm[StateT]):
    """The iteration of the learners that collect into a replay buffer and update
    from it: the replay-based algorithms through
    [`AbstractOffPolicyAlgorithm`][eqxrl.algorithms.AbstractOffPolicyAlgorithm]
    (DQN, IQN, SAC, TD3, DDPG) and value decomposition's teams through
    [`AbstractValueDecomposition`][eqxrl.multiagent.AbstractValueDecomposition]
    (VDN, QMIX). An iteration

    1. collects `steps_per_iteration` environment steps, each added to the replay
       buffer (`collect`);
    2. once `learning_starts` environment steps are collected, updates the
       networks on minibatches from the buffer (`update`);
    3. reports the episodes that ended (`episode_metrics`), the update statistics
       and the learner's own `iteration_metrics`.

    A subclass gives `steps_per_iteration` and `learning_starts` (as fields or
    properties) and writes `collect` and `update`. Its state has (at least) `key`,
    `iteration` and `num_updates` fields.
    """

    steps_per_iteration: eqx.AbstractVar[int]
    learning_starts: eqx.AbstractVar[int]

    @abc.abstractmethod
    def collect(
        self,
        state: StateT,
        action_key: PRNGKeyArray,
        uniform_key: PRNGKeyArray,
        step_key: PRNGKeyArray,
    ) -> tuple[StateT, tuple[Bool[Array, "..."], dict[str, Any]], dict[str, Array]]:
        """`steps_per_iteration` environment steps (every environment stepped the
        same number of times), each added to the replay buffer.

        **Arguments:**

        - `state`: the state before the iteration.
        - `action_key`, `uniform_key`, `step_key`: PRNG keys of the actions'
          randomness, of the uniform numbers that explore, and of the
          environments' steps.

        **Returns:**

        `(state, episodes, statistics)`: the state with its environments, their
        latest timesteps and the buffer advanced (and whatever else collecting
        changes); the steps' [`ended_episodes`][eqxrl.algorithms.ended_episodes]
        stacked (`[steps, num_envs]`), which `episode_metrics` reads; and any
        other per-step statistics, which `iteration_metrics` reads.
        """

    @abc.abstractmethod
    def update(
        self,
        state: StateT,
        learning: Bool[Array, ""],
        sample_key: PRNGKeyArray,
        update_key: PRNGKeyArray,
    ) -> tuple[StateT, dict[str, Array]]:
        """The iteration's updates: if `learning`, updates on minibatches sampled
        with `sample_key` (`update_key`: the updates' own randomness), else none.

        **Returns:**

        `(state, statistics)`: the state with its networks, optimizer states and
        `num_updates` advanced, and the update statistics (scalars, NaN when not
        `learning`).
        """

    def episode_metrics(
        self, done: Bool[Array, "steps num_envs"], statistics: dict[str, Any]
    ) -> dict[str, Array]:
        """Metrics of the episodes that ended during the iteration, from the
        `episodes` of `collect`: by default
        [`iteration_episode_metrics`][eqxrl.algorithms.iteration_episode_metrics]
        (`episode_return`, `episode_length`, `episode_count` and the
        environment's own metrics)."""
        return iteration_episode_metrics(done, statistics)

    def iteration_metrics(
        self,
        state: StateT,
        collected: Int[Array, ""],
        statistics: dict[str, Array],
    ) -> dict[str, Array]:
        """Metrics of an iteration beyond its episodes and update statistics (none
        by default), from the `state` after its updates, the environment steps
        `collected` by its end, and the per-step `statistics` of `collect`."""
        return {}

    def train_iteration(self, state: StateT) -> tuple[StateT, dict[str, Array]]:
        """Collect `steps_per_iteration` environment steps, then (once
        `learning_starts` steps are collected) update.

        **Returns:**

        `(state, metrics)` with the `episode_metrics` (by default scalars:
        `episode_return`, the mean undiscounted return of the episodes that ended
        during the iteration, NaN when none did, `episode_length`,
        `episode_count`, the environment's own metrics), the update statistics
        (means over the iteration's updates, NaN before learning starts) and the
        `iteration_metrics`.
        """
        key, action_key, uniform_key, step_key, sample_key, update_key = random_split(
            state.key, 6
        )
        state, episodes, statistics = self.collect(
            state, action_key, uniform_key, step_key
        )
        collected = (state.iteration + 1) * self.steps_per_iteration
        learning = collected >= self.learning_starts
        state, update_statistics = self.update(state, learning, sample_key, update_key)

        metrics = self.episode_metrics(*episodes)
        metrics.update(update_statistics)
        metrics.update(self.iteration_metrics(state, collected, statistics))
        state = dataclasses.replace(
            state,
            key=key,
            iteration=state.iteration + 1,
            num_updates=state.num_updates.astype(jnp.int32),
        )
        return state, metrics


class AbstractOffPolicyAlgorithm(AbstractOffPolicyIteration[StateT]):
    """What the replay-based algorithms ([`DQN`][eqxrl.DQN], [`IQN`][eqxrl.IQN]
    through [`AbstractQLearning`][eqxrl.algorithms.AbstractQLearning], and
    [`SAC`][eqxrl.SAC], [`TD3`][eqxrl.TD3] and [`DDPG`][eqxrl.DDPG] through
    [`AbstractOffPolicyActorCritic`][eqxrl.algorithms.AbstractOffPolicyActorCritic])
    share: the schedule, and the iteration of
    [`AbstractOffPolicyIteration`][eqxrl.algorithms.AbstractOffPolicyIteration] on
    it. An iteration

    1. steps `num_envs` auto-resetting environments `train_frequency` times and
       adds every step to a replay buffer of `buffer_size` transitions
       (`collect`);
    2. once `learning_starts` environment steps are collected, runs
       `gradient_steps` updates on minibatches of `batch_size` (`update`), the
       target networks following the online ones;
    3. reports the episodes that ended, the update statistics and the algorithm's
       own `iteration_metrics`.

    The fields below come first in every subclass, in this order; a subclass changes
    their defaults by declaring them again. It adds its networks and their update
    rule, and writes `collect` and `update`. Its state has (at least) `buffer`,
    `env_state`, `timestep`, `key`, `iteration` and `num_updates` fields.

    **Arguments:**

    - `env`: the environment (not auto-resetting: the algorithm adds `AutoReset`
      and `EpisodeStatistics` itself).
    - `num_envs`: environments stepped in parallel.
    - `total_timesteps`: environment steps of the whole run; the run has
      `total_timesteps // (num_envs * train_frequency)` iterations.
    - `buffer_size`: transitions the replay buffer keeps.
    - `learning_starts`: environment steps collected before the first update.
    - `train_frequency`: steps of every environment per iteration.
    - `gradient_steps`: updates per iteration.
    - `batch_size`: transitions per update.
    """

    env: AbstractEnvironment
    num_envs: int = eqx.field(static=True, default=1)
    total_timesteps: int = eqx.field(static=True, default=20_000)
    buffer_size: int = eqx.field(static=True, default=100_000)
    learning_starts: int = eqx.field(static=True, default=1_000)
    train_frequency: int = eqx.field(static=True, default=1)
    gradient_steps: int = eqx.field(static=True, default=1)
    batch_size: int = eqx.field(static=True, default=256)

    @property
    def steps_per_iteration(self) -> int:
        """Environment steps collected per iteration: `num_envs * train_frequency`."""
        return self.num_envs * self.train_frequency

    @property
    def num_iterations(self) -> int:
        """Iterations of a run: `total_timesteps // steps_per_iteration`."""
        return self.total_timesteps // self.steps_per_iteration

    @property
    def buffer_capacity(self) -> int:
        """Rows of the replay buffer (`buffer_size // num_envs`); each row holds one
        step of every environment."""
        return self.buffer_size // self.num_envs

    def environment_axes(self, state: StateT) -> PyTree[int]:
        """Environments come first in the environment states and timesteps, and
        second in the replay buffer's `[capacity, num_envs, ...]` rows."""
        return with_replay_environment_axes(super().environment_axes(state), state)

    def update_if_learning(
        self,
        learning: Bool[Array, ""],
        learner: PyTree,
        num_updates: Int[Array, ""],
        update: Callable[[PyTree], tuple[PyTree, dict[str, Array]]],
        skipped_statistics: Callable[[], dict[str, Array]],
    ) -> tuple[PyTree, Int[Array, ""], dict[str, Array]]:
        """`update(learner) -> (learner, statistics)` if `learning`, else the
        learner as it is with `skipped_statistics()` (NaNs shaped like the
        update's): one `lax.cond`, so keep `learning` unbatched under `vmap` for
        the skip to stay a skip.

        **Returns:**

        `(learner, num_updates, statistics)`, `num_updates` advanced by
        `gradient_steps` when `learning`.
        """
        dynamic, static = eqx.partition(learner, eqx.is_array)

        def learn(dynamic):
            learner, statistics = update(eqx.combine(dynamic, static))
            return eqx.partition(learner, eqx.is_array)[0], statistics

        def skip(dynamic):
            return dynamic, skipped_statistics()

        dynamic, statistics = lax.cond(learning, learn, skip, dynamic)
        num_updates = num_updates + jnp.where(learning, self.gradient_steps, 0)
        return eqx.combine(dynamic, static), num_updates, statistics


def check_replay_schedule(
    name: str,
    algorithm: Any,
    positive_fields: tuple[str, ...],
    min_buffer_size: int,
    min_buffer_text: str,
) -> None:
    """Raise a `ValueError` naming the field unless the schedule of a replay-based
    algorithm can run: positive integer sizes, `learning_starts` reached within
    the run, and a buffer that holds a minibatch and the transitions collected
    before the first update.

    **Arguments:**

    - `name`: the algorithm's name, for the messages.
    - `algorithm`: it (its `num_envs`, `total_timesteps`, `buffer_size`,
      `batch_size`, `learning_starts`, `hidden_sizes`, `steps_per_iteration`,
      `num_iterations`).
    - `positive_fields`: the fields beyond the schedule's sizes (`num_envs`,
      `total_timesteps`, `buffer_size`, `train_frequency`, `gradient_steps`,
      `batch_size`) that must be positive integers.
    - `min_buffer_size`: the smallest `buffer_size` it can work with, which
      `min_buffer_text` explains.
    """
    schedule_sizes = (
        "num_envs",
        "total_timesteps",
        "buffer_size",
        "train_frequency",
        "gradient_steps",
        "batch_size",
    )
    for field in (*schedule_sizes, *positive_fields):
        value = getattr(algorithm, field)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: {field}={value!r} must be a positive int.")
    learning_starts = algorithm.learning_starts
    if not isinstance(learning_starts, int) or learning_starts < 0:
        raise ValueError(
            f"{name}: learning_starts={learning_starts!r} must be an int >= 0."
        )
    if any(not isinstance(w, int) or w < 1 for w in algorithm.hidden_sizes):
        raise ValueError(
            f"{name}: hidden_sizes={algorithm.hidden_sizes} must be positive integers."
        )
    steps_per_iteration = algorithm.steps_per_iteration
    if algorithm.total_timesteps < steps_per_iteration:
        raise ValueError(
            f"{name}: total_timesteps={algorithm.total_timesteps} is less than one "
            f"iteration (num_envs * train_frequency = {steps_per_iteration});"
            " raise total_timesteps or lower num_envs / train_frequency."
        )
    last_collected = algorithm.num_iterations * steps_per_iteration
    if learning_starts > last_collected:
        raise ValueError(
            f"{name}: learning_starts={learning_starts} exceeds the "
            f"{last_collected} environment steps of the run, so it would never "
            "update; lower learning_starts or raise total_timesteps."
        )
    buffer_size, num_envs = algorithm.buffer_size, algorithm.num_envs
    if buffer_size < min_buffer_size:
        raise ValueError(
            f"{name}: buffer_size={buffer_size} must hold at least {min_buffer_text}."
        )
    if algorithm.batch_size > buffer_size:
        raise ValueError(
            f"{name}: batch_size={algorithm.batch_size} is larger than "
            f"buffer_size={buffer_size}: a minibatch would repeat "
            "transitions; raise buffer_size or lower batch_size."
        )
    # The buffer keeps whole rows of num_envs steps: buffer_size rounded down.
    stored = buffer_size // num_envs * num_envs
    if stored < learning_starts:
        raise ValueError(
            f"{name}: the buffer holds {stored} transitions "
            f"(buffer_size={buffer_size} rounded down to whole rows of "
            f"num_envs={num_envs}), fewer than "
            f"learning_starts={learning_starts}: it would drop transitions "
            "before the first update; raise buffer_size or lower learning_starts."
        )


def polyak_update(
    online: PyTree[Array],
    target: PyTree[Array],
    tau: Float[Array, ""],
    update_index: Int[Array, ""],
    interval: int,
) -> PyTree[Array]:
    """The target parameters after update `update_index`: moved a fraction `tau`
    toward the online ones every `interval` updates, unchanged in between."""

    def soft_update(online: PyTree, target: PyTree) -> PyTree:
        return jtu.tree_map(lambda o, t: tau * o + (1.0 - tau) * t, online, target)

    if interval == 1:
        return soft_update(online, target)
    due = (update_index + 1) % interval == 0
    return lax.cond(due, soft_update, lambda _, t: t, online, target)


def copy_if_due(
    online: PyTree[Array],
    target: PyTree[Array],
    update_index: Int[Array, ""],
    interval: int,
) -> PyTree[Array]:
    """The target parameters after update `update_index`: a copy of the online ones
    every `interval` updates, unchanged in between."""
    due = (update_index + 1) % interval == 0
    return lax.cond(due, lambda o, _: o, lambda _, t: t, online, target)


def normalize_batch(
    statistics: RunningMeanStd | None, observations: Float[Array, "..."]
) -> Float[Array, "..."]:
    """Observations with leading batch axes normalized by `statistics` (as they
    are when it is `None`)."""
    if statistics is None:
        return observations
    normalize = statistics.normalize
    for _ in range(observations.ndim - statistics.mean.ndim):
        normalize = jax.vmap(normalize)
    return normalize(observations)


class AbstractOffPolicyActorCritic(AbstractOffPolicyAlgorithm[StateT]):
    """What the continuous-control actor-critics ([`SAC`][eqxrl.SAC] and
    [`TD3`][eqxrl.TD3]) share on top of the replay schedule and iteration of
    [`AbstractOffPolicyAlgorithm`][eqxrl.algorithms.AbstractOffPolicyAlgorithm]:
    one `Box` action space with finite bounds, `Box` observations, an actor whose
    actions lie in `[-1, 1]` (stored so in the buffer, seen so by the critics, mapped
    onto the bounds only to step the environment), optional running observation
    normalization, and the two halves of the iteration:

    1. `collect`: `train_frequency` steps of every environment, acting with
       uniformly random actions before `learning_starts` and with
       `exploration_action` after, each step added to the replay buffer;
    2. `update`: once `learning_starts` steps are collected, `gradient_steps`
       calls of `gradient_step` on minibatches drawn and gathered up front.

    A subclass declares `gamma`, `learning_rate`, `hidden_sizes`,
    `normalize_observations` and `reward_scale` (its own defaults), a state with
    `actor`, `buffer`, `env_state`, `timestep`, `key`, `iteration`, `num_updates`
    and `observation_statistics` fields, and the class variables `learner_type`
    (the part of the state that updates change: networks and optimizer states),
    `update_metric_names` and `noise_draws_per_update`; and it writes its networks,
    `exploration_action` and `gradient_step`.
    """

    learner_type: ClassVar[type[eqx.Module]]
    # The statistics `gradient_step` returns (NaN on iterations without updates).
    update_metric_names: ClassVar[tuple[str, ...]]
    # Standard normal draws of `[batch_size, action_size]` each update receives.
    noise_draws_per_update: ClassVar[int]

    @abc.abstractmethod
    def exploration_action(
        self,
        actor: Any,
        observation: Float[Array, "..."],
        noise: Float[Array, " action_size"],
    ) -> Float[Array, " action_size"]:
        """The action in `[-1, 1]` that training takes at one (normalized)
        observation, from standard normal `noise`."""

    @abc.abstractmethod
    def gradient_step(
        self,
        learner: Any,
        batch: ReplaySample,
        noise: Float[Array, "draws batch_size action_size"],
        update_index: Int[Array, ""],
    ) -> tuple[Any, dict[str, Array]]:
        """One update of the `learner` (a `learner_type`) on a minibatch (its
        observations normalized as the actor sees them), with
        `noise_draws_per_update` standard normal draws per transition;
        `update_index` counts the updates before it. Returns the learner and the
        `update_metric_names` statistics."""

    def check_configuration(self, name: str, positive_fields: tuple[str, ...]) -> None:
        """Raise a `ValueError` naming `name` unless the schedule can run
        (`check_replay_schedule`, with the subclass's own `positive_fields` beside
        the schedule's) and the environment has a `Box` action space with finite
        bounds and `Box` observations, and is not auto-resetting."""
        check_replay_schedule(
            name,
            self,
            positive_fields=positive_fields,
            min_buffer_size=self.num_envs,
            min_buffer_text=f"one step of every environment (num_envs={self.num_envs})",
        )
        refuse_auto_reset(name, self.env)
        space = self.env.action_space
        if not isinstance(space, Box):
            raise ValueError(
                f"{name}: needs a Box action space, got {type(space).__name__}; for "
                "discrete actions use DQN, IQN or PPO."
            )
        bounds = (space.low, space.high)
        if not any(isinstance(bound, jax.core.Tracer) for bound in bounds) and not (
            np.isfinite(np.asarray(space.low)).all()
            and np.isfinite(np.asarray(space.high)).all()
        ):
            raise ValueError(
                f"{name}: the action space needs finite bounds (its actions in "
                f"[-1, 1] are mapped onto them), got low={space.low}, "
                f"high={space.high}; bound the actions, e.g. with a wrapper that "
                "clips them."
            )
        if not isinstance(self.env.observation_space, Box):
            raise ValueError(
                f"{name}: needs a Box observation space, got "
                f"{type(self.env.observation_space).__name__}; flatten structured "
                "observations (e.g. eqxrl.envs.FlattenObservation)."
            )
        check_environment(self.env)

    @property
    def action_size(self) -> int:
        """Entries of one action (the actor's output size)."""
        return math.prod(self.env.action_space.shape)

    @property
    def observation_size(self) -> int:
        """Entries of one (flattened) observation (the networks' input size)."""
        return math.prod(self.env.observation_space.shape)

    @property
    def training_env(self) -> AbstractEnvironment:
        """The environment as it is stepped: `AutoReset(EpisodeStatistics(env))`."""
        return AutoReset(EpisodeStatistics(self.env))

    def _transition(
        self,
        timestep: TimeStep,
        action: Float[Array, " action_size"],
        next_timestep: TimeStep,
    ) -> ReplayTransition:
        return ReplayTransition(
            observation=timestep.observation,
            action=action,
            reward=next_timestep.reward,
            terminated=next_timestep.terminated,
            truncated=next_timestep.truncated,
            next_observation=next_timestep.extras["final_observation"],
        )

    def reset_environments(self, reset_key: PRNGKeyArray) -> tuple[PyTree, TimeStep]:
        """The `num_envs` environments reset for a new run: their states and first
        timesteps (`[num_envs, ...]` leaves)."""
        return jax.vmap(self.training_env.reset)(jr.split(reset_key, self.num_envs))

    def example_transition(self, timestep: TimeStep) -> ReplayTransition:
        """One step of every environment as the replay buffer stores it (zero
        actions): what `ReplayBuffer.empty` shapes the buffer after."""
        return jax.vmap(self._transition)(
            timestep,
            jnp.zeros((self.num_envs, self.action_size), jnp.float32),
            timestep,
        )

    def empty_observation_statistics(self) -> RunningMeanStd | None:
        """The running observation statistics of a new run (`None` without
        `normalize_observations`)."""
        if not self.normalize_observations:
            return None
        return RunningMeanStd.zeros(self.env.observation_space.shape)

    def diverged(self, state: StateT, metrics: dict[str, Array]) -> Bool[Array, ""]:
        """Whether a loss is NaN or infinite on an iteration with updates (they are
        NaN by design on iterations without, before `learning_starts`)."""
        finite = jnp.isfinite(metrics["critic_loss"]) & jnp.isfinite(
            metrics["actor_loss"]
        )
        return (state.num_updates > 0) & ~finite

    def critic_loss(
        self,
        critic: Any,
        batch: ReplaySample,
        target: Float[Array, " batch_size"],
    ) -> tuple[Float[Array, ""], dict[str, Array]]:
        """Half the squared error of each critic against `target`, summed over the
        critics and averaged over the minibatch.

        **Returns:**

        `(loss, {"critic_loss": loss, "q_value": mean Q(s, a)})`.
        """
        q = jax.vmap(critic)(batch.observation, batch.action)
        error = q - lax.stop_gradient(target)[:, None]
        loss = 0.5 * jnp.mean(jnp.sum(jnp.square(error), axis=1))
        return loss, {"critic_loss": loss, "q_value": jnp.mean(q)}

    def make_optimizer(self) -> optax.GradientTransformation:
        """Adam with step size `learning_rate`; the actor and the critics each have
        their own state."""
        return optax.adam(self.learning_rate)

    def collect(
        self,
        state: StateT,
        noise_key: PRNGKeyArray,
        uniform_key: PRNGKeyArray,
        step_key: PRNGKeyArray,
    ) -> tuple[StateT, tuple[Bool[Array, "..."], dict[str, Any]], dict[str, Array]]:
        """`train_frequency` steps of every environment, each added to the buffer:
        `exploration_action`s (from standard normal noise drawn with
        `noise_key`), or uniformly random actions before `learning_starts`. With
        `normalize_observations`, each step's observations then join the
        statistics. The randomness of all the steps is drawn up front; see
        [`AbstractOffPolicyIteration.collect`][eqxrl.algorithms.AbstractOffPolicyIteration.collect]
        for what it returns (no other per-step statistics)."""
        explore = eqx.filter_vmap(self.exploration_action, in_axes=(None, 0, 0))
        rescale = jax.vmap(self.policy(state).to_bounds)
        transition = jax.vmap(self._transition)
        step_environments = jax.vmap(self.training_env.step)
        first_step = state.iteration * self.steps_per_iteration
        shape = (self.train_frequency, self.num_envs)

        def step(carry, inputs):
            env_state, timestep, buffer, observation_statistics = carry
            index, noise, uniform, step_keys = inputs
            warming_up = first_step + index * self.num_envs < self.learning_starts
            observation = normalize_batch(observation_statistics, timestep.observation)
            explored = explore(state.actor, observation, noise)
            action = jnp.where(warming_up, 2.0 * uniform - 1.0, explored)
            env_state, next_timestep = step_environments(
                env_state, rescale(action), step_keys
            )
            episodes = ended_episodes(next_timestep)
            buffer = buffer.add(transition(timestep, action, next_timestep))
            if observation_statistics is not None:
                observation_statistics = observation_statistics.update(
                    timestep.observation
                )
            carry = (env_state, next_timestep, buffer, observation_statistics)
            return carry, episodes

        (env_state, timestep, buffer, observation_statistics), episodes = scan_or_step(
            step,
            (
                state.env_state,
                state.timestep,
                state.buffer,
                state.observation_statistics,
            ),
            (
                jnp.arange(self.train_frequency, dtype=jnp.int32),
                jr.normal(noise_key, (*shape, self.action_size), jnp.float32),
                random_uniform(uniform_key, (*shape, self.action_size)),
                random_split(step_key, shape),
            ),
        )
        state = dataclasses.replace(
            state,
            env_state=env_state,
            timestep=timestep,
            buffer=buffer,
            observation_statistics=observation_statistics,
        )
        return state, episodes, {}

    def _gradient_steps(
        self,
        learner: Any,
        num_updates: Int[Array, ""],
        buffer: ReplayBuffer,
        observation_statistics: RunningMeanStd | None,
        sample_key: PRNGKeyArray,
        noise_key: PRNGKeyArray,
    ) -> tuple[Any, dict[str, Array]]:
        """`gradient_steps` updates on minibatches all drawn and gathered up front
        (one gather per field per iteration, as in DQN), their observations
        normalized by `observation_statistics` when there are some."""

        def gather(index: Int[Array, " batch_size"]) -> ReplaySample:
            batch = buffer.gather(index, gamma=self.gamma)
            if observation_statistics is None:
                return batch
            return eqx.tree_at(
                lambda b: (b.observation, b.next_observation),
                batch,
                (
                    normalize_batch(observation_statistics, batch.observation),
                    normalize_batch(observation_statistics, batch.next_observation),
                ),
            )

        def gradient_step(learner, inputs):
            return self.gradient_step(learner, *inputs)

        learner, statistics = scan_or_step(
            gradient_step,
            learner,
            (
                jax.vmap(gather)(
                    buffer.sample_indices(
                        sample_key, (self.gradient_steps, self.batch_size)
                    )
                ),
                jr.normal(
                    noise_key,
                    (
                        self.gradient_steps,
                        self.noise_draws_per_update,
                        self.batch_size,
                        self.action_size,
                    ),
                    jnp.float32,
                ),
                num_updates + jnp.arange(self.gradient_steps, dtype=jnp.int32),
            ),
        )
        return learner, self.summarize_updates(statistics)

    def summarize_updates(self, statistics: dict[str, Array]) -> dict[str, Array]:
        """An iteration's update statistics (`[gradient_steps]` each) as scalars:
        their means."""
        return jtu.tree_map(jnp.mean, statistics)

    def update(
        self,
        state: StateT,
        learning: Bool[Array, ""],
        sample_key: PRNGKeyArray,
        noise_key: PRNGKeyArray,
    ) -> tuple[StateT, dict[str, Array]]:
        """If `learning`, `gradient_steps` calls of `gradient_step` on minibatches
        drawn with `sample_key` (`noise_key`: their standard normal draws), with
        the `update_metric_names` statistics averaged by `summarize_updates`."""
        learner_fields = [field.name for field in dataclasses.fields(self.learner_type)]
        learner = self.learner_type(
            **{name: getattr(state, name) for name in learner_fields}
        )

        def gradient_steps(learner):
            return self._gradient_steps(
                learner,
                state.num_updates,
                state.buffer,
                state.observation_statistics,
                sample_key,
                noise_key,
            )

        def skipped_statistics():
            nan = jnp.full((), jnp.nan, jnp.float32)
            return {name: nan for name in self.update_metric_names}

        learner, num_updates, statistics = self.update_if_learning(
            learning, learner, state.num_updates, gradient_steps, skipped_statistics
        )
        state = dataclasses.replace(
            state,
            **{name: getattr(learner, name) for name in learner_fields},
            num_updates=num_updates,
        )
        return state, statistics
