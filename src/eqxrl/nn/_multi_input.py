import math
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Bool, Float, PRNGKeyArray, PyTree

from ..distributions import DiagonalGaussian, MaskedCategorical
from ..envs import AbstractSpace, Box, Dict, Discrete, is_leaf_space
from ._actor_critic import (
    AbstractActorCritic,
    Initialization,
    StdParameterization,
    _forward,
    _mlp_weights,
    action_head,
    gaussian_scale_parameter,
    parameters_mask,
)
from ._cnn import conv_torso, conv_torso_features


class _Flatten(eqx.Module):
    num_features: int = eqx.field(static=True)

    def __call__(self, leaf: Array) -> Float[Array, " features"]:
        return jnp.ravel(leaf).astype(jnp.float32)


class _OneHot(eqx.Module):
    num_features: int = eqx.field(static=True)

    def __call__(self, leaf: Array) -> Float[Array, " features"]:
        return jax.nn.one_hot(leaf, self.num_features, dtype=jnp.float32)


class _Image(eqx.Module):
    convolutions: list[eqx.nn.Linear]
    dense: eqx.nn.Linear
    num_features: int = eqx.field(static=True)

    def __call__(self, leaf: Array) -> Float[Array, " features"]:
        return conv_torso_features(self.convolutions, self.dense, leaf)


def _leaf_encoder(space: AbstractSpace, key: PRNGKeyArray, image_features: int):
    if isinstance(space, Discrete):
        return _OneHot(space.num_values)
    if isinstance(space, Box) and len(space.shape) == 3 and min(space.shape[:2]) >= 2:
        convolutions, dense = conv_torso(
            jr.split(key, 2), space.shape, (16,), image_features
        )
        return _Image(convolutions, dense, image_features)
    if isinstance(space, Box):
        return _Flatten(max(math.prod(space.shape), 1))
    raise TypeError(
        f"ObservationEncoder: no encoding for a {type(space).__name__} leaf; "
        "observation leaves must be Box or Discrete spaces."
    )


class ObservationEncoder(eqx.Module):
    """One feature vector from an observation of any space, leaf by leaf.

    What Stable-Baselines3's `MultiInputPolicy` does: a `Discrete` leaf is one-hot
    encoded (a state index fed as one float teaches a network nothing), an
    image-like leaf (a `Box` of shape `[height, width, channels]`, channels last)
    goes through a small CNN (3x3 convolution, ReLU, dense layer), any other `Box`
    leaf is flattened; the features are concatenated in the order of the
    observation's leaves (sorted keys for a `Dict`).

    **Arguments:**

    - `space`: the observation space (`Box`, `Discrete`, `Dict` or `Tuple`).
    - `keys`: with a `Dict` space, read only these keys (e.g. the actor's); `None`
      reads every key.
    - `image_features`: the width of each image leaf's dense layer.
    - `key`: a PRNG key for the CNN weights (unused without image leaves).

    !!! example

        ```python
        space = eqxrl.envs.Dict(
            position=eqxrl.envs.Discrete(16), velocity=eqxrl.envs.Box(-1.0, 1.0, (2,))
        )
        encoder = eqxrl.nn.ObservationEncoder(space, key=jax.random.key(0))
        encoder.num_features  # 16 + 2
        ```
    """

    leaves: list[_Flatten | _OneHot | _Image]
    keys: tuple[str, ...] | None = eqx.field(static=True)
    num_features: int = eqx.field(static=True)

    def __init__(
        self,
        space: AbstractSpace,
        *,
        keys: Sequence[str] | None = None,
        image_features: int = 64,
        key: PRNGKeyArray,
    ):
        if keys is not None:
            if not isinstance(space, Dict):
                raise TypeError(
                    f"ObservationEncoder: keys={tuple(keys)} selects parts of a Dict "
                    f"observation, but the observation space is "
                    f"{type(space).__name__}."
                )
            space = space.subset(tuple(keys))
            keys = tuple(keys)
        leaf_spaces = jax.tree.leaves(space, is_leaf=is_leaf_space)
        leaf_keys = jr.split(key, len(leaf_spaces))
        self.leaves = [
            _leaf_encoder(leaf, leaf_key, image_features)
            for leaf, leaf_key in zip(leaf_spaces, leaf_keys)
        ]
        self.keys = keys
        self.num_features = sum(encoder.num_features for encoder in self.leaves)

    def __call__(self, observation: PyTree[Array]) -> Float[Array, " features"]:
        if self.keys is not None:
            observation = {name: observation[name] for name in self.keys}
        leaves = jax.tree.leaves(observation)
        if len(leaves) != len(self.leaves):
            raise ValueError(
                f"ObservationEncoder: the observation has {len(leaves)} leaves but "
                f"the encoder was built for {len(self.leaves)}."
            )
        features = [encode(leaf) for encode, leaf in zip(self.leaves, leaves)]
        return jnp.concatenate(features)


class MultiInputActorCritic(AbstractActorCritic):
    """An actor-critic for structured observations, optionally asymmetric.

    The actor and the critic each encode the observation with an
    [`ObservationEncoder`][eqxrl.nn.ObservationEncoder] (one-hot `Discrete` leaves,
    a CNN for image leaves, flattened `Box` leaves) followed by an MLP, initialized
    as [`MLPActorCritic`][eqxrl.nn.MLPActorCritic]. With a `Dict` observation,
    `actor_keys` and `critic_keys` choose what each reads: the asymmetric
    actor-critic of MuJoCo Playground's locomotion tasks reads `("state",)` in the
    actor and `("privileged_state",)` in the critic, so the trained policy needs
    only what a robot can sense. PPO builds it by default for `Dict`, `Tuple` and
    `Discrete` observation spaces (and for any space when
    `actor_keys`/`critic_keys` are given).

    The policy head follows the action space: masked categorical logits for
    `Discrete`, a diagonal Gaussian for `Box` (by default with a state-independent
    log-std; the Gaussian options are those of
    [`MLPGaussianActorCritic`][eqxrl.nn.MLPGaussianActorCritic]).

    **Arguments:**

    - `observation_space`: the environment's observation space.
    - `action_space`: the environment's action space (`Discrete` or `Box`).
    - `actor_keys`, `critic_keys`: the `Dict` keys each reads (`None`: all).
    - `hidden_sizes`: widths of the MLP hidden layers (of the actor, and of the
      critic unless `critic_hidden_sizes` is given).
    - `critic_hidden_sizes`: widths of the critic's MLP hidden layers; `None`: as
      the actor's.
    - `activation`: activation between MLP layers (default `tanh`).
    - `state_dependent_std`, `squash`, `std_parameterization`, `initial_log_std`:
      the Gaussian head of a `Box` action space, as in
      [`MLPGaussianActorCritic`][eqxrl.nn.MLPGaussianActorCritic]; only for `Box`.
    - `initialization`: the MLPs' weights, `"orthogonal"` (default) or
      `"lecun_uniform"` (Brax's), as [`MLPActorCritic`][eqxrl.nn.MLPActorCritic]'s.
    - `key`: a PRNG key for the initial weights.
    """

    actor_encoder: ObservationEncoder
    critic_encoder: ObservationEncoder
    actor: list[eqx.nn.Linear]
    critic: list[eqx.nn.Linear]
    log_std: Float[Array, " action_size"] | None
    activation: Callable[[Array], Array] = eqx.field(static=True)
    action_size: int | None = eqx.field(static=True)
    squash: bool = eqx.field(static=True)
    std_parameterization: StdParameterization = eqx.field(static=True)

    @classmethod
    def from_env(cls, env: Any, key: PRNGKeyArray) -> "MultiInputActorCritic":
        """The network with default sizes for an environment's spaces (a
        `network_factory` that checkpoints and configs can name).

        **Arguments:**

        - `env`: the environment.
        - `key`: a PRNG key for the initial weights.
        """
        return cls(env.observation_space, env.action_space, key=key)

    def __init__(
        self,
        observation_space: AbstractSpace,
        action_space: AbstractSpace,
        *,
        actor_keys: Sequence[str] | None = None,
        critic_keys: Sequence[str] | None = None,
        hidden_sizes: Sequence[int] = (64, 64),
        critic_hidden_sizes: Sequence[int] | None = None,
        activation: Callable[[Array], Array] = jax.nn.tanh,
        state_dependent_std: bool = False,
        squash: bool = False,
        std_parameterization: StdParameterization = "log",
        initial_log_std: float | None = None,
        initialization: Initialization = "orthogonal",
        key: PRNGKeyArray,
    ):
        gaussian_options = (
            state_dependent_std
            or squash
            or std_parameterization != "log"
            or initial_log_std is not None
        )
        if isinstance(action_space, Discrete):
            if gaussian_options:
                raise ValueError(
                    "MultiInputActorCritic: state_dependent_std, squash, "
                    "std_parameterization and initial_log_std shape a Gaussian "
                    "policy; the action space is Discrete."
                )
            actor_outputs = action_space.num_values
        elif isinstance(action_space, Box):
            action_size = max(math.prod(action_space.shape), 1)
            actor_outputs = 2 * action_size if state_dependent_std else action_size
        else:
            raise TypeError(
                "MultiInputActorCritic: the action space must be Discrete or Box, "
                f"got {type(action_space).__name__}."
            )
        actor_key, critic_key, mlp_key = jr.split(key, 3)
        self.actor_encoder = ObservationEncoder(
            observation_space, keys=actor_keys, key=actor_key
        )
        self.critic_encoder = ObservationEncoder(
            observation_space, keys=critic_keys, key=critic_key
        )
        if self.actor_encoder.num_features != self.critic_encoder.num_features:
            # Actor and critic MLPs come from one orthogonal initialization of
            # equal input widths; build them apart when the widths differ.
            actor_mlp_key, critic_mlp_key = jr.split(mlp_key)
            self.actor, _ = _mlp_weights(
                actor_mlp_key,
                self.actor_encoder.num_features,
                hidden_sizes,
                actor_outputs,
                0.01,
                critic_hidden_sizes,
                initialization,
            )
            _, self.critic = _mlp_weights(
                critic_mlp_key,
                self.critic_encoder.num_features,
                hidden_sizes,
                actor_outputs,
                0.01,
                critic_hidden_sizes,
                initialization,
            )
        else:
            self.actor, self.critic = _mlp_weights(
                mlp_key,
                self.actor_encoder.num_features,
                hidden_sizes,
                actor_outputs,
                0.01,
                critic_hidden_sizes,
                initialization,
            )
        self.log_std = None
        self.action_size = None
        if isinstance(action_space, Box):
            self.actor, self.log_std = gaussian_scale_parameter(
                "MultiInputActorCritic",
                self.actor,
                action_size,
                state_dependent_std,
                std_parameterization,
                initial_log_std,
            )
            self.action_size = action_size
        self.activation = activation
        self.squash = squash
        self.std_parameterization = std_parameterization

    def __call__(
        self,
        observation: PyTree[Array],
        action_mask: Bool[Array, " num_actions"] | None = None,
    ) -> tuple[MaskedCategorical | DiagonalGaussian, Float[Array, ""]]:
        outputs = _forward(self.actor, self.activation, self.actor_encoder(observation))
        distribution = action_head(
            outputs,
            action_mask,
            self.log_std,
            self.action_size,
            self.std_parameterization,
            self.squash,
        )
        return distribution, self.value(observation)

    def value(self, observation: PyTree[Array]) -> Float[Array, ""]:
        features = self.critic_encoder(observation)
        return _forward(self.critic, self.activation, features)[0]

    @property
    def separate_critic(self) -> bool:
        """`True`: the actor and the critic share no layers."""
        return True

    def critic_mask(self) -> PyTree[bool]:
        """`True` on the critic's encoder and MLP."""
        return parameters_mask(
            self, lambda network: (network.critic_encoder, network.critic)
        )
