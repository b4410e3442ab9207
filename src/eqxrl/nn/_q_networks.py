import abc
import math
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray, PyTree

from .._random import uniform as random_uniform
from ..envs import AbstractSpace, Box
from ._cnn import valid_patches
from ._multi_input import ObservationEncoder
from ._noisy import NoisyLinear
from ._policy import AbstractPolicy


class AbstractQNetwork(eqx.Module):
    """Action values for one observation, for value-based algorithms (DQN, IQN).

    `q_values(observation, key)` returns one value per action; the key serves
    networks whose estimate is itself sampled (an implicit quantile network averages
    sampled quantiles) and is ignored by the others.
    """

    @abc.abstractmethod
    def q_values(
        self, observation: PyTree[Array], key: PRNGKeyArray
    ) -> Float[Array, " num_actions"]:
        """The estimated value of each action at `observation`."""

    @property
    def is_recurrent(self) -> bool:
        """Whether the network carries a state from step to step (`False`; see
        [`AbstractRecurrentQNetwork`][eqxrl.nn.AbstractRecurrentQNetwork])."""
        return False


class AbstractQuantileNetwork(AbstractQNetwork):
    """Quantiles of the return distribution of each action, at any fractions.

    `quantile_values(observation, fractions)` returns, for each fraction `tau` in
    `(0, 1)`, the estimated `tau`-quantile of the return of each action.
    """

    @abc.abstractmethod
    def quantile_values(
        self, observation: PyTree[Array], fractions: Float[Array, " num_fractions"]
    ) -> Float[Array, "num_fractions num_actions"]:
        """The quantiles of the return of each action at the given fractions."""


def _linear(in_size: int, out_size: int, key: PRNGKeyArray) -> eqx.nn.Linear:
    # Equinox's default: uniform in +-1/sqrt(in_size) (as PyTorch), no LAPACK call.
    return eqx.nn.Linear(in_size, out_size, key=key)


def _mlp(sizes: Sequence[int], key: PRNGKeyArray) -> list[eqx.nn.Linear]:
    keys = jr.split(key, max(len(sizes) - 1, 1))
    return [_linear(sizes[i], sizes[i + 1], keys[i]) for i in range(len(sizes) - 1)]


def _check_encoder(
    name: str, observation_size: int, encoder: ObservationEncoder | None
) -> None:
    if encoder is not None and encoder.num_features != observation_size:
        raise ValueError(
            f"{name}: observation_size={observation_size} but the encoder gives "
            f"{encoder.num_features} features; pass encoder.num_features."
        )


def _features(
    encoder: ObservationEncoder | None, observation: PyTree[Array]
) -> Float[Array, " features"]:
    if encoder is None:
        return jnp.ravel(observation).astype(jnp.float32)
    return encoder(observation)


def _check_sizes(name: str, **sizes: int | Sequence[int]) -> None:
    for field, value in sizes.items():
        values = value if isinstance(value, Sequence) else (value,)
        if any(not isinstance(v, int) or v < 1 for v in values):
            raise ValueError(f"{name}: {field}={value!r} must be positive integers.")


class _DuelingOrPlainHead(eqx.Module):
    """Action values from features: one linear layer, or (dueling) a state value and
    centred advantages from one linear layer with an extra output. The layer may be
    noisy (a value layer and an advantage layer with independent noise are one
    noisy layer with an extra output)."""

    linear: eqx.nn.Linear | NoisyLinear
    dueling: bool = eqx.field(static=True)

    def __init__(
        self,
        in_size: int,
        num_actions: int,
        dueling: bool,
        key,
        noisy: bool = False,
        sigma_init: Float[ArrayLike, ""] = 0.017,
    ):
        out_size = num_actions + int(dueling)
        if noisy:
            self.linear = NoisyLinear(in_size, out_size, sigma_init=sigma_init, key=key)
        else:
            self.linear = _linear(in_size, out_size, key)
        self.dueling = dueling

    def __call__(
        self, features: Float[Array, "*rows features"]
    ) -> Float[Array, "*rows actions"]:
        """Action values of one feature vector, or of each row of a matrix."""
        outputs = _apply_linear(self.linear, features)
        if not self.dueling:
            return outputs
        value, advantage = outputs[..., :1], outputs[..., 1:]
        return value + advantage - jnp.mean(advantage, axis=-1, keepdims=True)


def _apply_linear(
    layer: eqx.nn.Linear | NoisyLinear, x: Float[Array, "*rows in_features"]
) -> Float[Array, "*rows out_features"]:
    """`layer(x)` (or `jax.vmap(layer)(x)` for rows) written as `x @ weight.T +
    bias`: the same function, but XLA then computes the product, also under `vmap`,
    in the `[rows, features]` layout its consumers use. `weight @ x` under `vmap`
    gives `[features, rows]` and a transpose after every layer: on rejax's CartPole
    settings those transposes took ~13% of IQN's step time."""
    y = x @ layer.weight.T
    if layer.bias is None:
        return y
    return y + jnp.broadcast_to(layer.bias, y.shape)


def default_encoder(
    space: AbstractSpace, key: PRNGKeyArray
) -> tuple[ObservationEncoder | None, int]:
    """The default Q-networks' observation features: `Box` observations flattened
    (no encoder), any other space through an
    [`ObservationEncoder`][eqxrl.nn.ObservationEncoder] (one-hot `Discrete`
    leaves, a CNN for image leaves); and the number of features."""
    if isinstance(space, Box):
        return None, math.prod(space.shape)
    # A key of its own, so that Box observations keep their initial weights.
    encoder = ObservationEncoder(space, key=jr.fold_in(key, 1))
    return encoder, encoder.num_features


def _flat_or_encoded(network_class: type, env: Any, key: PRNGKeyArray, options):
    """`network_class` on an environment's observations, flattened or encoded
    (`default_encoder`), with one output per `Discrete` action."""
    encoder, observation_size = default_encoder(env.observation_space, key)
    num_actions = env.action_space.num_values
    return network_class(
        observation_size, num_actions, encoder=encoder, key=key, **options
    )


class MLPQNetwork(AbstractQNetwork):
    """A multi-layer perceptron from a flattened observation to one value per action.

    With `dueling`, the last layer is split into a state value and centred
    advantages, `Q = V + A - mean(A)` (Wang et al., 2016). Weights use Equinox's
    default initialization (uniform, as PyTorch's).

    **Arguments:**

    - `observation_size`: number of entries of one (flattened) observation.
    - `num_actions`: number of discrete actions.
    - `hidden_sizes`: widths of the hidden layers.
    - `activation`: activation after each hidden layer (default ReLU).
    - `dueling`: use a dueling head.
    - `encoder`: an [`ObservationEncoder`][eqxrl.nn.ObservationEncoder] for
      structured or `Discrete` observations (its `num_features` is then
      `observation_size`); `None` flattens the observation.
    - `layer_norm`: normalize each hidden layer's output (`eqx.nn.LayerNorm`, with
      a learned scale and shift) before its activation, as PQN's Q-networks do.
    - `key`: a PRNG key for the initial weights.

    !!! example

        ```python
        network = eqxrl.nn.MLPQNetwork(4, 2, key=jax.random.key(0))
        q = network(jnp.zeros(4))  # shape [2]
        ```
    """

    layers: list[eqx.nn.Linear]
    head: _DuelingOrPlainHead
    activation: Callable[[Array], Array] = eqx.field(static=True)
    encoder: ObservationEncoder | None = None
    layer_norms: list[eqx.nn.LayerNorm] | None = None

    @classmethod
    def from_env(cls, env: Any, key: PRNGKeyArray, **options: Any) -> "MLPQNetwork":
        """The network for an environment's observations (`Box` ones flattened,
        any other space through an [`ObservationEncoder`][eqxrl.nn.ObservationEncoder])
        and `Discrete` actions: DQN's and PQN's default, and a `network_factory`
        that checkpoints, configs and `eqxrl eval` can name.

        **Arguments:**

        - `env`: an environment with a `Discrete` action space.
        - `key`: a PRNG key for the initial weights.
        - `**options`: the constructor's other arguments (`hidden_sizes`,
          `dueling`, `layer_norm`, ...).
        """
        return _flat_or_encoded(cls, env, key, options)

    def __init__(
        self,
        observation_size: int,
        num_actions: int,
        *,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: Callable[[Array], Array] = jax.nn.relu,
        dueling: bool = False,
        encoder: ObservationEncoder | None = None,
        layer_norm: bool = False,
        key: PRNGKeyArray,
    ):
        _check_encoder("MLPQNetwork", observation_size, encoder)
        _check_sizes(
            "MLPQNetwork",
            observation_size=observation_size,
            num_actions=num_actions,
            hidden_sizes=tuple(hidden_sizes),
        )
        torso_key, head_key = jr.split(key)
        sizes = [observation_size, *hidden_sizes]
        self.layers = _mlp(sizes, torso_key)
        self.head = _DuelingOrPlainHead(sizes[-1], num_actions, dueling, head_key)
        self.activation = activation
        self.encoder = encoder
        self.layer_norms = (
            [eqx.nn.LayerNorm(size) for size in hidden_sizes] if layer_norm else None
        )

    def __call__(self, observation: PyTree[Array]) -> Float[Array, " num_actions"]:
        """The value of each action at one observation."""
        x = _features(self.encoder, observation)
        for index, layer in enumerate(self.layers):
            x = _apply_linear(layer, x)
            if self.layer_norms is not None:
                x = self.layer_norms[index](x)
            x = self.activation(x)
        return self.head(x)

    def q_values(
        self, observation: PyTree[Array], key: PRNGKeyArray
    ) -> Float[Array, " num_actions"]:
        del key
        return self(observation)


def _scaled_uniform(
    key: PRNGKeyArray, out_size: int, in_size: int, variance_scale: float
) -> eqx.nn.Linear:
    """A linear layer with uniform weights of variance `variance_scale / in_size`
    and zero bias (no LAPACK call)."""
    bound = math.sqrt(3.0 * variance_scale / in_size)
    weight = jr.uniform(key, (out_size, in_size), jnp.float32, -bound, bound)
    return eqx.tree_at(
        lambda layer: (layer.weight, layer.bias),
        eqx.nn.Linear(in_size, out_size, key=jr.key(0)),
        (weight, jnp.zeros(out_size, jnp.float32)),
    )


class CNNQNetwork(AbstractQNetwork):
    """A convolutional Q-network with LayerNorm for grid observations `[height,
    width, channels]`: PQN's MinAtar network (purejaxql's `pqn_minatar.py`).

    Each 3x3 convolution has no padding (the board shrinks by 2 per layer) and is
    followed by a LayerNorm over its channels at every cell, then a ReLU; the
    flattened board goes through a dense layer, a LayerNorm and a ReLU, then a
    linear layer gives one value per action. Observations are multiplied by
    `observation_scale` first (purejaxql divides MinAtar's 0/1 boards by 255;
    the LayerNorm after the convolution undoes most of that scale, not its effect
    on the convolution's bias). Convolutions and the dense layer are He-uniform
    (variance `2 / fan_in`, as Flax's `he_normal`), the output layer LeCun-uniform
    (variance `1 / fan_in`, as Flax's default), biases zero.

    Each convolution is stored as an `eqx.nn.Linear` acting on the 3x3 patches of
    the board (im2col): one matrix product, several times faster than XLA's CPU
    convolutions, above all for the kernel gradient. With the defaults a 10x10
    MinAtar board costs about 0.17 M multiply-adds.

    **Arguments:**

    - `observation_shape`: `(height, width, channels)` of one observation; height
      and width at least `2 * len(channels) + 1`.
    - `num_actions`: number of discrete actions.
    - `channels`: output channels of each convolution.
    - `hidden_size`: width of the dense layer.
    - `layer_norm`: LayerNorm after each convolution and the dense layer (with a
      learned scale and shift).
    - `observation_scale`: a factor applied to the observation.
    - `key`: a PRNG key for the initial weights.

    !!! example

        ```python
        env = eqxrl.envs.Snake()
        network = eqxrl.nn.CNNQNetwork.from_env(env, jax.random.key(0))
        q = network(env.observation_space.sample(jax.random.key(1)))  # [4]
        pqn = eqxrl.PQN(env=env)  # uses it for image observations
        ```
    """

    convolutions: list[eqx.nn.Linear]
    dense: eqx.nn.Linear
    head: eqx.nn.Linear
    convolution_norms: list[eqx.nn.LayerNorm] | None
    dense_norm: eqx.nn.LayerNorm | None
    observation_scale: float = eqx.field(static=True)

    def __init__(
        self,
        observation_shape: Sequence[int],
        num_actions: int,
        *,
        channels: Sequence[int] = (16,),
        hidden_size: int = 128,
        layer_norm: bool = True,
        observation_scale: float = 1.0,
        key: PRNGKeyArray,
    ):
        channels = tuple(channels)
        _check_sizes(
            "CNNQNetwork",
            num_actions=num_actions,
            hidden_size=hidden_size,
            channels=channels,
        )
        shrink = 2 * len(channels)
        if (
            len(observation_shape) != 3
            or min(observation_shape[:2]) <= shrink
            or observation_shape[2] < 1
        ):
            raise ValueError(
                "CNNQNetwork: observation_shape must be (height, width, channels) "
                f"with height and width above {shrink} (each of the {len(channels)} "
                f"unpadded 3x3 convolution(s) takes 2 off), got "
                f"{tuple(observation_shape)}."
            )
        height, width, in_channels = observation_shape
        keys = jr.split(key, len(channels) + 2)
        self.convolutions = []
        for index, out_channels in enumerate(channels):
            self.convolutions.append(
                _scaled_uniform(keys[index], out_channels, 9 * in_channels, 2.0)
            )
            in_channels = out_channels
        flat_size = (height - shrink) * (width - shrink) * in_channels
        self.dense = _scaled_uniform(keys[-2], hidden_size, flat_size, 2.0)
        self.head = _scaled_uniform(keys[-1], num_actions, hidden_size, 1.0)
        self.convolution_norms = (
            [eqx.nn.LayerNorm(size) for size in channels] if layer_norm else None
        )
        self.dense_norm = eqx.nn.LayerNorm(hidden_size) if layer_norm else None
        self.observation_scale = float(observation_scale)

    @classmethod
    def from_env(cls, env: Any, key: PRNGKeyArray, **options: Any) -> "CNNQNetwork":
        """The network for an environment's grid observations and `Discrete`
        actions, with default sizes unless `options` say otherwise: a
        `network_factory`.

        **Arguments:**

        - `env`: an environment with `[height, width, channels]` observations and
          a `Discrete` action space.
        - `key`: a PRNG key for the initial weights.
        - `**options`: keyword arguments of the constructor; bind them with
          `functools.partial(CNNQNetwork.from_env, observation_scale=1 / 255)`.
        """
        return cls(
            env.observation_space.shape, env.action_space.num_values, key=key, **options
        )

    def __call__(
        self, observation: Float[ArrayLike, "height width channels"]
    ) -> Float[Array, " num_actions"]:
        """The value of each action at one observation."""
        x = jnp.asarray(observation, jnp.float32) * self.observation_scale
        for index, convolution in enumerate(self.convolutions):
            x = valid_patches(x) @ convolution.weight.T + convolution.bias[None, None]
            if self.convolution_norms is not None:
                x = jax.vmap(jax.vmap(self.convolution_norms[index]))(x)
            x = jax.nn.relu(x)
        x = _apply_linear(self.dense, jnp.ravel(x))
        if self.dense_norm is not None:
            x = self.dense_norm(x)
        return _apply_linear(self.head, jax.nn.relu(x))

    def q_values(
        self, observation: PyTree[Array], key: PRNGKeyArray
    ) -> Float[Array, " num_actions"]:
        del key
        return self(observation)


class ImplicitQuantileNetwork(AbstractQuantileNetwork):
    """An implicit quantile network (Dabney et al., 2018) on a flattened observation.

    An MLP torso embeds the observation as `psi` (width `hidden_sizes[-1]`); each
    quantile fraction `tau` is embedded as
    `phi(tau) = relu(W cos(pi * [1..num_cosines] * tau) + b)` of the same width;
    their elementwise product goes through `head_sizes` hidden layers to one quantile
    value per action (optionally with a dueling split). The torso runs once per
    observation, whatever the number of fractions.

    **Arguments:**

    - `observation_size`: number of entries of one (flattened) observation.
    - `num_actions`: number of discrete actions.
    - `hidden_sizes`: widths of the torso's hidden layers.
    - `head_sizes`: widths of the hidden layers after the fraction embedding.
    - `num_cosines`: cosine features per fraction.
    - `num_acting_quantiles`: fractions `q_values` samples (uniformly) and averages
      to estimate the action values (`K` in the paper).
    - `activation`: activation after each hidden layer (default ReLU).
    - `dueling`: split the last layer into a value and centred advantages.
    - `noisy`: make the layers after the fraction embedding (`head_sizes` and the
      output layer) [`NoisyLinear`][eqxrl.nn.NoisyLinear], as Sorrel's IQN. The
      network then computes with the means; a loss draws noisy weights with
      [`sample_noise`][eqxrl.nn.sample_noise].
    - `sigma_init`: the noisy layers' initial noise scale.
    - `encoder`: an [`ObservationEncoder`][eqxrl.nn.ObservationEncoder] for
      structured or `Discrete` observations (its `num_features` is then
      `observation_size`); `None` flattens the observation.
    - `key`: a PRNG key for the initial weights.

    !!! example

        ```python
        network = eqxrl.nn.ImplicitQuantileNetwork(4, 2, key=jax.random.key(0))
        quantiles = network.quantile_values(jnp.zeros(4), jnp.array([0.1, 0.5, 0.9]))
        q = network.q_values(jnp.zeros(4), jax.random.key(1))  # shape [2]
        ```
    """

    torso: list[eqx.nn.Linear]
    embedding: eqx.nn.Linear
    hidden: list[eqx.nn.Linear | NoisyLinear]
    head: _DuelingOrPlainHead
    num_acting_quantiles: int = eqx.field(static=True)
    activation: Callable[[Array], Array] = eqx.field(static=True)
    encoder: ObservationEncoder | None = None

    @classmethod
    def from_env(
        cls, env: Any, key: PRNGKeyArray, **options: Any
    ) -> "ImplicitQuantileNetwork":
        """The network for an environment's observations (as
        [`MLPQNetwork.from_env`][eqxrl.nn.MLPQNetwork.from_env]) and `Discrete`
        actions: IQN's default, and a nameable `network_factory`.

        **Arguments:**

        - `env`: an environment with a `Discrete` action space.
        - `key`: a PRNG key for the initial weights.
        - `**options`: the constructor's other arguments (`hidden_sizes`,
          `head_sizes`, `num_cosines`, `noisy`, ...).
        """
        return _flat_or_encoded(cls, env, key, options)

    def __init__(
        self,
        observation_size: int,
        num_actions: int,
        *,
        hidden_sizes: Sequence[int] = (64, 64),
        head_sizes: Sequence[int] = (64,),
        num_cosines: int = 64,
        num_acting_quantiles: int = 32,
        activation: Callable[[Array], Array] = jax.nn.relu,
        dueling: bool = False,
        noisy: bool = False,
        sigma_init: Float[ArrayLike, ""] = 0.017,
        encoder: ObservationEncoder | None = None,
        key: PRNGKeyArray,
    ):
        _check_encoder("ImplicitQuantileNetwork", observation_size, encoder)
        _check_sizes(
            "ImplicitQuantileNetwork",
            observation_size=observation_size,
            num_actions=num_actions,
            hidden_sizes=tuple(hidden_sizes),
            head_sizes=tuple(head_sizes),
            num_cosines=num_cosines,
            num_acting_quantiles=num_acting_quantiles,
        )
        if not hidden_sizes:
            raise ValueError(
                "ImplicitQuantileNetwork: hidden_sizes must not be empty (the "
                "fraction embedding multiplies the last hidden layer)."
            )
        torso_key, embedding_key, hidden_key, head_key = jr.split(key, 4)
        width = hidden_sizes[-1]
        self.torso = _mlp([observation_size, *hidden_sizes], torso_key)
        self.embedding = _linear(num_cosines, width, embedding_key)
        head_in = [width, *head_sizes]
        if noisy:
            keys = jr.split(hidden_key, max(len(head_in) - 1, 1))
            self.hidden = [
                NoisyLinear(head_in[i], head_in[i + 1], sigma_init=sigma_init, key=k)
                for i, k in zip(range(len(head_in) - 1), keys)
            ]
        else:
            self.hidden = _mlp(head_in, hidden_key)
        self.head = _DuelingOrPlainHead(
            head_in[-1], num_actions, dueling, head_key, noisy, sigma_init
        )
        self.num_acting_quantiles = num_acting_quantiles
        self.activation = activation
        self.encoder = encoder

    @property
    def num_cosines(self) -> int:
        """Cosine features per fraction."""
        return self.embedding.in_features

    def quantile_values(
        self, observation: PyTree[Array], fractions: Float[Array, " num_fractions"]
    ) -> Float[Array, "num_fractions num_actions"]:
        x = _features(self.encoder, observation)
        # The torso sees one observation; there `layer(x)` measured faster than
        # `_apply_linear` (IQN on rejax's settings, under the loss's vmap).
        for layer in self.torso:
            x = self.activation(layer(x))
        frequencies = jnp.arange(1, self.num_cosines + 1, dtype=jnp.float32)
        cosines = _cos_pi(fractions[:, None] * frequencies[None, :])
        phi = jax.nn.relu(_apply_linear(self.embedding, cosines))
        # psi repeated over the fractions as an outer product with ones (a dot):
        # its gradient is then a dot as well, which XLA's CPU backend runs much
        # faster than the equivalent reduction over fractions (IQN's step on
        # rejax's settings: ~14% faster).
        ones = jnp.ones((fractions.shape[0], 1), jnp.float32)
        h = (ones @ x[None, :]) * phi
        for layer in self.hidden:
            h = self.activation(_apply_linear(layer, h))
        return self.head(h)

    def q_values(
        self, observation: PyTree[Array], key: PRNGKeyArray
    ) -> Float[Array, " num_actions"]:
        fractions = random_uniform(key, (self.num_acting_quantiles,))
        return jnp.mean(self.quantile_values(observation, fractions), axis=0)


_COS_PI_COEFFICIENTS = tuple(
    (-1) ** k * math.pi ** (2 * k) / math.factorial(2 * k) for k in range(10)
)


def _cos_pi(x: Float[Array, "..."]) -> Float[Array, "..."]:
    """`cos(pi * x)` from a reduction to `[-1, 1]` and an even polynomial (Taylor,
    error below 1e-6): several times faster than `jnp.cos` on CPU, where the cosine
    embedding of IQN's fractions would otherwise dominate the step time."""
    u = x - 2.0 * jnp.floor(0.5 * x + 0.5)
    u2 = u * u
    result = jnp.full_like(u, _COS_PI_COEFFICIENTS[-1])
    for coefficient in reversed(_COS_PI_COEFFICIENTS[:-1]):
        result = result * u2 + coefficient
    return result


def greedy_action(
    q_values: Float[Array, " num_actions"],
    action_mask: Bool[Array, " num_actions"] | None = None,
) -> Int[Array, ""]:
    """The valid action with the largest value (int32; the first one on ties).

    **Arguments:**

    - `q_values`: one value per action.
    - `action_mask`: `True` for valid actions, or `None` (all valid). If no action
      is valid, action `0` is returned.
    """
    if action_mask is not None:
        q_values = jnp.where(action_mask, q_values, -jnp.inf)
    return jnp.argmax(q_values).astype(jnp.int32)


class EpsilonGreedyPolicy(AbstractPolicy):
    """Act greedily on a Q-network's values, or uniformly at random with probability
    `epsilon`; both only among the valid actions when a mask is given.

    With `epsilon = 0` the policy is greedy (for an implicit quantile network the
    action values are still estimated from sampled fractions, so the key matters).

    **Arguments:**

    - `network`: the Q-network.
    - `epsilon`: float32 probability of a uniformly random (valid) action.
    """

    network: AbstractQNetwork
    epsilon: Float[Array, ""] = eqx.field(
        default=0.0, converter=lambda x: jnp.asarray(x, jnp.float32)
    )

    def __call__(
        self,
        observation: PyTree[Array],
        key: PRNGKeyArray,
        action_mask: Bool[Array, " num_actions"] | None = None,
    ) -> Int[Array, ""]:
        value_key, uniform_key = jr.split(key)
        q_values = self.network.q_values(observation, value_key)
        uniform = jr.uniform(uniform_key, (), jnp.float32)
        return epsilon_greedy_action(q_values, uniform, self.epsilon, action_mask)

    @property
    def is_recurrent(self) -> bool:
        """Whether the network carries a state from step to step."""
        return self.network.is_recurrent

    def initial_carry(self) -> PyTree[Array] | None:
        """A recurrent network's carry at an episode's start; `None` otherwise."""
        if not self.network.is_recurrent:
            return None
        return self.network.initial_carry()  # pyright: ignore[reportAttributeAccessIssue]

    def step(
        self,
        carry: PyTree[Array] | None,
        observation: PyTree[Array],
        key: PRNGKeyArray,
        action_mask: Bool[Array, " num_actions"] | None = None,
    ) -> tuple[PyTree[Array] | None, Int[Array, ""]]:
        """One step of an episode, `(next_carry, action)`: a recurrent network
        reads `observation` with `carry`; a feed-forward one acts as `__call__`."""
        if not self.network.is_recurrent:
            return carry, self(observation, key, action_mask)
        _, uniform_key = jr.split(key)
        carry, q_values = self.network.step(carry, observation)  # pyright: ignore[reportAttributeAccessIssue]
        uniform = jr.uniform(uniform_key, (), jnp.float32)
        return carry, epsilon_greedy_action(
            q_values, uniform, self.epsilon, action_mask
        )


def epsilon_greedy_action(
    q_values: Float[Array, " num_actions"],
    uniform: Float[ArrayLike, ""],
    epsilon: Float[ArrayLike, ""],
    action_mask: Bool[Array, " num_actions"] | None = None,
) -> Int[Array, ""]:
    """The epsilon-greedy action for given action values and one uniform number.

    With `u = uniform` (uniform on `[0, 1)`): if `u < epsilon`, a random valid action,
    chosen by `u / epsilon` (itself uniform on `[0, 1)` given `u < epsilon`); else the
    greedy valid action. One random number per decision lets an algorithm draw all
    of them at once.

    **Arguments:**

    - `q_values`: one value per action.
    - `uniform`: a float32 number uniform on `[0, 1)`.
    - `epsilon`: the probability of a random action.
    - `action_mask`: `True` for valid actions, or `None` (all valid).

    **Returns:**

    The action (int32).
    """
    uniform = jnp.asarray(uniform, jnp.float32)
    epsilon = jnp.asarray(epsilon, jnp.float32)
    greedy = greedy_action(q_values, action_mask)
    explore = uniform < epsilon
    fraction = jnp.where(explore, uniform / jnp.maximum(epsilon, 1e-30), 0.0)
    random = _uniform_action(fraction, q_values.shape[0], action_mask)
    return jnp.where(explore, random, greedy)


def _uniform_action(
    fraction: Float[Array, ""],
    num_actions: int,
    action_mask: Bool[Array, " num_actions"] | None,
) -> Int[Array, ""]:
    """The action at `fraction` (uniform on [0, 1)) of the valid actions (int32):
    uniformly random among them. With no valid action, action 0."""
    if action_mask is None:
        index = jnp.floor(fraction * num_actions).astype(jnp.int32)
        return jnp.minimum(index, num_actions - 1)
    num_valid = jnp.sum(action_mask.astype(jnp.int32))
    rank = jnp.floor(fraction * num_valid.astype(jnp.float32)).astype(jnp.int32)
    rank = jnp.minimum(rank, num_valid - 1)
    position = jnp.cumsum(action_mask.astype(jnp.int32)) - 1  # rank of each valid
    return jnp.argmax(action_mask & (position == rank)).astype(jnp.int32)
