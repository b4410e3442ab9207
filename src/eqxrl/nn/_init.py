import functools
from collections.abc import Sequence

import jax
import jax.lax as lax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, PRNGKeyArray

from .._filters import any_in_vmapped_batch


def orthonormal_columns(
    matrix: Float[Array, "rows columns"],
) -> Float[Array, "rows columns"]:
    """The `Q` of the QR decomposition of a tall matrix, from plain arithmetic.

    Gram-Schmidt, twice per column, in one `lax.fori_loop` (no LAPACK call), with
    `R`'s diagonal positive: the same `Q` as `jnp.linalg.qr(matrix)` with that sign
    correction, up to float rounding, and orthonormal to float precision for any
    matrix of numerically full rank (one pass of classical Gram-Schmidt loses
    orthogonality in proportion to the condition number; the second pass restores
    it). A column that is zero, or in the span of the earlier ones, comes out zero.

    XLA runs `jnp.linalg.qr` on the CPU as a LAPACK custom call; vmapped, the call
    splits its batch over XLA's CPU thread pool and waits for the parts, and where
    it already occupies that pool (a program over several seeds on a 2-core machine)
    it can wait forever. Nothing here leaves XLA's own operations.

    **Arguments:**

    - `matrix`: a float32 matrix with at least as many rows as columns.

    **Returns:**

    A float32 matrix of `matrix`'s shape with orthonormal columns.
    """
    rows, columns = matrix.shape
    if rows < columns:
        raise ValueError(
            f"orthonormal_columns: a {rows}x{columns} matrix has more columns than "
            "rows; pass its transpose."
        )

    def orthonormalize(column, q):
        vector = lax.dynamic_index_in_dim(matrix, column, axis=1, keepdims=False)
        # The columns of `q` from `column` on are still zero, so projecting onto
        # all of `q` projects onto the finished ones. Products written as sums of
        # elementwise products, not matrix products: XLA picks a matrix product's
        # kernel (and its rounding) by the program around it and by `vmap`'s batch,
        # and the initialization must give the same bits inside `train` as in the
        # Trainer's own `init` program.
        for _ in range(2):
            coefficients = jnp.sum(q * vector[:, None], axis=0)
            vector = vector - jnp.sum(q * coefficients[None, :], axis=1)
        norm = jnp.sqrt(jnp.sum(vector * vector))
        unit = jnp.where(norm > 0.0, vector / jnp.where(norm > 0.0, norm, 1.0), 0.0)
        return lax.dynamic_update_index_in_dim(q, unit, column, axis=1)

    return lax.fori_loop(0, columns, orthonormalize, jnp.zeros_like(matrix))


@functools.partial(jax.jit, static_argnums=1)
def _orthonormal_factors(
    key: PRNGKeyArray, tall_shapes: tuple[tuple[int, int], ...]
) -> Float[Array, "matrices rows columns"]:
    """The orthonormal factor of a Gaussian draw of each tall shape, the draws
    zero-padded to the largest shape and factorized in one loop, the padding
    untouched (a zero column stays zero; zero rows change no projection). Jitted, so
    that building a network outside `jit` compiles once per set of shapes."""
    rows = max(shape[0] for shape in tall_shapes)
    columns = max(shape[1] for shape in tall_shapes)
    noise = jr.normal(key, (len(tall_shapes), rows, columns), jnp.float32)
    row_index = jnp.arange(rows)[:, None]
    column_index = jnp.arange(columns)[None, :]
    inside = jnp.stack(
        [(row_index < shape[0]) & (column_index < shape[1]) for shape in tall_shapes]
    )
    return _factorize(jnp.where(inside, noise, 0.0))


def _factorize(
    noise: Float[Array, "matrices rows columns"],
) -> Float[Array, "matrices rows columns"]:
    """`orthonormal_columns` of each matrix; on the CPU, inside a conditional that is
    always taken.

    XLA:CPU runs a loop whose body has independent parts (this one does) on its
    thread pool, and the rest of the program then resumes on whichever pool thread
    ended the loop. A training program that starts with such a loop ran its whole
    training loop there, where another program's just-finished work on the pool
    cost PPO on CartPole 12% in 7 of 32 runs (alternating with PureJaxRL's PPO in
    one process; 0 of 32 inside the conditional, 0 of 16 with LAPACK's QR). A
    conditional's branch is its own thunk sequence, which keeps the loop from
    handing the program to the pool. The predicate (finite noise, under `vmap` over
    the whole batch) keeps it a conditional under `vmap`.
    """
    factorize = jax.vmap(orthonormal_columns)
    if jax.default_backend() != "cpu":
        return factorize(noise)
    finite = any_in_vmapped_batch(jnp.all(jnp.isfinite(noise)))
    return lax.cond(finite, factorize, lambda matrices: matrices, noise)


def orthogonal_matrices(
    key: PRNGKeyArray, shapes: Sequence[tuple[int, int]], scales: Sequence[float]
) -> list[Float[Array, "..."]]:
    """Random (semi-)orthogonal matrices, one per shape, without LAPACK.

    Each matrix is what `jax.nn.initializers.orthogonal(scale)` computes from a
    Gaussian draw of its own: the `Q` of its QR decomposition with `R`'s diagonal
    positive, which is Haar-distributed (orthonormal columns if tall, rows if wide,
    times the scale), the matrices independent. The draw: matrix `i`, as a tall
    `(rows, columns)` matrix (a wide one transposed), is the top-left block of
    `jax.random.normal(key, (len(shapes), most_rows, most_columns))[i]`. The QR
    decomposition is
    [`orthonormal_columns`][eqxrl.nn.orthonormal_columns], plain arithmetic inside
    XLA, so a vmapped initialization (several seeds in one program) holds no LAPACK
    call, which can deadlock XLA's CPU thread pool on small machines. All matrices
    are factorized in one loop (zero-padded to the largest shape).

    **Arguments:**

    - `key`: a PRNG key.
    - `shapes`: `(rows, columns)` of each matrix.
    - `scales`: a gain per matrix (e.g. `sqrt(2)` for hidden layers, `0.01` for a
      policy head).

    **Returns:**

    A list of float32 arrays of the requested shapes.

    !!! example

        ```python
        hidden, head = eqxrl.nn.orthogonal_matrices(
            jax.random.key(0), [(64, 4), (2, 64)], [2**0.5, 0.01]
        )
        ```
    """
    if len(shapes) != len(scales):
        raise ValueError("orthogonal_matrices: give one scale per shape.")
    # Tall shapes: the wide ones are drawn as the transpose, as jax draws them.
    tall_shapes = tuple((max(shape), min(shape)) for shape in shapes)
    factors = _orthonormal_factors(key, tall_shapes)
    matrices = []
    for index, ((rows, columns), scale) in enumerate(zip(shapes, scales)):
        tall = factors[index, : max(rows, columns), : min(rows, columns)]
        matrices.append(scale * (tall if rows >= columns else tall.T))
    return matrices
