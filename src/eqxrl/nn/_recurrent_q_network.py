"""Recurrent Q-networks: one value per action from the observations of an episode so
far, stepping one observation at a time with a typed carry."""

import abc
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
from jaxtyping import Array, Bool, Float, PRNGKeyArray, PyTree

from .._filters import filter_scan
from ..envs import AbstractSpace
from ._carries import GRUCarry, check_carry, reset_carry
from ._q_networks import AbstractQNetwork, _apply_linear, _check_sizes
from ._recurrent import _core, _head
from ._sequence_loop import _Core, _unroll_cores


class AbstractRecurrentQNetwork(AbstractQNetwork):
    """A Q-network with memory: `step(carry, observation)` reads one observation
    with the carry of the steps before it and returns the next carry with one value
    per action.

    The reset convention is the actor-critics' (see
    [`AbstractRecurrentActorCritic`][eqxrl.nn.AbstractRecurrentActorCritic]): the
    carry a network reads an observation with is `initial_carry()` when that
    observation is the first of an episode, and otherwise the carry it returned at
    the previous step.

    `q_values(observation, key)` is the first step of an episode (from
    `initial_carry()`), so code written for feed-forward Q-networks runs unchanged;
    it sees no memory, so an algorithm that learns one must replay sequences with
    `unroll`.
    """

    @abc.abstractmethod
    def initial_carry(self) -> PyTree[Array]:
        """One environment's carry at the start of an episode (no leading axes)."""

    @abc.abstractmethod
    def step(
        self, carry: PyTree[Array], observation: PyTree[Array]
    ) -> tuple[PyTree[Array], Float[Array, " num_actions"]]:
        """One step of an episode: `(next_carry, q_values)`."""

    def unroll(
        self,
        carry: PyTree[Array],
        observations: PyTree[Array],
        episode_start: Bool[Array, " num_steps"],
    ) -> tuple[PyTree[Array], Float[Array, "num_steps num_actions"]]:
        """One environment's sequence of steps, from `carry`, resetting it to
        `initial_carry()` where `episode_start` is set: the same outputs as `step`
        in a loop. A network can override it to batch the work that does not
        depend on the carry over the whole sequence.

        **Arguments:**

        - `carry`: the carry the first step reads (unless it starts an episode).
        - `observations`: `[num_steps, ...]` leaves.
        - `episode_start`: bool `[num_steps]`, set where an observation is the
          first of an episode.

        **Returns:**

        `(carry, q_values)`: the carry after the last step and float32
        `[num_steps, num_actions]` action values.
        """
        initial = self.initial_carry()

        def body(carry, inputs):
            observation, start = inputs
            return self.step(reset_carry(carry, initial, start), observation)

        return filter_scan(body, carry, (observations, episode_start))

    def q_values(
        self, observation: PyTree[Array], key: PRNGKeyArray
    ) -> Float[Array, " num_actions"]:
        """The action values of `observation` as the first of an episode."""
        del key
        return self.step(self.initial_carry(), observation)[1]

    @property
    def is_recurrent(self) -> bool:
        """`True`: the network carries a state from step to step."""
        return True


class GRUQNetwork(AbstractRecurrentQNetwork):
    """A recurrent Q-network with Equinox's GRU cell (`eqx.nn.GRUCell`): JaxMARL's
    recurrent Q-learning agent (`Dense(64) + ReLU -> GRU(64) -> Dense(actions)`)
    at the defaults.

    Each step encodes the observation
    ([`ObservationEncoder`][eqxrl.nn.ObservationEncoder]: flattened `Box` leaves,
    one-hot `Discrete` leaves, a CNN for images), runs it through an MLP
    (`encoder_sizes`), updates the GRU's hidden state and reads one value per
    action from it with a linear head. The encoder, the MLP and the GRU are the
    cores of [`GRUActorCritic`][eqxrl.nn.GRUActorCritic]; `unroll` likewise runs
    everything but the GRU's recurrent product on the whole sequence at once.

    The carry is a [`GRUCarry`][eqxrl.nn.GRUCarry] (zeros at an episode's start);
    `step` and `unroll` refuse one of another shape at trace time, naming both.

    **Arguments:**

    - `observation_space`: the environment's observation space.
    - `num_actions`: number of discrete actions.
    - `hidden_size`: units of the GRU.
    - `encoder_sizes`: widths of the MLP between the encoder and the GRU (`()`:
      the GRU reads the encoded observation).
    - `activation`: activation of the MLP layers (default ReLU).
    - `layer_norm`: normalize each MLP layer's output (`eqx.nn.LayerNorm`, with a
      learned scale and shift) before its activation, as purejaxql's PQN-RNN
      network does: what keeps PQN's bootstrapped targets stable without a
      target network.
    - `key`: a PRNG key for the initial weights.

    !!! example

        ```python
        env = eqxrl.envs.make("StatelessCartPole-v1")
        network = eqxrl.nn.GRUQNetwork.from_env(env, jax.random.key(0))
        carry = network.initial_carry()  # GRUCarry(hidden=f32[64])
        carry, q = network.step(carry, jnp.zeros(2))  # q: shape [2]
        starts = jnp.array([True, False, False, True, False])
        carry, qs = network.unroll(carry, jnp.zeros((5, 2)), starts)  # [5, 2]
        ```
    """

    core: _Core
    head: eqx.nn.Linear

    def __init__(
        self,
        observation_space: AbstractSpace,
        num_actions: int,
        *,
        hidden_size: int = 64,
        encoder_sizes: Sequence[int] = (64,),
        activation: Callable[[Array], Array] = jax.nn.relu,
        layer_norm: bool = False,
        key: PRNGKeyArray,
    ):
        _check_sizes(
            "GRUQNetwork",
            num_actions=num_actions,
            hidden_size=hidden_size,
            encoder_sizes=tuple(encoder_sizes),
        )
        core_key, head_key = jax.random.split(key)
        self.core = _core(
            eqx.nn.GRUCell,
            observation_space,
            None,
            encoder_sizes,
            hidden_size,
            activation,
            core_key,
            layer_norm=layer_norm,
        )
        # Orthogonal with gain 1 and zero bias, as JaxMARL's Q head.
        (self.head,) = _head(head_key, hidden_size, (), num_actions, 1.0)

    @classmethod
    def from_env(cls, env: Any, key: PRNGKeyArray, **options: Any) -> "GRUQNetwork":
        """The network for an environment's spaces (a `Discrete` action space),
        with default sizes unless `options` say otherwise: a `network_factory`.

        **Arguments:**

        - `env`: the environment.
        - `key`: a PRNG key for the initial weights.
        - `**options`: keyword arguments of the constructor (e.g.
          `hidden_size=128`); bind them with
          `functools.partial(GRUQNetwork.from_env, hidden_size=128)`.
        """
        return cls(
            env.observation_space, env.action_space.num_values, key=key, **options
        )

    def initial_carry(self) -> GRUCarry:
        """Zeros (as JaxMARL's and Flax's cells start): one environment's carry."""
        return self.core.initial_carry()  # pyright: ignore[reportReturnType]

    # The carry is typed loosely so that `check_carry`, not the runtime type
    # checker, refuses another one, with a message that says how to fix it.
    def step(
        self, carry: PyTree[Array], observation: PyTree[Array]
    ) -> tuple[GRUCarry, Float[Array, " num_actions"]]:
        check_carry(type(self).__name__, carry, self.initial_carry())
        carry, hidden = self.core(carry, observation)
        return carry, _apply_linear(self.head, hidden)

    def unroll(
        self,
        carry: PyTree[Array],
        observations: PyTree[Array],
        episode_start: Bool[Array, " num_steps"],
    ) -> tuple[GRUCarry, Float[Array, "num_steps num_actions"]]:
        """As `step` in a loop, with the encoder, the GRU's input projection and
        the head run on the whole sequence at once."""
        check_carry(type(self).__name__, carry, self.initial_carry())
        (carry,), (hidden,) = _unroll_cores(
            (self.core,), (carry,), observations, episode_start
        )
        return carry, _apply_linear(self.head, hidden)

    @property
    def num_actions(self) -> int:
        """Number of discrete actions."""
        return self.head.out_features  # pyright: ignore[reportReturnType]
