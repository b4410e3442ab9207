import equinox as eqx
import jax.numpy as jnp
from distreqx.bijectors import Block, Tanh
from distreqx.distributions import MultivariateNormalDiag, Transformed
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from ._base import AbstractActionDistribution

# Squashed actions are kept this far inside (-1, 1) so that atanh stays finite.
_SQUASH_EPSILON = 1e-6


class DiagonalGaussian(AbstractActionDistribution):
    """A diagonal Gaussian over continuous actions, optionally squashed by `tanh`.

    Built on distreqx: `MultivariateNormalDiag`, and for `squash=True`
    `Transformed(..., Block(Tanh(), 1))`, whose samples lie in `(-1, 1)` (rescale them
    to the environment's bounds with [`RescaleAction`][eqxrl.envs.RescaleAction]).

    `log_prob` of a squashed action inverts the `tanh` after clipping the action to
    `[-1 + 1e-6, 1 - 1e-6]`; `sample_and_log_prob` returns that same value, so the
    log-probabilities stored at rollout and recomputed at update agree exactly.
    The entropy of a squashed Gaussian has no closed form: `entropy()` returns that of
    the underlying Gaussian (the usual surrogate).

    **Arguments:**

    - `mean`: float `[action_size]`, the mean before any squashing.
    - `log_std`: float `[action_size]`, log standard deviations.
    - `squash`: apply `tanh` to samples.
    """

    mean: Float[Array, " action_size"]
    log_std: Float[Array, " action_size"]
    squash: bool = eqx.field(static=True, default=False)

    @property
    def _gaussian(self) -> MultivariateNormalDiag:
        return MultivariateNormalDiag(self.mean, jnp.exp(self.log_std))

    def sample(self, key: PRNGKeyArray) -> Float[Array, " action_size"]:
        """Draw one action (float32 `[action_size]`)."""
        sample = self._gaussian.sample(key)
        return jnp.tanh(sample) if self.squash else sample

    def log_prob(self, action: Float[ArrayLike, " action_size"]) -> Float[Array, ""]:
        """Log-density of `action` (with the tanh change of variables if squashed)."""
        action = jnp.asarray(action, jnp.float32)
        if self.squash:
            bound = 1.0 - _SQUASH_EPSILON
            action = jnp.clip(action, -bound, bound)
            return Transformed(self._gaussian, Block(Tanh(), 1)).log_prob(action)
        return self._gaussian.log_prob(action)

    def sample_and_log_prob(
        self, key: PRNGKeyArray
    ) -> tuple[Float[Array, " action_size"], Float[Array, ""]]:
        """`sample` and its `log_prob` at once."""
        action = self.sample(key)
        return action, self.log_prob(action)

    def entropy(self) -> Float[Array, ""]:
        """Entropy of the (unsquashed) Gaussian."""
        return self._gaussian.entropy()

    def mode(self) -> Float[Array, " action_size"]:
        """The mean (squashed if `squash`)."""
        return jnp.tanh(self.mean) if self.squash else self.mean
