"""Recurrent actor-critics: an observation encoder, Equinox's GRU or LSTM cell, and
actor and critic heads, stepping one observation at a time with a typed carry.

The carries are `_carries.py`'s, the cell's loop over a sequence
`_sequence_loop.py`'s; the public names among them (the `as` imports below) stay
importable from here, where they were defined before."""

import abc
import math
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.random as jr
from jaxtyping import Array, Bool, Float, PRNGKeyArray, PyTree

from .._filters import filter_scan
from ..distributions import (
    AbstractActionDistribution,
    DiagonalGaussian,
    MaskedCategorical,
)
from ..envs import AbstractSpace, Box, Discrete
from ._actor_critic import (
    AbstractActorCritic,
    StdParameterization,
    _forward,
    _linear_layers,
    action_head,
    gaussian_scale_parameter,
    parameters_mask,
)
from ._carries import (
    ActorCriticCarry as ActorCriticCarry,
    GRUCarry as GRUCarry,
    LSTMCarry as LSTMCarry,
    check_carry,
    reset_carry as reset_carry,
)
from ._init import orthogonal_matrices
from ._multi_input import ObservationEncoder
from ._sequence_loop import (
    _Core,
    _unroll_cores,
    sequence_batch_hint as sequence_batch_hint,
)


class AbstractRecurrentActorCritic(AbstractActorCritic):
    """An actor-critic with memory: `step(carry, observation, action_mask)` reads
    one observation with the carry of the steps before it and returns the next
    carry with the action distribution and the value.

    The reset convention, used everywhere in eqxrl: the carry a network reads an
    observation with is `initial_carry()` when that observation is the first of an
    episode (after `reset`, and after a terminated **or** truncated step, where
    `AutoReset` shows the next episode's first observation), and otherwise the
    carry it returned at the previous step.

    `__call__(observation)` and `value(observation)` are the first step of an
    episode (from `initial_carry()`), so code that checks an actor-critic's outputs
    on one observation works unchanged.
    """

    @abc.abstractmethod
    def initial_carry(self) -> PyTree[Array]:
        """One environment's carry at the start of an episode (no leading axes)."""

    @abc.abstractmethod
    def step(
        self,
        carry: PyTree[Array],
        observation: PyTree[Array],
        action_mask: Bool[Array, " num_actions"] | None = None,
    ) -> tuple[PyTree[Array], AbstractActionDistribution, Float[Array, ""]]:
        """One step of an episode: `(next_carry, distribution, value)`."""

    def step_value(
        self, carry: PyTree[Array], observation: PyTree[Array]
    ) -> Float[Array, ""]:
        """The value of `observation` read with `carry`."""
        return self.step(carry, observation)[2]

    def unroll(
        self,
        carry: PyTree[Array],
        observations: PyTree[Array],
        episode_start: Bool[Array, " num_steps"],
        action_masks: Bool[Array, "num_steps num_actions"] | None = None,
    ) -> tuple[PyTree[Array], AbstractActionDistribution, Float[Array, " num_steps"]]:
        """One environment's sequence of steps, from `carry`, resetting it to
        `initial_carry()` where `episode_start` is set: the same outputs as
        `step` in a loop (what PPO's update replays). A network can override it
        to batch the work that does not depend on the carry over the whole
        sequence.

        **Arguments:**

        - `carry`: the carry the first step reads (unless it starts an episode).
        - `observations`: `[num_steps, ...]` leaves.
        - `episode_start`: bool `[num_steps]`, set where an observation is the
          first of an episode.
        - `action_masks`: bool `[num_steps, num_actions]`, or `None`.

        **Returns:**

        `(carry, distributions, values)`: the carry after the last step, the
        distributions (leaves with a leading `num_steps` axis) and the values.
        """
        initial = self.initial_carry()

        def body(carry, inputs):
            observation, start, action_mask = inputs
            carry = reset_carry(carry, initial, start)
            carry, distribution, value = self.step(carry, observation, action_mask)
            return carry, (distribution, value)

        carry, (distributions, values) = filter_scan(
            body, carry, (observations, episode_start, action_masks)
        )
        return carry, distributions, values

    def __call__(
        self,
        observation: PyTree[Array],
        action_mask: Bool[Array, " num_actions"] | None = None,
    ) -> tuple[AbstractActionDistribution, Float[Array, ""]]:
        _, distribution, value = self.step(
            self.initial_carry(), observation, action_mask
        )
        return distribution, value

    def value(self, observation: PyTree[Array]) -> Float[Array, ""]:
        return self.step_value(self.initial_carry(), observation)

    @property
    def is_recurrent(self) -> bool:
        """`True`: the network carries a state from step to step."""
        return True


def _core(
    cell_type: type,
    space: AbstractSpace,
    keys: Sequence[str] | None,
    encoder_sizes: Sequence[int],
    hidden_size: int,
    activation: Callable[[Array], Array],
    key: PRNGKeyArray,
    layer_norm: bool = False,
) -> _Core:
    encoder_key, mlp_key, cell_key = jr.split(key, 3)
    encoder = ObservationEncoder(space, keys=keys, key=encoder_key)
    sizes = [encoder.num_features, *encoder_sizes]
    shapes = [(sizes[i + 1], sizes[i]) for i in range(len(sizes) - 1)]
    weights = (
        orthogonal_matrices(mlp_key, shapes, [math.sqrt(2.0)] * len(shapes))
        if shapes
        else []  # `encoder_sizes=()`: the cell reads the encoded observation
    )
    cell = cell_type(sizes[-1], hidden_size, key=cell_key)
    norms = [eqx.nn.LayerNorm(size) for size in encoder_sizes] if layer_norm else None
    return _Core(encoder, _linear_layers(sizes, weights), cell, activation, norms)


def _head(
    key: PRNGKeyArray,
    input_size: int,
    hidden_sizes: Sequence[int],
    outputs: int,
    gain: float,
) -> list[eqx.nn.Linear]:
    sizes = [input_size, *hidden_sizes, outputs]
    shapes = [(sizes[i + 1], sizes[i]) for i in range(len(sizes) - 1)]
    gains = [math.sqrt(2.0)] * len(hidden_sizes) + [gain]
    return _linear_layers(sizes, orthogonal_matrices(key, shapes, gains))


class AbstractCellActorCritic(AbstractRecurrentActorCritic):
    """The recurrent actor-critic of a cell type (GRU or LSTM)."""

    actor_core: _Core
    critic_core: _Core | None
    actor: list[eqx.nn.Linear]
    critic: list[eqx.nn.Linear]
    log_std: Float[Array, " action_size"] | None
    activation: Callable[[Array], Array] = eqx.field(static=True)
    action_size: int | None = eqx.field(static=True)
    squash: bool = eqx.field(static=True)
    std_parameterization: StdParameterization = eqx.field(static=True)

    # The cell class, set by each subclass (a class attribute, not a field).
    _cell_type: eqx.AbstractClassVar[type]

    def __init__(
        self,
        observation_space: AbstractSpace,
        action_space: AbstractSpace,
        *,
        hidden_size: int = 256,
        encoder_sizes: Sequence[int] = (256,),
        head_sizes: Sequence[int] = (256,),
        activation: Callable[[Array], Array] = jax.nn.tanh,
        actor_keys: Sequence[str] | None = None,
        critic_keys: Sequence[str] | None = None,
        state_dependent_std: bool = False,
        squash: bool = False,
        std_parameterization: StdParameterization = "log",
        initial_log_std: float | None = None,
        key: PRNGKeyArray,
    ):
        owner = type(self).__name__
        if not isinstance(hidden_size, int) or hidden_size < 1:
            raise ValueError(f"{owner}: hidden_size={hidden_size!r} must be positive.")
        for name, sizes in (
            ("encoder_sizes", encoder_sizes),
            ("head_sizes", head_sizes),
        ):
            if any(not isinstance(w, int) or w < 1 for w in sizes):
                raise ValueError(f"{owner}: {name}={tuple(sizes)} must be positive.")
        if isinstance(action_space, Discrete):
            if (
                state_dependent_std
                or squash
                or std_parameterization != "log"
                or (initial_log_std is not None)
            ):
                raise ValueError(
                    f"{owner}: state_dependent_std, squash, std_parameterization and "
                    "initial_log_std shape a Gaussian policy; the action space is "
                    "Discrete."
                )
            actor_outputs = action_space.num_values
            action_size = None
        elif isinstance(action_space, Box):
            action_size = max(math.prod(action_space.shape), 1)
            actor_outputs = 2 * action_size if state_dependent_std else action_size
        else:
            raise TypeError(
                f"{owner}: the action space must be Discrete or Box, got "
                f"{type(action_space).__name__}."
            )
        actor_core_key, critic_core_key, actor_key, critic_key = jr.split(key, 4)
        core = lambda keys, k: _core(  # noqa: E731
            self._cell_type,
            observation_space,
            keys,
            encoder_sizes,
            hidden_size,
            activation,
            k,
        )
        self.actor_core = core(actor_keys, actor_core_key)
        # One core unless the critic reads other keys than the actor (an
        # asymmetric actor-critic): the actor's carry must not remember what the
        # actor may not see.
        separate = actor_keys != critic_keys and not (
            actor_keys is not None
            and critic_keys is not None
            and tuple(actor_keys) == tuple(critic_keys)
        )
        self.critic_core = core(critic_keys, critic_core_key) if separate else None
        actor = _head(actor_key, hidden_size, head_sizes, actor_outputs, 0.01)
        self.critic = _head(critic_key, hidden_size, head_sizes, 1, 1.0)
        self.log_std = None
        if action_size is not None:
            actor, self.log_std = gaussian_scale_parameter(
                owner,
                actor,
                action_size,
                state_dependent_std,
                std_parameterization,
                initial_log_std,
            )
        self.actor = actor
        self.activation = activation
        self.action_size = action_size
        self.squash = squash
        self.std_parameterization = std_parameterization

    @classmethod
    def from_env(cls, env: Any, key: PRNGKeyArray, **options: Any) -> Any:
        """The network for an environment's spaces, with default sizes unless
        `options` say otherwise: a `network_factory` for PPO that checkpoints,
        configs and the CLI (`--network gru` / `lstm`) can name.

        **Arguments:**

        - `env`: the environment.
        - `key`: a PRNG key for the initial weights.
        - `**options`: keyword arguments of the constructor (e.g.
          `hidden_size=64`, `actor_keys=("state",)`); bind them with
          `functools.partial(GRUActorCritic.from_env, hidden_size=64)`.
        """
        return cls(env.observation_space, env.action_space, key=key, **options)

    def critic_mask(self) -> PyTree[bool]:
        """`True` on the critic's core (encoder and cell) and head, when the critic
        has a core of its own (`actor_keys` and `critic_keys` differ); with one
        core for both, `NotImplementedError`."""
        if self.critic_core is None:
            raise NotImplementedError(
                f"{type(self).__name__}: the actor and the critic read one core "
                "(the same keys), which belongs to both; give them different "
                "actor_keys and critic_keys for a critic of its own."
            )
        return parameters_mask(
            self, lambda network: (network.critic_core, network.critic)
        )

    def initial_carry(self) -> GRUCarry | LSTMCarry | ActorCriticCarry:
        """Zeros (as PureJaxRL's and Flax's cells start): one environment's carry."""
        actor = self.actor_core.initial_carry()
        if self.critic_core is None:
            return actor
        return ActorCriticCarry(actor=actor, critic=self.critic_core.initial_carry())

    def step(
        self,
        carry: GRUCarry | LSTMCarry | ActorCriticCarry,
        observation: PyTree[Array],
        action_mask: Bool[Array, " num_actions"] | None = None,
    ) -> tuple[
        GRUCarry | LSTMCarry | ActorCriticCarry,
        MaskedCategorical | DiagonalGaussian,
        Float[Array, ""],
    ]:
        check_carry(type(self).__name__, carry, self.initial_carry())
        if self.critic_core is None:
            carry, features = self.actor_core(carry, observation)
            critic_features = features
        else:
            actor_carry, features = self.actor_core(carry.actor, observation)
            critic_carry, critic_features = self.critic_core(carry.critic, observation)
            carry = ActorCriticCarry(actor=actor_carry, critic=critic_carry)
        distribution, value = self._heads(features, critic_features, action_mask)
        return carry, distribution, value

    def unroll(
        self,
        carry: GRUCarry | LSTMCarry | ActorCriticCarry,
        observations: PyTree[Array],
        episode_start: Bool[Array, " num_steps"],
        action_masks: Bool[Array, "num_steps num_actions"] | None = None,
    ) -> tuple[
        GRUCarry | LSTMCarry | ActorCriticCarry,
        MaskedCategorical | DiagonalGaussian,
        Float[Array, " num_steps"],
    ]:
        """As `step` in a loop, with the encoders, the cells' input projections
        and the heads run on the whole sequence at once: only the cells'
        recurrent products (actor's and critic's in one loop) step one
        observation at a time."""
        check_carry(type(self).__name__, carry, self.initial_carry())
        if self.critic_core is None:
            carry, features = self.actor_core.unroll(carry, observations, episode_start)
            critic_features = features
        else:
            (actor_carry, critic_carry), (features, critic_features) = _unroll_cores(
                (self.actor_core, self.critic_core),
                (carry.actor, carry.critic),
                observations,
                episode_start,
            )
            carry = ActorCriticCarry(actor=actor_carry, critic=critic_carry)
        distributions, values = jax.vmap(self._heads)(
            features, critic_features, action_masks
        )
        return carry, distributions, values

    def _heads(
        self,
        features: Float[Array, " hidden_size"],
        critic_features: Float[Array, " hidden_size"],
        action_mask: Bool[Array, " num_actions"] | None,
    ) -> tuple[MaskedCategorical | DiagonalGaussian, Float[Array, ""]]:
        distribution = action_head(
            _forward(self.actor, self.activation, features),
            action_mask,
            self.log_std,
            self.action_size,
            self.std_parameterization,
            self.squash,
        )
        value = _forward(self.critic, self.activation, critic_features)[0]
        return distribution, value


class GRUActorCritic(AbstractCellActorCritic):
    """A recurrent actor-critic with Equinox's GRU cell (`eqx.nn.GRUCell`).

    Each step encodes the observation
    ([`ObservationEncoder`][eqxrl.nn.ObservationEncoder]: flattened `Box` leaves,
    one-hot `Discrete` leaves, a CNN for images), runs it through an MLP
    (`encoder_sizes`), updates the GRU's hidden state, and reads the hidden state
    with an actor head (masked categorical logits for `Discrete` actions, a
    diagonal Gaussian for `Box`) and a critic head. The defaults (a 256-wide tanh
    embedding, a 256-unit GRU, 256-wide tanh heads) are what learned
    `StatelessCartPole-v1` at PPO's defaults (see [Memory](../memory.md#figures));
    PureJaxRL's `ppo_rnn.py` network is `hidden_size=128, encoder_sizes=(128,),
    head_sizes=(128,), activation=jax.nn.relu`.
    With `critic_keys` other than `actor_keys` (a `Dict` observation), the critic
    has an encoder and a GRU of its own, and the carry is an
    [`ActorCriticCarry`][eqxrl.nn.ActorCriticCarry].

    The carry is a [`GRUCarry`][eqxrl.nn.GRUCarry]; `step` refuses one of another
    shape at trace time, naming both. The reset convention is
    [`AbstractRecurrentActorCritic`][eqxrl.nn.AbstractRecurrentActorCritic]'s.

    **Arguments:**

    - `observation_space`: the environment's observation space.
    - `action_space`: its action space (`Discrete` or `Box`).
    - `hidden_size`: units of the GRU.
    - `encoder_sizes`: widths of the MLP between the encoder and the GRU.
    - `head_sizes`: widths of the actor's and the critic's hidden layers.
    - `activation`: activation of the MLP layers (default `tanh`, as PPO's default
      network's; PureJaxRL's `ppo_rnn.py` uses ReLU).
    - `actor_keys`, `critic_keys`: the `Dict` keys each reads (`None`: all).
    - `state_dependent_std`, `squash`, `std_parameterization`, `initial_log_std`:
      the Gaussian head of a `Box` action space, as in
      [`MLPGaussianActorCritic`][eqxrl.nn.MLPGaussianActorCritic].
    - `key`: a PRNG key for the initial weights.

    !!! example

        ```python
        env = eqxrl.envs.make("StatelessCartPole-v1")
        ppo = eqxrl.PPO(env=env, network_factory=eqxrl.nn.GRUActorCritic.from_env)
        network = eqxrl.nn.GRUActorCritic.from_env(env, jax.random.key(0))
        carry = network.initial_carry()  # GRUCarry(hidden=f32[256])
        carry, distribution, value = network.step(carry, jnp.zeros(2))
        ```
    """

    _cell_type = eqx.nn.GRUCell


class LSTMActorCritic(AbstractCellActorCritic):
    """A recurrent actor-critic with Equinox's LSTM cell (`eqx.nn.LSTMCell`):
    [`GRUActorCritic`][eqxrl.nn.GRUActorCritic] with an LSTM, whose carry is an
    [`LSTMCarry`][eqxrl.nn.LSTMCarry] (hidden and cell vectors).

    **Arguments:** as [`GRUActorCritic`][eqxrl.nn.GRUActorCritic]'s.
    """

    _cell_type = eqx.nn.LSTMCell
