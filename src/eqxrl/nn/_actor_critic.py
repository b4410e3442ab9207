import abc
import math
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, PRNGKeyArray

from ..distributions import MaskedCategorical
from ._init import orthogonal_matrices


class AbstractActorCritic(eqx.Module):
    """A policy and a value function for one observation.

    `__call__(observation, action_mask=None) -> (distribution, value)`; algorithms
    batch it with `eqx.filter_vmap`.
    """

    @abc.abstractmethod
    def __call__(
        self, observation: Array, action_mask: Bool[Array, " num_actions"] | None = None
    ) -> tuple[MaskedCategorical, Float[Array, ""]]:
        """The action distribution and the state value for one observation."""

    @abc.abstractmethod
    def value(self, observation: Array) -> Float[Array, ""]:
        """The state value alone (cheaper than `__call__`)."""


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
        if observation_size < 1 or num_actions < 1:
            raise ValueError(
                f"MLPActorCritic: observation_size ({observation_size}) and "
                f"num_actions ({num_actions}) must be positive."
            )
        if any(width < 1 for width in hidden_sizes):
            raise ValueError(
                f"MLPActorCritic: hidden_sizes {tuple(hidden_sizes)} must be positive."
            )
        actor_sizes = [observation_size, *hidden_sizes, num_actions]
        critic_sizes = [observation_size, *hidden_sizes, 1]
        hidden_gains = [math.sqrt(2.0)] * len(hidden_sizes)
        shapes = [
            (actor_sizes[i + 1], actor_sizes[i]) for i in range(len(actor_sizes) - 1)
        ] + [
            (critic_sizes[i + 1], critic_sizes[i])
            for i in range(len(critic_sizes) - 1)
        ]
        gains = [*hidden_gains, 0.01, *hidden_gains, 1.0]
        weights = orthogonal_matrices(key, shapes, gains)
        num_layers = len(actor_sizes) - 1
        self.actor = _linear_layers(actor_sizes, weights[:num_layers])
        self.critic = _linear_layers(critic_sizes, weights[num_layers:])
        self.activation = activation

    def _forward(self, layers: list[eqx.nn.Linear], x: Array) -> Array:
        for layer in layers[:-1]:
            x = self.activation(layer(x))
        return layers[-1](x)

    def __call__(
        self, observation: Array, action_mask: Bool[Array, " num_actions"] | None = None
    ) -> tuple[MaskedCategorical, Float[Array, ""]]:
        features = jnp.ravel(observation).astype(jnp.float32)
        logits = self._forward(self.actor, features)
        value = self._forward(self.critic, features)[0]
        return MaskedCategorical(logits, action_mask), value

    def value(self, observation: Array) -> Float[Array, ""]:
        features = jnp.ravel(observation).astype(jnp.float32)
        return self._forward(self.critic, features)[0]
