import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Bool, Int, PRNGKeyArray, PyTree

from ..nn import AbstractPolicy
from ._agents import with_agent_index


def _split(key: PRNGKeyArray, num_agents: int) -> Array:
    return jr.split(key, num_agents)


class IndependentPolicy(AbstractPolicy):
    """The joint policy of independent learners: one policy per agent, stacked (a
    leading agent axis on its arrays), each acting on its own agent's observation.

    Called on a multi-agent observation (`[num_agents, ...]` leaves), it returns one
    action per agent, each agent with its own key (`jax.random.split(key,
    num_agents)`). [`Independent.policy`][eqxrl.multiagent.Independent.policy]
    builds it; `policy(state, agent=i)` gives agent `i`'s policy alone.

    With recurrent networks, act with `step`: `initial_carry()` stacks every
    agent's carry on a leading agent axis, and `step(carry, observation, key)`
    steps each agent with its own carry (the joint policy's call raises a
    `TypeError` that says so).

    **Arguments:**

    - `policies`: the agents' policies as one stacked policy.
    - `num_agents`: the number of agents (the length of the stacked axis).
    """

    policies: AbstractPolicy
    num_agents: int = eqx.field(static=True)

    def __call__(
        self,
        observation: PyTree[Array],
        key: PRNGKeyArray,
        action_mask: Bool[Array, "num_agents num_actions"] | None = None,
    ) -> Array:
        """One action per agent, for one multi-agent observation."""

        def act(policy, observation, key, action_mask):
            return policy(observation, key, action_mask)

        return eqx.filter_vmap(act)(
            self.policies, observation, _split(key, self.num_agents), action_mask
        )

    @property
    def is_recurrent(self) -> bool:
        """Whether the agents' policies carry a state from step to step."""
        return self.policies.is_recurrent

    def initial_carry(self) -> PyTree[Array] | None:
        """Every agent's initial carry, on a leading agent axis (`[num_agents,
        ...]` leaves); `None` for feed-forward policies."""
        if not self.is_recurrent:
            return None
        return eqx.filter_vmap(lambda policy: policy.initial_carry())(self.policies)

    def step(
        self,
        carry: PyTree[Array] | None,
        observation: PyTree[Array],
        key: PRNGKeyArray,
        action_mask: Bool[Array, "num_agents num_actions"] | None = None,
    ) -> tuple[PyTree[Array] | None, Array]:
        """One action per agent, each agent reading its own observation with its
        own carry: `(next_carry, actions)`, the carry `[num_agents, ...]` as
        `initial_carry()` gives it at an episode's start."""
        if not self.is_recurrent:
            return carry, self(observation, key, action_mask)

        def act(policy, carry, observation, key, action_mask):
            return policy.step(carry, observation, key, action_mask)

        return eqx.filter_vmap(act)(
            self.policies, carry, observation, _split(key, self.num_agents), action_mask
        )


class SharedPolicy(AbstractPolicy):
    """A policy whose network all agents share, each agent's observation flattened
    with its one-hot index appended (`Independent(..., share_parameters=True)`).

    With `agent=None`, a joint policy: one multi-agent observation in, one action
    per agent out (each agent with its own key, `jax.random.split(key,
    num_agents)`). With `agent=i`, agent `i`'s policy: one agent's observation in,
    its action out.

    With a recurrent network, act with `step`: the joint policy's
    `initial_carry()` is the network's repeated on a leading agent axis (one
    carry per agent), agent `i`'s policy's is one agent's.

    **Arguments:**

    - `policy`: the shared network's policy, on augmented observations.
    - `num_agents`: the number of agents.
    - `agent`: `None` for the joint policy, or an agent index.
    """

    policy: AbstractPolicy
    num_agents: int = eqx.field(static=True)
    agent: int | None = eqx.field(static=True, default=None)

    def __call__(
        self,
        observation: PyTree[Array],
        key: PRNGKeyArray,
        action_mask: Bool[Array, "..."] | None = None,
    ) -> Array:
        """The action of agent `agent` (or of every agent, for the joint policy)."""
        if self.agent is not None:
            augmented = with_agent_index(observation, self.agent, self.num_agents)
            return self.policy(augmented, key, action_mask)

        def act(observation, agent: Int[Array, ""], key, action_mask):
            augmented = with_agent_index(observation, agent, self.num_agents)
            return self.policy(augmented, key, action_mask)

        return eqx.filter_vmap(act)(
            observation,
            jnp.arange(self.num_agents, dtype=jnp.int32),
            _split(key, self.num_agents),
            action_mask,
        )

    @property
    def is_recurrent(self) -> bool:
        """Whether the shared network carries a state from step to step."""
        return self.policy.is_recurrent

    def initial_carry(self) -> PyTree[Array] | None:
        """The shared network's initial carry: one per agent on a leading agent
        axis for the joint policy (`[num_agents, ...]` leaves), agent `agent`'s
        alone otherwise; `None` for a feed-forward network."""
        carry = self.policy.initial_carry()
        if carry is None or self.agent is not None:
            return carry
        return jax.tree.map(
            lambda x: jnp.broadcast_to(x, (self.num_agents, *x.shape)), carry
        )

    def step(
        self,
        carry: PyTree[Array] | None,
        observation: PyTree[Array],
        key: PRNGKeyArray,
        action_mask: Bool[Array, "..."] | None = None,
    ) -> tuple[PyTree[Array] | None, Array]:
        """The action of agent `agent` (or of every agent, for the joint policy),
        each agent reading its observation with its own carry: `(next_carry,
        action)`, the carry shaped as `initial_carry()` gives it."""
        if not self.is_recurrent:
            return carry, self(observation, key, action_mask)
        if self.agent is not None:
            augmented = with_agent_index(observation, self.agent, self.num_agents)
            return self.policy.step(carry, augmented, key, action_mask)

        def act(carry, observation, agent: Int[Array, ""], key, action_mask):
            augmented = with_agent_index(observation, agent, self.num_agents)
            return self.policy.step(carry, augmented, key, action_mask)

        return eqx.filter_vmap(act)(
            carry,
            observation,
            jnp.arange(self.num_agents, dtype=jnp.int32),
            _split(key, self.num_agents),
            action_mask,
        )
