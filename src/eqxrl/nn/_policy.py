import abc

import equinox as eqx
from jaxtyping import Array, Bool, PRNGKeyArray, PyTree

from ..distributions import AbstractActionDistribution
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

    @property
    def is_recurrent(self) -> bool:
        """Whether the policy carries a state from step to step (then act with
        `step`, from `initial_carry()` at each episode's start)."""
        return False

    def initial_carry(self) -> PyTree[Array] | None:
        """One episode's initial carry: `None` for a feed-forward policy."""
        return None

    def step(
        self,
        carry: PyTree[Array] | None,
        observation: PyTree[Array],
        key: PRNGKeyArray,
        action_mask: Bool[Array, " num_actions"] | None = None,
    ) -> tuple[PyTree[Array] | None, Array]:
        """The action for one observation, with the carry of the episode's steps
        before it: `(next_carry, action)`. Start each episode from
        `initial_carry()`. A feed-forward policy returns `carry` unchanged.

        `step` traces (as `__call__` does): call it inside a compiled loop, or
        jit it, `eqx.filter_jit(policy.step)`.

        **Arguments:**

        - `carry`: `initial_carry()` at an episode's first observation, else the
          carry `step` returned at the previous one.
        - `observation`: one observation.
        - `key`: a PRNG key (unused by deterministic policies).
        - `action_mask`: bool `[num_actions]`, `True` for valid actions, or `None`.

        **Returns:**

        `(next_carry, action)`.
        """
        return carry, self(observation, key, action_mask)

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
        if self.model.is_recurrent:
            raise TypeError(
                f"This policy's {type(unwrap_normalized(self.model)).__name__} is "
                "recurrent: act with `carry, action = policy.step(carry, "
                "observation, key)`, starting each episode from "
                "`policy.initial_carry()` (see the Memory guide)."
            )
        distribution, _ = self.model(observation, action_mask)
        return self._choose(distribution, key)

    @property
    def is_recurrent(self) -> bool:
        """Whether the actor-critic is recurrent."""
        return self.model.is_recurrent

    def initial_carry(self) -> PyTree[Array] | None:
        """The actor-critic's `initial_carry()`."""
        return self.model.initial_carry()

    def step(
        self,
        carry: PyTree[Array] | None,
        observation: PyTree[Array],
        key: PRNGKeyArray,
        action_mask: Bool[Array, " num_actions"] | None = None,
    ) -> tuple[PyTree[Array] | None, Array]:
        carry, distribution, _ = self.model.step(carry, observation, action_mask)
        return carry, self._choose(distribution, key)

    def _choose(self, distribution: AbstractActionDistribution, key: PRNGKeyArray):
        if self.deterministic:
            return distribution.mode()
        return distribution.sample(key)


def unwrap_normalized(model: AbstractActorCritic) -> AbstractActorCritic:
    """The network inside observation normalization, for messages."""
    return getattr(model, "model", model)
