import jax.numpy as jnp
from distreqx.distributions import Categorical
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray

from .._random import categorical
from ._base import AbstractActionDistribution


class MaskedCategorical(AbstractActionDistribution):
    """A categorical distribution over actions, some of which may be invalid.

    Built on `distreqx.distributions.Categorical`. Logits of masked (invalid)
    actions are replaced by the most negative finite float32, so masked actions have
    probability exactly zero, are never sampled, and get zero gradient;
    log-probabilities and entropy stay finite. Samples are int32 (distreqx's are int8).

    A row whose every action is masked (e.g. a terminal state that has no legal move)
    is treated as uniform over all actions: sampling returns some action, `log_prob` is
    `-log(num_actions)`, entropy `log(num_actions)`, and gradients to the logits are
    zero. Nothing becomes NaN.

    **Arguments:**

    - `logits`: float vector `[num_actions]` of unnormalized log-probabilities.
    - `action_mask`: bool vector `[num_actions]`, `True` for valid actions, or `None`
      (every action valid).
    """

    categorical: Categorical
    action_mask: Bool[Array, " num_actions"] | None

    def __init__(
        self,
        logits: Float[Array, " num_actions"],
        action_mask: Bool[Array, " num_actions"] | None = None,
    ):
        if action_mask is not None:
            logits = jnp.where(action_mask, logits, jnp.finfo(logits.dtype).min)
        self.categorical = Categorical(logits=logits)
        self.action_mask = action_mask

    @property
    def logits(self) -> Float[Array, " num_actions"]:
        """Normalized log-probabilities (masked entries hugely negative, finite)."""
        return self.categorical.logits

    @property
    def probs(self) -> Float[Array, " num_actions"]:
        """Probabilities; exactly zero on masked actions."""
        return self.categorical.probs

    def sample(self, key: PRNGKeyArray) -> Int[Array, ""]:
        """Draw one action (int32)."""
        # jax.random.categorical's sample, computed so that XLA fuses it.
        return categorical(key, self.categorical.logits).astype(jnp.int32)

    def log_prob(self, action: Int[ArrayLike, ""]) -> Float[Array, ""]:
        """Log-probability of `action` (finite even for masked actions)."""
        return jnp.take(self.categorical.logits, jnp.asarray(action, jnp.int32))

    def sample_and_log_prob(
        self, key: PRNGKeyArray
    ) -> tuple[Int[Array, ""], Float[Array, ""]]:
        """`sample` and its `log_prob` at once."""
        action = self.sample(key)
        return action, self.log_prob(action)

    def entropy(self) -> Float[Array, ""]:
        """Entropy over the valid actions (masked ones contribute exactly zero)."""
        return self.categorical.entropy()

    def mode(self) -> Int[Array, ""]:
        """The most probable valid action (int32)."""
        return jnp.argmax(self.categorical.logits).astype(jnp.int32)
