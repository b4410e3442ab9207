import equinox as eqx
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


class SharedPolicy(AbstractPolicy):
    """A policy whose network all agents share, each agent's observation flattened
    with its one-hot index appended (`Independent(..., share_parameters=True)`).

    With `agent=None`, a joint policy: one multi-agent observation in, one action
    per agent out (each agent with its own key, `jax.random.split(key,
    num_agents)`). With `agent=i`, agent `i`'s policy: one agent's observation in,
    its action out.

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
