"""Recurrent actor-critics: an observation encoder, Equinox's GRU or LSTM cell, and
actor and critic heads, stepping one observation at a time with a typed carry."""

import abc
import contextlib
import contextvars
import functools
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Bool, Float, PRNGKeyArray, PyTree

from .._filters import filter_scan
from .._speed_tricks import cpu_speed_tricks_apply
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
from ._init import orthogonal_matrices
from ._multi_input import ObservationEncoder


class GRUCarry(eqx.Module):
    """The recurrent state of a GRU: its hidden vector.

    One environment's carry is `[hidden_size]`; a batch of them (e.g. one per
    environment of a rollout) has leading axes, `[num_envs, hidden_size]`.

    **Arguments:**

    - `hidden`: float32 `[*batch, hidden_size]`.
    """

    hidden: Float[Array, "*batch hidden_size"]


class LSTMCarry(eqx.Module):
    """The recurrent state of an LSTM: its hidden and cell vectors.

    **Arguments:**

    - `hidden`: float32 `[*batch, hidden_size]`.
    - `cell`: float32 `[*batch, hidden_size]`.
    """

    hidden: Float[Array, "*batch hidden_size"]
    cell: Float[Array, "*batch hidden_size"]


class ActorCriticCarry(eqx.Module):
    """The carry of an actor-critic whose actor and critic have a recurrent core
    each (an asymmetric network: the critic reads what the actor must not).

    **Arguments:**

    - `actor`: the actor core's carry.
    - `critic`: the critic core's carry.
    """

    actor: GRUCarry | LSTMCarry
    critic: GRUCarry | LSTMCarry


def reset_carry(
    carry: PyTree[Array],
    initial: PyTree[Array],
    episode_start: Bool[Array, ""],
) -> PyTree[Array]:
    """`initial` where an episode starts, else `carry` (one environment; vmap it
    over a batch).

    **Arguments:**

    - `carry`: the carry the network returned at the previous step.
    - `initial`: the network's `initial_carry()`.
    - `episode_start`: bool scalar, `True` when the observation about to be read is
      the first of an episode.

    **Returns:**

    The carry to read that observation with.
    """
    return jax.tree.map(lambda c, i: jnp.where(episode_start, i, c), carry, initial)


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


def check_carry(owner: str, carry: Any, expected: Any) -> None:
    """A `ValueError` naming the carry's type and both shapes when `carry` is not
    shaped as `expected` (checked at trace time: shapes are static)."""

    def describe(tree: Any) -> str:
        shapes = ", ".join(
            f"{name}={list(np.shape(leaf))}" for name, leaf in _named_leaves(tree)
        )
        return f"{type(tree).__name__}({shapes})"

    def signature(tree: Any) -> list[tuple[str, tuple[int, ...]]]:
        # np.shape: static under every tracer (jax2onnx's tracing patches
        # jnp.shape to return an array).
        return [(name, np.shape(leaf)) for name, leaf in _named_leaves(tree)]

    if type(carry) is not type(expected) or signature(carry) != signature(expected):
        raise ValueError(
            f"{owner}.step: the carry is {describe(carry)}, but this network "
            f"reads one environment's {describe(expected)} (batch carries with "
            "jax.vmap, and start each episode from initial_carry())."
        )


def _named_leaves(tree: Any) -> list[tuple[str, Any]]:
    return [
        (jax.tree_util.keystr(path, simple=True, separator="."), leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
    ]


class _Core(eqx.Module):
    """Encoder, MLP, then a recurrent cell: the features a head reads."""

    encoder: ObservationEncoder
    layers: list[eqx.nn.Linear]
    cell: eqx.nn.GRUCell | eqx.nn.LSTMCell
    activation: Callable[[Array], Array] = eqx.field(static=True)
    # LayerNorm of each MLP layer's output before its activation (PQN-RNN's).
    layer_norms: list[eqx.nn.LayerNorm] | None = None

    def initial_carry(self) -> GRUCarry | LSTMCarry:
        zeros = jnp.zeros(self.cell.hidden_size, jnp.float32)
        if isinstance(self.cell, eqx.nn.LSTMCell):
            return LSTMCarry(hidden=zeros, cell=zeros)
        return GRUCarry(hidden=zeros)

    def __call__(
        self, carry: GRUCarry | LSTMCarry, observation: PyTree[Array]
    ) -> tuple[GRUCarry | LSTMCarry, Float[Array, " hidden_size"]]:
        return self.recur(carry, self.encode(observation))

    def encode(self, observation: PyTree[Array]) -> Float[Array, " features"]:
        """The cell's input: what does not depend on the carry."""
        features = self.encoder(observation).astype(jnp.float32)
        for index, layer in enumerate(self.layers):
            features = layer(features)
            if self.layer_norms is not None:
                features = self.layer_norms[index](features)
            features = self.activation(features)
        return features

    def recur(
        self, carry: GRUCarry | LSTMCarry, features: Float[Array, " features"]
    ) -> tuple[GRUCarry | LSTMCarry, Float[Array, " hidden_size"]]:
        """One step of the cell (as `eqx.nn.GRUCell` / `eqx.nn.LSTMCell`)."""
        return self.recur_from_gates(carry, self.input_gates(features))

    def input_gates(
        self, features: Float[Array, "*num_steps features"]
    ) -> Float[Array, "*num_steps gates"]:
        """The cell's input projection (`weight_ih @ x + bias`) of one step or of
        a whole sequence: the part of its step that does not depend on the
        carry."""
        gates = features @ self.cell.weight_ih.T
        if self.cell.use_bias:
            gates = gates + jnp.broadcast_to(self.cell.bias, gates.shape)
        return gates

    def recurrent_parameters(self, per_gate: bool = False) -> tuple:
        """What the cell multiplies its carry with: `weight_hh` (whole, or split
        into one `[hidden_size, hidden_size]` matrix per gate, see
        `_gates_per_gate`) and the GRU's `bias_n` (`None` for an LSTM, or
        without bias)."""
        weights = self.cell.weight_hh
        if per_gate:
            weights = tuple(jnp.split(weights, self.num_gates, axis=0))
        bias_new = None
        if isinstance(self.cell, eqx.nn.GRUCell) and self.cell.use_bias:
            bias_new = self.cell.bias_n
        return weights, bias_new

    @property
    def num_gates(self) -> int:
        return 4 if isinstance(self.cell, eqx.nn.LSTMCell) else 3

    def recur_from_gates(
        self,
        carry: GRUCarry | LSTMCarry,
        gates: Float[Array, " gates"] | tuple[Float[Array, " hidden_size"], ...],
    ) -> tuple[GRUCarry | LSTMCarry, Float[Array, " hidden_size"]]:
        """`recur` given `input_gates` of its features: the arithmetic of
        `eqx.nn.GRUCell` and `eqx.nn.LSTMCell`, less their input projection."""
        recurrent = recurrent_products(self.recurrent_parameters(), carry.hidden)
        return update_cell(carry, gates, recurrent)

    def unroll(
        self,
        carry: GRUCarry | LSTMCarry,
        observations: PyTree[Array],
        episode_start: Bool[Array, " num_steps"],
    ) -> tuple[GRUCarry | LSTMCarry, Float[Array, "num_steps hidden_size"]]:
        """The cell over a sequence (see `_unroll_cores`)."""
        (carry,), (hidden,) = _unroll_cores(
            (self,), (carry,), observations, episode_start
        )
        return carry, hidden


# Loop steps per iteration of the scans over a sequence: fewer, larger loop bodies
# (less loop overhead in the forward pass and in backpropagation through time).
_UNROLL_STEPS = 4
# On CPU, where the gates are split per gate (`_gates_per_gate`), 2: with 4 the
# backward loop's stores of the per-gate gradients cost more than the loop
# overhead saved (against 4, 5-7 alternating pairs each: MAPPO's recurrent config
# 1.06x, recurrent PPO with 4 sequences per minibatch 1.06x, PQN-RNN 1.08x).
_CPU_UNROLL_STEPS = 2
# On CPU, from this many sequences unrolled together a step's arithmetic outweighs
# the loop overhead that unrolling saves, and the plain loop is faster: QMIX's
# recurrent agents (32 sequences x 3 agents, hidden size 64), whole runs of 300k
# steps against JaxMARL's: 1.24x plain, 1.07x unrolled 2 steps (5 pairs).
_MANY_SEQUENCES = 64
# On CPU, below this many sequences unrolled together, the unrolled loop is slower
# than the plain one. Recurrent PPO on CartPole, unrolled against plain: 0.68x with
# one sequence per minibatch (PureJaxRL's config), 1.20x with 2, 1.19x with 4 (5
# alternating pairs each); MAPPO's 24 and more sequences, 1.19x.
_MIN_SEQUENCES_TO_UNROLL = 2

_SEQUENCES: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "eqxrl_sequence_batch_hint", default=None
)


@contextlib.contextmanager
def sequence_batch_hint(num_sequences: int | None) -> Iterator[None]:
    """Trace-time hint: the recurrent networks traced inside unroll
    `num_sequences` sequences together (vmapped over them; `None`: unknown, the
    default). A CPU-only speed-up; it changes no result beyond float rounding.

    A sequence's loop over its steps (`unroll`, and the learners'
    backpropagation through time) runs several steps per loop iteration (4; 2 on
    the CPU backend, where the gates are split per gate), which pays from 2
    sequences on (recurrent PPO on CartPole with 2 or 4 sequences per minibatch:
    1.2x faster per iteration; MAPPO's 24 and more: 1.19x). On the CPU backend, a
    single sequence runs one step per loop iteration instead: recurrent PPO at
    PureJaxRL's CartPole config (one sequence per minibatch) measured 1.47x faster
    so. So do 64 or more sequences, whose steps' arithmetic outweighs the loop's
    overhead (recurrent QMIX's 96, whole runs against JaxMARL's: 1.24x its steps/s
    so, 1.07x with 2 steps per iteration). Other backends always run 4. PPO and
    PQN trace their minibatch gradients under `sequence_batch_hint(sequences per
    minibatch)`, recurrent VDN and QMIX theirs under the minibatch's sequences
    times the agents sharing the network. Like
    [`batch_size_hint`][eqxrl.nn.batch_size_hint], the hint cannot see a `vmap`
    outside the traced function (over agents, or seeds).

    **Arguments:**

    - `num_sequences`: how many sequences the traced network is vmapped over.

    !!! example

        ```python
        with eqxrl.nn.sequence_batch_hint(1):
            grads = jax.vmap(loss_grad, in_axes=(None, 0))(model, sequences)
        ```
    """
    token = _SEQUENCES.set(num_sequences)
    try:
        yield
    finally:
        _SEQUENCES.reset(token)


def sequence_unroll_steps() -> int:
    """Loop steps per iteration of a scan over a sequence (see
    `sequence_batch_hint`)."""
    if not cpu_speed_tricks_apply():
        return _UNROLL_STEPS
    num_sequences = _SEQUENCES.get()
    if num_sequences is not None and not (
        _MIN_SEQUENCES_TO_UNROLL <= num_sequences < _MANY_SEQUENCES
    ):
        return 1
    return _CPU_UNROLL_STEPS


def _gates_per_gate() -> bool:
    """Whether a sequence's loop reads its input gates and recurrent weights
    split per gate: on CPU (a CPU speed trick, `cpu_speed_tricks`).

    XLA's CPU fusion emitter runs a fused loop holding more than one sigmoid or
    tanh element by element when it reads column slices of one scanned array, as
    a step's gates are of a `[num_steps, gates]` projection; each gate its own
    scanned array, the same arithmetic is vectorised (a GRU step of 96 rows and
    hidden size 64, forward: 43 instead of 124 us). The recurrent products split
    too keep backpropagation from joining the gates' gradients at every step.
    Measured with the 2-step unroll (`sequence_unroll_steps`) in
    `docs/performance.md`; the same arithmetic."""
    return cpu_speed_tricks_apply()


def gates_per_step(
    core: _Core, gates: Float[Array, "num_steps gates"]
) -> Float[Array, "num_steps gates"] | tuple[Float[Array, "num_steps hidden"], ...]:
    """A sequence's input gates as the loop over its steps reads them: on CPU,
    split into one `[num_steps, hidden_size]` array per gate (see
    `_gates_per_gate`); elsewhere whole."""
    if not _gates_per_gate():
        return gates
    return tuple(jnp.split(gates, core.num_gates, axis=-1))


def recurrent_products(
    parameters: tuple, hidden: Float[Array, " hidden_size"]
) -> tuple[Float[Array, " hidden_size"], ...]:
    """A cell's recurrent pre-activations, one `[hidden_size]` array per gate:
    `weight_hh @ hidden`, plus the GRU's `bias_n` on its new-state gate.
    `parameters` are `_Core.recurrent_parameters`."""
    weights, bias_new = parameters
    if isinstance(weights, tuple):
        products = tuple(weight @ hidden for weight in weights)
    else:
        products = tuple(
            jnp.split(weights @ hidden, weights.shape[0] // hidden.shape[-1])
        )
    if bias_new is not None:
        products = (*products[:-1], products[-1] + bias_new)
    return products


def update_cell(
    carry: GRUCarry | LSTMCarry,
    gates: Float[Array, " gates"] | tuple[Float[Array, " hidden_size"], ...],
    recurrent: tuple[Float[Array, " hidden_size"], ...],
) -> tuple[GRUCarry | LSTMCarry, Float[Array, " hidden_size"]]:
    """The elementwise part of a step of `eqx.nn.GRUCell` or `eqx.nn.LSTMCell`:
    the next carry and hidden vector from the input gates (`weight_ih @ x +
    bias`, whole or per gate) and `recurrent_products` of the carry."""
    if not isinstance(gates, tuple):
        gates = tuple(jnp.split(gates, len(recurrent)))
    if isinstance(carry, LSTMCarry):
        i, f, g, o = (x + h for x, h in zip(gates, recurrent))
        memory = jax.nn.sigmoid(f) * carry.cell + jax.nn.sigmoid(i) * jnp.tanh(g)
        hidden = jax.nn.sigmoid(o) * jnp.tanh(memory)
        return LSTMCarry(hidden=hidden, cell=memory), hidden
    input_reset, input_update, input_new = gates
    hidden_reset, hidden_update, hidden_new = recurrent
    reset = jax.nn.sigmoid(input_reset + hidden_reset)
    update = jax.nn.sigmoid(input_update + hidden_update)
    new = jnp.tanh(input_new + reset * hidden_new)
    hidden = new + update * (carry.hidden - new)
    return GRUCarry(hidden=hidden), hidden


def _unroll_cores(
    cores: tuple[_Core, ...],
    carries: tuple[GRUCarry | LSTMCarry, ...],
    observations: PyTree[Array],
    episode_start: Bool[Array, " num_steps"],
) -> tuple[tuple[GRUCarry | LSTMCarry, ...], tuple[Array, ...]]:
    """Cores (an actor's and a critic's) over one sequence in a single loop.

    What does not depend on the carry runs on the whole sequence at once, outside
    the loop: the encoders, the MLPs and the cells' input projections (so their
    gradients are one matrix product each, not one per step). The loop holds only
    the cells' recurrent products, `unroll`ed `sequence_unroll_steps()` steps at a
    time, and its backpropagation (`_recurrent_loop`) only what flows back
    through the carry: the gradients of the recurrent weights are one product
    over the whole sequence, after the loop.
    """
    per_gate = _gates_per_gate()
    gates = tuple(
        gates_per_step(core, core.input_gates(jax.vmap(core.encode)(observations)))
        for core in cores
    )
    parameters = tuple(core.recurrent_parameters(per_gate) for core in cores)
    initials = tuple(core.initial_carry() for core in cores)
    return _recurrent_loop(
        sequence_unroll_steps(), parameters, gates, carries, initials, episode_start
    )


def _loop_step(parameters, carries, initials, gates, start):
    """One step of every core: the carries reset to `initials` where an episode
    starts, their recurrent products, and the cells' update. Also returns what
    backpropagation reads again: the carries the step read and the products."""
    carries_in = tuple(reset_carry(c, i, start) for c, i in zip(carries, initials))
    products = tuple(
        recurrent_products(p, c.hidden) for p, c in zip(parameters, carries_in)
    )
    outputs = tuple(
        update_cell(c, g, r) for c, g, r in zip(carries_in, gates, products)
    )
    return outputs, carries_in, products


def _forward_loop(
    unroll, parameters, gates, carries, initials, starts, residuals: bool
):
    def body(carries, inputs):
        outputs, carries_in, products = _loop_step(
            parameters, carries, initials, *inputs
        )
        new_carries = tuple(c for c, _ in outputs)
        hidden = tuple(h for _, h in outputs)
        return new_carries, (hidden, carries_in, products) if residuals else hidden

    return jax.lax.scan(body, carries, (gates, starts), unroll=unroll)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _recurrent_loop(unroll, parameters, gates, carries, initials, starts):
    """The cores' loop over a sequence, from `carries`, each core's carry reset to
    its `initials` (`initial_carry()`) where `starts` says an episode starts: the
    final carries, and every step's hidden vector per core.

    Its gradient is backpropagation through time with the recurrent weights'
    gradients taken out of the loop: the backward loop carries only the carries'
    cotangents and records each step's cotangent of the recurrent products; the
    weights' gradient is then one product over the whole sequence (XLA's
    transpose of a scan adds a step's outer product into the weights' gradient
    at every step instead). The same sums, in another order."""
    return _forward_loop(unroll, parameters, gates, carries, initials, starts, False)


def _recurrent_loop_forward(unroll, parameters, gates, carries, initials, starts):
    final, (hidden, carries_in, products) = _forward_loop(
        unroll, parameters, gates, carries, initials, starts, True
    )
    return (final, hidden), (parameters, gates, carries_in, products, initials, starts)


def _recurrent_loop_backward(unroll, residuals, cotangents):
    parameters, gates, carries_in, products, initials, starts = residuals
    final_cotangent, hidden_cotangent = cotangents

    def body(loop_cotangents, inputs):
        carry_cotangents, initial_cotangents = loop_cotangents
        gates, carries_in, products, start, hidden_cotangents = inputs
        step_cotangents = []
        product_cotangents = []
        reset_cotangents = []
        for p, g, c, r, dc, dh in zip(
            parameters,
            gates,
            carries_in,
            products,
            carry_cotangents,
            hidden_cotangents,
        ):
            _, cell_vjp = jax.vjp(update_cell, c, g, r)
            dc_in, dg, dr = cell_vjp((dc, dh))
            # Through the carry's products; the weights' share waits for the loop's end.
            _, products_vjp = jax.vjp(lambda h: recurrent_products(p, h), c.hidden)
            (dh_in,) = products_vjp(dr)
            dc_in = eqx.tree_at(lambda c: c.hidden, dc_in, dc_in.hidden + dh_in)
            # Where an episode starts, the step read the initial carry, not the
            # previous step's: the cotangent goes there instead.
            zeros = jax.tree.map(jnp.zeros_like, dc_in)
            step_cotangents.append((reset_carry(dc_in, zeros, start), dg))
            reset_cotangents.append(reset_carry(zeros, dc_in, start))
            product_cotangents.append(dr)
        new_carry_cotangents = tuple(dc for dc, _ in step_cotangents)
        gate_cotangents = tuple(dg for _, dg in step_cotangents)
        initial_cotangents = jax.tree.map(
            jnp.add, initial_cotangents, tuple(reset_cotangents)
        )
        return (new_carry_cotangents, initial_cotangents), (
            gate_cotangents,
            tuple(product_cotangents),
        )

    no_cotangents = jax.tree.map(jnp.zeros_like, initials)
    (carry_cotangents, initial_cotangents), (gate_cotangents, product_cotangents) = (
        jax.lax.scan(
            body,
            (final_cotangent, no_cotangents),
            (gates, carries_in, products, starts, hidden_cotangent),
            reverse=True,
            unroll=unroll,
        )
    )
    parameter_cotangents = tuple(
        _sequence_parameter_cotangent(p, c.hidden, dr)
        for p, c, dr in zip(parameters, carries_in, product_cotangents)
    )
    return (
        parameter_cotangents,
        gate_cotangents,
        carry_cotangents,
        initial_cotangents,
        None,
    )


def _sequence_parameter_cotangent(parameters, hidden, product_cotangents):
    """The recurrent parameters' gradient over a whole sequence, from the hidden
    vectors each step multiplied (`[num_steps, hidden_size]`) and the cotangents
    of its products: one matrix product over the steps."""
    _, vjp = jax.vjp(
        lambda p: jax.vmap(recurrent_products, (None, 0))(p, hidden), parameters
    )
    (cotangent,) = vjp(product_cotangents)
    return cotangent


_recurrent_loop.defvjp(_recurrent_loop_forward, _recurrent_loop_backward)


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
