"""The team's view of a multi-agent environment for value decomposition: every
agent's observation, their action masks and the flattened global state, kept
together in the observation that the replay buffer stores."""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, PRNGKeyArray, PyTree

from ..envs import (
    GLOBAL_STATE,
    AbstractEnvironment,
    AbstractWrapper,
    TimeStep,
    global_state_space_of,
)


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
