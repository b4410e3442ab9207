import abc
import math
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, PRNGKeyArray, PyTree

from ..distributions import (
    AbstractActionDistribution,
    DiagonalGaussian,
    MaskedCategorical,
)
from ._init import orthogonal_matrices
from ._linear import apply_linear


class AbstractActorCritic(eqx.Module):
    """A policy and a value function for one observation.

    `__call__(observation, action_mask=None) -> (distribution, value)`; algorithms
    batch it with `eqx.filter_vmap`.
    """

    @abc.abstractmethod
    def __call__(
        self,
        observation: PyTree[Array],
        action_mask: Bool[Array, " num_actions"] | None = None,
    ) -> tuple[AbstractActionDistribution, Float[Array, ""]]:
        """The action distribution and the state value for one observation."""

    @abc.abstractmethod
    def value(self, observation: PyTree[Array]) -> Float[Array, ""]:
        """The state value alone (cheaper than `__call__`)."""

    @property
    def separate_critic(self) -> bool:
        """Whether the value shares no computation with the policy.

        `True` lets PPO leave the critic out of the step-by-step rollout and evaluate
        it once on all of the rollout's observations afterwards: one large batch,
        which runs much faster than many small ones. Leave it `False` (the default)
        for networks with a shared trunk, whose trunk would otherwise run twice.
        """
        return False


def _forward(
    layers: list[eqx.nn.Linear], activation: Callable[[Array], Array], x: Array
) -> Array:
    for layer in layers[:-1]:
        x = activation(apply_linear(layer, x))
    return apply_linear(layers[-1], x)


def _mlp_weights(
    key: PRNGKeyArray,
    observation_size: int,
    hidden_sizes: Sequence[int],
    actor_outputs: int,
    actor_gain: float,
) -> tuple[list[eqx.nn.Linear], list[eqx.nn.Linear]]:
    """Actor and critic MLP layers, orthogonally initialized from one batched QR."""
    if observation_size < 1 or actor_outputs < 1:
        raise ValueError(
            f"Actor-critic: observation_size ({observation_size}) and the number of "
            f"actions ({actor_outputs}) must be positive (num_actions / action_size)."
        )
    if any(width < 1 for width in hidden_sizes):
        raise ValueError(
            f"Actor-critic: hidden_sizes {tuple(hidden_sizes)} must be positive."
        )
    actor_sizes = [observation_size, *hidden_sizes, actor_outputs]
    critic_sizes = [observation_size, *hidden_sizes, 1]
    hidden_gains = [math.sqrt(2.0)] * len(hidden_sizes)
    shapes = [(actor_sizes[i + 1], actor_sizes[i]) for i in range(len(actor_sizes) - 1)]
    shapes += [
        (critic_sizes[i + 1], critic_sizes[i]) for i in range(len(critic_sizes) - 1)
    ]
    gains = [*hidden_gains, actor_gain, *hidden_gains, 1.0]
    weights = orthogonal_matrices(key, shapes, gains)
    num_layers = len(actor_sizes) - 1
    return (
        _linear_layers(actor_sizes, weights[:num_layers]),
        _linear_layers(critic_sizes, weights[num_layers:]),
    )


def _linear_layers(sizes: Sequence[int], weights: list[Array]) -> list[eqx.nn.Linear]:
    """Linear layers with the given weights and zero biases."""
    layers = []
    for index, weight in enumerate(weights):
        layer = eqx.nn.Linear(sizes[index], sizes[index + 1], key=jax.random.key(0))
        layer = eqx.tree_at(
            lambda lin: (lin.weight, lin.bias),
            layer,
            (weight, jnp.zeros(sizes[index + 1], jnp.float32)),
        )
        layers.append(layer)
    return layers


class MLPActorCritic(AbstractActorCritic):
    """Separate actor and critic multi-layer perceptrons on a flattened observation.

    Orthogonal initialization as in PureJaxRL / CleanRL: hidden layers with gain
    `sqrt(2)`, the policy head with `0.01`, the value head with `1.0`, zero biases.

    **Arguments:**

    - `observation_size`: number of entries of one (flattened) observation.
    - `num_actions`: number of discrete actions.
    - `hidden_sizes`: widths of the hidden layers, for both actor and critic.
    - `activation`: activation between layers (default `tanh`).
    - `key`: a PRNG key for the initial weights.

    !!! example

        ```python
        network = eqxrl.nn.MLPActorCritic(4, 2, key=jax.random.key(0))
        distribution, value = network(jnp.zeros(4))
        ```
    """

    actor: list[eqx.nn.Linear]
    critic: list[eqx.nn.Linear]
    activation: Callable[[Array], Array] = eqx.field(static=True)

    def __init__(
        self,
        observation_size: int,
        num_actions: int,
        *,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: Callable[[Array], Array] = jax.nn.tanh,
        key: PRNGKeyArray,
    ):
        self.actor, self.critic = _mlp_weights(
            key, observation_size, hidden_sizes, num_actions, 0.01
        )
        self.activation = activation

    def __call__(
        self, observation: Array, action_mask: Bool[Array, " num_actions"] | None = None
    ) -> tuple[MaskedCategorical, Float[Array, ""]]:
        features = jnp.ravel(observation).astype(jnp.float32)
        logits = _forward(self.actor, self.activation, features)
        value = _forward(self.critic, self.activation, features)[0]
        return MaskedCategorical(logits, action_mask), value

    def value(self, observation: Array) -> Float[Array, ""]:
        features = jnp.ravel(observation).astype(jnp.float32)
        return _forward(self.critic, self.activation, features)[0]

    @property
    def separate_critic(self) -> bool:
        """`True`: the actor and the critic are separate networks."""
        return True


class MLPGaussianActorCritic(AbstractActorCritic):
    """Separate actor and critic MLPs with a diagonal Gaussian policy head.

    The actor outputs the action mean (and, with `state_dependent_std`, the log
    standard deviation); otherwise the log-std is a learned vector independent of the
    state. Orthogonal initialization as [`MLPActorCritic`][eqxrl.nn.MLPActorCritic].

    **Arguments:**

    - `observation_size`: entries of one (flattened) observation.
    - `action_size`: entries of one action.
    - `hidden_sizes`: widths of the hidden layers.
    - `activation`: activation between layers (default `tanh`).
    - `state_dependent_std`: the actor also outputs the log-std.
    - `squash`: squash actions into `(-1, 1)` with `tanh` (see
      [`DiagonalGaussian`][eqxrl.distributions.DiagonalGaussian]).
    - `initial_log_std`: the initial log standard deviation.
    - `key`: a PRNG key for the initial weights.
    """

    actor: list[eqx.nn.Linear]
    critic: list[eqx.nn.Linear]
    log_std: Float[Array, " action_size"] | None
    activation: Callable[[Array], Array] = eqx.field(static=True)
    action_size: int = eqx.field(static=True)
    squash: bool = eqx.field(static=True)

    def __init__(
        self,
        observation_size: int,
        action_size: int,
        *,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: Callable[[Array], Array] = jax.nn.tanh,
        state_dependent_std: bool = False,
        squash: bool = False,
        initial_log_std: float = 0.0,
        key: PRNGKeyArray,
    ):
        outputs = 2 * action_size if state_dependent_std else action_size
        self.actor, self.critic = _mlp_weights(
            key, observation_size, hidden_sizes, outputs, 0.01
        )
        if state_dependent_std:
            self.log_std = None
            last = self.actor[-1]
            bias = last.bias.at[action_size:].set(initial_log_std)
            self.actor[-1] = eqx.tree_at(lambda layer: layer.bias, last, bias)
        else:
            self.log_std = jnp.full(action_size, initial_log_std, jnp.float32)
        self.activation = activation
        self.action_size = action_size
        self.squash = squash

    def __call__(
        self, observation: Array, action_mask: Bool[Array, " num_actions"] | None = None
    ) -> tuple[DiagonalGaussian, Float[Array, ""]]:
        del action_mask  # continuous actions have no mask
        features = jnp.ravel(observation).astype(jnp.float32)
        outputs = _forward(self.actor, self.activation, features)
        mean = outputs[: self.action_size]
        if self.log_std is None:
            log_std = jnp.clip(outputs[self.action_size :], -20.0, 2.0)
        else:
            log_std = self.log_std
        value = _forward(self.critic, self.activation, features)[0]
        return DiagonalGaussian(mean, log_std, self.squash), value

    def value(self, observation: Array) -> Float[Array, ""]:
        features = jnp.ravel(observation).astype(jnp.float32)
        return _forward(self.critic, self.activation, features)[0]

    @property
    def separate_critic(self) -> bool:
        """`True`: the actor and the critic are separate networks."""
        return True
