import abc

import equinox as eqx
from jaxtyping import Array, Bool, PRNGKeyArray, PyTree

from ._actor_critic import AbstractActorCritic


class AbstractPolicy(eqx.Module):
    """A trained policy, ready to act: `act(observation, key, action_mask=None)`.

    `act` takes one observation and is jitted; batch it with `jax.vmap`.
    """

    @abc.abstractmethod
    def __call__(
        self,
        observation: PyTree[Array],
        key: PRNGKeyArray,
        action_mask: Bool[Array, " num_actions"] | None = None,
    ) -> Array:
        """The action for one observation."""

    @eqx.filter_jit
    def act(
        self,
        observation: PyTree[Array],
        key: PRNGKeyArray,
        action_mask: Bool[Array, " num_actions"] | None = None,
    ) -> Array:
        """The action for one observation, compiled (the same as calling the policy).

        **Arguments:**

        - `observation`: one observation.
        - `key`: a PRNG key (unused by deterministic policies).
        - `action_mask`: bool `[num_actions]`, `True` for valid actions, or `None`.

        **Returns:**

        The action (int32 scalar for discrete action spaces).
        """
        return self(observation, key, action_mask)


class ActorCriticPolicy(AbstractPolicy):
    """The actor of an actor-critic as a policy: sampled, or greedy (the mode).

    **Arguments:**

    - `model`: the trained actor-critic.
    - `deterministic`: act with the most probable valid action (the mean, for a
      Gaussian) instead of sampling.
    """

    model: AbstractActorCritic
    deterministic: bool = eqx.field(static=True, default=False)

    def __call__(
        self,
        observation: PyTree[Array],
        key: PRNGKeyArray,
        action_mask: Bool[Array, " num_actions"] | None = None,
    ) -> Array:
        distribution, _ = self.model(observation, action_mask)
        if self.deterministic:
            return distribution.mode()
        return distribution.sample(key)
