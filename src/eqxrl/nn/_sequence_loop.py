"""A recurrent core (an observation encoder, an MLP, then a GRU or LSTM cell) and its
loop over a whole sequence: what does not depend on the carry runs on the sequence
at once, the loop holds only the cells' recurrent products, and its backward pass is
written by hand (`_recurrent_loop`, a `jax.custom_vjp`). Also the hints that set
how many steps each loop iteration runs (`sequence_batch_hint`,
`sequence_unroll_steps`) and whether its gates are split per gate
(`_gates_per_gate`), CPU speed tricks."""

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, PyTree

from .._speed_tricks import cpu_speed_tricks_apply
from ._carries import GRUCarry, LSTMCarry, reset_carry
from ._multi_input import ObservationEncoder


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
