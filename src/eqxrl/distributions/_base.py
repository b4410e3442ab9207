import abc

import equinox as eqx
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray


class AbstractActionDistribution(eqx.Module):
    """A distribution over the actions of one environment, as a policy head returns it.

    PPO needs exactly these methods; any policy distribution implementing them works
    with it.
    """

    @abc.abstractmethod
    def sample(self, key: PRNGKeyArray) -> Array:
        """Draw one action."""

    @abc.abstractmethod
    def log_prob(self, action: ArrayLike) -> Float[Array, ""]:
        """Log-probability (density) of `action`."""

    @abc.abstractmethod
    def sample_and_log_prob(self, key: PRNGKeyArray) -> tuple[Array, Float[Array, ""]]:
        """`sample` and its `log_prob` at once."""

    @abc.abstractmethod
    def entropy(self) -> Float[Array, ""]:
        """Entropy of the distribution."""

    @abc.abstractmethod
    def mode(self) -> Array:
        """The most probable action (the greedy action)."""
