"""Proximal policy optimization: one iteration is a rollout, GAE advantages that
bootstrap through truncation, epochs of minibatch updates of the clipped surrogate
loss, and the running statistics (`PPO.train_iteration`, then `PPO.learn`)."""

import contextlib
import dataclasses
import functools
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import optax
from jaxtyping import Array, Float, Key, PRNGKeyArray, PyTree

from .._config import in_range
from .._random import split
from ..buffers import Transition
from ..envs import (
    AbstractEnvironment,
    AutoReset,
    Discrete,
    EpisodeStatistics,
    TimeStep,
    skip_action_checks,
)
from ..nn import (
    AbstractActorCritic,
    ActorCriticPolicy,
    NormalizedActorCritic,
    RunningMeanStd,
    batch_size_hint,
    reset_carry,
)
from ._base import injected_learning_rate
from ._brax_hyperparameters import brax_ppo_arguments
from ._checks import refuse_multi_agent, samples_only_valid_actions
from ._epochs import minibatch_epochs
from ._metrics import iteration_episode_metrics
from ._normalization import merged_observation_statistics, normalized_rewards
from ._observation_storage import restore_observation, store_observation
from ._on_policy import AbstractOnPolicyAlgorithm
from ._ppo_loss import (
    JudgedSteps,
    clipped_surrogate_loss,
    judge,
    judge_sequences,
    squashes_samples,
)
from ._ppo_network import (
    ACTIVATIONS,
    Activation,
    Initialization,
    NetworkFactory,
    StdParameterization,
    default_network,
    key_tuple,
    optional_tuple,
)
from ._ppo_options import check_options
from ._ppo_rollout import (
    collect_rollout,
    critic_values,
    rollout_transition,
    sample_action,
)
from ._ppo_state import PPOState, initial_state
from ._ppo_update import (
    clipped_adam,
    environment_rows,
    gradient_step,
    sequence_rows,
    step_rows,
)
from ._purejaxrl_config import purejaxrl_ppo_arguments
from ._returns import compute_gae
from ._row_blocks import cpu_row_blocks
from ._schedules import learning_rate_schedule


class PPO(AbstractOnPolicyAlgorithm[PPOState]):
    """Proximal policy optimization (clipped surrogate), discrete or continuous.

    One iteration collects `num_steps` steps from each of `num_envs` auto-resetting
    environments, computes GAE advantages (bootstrapping through truncation), then runs
    `num_epochs` passes of `num_minibatches` minibatch updates. Action masks are
    stored with each transition and applied alike when acting and when updating.
    `Box` action spaces get a diagonal Gaussian policy, optionally `tanh`-squashed as
    Brax's (see [Continuous control](../continuous-control.md)). More on the options
    below: [PPO's options][ppo-options].

    Sweepable numbers (`learning_rate`, `gamma`, `gae_lambda`, `clip_eps`, `ent_coef`,
    `vf_coef`, `max_grad_norm`, `reward_scale`) are float32 array leaves: build PPO
    inside `jax.vmap` over a batch of them to train a sweep in one compilation. The
    rest is static: changing it compiles a new program.

    **Arguments:**

    - `env`: the environment (one, not auto-resetting: PPO adds `AutoReset` and
      `EpisodeStatistics` itself).
    - `num_envs`: environments stepped in parallel.
    - `num_steps`: steps per environment per iteration.
    - `total_timesteps`: environment steps of the whole run.
    - `num_epochs`: passes over each rollout.
    - `num_minibatches`: minibatches per pass; must divide `num_envs * num_steps`
      (with a recurrent network, whose minibatches are whole sequences, `num_envs`).
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
    - `normalize_observations`: normalize observations by running mean and variance
      (shared by all environments, frozen within an iteration, exported with the
      policy).
    - `normalize_rewards`: scale rewards by the running standard deviation of the
      discounted return (as Stable-Baselines3's `VecNormalize`).
    - `reward_scale`: multiply every reward by this before computing advantages and
      value targets (Brax's `reward_scaling`); episode returns stay unscaled. `None`
      (default): rewards as they come.
    - `hidden_sizes`: widths of the default MLP layers: `MLPActorCritic`
      (`Discrete` actions) or `MLPGaussianActorCritic` (`Box` actions) on `Box`
      observations, [`MultiInputActorCritic`][eqxrl.nn.MultiInputActorCritic] on
      structured or `Discrete` ones.
    - `actor_hidden_sizes`: the default network's actor's widths; `None`:
      `hidden_sizes`.
    - `critic_hidden_sizes`: the default network's critic's widths; `None`:
      `hidden_sizes`.
    - `activation`: the default network's, `"tanh"` (default), `"relu"`, `"swish"`
      (Brax's), `"elu"` or `"gelu"`.
    - `squash_actions`: (`Box` actions in `[-1, 1]`) squash the default network's
      Gaussian samples with `tanh`, as Brax's `NormalTanhDistribution`.
    - `state_dependent_std`: (`Box` actions) the default network's actor outputs
      the standard deviation's parameters too, instead of a learned vector.
    - `std_parameterization`: (`Box` actions) `"log"` (default) or `"softplus"`
      (Brax's); see [`MLPGaussianActorCritic`][eqxrl.nn.MLPGaussianActorCritic].
    - `network_factory`: optional `factory(env, key) -> AbstractActorCritic` replacing
      the default network.
    - `actor_keys`: with a `Dict` observation space, the keys the default
      network's actor reads (e.g. `("state",)`); `None` reads all.
    - `critic_keys`: the keys the default network's critic reads (e.g.
      `("privileged_state",)` for an asymmetric actor-critic); `None` reads all.
    - `observation_storage_dtype`: store rollout observations in this dtype (e.g.
      `jnp.uint8` for 0/1 grids) and cast them back for the updates.
    - `gradient_transform`: an optax transformation applied to every minibatch's
      gradients before the clip and Adam ([`MAPPO`][eqxrl.multiagent.MAPPO]'s).
    - `initialization`: the default network's initial weights, `"orthogonal"`
      (default; PureJaxRL's and CleanRL's) or `"lecun_uniform"`: Brax's, which
      [`from_brax_hyperparameters`][eqxrl.PPO.from_brax_hyperparameters] sets.
    - `update_observation_statistics_first`: (with `normalize_observations`) merge
      the rollout's observations into the statistics before the epochs instead of
      after: Brax's order, which
      [`from_brax_hyperparameters`][eqxrl.PPO.from_brax_hyperparameters] sets.
    - `recompute_advantages`: **deprecated** (no gain measured; removed in the next
      release): recompute the advantages with the current critic at every epoch.
    - `minibatch_environments`: **deprecated** (no gain measured; removed in the
      next release): minibatches of whole environments' rollouts.

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
        static=True, default=None, converter=optional_tuple
    )
    critic_hidden_sizes: tuple[int, ...] | None = eqx.field(
        static=True, default=None, converter=optional_tuple
    )
    activation: Activation = eqx.field(static=True, default="tanh")
    squash_actions: bool = eqx.field(static=True, default=False)
    state_dependent_std: bool = eqx.field(static=True, default=False)
    std_parameterization: StdParameterization = eqx.field(static=True, default="log")
    network_factory: NetworkFactory | None = eqx.field(static=True, default=None)
    actor_keys: tuple[str, ...] | None = eqx.field(
        static=True, default=None, converter=lambda k: key_tuple("actor_keys", k)
    )
    critic_keys: tuple[str, ...] | None = eqx.field(
        static=True, default=None, converter=lambda k: key_tuple("critic_keys", k)
    )
    observation_storage_dtype: jnp.dtype | None = eqx.field(
        static=True,
        default=None,
        converter=lambda d: None if d is None else jnp.dtype(d),
    )
    gradient_transform: optax.GradientTransformation | None = eqx.field(
        static=True, default=None
    )
    # Brax's initialization and order, for `from_brax_hyperparameters`.
    initialization: Initialization = eqx.field(static=True, default="orthogonal")
    update_observation_statistics_first: bool = eqx.field(static=True, default=False)
    # Deprecated: no gain measured (`docs/continuous-control.md`).
    recompute_advantages: bool = eqx.field(static=True, default=False)
    minibatch_environments: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        check_options(self)

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
        current policy, from `key`. With `next_observation` (static), each
        transition's `extras["next_observation"]` is the observation its step
        reached before any reset (what [`AMP`][eqxrl.algorithms.AMP]'s
        discriminator reads).

        **Returns:**

        `(state, transitions, truncation_values, segment_carry)`: the state with
        the environments, timesteps and carries after the rollout (its key
        unchanged), and what [`learn`][eqxrl.PPO.learn] takes: the transitions
        `[num_steps, n, ...]`; per step, the critic's value of the final
        observation where the step truncated an episode, else zero; and a
        recurrent network's carries at the rollout's first step (else `None`).
        """
        env_state, timestep, carry, transitions, truncation_values = collect_rollout(
            self, state, key, next_observation=next_observation
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

    def learn(
        self,
        state: PPOState,
        transitions: Transition,
        truncation_values: Float[Array, "num_steps n"],
        key: PRNGKeyArray,
        segment_carry: PyTree[Array] | None = None,
    ) -> tuple[PPOState, dict[str, Array]]:
        """Everything an iteration does after its rollout: the advantages (GAE,
        bootstrapping through truncation from `truncation_values`), `num_epochs`
        passes of minibatch updates, the running statistics and the metrics.

        **Arguments:**

        - `state`: the state after the rollout (GAE bootstraps from the value of
          its `timestep`, the rollout's last).
        - `transitions`, `truncation_values`, `segment_carry`: what
          [`rollout`][eqxrl.PPO.rollout] returns (a recurrent network replays the
          rollout's sequences from `segment_carry`).
        - `key`: the PRNG key of the updates (minibatch order).

        **Returns:**

        `(state, metrics)`, with `state.iteration` one more; see `train_iteration`.
        """
        observation_statistics = state.observation_statistics
        if self.update_observation_statistics_first:
            observation_statistics = self._merged_statistics(
                observation_statistics, transitions
            )
        acting = self.acting_model(state.model, observation_statistics)
        if acting.is_recurrent and segment_carry is None:
            raise ValueError(
                "PPO.learn: a recurrent network needs the carries its rollout "
                "started from (segment_carry)."
            )
        next_values = self._next_state_values(
            acting, state, transitions, transitions.value, truncation_values
        )
        rewards, return_statistics, discounted_returns = self._rewards(
            state, transitions
        )
        advantages, returns = self._advantages(
            transitions, rewards, transitions.value, next_values
        )
        advantages_now = self._current_advantages(
            state, observation_statistics, transitions, rewards, truncation_values
        )
        (model, optimizer_state), statistics = self._update_epochs(
            state,
            observation_statistics,
            (transitions, advantages, returns, segment_carry),
            key,
            advantages_now,
        )
        if observation_statistics is not None and not (
            self.update_observation_statistics_first
        ):
            observation_statistics = self._merged_statistics(
                observation_statistics, transitions
            )
        metrics = self._metrics(statistics, transitions, optimizer_state)
        state = dataclasses.replace(
            state,
            model=model,
            optimizer_state=optimizer_state,
            iteration=state.iteration + 1,
            observation_statistics=observation_statistics,
            return_statistics=return_statistics,
            discounted_returns=discounted_returns,
        )
        return state, metrics

    def _next_state_values(
        self,
        acting: AbstractActorCritic,
        state: PPOState,
        transitions: Transition,
        values: Float[Array, "num_steps n"],
        truncation_values: Float[Array, "num_steps n"],
    ) -> Float[Array, "num_steps n"]:
        """The value of the state each step led to: the next step's value, the
        last observation's after the rollout, and the final observation's where an
        episode was truncated (`AutoReset` already shows the next episode there;
        valued by the rollout's critic)."""
        last_carries = self.starting_carries(acting, state.carry, state.timestep)
        last_value = jax.vmap(acting.step_value)(
            last_carries, state.timestep.observation
        )
        next_values = jnp.concatenate([values[1:], last_value[None]])
        return jnp.where(transitions.truncated, truncation_values, next_values)

    def _rewards(
        self, state: PPOState, transitions: Transition
    ) -> tuple[
        Float[Array, "num_steps n"], RunningMeanStd | None, Float[Array, " n"] | None
    ]:
        """The rewards that advantages and value targets are computed from: scaled
        by `reward_scale`, or with `normalize_rewards` divided by the running
        standard deviation of the discounted return (which cancels the scale up to
        the clipping); also the updated reward statistics."""
        rewards = transitions.reward
        if self.reward_scale is not None:
            rewards = rewards * self.reward_scale
        if not self.normalize_rewards:
            return rewards, state.return_statistics, state.discounted_returns
        return normalized_rewards(
            transitions.reward,
            transitions.terminated | transitions.truncated,
            state.return_statistics,
            state.discounted_returns,
            self.gamma,
        )

    def _advantages(
        self,
        transitions: Transition,
        rewards: Float[Array, "num_steps n"],
        values: Float[Array, "num_steps n"],
        next_values: Float[Array, "num_steps n"],
    ) -> tuple[Float[Array, "num_steps n"], Float[Array, "num_steps n"]]:
        """GAE's advantages and value targets."""
        return compute_gae(
            rewards,
            values,
            next_values,
            transitions.terminated,
            transitions.truncated,
            self.gamma,
            self.gae_lambda,
        )

    def _update_epochs(
        self,
        state: PPOState,
        observation_statistics: PyTree[RunningMeanStd | None],
        rollout: tuple[Transition, Array, Array, PyTree[Array] | None],
        key: PRNGKeyArray,
        advantages_now: Callable[[AbstractActorCritic], tuple[Array, Array]] | None,
    ) -> tuple[tuple[AbstractActorCritic, PyTree], dict[str, Array]]:
        """`num_epochs` passes of `num_minibatches` minibatch updates
        ([`minibatch_epochs`][eqxrl.algorithms.minibatch_epochs]) over the
        rollout's `(transitions, advantages, returns, segment_carry)`. Minibatches
        are rollout steps drawn from every environment, or (recurrent network,
        `minibatch_environments`) whole environments' rollouts. Returns the model
        and optimizer state, and every update's loss terms."""
        transitions, advantages, returns, segment_carry = rollout
        num_steps, num_columns = transitions.reward.shape
        batch_size = num_steps * num_columns
        minibatch_size = batch_size // self.num_minibatches
        flat = jtu.tree_map(
            lambda x: x.reshape(batch_size, *x.shape[2:]),
            (transitions, advantages, returns),
        )
        update = functools.partial(
            gradient_step,
            self._loss,
            self.make_optimizer(),
            observation_statistics,
            normalize_advantages=self.normalize_advantages,
            num_sequences=num_columns // self.num_minibatches,
            row_blocks=cpu_row_blocks(minibatch_size, state.model),
        )

        def recomputed_rows(carry):
            advantages, returns = advantages_now(carry[0])
            return (flat[0], advantages.reshape(-1), returns.reshape(-1))

        if state.model.is_recurrent:
            sequences = self._sequences(transitions, advantages, returns)
            rows, gather = (*sequences, segment_carry), sequence_rows
        elif self.minibatch_environments:
            rows, gather = flat, environment_rows(num_steps, num_columns)
        else:
            rows, gather = flat, step_rows
        return minibatch_epochs(
            update,
            (state.model, state.optimizer_state),
            rows,
            key,
            num_epochs=self.num_epochs,
            num_minibatches=self.num_minibatches,
            num_rows=batch_size if gather is step_rows else num_columns,
            gather=gather,
            minibatch_keys=squashes_samples(state.model, state.timestep),
            epoch_rows=None if advantages_now is None else recomputed_rows,
        )

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
        """The PPO loss of a minibatch, or of a block of its rows: the clipped
        surrogate loss of its stored steps judged anew; `advantages` come
        normalized over the whole minibatch. For a squashed Gaussian policy,
        `noise` (standard normal, one draw per action entry) samples the estimate
        of the squashed distribution's entropy. A recurrent network's minibatch is
        `[num_steps, n]` sequences, replayed from `carry` (see `replay`)."""
        network = self.acting_model(model, observation_statistics)
        if carry is None:

            def evaluate(observation, action_mask, action, noise):
                observation = self._restore_observation(observation)
                distribution, value = network(observation, action_mask)
                return judge(distribution, value, action_mask, action, noise)

            judged = jax.vmap(evaluate)(
                batch.observation, batch.action_mask, batch.action, noise
            )
        else:
            judged = self.replay(network, carry, batch, noise)
        return clipped_surrogate_loss(
            judged,
            batch,
            advantages,
            returns,
            clip_eps=self.clip_eps,
            clip_value_loss=self.clip_value_loss,
            vf_coef=self.vf_coef,
            ent_coef=self.ent_coef,
            discrete=isinstance(self.env.action_space, Discrete),
        )

    def _merged_statistics(
        self, statistics: PyTree[RunningMeanStd | None], transitions: Transition
    ) -> PyTree[RunningMeanStd | None]:
        """The observation statistics merged with the rollout's observations."""
        return merged_observation_statistics(
            statistics, self._restore_observation(transitions.observation)
        )

    def _metrics(
        self,
        statistics: dict[str, Array],
        transitions: Transition,
        optimizer_state: PyTree,
    ) -> dict[str, Array]:
        """An iteration's metrics (see `train_iteration`): the loss terms averaged
        over every update, the episodes', the invalid actions taken (with action
        masks) and the latest step size."""
        metrics = jtu.tree_map(jnp.mean, statistics)
        metrics.update(episode_metrics(transitions))
        if transitions.action_mask is not None:
            taken_valid = jnp.take_along_axis(
                transitions.action_mask, transitions.action[..., None], axis=-1
            )
            metrics["invalid_action_count"] = jnp.sum(~taken_valid).astype(jnp.int32)
        metrics["learning_rate"] = self.current_learning_rate(optimizer_state)
        return metrics

    def _current_advantages(
        self,
        state: PPOState,
        observation_statistics: PyTree[RunningMeanStd | None],
        transitions: Transition,
        rewards: Float[Array, "num_steps n"],
        truncation_values: Float[Array, "num_steps n"],
    ) -> Callable[[AbstractActorCritic], tuple[Array, Array]] | None:
        """With `recompute_advantages` (deprecated), the function from a model to
        the advantages and value targets of its critic as it is now, the rollout's
        observations valued again; else `None`."""
        if not self.recompute_advantages:
            return None
        if state.model.is_recurrent:
            raise ValueError(
                "PPO: recompute_advantages=True needs a feed-forward critic (a "
                "recurrent one would replay every sequence at each epoch)."
            )

        def advantages_and_returns(model):
            acting = self.acting_model(model, observation_statistics)
            observations = self._restore_observation(transitions.observation)
            values = critic_values(acting, observations)
            next_values = self._next_state_values(
                acting, state, transitions, values, truncation_values
            )
            return self._advantages(transitions, rewards, values, next_values)

        return advantages_and_returns

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
        extras = {**transitions.extras, "episode_start": episode_start}
        transitions = eqx.tree_at(lambda t: t.extras, transitions, extras)
        return transitions, advantages, returns

    @classmethod
    def from_brax_hyperparameters(
        cls, env: AbstractEnvironment, **brax_arguments: Any
    ) -> "PPO":
        """PPO configured as Brax's `brax.training.agents.ppo.train(environment,
        **brax_arguments)` (Brax 0.14): the same environment steps per iteration,
        minibatch size, passes and total environment steps, and Brax's policy,
        initial weights and order of the observation statistics' update.

        `brax_arguments` are Brax's `ppo.train` keyword arguments as published
        (e.g. `**train_fn.keywords` of a `functools.partial(ppo.train, ...)`), and
        optionally `policy_hidden_layer_sizes`, `value_hidden_layer_sizes` and
        `activation` of its `make_ppo_networks`. Arguments left out take Brax's
        defaults; host-side ones (`seed`, `num_evals`, ...) are not used; those
        with no eqxrl equivalent raise a `ValueError` naming them. `env` is the
        eqxrl environment (e.g. `eqxrl.envs.from_brax(brax_env)`), without a time
        limit (`episode_length` adds it). What becomes what, and what still
        differs: [Continuous control](../continuous-control.md#from-brax-to-eqxrl).

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
        PPO `config` dict (`ppo.py`, `ppo_continuous_action.py`), or a
        [JaxMARL](https://github.com/FLAIROx/JaxMARL) IPPO one (the same keys; wrap
        the result in [`Independent`][eqxrl.multiagent.Independent]), as written
        (before JaxMARL's `make_train` divides `CLIP_EPS`). `**overrides` are PPO
        keyword arguments that replace or add to the translated ones.

        The keys become PPO's arguments, the network is PPO's default MLP with
        PureJaxRL's layers, a key left out takes PPO's default (the value of
        `ppo.py`'s CartPole config), and the keys `make_train` derives are checked:
        see [Migrating from PureJaxRL][purejaxrl-config]. A key that cannot be
        translated, a count that is not a whole number, a flag that is not a bool
        or a derived key that disagrees is a `ValueError` naming it.

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
        `AutoReset(EpisodeStatistics(env))` (and the truncation bootstrap's hook)."""
        return AutoReset(EpisodeStatistics(self.env))

    def make_network(self, key: PRNGKeyArray) -> AbstractActorCritic:
        """The initial actor-critic: `network_factory(env, key)` or the default
        network (see `hidden_sizes`)."""
        if self.network_factory is not None:
            return self.network_factory(self.env, key)
        return default_network(self, key)

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
        the step size injected (logged and sweepable; with `anneal_lr`, decaying
        linearly to zero at `num_iterations`), over the parameters as one vector."""
        schedule = learning_rate_schedule(
            self.learning_rate,
            anneal=self.anneal_lr,
            decay_steps=self.num_iterations,
            updates_per_step=self.num_epochs * self.num_minibatches,
        )
        return clipped_adam(schedule, self.max_grad_norm, self.gradient_transform)

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
        return initial_state(
            self, model, optimizer_state, env_state, timestep, state_key
        )

    def init_learner(self, key: PRNGKeyArray, timestep: TimeStep) -> PPOState:
        """The state of a learner that does not step environments itself (one agent
        of a multi-agent environment, see
        [`Independent`][eqxrl.multiagent.Independent]): a new actor-critic, its
        optimizer state and empty running statistics, with `env_state = None`;
        `timestep` is its view of the first timestep of every environment it
        learns from, `[num_columns, ...]` leaves."""
        network_key, state_key = jr.split(key)
        model, optimizer_state = self._initial_model(network_key)
        return initial_state(self, model, optimizer_state, None, timestep, state_key)

    def _initial_model(self, key: PRNGKeyArray) -> tuple[AbstractActorCritic, PyTree]:
        model = self.make_network(key)
        optimizer_state = self.make_optimizer().init(eqx.filter(model, eqx.is_array))
        return model, optimizer_state

    def environment_axes(self, state: PPOState) -> PyTree[int]:
        """Environments come first in the environment states, the timesteps, the
        running discounted returns of reward normalization and the recurrent
        carries."""
        axes = super().environment_axes(state)
        if state.discounted_returns is not None:
            axes = eqx.tree_at(lambda tree: tree.discounted_returns, axes, 0)
        if state.carry is not None:
            carry_axes = jtu.tree_map(lambda _: 0, state.carry)
            axes = eqx.tree_at(lambda tree: tree.carry, axes, carry_axes)
        return axes

    def policy(self, state: PPOState, deterministic: bool = False) -> ActorCriticPolicy:
        model = self.acting_model(state.model, state.observation_statistics)
        return ActorCriticPolicy(model, deterministic)

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
        """Sample every environment's action, as each step of the rollout does:
        `model` is the acting model (`acting_model(state.model,
        state.observation_statistics)`), `timestep` every environment's latest,
        `keys` one per environment, `carry` a recurrent network's carries as it
        returned them at the previous step (`state.carry`; reset where `timestep`
        starts an episode), `None` for a feed-forward network.

        **Returns:**

        `(carry, stored_action, action, log_prob, value)`, each `[n, ...]`: the
        carries after this step, what the rollout stores (for a squashed Gaussian
        the sample before the `tanh`, else the action), the action to step with,
        its log-probability and the critic's value.
        """
        return eqx.filter_vmap(sample_action, in_axes=(None, 0, 0, 0))(
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
        transition = jax.vmap(rollout_transition)(
            timestep, stored_action, log_prob, value, next_timestep
        )
        return eqx.tree_at(
            lambda t: t.observation,
            transition,
            store_observation(transition.observation, self.observation_storage_dtype),
        )

    def starting_carries(
        self,
        model: AbstractActorCritic,
        carry: PyTree[Array] | None,
        timestep: TimeStep,
    ) -> PyTree[Array] | None:
        """The carries `model` reads `timestep`'s observations with (`[n, ...]`
        leaves): its initial carry where an observation starts an episode (after a
        terminated or truncated step), else `carry`, the carries it returned at
        the previous step. `None` (feed-forward) stays `None`."""
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
    ) -> JudgedSteps:
        """A recurrent network re-reads stored sequences (`[num_steps, n, ...]`
        transitions; backpropagation through time goes through this): from
        `carry`, the carries their first step was read with, step by step, reset
        where `sequences.extras["episode_start"]` says an episode starts, as the
        rollout did. `noise`: for a squashed Gaussian, standard normal samples of
        the entropy estimate.

        **Returns:**

        `(log_prob, entropy, max_entropy, value)`, each `[num_steps, n]`: the
        stored actions' log-probabilities, the entropies, the uniform policy's
        entropies (NaN for `Box` actions) and the values.
        """
        observations = self._restore_observation(sequences.observation)
        return judge_sequences(network, carry, observations, sequences, noise)

    @contextlib.contextmanager
    def rollout_context(
        self, model: AbstractActorCritic, num_columns: int
    ) -> Iterator[None]:
        """What the rollout's steps are traced under:
        [`batch_size_hint`][eqxrl.nn.batch_size_hint]`(num_columns)`, for
        `num_columns` environments stepped together, and, when `model` samples
        valid actions only, [`skip_action_checks`][eqxrl.envs.skip_action_checks]`()`.
        """
        checks = (
            skip_action_checks()
            if samples_only_valid_actions(model, self.env)
            else contextlib.nullcontext()
        )
        with batch_size_hint(num_columns), checks:
            yield

    def _restore_observation(self, observation: PyTree[Array]) -> PyTree[Array]:
        """Stored observations (any batch shape) cast back to the dtypes the
        environment returns."""
        return restore_observation(
            observation, self.env, self.observation_storage_dtype
        )

    @property
    def compiler_options(self) -> dict[str, Any]:
        """On CPU, [`cpu_compiler_options()`][eqxrl.algorithms.cpu_compiler_options]
        and `xla_cpu_multi_thread_eigen=False`: the update's small weight-gradient
        products run on one thread, not split over XLA's thread pool (about 4%
        faster on the contract CartPole config). Elsewhere, `{}`."""
        if jax.default_backend() != "cpu":
            return {}
        return {**super().compiler_options, "xla_cpu_multi_thread_eigen": False}


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
