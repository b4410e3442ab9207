import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Bool, Float, PyTree

from ..distributions import AbstractActionDistribution
from ..envs import AbstractSpace, Box, is_leaf_space
from ._actor_critic import AbstractActorCritic


class RunningMeanStd(eqx.Module):
    """Running mean and variance of a stream of arrays, merged batch by batch.

    Used to normalize observations (and, through the discounted return, rewards).
    Statistics are per entry of one example (shape `shape`), shared by every
    environment.

    **Arguments:**

    - `mean`: float `[*shape]`.
    - `var`: float `[*shape]`.
    - `count`: float scalar, the (pseudo-)number of examples merged so far.
    """

    mean: Float[Array, "*shape"]
    var: Float[Array, "*shape"]
    count: Float[Array, ""]

    @classmethod
    def zeros(cls, shape: tuple[int, ...]) -> "RunningMeanStd":
        """Empty statistics: mean 0, variance 1, a tiny count (the first batch wins)."""
        return cls(
            jnp.zeros(shape, jnp.float32),
            jnp.ones(shape, jnp.float32),
            jnp.float32(1e-4),
        )

    def update(self, batch: Float[Array, " batch *shape"]) -> "RunningMeanStd":
        """Merge a batch of examples (leading axis) into the statistics."""
        batch = batch.astype(jnp.float32)
        batch_count = jnp.float32(batch.shape[0])
        batch_mean = batch.mean(axis=0)
        batch_var = batch.var(axis=0)
        delta = batch_mean - self.mean
        total = self.count + batch_count
        mean = self.mean + delta * batch_count / total
        m2 = (
            self.var * self.count
            + batch_var * batch_count
            + jnp.square(delta) * self.count * batch_count / total
        )
        return RunningMeanStd(mean, m2 / total, total)

    def normalize(
        self, x: Float[Array, "*shape"], clip: float = 10.0
    ) -> Float[Array, "*shape"]:
        """`(x - mean) / sqrt(var + 1e-8)`, clipped to `[-clip, clip]`."""
        scaled = (x.astype(jnp.float32) - self.mean) / jnp.sqrt(self.var + 1e-8)
        return jnp.clip(scaled, -clip, clip)


def _is_statistics(node: object) -> bool:
    return node is None or isinstance(node, RunningMeanStd)


def empty_observation_statistics(
    space: AbstractSpace,
) -> PyTree[RunningMeanStd | None]:
    """Empty statistics for observations of `space`: a `RunningMeanStd` per `Box`
    leaf and `None` for `Discrete` leaves (which stay as they are), in the
    observation's structure; for a `Box` space, one `RunningMeanStd`."""

    def for_leaf(leaf: AbstractSpace) -> RunningMeanStd | None:
        return RunningMeanStd.zeros(leaf.shape) if isinstance(leaf, Box) else None

    # The statistics take the structure of an element (dicts, tuples), not that
    # of the space (Dict, Tuple modules).
    structure = jax.tree.structure(eqx.filter_eval_shape(space.sample, jr.key(0)))
    leaves = jax.tree.leaves(space, is_leaf=is_leaf_space)
    return jax.tree.unflatten(structure, [for_leaf(leaf) for leaf in leaves])


def normalize_observation(
    statistics: PyTree[RunningMeanStd | None], observation: PyTree[Array]
) -> PyTree[Array]:
    """Each leaf normalized by its statistics (leaves without statistics as they
    are)."""
    return jax.tree.map(
        lambda stats, leaf: leaf if stats is None else stats.normalize(leaf),
        statistics,
        observation,
        is_leaf=_is_statistics,
    )


def update_observation_statistics(
    statistics: PyTree[RunningMeanStd | None], batch: PyTree[Array]
) -> PyTree[RunningMeanStd | None]:
    """Each leaf's statistics merged with its batch (leading axis)."""
    return jax.tree.map(
        lambda stats, leaf: None if stats is None else stats.update(leaf),
        statistics,
        batch,
        is_leaf=_is_statistics,
    )


class NormalizedActorCritic(AbstractActorCritic):
    """An actor-critic that sees observations normalized by fixed statistics.

    How PPO applies observation normalization: the statistics are frozen for an
    iteration (so log-probabilities at rollout and update agree) and exported with the
    trained policy, so `policy.act` takes raw observations.

    **Arguments:**

    - `model`: the actor-critic on normalized observations.
    - `statistics`: the observation statistics: a `RunningMeanStd`, or for
      structured observations one per `Box` leaf (`None` for leaves left as they
      are), in the observation's structure.
    """

    model: AbstractActorCritic
    statistics: PyTree[RunningMeanStd | None]

    def __call__(
        self,
        observation: PyTree[Array],
        action_mask: Bool[Array, " num_actions"] | None = None,
    ) -> tuple[AbstractActionDistribution, Float[Array, ""]]:
        return self.model(
            normalize_observation(self.statistics, observation), action_mask
        )

    def value(self, observation: PyTree[Array]) -> Float[Array, ""]:
        return self.model.value(normalize_observation(self.statistics, observation))

    def initial_carry(self) -> PyTree[Array] | None:
        """That of the wrapped model."""
        return self.model.initial_carry()

    def step(
        self,
        carry: PyTree[Array] | None,
        observation: PyTree[Array],
        action_mask: Bool[Array, " num_actions"] | None = None,
    ) -> tuple[PyTree[Array] | None, AbstractActionDistribution, Float[Array, ""]]:
        return self.model.step(
            carry, normalize_observation(self.statistics, observation), action_mask
        )

    def step_value(
        self, carry: PyTree[Array] | None, observation: PyTree[Array]
    ) -> Float[Array, ""]:
        return self.model.step_value(
            carry, normalize_observation(self.statistics, observation)
        )

    def unroll(
        self,
        carry: PyTree[Array],
        observations: PyTree[Array],
        episode_start: Bool[Array, " num_steps"],
        action_masks: Bool[Array, "num_steps num_actions"] | None = None,
    ) -> tuple[PyTree[Array], AbstractActionDistribution, Float[Array, " num_steps"]]:
        """That of the wrapped (recurrent) model, on normalized observations."""
        normalized = jax.vmap(lambda o: normalize_observation(self.statistics, o))(
            observations
        )
        return self.model.unroll(carry, normalized, episode_start, action_masks)

    @property
    def is_recurrent(self) -> bool:
        """That of the wrapped model."""
        return self.model.is_recurrent

    @property
    def separate_critic(self) -> bool:
        """That of the wrapped model."""
        return self.model.separate_critic
