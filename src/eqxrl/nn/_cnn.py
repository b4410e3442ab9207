import math
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Bool, Float, Key, PRNGKeyArray

from ..distributions import MaskedCategorical
from ._actor_critic import AbstractActorCritic
from ._init import orthogonal_matrices


def _he_uniform(
    key: PRNGKeyArray, shape: tuple[int, ...], fan_in: int
) -> Float[Array, "..."]:
    """Uniform weights with variance `2 / fan_in` (He initialization for ReLU).

    No LAPACK call, so it is safe to vmap on any CPU (see
    [`orthogonal_matrices`][eqxrl.nn.orthogonal_matrices]).
    """
    bound = math.sqrt(6.0 / fan_in)
    return jr.uniform(key, shape, jnp.float32, -bound, bound)


def _policy_and_value_heads(
    key: PRNGKeyArray, in_features: int, num_actions: int
) -> tuple[eqx.nn.Linear, eqx.nn.Linear]:
    """Linear actor and critic heads, orthogonal with gains 0.01 and 1."""
    actor_weight, critic_weight = orthogonal_matrices(
        key, [(num_actions, in_features), (1, in_features)], [0.01, 1.0]
    )
    heads = []
    for weight in (actor_weight, critic_weight):
        layer = eqx.nn.Linear(in_features, weight.shape[0], key=jr.key(0))
        layer = eqx.tree_at(
            lambda lin: (lin.weight, lin.bias),
            layer,
            (weight, jnp.zeros(weight.shape[0], jnp.float32)),
        )
        heads.append(layer)
    return heads[0], heads[1]


def _patches(
    x: Float[Array, "height width channels"],
) -> Float[Array, "height width 9*channels"]:
    """The 3x3 neighbourhood of every cell (zero outside), channels last: a 3x3
    "same" convolution is then one matrix product."""
    height, width, _ = x.shape
    padded = jnp.pad(x, ((1, 1), (1, 1), (0, 0)))
    shifted = [
        padded[row : row + height, column : column + width]
        for row in range(3)
        for column in range(3)
    ]
    return jnp.concatenate(shifted, axis=-1)


def valid_patches(
    x: Float[Array, "height width channels"],
) -> Float[Array, "height-2 width-2 9*channels"]:
    """The 3x3 neighbourhood of every interior cell, channels last: a 3x3 "valid"
    convolution (no padding) is then one matrix product."""
    height, width, _ = x.shape
    shifted = [
        x[row : row + height - 2, column : column + width - 2]
        for row in range(3)
        for column in range(3)
    ]
    return jnp.concatenate(shifted, axis=-1)


def conv_torso(
    keys: Key[Array, " layers"],
    observation_shape: Sequence[int],
    channels: Sequence[int],
    hidden_size: int,
) -> tuple[list[eqx.nn.Linear], eqx.nn.Linear]:
    """The convolutions (as linear maps of 3x3 patches) and the dense layer of a
    grid torso, He-uniform initialized from `len(channels) + 1` keys (one per
    layer): see [`CNNActorCritic`][eqxrl.nn.CNNActorCritic]."""
    height, width, in_channels = observation_shape
    in_channels += 1  # a constant channel: zero padding then marks the edges
    convolutions = []
    for index, out_channels in enumerate(channels):
        patch_size = 9 * in_channels
        convolution = eqx.tree_at(
            lambda lin: (lin.weight, lin.bias),
            eqx.nn.Linear(patch_size, out_channels, key=jr.key(0)),
            (
                _he_uniform(keys[index], (out_channels, patch_size), patch_size),
                jnp.zeros(out_channels, jnp.float32),
            ),
        )
        convolutions.append(convolution)
        in_channels = out_channels
    flat_size = height * width * in_channels
    dense = eqx.tree_at(
        lambda lin: (lin.weight, lin.bias),
        eqx.nn.Linear(flat_size, hidden_size, key=jr.key(0)),
        (
            _he_uniform(keys[-1], (hidden_size, flat_size), flat_size),
            jnp.zeros(hidden_size, jnp.float32),
        ),
    )
    return convolutions, dense


def conv_torso_features(
    convolutions: list[eqx.nn.Linear],
    dense: eqx.nn.Linear,
    observation: Float[Array, "height width channels"],
) -> Float[Array, " hidden"]:
    """The torso's ReLU features of one `[height, width, channels]` observation."""
    x = observation.astype(jnp.float32)
    x = jnp.concatenate([x, jnp.ones_like(x[..., :1])], axis=-1)
    for convolution in convolutions:
        bias = convolution.bias[None, None, :]
        x = jax.nn.relu(_patches(x) @ convolution.weight.T + bias)
    return jax.nn.relu(dense(jnp.ravel(x)))


class CNNActorCritic(AbstractActorCritic):
    """A small convolutional actor-critic for grid observations `[height, width, C]`.

    A shared torso in the style of MinAtar's networks: `3x3` convolutions (same padding,
    ReLU) over the observation plus one constant channel (so that the zero padding
    marks the board's edges), flattened into one ReLU dense layer; then a linear policy
    head (masked logits through
    [`MaskedCategorical`][eqxrl.distributions.MaskedCategorical]) and a linear value
    head. Convolutions and the dense layer use He-uniform initialization (no LAPACK
    call); the heads are orthogonal with gains 0.01 (policy) and 1 (value), as in PPO
    implementations. With the defaults a forward pass on a 10x10 board costs about
    0.16 M multiply-adds (one convolution to 16 channels, a 64-wide dense layer).

    Each convolution is stored as an `eqx.nn.Linear` acting on the 3x3 patches of the
    board (im2col): a matrix product, which XLA runs several times faster on a CPU
    than its convolutions, above all for the kernel gradient.

    **Arguments:**

    - `observation_shape`: `(height, width, channels)` of one observation.
    - `num_actions`: number of discrete actions.
    - `channels`: output channels of each convolution.
    - `hidden_size`: width of the dense layer after the convolutions.
    - `key`: a PRNG key for the initial weights.

    !!! example

        ```python
        env = eqxrl.envs.Snake()
        network = eqxrl.nn.CNNActorCritic(
            env.observation_space.shape, 4, key=jax.random.key(0)
        )
        ppo = eqxrl.PPO(env=env, network_factory=eqxrl.nn.CNNActorCritic.from_env)
        ```
    """

    convolutions: list[eqx.nn.Linear]
    dense: eqx.nn.Linear
    actor: eqx.nn.Linear
    critic: eqx.nn.Linear

    @classmethod
    def from_env(cls, env: Any, key: PRNGKeyArray) -> "CNNActorCritic":
        """The network with default sizes for an environment's grid observations
        and discrete actions: a `network_factory` for PPO that checkpoints, configs
        and `eqxrl eval` can name (a lambda cannot be rebuilt from a file).

        **Arguments:**

        - `env`: an environment with `[height, width, channels]` observations and a
          `Discrete` action space.
        - `key`: a PRNG key for the initial weights.
        """
        return cls(env.observation_space.shape, env.action_space.num_values, key=key)

    def __init__(
        self,
        observation_shape: Sequence[int],
        num_actions: int,
        *,
        channels: Sequence[int] = (16,),
        hidden_size: int = 64,
        key: PRNGKeyArray,
    ):
        if len(observation_shape) != 3 or min(observation_shape) < 1:
            raise ValueError(
                "CNNActorCritic: observation_shape must be (height, width, channels) "
                f"with positive entries, got {tuple(observation_shape)}."
            )
        if num_actions < 1 or hidden_size < 1 or any(c < 1 for c in channels):
            raise ValueError(
                f"CNNActorCritic: num_actions ({num_actions}), hidden_size "
                f"({hidden_size}) and channels {tuple(channels)} must be positive."
            )
        keys = jr.split(key, len(channels) + 2)
        self.convolutions, self.dense = conv_torso(
            keys[:-1], observation_shape, channels, hidden_size
        )
        self.actor, self.critic = _policy_and_value_heads(
            keys[-1], hidden_size, num_actions
        )

    def _features(
        self, observation: Float[Array, "height width channels"]
    ) -> Float[Array, " hidden"]:
        return conv_torso_features(self.convolutions, self.dense, observation)

    def __call__(
        self,
        observation: Float[Array, "height width channels"],
        action_mask: Bool[Array, " num_actions"] | None = None,
    ) -> tuple[MaskedCategorical, Float[Array, ""]]:
        features = self._features(observation)
        logits = self.actor(features)
        return MaskedCategorical(logits, action_mask), self.critic(features)[0]

    def value(
        self, observation: Float[Array, "height width channels"]
    ) -> Float[Array, ""]:
        return self.critic(self._features(observation))[0]
