import abc
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

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

StdParameterization = Literal["log", "softplus"]
Initialization = Literal["orthogonal", "lecun_uniform"]

# The smallest standard deviation of the "softplus" parameterization (the `min_std`
# of Brax's NormalTanhDistribution).
SOFTPLUS_MIN_STD = 1e-3


def initial_std_parameter(
    owner: str, std_parameterization: str, initial_log_std: float | None
) -> float:
    """The parameter value that gives a Gaussian head the standard deviation
    `exp(initial_log_std)` (`None`: a zero parameter)."""
    if std_parameterization not in ("log", "softplus"):
        raise ValueError(
            f"{owner}: std_parameterization={std_parameterization!r} must be 'log' "
            "or 'softplus'."
        )
    if initial_log_std is None:
        return 0.0
    if std_parameterization == "log":
        return float(initial_log_std)
    above_minimum = math.exp(initial_log_std) - SOFTPLUS_MIN_STD
    if above_minimum <= 0.0:
        raise ValueError(
            f"{owner}: initial_log_std={initial_log_std} gives a standard deviation "
            f"below the softplus parameterization's minimum {SOFTPLUS_MIN_STD}."
        )
    return math.log(math.expm1(above_minimum))  # the inverse of softplus


def gaussian_scale_parameter(
    owner: str,
    actor: list[eqx.nn.Linear],
    action_size: int,
    state_dependent_std: bool,
    std_parameterization: str,
    initial_log_std: float | None,
) -> tuple[list[eqx.nn.Linear], Float[Array, " action_size"] | None]:
    """A Gaussian head's initial scale: the actor's layers, whose last layer's
    scale outputs (after the `action_size` means) start at the parameter of
    `exp(initial_log_std)` with `state_dependent_std`, and else the learned
    state-independent parameter vector (`None` with `state_dependent_std`)."""
    initial = initial_std_parameter(owner, std_parameterization, initial_log_std)
    if not state_dependent_std:
        return actor, jnp.full(action_size, initial, jnp.float32)
    last = actor[-1]
    bias = last.bias.at[action_size:].set(initial)
    return [*actor[:-1], eqx.tree_at(lambda layer: layer.bias, last, bias)], None


def gaussian_head(
    outputs: Float[Array, " outputs"],
    scale_parameter: Float[Array, " action_size"] | None,
    action_size: int,
    std_parameterization: str,
    squash: bool,
) -> DiagonalGaussian:
    """The Gaussian of an actor's outputs: the first `action_size` are the means;
    the scale parameter is the rest of the outputs (`scale_parameter=None`) or the
    learned vector. It is the log standard deviation (`"log"`, clipped to `[-20, 2]`
    when the actor outputs it) or gives `softplus(parameter) + 0.001`
    (`"softplus"`)."""
    mean = outputs[:action_size]
    parameter = outputs[action_size:] if scale_parameter is None else scale_parameter
    if std_parameterization == "softplus":
        log_std = jnp.log(jax.nn.softplus(parameter) + SOFTPLUS_MIN_STD)
    elif scale_parameter is None:
        log_std = jnp.clip(parameter, -20.0, 2.0)
    else:
        log_std = parameter
    return DiagonalGaussian(mean, log_std, squash)


def action_head(
    outputs: Float[Array, " outputs"],
    action_mask: Bool[Array, " num_actions"] | None,
    scale_parameter: Float[Array, " action_size"] | None,
    action_size: int | None,
    std_parameterization: str,
    squash: bool,
) -> MaskedCategorical | DiagonalGaussian:
    """The policy of an actor's outputs: masked categorical logits for a `Discrete`
    action space (`action_size=None`), else `gaussian_head`'s Gaussian."""
    if action_size is None:
        return MaskedCategorical(outputs, action_mask)
    return gaussian_head(
        outputs, scale_parameter, action_size, std_parameterization, squash
    )


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

    def initial_carry(self) -> PyTree[Array] | None:
        """One environment's recurrent state at an episode's start: `None` for a
        feed-forward network (see
        [`AbstractRecurrentActorCritic`][eqxrl.nn.AbstractRecurrentActorCritic])."""
        return None

    def step(
        self,
        carry: PyTree[Array] | None,
        observation: PyTree[Array],
        action_mask: Bool[Array, " num_actions"] | None = None,
    ) -> tuple[PyTree[Array] | None, AbstractActionDistribution, Float[Array, ""]]:
        """One step of an episode, `(next_carry, distribution, value)`: for a
        feed-forward network, `carry` unchanged and `__call__`'s outputs."""
        distribution, value = self(observation, action_mask)
        return carry, distribution, value

    def step_value(
        self, carry: PyTree[Array] | None, observation: PyTree[Array]
    ) -> Float[Array, ""]:
        """The value of `observation` read with `carry` (feed-forward: `value`)."""
        del carry
        return self.value(observation)

    @property
    def is_recurrent(self) -> bool:
        """Whether the network carries a state from step to step (`False`)."""
        return False

    @property
    def separate_critic(self) -> bool:
        """Whether the value shares no computation with the policy.

        `True` lets PPO leave the critic out of the step-by-step rollout and evaluate
        it once on all of the rollout's observations afterwards: one large batch,
        which runs much faster than many small ones. Leave it `False` (the default)
        for networks with a shared trunk, whose trunk would otherwise run twice.
        """
        return False

    def critic_mask(self) -> PyTree[bool]:
        """Which parameters are the critic's own: a tree of the network's
        structure, `True` on the leaves only the value reads, `False` on the rest
        (the actor's). [`MAPPO`][eqxrl.multiagent.MAPPO] reads it to share one
        part between the agents and not the other. The networks with a separate
        critic define it; the default raises `NotImplementedError`, as a shared
        trunk belongs to both."""
        raise NotImplementedError(
            f"{type(self).__name__} does not say which of its parameters are the "
            "critic's (critic_mask); a network with a trunk shared by the actor and "
            "the critic cannot split them."
        )


def parameters_mask(module: eqx.Module, parts: Callable[[Any], Any]) -> PyTree[bool]:
    """A tree of `module`'s structure, `True` on the leaves under `parts(module)`
    (one node or a tuple of nodes, as `eqx.tree_at` takes them), `False` elsewhere:
    what `critic_mask` returns."""
    mask = jax.tree.map(lambda _: False, module)
    return eqx.tree_at(
        parts, mask, replace_fn=lambda node: jax.tree.map(lambda _: True, node)
    )


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
    critic_hidden_sizes: Sequence[int] | None = None,
    initialization: Initialization = "orthogonal",
) -> tuple[list[eqx.nn.Linear], list[eqx.nn.Linear]]:
    """Actor and critic MLP layers with zero biases: orthogonal weights (no LAPACK
    call) with gain `sqrt(2)` in hidden layers, `actor_gain` in the policy head and
    1 in the value head; or, with `initialization="lecun_uniform"`, Brax's MLPs'
    weights, uniform in `+-sqrt(3 / fan_in)` in every layer (gains unused).

    The actor has `hidden_sizes` hidden layers, the critic `critic_hidden_sizes`
    (`None`: the same)."""
    if initialization not in ("orthogonal", "lecun_uniform"):
        raise ValueError(
            f"Actor-critic: initialization={initialization!r} must be 'orthogonal' "
            "or 'lecun_uniform'."
        )
    if critic_hidden_sizes is None:
        critic_hidden_sizes = hidden_sizes
    if observation_size < 1 or actor_outputs < 1:
        raise ValueError(
            f"Actor-critic: observation_size ({observation_size}) and the number of "
            f"actions ({actor_outputs}) must be positive (num_actions / action_size)."
        )
    for name, sizes in (
        ("hidden_sizes", hidden_sizes),
        ("critic_hidden_sizes", critic_hidden_sizes),
    ):
        if any(width < 1 for width in sizes):
            raise ValueError(f"Actor-critic: {name} {tuple(sizes)} must be positive.")
    actor_sizes = [observation_size, *hidden_sizes, actor_outputs]
    critic_sizes = [observation_size, *critic_hidden_sizes, 1]
    shapes = [(actor_sizes[i + 1], actor_sizes[i]) for i in range(len(actor_sizes) - 1)]
    shapes += [
        (critic_sizes[i + 1], critic_sizes[i]) for i in range(len(critic_sizes) - 1)
    ]
    gains = [math.sqrt(2.0)] * len(hidden_sizes) + [actor_gain]
    gains += [math.sqrt(2.0)] * len(critic_hidden_sizes) + [1.0]
    if initialization == "lecun_uniform":
        weights = [
            jax.random.uniform(layer_key, shape, minval=-1.0, maxval=1.0)
            * math.sqrt(3.0 / shape[1])
            for layer_key, shape in zip(
                jax.random.split(key, len(shapes)), shapes, strict=True
            )
        ]
    else:
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
    `sqrt(2)`, the policy head with `0.01`, the value head with `1.0`, zero biases;
    or Brax's (`initialization="lecun_uniform"`).

    **Arguments:**

    - `observation_size`: number of entries of one (flattened) observation.
    - `num_actions`: number of discrete actions.
    - `hidden_sizes`: widths of the hidden layers (of the actor, and of the critic
      unless `critic_hidden_sizes` is given).
    - `critic_hidden_sizes`: widths of the critic's hidden layers; `None`: as the
      actor's.
    - `activation`: activation between layers (default `tanh`).
    - `initialization`: `"orthogonal"` (default, as above) or `"lecun_uniform"`:
      every layer's weights uniform in `+-sqrt(3 / fan_in)`, zero biases, as Brax's
      and Flax's MLPs (`lecun_uniform` kernels).
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

    @classmethod
    def from_env(cls, env: Any, key: PRNGKeyArray, **options: Any) -> "MLPActorCritic":
        """The network for an environment's (flattened) `Box` observations and
        `Discrete` actions: PPO's default, and a `network_factory` that
        checkpoints, configs and `eqxrl eval` can name.

        **Arguments:**

        - `env`: an environment with `Box` observations and `Discrete` actions.
        - `key`: a PRNG key for the initial weights.
        - `**options`: the constructor's other arguments (`hidden_sizes`,
          `activation`, ...).
        """
        observation_size = math.prod(env.observation_space.shape)
        num_actions = env.action_space.num_values
        return cls(observation_size, num_actions, key=key, **options)

    def __init__(
        self,
        observation_size: int,
        num_actions: int,
        *,
        hidden_sizes: Sequence[int] = (64, 64),
        critic_hidden_sizes: Sequence[int] | None = None,
        activation: Callable[[Array], Array] = jax.nn.tanh,
        initialization: Initialization = "orthogonal",
        key: PRNGKeyArray,
    ):
        self.actor, self.critic = _mlp_weights(
            key,
            observation_size,
            hidden_sizes,
            num_actions,
            0.01,
            critic_hidden_sizes,
            initialization,
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

    def critic_mask(self) -> PyTree[bool]:
        """`True` on the critic MLP's parameters."""
        return parameters_mask(self, lambda network: network.critic)


class MLPGaussianActorCritic(AbstractActorCritic):
    """Separate actor and critic MLPs with a diagonal Gaussian policy head.

    The actor outputs the action mean and, with `state_dependent_std`, the
    parameters of the standard deviation; otherwise they are a learned vector
    independent of the state. Two parameterizations of the standard deviation:

    - `"log"` (default): the parameter is the log standard deviation (clipped to
      `[-20, 2]` when the actor outputs it);
    - `"softplus"`: the standard deviation is `softplus(parameter) + 0.001`, Brax's
      `NormalTanhDistribution` (with `state_dependent_std=True, squash=True`, the
      policy head of Brax's PPO and SAC).

    Initialization as [`MLPActorCritic`][eqxrl.nn.MLPActorCritic]'s (`initialization`).

    **Arguments:**

    - `observation_size`: entries of one (flattened) observation.
    - `action_size`: entries of one action.
    - `hidden_sizes`: widths of the hidden layers (of the actor, and of the critic
      unless `critic_hidden_sizes` is given).
    - `critic_hidden_sizes`: widths of the critic's hidden layers; `None`: as the
      actor's.
    - `activation`: activation between layers (default `tanh`).
    - `state_dependent_std`: the actor also outputs the standard deviation's
      parameters.
    - `squash`: squash actions into `(-1, 1)` with `tanh` (see
      [`DiagonalGaussian`][eqxrl.distributions.DiagonalGaussian]).
    - `std_parameterization`: `"log"` or `"softplus"`, as above.
    - `initial_log_std`: the initial log standard deviation; `None`: that of a
      zero parameter (standard deviation 1 for `"log"`, `log(2) + 0.001` for
      `"softplus"`).
    - `initialization`: `"orthogonal"` (default) or `"lecun_uniform"` (Brax's), as
      [`MLPActorCritic`][eqxrl.nn.MLPActorCritic]'s.
    - `key`: a PRNG key for the initial weights.

    !!! example

        ```python
        # Brax's PPO policy head: tanh-squashed, softplus scale from the actor.
        network = eqxrl.nn.MLPGaussianActorCritic(
            11, 3, hidden_sizes=(32, 32, 32, 32), critic_hidden_sizes=(256,) * 5,
            activation=jax.nn.swish, state_dependent_std=True, squash=True,
            std_parameterization="softplus", key=jax.random.key(0),
        )
        distribution, value = network(jnp.zeros(11))
        ```
    """

    actor: list[eqx.nn.Linear]
    critic: list[eqx.nn.Linear]
    log_std: Float[Array, " action_size"] | None
    activation: Callable[[Array], Array] = eqx.field(static=True)
    action_size: int = eqx.field(static=True)
    squash: bool = eqx.field(static=True)
    std_parameterization: StdParameterization = eqx.field(static=True)

    @classmethod
    def from_env(
        cls, env: Any, key: PRNGKeyArray, **options: Any
    ) -> "MLPGaussianActorCritic":
        """The network for an environment's (flattened) `Box` observations and
        `Box` actions: PPO's default there, and a nameable `network_factory`.

        **Arguments:**

        - `env`: an environment with `Box` observations and actions.
        - `key`: a PRNG key for the initial weights.
        - `**options`: the constructor's other arguments (`hidden_sizes`,
          `squash`, `state_dependent_std`, ...).
        """
        observation_size = math.prod(env.observation_space.shape)
        action_size = math.prod(env.action_space.shape)
        return cls(observation_size, action_size, key=key, **options)

    def __init__(
        self,
        observation_size: int,
        action_size: int,
        *,
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
        outputs = 2 * action_size if state_dependent_std else action_size
        actor, self.critic = _mlp_weights(
            key,
            observation_size,
            hidden_sizes,
            outputs,
            0.01,
            critic_hidden_sizes,
            initialization,
        )
        self.actor, self.log_std = gaussian_scale_parameter(
            "MLPGaussianActorCritic",
            actor,
            action_size,
            state_dependent_std,
            std_parameterization,
            initial_log_std,
        )
        self.activation = activation
        self.action_size = action_size
        self.squash = squash
        self.std_parameterization = std_parameterization

    def __call__(
        self, observation: Array, action_mask: Bool[Array, " num_actions"] | None = None
    ) -> tuple[DiagonalGaussian, Float[Array, ""]]:
        del action_mask  # continuous actions have no mask
        features = jnp.ravel(observation).astype(jnp.float32)
        outputs = _forward(self.actor, self.activation, features)
        distribution = gaussian_head(
            outputs,
            self.log_std,
            self.action_size,
            self.std_parameterization,
            self.squash,
        )
        value = _forward(self.critic, self.activation, features)[0]
        return distribution, value

    def value(self, observation: Array) -> Float[Array, ""]:
        features = jnp.ravel(observation).astype(jnp.float32)
        return _forward(self.critic, self.activation, features)[0]

    @property
    def separate_critic(self) -> bool:
        """`True`: the actor and the critic are separate networks."""
        return True

    def critic_mask(self) -> PyTree[bool]:
        """`True` on the critic MLP's parameters."""
        return parameters_mask(self, lambda network: network.critic)
