"""The base of cooperative agents whose Q-networks are trained as a team (value
decomposition's VDN and QMIX, and PQN-VDN): the agents' network, and their values
in one world."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray, PyTree

from .._deprecation import warn_renamed
from ..algorithms import AbstractAlgorithm
from ..envs import Box, num_agents_of, unwrap
from ..nn import AbstractPolicy, AbstractQNetwork, EpsilonGreedyPolicy
from ._agents import (
    AbstractTeamAlgorithm,
    SharedObservations,
    StateT,
    every_agent_with_index,
)
from ._mixers import AbstractMixer
from ._policy import IndependentPolicy, SharedPolicy


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
    def make_network(self, key: PRNGKeyArray) -> AbstractQNetwork:
        """The agents' initial network: the algorithm's (its `network_factory`, or
        an `MLPQNetwork` with its `hidden_sizes`), one on the shared view, or one
        per agent stacked on a leading agent axis."""
        if type(self).make_agents is not AbstractTeamQLearning.make_agents:
            # A subclass written against the old name still builds its network.
            return self.make_agents(key)
        return self._agents_network(key)

    def make_agents(self, key: PRNGKeyArray) -> AbstractQNetwork:
        """Deprecated: `make_network`, the name every algorithm uses."""
        warn_renamed(f"{type(self).__name__}.make_agents", "make_network")
        return self._agents_network(key)

    def _agents_network(self, key: PRNGKeyArray) -> AbstractQNetwork:
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
