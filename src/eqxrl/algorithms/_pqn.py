"""PQN: Q-learning without replay buffer or target network (Gallici et al., 2024), with
a feed-forward or a recurrent (PQN-RNN) Q-network."""

import math
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

import equinox as eqx
import jax
import jax.lax as lax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import optax
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray, PyTree

from .._config import in_range
from .._filters import filter_scan
from .._random import (
    split,
    uniform as random_uniform,
)
from ..envs import (
    AbstractEnvironment,
    AutoReset,
    Box,
    Discrete,
    EpisodeStatistics,
    TimeStep,
    skip_action_checks,
)
from ..nn import (
    AbstractQNetwork,
    CNNQNetwork,
    EpsilonGreedyPolicy,
    GRUQNetwork,
    MLPQNetwork,
    epsilon_greedy_action,
    greedy_action,
    reset_carry,
    sequence_batch_hint,
)
from ._base import injected_learning_rate
from ._checks import check_q_network, refuse_auto_reset, refuse_multi_agent
from ._epochs import minibatch_epochs
from ._metrics import episode_statistics, iteration_episode_metrics
from ._on_policy import AbstractOnPolicyAlgorithm
from ._returns import compute_q_lambda_returns
from ._rollout import step_with_truncation_value
from ._schedules import learning_rate_schedule


class PQNState(eqx.Module):
    """PQN's training state.

    **Fields:**

    - `network`: the Q-network (the only network: PQN has no target network).
    - `optimizer_state`: its optimizer's state.
    - `env_state`, `timestep`: the `num_envs` environments (leading axis) and their
      latest timestep.
    - `key`: the PRNG key of the next iteration.
    - `iteration`: completed iterations (int32), which the exploration schedule
      reads.
    - `carry`: with a recurrent network (PQN-RNN), each environment's carry as the
      network returned it at the latest step, `[num_envs, ...]` leaves (reset to
      the initial carry where `timestep` starts an episode, when the next step
      reads it), else `None`.
    """

    network: AbstractQNetwork
    optimizer_state: PyTree
    env_state: PyTree
    timestep: TimeStep
    key: PRNGKeyArray
    iteration: Int[Array, ""]
    carry: PyTree[Array] | None = None


StateT = TypeVar("StateT")


@runtime_checkable
class PQNLearner(Protocol):
    """What [`PQN.iteration`][eqxrl.PQN.iteration] reads of the learner whose
    values it trains: PQN itself (one Q-network), or
    [`PQNVDN`][eqxrl.multiagent.PQNVDN] (a team's summed values)."""

    def collect(
        self, state: Any, epsilon: Float[Array, ""], key: PRNGKeyArray
    ) -> tuple[PyTree, TimeStep, PyTree[Array] | None, Any]: ...

    def greedy_values(
        self, network: AbstractQNetwork, timestep: TimeStep
    ) -> Float[Array, " num_envs"]: ...

    def loss(self, network: AbstractQNetwork, *rows: Any) -> tuple[Array, dict]: ...

    def sequence_loss(
        self, network: AbstractQNetwork, *rows: Any
    ) -> tuple[Array, dict]: ...

    def episode_metrics(self, done: Array, extras: dict) -> dict[str, Array]: ...


class PQNRollout(eqx.Module):
    """What a step of the environments saw, did and got, and the greedy values its
    targets bootstrap from; `[num_envs, ...]` leaves for one step, stacked to
    `[num_steps, num_envs, ...]` over a rollout.

    **Fields:**

    - `observation`, `action_mask`: the step's observation and valid actions.
    - `action`: the epsilon-greedy action taken (int32).
    - `reward`, `terminated`, `truncated`: what the step returned.
    - `value`: the greedy (valid) value `max_a Q(observation, a)` when acting.
    - `truncation_value`: where the step truncated an episode, the greedy value of
      the episode's final observation (zero elsewhere; a recurrent network reads
      it with the carry of the episode's steps before it).
    - `extras`: the episode statistics
      ([`episode_statistics`][eqxrl.algorithms.episode_statistics]).
    - `episode_start`: with a recurrent network, whether `observation` is the
      first of an episode (the network read it with its initial carry), else
      `None`.
    """

    observation: PyTree[Array]
    action_mask: Bool[Array, "*batch num_actions"] | None
    action: Int[Array, "*batch"]
    reward: Float[Array, "*batch"]
    terminated: Bool[Array, "*batch"]
    truncated: Bool[Array, "*batch"]
    value: Float[Array, "*batch"]
    truncation_value: Float[Array, "*batch"]
    extras: dict[str, Array | dict[str, Array]]
    episode_start: Bool[Array, "*batch"] | None = None


def is_grid_space(space: object) -> bool:
    """Whether observations are one `[height, width, channels]` board that a 3x3
    unpadded convolution can read (height and width at least 3)."""
    return (
        isinstance(space, Box) and len(space.shape) == 3 and min(space.shape[:2]) >= 3
    )


def greedy_value(
    q_values: Float[Array, " num_actions"],
    action_mask: Bool[Array, " num_actions"] | None = None,
) -> Float[Array, ""]:
    """The value of the greedy valid action."""
    return q_values[greedy_action(q_values, action_mask)]


def epsilon_greedy_rollout(
    env: AbstractEnvironment,
    env_state: PyTree,
    timestep: TimeStep,
    carry: PyTree[Array] | None,
    epsilon: Float[Array, ""],
    key: PRNGKeyArray,
    num_steps: int,
    *,
    values: Callable[
        [PyTree[Array] | None, PyTree[Array]], tuple[PyTree[Array] | None, Array]
    ],
    initial_carry: Callable[[], PyTree[Array]] | None,
    greedy_value: Callable[[Array, Array | None], Float[Array, ""]],
    choose: Callable[..., Array],
    uniform_shape: tuple[int, ...] = (),
    team_reward: Callable[[Array], Array] | None = None,
    rollout_type: type = PQNRollout,
) -> tuple[PyTree, TimeStep, PyTree[Array] | None, PyTree]:
    """PQN's rollout: `num_steps` epsilon-greedy steps of `num_envs` worlds (the
    leading axis of `env_state` and `timestep`), keeping each step's greedy value
    and, where a step truncated an episode, the greedy value of the episode's final
    observation. What [`PQN`][eqxrl.PQN] and
    [`PQNVDN`][eqxrl.multiagent.PQNVDN] (a team's values) both collect.

    A recurrent network's carry flows from step to step, reset to
    `initial_carry()` where the observation about to be read starts an episode; a
    truncated episode's final observation is valued with the carry of the
    episode's steps before it.

    **Arguments:**

    - `env`: the environment, without `AutoReset` (stepped as
      `AutoReset(EpisodeStatistics(env))`).
    - `env_state`, `timestep`: every world's state and latest timestep.
    - `carry`: every world's carry (`[num_envs, ...]` leaves), or `None` for a
      feed-forward network.
    - `epsilon`: the exploration rate.
    - `key`: a PRNG key.
    - `num_steps`: steps per world.
    - `values`: `values(carry, observation) -> (carry, q_values)` of one world
      (`carry` is `None` for a feed-forward network, and returned as it came).
    - `initial_carry`: a recurrent network's carry at an episode's start (unused,
      and may be `None`, without a carry).
    - `greedy_value`: `greedy_value(q_values, action_mask)`, the value a target
      bootstraps from.
    - `choose`: `choose(q_values, uniform, epsilon, action_mask) -> action` of one
      world, from `uniform` draws of shape `uniform_shape`.
    - `uniform_shape`: the shape of one world's uniform draws (e.g. one per agent).
    - `team_reward`: maps one step's rewards (`[num_envs, ...]`) to the stored
      reward (e.g. the sum over agents); `None` keeps them.
    - `rollout_type`: the rollout class to fill (`PQNRollout`'s fields).

    **Returns:**

    `(env_state, timestep, carry, rollout)`: the worlds' states, timesteps and
    carries after the steps, and the `[num_steps, num_envs, ...]` rollout.
    """
    num_envs = timestep.terminated.shape[0]
    recurrent = carry is not None

    def step_world(world_state, action, world_key, world_carry):
        def truncation_value(final: TimeStep) -> Float[Array, ""]:
            # A truncated episode's target bootstraps from the greedy value of the
            # state it reached (a recurrent network reads it with the carry after
            # the episode's last step).
            _, q_values = values(world_carry, final.observation)
            return greedy_value(q_values, final.action_mask)

        return step_with_truncation_value(
            env, truncation_value, world_state, action, world_key
        )

    def step(scan_carry, step_key):
        env_state, timestep, world_carry = scan_carry
        keys = split(step_key, (num_envs, 2))
        episode_start = None
        if recurrent:
            # A timestep that ended an episode shows the next one's first
            # observation (AutoReset): it is read with the initial carry.
            episode_start = timestep.terminated | timestep.truncated
            world_carry = jax.vmap(reset_carry, in_axes=(0, None, 0))(
                world_carry,
                initial_carry(),  # pyright: ignore[reportOptionalCall]
                episode_start,
            )
            world_carry, q_values = jax.vmap(values)(world_carry, timestep.observation)
        else:
            q_values = jax.vmap(lambda o: values(None, o)[1])(timestep.observation)
        uniform = jax.vmap(lambda k: random_uniform(k, uniform_shape))(keys[:, 0])
        action = jax.vmap(choose, in_axes=(0, 0, None, 0))(
            q_values, uniform, epsilon, timestep.action_mask
        )
        env_state, next_timestep, truncation_values = jax.vmap(step_world)(
            env_state, action, keys[:, 1], world_carry
        )
        reward = next_timestep.reward
        rollout = rollout_type(
            observation=timestep.observation,
            action_mask=timestep.action_mask,
            action=action,
            reward=reward if team_reward is None else team_reward(reward),
            terminated=next_timestep.terminated,
            truncated=next_timestep.truncated,
            value=jax.vmap(greedy_value)(q_values, timestep.action_mask),
            truncation_value=truncation_values,
            extras=episode_statistics(next_timestep),
            episode_start=episode_start,
        )
        return (env_state, next_timestep, world_carry), rollout

    # Epsilon-greedy actions are valid actions: the environment need not check.
    with skip_action_checks():
        (env_state, timestep, carry), rollout = filter_scan(
            step, (env_state, timestep, carry), split(key, num_steps)
        )
    return env_state, timestep, carry, rollout


class PQN(AbstractOnPolicyAlgorithm[PQNState]):
    """Parallelised Q-Network (Gallici et al., 2024, "Simplifying Deep Temporal
    Difference Learning"): Q-learning from a vectorized rollout, without a replay
    buffer or a target network, stabilized by LayerNorm.

    One iteration, as the paper's pseudocode:

    1. step `num_envs` auto-resetting environments `num_steps` times with an
       epsilon-greedy policy on the Q-network, keeping each step's greedy value;
    2. compute Q(lambda) targets over the rollout
       ([`compute_q_lambda_returns`][eqxrl.algorithms.compute_q_lambda_returns]):
       a terminated step bootstraps from nothing, a truncated one from the greedy
       value of its final observation, and no target crosses an episode end;
    3. take `num_epochs` passes of `num_minibatches` shuffled minibatches over the
       rollout, each a gradient step (global-norm clipping, then RAdam) on
       `0.5 * (Q(s, a) - target)^2`.

    The defaults are purejaxql's `pqn_cartpole` config: 32 environments x 64 steps,
    500k steps, 4 epochs x 16 minibatches, a 2 x 256 ReLU Q-network with LayerNorm,
    learning rate 1e-4 decayed linearly to zero, gradient norm 10, rewards scaled by
    0.1, gamma 0.99, lambda 0.95, epsilon from 1 to 0.2 over the first 20% of the
    iterations. Sweepable numbers are float32 array leaves.

    **PQN-RNN.** With a recurrent network (`gru_size=256`: a GRU after the
    LayerNorm hidden layers, as purejaxql's; or `network_factory=` any
    [`AbstractRecurrentQNetwork`][eqxrl.nn.AbstractRecurrentQNetwork]'s factory)
    it is the recurrent PQN of purejaxql's `pqn_rnn_gymnax.py`. The state keeps each
    environment's carry, which the rollout steps and resets to `initial_carry()`
    where an episode starts; the rollout keeps those episode starts and the
    learner the carries it started from. Minibatches are whole environments'
    sequences (`num_minibatches` must divide `num_envs`), unrolled from those
    carries. As purejaxql does, every gradient step recomputes the Q(lambda)
    targets from the minibatch's unrolled Q-values (gradients stopped), not from
    the values seen while acting. Two differences: the last step bootstraps from
    the observation after the rollout, unrolled as one more step (purejaxql
    leaves the last step out of the loss), and a truncated step from the greedy
    value of its final observation as the rollout saw it (gymnax ends both alike).
    Not reproduced: purejaxql's "memory window" (the previous rollout's last steps
    prepended to the sequences), its random-action warm-up rollout, and the
    previous action as a network input. LayerNorm in the layers before the GRU
    is what PQN-RNN needs to learn a long memory: without it, it does not solve
    gymnax's `MemoryChain` at purejaxql's config; with it, it does.

    **Arguments:**

    - `env`: the environment (a `Discrete` action space), without `AutoReset`.
    - `num_envs`: environments stepped in parallel.
    - `num_steps`: steps per environment per iteration.
    - `total_timesteps`: environment steps of a run (`num_iterations` iterations of
      `num_envs * num_steps`).
    - `num_epochs`, `num_minibatches`: passes over the rollout and minibatches per
      pass (`num_minibatches` must divide `num_envs * num_steps`; with a recurrent
      network, whose minibatches are whole sequences, `num_envs`).
    - `learning_rate`, `anneal_lr`: the step size and whether it decays linearly
      to zero over the run.
    - `max_grad_norm`: global-norm gradient clipping.
    - `gamma`: discount factor.
    - `q_lambda`: the lambda of the Q(lambda) targets (0: one-step targets).
    - `reward_scale`: rewards are multiplied by it in the targets (the logged
      episode returns are the environment's).
    - `exploration_initial_eps`, `exploration_final_eps`,
      `exploration_fraction`: epsilon decays linearly from the first to the second
      over the first `exploration_fraction` of the iterations.
    - `hidden_sizes`, `layer_norm`: the default Q-network's hidden layers
      ([`MLPQNetwork`][eqxrl.nn.MLPQNetwork]; non-`Box` observations go through
      an [`ObservationEncoder`][eqxrl.nn.ObservationEncoder], images in a `Dict`
      through its CNN) and whether it normalizes them. A grid observation (a
      `Box` of shape `[height, width, channels]`, both sides at least 3) gets
      purejaxql's MinAtar network instead, a
      [`CNNQNetwork`][eqxrl.nn.CNNQNetwork] at its defaults (one 3x3
      convolution to 16 channels, a 128-wide dense layer), which reads only
      `layer_norm`.
    - `gru_size`: a GRU of this many units between the default network's hidden
      layers and its output makes it recurrent (PQN-RNN: a
      [`GRUQNetwork`][eqxrl.nn.GRUQNetwork] with `encoder_sizes=hidden_sizes`
      and `layer_norm`, purejaxql's PQN-RNN network at `hidden_sizes=(256, 256),
      gru_size=256`); `None` (the default) keeps it feed-forward.
    - `network_factory`: optional `factory(env, key) -> AbstractQNetwork` instead;
      a recurrent one (e.g. `eqxrl.nn.GRUQNetwork.from_env`) makes it PQN-RNN.

    !!! example

        ```python
        pqn = eqxrl.PQN(env=eqxrl.envs.make("CartPole-v1"))
        state, metrics = pqn.train(jax.random.key(0))
        action = pqn.policy(state, deterministic=True)(observation, key)

        # PQN-RNN: a GRU Q-network on CartPole without velocities.
        pqn_rnn = eqxrl.PQN(env=eqxrl.envs.make("StatelessCartPole-v1"), gru_size=128)
        state, metrics = pqn_rnn.train(jax.random.key(0))
        result = eqxrl.training.evaluate(  # acts with its carry
            pqn_rnn.policy(state, deterministic=True), pqn_rnn.env, key
        )
        ```
    """

    env: AbstractEnvironment
    num_envs: int = eqx.field(static=True, default=32)
    num_steps: int = eqx.field(static=True, default=64)
    total_timesteps: int = eqx.field(static=True, default=500_000)
    num_epochs: int = eqx.field(static=True, default=4)
    num_minibatches: int = eqx.field(static=True, default=16)
    learning_rate: Float[Array, ""] = eqx.field(
        default=1e-4, converter=in_range("learning_rate", 0.0, math.inf)
    )
    anneal_lr: bool = eqx.field(static=True, default=True)
    max_grad_norm: Float[Array, ""] = eqx.field(
        default=10.0, converter=in_range("max_grad_norm", 1e-12, math.inf)
    )
    gamma: Float[Array, ""] = eqx.field(
        default=0.99, converter=in_range("gamma", 0.0, 1.0)
    )
    q_lambda: Float[Array, ""] = eqx.field(
        default=0.95, converter=in_range("q_lambda", 0.0, 1.0)
    )
    reward_scale: Float[Array, ""] = eqx.field(
        default=0.1, converter=in_range("reward_scale", 0.0, math.inf)
    )
    exploration_initial_eps: Float[Array, ""] = eqx.field(
        default=1.0, converter=in_range("exploration_initial_eps", 0.0, 1.0)
    )
    exploration_final_eps: Float[Array, ""] = eqx.field(
        default=0.2, converter=in_range("exploration_final_eps", 0.0, 1.0)
    )
    exploration_fraction: Float[Array, ""] = eqx.field(
        default=0.2, converter=in_range("exploration_fraction", 0.0, 1.0)
    )
    hidden_sizes: tuple[int, ...] = eqx.field(
        static=True, default=(256, 256), converter=tuple
    )
    layer_norm: bool = eqx.field(static=True, default=True)
    gru_size: int | None = eqx.field(static=True, default=None)
    network_factory: (
        Callable[[AbstractEnvironment, PRNGKeyArray], AbstractQNetwork] | None
    ) = eqx.field(static=True, default=None)

    def __check_init__(self):
        for name in ("num_envs", "num_steps", "num_epochs", "num_minibatches"):
            if getattr(self, name) < 1:
                raise ValueError(f"PQN: {name}={getattr(self, name)} must be >= 1.")
        if self.gru_size is not None:
            if self.gru_size < 1:
                raise ValueError(f"PQN: gru_size={self.gru_size} must be >= 1.")
            if self.network_factory is not None:
                raise ValueError(
                    "PQN: gru_size shapes the default network, and network_factory "
                    "replaces it; set one of them."
                )
        if self.total_timesteps < self.steps_per_iteration:
            raise ValueError(
                f"PQN: total_timesteps={self.total_timesteps} is less than one "
                f"iteration of num_envs * num_steps = {self.steps_per_iteration} "
                "steps."
            )
        if not isinstance(self.env.action_space, Discrete):
            raise ValueError(
                "PQN: needs a Discrete action space, got "
                f"{type(self.env.action_space).__name__}."
            )
        refuse_auto_reset("PQN", self.env)
        check_q_network(
            "PQN",
            self.env,
            self.make_network,
            self.network_factory,
            quantiles=False,
            recurrent_allowed=True,
        )
        network = eqx.filter_eval_shape(self.make_network, jr.key(0))  # no weights
        if network.is_recurrent and self.num_envs % self.num_minibatches:
            raise ValueError(
                "PQN: a recurrent network learns from whole sequences, in "
                f"minibatches of environments: num_minibatches={self.num_minibatches}"
                f" must divide num_envs={self.num_envs}."
            )
        if self.steps_per_iteration % self.num_minibatches:
            raise ValueError(
                f"PQN: num_minibatches={self.num_minibatches} must divide the "
                f"{self.steps_per_iteration} steps of an iteration (num_envs * "
                "num_steps)."
            )

    # ------------------------------------------------------------------ config
    @property
    def training_env(self) -> AbstractEnvironment:
        """The environment as it is stepped: `AutoReset(EpisodeStatistics(env))`."""
        return AutoReset(EpisodeStatistics(self.env))

    def make_network(self, key: PRNGKeyArray) -> AbstractQNetwork:
        """The initial Q-network: `network_factory(env, key)` (recurrent or not);
        with `gru_size`, a `GRUQNetwork` (PQN-RNN) reading `hidden_sizes` layers
        (ReLU, LayerNorm with `layer_norm`); a `CNNQNetwork` for grid
        observations; or an `MLPQNetwork` of `hidden_sizes` (ReLU, LayerNorm with
        `layer_norm`)."""
        if self.network_factory is not None:
            return self.network_factory(self.env, key)
        if self.gru_size is not None:
            return GRUQNetwork(
                self.env.observation_space,
                self.env.action_space.num_values,  # pyright: ignore[reportAttributeAccessIssue]
                hidden_size=self.gru_size,
                encoder_sizes=self.hidden_sizes,
                layer_norm=self.layer_norm,
                key=key,
            )
        if is_grid_space(self.env.observation_space):
            return CNNQNetwork.from_env(self.env, key, layer_norm=self.layer_norm)
        return MLPQNetwork.from_env(
            self.env, key, hidden_sizes=self.hidden_sizes, layer_norm=self.layer_norm
        )

    def make_optimizer(self) -> optax.GradientTransformation:
        """Global-norm clipping, then RAdam (as purejaxql) with the (optionally
        annealed) step size injected so that it is logged and sweepable."""
        schedule = learning_rate_schedule(
            self.learning_rate,
            anneal=self.anneal_lr,
            decay_steps=self.num_iterations,
            updates_per_step=self.num_epochs * self.num_minibatches,
        )
        return optax.chain(
            optax.clip_by_global_norm(self.max_grad_norm),
            optax.inject_hyperparams(optax.radam)(learning_rate=schedule),
        )

    def current_learning_rate(self, optimizer_state: PyTree) -> Float[Array, ""]:
        """The step size of the latest update, from `make_optimizer`'s state."""
        return injected_learning_rate(optimizer_state)

    def epsilon(self, iteration: Int[Array, ""]) -> Float[Array, ""]:
        """The exploration rate of an iteration: linear from
        `exploration_initial_eps` to `exploration_final_eps` over the first
        `exploration_fraction` of the iterations, then constant."""
        decay = jnp.maximum(self.exploration_fraction * self.num_iterations, 1.0)
        progress = jnp.clip(jnp.asarray(iteration, jnp.float32) / decay, 0.0, 1.0)
        return self.exploration_initial_eps + progress * (
            self.exploration_final_eps - self.exploration_initial_eps
        )

    # ------------------------------------------------------------------ state
    def init(self, key: PRNGKeyArray) -> PQNState:
        refuse_multi_agent(
            "PQN",
            self.env,
            independent=False,
            team="eqxrl.multiagent.PQNVDN(pqn) (eqxrl train ENV --algo pqn "
            "--mixer vdn)",
        )
        return self.first_state(
            PQNState,
            self.make_network,
            lambda network: network.initial_carry(),  # pyright: ignore[reportAttributeAccessIssue]
            key,
        )

    def first_state(
        self,
        state_type: Callable[..., StateT],
        make_network: Callable[[PRNGKeyArray], AbstractQNetwork],
        initial_carry: Callable[[AbstractQNetwork], PyTree[Array]],
        key: PRNGKeyArray,
    ) -> StateT:
        """A run's first state: a new network and optimizer state, `num_envs`
        environments reset, and with a recurrent network every environment's
        initial carry. Also [`PQNVDN`][eqxrl.multiagent.PQNVDN]'s, with the team.

        **Arguments:**

        - `state_type`: [`PQNState`][eqxrl.PQNState], or a learner's state with
          its fields in its order, the network first under the learner's name
          (`PQNVDNState.agents`).
        - `make_network`: `make_network(key)`, the initial network.
        - `initial_carry`: `initial_carry(network)`, a recurrent network's carry
          in one environment at an episode's start.
        - `key`: a PRNG key.
        """
        network_key, reset_key, state_key = jr.split(key, 3)
        network = make_network(network_key)
        optimizer_state = self.make_optimizer().init(eqx.filter(network, eqx.is_array))
        env_state, timestep = jax.vmap(self.training_env.reset)(
            jr.split(reset_key, self.num_envs)
        )
        carry = None
        if network.is_recurrent:
            carry = jtu.tree_map(
                lambda x: jnp.broadcast_to(x, (self.num_envs, *x.shape)),
                initial_carry(network),
            )
        return state_type(
            network,
            optimizer_state=optimizer_state,
            env_state=env_state,
            timestep=timestep,
            key=state_key,
            iteration=jnp.int32(0),
            carry=carry,
        )

    def environment_axes(self, state: PQNState) -> PyTree[int]:
        """Environments come first in the environment states, the timesteps and a
        recurrent network's carries."""
        axes = super().environment_axes(state)
        if state.carry is not None:
            axes = eqx.tree_at(
                lambda tree: tree.carry,
                axes,
                jtu.tree_map(lambda _: 0, state.carry),
            )
        return axes

    def policy(
        self, state: PQNState, deterministic: bool = False
    ) -> EpsilonGreedyPolicy:
        """The epsilon-greedy policy of the current exploration rate (greedy with
        `deterministic`). With a recurrent network, act with its `step` from
        `initial_carry()` at each episode's start, as
        [`evaluate`][eqxrl.training.evaluate] does."""
        epsilon = 0.0 if deterministic else self.epsilon(state.iteration)
        return EpsilonGreedyPolicy(state.network, epsilon)

    # ------------------------------------------------------------------ iteration
    def train_iteration(self, state: PQNState) -> tuple[PQNState, dict[str, Array]]:
        """One [`iteration`][eqxrl.PQN.iteration] of the Q-network (with a
        recurrent one, see the class docstring).

        **Returns:**

        `(state, metrics)` with scalar metrics: `episode_return`,
        `episode_length`, `episode_count` (of the episodes that ended during the
        rollout; means NaN when none did), `td_loss` and `q_value` (means over the
        minibatch updates), `epsilon` and `learning_rate`.
        """
        return self.iteration(state, state.network, self)

    def iteration(
        self, state: StateT, network: AbstractQNetwork, learner: PQNLearner
    ) -> tuple[StateT, dict[str, Array]]:
        """One PQN iteration, as the paper's pseudocode, of the values `learner`
        gives: this PQN's own ([`train_iteration`][eqxrl.PQN.train_iteration]), or
        a team's ([`PQNVDN`][eqxrl.multiagent.PQNVDN]'s summed values).

        1. `learner.collect(state, epsilon, key)`: the epsilon-greedy rollout, each
           step's greedy value kept;
        2. the Q(lambda) targets ([`q_lambda_targets`][eqxrl.PQN.q_lambda_targets]
           from the greedy values `learner.greedy_values(network, timestep)` of
           the observations after the rollout);
        3. [`learn`][eqxrl.PQN.learn]: `num_epochs` x `num_minibatches` gradient
           steps on `learner.loss`; with a recurrent network on whole sequences,
           `learner.sequence_loss` recomputing the targets;
        4. the metrics: `learner.episode_metrics(done, extras)` of the episodes
           that ended, the means of the losses' statistics, `epsilon` and
           `learning_rate`.

        **Arguments:**

        - `state`: a [`PQNState`][eqxrl.PQNState], or a learner's state with its
          fields (see [`first_state`][eqxrl.PQN.first_state]).
        - `network`: the state's network.
        - `learner`: this PQN, or one with the same `collect`, `greedy_values`,
          `loss`, `sequence_loss` and `episode_metrics`.
        """
        key, collect_key, update_key = split(state.key, 3)
        epsilon = self.epsilon(state.iteration)
        env_state, timestep, carry, rollout = learner.collect(
            state, epsilon, collect_key
        )
        if state.carry is None:
            last_value = learner.greedy_values(network, timestep)
            targets = self.q_lambda_targets(rollout, last_value)
            rows = jtu.tree_map(
                lambda x: x.reshape(self.steps_per_iteration, *x.shape[2:]),
                (rollout.observation, rollout.action, targets),
            )
            loss = learner.loss
        else:
            # PQN-RNN: rows are environments, each with its whole sequence read
            # from the carry the rollout started with; the last step bootstraps
            # from the observation after the rollout.
            sequences = jtu.tree_map(lambda x: jnp.swapaxes(x, 0, 1), rollout)
            rows = (state.carry, sequences, timestep)
            loss = learner.sequence_loss
        network, optimizer_state, statistics = self.learn(
            network, state.optimizer_state, loss, rows, update_key
        )
        metrics = learner.episode_metrics(
            rollout.terminated | rollout.truncated, rollout.extras
        )
        metrics.update(jtu.tree_map(jnp.mean, statistics))
        metrics["epsilon"] = epsilon
        metrics["learning_rate"] = self.current_learning_rate(optimizer_state)
        # The network is the state's first field, whatever the learner names it.
        state = type(state)(
            network,
            optimizer_state=optimizer_state,
            env_state=env_state,
            timestep=timestep,
            key=key,
            iteration=state.iteration + 1,
            carry=carry,
        )
        return state, metrics

    def q_lambda_targets(
        self, rollout: PyTree, last_value: Float[Array, " num_envs"]
    ) -> Float[Array, "num_steps num_envs"]:
        """The Q(lambda) targets over a rollout
        ([`compute_q_lambda_returns`][eqxrl.algorithms.compute_q_lambda_returns]):
        its rewards times `reward_scale`, each step bootstrapping from the greedy
        value of the next step's observation (`last_value`, that of the
        observation after the rollout, for the last step), of its final
        observation where it truncated an episode, and from nothing where it
        terminated one.

        **Arguments:**

        - `rollout`: a [`PQNRollout`][eqxrl.algorithms.PQNRollout] (or a team's,
          with the same fields), `[num_steps, num_envs, ...]` leaves.
        - `last_value`: the greedy value of each environment's observation after
          the rollout.
        """
        next_values = jnp.concatenate([rollout.value[1:], last_value[None]])
        next_values = jnp.where(
            rollout.truncated, rollout.truncation_value, next_values
        )
        return compute_q_lambda_returns(
            rollout.reward * self.reward_scale,
            next_values,
            rollout.terminated,
            rollout.truncated,
            self.gamma,
            self.q_lambda,
        )

    def sequence_targets(
        self, sequences: PyTree, next_values: Float[Array, "n num_steps"]
    ) -> Float[Array, "n num_steps"]:
        """The Q(lambda) targets of whole sequences (`[n, num_steps, ...]`
        leaves), each step bootstrapping from `next_values` where it did not
        terminate an episode: PQN-RNN's and PQN-VDN's recurrent losses'."""
        # compute_q_lambda_returns runs over time first.
        return compute_q_lambda_returns(
            (sequences.reward * self.reward_scale).T,
            next_values.T,
            sequences.terminated.T,
            sequences.truncated.T,
            self.gamma,
            self.q_lambda,
        ).T

    def greedy_values(
        self, network: AbstractQNetwork, timestep: TimeStep
    ) -> Float[Array, " num_envs"]:
        """The greedy (valid) value of every environment's observation."""
        q_values = jax.vmap(network.q_values, in_axes=(0, None))(
            timestep.observation, jr.key(0)
        )
        return jax.vmap(greedy_value)(q_values, timestep.action_mask)

    def episode_metrics(
        self, done: Bool[Array, "num_steps num_envs"], extras: dict[str, PyTree]
    ) -> dict[str, Array]:
        """The rollout's episode metrics
        ([`iteration_episode_metrics`][eqxrl.algorithms.iteration_episode_metrics])."""
        return iteration_episode_metrics(done, extras)

    def collect(
        self, state: PQNState, epsilon: Float[Array, ""], key: PRNGKeyArray
    ) -> tuple[PyTree, TimeStep, PyTree[Array] | None, PQNRollout]:
        """`num_steps` epsilon-greedy steps of every environment
        ([`rollout`][eqxrl.PQN.rollout] with the Q-network)."""
        network = state.network

        def values(carry: PyTree[Array] | None, observation: PyTree[Array]):
            if carry is None:
                return None, network.q_values(observation, jr.key(0))  # not sampled
            return network.step(carry, observation)  # pyright: ignore[reportAttributeAccessIssue]

        return self.rollout(
            state,
            epsilon,
            key,
            values=values,
            initial_carry=getattr(network, "initial_carry", None),
            greedy_value=greedy_value,
            choose=epsilon_greedy_action,
        )

    def rollout(
        self,
        state: PyTree,
        epsilon: Float[Array, ""],
        key: PRNGKeyArray,
        **acting: Any,
    ) -> tuple[PyTree, TimeStep, PyTree[Array] | None, PyTree]:
        """[`epsilon_greedy_rollout`][eqxrl.algorithms.epsilon_greedy_rollout]'s
        `num_steps` steps of the state's environments from their carries, acting
        as `acting` (its keyword arguments: `values`, `initial_carry`,
        `greedy_value`, `choose`, ...) says."""
        return epsilon_greedy_rollout(
            self.env,
            state.env_state,
            state.timestep,
            state.carry,
            epsilon,
            key,
            self.num_steps,
            **acting,
        )

    def loss(
        self,
        network: AbstractQNetwork,
        observation: PyTree[Array],
        action: Int[Array, " batch"],
        target: Float[Array, " batch"],
    ) -> tuple[Float[Array, ""], dict[str, Array]]:
        """`0.5 * mean((Q(s, a) - target)^2)` over a minibatch, and the mean
        `Q(s, a)` (`q_value`)."""
        q_values = jax.vmap(network.q_values, in_axes=(0, None))(observation, jr.key(0))
        taken = jnp.take_along_axis(q_values, action[:, None], axis=1)[:, 0]
        loss = 0.5 * jnp.mean(jnp.square(taken - target))
        return loss, {"td_loss": loss, "q_value": jnp.mean(taken)}

    def sequence_loss(
        self,
        network: AbstractQNetwork,
        carry: PyTree[Array],
        sequences: PQNRollout,
        next_timestep: TimeStep,
    ) -> tuple[Float[Array, ""], dict[str, Array]]:
        """PQN-RNN's loss on a minibatch of whole sequences: `0.5 * mean((Q(s, a) -
        target)^2)` over their steps, and the mean `Q(s, a)` (`q_value`).

        Each sequence is unrolled from its carry, reset where an episode starts,
        one step past its end (the observation after the rollout). As purejaxql's
        `pqn_rnn_gymnax.py`, the Q(lambda) targets
        ([`compute_q_lambda_returns`][eqxrl.algorithms.compute_q_lambda_returns])
        come from these unrolled Q-values, gradients stopped: the greedy value of
        the next step's observation, or where a step truncated an episode the
        greedy value of its final observation stored by the rollout.

        **Arguments:**

        - `network`: the recurrent Q-network.
        - `carry`: the carry each sequence's first observation was read with
          (before any reset), `[n, ...]` leaves.
        - `sequences`: a rollout's steps, environments first (`[n, num_steps,
          ...]` leaves), with `episode_start`.
        - `next_timestep`: each environment's timestep after the rollout (`[n,
          ...]` leaves), whose greedy value the last step bootstraps from.
        """

        def with_next(sequence: Array, after: Array) -> Array:
            return jnp.concatenate([sequence, after[:, None]], axis=1)

        observations = jtu.tree_map(
            with_next, sequences.observation, next_timestep.observation
        )
        episode_start = with_next(
            sequences.episode_start,  # pyright: ignore[reportArgumentType]
            next_timestep.terminated | next_timestep.truncated,
        )
        action_mask = jtu.tree_map(
            with_next, sequences.action_mask, next_timestep.action_mask
        )
        _, q_values = jax.vmap(network.unroll)(carry, observations, episode_start)  # pyright: ignore[reportAttributeAccessIssue]
        greedy = jax.vmap(jax.vmap(greedy_value))(
            lax.stop_gradient(q_values), action_mask
        )
        next_values = jnp.where(
            sequences.truncated, sequences.truncation_value, greedy[:, 1:]
        )
        targets = self.sequence_targets(sequences, next_values)
        taken = jnp.take_along_axis(
            q_values[:, :-1], sequences.action[..., None], axis=-1
        )[..., 0]
        loss = 0.5 * jnp.mean(jnp.square(taken - targets))
        return loss, {"td_loss": loss, "q_value": jnp.mean(taken)}

    def learn(
        self,
        network: AbstractQNetwork,
        optimizer_state: PyTree,
        loss: Callable[..., tuple[Float[Array, ""], dict[str, Array]]],
        rows: PyTree[Array],
        key: PRNGKeyArray,
    ) -> tuple[AbstractQNetwork, PyTree, dict[str, Array]]:
        """`num_epochs` passes of `num_minibatches` shuffled minibatches of `rows`,
        one gradient step of `loss(network, *minibatch)` each. Rows are the
        rollout's steps, or with a recurrent network whole environments'
        sequences (every leaf of `rows` has them on its leading axis). Also
        [`PQNVDN`][eqxrl.multiagent.PQNVDN]'s, with its team loss."""
        num_rows = jtu.tree_leaves(rows)[0].shape[0]
        minibatch_rows = num_rows // self.num_minibatches
        optimizer = self.make_optimizer()
        grad_fn = eqx.filter_grad(loss, has_aux=True)
        recurrent = network.is_recurrent

        def minibatch_update(carry, minibatch, key):
            del key
            network, optimizer_state = carry
            if recurrent:
                with sequence_batch_hint(minibatch_rows):
                    grads, statistics = grad_fn(network, *minibatch)
            else:
                grads, statistics = grad_fn(network, *minibatch)
            updates, optimizer_state = optimizer.update(
                grads, optimizer_state, eqx.filter(network, eqx.is_array)
            )
            return (eqx.apply_updates(network, updates), optimizer_state), statistics

        (network, optimizer_state), statistics = minibatch_epochs(
            minibatch_update,
            (network, optimizer_state),
            rows,
            key,
            num_epochs=self.num_epochs,
            num_minibatches=self.num_minibatches,
        )
        return network, optimizer_state, statistics
