"""The networks of the continuous-control actor-critics: SAC's tanh-squashed Gaussian
actor, TD3's deterministic actor, the twin Q-critics, and the policies that act with
an actor in an environment's action bounds."""

import math
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from distreqx.bijectors import Tanh
from jaxtyping import Array, Bool, Float, PRNGKeyArray

from ._normalization import RunningMeanStd
from ._policy import AbstractPolicy
from ._q_networks import _apply_linear, _check_sizes, _mlp

# The actor's log standard deviation lies in [LOG_STD_MIN, LOG_STD_MAX] (CleanRL's
# bounds, reached smoothly through a tanh).
LOG_STD_MIN = -5.0
LOG_STD_MAX = 2.0
_HALF_LOG_TWO_PI = 0.5 * math.log(2.0 * math.pi)


def _forward(
    layers: list[eqx.nn.Linear],
    activation: Callable[[Array], Array],
    x: Float[Array, " in_features"],
) -> Float[Array, " out_features"]:
    for layer in layers[:-1]:
        x = activation(_apply_linear(layer, x))
    return _apply_linear(layers[-1], x)


class MLPTanhGaussianActor(eqx.Module):
    """A multi-layer perceptron from a flattened observation to a diagonal Gaussian
    over pre-squash actions; actions are its samples squashed by `tanh`, in `(-1, 1)`.

    The last layer outputs the mean and the log standard deviation of each action
    entry; the log standard deviation is mapped smoothly into `[-5, 2]` (as CleanRL's
    SAC). Weights use Equinox's default initialization (uniform, as PyTorch's).

    **Arguments:**

    - `observation_size`: entries of one (flattened) observation.
    - `action_size`: entries of one action.
    - `hidden_sizes`: widths of the hidden layers.
    - `activation`: activation after each hidden layer (default ReLU).
    - `key`: a PRNG key for the initial weights.

    !!! example

        ```python
        actor = eqxrl.nn.MLPTanhGaussianActor(3, 1, key=jax.random.key(0))
        noise = jax.random.normal(jax.random.key(1), (1,))
        action, log_prob = actor.sample_and_log_prob(jnp.zeros(3), noise)
        ```
    """

    layers: list[eqx.nn.Linear]
    action_size: int = eqx.field(static=True)
    activation: Callable[[Array], Array] = eqx.field(static=True)

    def __init__(
        self,
        observation_size: int,
        action_size: int,
        *,
        hidden_sizes: Sequence[int] = (256, 256),
        activation: Callable[[Array], Array] = jax.nn.relu,
        key: PRNGKeyArray,
    ):
        _check_sizes(
            "MLPTanhGaussianActor",
            observation_size=observation_size,
            action_size=action_size,
            hidden_sizes=tuple(hidden_sizes),
        )
        sizes = [observation_size, *hidden_sizes, 2 * action_size]
        self.layers = _mlp(sizes, key)
        self.action_size = action_size
        self.activation = activation

    def __call__(
        self, observation: Float[Array, "..."]
    ) -> tuple[Float[Array, " action_size"], Float[Array, " action_size"]]:
        """`(mean, log_std)` of the Gaussian before squashing, for one observation."""
        features = jnp.ravel(observation).astype(jnp.float32)
        outputs = _forward(self.layers, self.activation, features)
        mean, raw_log_std = outputs[: self.action_size], outputs[self.action_size :]
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (
            jnp.tanh(raw_log_std) + 1.0
        )
        return mean, log_std

    def sample_and_log_prob(
        self,
        observation: Float[Array, "..."],
        noise: Float[Array, " action_size"],
    ) -> tuple[Float[Array, " action_size"], Float[Array, ""]]:
        """A squashed action and its log-density, from standard normal noise.

        With `(mean, log_std) = actor(observation)`, the pre-squash sample is
        `u = mean + exp(log_std) * noise` and the action `tanh(u)`. Its log-density
        is that of `u` under the Gaussian minus `sum(log(1 - tanh(u)**2))` (the
        change of variables), computed from `u` itself with distreqx's `Tanh`
        bijector (`2 * (log 2 - u - softplus(-2u))`): exact and finite also where
        `tanh(u)` rounds to `+-1`, and differentiable in the parameters through
        `u` (the reparameterization SAC's actor loss needs). Computing it from the
        action instead (inverting the tanh) loses precision as `|u|` grows and
        stops the gradient where the action is clipped.

        **Arguments:**

        - `observation`: one observation.
        - `noise`: float32 `[action_size]`, standard normal draws.

        **Returns:**

        `(action, log_prob)`: the action in `(-1, 1)` (`[action_size]`) and its
        log-density (a scalar).
        """
        mean, log_std = self(observation)
        pre_squash = mean + jnp.exp(log_std) * noise
        action, log_det = Tanh().forward_and_log_det(pre_squash)
        # log N(u; mean, std) with (u - mean) / std = noise, exactly.
        gaussian = -0.5 * jnp.square(noise) - log_std - _HALF_LOG_TWO_PI
        return action, jnp.sum(gaussian - log_det)

    def mode(self, observation: Float[Array, "..."]) -> Float[Array, " action_size"]:
        """The deterministic action `tanh(mean)`, for one observation."""
        mean, _ = self(observation)
        return jnp.tanh(mean)


class MLPTwinCritic(eqx.Module):
    """Two independent Q-networks on `(observation, action)`, as the twin critics of
    SAC and TD3 (the smaller of their values curbs overestimation); or one
    (`num_critics=1`, DDPG's critic) or more.

    Each is a multi-layer perceptron from the flattened observation concatenated
    with the action to one value. Their weights are stacked on a leading axis of
    size `num_critics` and applied with `eqx.filter_vmap`, so all run as one
    batched matrix product per layer. Weights use Equinox's default initialization
    (uniform, as PyTorch's).

    **Arguments:**

    - `observation_size`: entries of one (flattened) observation.
    - `action_size`: entries of one action.
    - `hidden_sizes`: widths of the hidden layers.
    - `activation`: activation after each hidden layer (default ReLU).
    - `num_critics`: how many Q-networks (default 2).
    - `key`: a PRNG key for the initial weights.

    !!! example

        ```python
        critic = eqxrl.nn.MLPTwinCritic(3, 1, key=jax.random.key(0))
        q1, q2 = critic(jnp.zeros(3), jnp.zeros(1))
        ```
    """

    layers: list[eqx.nn.Linear]
    activation: Callable[[Array], Array] = eqx.field(static=True)

    def __init__(
        self,
        observation_size: int,
        action_size: int,
        *,
        hidden_sizes: Sequence[int] = (256, 256),
        activation: Callable[[Array], Array] = jax.nn.relu,
        num_critics: int = 2,
        key: PRNGKeyArray,
    ):
        _check_sizes(
            "MLPTwinCritic",
            observation_size=observation_size,
            action_size=action_size,
            hidden_sizes=tuple(hidden_sizes),
            num_critics=num_critics,
        )
        sizes = [observation_size + action_size, *hidden_sizes, 1]
        self.layers = eqx.filter_vmap(lambda k: _mlp(sizes, k))(
            jr.split(key, num_critics)
        )
        self.activation = activation

    def __call__(
        self,
        observation: Float[Array, "..."],
        action: Float[Array, " action_size"],
    ) -> Float[Array, " num_critics"]:
        """Every critic's value of `action` at one observation."""
        features = jnp.ravel(observation).astype(jnp.float32)
        x = jnp.concatenate([features, action.astype(jnp.float32)])

        @eqx.filter_vmap
        def value(layers: list[eqx.nn.Linear]) -> Float[Array, ""]:
            return _forward(layers, self.activation, x)[0]

        return value(self.layers)


class TanhGaussianPolicy(AbstractPolicy):
    """A tanh-Gaussian actor as a policy, its actions mapped linearly from `(-1, 1)`
    onto the action space's bounds.

    **Arguments:**

    - `actor`: the trained actor.
    - `low`, `high`: float32 bounds of the `Box` action space (its shape).
    - `deterministic`: act with `tanh(mean)` instead of sampling.
    - `observation_statistics`: the statistics the actor's observations were
      normalized by in training (SAC's `normalize_observations`), so that the
      policy takes raw observations; `None` (default): none.
    """

    actor: MLPTanhGaussianActor
    low: Float[Array, "..."]
    high: Float[Array, "..."]
    deterministic: bool = eqx.field(static=True, default=False)
    observation_statistics: RunningMeanStd | None = None

    def __check_init__(self):
        if self.low.shape != self.high.shape:
            raise ValueError(
                f"TanhGaussianPolicy: low {self.low.shape} and high "
                f"{self.high.shape} must have the same shape."
            )

    def __call__(
        self,
        observation: Float[Array, "..."],
        key: PRNGKeyArray,
        action_mask: Bool[Array, " num_actions"] | None = None,
    ) -> Float[Array, "..."]:
        del action_mask  # continuous actions have no mask
        if self.observation_statistics is not None:
            observation = self.observation_statistics.normalize(observation)
        if self.deterministic:
            action = self.actor.mode(observation)
        else:
            noise = jr.normal(key, (self.actor.action_size,), jnp.float32)
            action, _ = self.actor.sample_and_log_prob(observation, noise)
        return self.to_bounds(action)

    def to_bounds(self, action: Float[Array, " action_size"]) -> Float[Array, "..."]:
        """A flat action in `[-1, 1]` (the actor's scale) mapped linearly onto
        `[low, high]` (the action space's shape), clipped there against rounding:
        what the policy does to the actor's actions, and what SAC does to the
        actions it collects with."""
        return _to_bounds(action, self.low, self.high)


def _to_bounds(
    action: Float[Array, " action_size"],
    low: Float[Array, "..."],
    high: Float[Array, "..."],
) -> Float[Array, "..."]:
    fraction = 0.5 * (action.reshape(low.shape) + 1.0)
    return jnp.clip(low + fraction * (high - low), low, high)


class MLPDeterministicActor(eqx.Module):
    """A multi-layer perceptron from a flattened observation to an action in
    `[-1, 1]` (a `tanh` on its last layer): the deterministic actor of TD3 and DDPG.
    Weights use Equinox's default initialization (uniform, as PyTorch's).

    **Arguments:**

    - `observation_size`: entries of one (flattened) observation.
    - `action_size`: entries of one action.
    - `hidden_sizes`: widths of the hidden layers.
    - `activation`: activation after each hidden layer (default ReLU).
    - `key`: a PRNG key for the initial weights.

    !!! example

        ```python
        actor = eqxrl.nn.MLPDeterministicActor(3, 1, key=jax.random.key(0))
        action = actor(jnp.zeros(3))  # shape (1,), in [-1, 1]
        ```
    """

    layers: list[eqx.nn.Linear]
    action_size: int = eqx.field(static=True)
    activation: Callable[[Array], Array] = eqx.field(static=True)

    def __init__(
        self,
        observation_size: int,
        action_size: int,
        *,
        hidden_sizes: Sequence[int] = (256, 256),
        activation: Callable[[Array], Array] = jax.nn.relu,
        key: PRNGKeyArray,
    ):
        _check_sizes(
            "MLPDeterministicActor",
            observation_size=observation_size,
            action_size=action_size,
            hidden_sizes=tuple(hidden_sizes),
        )
        self.layers = _mlp([observation_size, *hidden_sizes, action_size], key)
        self.action_size = action_size
        self.activation = activation

    def __call__(
        self, observation: Float[Array, "..."]
    ) -> Float[Array, " action_size"]:
        """The action in `[-1, 1]` at one observation."""
        features = jnp.ravel(observation).astype(jnp.float32)
        return jnp.tanh(_forward(self.layers, self.activation, features))


class DeterministicPolicy(AbstractPolicy):
    """A deterministic actor as a policy, its actions mapped linearly from `[-1, 1]`
    onto the action space's bounds; optionally with the Gaussian exploration noise of
    training.

    **Arguments:**

    - `actor`: the trained actor.
    - `low`, `high`: float32 bounds of the `Box` action space (its shape).
    - `exploration_noise`: standard deviation of the Gaussian noise added to the
      actor's action (in `[-1, 1]` units, then clipped there) when not
      `deterministic`.
    - `deterministic`: act with the actor's action alone.
    - `observation_statistics`: the statistics the actor's observations were
      normalized by in training (TD3's `normalize_observations`), so that the
      policy takes raw observations; `None` (default): none.
    """

    actor: MLPDeterministicActor
    low: Float[Array, "..."]
    high: Float[Array, "..."]
    exploration_noise: Float[Array, ""]
    deterministic: bool = eqx.field(static=True, default=True)
    observation_statistics: RunningMeanStd | None = None

    def __check_init__(self):
        if self.low.shape != self.high.shape:
            raise ValueError(
                f"DeterministicPolicy: low {self.low.shape} and high "
                f"{self.high.shape} must have the same shape."
            )

    def __call__(
        self,
        observation: Float[Array, "..."],
        key: PRNGKeyArray,
        action_mask: Bool[Array, " num_actions"] | None = None,
    ) -> Float[Array, "..."]:
        del action_mask  # continuous actions have no mask
        if self.observation_statistics is not None:
            observation = self.observation_statistics.normalize(observation)
        action = self.actor(observation)
        if not self.deterministic:
            noise = jr.normal(key, (self.actor.action_size,), jnp.float32)
            action = jnp.clip(action + self.exploration_noise * noise, -1.0, 1.0)
        return self.to_bounds(action)

    def to_bounds(self, action: Float[Array, " action_size"]) -> Float[Array, "..."]:
        """A flat action in `[-1, 1]` mapped linearly onto `[low, high]` (the action
        space's shape), clipped there against rounding."""
        return _to_bounds(action, self.low, self.high)
