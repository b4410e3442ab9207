"""Small tree helpers shared across the package."""

from collections.abc import Callable
from typing import Any, TypeVar

import equinox as eqx
import jax
import jax.lax as lax
import jax.numpy as jnp
from jaxtyping import Array, Bool

Carry = TypeVar("Carry")
Output = TypeVar("Output")


def filter_scan(
    body: Callable[[Carry, Any], tuple[Carry, Output]],
    init: Carry,
    xs: Any = None,
    length: int | None = None,
) -> tuple[Carry, Output]:
    """`jax.lax.scan` whose carry may hold non-array leaves (functions, ints, modules).

    The carry is split into its arrays, which are scanned over, and everything else,
    which is closed over as a constant; the body must not change the non-array part.
    """
    dynamic_init, static = eqx.partition(init, eqx.is_array)

    def scan_body(dynamic_carry, x):
        carry = eqx.combine(dynamic_carry, static)
        new_carry, output = body(carry, x)
        new_dynamic, new_static = eqx.partition(new_carry, eqx.is_array)
        if not eqx.tree_equal(new_static, static):
            raise ValueError(
                "filter_scan: the body changed the non-array part of the carry."
            )
        return new_dynamic, output

    final_dynamic, outputs = lax.scan(scan_body, dynamic_init, xs, length=length)
    return eqx.combine(final_dynamic, static), outputs


def scan_or_step(body: Callable, init: Any, xs: Any) -> tuple[Any, Any]:
    """`filter_scan`, or for a single step the body itself (with outputs given the
    leading length-1 axis a scan would add): XLA keeps even a one-trip loop."""
    length = jax.tree.leaves(xs)[0].shape[0]
    if length != 1:
        return filter_scan(body, init, xs)
    carry, output = body(init, jax.tree.map(lambda x: x[0], xs))
    return carry, jax.tree.map(lambda x: x[None], output)


@jax.custom_batching.custom_vmap
def any_in_vmapped_batch(flag: Bool[Array, ""]) -> Bool[Array, ""]:
    """`flag` itself; under `vmap`, whether it holds for any member of the batch, as
    one unbatched boolean.

    For the predicate of a `lax.cond` that should stay a conditional when the code
    around it is vmapped (over environments, seeds or hyperparameters): with a
    batched predicate, `vmap` turns a `lax.cond` into a select that runs both
    branches for every member. With this one, the branch runs for the whole batch
    when any member needs it, and the members that did not need it must ignore its
    result (select on their own `flag`).
    """
    return flag


@any_in_vmapped_batch.def_vmap
def _any_in_vmapped_batch_rule(axis_size, in_batched, flag):
    del axis_size
    (batched,) = in_batched
    return (jnp.any(flag) if batched else flag), False
