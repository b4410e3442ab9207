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
    Inverting the `tanh` loses precision as the action nears `+-1`: keep the sample
    before the `tanh` instead (`sample_pre_squash_and_log_prob`, then
    `log_prob_pre_squash`) to have exact log-densities, as [`PPO`][eqxrl.PPO] does
    for squashed policies (and Brax's PPO for its `NormalTanhDistribution`).
    The entropy of a squashed Gaussian has no closed form: `entropy()` returns that of
    the underlying Gaussian (the usual surrogate), `entropy_estimate(noise)` a
    one-sample estimate of the squashed distribution's.

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

    def sample_pre_squash_and_log_prob(
        self, key: PRNGKeyArray
    ) -> tuple[Float[Array, " action_size"], Float[Array, ""]]:
        """A sample `u` of the Gaussian before any squashing, and the log-density of
        the action it stands for (`tanh(u)` with `squash`, else `u`), computed from
        `u` as `log_prob_pre_squash` does.

        For the same key, `tanh(u)` (or `u`) is `sample(key)`.

        **Returns:**

        `(pre_squash, log_prob)`: float32 `[action_size]` and a scalar.
        """
        pre_squash = self._gaussian.sample(key)
        return pre_squash, self.log_prob_pre_squash(pre_squash)

    def log_prob_pre_squash(
        self, pre_squash: Float[ArrayLike, " action_size"]
    ) -> Float[Array, ""]:
        """Log-density of the action `tanh(pre_squash)` (with `squash`; else of
        `pre_squash` itself), from the sample before the `tanh`.

        With `squash` it is `log N(u) - sum(log(1 - tanh(u)**2))`, the second term
        from distreqx's `Tanh` bijector as `2 * (log 2 - u - softplus(-2u))`: exact
        and finite for every `u`, also where `tanh(u)` rounds to `+-1` (where
        `log_prob(tanh(u))` has to clip the action to invert it).

        **Arguments:**

        - `pre_squash`: float `[action_size]`, a sample of the Gaussian.
        """
        pre_squash = jnp.asarray(pre_squash, jnp.float32)
        log_prob = self._gaussian.log_prob(pre_squash)
        if self.squash:
            log_prob = log_prob - jnp.sum(Tanh().forward_log_det_jacobian(pre_squash))
        return log_prob

    def entropy_estimate(
        self, noise: Float[ArrayLike, " action_size"]
    ) -> Float[Array, ""]:
        """The entropy of the actions, estimated from one reparameterized sample
        (Brax's PPO estimate for its tanh-squashed Gaussian).

        With `squash`: the Gaussian's entropy plus `sum(log(1 - tanh(u)**2))` at
        `u = mean + exp(log_std) * noise`, whose expectation over the noise is the
        entropy of `tanh(u)`. Differentiable in `mean` and `log_std` through `u`,
        so a bonus on it also keeps the policy out of the flat ends of the `tanh`,
        which the Gaussian's entropy alone does not see. Without `squash`:
        `entropy()` (the noise is not used).

        **Arguments:**

        - `noise`: float `[action_size]`, standard normal draws.
        """
        entropy = self.entropy()
        if not self.squash:
            return entropy
        noise = jnp.asarray(noise, jnp.float32)
        pre_squash = self.mean + jnp.exp(self.log_std) * noise
        return entropy + jnp.sum(Tanh().forward_log_det_jacobian(pre_squash))

    def mode(self) -> Float[Array, " action_size"]:
        """The mean (squashed if `squash`)."""
        return jnp.tanh(self.mean) if self.squash else self.mean
