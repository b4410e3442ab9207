"""The one switch for eqxrl's CPU-tuned speed tricks."""

import contextlib
import contextvars
from collections.abc import Iterator

import jax

_FORCED: contextvars.ContextVar[bool | None] = contextvars.ContextVar(
    "eqxrl_cpu_speed_tricks", default=None
)


@contextlib.contextmanager
def cpu_speed_tricks(enabled: bool | None = True) -> Iterator[None]:
    """Trace-time switch for the speed tricks tuned on the CPU: on wherever the
    programs traced inside run (`True`), nowhere (`False`), or on the CPU backend
    only (`None`, what happens outside this context).

    The tricks change no result beyond float rounding (the random streams are bit
    for bit the same, or the same distribution for the minibatch shuffle), only
    speed. They are listed in the [Performance](../performance.md) page with their
    gains:

    - `jax.random`'s threefry hash computed inline (`eqxrl._random`);
    - the minibatch shuffle as a sort of one packed array (`eqxrl._random.permutation`);
    - narrow layers of a small batch as elementwise products
      ([`batch_size_hint`][eqxrl.nn.batch_size_hint]);
    - a single sequence's loop not unrolled
      ([`sequence_batch_hint`][eqxrl.nn.sequence_batch_hint]), and the loops of
      several sequences unrolled 2 steps at a time instead of 4;
    - a recurrent loop's input gates and recurrent weights split per gate
      (`eqxrl.nn._sequence_loop._gates_per_gate`), so that XLA's CPU fusion emitter
      vectorises the gates' sigmoids and tanh;
    - large networks over large batches in cache-sized blocks of rows;
    - [`AutoReset`][eqxrl.envs.AutoReset]'s lazy reset, a conditional taken only
      when an episode ended (off, every step computes the reset and selects it).

    On an NVIDIA H200 (`benchmarks/gpu.py`) they lost together: PPO at PureJaxRL's
    CartPole config 0.97x, Snake with 4,096 environments 0.85x, the conditional
    being a round trip to the host at every step; without the lazy reset, the
    others measured 1.01-1.03x, within noise.

    XLA's CPU compiler options
    ([`cpu_compiler_options`][eqxrl.algorithms.cpu_compiler_options]) are not among
    them: they exist on the CPU backend alone. `benchmarks/gpu.py` traces programs
    under `cpu_speed_tricks(True)` and `(False)` to measure the tricks on a GPU.

    The switch is read while tracing, and JAX caches traces by function, not by
    this switch: tracing the same function again (`jax.jit(f)` called a second
    time, `jax.make_jaxpr(f)`) reuses the first trace whatever the switch says.
    Trace a new function under each setting (as `gpu.py` does, checking that the
    compiled programs differ).

    **Arguments:**

    - `enabled`: `True`, `False`, or `None` for the backend's default.

    !!! example

        ```python
        with eqxrl.algorithms.cpu_speed_tricks(True):
            compiled = ppo.lower(jax.random.key(0)).compile()  # traced here
        ```
    """
    token = _FORCED.set(enabled)
    try:
        yield
    finally:
        _FORCED.reset(token)


def cpu_speed_tricks_apply() -> bool:
    """Whether the CPU-tuned speed tricks apply to what is being traced (see
    `cpu_speed_tricks`)."""
    forced = _FORCED.get()
    if forced is not None:
        return forced
    return jax.default_backend() == "cpu"
