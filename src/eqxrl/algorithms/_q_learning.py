import abc
import dataclasses
import math
from collections.abc import Callable
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import optax
from jaxtyping import Array, ArrayLike, Bool, Float, Int, Key, PRNGKeyArray, PyTree

from .._config import in_range
from .._filters import scan_or_step
from .._random import split as random_split
from ..buffers import ReplayBuffer, ReplaySample, ReplayTransition
from ..envs import (
    AbstractEnvironment,
    AbstractWrapper,
    AutoReset,
    Discrete,
    EpisodeStatistics,
    TimeStep,
    num_agents_of,
)
from ..nn import (
    AbstractQNetwork,
    EpsilonGreedyPolicy,
    epsilon_greedy_action,
    greedy_action,
)
from ._base import injected_learning_rate
from ._checks import check_q_network, refuse_auto_reset, refuse_multi_agent
from ._metrics import ended_episodes
from ._off_policy import (
    AbstractOffPolicyAlgorithm,
    check_replay_schedule,
    copy_if_due,
    polyak_update,
)
from ._rollout import epsilon_greedy_collect, epsilon_greedy_draws
from ._schedules import learning_rate_schedule


class QLearningState(eqx.Module):
    """Everything a DQN or IQN run carries from one iteration to the next.

    **Arguments:**

    - `network`: the Q-network being trained (the online network).
    - `target_network`: the slowly updated copy that bootstrap targets use.
    - `optimizer_state`: optax state of the optimizer.
    - `buffer`: the replay buffer.
    - `env_state`: state of every environment, `[num_envs, ...]` leaves (`None`
      for a learner that does not step environments itself, see `init_learner`).
    - `timestep`: the latest timestep of every environment (as the learner sees
      it).
    - `key`: the PRNG key for the next iteration.
    - `iteration`: how many iterations have run (int32).
    - `num_updates`: how many gradient steps have run (int32).
    """

    network: AbstractQNetwork
    target_network: AbstractQNetwork
    optimizer_state: PyTree
    buffer: ReplayBuffer
    env_state: PyTree
    timestep: TimeStep
    key: PRNGKeyArray
    iteration: Int[Array, ""]
    num_updates: Int[Array, ""]


class _KeepFinalActionMask(AbstractWrapper):
    """Copy `action_mask` into `extras["final_action_mask"]`; inside `AutoReset`, it
    keeps the mask of the final state of an episode (needed to bootstrap a
    truncated episode with the greedy valid action)."""

    env: AbstractEnvironment

    def reset(self, key: PRNGKeyArray) -> tuple[PyTree, TimeStep]:
        state, timestep = self.env.reset(key)
        return state, _with_final_action_mask(timestep)

    def step(self, state: PyTree, action, key: PRNGKeyArray) -> tuple[PyTree, TimeStep]:
        state, timestep = self.env.step(state, action, key)
        return state, _with_final_action_mask(timestep)


def _with_final_action_mask(timestep: TimeStep) -> TimeStep:
    extras = dict(timestep.extras)
    extras["final_action_mask"] = timestep.action_mask
    return eqx.tree_at(lambda t: t.extras, timestep, extras)


def bootstrap_action_value(
    target_q_values: Float[Array, " num_actions"],
    online_q_values: Float[Array, " num_actions"],
    action_mask: Bool[Array, " num_actions"] | None = None,
) -> Float[Array, ""]:
    """The value a Q-learning target bootstraps from at the next observation: the
    target network's value of the greedy valid action, chosen by `online_q_values`.

    Pass the online network's values for double Q-learning (van Hasselt et al.,
    2016: the online network picks the action, the target network evaluates it),
    or the target network's own values for the plain `max` target.

    **Arguments:**

    - `target_q_values`: the target network's value of each action.
    - `online_q_values`: the values that choose the action.
    - `action_mask`: `True` for valid actions, or `None` (all valid); a masked
      action is never the one chosen.

    **Returns:**

    `target_q_values[greedy_action(online_q_values, action_mask)]` (float32).
    """
    action = greedy_action(online_q_values, action_mask)
    return jnp.take_along_axis(target_q_values, action[None], axis=0)[0]


class AbstractQLearning(AbstractOffPolicyAlgorithm[QLearningState]):
    """Off-policy value-based learning with a replay buffer: what DQN and IQN share.

    One iteration steps `num_envs` auto-resetting environments `train_frequency`
    times with an epsilon-greedy policy (only valid actions, when the environment
    gives action masks), adds every step to the replay buffer (in place), then, once
    `learning_starts` environment steps have been collected, runs `gradient_steps`
    updates on uniformly sampled minibatches of n-step transitions and updates the
    target network every `target_update_interval` updates (Polyak averaging with
    `tau`; `tau = 1` copies). A run has
    `total_timesteps // (num_envs * train_frequency)` iterations.

    Subclasses provide the network (`make_network`) and the loss (`loss`), and may
    change the defaults below.

    **Arguments:**

    - `env`: the environment (one, discrete actions, not auto-resetting: the
      algorithm adds `AutoReset` and `EpisodeStatistics` itself).
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
    - `n_step`: rewards summed in each target before bootstrapping.
    - `target_update_interval`: updates between target-network updates.
    - `tau`: Polyak coefficient of a target update (`1.0`: copy the network).
    - `double_q`: choose the bootstrap action with the online network.
    - `bootstrap_on_truncation`: `True` (default): a truncated episode (a time
      limit) bootstraps from the value of the state it reached, as if it could go
      on. `False`: it ends like a terminated one (no bootstrap), which is what
      libraries with a single `done` flag do (JaxMARL's Q-learning baselines): for
      a task whose return is over a fixed horizon that the observation does not
      show, where the value past the limit is noise to the network.
    - `learning_rate`: Adam step size.
    - `anneal_lr`: decay the step size linearly to zero over the updates.
    - `adam_eps`: Adam's epsilon.
    - `max_grad_norm`: global gradient-norm clip; `None`: no clipping (and no
      norm computed).
    - `gamma`: discount factor.
    - `exploration_initial_eps`: the linear epsilon schedule's start.
    - `exploration_final_eps`: the linear epsilon schedule's end.
    - `exploration_fraction`: fraction of `total_timesteps` over which epsilon decays.
    - `exploration_decay`: `None` (default) for the linear schedule; a factor in
      `[0, 1]` for a multiplicative one instead: epsilon starts at
      `exploration_initial_eps` and is multiplied by `exploration_decay` after
      every iteration, never going below `exploration_final_eps` (Sorrel's
      per-epoch decay when an iteration is one episode).
    - `target_copy_interval`: `None` (default), or a number of updates after which
      the target network is also set to a copy of the online network, on top of
      the `tau` updates (Sorrel's hard copy every 200 epochs beside its soft
      updates).
    - `hidden_sizes`: widths of the default network's hidden layers (its torso).
    - `dueling`: give the default network a dueling head.
    - `network_factory`: optional `factory(env, key) -> network` replacing the
      default network.
    """

    # Whether the network predicts quantiles (IQN) rather than one value per action.
    distributional: ClassVar[bool] = False

    # The schedule's fields are the base's; these are Q-learning's defaults.
    num_envs: int = eqx.field(static=True, default=16)
    total_timesteps: int = eqx.field(static=True, default=500_000)
    buffer_size: int = eqx.field(static=True, default=20_000)
    learning_starts: int = eqx.field(static=True, default=10_000)
    batch_size: int = eqx.field(static=True, default=128)
    n_step: int = eqx.field(static=True, default=3)
    target_update_interval: int = eqx.field(static=True, default=50)
    tau: Float[Array, ""] = eqx.field(default=1.0, converter=in_range("tau", 0.0, 1.0))
    double_q: bool = eqx.field(static=True, default=True)
    bootstrap_on_truncation: bool = eqx.field(static=True, default=True)
    learning_rate: Float[Array, ""] = eqx.field(
        default=2.5e-4, converter=in_range("learning_rate", 0.0, math.inf, finite=True)
    )
    anneal_lr: bool = eqx.field(static=True, default=False)
    adam_eps: Float[Array, ""] = eqx.field(
        default=1e-8, converter=in_range("adam_eps", 0.0, math.inf, finite=True)
    )
    max_grad_norm: Float[Array, ""] | None = eqx.field(
        default=10.0,
        converter=in_range("max_grad_norm", 0.0, math.inf, optional=True),
    )
    gamma: Float[Array, ""] = eqx.field(
        default=0.99, converter=in_range("gamma", 0.0, 1.0)
    )
    exploration_initial_eps: Float[Array, ""] = eqx.field(
        default=1.0, converter=in_range("exploration_initial_eps", 0.0, 1.0)
    )
    exploration_final_eps: Float[Array, ""] = eqx.field(
        default=0.05, converter=in_range("exploration_final_eps", 0.0, 1.0)
    )
    exploration_fraction: Float[Array, ""] = eqx.field(
        default=0.25, converter=in_range("exploration_fraction", 0.0, 1.0)
    )
    exploration_decay: Float[Array, ""] | None = eqx.field(
        default=None,
        converter=in_range("exploration_decay", 0.0, 1.0, optional=True),
    )
    target_copy_interval: int | None = eqx.field(static=True, default=None)
    hidden_sizes: tuple[int, ...] = eqx.field(static=True, default=(64, 64))
    dueling: bool = eqx.field(static=True, default=False)
    network_factory: (
        Callable[[AbstractEnvironment, PRNGKeyArray], AbstractQNetwork] | None
    ) = eqx.field(static=True, default=None)

    def __check_init__(self):
        name = type(self).__name__
        check_replay_schedule(
            name,
            self,
            positive_fields=("n_step", "target_update_interval"),
            min_buffer_size=self.num_envs * max(self.n_step, 2),
            min_buffer_text=(
                "num_envs * max(n_step, 2) = "
                f"{self.num_envs * max(self.n_step, 2)} transitions"
            ),
        )
        interval = self.target_copy_interval
        if interval is not None and (
            isinstance(interval, bool) or not isinstance(interval, int) or interval < 1
        ):
            raise ValueError(
                f"{name}: target_copy_interval={interval!r} must be None or a "
                "positive int."
            )
        refuse_auto_reset(name, self.env)
        if not isinstance(self.env.action_space, Discrete):
            raise ValueError(
                f"{name}: needs a Discrete action space, got "
                f"{type(self.env.action_space).__name__}."
            )
        # The environment's contract and the network's shapes (see `_checks`).
        check_q_network(
            type(self).__name__,
            self.env,
            self.make_network,
            self.network_factory,
            quantiles=self.distributional,
            # On a multi-agent environment the algorithm configures a team
            # learner, which checks for itself (VDN and QMIX replay sequences).
            recurrent_allowed=num_agents_of(self.env) is not None,
        )

    # ------------------------------------------------------------------ config
    @abc.abstractmethod
    def make_network(self, key: PRNGKeyArray) -> AbstractQNetwork:
        """The initial Q-network (the target network starts as a copy of it)."""

    @abc.abstractmethod
    def loss(
        self,
        network: AbstractQNetwork,
        target_network: AbstractQNetwork,
        batch: ReplaySample,
        key: PRNGKeyArray,
    ) -> tuple[Float[Array, ""], dict[str, Array]]:
        """The loss of a minibatch (`[batch_size, ...]` leaves) and scalar statistics
        (the same keys every call)."""

    @property
    def training_env(self) -> AbstractEnvironment:
        """The environment as it is stepped: `AutoReset(EpisodeStatistics(env))`,
        also keeping the action mask of each episode's final state."""
        return AutoReset(_KeepFinalActionMask(EpisodeStatistics(self.env)))

    def make_optimizer(self) -> optax.GradientTransformation:
        """Global-norm clipping (unless `max_grad_norm` is `None`) then Adam, with
        the (optionally annealed) step size injected so that it is logged and
        sweepable."""
        first_update = max(0, -(-self.learning_starts // self.steps_per_iteration) - 1)
        total_updates = max(
            1, (self.num_iterations - first_update) * self.gradient_steps
        )

        schedule = learning_rate_schedule(
            self.learning_rate, anneal=self.anneal_lr, decay_steps=total_updates
        )

        # Without clipping no gradient norm is computed: one reduction per
        # parameter array less per update (IQN on rejax's settings, which do not
        # clip: 1.06x).
        clip = (
            optax.identity()
            if self.max_grad_norm is None
            else optax.clip_by_global_norm(self.max_grad_norm)
        )
        return optax.chain(
            clip,
            optax.inject_hyperparams(optax.adam, static_args=("b1", "b2", "eps_root"))(
                learning_rate=schedule, eps=self.adam_eps
            ),
        )

    def epsilon(self, env_steps: Int[ArrayLike, ""]) -> Float[Array, ""]:
        """The exploration rate after `env_steps` environment steps: 1 before
        `learning_starts`, then linear from `exploration_initial_eps` to
        `exploration_final_eps` over the first `exploration_fraction` of the run
        (with `exploration_decay`: `exploration_initial_eps` times
        `exploration_decay` to the number of completed iterations, at least
        `exploration_final_eps`)."""
        steps = jnp.asarray(env_steps).astype(jnp.float32)
        if self.exploration_decay is not None:
            iterations = jnp.asarray(env_steps) // self.steps_per_iteration
            decayed = self.exploration_initial_eps * jnp.power(
                self.exploration_decay, iterations.astype(jnp.float32)
            )
            epsilon = jnp.maximum(decayed, self.exploration_final_eps)
            return jnp.where(steps < self.learning_starts, jnp.float32(1.0), epsilon)
        decay_steps = jnp.maximum(self.exploration_fraction * self.total_timesteps, 1.0)
        progress = jnp.clip(steps / decay_steps, 0.0, 1.0)
        epsilon = self.exploration_initial_eps + progress * (
            self.exploration_final_eps - self.exploration_initial_eps
        )
        return jnp.where(steps < self.learning_starts, jnp.float32(1.0), epsilon)

    def current_learning_rate(self, optimizer_state: PyTree) -> Float[Array, ""]:
        """The step size of the latest update, from `make_optimizer`'s state."""
        return injected_learning_rate(optimizer_state)

    # ------------------------------------------------------------------ state
    def _transition(
        self, timestep: TimeStep, action: Int[Array, ""], next_timestep: TimeStep
    ) -> ReplayTransition:
        return ReplayTransition(
            observation=timestep.observation,
            action=action,
            reward=next_timestep.reward,
            **self.episode_ends(next_timestep),
            next_observation=next_timestep.extras["final_observation"],
            next_action_mask=next_timestep.extras["final_action_mask"],
        )

    def episode_ends(self, next_timestep: TimeStep) -> dict[str, Bool[Array, "*batch"]]:
        """The `terminated` and `truncated` flags a stored transition keeps: the
        step's own, or with `bootstrap_on_truncation=False` a truncation stored as
        a termination (so that no target bootstraps from it)."""
        if self.bootstrap_on_truncation:
            return dict(
                terminated=next_timestep.terminated, truncated=next_timestep.truncated
            )
        return dict(
            terminated=next_timestep.terminated | next_timestep.truncated,
            truncated=jnp.zeros_like(next_timestep.truncated),
        )

    def init(self, key: PRNGKeyArray) -> QLearningState:
        refuse_multi_agent(type(self).__name__, self.env)
        network_key, reset_key, state_key = jr.split(key, 3)
        network, optimizer_state = self._initial_network(network_key)
        env_state, timestep = jax.vmap(self.training_env.reset)(
            jr.split(reset_key, self.num_envs)
        )
        return self._initial_state(
            network, optimizer_state, env_state, timestep, state_key
        )

    def _initial_network(self, key: PRNGKeyArray) -> tuple[AbstractQNetwork, PyTree]:
        network = self.make_network(key)
        optimizer_state = self.make_optimizer().init(eqx.filter(network, eqx.is_array))
        return network, optimizer_state

    def _initial_state(
        self,
        network: AbstractQNetwork,
        optimizer_state: PyTree,
        env_state: PyTree,
        timestep: TimeStep,
        key: PRNGKeyArray,
    ) -> QLearningState:
        num_envs = timestep.reward.shape[0]
        example = jax.vmap(self._transition)(
            timestep, jnp.zeros(num_envs, jnp.int32), timestep
        )
        buffer = ReplayBuffer.empty(example, self.buffer_capacity)
        return QLearningState(
            network=network,
            target_network=network,
            optimizer_state=optimizer_state,
            buffer=buffer,
            env_state=env_state,
            timestep=timestep,
            key=key,
            iteration=jnp.int32(0),
            num_updates=jnp.int32(0),
        )

    def init_learner(self, key: PRNGKeyArray, timestep: TimeStep) -> QLearningState:
        """The state of a learner that does not step environments itself (one agent
        of a multi-agent environment, see
        [`Independent`][eqxrl.multiagent.Independent]): a new network, its
        optimizer state and an empty replay buffer shaped for `timestep`, with
        `env_state = None`.

        **Arguments:**

        - `key`: a PRNG key (the network's initial weights, and the state's key).
        - `timestep`: the learner's view of the first timestep of every environment
          it learns from, `[num_columns, ...]` leaves, as the environment's
          `AutoReset(EpisodeStatistics(...))` returns them (`extras` with
          `final_observation` and `final_action_mask`). The replay buffer gets
          one column per environment, `buffer_size // num_envs` rows.

        **Returns:**

        A [`QLearningState`][eqxrl.algorithms.QLearningState].
        """
        network_key, state_key = jr.split(key)
        network, optimizer_state = self._initial_network(network_key)
        return self._initial_state(network, optimizer_state, None, timestep, state_key)

    def diverged(
        self, state: QLearningState, metrics: dict[str, Array]
    ) -> Bool[Array, ""]:
        """Whether the loss is NaN or infinite on an iteration with updates (it is NaN
        by design on iterations without, before `learning_starts`).

        The loss is computed from the network before each update, so non-finite
        parameters show in the loss of the next update: one scalar test per
        iteration instead of a reduction over every parameter array.
        """
        return (state.num_updates > 0) & ~jnp.isfinite(metrics["loss"])

    def policy(
        self, state: QLearningState, deterministic: bool = False
    ) -> EpsilonGreedyPolicy:
        """Greedy on the trained network (`deterministic`), or epsilon-greedy with the
        exploration rate reached at `state`."""
        if deterministic:
            return EpsilonGreedyPolicy(state.network, jnp.float32(0.0))
        return EpsilonGreedyPolicy(
            state.network, self.epsilon(state.iteration * self.steps_per_iteration)
        )

    # -------------------------------------------------------------- iteration
    def _act(
        self,
        network: AbstractQNetwork,
        epsilon: Float[Array, ""],
        timestep: TimeStep,
        value_key: PRNGKeyArray,
        uniform: Float[Array, ""],
    ) -> Int[Array, ""]:
        """One environment's epsilon-greedy action (vmapped over environments)."""
        q_values = network.q_values(timestep.observation, value_key)
        return epsilon_greedy_action(q_values, uniform, epsilon, timestep.action_mask)

    def act(
        self,
        network: AbstractQNetwork,
        timestep: TimeStep,
        env_steps: Int[ArrayLike, ""],
        value_keys: Key[Array, " num_envs"],
        uniforms: Float[Array, " num_envs"],
    ) -> Int[Array, " num_envs"]:
        """Epsilon-greedy actions of a batch of environments (one collection step).

        **Arguments:**

        - `network`: the online network.
        - `timestep`: the latest timestep of every environment, `[num_envs, ...]`
          leaves.
        - `env_steps`: environment steps collected before this one (sets epsilon,
          see `epsilon`).
        - `value_keys`: one PRNG key per environment (for sampled action values).
        - `uniforms`: one uniform number in `[0, 1)` per environment (explore or
          not, and which random action; see
          [`epsilon_greedy_action`][eqxrl.nn.epsilon_greedy_action]).

        **Returns:**

        int32 `[num_envs]` actions, valid ones only where there are action masks.
        """
        epsilon = self.epsilon(env_steps)
        act = eqx.filter_vmap(self._act, in_axes=(None, None, 0, 0, 0))
        return act(network, epsilon, timestep, value_keys, uniforms)

    def store(
        self,
        buffer: ReplayBuffer,
        timestep: TimeStep,
        action: Int[Array, " num_envs"],
        next_timestep: TimeStep,
    ) -> tuple[ReplayBuffer, dict[str, Array]]:
        """Add one step of every environment to the replay buffer.

        **Arguments:**

        - `buffer`: the replay buffer.
        - `timestep`: the timesteps the actions were chosen at, `[num_envs, ...]`.
        - `action`: the actions taken.
        - `next_timestep`: the timesteps they led to (through `AutoReset`, so
          `extras["final_observation"]` holds the observation before a reset).

        **Returns:**

        `(buffer, statistics)`: the buffer with one more row, and with action
        masks `invalid_action` per environment (whether the action taken was
        masked; never, by construction), else nothing.
        """
        statistics = {}
        if timestep.action_mask is not None:
            valid = jnp.take_along_axis(timestep.action_mask, action[:, None], axis=1)[
                :, 0
            ]
            statistics["invalid_action"] = ~valid
        buffer = buffer.add(jax.vmap(self._transition)(timestep, action, next_timestep))
        return buffer, statistics

    def collect(
        self,
        state: QLearningState,
        value_key: PRNGKeyArray,
        uniform_key: PRNGKeyArray,
        step_key: PRNGKeyArray,
    ) -> tuple[QLearningState, tuple[Bool[Array, "..."], dict], dict[str, Array]]:
        """`train_frequency` epsilon-greedy steps of every environment
        ([`epsilon_greedy_collect`][eqxrl.algorithms.epsilon_greedy_collect]), each
        added to the buffer (`store`); `value_key` draws the sampled action values
        of a distributional network. Environments are stepped through
        [`AutoReset`][eqxrl.envs.AutoReset] (resets computed only on steps where an
        episode ended). See
        [`AbstractOffPolicyIteration.collect`][eqxrl.algorithms.AbstractOffPolicyIteration.collect]
        for what it returns; the other per-step statistics are `store`'s.
        """

        def act(carry, timestep, env_steps, value_keys, uniforms):
            action = self.act(state.network, timestep, env_steps, value_keys, uniforms)
            return carry, action

        def record(buffer, timestep, action, next_timestep):
            episodes = ended_episodes(next_timestep)
            buffer, statistics = self.store(buffer, timestep, action, next_timestep)
            return buffer, next_timestep, (episodes, statistics)

        first_step = state.iteration * self.steps_per_iteration
        (env_state, timestep, buffer, _), (episodes, statistics) = (
            epsilon_greedy_collect(
                act,
                jax.vmap(self.training_env.step),
                record,
                (state.env_state, state.timestep, state.buffer, None),
                epsilon_greedy_draws(
                    value_key,
                    uniform_key,
                    step_key,
                    self.train_frequency,
                    self.num_envs,
                ),
                first_step,
                self.num_envs,
            )
        )
        state = dataclasses.replace(
            state, env_state=env_state, timestep=timestep, buffer=buffer
        )
        return state, episodes, statistics

    def _gradient_steps(
        self,
        network: PyTree,
        target_network: PyTree,
        optimizer_state: PyTree,
        num_updates: Int[Array, ""],
        buffer: ReplayBuffer,
        sample_key: PRNGKeyArray,
        loss_key: PRNGKeyArray,
        loss: Callable,
        gather: Callable[[ReplayBuffer, Int[Array, " batch"]], PyTree],
        batch_size: int,
    ) -> tuple[PyTree, PyTree, PyTree, dict[str, Array]]:
        """`gradient_steps` minibatch updates, each followed by a target update when
        due."""
        optimizer = self.make_optimizer()
        grad_fn = eqx.filter_value_and_grad(loss, has_aux=True)

        def gradient_step(carry, inputs):
            network, target_network, optimizer_state = carry
            batch, loss_key, update_index = inputs
            (loss_value, statistics), grads = grad_fn(
                network, target_network, batch, loss_key
            )
            statistics = {**statistics, "loss": loss_value}  # what `diverged` checks
            params = eqx.filter(network, eqx.is_array)
            updates, optimizer_state = optimizer.update(grads, optimizer_state, params)
            network = eqx.apply_updates(network, updates)
            online, static = eqx.partition(network, eqx.is_array)
            target, _ = eqx.partition(target_network, eqx.is_array)
            target = polyak_update(
                online, target, self.tau, update_index, self.target_update_interval
            )
            if self.target_copy_interval is not None:
                target = copy_if_due(
                    online, target, update_index, self.target_copy_interval
                )
            target_network = eqx.combine(target, static)
            return (network, target_network, optimizer_state), statistics

        (network, target_network, optimizer_state), statistics = scan_or_step(
            gradient_step,
            (network, target_network, optimizer_state),
            (
                # All minibatches of the iteration drawn (one PRNG call) and
                # gathered before the loop: one gather per field per iteration
                # instead of one per update. On CPU, XLA runs a gather from a
                # large buffer on several threads, so each one costs a thread
                # pool round trip; gathered inside the loop, they were half of a
                # DQN update's time on rejax's settings.
                jax.vmap(lambda index: gather(buffer, index))(
                    buffer.sample_indices(sample_key, (self.gradient_steps, batch_size))
                ),
                random_split(loss_key, self.gradient_steps),
                num_updates + jnp.arange(self.gradient_steps, dtype=jnp.int32),
            ),
        )
        statistics = jtu.tree_map(jnp.mean, statistics)
        return network, target_network, optimizer_state, statistics

    def learn(
        self,
        network: PyTree,
        target_network: PyTree,
        optimizer_state: PyTree,
        buffer: ReplayBuffer,
        learning: Bool[Array, ""],
        num_updates: Int[Array, ""],
        sample_key: PRNGKeyArray,
        loss_key: PRNGKeyArray,
        *,
        loss: Callable | None = None,
        gather: Callable[[ReplayBuffer, Int[Array, " batch"]], PyTree] | None = None,
        batch_size: int | None = None,
    ) -> tuple[PyTree, PyTree, PyTree, Int[Array, ""], dict]:
        """An iteration's updates: if `learning`, `gradient_steps` minibatch
        updates (each followed by the target update when due), else nothing.

        **Arguments:**

        - `network`, `target_network`, `optimizer_state`: as in the training state
          (with `loss`, any pytree of models that `loss` takes, e.g. the agents'
          networks and a mixer; the target is updated leaf by leaf).
        - `buffer`: the replay buffer to sample from.
        - `learning`: whether to update (`learning_starts` reached); a `lax.cond`,
          so keep it unbatched under `vmap` for the skip to stay a skip.
        - `num_updates`: updates done before (times the target updates).
        - `sample_key`, `loss_key`: PRNG keys for the minibatches and the loss.
        - `loss`: `loss(network, target_network, batch, key) -> (loss,
          statistics)` in place of the algorithm's own
          [`loss`][eqxrl.algorithms.AbstractQLearning.loss] (value decomposition
          trains the agents and a mixer on the team's transitions with it).
        - `gather`: `gather(buffer, index) -> batch`, the minibatch at sampled
          indices; `None`: `buffer.gather` with the algorithm's `n_step` and
          `gamma` (recurrent value decomposition passes
          `ReplayBuffer.gather_sequences`).
        - `batch_size`: indices per minibatch; `None`: the algorithm's
          `batch_size`.

        **Returns:**

        `(network, target_network, optimizer_state, num_updates, statistics)`: the
        statistics of the loss (`loss`, ...; means over the updates), NaN when
        not `learning`.
        """
        loss_function = self.loss if loss is None else loss
        if gather is None:

            def gather(buffer: ReplayBuffer, index: Int[Array, " batch"]) -> PyTree:
                return buffer.gather(index, n_step=self.n_step, gamma=self.gamma)

        if batch_size is None:
            batch_size = self.batch_size

        def gradient_steps(learner):
            *learner, loss_statistics = self._gradient_steps(
                *learner,
                num_updates,
                buffer,
                sample_key,
                loss_key,
                loss_function,
                gather,
                batch_size,
            )
            return tuple(learner), loss_statistics

        def skipped_statistics():
            # NaN statistics shaped like the loss's (traced abstractly: no compute).
            def loss_statistics():
                batch = gather(buffer, buffer.sample_indices(sample_key, (batch_size,)))
                value, statistics = loss_function(
                    network, target_network, batch, loss_key
                )
                return {**statistics, "loss": value}

            shapes = jax.eval_shape(loss_statistics)
            return jtu.tree_map(lambda s: jnp.full(s.shape, jnp.nan, s.dtype), shapes)

        learner, num_updates, loss_statistics = self.update_if_learning(
            learning,
            (network, target_network, optimizer_state),
            num_updates,
            gradient_steps,
            skipped_statistics,
        )
        return *learner, num_updates, loss_statistics

    def update(
        self,
        state: QLearningState,
        learning: Bool[Array, ""],
        sample_key: PRNGKeyArray,
        loss_key: PRNGKeyArray,
    ) -> tuple[QLearningState, dict[str, Array]]:
        """`learn` on the state's networks and buffer: if `learning`,
        `gradient_steps` updates of the `loss` (statistics `loss`, `q_value`, ...:
        means over the updates, NaN when not `learning`)."""
        network, target_network, optimizer_state, num_updates, statistics = self.learn(
            state.network,
            state.target_network,
            state.optimizer_state,
            state.buffer,
            learning,
            state.num_updates,
            sample_key,
            loss_key,
        )
        state = dataclasses.replace(
            state,
            network=network,
            target_network=target_network,
            optimizer_state=optimizer_state,
            num_updates=num_updates,
        )
        return state, statistics

    def iteration_metrics(
        self,
        state: QLearningState,
        collected: Int[Array, ""],
        statistics: dict[str, Array],
    ) -> dict[str, Array]:
        """`epsilon` (of the iteration's last step), `learning_rate`, and with
        action masks `invalid_action_count` (always 0: masked actions are never
        taken)."""
        metrics = {
            "epsilon": self.epsilon(collected - self.num_envs),
            "learning_rate": self.current_learning_rate(state.optimizer_state),
        }
        if "invalid_action" in statistics:
            metrics["invalid_action_count"] = jnp.sum(
                statistics["invalid_action"]
            ).astype(jnp.int32)
        return metrics
