"""Cooperative value decomposition: per-agent Q-networks whose chosen-action values a
mixer combines into the team's value, trained end to end on the team reward from one
replay buffer of joint transitions (VDN: a sum; QMIX: a monotonic mixing network
conditioned on the global state)."""

import abc
import math
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray, PyTree

from .._config import in_range
from .._deprecation import warn_renamed
from .._filters import scan_or_step
from .._random import split as random_split, uniform as random_uniform
from ..algorithms import (
    DQN,
    AbstractAlgorithm,
    bootstrap_action_value,
    huber_loss,
)
from ..buffers import ReplayBuffer, ReplaySample, ReplaySequence, ReplayTransition
from ..envs import (
    GLOBAL_STATE,
    AbstractEnvironment,
    AbstractWrapper,
    AutoReset,
    Box,
    EpisodeStatistics,
    TimeStep,
    global_state_space_of,
    num_agents_of,
    skip_action_checks,
    unwrap,
)
from ..nn import (
    AbstractPolicy,
    AbstractQNetwork,
    EpsilonGreedyPolicy,
    GRUQNetwork,
    epsilon_greedy_action,
    orthogonal_matrices,
    reset_carry,
    sequence_batch_hint,
)
from ._agents import (
    AbstractTeamAlgorithm,
    SharedObservations,
    StateT,
    episode_ends,
    every_agent_with_index,
    team_episode_metrics,
)
from ._policy import IndependentPolicy, SharedPolicy

# --------------------------------------------------------------------- mixers


class AbstractMixer(eqx.Module):
    """Combines the agents' values of their chosen actions into the team's value
    `Q_tot`, for one world (value decomposition: [`VDN`][eqxrl.multiagent.VDN],
    [`QMIX`][eqxrl.multiagent.QMIX])."""

    @abc.abstractmethod
    def __call__(
        self,
        q_values: Float[Array, " num_agents"],
        global_state: Float[Array, " state_size"] | None,
    ) -> Float[Array, ""]:
        """The team's value from each agent's value (and the global state, for
        mixers that read it)."""


class SumMixer(AbstractMixer):
    """VDN's mixer (Sunehag et al., 2018): `Q_tot` is the sum of the agents'
    values. It has no parameters and ignores the global state."""

    def __call__(
        self,
        q_values: Float[Array, " num_agents"],
        global_state: Float[Array, " state_size"] | None = None,
    ) -> Float[Array, ""]:
        del global_state
        return jnp.sum(q_values)


def _zero_bias_linear(weight: Float[Array, "out_size in_size"]) -> eqx.nn.Linear:
    out_size, in_size = weight.shape
    layer = eqx.nn.Linear(in_size, out_size, key=jr.key(0))
    return eqx.tree_at(
        lambda linear: (linear.weight, linear.bias),
        layer,
        (weight, jnp.zeros(out_size, jnp.float32)),
    )


class MonotonicMixer(AbstractMixer):
    """QMIX's mixing network (Rashid et al., 2018): a two-layer network from the
    agents' values to `Q_tot` whose weights and biases are produced by hypernetworks
    reading the global state. The weights are taken in absolute value, so `Q_tot`
    never decreases when one agent's value increases (`dQ_tot / dQ_i >= 0`): the
    agents' greedy actions are the team's greedy joint action.

    As JaxMARL's `qmix_rnn.py`: the first layer's weights (`[num_agents,
    embedding_size]`) and the second's (`[embedding_size]`) come from two-layer
    ReLU hypernetworks with `hypernet_hidden_size` hidden units, the first bias
    from one linear layer, the second (a scalar) from a two-layer ReLU network with
    `embedding_size` hidden units; the hidden layer is an ELU. Every layer starts
    orthogonal with gain `init_scale`, its bias at zero.

    **Arguments:**

    - `num_agents`: the number of agents.
    - `state_size`: the number of entries of the (flattened) global state.
    - `embedding_size`: the mixing network's hidden width (JaxMARL: 32).
    - `hypernet_hidden_size`: the hypernetworks' hidden width (JaxMARL: 128).
    - `init_scale`: the gain of the orthogonal initial weights (JaxMARL: 0.001).
    - `key`: a PRNG key for the initial weights.
    """

    weight_1: tuple[eqx.nn.Linear, eqx.nn.Linear]
    bias_1: eqx.nn.Linear
    weight_2: tuple[eqx.nn.Linear, eqx.nn.Linear]
    bias_2: tuple[eqx.nn.Linear, eqx.nn.Linear]
    num_agents: int = eqx.field(static=True)
    embedding_size: int = eqx.field(static=True)

    def __init__(
        self,
        num_agents: int,
        state_size: int,
        *,
        embedding_size: int = 32,
        hypernet_hidden_size: int = 128,
        init_scale: float | Float[Array, ""] = 0.001,
        key: PRNGKeyArray,
    ):
        for name, value in (
            ("num_agents", num_agents),
            ("state_size", state_size),
            ("embedding_size", embedding_size),
            ("hypernet_hidden_size", hypernet_hidden_size),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"MonotonicMixer: {name}={value!r} must be a positive int."
                )
        hidden, embedding = hypernet_hidden_size, embedding_size
        shapes = [
            (hidden, state_size),
            (embedding * num_agents, hidden),
            (embedding, state_size),
            (hidden, state_size),
            (embedding, hidden),
            (embedding, state_size),
            (1, embedding),
        ]
        weights = orthogonal_matrices(key, shapes, [1.0] * len(shapes))
        layers = [
            _zero_bias_linear(jnp.asarray(init_scale, jnp.float32) * w) for w in weights
        ]
        self.weight_1 = (layers[0], layers[1])
        self.bias_1 = layers[2]
        self.weight_2 = (layers[3], layers[4])
        self.bias_2 = (layers[5], layers[6])
        self.num_agents = num_agents
        self.embedding_size = embedding_size

    def __call__(
        self,
        q_values: Float[Array, " num_agents"],
        global_state: Float[Array, " state_size"] | None,
    ) -> Float[Array, ""]:
        if global_state is None:
            raise ValueError(
                "MonotonicMixer: QMIX's mixer reads the global state; got None."
            )

        def two_layers(layers, x):
            return layers[1](jax.nn.relu(layers[0](x)))

        weight_1 = jnp.abs(two_layers(self.weight_1, global_state))
        weight_1 = weight_1.reshape(self.num_agents, self.embedding_size)
        hidden = jax.nn.elu(q_values @ weight_1 + self.bias_1(global_state))
        weight_2 = jnp.abs(two_layers(self.weight_2, global_state))
        return hidden @ weight_2 + two_layers(self.bias_2, global_state)[0]


# ------------------------------------------------------------ joint timesteps


class _JointObservation(eqx.Module):
    """What one world's replay row and the learners read: every agent's observation
    (`[num_agents, ...]` leaves), their action masks, and the flattened global state
    (`None` for VDN, which does not read it). Kept together in the observation so
    that `AutoReset` swaps all three at a reset and keeps all three of the final
    step in `extras["final_observation"]` (the targets' next state), whether the
    environment declares the global state or it is built from the observations."""

    observation: PyTree[Array]
    action_mask: Bool[Array, "num_agents num_actions"] | None
    global_state: Float[Array, " state_size"] | None


def _flat_global_state(env: AbstractEnvironment, timestep: TimeStep) -> Array:
    """The environment's global state flattened, or (when it declares none) every
    agent's observation flattened and concatenated, as JaxMARL's
    `CTRolloutManager` builds MPE's."""
    if global_state_space_of(env) is not None:
        return jnp.ravel(timestep.extras[GLOBAL_STATE]).astype(jnp.float32)
    leaves = jax.tree.leaves(timestep.observation)
    return jnp.concatenate([jnp.ravel(leaf).astype(jnp.float32) for leaf in leaves])


class _JointView(AbstractWrapper):
    """A multi-agent environment whose observation is a `_JointObservation`."""

    env: AbstractEnvironment
    with_global_state: bool = eqx.field(static=True)

    def _joint(self, timestep: TimeStep) -> TimeStep:
        state = (
            _flat_global_state(self.env, timestep) if self.with_global_state else None
        )
        observation = _JointObservation(
            timestep.observation, timestep.action_mask, state
        )
        # The joint observation holds the state (declared or built from the
        # observations alike), which AutoReset then swaps at a reset and keeps in
        # `final_observation` with the observations: the entry would be a copy.
        extras = {k: v for k, v in timestep.extras.items() if k != GLOBAL_STATE}
        return TimeStep(
            observation=observation,
            reward=timestep.reward,
            terminated=timestep.terminated,
            truncated=timestep.truncated,
            action_mask=timestep.action_mask,
            extras=extras,
        )

    def reset(self, key: PRNGKeyArray) -> tuple[PyTree, TimeStep]:
        state, timestep = self.env.reset(key)
        return state, self._joint(timestep)

    def step(self, state: PyTree, action: Any, key: PRNGKeyArray):
        state, timestep = self.env.step(state, action, key)
        return state, self._joint(timestep)


# ---------------------------------------------------------------- algorithms


class AbstractTeamQLearning(AbstractTeamAlgorithm[StateT]):
    """Cooperative agents with Q-networks trained as a team on a multi-agent
    environment: what value decomposition
    ([`AbstractValueDecomposition`][eqxrl.multiagent.AbstractValueDecomposition]:
    VDN, QMIX) and [`PQNVDN`][eqxrl.multiagent.PQNVDN] share. The agents' network
    is the wrapped single-agent algorithm's (`make_network`), one shared by every
    agent (each agent's flattened observation with its one-hot index appended) or,
    with `share_parameters=False`, one per agent stacked on a leading agent axis;
    these methods read every agent's values in one world."""

    algorithm: eqx.AbstractVar[AbstractAlgorithm]
    share_parameters: eqx.AbstractVar[bool]

    def _check_team(self) -> None:
        """The environment has several agents, and a shared network can read
        their observations."""
        name = type(self).__name__
        single = type(self.algorithm).__name__
        env = self.algorithm.env
        if num_agents_of(env) is None:
            raise ValueError(
                f"{name}: the environment ({type(unwrap(env)[-1]).__name__}) has a "
                f"single agent; {name} trains a cooperative team on a multi-agent "
                "environment (eqxrl.envs.AbstractMultiAgentEnvironment, e.g. "
                f"eqxrl.envs.make('TreasureHunt-v0')). Train eqxrl.{single} itself "
                "for one agent."
            )
        if self.share_parameters and not isinstance(env.observation_space, Box):
            raise ValueError(
                f"{name}: share_parameters appends the agent index to a flattened "
                "observation, which needs a Box observation space; this one is "
                f"{type(env.observation_space).__name__}. Pass "
                "share_parameters=False for one network per agent."
            )

    @property
    def learner(self) -> AbstractAlgorithm:
        """The algorithm on the agents' network's view of the environment: itself,
        or with `share_parameters` on a flattened observation with the one-hot agent
        index appended (which builds the shared network)."""
        if not self.share_parameters:
            return self.algorithm
        view = SharedObservations(self.env, self.num_agents)
        return eqx.tree_at(lambda a: a.env, self.algorithm, view)

    # --------------------------------------------------------------- networks
    def make_agents(self, key: PRNGKeyArray) -> AbstractQNetwork:
        """The agents' initial network: the algorithm's (its `network_factory`, or
        an `MLPQNetwork` with its `hidden_sizes`), one on the shared view, or one
        per agent stacked on a leading agent axis."""
        learner = self.learner
        if self.share_parameters:
            return learner.make_network(key)  # pyright: ignore[reportAttributeAccessIssue]
        keys = jr.split(key, self.num_agents)
        return eqx.filter_vmap(learner.make_network)(keys)  # pyright: ignore[reportAttributeAccessIssue]

    @property
    def recurrent(self) -> bool:
        """Whether the agents' network is recurrent (an
        [`AbstractRecurrentQNetwork`][eqxrl.nn.AbstractRecurrentQNetwork], e.g.
        `network_factory=eqxrl.nn.GRUQNetwork.from_env`): then the agents keep
        carries and learn through time (VDN and QMIX replay sequences, PQN-VDN
        learns from whole worlds' sequences)."""
        network = eqx.filter_eval_shape(self.learner.make_network, jr.key(0))  # pyright: ignore[reportAttributeAccessIssue]
        return network.is_recurrent

    def agent_initial_carry(self, agents: AbstractQNetwork) -> PyTree[Array]:
        """Every agent's carry at an episode's start (`[num_agents, ...]`
        leaves), for recurrent agents."""
        if self.share_parameters:
            carry = agents.initial_carry()  # pyright: ignore[reportAttributeAccessIssue]
            return jax.tree.map(
                lambda x: jnp.broadcast_to(x, (self.num_agents, *x.shape)), carry
            )
        return eqx.filter_vmap(lambda network: network.initial_carry())(agents)

    def agent_step(
        self, agents: AbstractQNetwork, carry: PyTree[Array], observation: PyTree[Array]
    ) -> tuple[PyTree[Array], Float[Array, "num_agents num_actions"]]:
        """Recurrent agents' step in one world: each agent reads its observation
        (`[num_agents, ...]` leaves) with its carry; `(next_carry, q_values)`."""
        if self.share_parameters:
            inputs = every_agent_with_index(observation, self.num_agents)
            return jax.vmap(agents.step)(carry, inputs)  # pyright: ignore[reportAttributeAccessIssue]
        return eqx.filter_vmap(lambda network, c, o: network.step(c, o))(
            agents, carry, observation
        )

    def agent_unroll(
        self,
        agents: AbstractQNetwork,
        carry: PyTree[Array],
        observations: PyTree[Array],
        episode_start: Bool[Array, " num_steps"],
    ) -> Float[Array, "num_agents num_steps num_actions"]:
        """Recurrent agents through one world's sequence: every agent's values at
        every step, from `carry` (`[num_agents, ...]` leaves), resetting where
        `episode_start` is set; `observations` has `[num_steps, num_agents, ...]`
        leaves."""
        if self.share_parameters:
            observations = jax.vmap(
                lambda o: every_agent_with_index(o, self.num_agents)
            )(observations)
        by_agent = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), observations)
        if self.share_parameters:
            unroll = jax.vmap(agents.unroll, in_axes=(0, 0, None))  # pyright: ignore[reportAttributeAccessIssue]
            return unroll(carry, by_agent, episode_start)[1]
        return eqx.filter_vmap(
            lambda network, c, o: network.unroll(c, o, episode_start)[1]
        )(agents, carry, by_agent)

    def agent_q_values(
        self,
        agents: AbstractQNetwork,
        observation: PyTree[Array],
        key: PRNGKeyArray,
    ) -> Float[Array, "num_agents num_actions"]:
        """Every agent's action values in one world.

        **Arguments:**

        - `agents`: the agents' network (as `ValueDecompositionState.agents`).
        - `observation`: every agent's observation (`[num_agents, ...]` leaves).
        - `key`: a PRNG key (for networks with sampled values).

        **Returns:**

        float32 `[num_agents, num_actions]`.
        """
        if self.share_parameters:
            inputs = every_agent_with_index(observation, self.num_agents)
            return jax.vmap(agents.q_values, in_axes=(0, None))(inputs, key)
        return eqx.filter_vmap(
            lambda network, agent_observation: network.q_values(agent_observation, key)
        )(agents, observation)

    def team_value(
        self,
        agents: AbstractQNetwork,
        mixer: AbstractMixer,
        observation: PyTree[Array],
        global_state: Float[Array, " state_size"] | None,
        action: Int[Array, " num_agents"],
        key: PRNGKeyArray,
    ) -> tuple[Float[Array, ""], Float[Array, " num_agents"]]:
        """The team's value `Q_tot` of a joint action in one world.

        **Arguments:**

        - `agents`, `mixer`: the agents' network and the mixer.
        - `observation`: every agent's observation (`[num_agents, ...]` leaves).
        - `global_state`: the flattened global state (`None` for VDN).
        - `action`: int32 `[num_agents]`, every agent's action.
        - `key`: a PRNG key (for networks with sampled values).

        **Returns:**

        `(q_total, q_chosen)`: the mixer's `Q_tot` of the agents' values of their
        actions, and those values (`[num_agents]`).
        """
        q_values = self.agent_q_values(agents, observation, key)
        chosen = jnp.take_along_axis(q_values, action[:, None], axis=1)[:, 0]
        return mixer(chosen, global_state), chosen

    def joint_policy(
        self, agents: AbstractQNetwork, epsilon: Float[Array, ""]
    ) -> AbstractPolicy:
        """The agents' joint epsilon-greedy policy (one multi-agent observation in,
        one action per agent out; each agent reads its own observation).

        **Returns:**

        A [`SharedPolicy`][eqxrl.multiagent.SharedPolicy] around the shared
        network, or with `share_parameters=False` an
        [`IndependentPolicy`][eqxrl.multiagent.IndependentPolicy].
        """
        if self.share_parameters:
            return SharedPolicy(EpsilonGreedyPolicy(agents, epsilon), self.num_agents)
        policies = eqx.filter_vmap(
            lambda network: EpsilonGreedyPolicy(network, epsilon)
        )(agents)
        return IndependentPolicy(policies, self.num_agents)


class ValueDecompositionState(eqx.Module):
    """Everything a [`VDN`][eqxrl.multiagent.VDN] or [`QMIX`][eqxrl.multiagent.QMIX]
    run carries from one iteration to the next.

    **Arguments:**

    - `agents`: the agents' Q-network: one network shared by every agent (the
      one-hot agent index appended to each observation), or with
      `share_parameters=False` one per agent stacked on a leading agent axis.
    - `mixer`: the mixer ([`SumMixer`][eqxrl.multiagent.SumMixer] for VDN,
      [`MonotonicMixer`][eqxrl.multiagent.MonotonicMixer] for QMIX).
    - `target_agents`, `target_mixer`: their slowly updated copies, for targets.
    - `optimizer_state`: optax state of the optimizer of agents and mixer together.
    - `buffer`: the replay buffer of joint transitions (every agent's observation,
      action mask and action, the global state, the team reward), one column per
      world; with recurrent agents, of
      [`ReplaySequence`][eqxrl.buffers.ReplaySequence]s (each world's steps of one
      iteration).
    - `env_state`: the state of every world, `[num_envs, ...]` leaves.
    - `timestep`: the latest timestep of every world.
    - `key`: the PRNG key for the next iteration.
    - `iteration`: how many iterations have run (int32).
    - `num_updates`: how many gradient steps have run (int32).
    - `carry`: with recurrent agents, every agent's carry in every world
      (`[num_envs, num_agents, ...]` leaves), as the last step left it; `None`
      for feed-forward agents.
    """

    agents: AbstractQNetwork
    mixer: AbstractMixer
    target_agents: AbstractQNetwork
    target_mixer: AbstractMixer
    optimizer_state: PyTree
    buffer: ReplayBuffer
    env_state: PyTree
    timestep: TimeStep
    key: PRNGKeyArray
    iteration: Int[Array, ""]
    num_updates: Int[Array, ""]
    carry: PyTree[Array] | None = None


class AbstractValueDecomposition(AbstractTeamQLearning[ValueDecompositionState]):
    """What [`VDN`][eqxrl.multiagent.VDN] and [`QMIX`][eqxrl.multiagent.QMIX]
    share: per-agent Q-networks, a mixer, and DQN's off-policy loop on the team's
    joint transitions. Subclasses give the mixer (`make_mixer`)."""

    # Whether the mixer reads the global state (stored in the replay buffer).
    reads_global_state: ClassVar[bool] = False

    algorithm: eqx.AbstractVar[AbstractAlgorithm]
    share_parameters: eqx.AbstractVar[bool]

    def _check(self) -> None:
        name = type(self).__name__
        if not isinstance(self.algorithm, DQN):
            raise ValueError(
                f"{name}: algorithm must be an eqxrl.DQN configured on the "
                "multi-agent environment (its replay, exploration, target and "
                f"optimizer settings apply), got {type(self.algorithm).__name__}."
            )
        self._check_team()
        if self.recurrent:
            dqn = self.algorithm
            if dqn.n_step != 1:
                raise ValueError(
                    f"{name}: recurrent agents learn from sequences with one-step "
                    f"targets; n_step={dqn.n_step} is not supported with them "
                    "(set n_step=1)."
                )
            if dqn.batch_size % dqn.train_frequency:
                sequences = max(1, dqn.batch_size // dqn.train_frequency)
                raise ValueError(
                    f"{name}: recurrent agents replay sequences of train_frequency="
                    f"{dqn.train_frequency} steps, so batch_size={dqn.batch_size} "
                    "(counted in steps) must be a multiple of it; e.g. batch_size="
                    f"{sequences * dqn.train_frequency}."
                )
            if dqn.buffer_size < dqn.num_envs * dqn.train_frequency:
                raise ValueError(
                    f"{name}: buffer_size={dqn.buffer_size} holds less than one "
                    f"iteration's sequences (num_envs * train_frequency = "
                    f"{dqn.num_envs * dqn.train_frequency} steps)."
                )

    # ------------------------------------------------------------------ config
    @abc.abstractmethod
    def make_mixer(self, key: PRNGKeyArray) -> AbstractMixer:
        """The initial mixer (the target mixer starts as a copy of it)."""

    @property
    def training_env(self) -> AbstractEnvironment:
        """The worlds as they are stepped: automatic resets, episode statistics, and
        the joint observation (observations, action masks and, for mixers that read
        it, the global state) that the replay buffer stores."""
        joint = _JointView(self.env, self.reads_global_state)
        return AutoReset(EpisodeStatistics(joint))

    @property
    def state_size(self) -> int:
        """Entries of the flattened global state the mixer reads: the environment's
        `global_state_space` (see [`GLOBAL_STATE`][eqxrl.envs.GLOBAL_STATE]), or
        when it declares none every agent's observation concatenated."""
        space = global_state_space_of(self.env)
        if space is not None:
            return math.prod(space.shape)
        observation = eqx.filter_eval_shape(self.env.reset, jr.key(0))[1].observation
        return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(observation))

    def loss(
        self,
        networks: tuple[AbstractQNetwork, AbstractMixer],
        target_networks: tuple[AbstractQNetwork, AbstractMixer],
        batch: ReplaySample,
        key: PRNGKeyArray,
    ) -> tuple[Float[Array, ""], dict[str, Array]]:
        """Mean Huber loss (DQN's `huber_delta`) between `Q_tot` of the stored
        joint action and the target `r + discount * Q_tot'(s', a')`: the target
        mixer on the target agents' values of the agents' greedy valid actions at
        the next observation, chosen by the online agents with `double_q` (else by
        the target agents). `r` is the team reward (the sum of the agents'
        rewards) over up to `n_step` steps; `discount` is zero after a termination
        and not after a truncation.

        **Returns:**

        `(loss, {"loss": ..., "q_value": mean Q_tot})`.
        """
        agents, mixer = networks
        target_agents, target_mixer = target_networks
        frozen = jax.lax.stop_gradient(agents)

        def one(observation: _JointObservation, action, next_observation):
            q_total, _ = self.team_value(
                agents,
                mixer,
                observation.observation,
                observation.global_state,
                action,
                key,
            )
            next_observation = jax.lax.stop_gradient(next_observation)
            next_target = self.agent_q_values(
                target_agents, next_observation.observation, key
            )
            next_online = (
                self.agent_q_values(frozen, next_observation.observation, key)
                if self.algorithm.double_q
                else next_target
            )
            next_values = jax.vmap(bootstrap_action_value)(
                next_target, next_online, next_observation.action_mask
            )
            next_total = target_mixer(next_values, next_observation.global_state)
            return q_total, next_total

        q_total, next_total = jax.vmap(one)(
            batch.observation, batch.action, batch.next_observation
        )
        target = jax.lax.stop_gradient(batch.reward + batch.discount * next_total)
        loss = jnp.mean(huber_loss(q_total - target, self.algorithm.huber_delta))
        return loss, {"loss": loss, "q_value": jnp.mean(q_total)}

    def sequence_loss(
        self,
        networks: tuple[AbstractQNetwork, AbstractMixer],
        target_networks: tuple[AbstractQNetwork, AbstractMixer],
        batch: ReplaySequence,
        key: PRNGKeyArray,
    ) -> tuple[Float[Array, ""], dict[str, Array]]:
        """`loss` for recurrent agents, on a minibatch of stored sequences: the
        online and the target agents unroll each sequence from its stored carry
        (resetting at episode starts), and every step's `Q_tot` regresses on `r +
        discount * Q_tot'` with the next step's values in the sequence (the chunk's
        last step has its next observation stored with it). A truncated step
        (kept as such with `bootstrap_on_truncation=True`) has no target in the
        sequence (its next observation is the next episode's) and is left out of
        the mean.

        **Returns:**

        `(loss, {"loss": ..., "q_value": mean Q_tot})`.
        """
        del key
        dqn = self.algorithm
        agents, mixer = networks
        target_agents, target_mixer = target_networks

        def one(sequence: ReplaySequence):
            joint: _JointObservation = sequence.observation
            start = sequence.episode_start
            q = self.agent_unroll(agents, sequence.carry, joint.observation, start)
            q_target = jax.lax.stop_gradient(
                self.agent_unroll(
                    target_agents, sequence.carry, joint.observation, start
                )
            )
            num_steps = sequence.reward.shape[0]
            taken = jnp.swapaxes(sequence.action, 0, 1)[..., None]
            chosen = jnp.take_along_axis(q[:, :num_steps], taken, axis=2)[..., 0]
            next_online = jax.lax.stop_gradient(q[:, 1:]) if dqn.double_q else None
            next_target = q_target[:, 1:]
            next_mask = (
                None
                if joint.action_mask is None
                else jnp.swapaxes(joint.action_mask[1:], 0, 1)
            )
            per_step = jax.vmap(bootstrap_action_value)
            next_values = jax.vmap(per_step)(
                next_target,
                next_target if next_online is None else next_online,
                next_mask,
            )
            states = joint.global_state
            q_total = jax.vmap(mixer)(
                jnp.swapaxes(chosen, 0, 1), None if states is None else states[:-1]
            )
            next_total = jax.vmap(target_mixer)(
                jnp.swapaxes(next_values, 0, 1), None if states is None else states[1:]
            )
            discount = jnp.where(sequence.terminated, 0.0, dqn.gamma)
            target = jax.lax.stop_gradient(sequence.reward + discount * next_total)
            weight = jnp.where(
                sequence.truncated & ~sequence.terminated, 0.0, 1.0
            ).astype(jnp.float32)
            return q_total, target, weight

        # The agents' loops run over every sequence of the minibatch, and over
        # every agent with the shared network (a CPU speed hint).
        sequences = batch.reward.shape[0] * (
            self.num_agents if self.share_parameters else 1
        )
        with sequence_batch_hint(sequences):
            q_total, target, weight = jax.vmap(one)(batch)
        errors = huber_loss(q_total - target, dqn.huber_delta)
        loss = jnp.sum(weight * errors) / jnp.maximum(jnp.sum(weight), 1.0)
        return loss, {"loss": loss, "q_value": jnp.mean(q_total)}

    # ------------------------------------------------------------------ state
    def _transition(
        self,
        timestep: TimeStep,
        action: Int[Array, " num_agents"],
        next_timestep: TimeStep,
    ) -> ReplayTransition:
        return ReplayTransition(
            observation=timestep.observation,
            action=action,
            # The team reward, as JaxMARL's CTRolloutManager builds MPE's.
            reward=jnp.sum(next_timestep.reward),
            **self.algorithm.episode_ends(next_timestep),
            next_observation=next_timestep.extras["final_observation"],
        )

    def _step_record(
        self,
        timestep: TimeStep,
        action: Int[Array, "num_envs num_agents"],
        next_timestep: TimeStep,
    ) -> dict[str, Any]:
        """What a recurrent team keeps of one step of every world for its
        sequences: the observation read, whether it began an episode, the joint
        action, the team reward and the episode ends."""
        return dict(
            observation=timestep.observation,
            episode_start=timestep.terminated | timestep.truncated,
            action=action,
            reward=jnp.sum(next_timestep.reward, axis=-1),
            **self.algorithm.episode_ends(next_timestep),
        )

    def _sequences(
        self, steps: dict[str, Any], last: TimeStep, carry: PyTree[Array]
    ) -> ReplaySequence:
        """Every world's chunk of an iteration (`_step_record`s stacked,
        `[num_steps, num_envs, ...]`, in; `[num_envs, ...]` sequences out): the
        observation after the last step (`last`'s, a new episode's first after
        an automatic reset) closes the chunk, and `carry` is what the agents held
        before the first step (an observation after an ended step starts an
        episode: the carry resets before reading it)."""

        def close(steps: Array, after: Array) -> Array:
            return jnp.concatenate([steps, after[None]])

        observation = jax.tree.map(close, steps["observation"], last.observation)
        start = close(steps["episode_start"], last.terminated | last.truncated)
        # One world's sequence at a time (a sequence's shapes are checked), the
        # worlds second in the steps' arrays.
        one_world = jax.vmap(ReplaySequence, in_axes=(1, 1, 1, 1, 1, 1, 0))
        return one_world(
            observation,
            steps["action"],
            steps["reward"],
            steps["terminated"],
            steps["truncated"],
            start,
            carry,
        )

    def init(self, key: PRNGKeyArray) -> ValueDecompositionState:
        agents_key, mixer_key, reset_key, state_key = jr.split(key, 4)
        agents = self.make_agents(agents_key)
        mixer = self.make_mixer(mixer_key)
        optimizer_state = self.algorithm.make_optimizer().init(
            eqx.filter((agents, mixer), eqx.is_array)
        )
        env_state, timestep = jax.vmap(self.training_env.reset)(
            jr.split(reset_key, self.num_envs)
        )
        action = jnp.zeros((self.num_envs, self.num_agents), jnp.int32)
        carry = None
        if self.recurrent:
            dqn = self.algorithm
            world_carry = self.agent_initial_carry(agents)
            carry = jax.tree.map(
                lambda x: jnp.broadcast_to(x, (self.num_envs, *x.shape)), world_carry
            )
            num_steps = dqn.train_frequency
            steps = jax.tree.map(
                lambda x: jnp.broadcast_to(x, (num_steps, *x.shape)),
                self._step_record(timestep, action, timestep),
            )
            example = self._sequences(steps, timestep, carry)
            capacity = dqn.buffer_size // (self.num_envs * num_steps)
        else:
            example = jax.vmap(self._transition)(timestep, action, timestep)
            capacity = self.algorithm.buffer_capacity
        buffer = ReplayBuffer.empty(example, capacity)
        return ValueDecompositionState(
            agents=agents,
            mixer=mixer,
            target_agents=agents,
            target_mixer=mixer,
            optimizer_state=optimizer_state,
            buffer=buffer,
            env_state=env_state,
            timestep=timestep,
            key=state_key,
            iteration=jnp.int32(0),
            num_updates=jnp.int32(0),
            carry=carry,
        )

    def environment_axes(self, state: ValueDecompositionState) -> PyTree[int]:
        """Worlds come first in the world states, timesteps and carries, and second
        in the replay buffer's `[capacity, num_envs, ...]` rows."""
        axes = eqx.tree_at(
            lambda tree: tree.buffer.transitions,
            super().environment_axes(state),
            jax.tree.map(lambda _: 1, state.buffer.transitions),
        )
        if state.carry is None:
            return axes
        return eqx.tree_at(
            lambda tree: tree.carry, axes, jax.tree.map(lambda _: 0, state.carry)
        )

    def diverged(
        self, state: ValueDecompositionState, metrics: dict[str, Array]
    ) -> Bool[Array, ""]:
        """Whether the loss is NaN or infinite on an iteration with updates (NaN by
        design before `learning_starts`)."""
        return (state.num_updates > 0) & ~jnp.isfinite(metrics["loss"])

    def policy(
        self, state: ValueDecompositionState, deterministic: bool = False
    ) -> AbstractPolicy:
        """The agents' joint policy (one multi-agent observation in, one action per
        agent out; decentralized: each agent reads its own observation, never the
        global state): greedy (`deterministic`) or epsilon-greedy with the
        exploration rate reached at `state`.

        **Returns:**

        A [`SharedPolicy`][eqxrl.multiagent.SharedPolicy] around the shared
        network, or with `share_parameters=False` an
        [`IndependentPolicy`][eqxrl.multiagent.IndependentPolicy].
        """
        epsilon = (
            jnp.float32(0.0)
            if deterministic
            else self.algorithm.epsilon(state.iteration * self.steps_per_iteration)
        )
        return self.joint_policy(state.agents, epsilon)

    # -------------------------------------------------------------- iteration
    def _act(
        self,
        agents: AbstractQNetwork,
        epsilon: Float[Array, ""],
        timestep: TimeStep,
        value_key: PRNGKeyArray,
        uniforms: Float[Array, " num_agents"],
    ) -> Int[Array, " num_agents"]:
        """One world's epsilon-greedy joint action (each agent exploring on its own
        uniform number; only valid actions)."""
        q_values = self.agent_q_values(
            agents, timestep.observation.observation, value_key
        )
        choose = jax.vmap(epsilon_greedy_action, in_axes=(0, 0, None, 0))
        return choose(q_values, uniforms, epsilon, timestep.action_mask)

    def _act_recurrent(
        self,
        agents: AbstractQNetwork,
        carry: PyTree[Array],
        epsilon: Float[Array, ""],
        timestep: TimeStep,
        uniforms: Float[Array, " num_agents"],
    ) -> tuple[PyTree[Array], Int[Array, " num_agents"]]:
        """`_act` for recurrent agents in one world: each reads its observation
        with its carry (reset first if the observation starts an episode);
        `(next_carry, joint_action)`."""
        start = timestep.terminated | timestep.truncated
        carry = reset_carry(carry, self.agent_initial_carry(agents), start)
        carry, q_values = self.agent_step(
            agents, carry, timestep.observation.observation
        )
        choose = jax.vmap(epsilon_greedy_action, in_axes=(0, 0, None, 0))
        return carry, choose(q_values, uniforms, epsilon, timestep.action_mask)

    def train_iteration(
        self, state: ValueDecompositionState
    ) -> tuple[ValueDecompositionState, dict[str, Array]]:
        """Step `num_envs` worlds `train_frequency` times with every agent acting
        epsilon-greedily, store the joint transitions, then (once `learning_starts`
        world steps are collected) run `gradient_steps` updates of agents and mixer
        together.

        **Returns:**

        `(state, metrics)`: `episode_return` (`[num_agents]`, each agent's mean
        return over the episodes that ended, NaN when none did),
        `total_episode_return` (their sum, the team's return), `episode_length`,
        `episode_count`, `loss` and `q_value` (mean `Q_tot`; means over the
        iteration's updates, NaN before learning starts), `epsilon`,
        `learning_rate`.
        """
        dqn = self.algorithm
        num_envs, num_agents = self.num_envs, self.num_agents
        key, value_key, uniform_key, step_key, sample_key, loss_key = random_split(
            state.key, 6
        )
        shape = (dqn.train_frequency, num_envs)
        first_step = state.iteration * self.steps_per_iteration
        recurrent = state.carry is not None
        act = eqx.filter_vmap(self._act, in_axes=(None, None, 0, 0, 0))
        act_recurrent = eqx.filter_vmap(
            self._act_recurrent, in_axes=(None, 0, None, 0, 0)
        )
        step_worlds = jax.vmap(self.training_env.step)

        def step(carry, inputs):
            env_state, timestep, buffer, agent_carry = carry
            index, value_keys, uniforms, step_keys = inputs
            epsilon = dqn.epsilon(first_step + index * num_envs)
            if recurrent:
                agent_carry, action = act_recurrent(
                    state.agents, agent_carry, epsilon, timestep, uniforms
                )
            else:
                action = act(state.agents, epsilon, timestep, value_keys, uniforms)
            env_state, next_timestep = step_worlds(env_state, action, step_keys)
            if recurrent:  # the iteration's chunks are stored after the loop
                record = self._step_record(timestep, action, next_timestep)
            else:
                record = None
                buffer = buffer.add(
                    jax.vmap(self._transition)(timestep, action, next_timestep)
                )
            episode = episode_ends(next_timestep)
            return (env_state, next_timestep, buffer, agent_carry), (episode, record)

        with skip_action_checks():
            (env_state, timestep, buffer, carry), (episode, steps) = scan_or_step(
                step,
                (state.env_state, state.timestep, state.buffer, state.carry),
                (
                    jnp.arange(dqn.train_frequency, dtype=jnp.int32),
                    random_split(value_key, shape),
                    random_uniform(uniform_key, (*shape, num_agents)),
                    random_split(step_key, shape),
                ),
            )
        if recurrent:
            buffer = buffer.add(self._sequences(steps, timestep, state.carry))

        collected = (state.iteration + 1) * self.steps_per_iteration
        replay = (
            dict(
                loss=self.sequence_loss,
                gather=ReplayBuffer.gather_sequences,
                batch_size=dqn.batch_size // dqn.train_frequency,
            )
            if recurrent
            else dict(loss=self.loss)
        )
        networks, targets, optimizer_state, num_updates, metrics = dqn.learn(
            (state.agents, state.mixer),
            (state.target_agents, state.target_mixer),
            state.optimizer_state,
            buffer,
            collected >= dqn.learning_starts,
            state.num_updates,
            sample_key,
            loss_key,
            **replay,
        )
        metrics = {
            **team_episode_metrics(*episode),
            **metrics,
            "epsilon": dqn.epsilon(collected - num_envs),
            "learning_rate": dqn.current_learning_rate(optimizer_state),
        }
        state = ValueDecompositionState(
            agents=networks[0],
            mixer=networks[1],
            target_agents=targets[0],
            target_mixer=targets[1],
            optimizer_state=optimizer_state,
            buffer=buffer,
            env_state=env_state,
            timestep=timestep,
            key=key,
            iteration=state.iteration + 1,
            num_updates=num_updates.astype(jnp.int32),
            carry=carry,
        )
        return state, metrics


# What JaxMARL's Q-learning baselines on MPE share (`config/alg/vdn_ff_mpe.yaml`,
# `ql_rnn_mpe.yaml`): one update per iteration from 10k steps on, the squared loss,
# a target copy every 200 updates, epsilon from 1 to 0.05 over the first 10% of the
# run, learning rate 0.005 decayed linearly, gradient norm clipped to 25, `gamma`
# 0.9, and MPE's time limit ending the episode (its one `done` flag): with
# bootstrapping through it, VDN's team return at 2M steps fell to -93.6 from -76.4
# (4 seeds; see `benchmarks/README.md`).
_JAXMARL_MPE_Q_LEARNING = dict(
    total_timesteps=10_000_000,
    exploration_initial_eps=1.0,
    exploration_final_eps=0.05,
    exploration_fraction=0.1,
    max_grad_norm=25.0,
    target_update_interval=200,
    tau=1.0,
    gradient_steps=1,
    learning_rate=0.005,
    anneal_lr=True,
    learning_starts=10_000,
    gamma=0.9,
    n_step=1,
    huber_delta=math.inf,
    bootstrap_on_truncation=False,
)


class VDN(AbstractValueDecomposition):
    """Value decomposition networks (Sunehag et al., 2018): cooperative agents whose
    team value is the sum of their own, `Q_tot = sum_i Q_i(o_i, a_i)`, trained
    end to end on the team reward.

    `algorithm` is an [`eqxrl.DQN`][eqxrl.DQN] configured on the multi-agent
    environment: its replay buffer, n-step returns, exploration schedule, target
    updates (`target_update_interval`, Polyak `tau`), `double_q`, optimizer (Adam,
    `max_grad_norm`, `anneal_lr`), `huber_delta`, `learning_starts`,
    `gradient_steps`, `batch_size` and agent network (`hidden_sizes`, `dueling`,
    `network_factory`) apply to the team. An iteration steps `num_envs` worlds
    `train_frequency` times, every agent acting epsilon-greedily on its own
    observation (only valid actions where the environment gives action masks);
    one replay buffer keeps the joint transitions (every agent's observation,
    action mask and action, the team reward, termination and truncation, which
    happen to every agent at once); each update regresses `Q_tot` of the stored
    joint action on `r + discount * Q_tot'(s', a')` with the target networks, where
    each agent's `a'_i` is its greedy valid action (chosen by the online network
    with `double_q`, by the target network otherwise). The **team reward** `r` is
    the sum of the agents' rewards (what JaxMARL's `CTRolloutManager` uses for
    MPE); a truncated episode bootstraps from its final observation, a terminated
    one does not.

    By default the agents share one network, each agent's flattened observation
    with its one-hot agent index appended (JaxMARL's default); with
    `share_parameters=False` every agent has its own (stacked on a leading agent
    axis).

    With a recurrent agent network (`network_factory=eqxrl.nn.GRUQNetwork.from_env`,
    any [`AbstractRecurrentQNetwork`][eqxrl.nn.AbstractRecurrentQNetwork]) the
    agents keep a carry per world (`ValueDecompositionState.carry`), the buffer
    keeps every world's steps of an iteration as a sequence with the carry it
    started from, and updates unroll the agents through sampled sequences
    ([`sequence_loss`][eqxrl.multiagent.AbstractValueDecomposition.sequence_loss];
    one-step targets, `batch_size` counted in steps and a multiple of
    `train_frequency`).

    **Arguments:**

    - `algorithm`: the DQN, configured on the multi-agent environment.
    - `share_parameters`: one network for all agents (the agent index as an input).

    Metrics per iteration: `episode_return` (`[num_agents]`),
    `total_episode_return` (the team's return), `episode_length`,
    `episode_count`, `loss`, `q_value` (mean `Q_tot`), `epsilon`,
    `learning_rate`. [`VDN.from_jaxmarl`][eqxrl.multiagent.VDN.from_jaxmarl] builds it
    with JaxMARL's `vdn_ff_mpe.yaml` settings.

    !!! example

        ```python
        env = eqxrl.envs.make("TreasureHunt-v0")
        vdn = eqxrl.multiagent.VDN(eqxrl.DQN(env=env, total_timesteps=200_000))
        state, metrics = vdn.train(jax.random.key(0))
        metrics["total_episode_return"]  # [num_iterations]
        policy = vdn.policy(state, deterministic=True)  # every agent
        ```
    """

    # Typed as any algorithm so that another one gets `_check`'s explanation.
    algorithm: AbstractAlgorithm
    share_parameters: bool = eqx.field(static=True, default=True)

    def __check_init__(self):
        self._check()

    def make_mixer(self, key: PRNGKeyArray) -> SumMixer:
        """A [`SumMixer`][eqxrl.multiagent.SumMixer] (no parameters)."""
        del key
        return SumMixer()

    @classmethod
    def from_jaxmarl(
        cls, env: AbstractEnvironment, *, share_parameters: bool = True, **overrides
    ) -> "VDN":
        """VDN with the settings of JaxMARL's `baselines/QLearning/vdn_ff.py` on
        MPE (`config/alg/vdn_ff_mpe.yaml`): 32 worlds stepped 16 times per
        iteration, 10M steps, a buffer of 100k transitions, minibatches of 32, one
        update per iteration from 10k steps on, `gamma` 0.9, the plain `max` target
        (no double Q) and the squared loss, a target copy every 200 updates,
        epsilon from 1 to 0.05 over the first 10% of the run, learning rate 0.005
        decayed linearly, gradient norm clipped to 25, and no bootstrap at MPE's
        time limit (`bootstrap_on_truncation=False`, as JaxMARL's single `done`
        flag).

        What differs: JaxMARL's optimizer is RAdam (here DQN's Adam); its agent
        network with `NUM_LAYERS: 2` has no hidden layer (one linear layer from the
        observation and agent index to the action values), which `hidden_sizes=()`
        reproduces; its epsilon decays from the first iteration, DQN's is 1 until
        `learning_starts`.

        **Arguments:**

        - `env`: the multi-agent environment (not auto-resetting).
        - `share_parameters`: one network for all agents (JaxMARL's).
        - `**overrides`: DQN fields to change (e.g. `total_timesteps`).
        """
        settings = dict(
            _JAXMARL_MPE_Q_LEARNING,
            num_envs=32,
            train_frequency=16,
            buffer_size=100_000,
            batch_size=32,
            hidden_sizes=(),
            double_q=False,
        )
        dqn = DQN(env=env, **{**settings, **overrides})
        return cls(dqn, share_parameters=share_parameters)

    @classmethod
    def jaxmarl(cls, *args, **kwargs) -> "VDN":
        """Deprecated: [`VDN.from_jaxmarl`][eqxrl.multiagent.VDN.from_jaxmarl]."""
        warn_renamed(
            "eqxrl.multiagent.VDN.jaxmarl", "eqxrl.multiagent.VDN.from_jaxmarl"
        )
        return cls.from_jaxmarl(*args, **kwargs)


class QMIX(AbstractValueDecomposition):
    """QMIX (Rashid et al., 2018): cooperative agents whose team value is a
    monotonic function of their own values, mixed by a network whose weights
    hypernetworks compute from the global state
    ([`MonotonicMixer`][eqxrl.multiagent.MonotonicMixer]). Monotonicity makes the
    agents' own greedy actions the team's greedy joint action, so the agents act
    on their own observations (decentralized execution) while the mixer learns
    from the world's state (centralized training).

    The loop is [`VDN`][eqxrl.multiagent.VDN]'s (read it for the replay buffer of
    joint transitions, the team reward and the targets) with this mixer, the target
    mixer in the target. The **global state** is the environment's
    (`timestep.extras["global_state"]`, declared by its
    [`global_state_space`][eqxrl.envs.AbstractMultiAgentEnvironment.global_state_space]),
    flattened; for an environment that declares none, every agent's observation
    flattened and concatenated (what JaxMARL's `CTRolloutManager` gives for MPE).
    It is stored in the replay buffer with each transition (that of the final step
    for the next observation of an episode's last step).

    **Arguments:**

    - `algorithm`: the DQN, configured on the multi-agent environment.
    - `share_parameters`: one network for all agents (the agent index as an input).
    - `embedding_size`: the mixing network's hidden width (JaxMARL: 32).
    - `hypernet_hidden_size`: the hypernetworks' hidden width (JaxMARL: 128).
    - `init_scale`: the gain of the mixer's orthogonal initial weights (JaxMARL:
      0.001).

    Metrics as [`VDN`][eqxrl.multiagent.VDN]'s.
    [`QMIX.from_jaxmarl`][eqxrl.multiagent.QMIX.from_jaxmarl] builds it with JaxMARL's
    `ql_rnn_mpe.yaml` settings (with a feed-forward agent network).

    !!! example

        ```python
        env = eqxrl.envs.make("TreasureHunt-v0")  # declares a global state
        qmix = eqxrl.multiagent.QMIX(eqxrl.DQN(env=env, total_timesteps=200_000))
        state, metrics = qmix.train(jax.random.key(0))
        ```
    """

    reads_global_state: ClassVar[bool] = True

    # Typed as any algorithm so that another one gets `_check`'s explanation.
    algorithm: AbstractAlgorithm
    share_parameters: bool = eqx.field(static=True, default=True)
    embedding_size: int = eqx.field(static=True, default=32)
    hypernet_hidden_size: int = eqx.field(static=True, default=128)
    init_scale: Float[Array, ""] = eqx.field(
        default=0.001, converter=in_range("init_scale", 0.0, math.inf, finite=True)
    )

    def __check_init__(self):
        self._check()
        for name in ("embedding_size", "hypernet_hidden_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"QMIX: {name}={value!r} must be a positive int.")

    def make_mixer(self, key: PRNGKeyArray) -> MonotonicMixer:
        """A [`MonotonicMixer`][eqxrl.multiagent.MonotonicMixer] on the global
        state."""
        return MonotonicMixer(
            self.num_agents,
            self.state_size,
            embedding_size=self.embedding_size,
            hypernet_hidden_size=self.hypernet_hidden_size,
            init_scale=self.init_scale,
            key=key,
        )

    @classmethod
    def from_jaxmarl(
        cls,
        env: AbstractEnvironment,
        *,
        share_parameters: bool = True,
        recurrent: bool = False,
        **overrides,
    ) -> "QMIX":
        """QMIX with the settings of JaxMARL's `baselines/QLearning/qmix_rnn.py`
        on MPE (`config/alg/ql_rnn_mpe.yaml`): 8 worlds stepped 26 times per
        iteration, 10M steps, a buffer of 5,000 episodes of 26 steps (130,000
        transitions), minibatches of 32 episodes (832 transitions), one update per
        iteration from 10k steps on, `gamma` 0.9, double-Q targets
        and the squared loss, a target copy every 200 updates, epsilon from 1 to
        0.05 over the first 10% of the run, learning rate 0.005 decayed linearly,
        gradient norm clipped to 25, agent width 64, a mixer of 32 / 128 / 0.001,
        and no bootstrap at MPE's time limit (`bootstrap_on_truncation=False`, as
        JaxMARL's single `done` flag).

        With `recurrent=True`, JaxMARL's agents: Dense 64 + ReLU, GRU 64, a linear
        head ([`GRUQNetwork`][eqxrl.nn.GRUQNetwork] at its defaults), trained on
        the stored sequences of 26 steps (minibatches of 32); JaxMARL resets every
        world at each iteration so that its sequences are whole episodes from a
        zero carry, while here the worlds run on and each sequence starts from the
        carry its first step was read with (MPE's 25-step episodes drift across
        the 26-step chunks). Without it (the default), two ReLU layers of 64 on
        minibatches of transitions.

        What differs besides: JaxMARL's optimizer is RAdam (here Adam); its epsilon
        decays from the first iteration, DQN's is 1 until `learning_starts`.

        **Arguments:**

        - `env`: the multi-agent environment (not auto-resetting).
        - `share_parameters`: one network for all agents (JaxMARL's).
        - `recurrent`: JaxMARL's recurrent agents (above).
        - `**overrides`: DQN fields to change (e.g. `total_timesteps`).
        """
        settings = dict(
            _JAXMARL_MPE_Q_LEARNING,
            num_envs=8,
            train_frequency=26,
            buffer_size=5_000 * 26,
            batch_size=32 * 26,
            hidden_sizes=(64, 64),
            double_q=True,
        )
        if recurrent:
            settings["network_factory"] = GRUQNetwork.from_env
        dqn = DQN(env=env, **{**settings, **overrides})
        return cls(dqn, share_parameters=share_parameters)

    @classmethod
    def jaxmarl(cls, *args, **kwargs) -> "QMIX":
        """Deprecated: [`QMIX.from_jaxmarl`][eqxrl.multiagent.QMIX.from_jaxmarl]."""
        warn_renamed(
            "eqxrl.multiagent.QMIX.jaxmarl", "eqxrl.multiagent.QMIX.from_jaxmarl"
        )
        return cls.from_jaxmarl(*args, **kwargs)
