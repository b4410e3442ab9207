from collections.abc import Sequence

import jax
import jax.lax as lax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, PRNGKeyArray

from .._filters import any_in_vmapped_batch


def householder_orthonormal_columns(
    matrix: Float[Array, "rows columns"],
) -> Float[Array, "rows columns"]:
    """The `Q` of the QR decomposition of a tall matrix, from plain arithmetic.

    Householder reflections in a `lax.fori_loop` (no LAPACK call), with the columns'
    signs chosen so that `R` has a positive diagonal: the same `Q` as
    `jnp.linalg.qr(matrix)` with that sign correction, up to float rounding, and
    orthonormal to float precision whatever the matrix's condition.

    XLA runs `jnp.linalg.qr` on the CPU as a LAPACK custom call; vmapped, the call
    splits its batch over XLA's CPU thread pool and waits for the parts, and where
    it already occupies that pool (a program over several seeds on a 2-core machine)
    it can wait forever. Nothing here leaves XLA's own operations.

    **Arguments:**

    - `matrix`: a float32 matrix with at least as many rows as columns, of full
      column rank (a Gaussian matrix is, with probability one).

    **Returns:**

    A float32 matrix of `matrix`'s shape with orthonormal columns.
    """
    rows, columns = matrix.shape
    if rows < columns:
        raise ValueError(
            f"householder_orthonormal_columns: a {rows}x{columns} matrix has more "
            "columns than rows; pass its transpose."
        )
    row_index = jnp.arange(rows)

    def reflect(column, carry):
        # Reflect column `column` of the remaining block onto the axis: the
        # reflector is `I - 2 v v^T` with `v` zero above the diagonal.
        reduced, reflectors, diagonal = carry
        x = jnp.where(row_index >= column, reduced[:, column], 0.0)
        pivot = x[column]
        # The sign that avoids cancellation (LAPACK's choice).
        alpha = -jnp.where(pivot >= 0.0, 1.0, -1.0) * jnp.sqrt(jnp.sum(x * x))
        v = x - jnp.where(row_index == column, alpha, 0.0)
        v_norm = jnp.sqrt(jnp.sum(v * v))
        v = jnp.where(v_norm > 0.0, v / jnp.where(v_norm > 0.0, v_norm, 1.0), 0.0)
        reduced = reduced - 2.0 * jnp.outer(v, v @ reduced)
        return reduced, reflectors.at[:, column].set(v), diagonal.at[column].set(alpha)

    _, reflectors, diagonal = lax.fori_loop(
        0,
        columns,
        reflect,
        (
            matrix,
            jnp.zeros((rows, columns), matrix.dtype),
            jnp.zeros(columns, matrix.dtype),
        ),
    )

    def apply_reflector(step, q):
        # Q = H_0 H_1 ... H_{n-1} applied to the first n columns of the identity,
        # the last reflector first.
        v = reflectors[:, columns - 1 - step]
        return q - 2.0 * jnp.outer(v, v @ q)

    q = lax.fori_loop(
        0, columns, apply_reflector, jnp.eye(rows, columns, dtype=matrix.dtype)
    )
    # R's diagonal is `diagonal`: flip columns so that it is positive, which makes
    # the factorization unique and Q Haar-distributed for a Gaussian matrix.
    return q * jnp.where(diagonal < 0.0, -1.0, 1.0)[None, :]


def _factorize(
    noise: Float[Array, "matrices rows columns"],
) -> Float[Array, "matrices rows columns"]:
    """`householder_orthonormal_columns` of each matrix; on the CPU, inside a
    conditional that is always taken.

    XLA:CPU runs a loop whose body has independent parts (these do) on its thread
    pool, and the rest of the program then resumes on whichever pool thread ended
    the loop. A training program that starts with these loops ran its whole
    training loop there, where another program's just-finished work on the pool
    cost PPO on CartPole 12% in 10 of 16 runs (alternating with PureJaxRL's PPO in
    one process; 0 of 16 inside the conditional, 0 of 16 with LAPACK's QR). A
    conditional's branch is its own thunk sequence, which keeps the loops from
    handing the program to the pool. The predicate (finite noise, under `vmap`
    over the whole batch) keeps it a conditional under `vmap`.
    """
    factorize = jax.vmap(householder_orthonormal_columns)
    if jax.default_backend() != "cpu":
        return factorize(noise)
    finite = any_in_vmapped_batch(jnp.all(jnp.isfinite(noise)))
    return lax.cond(finite, factorize, lambda matrices: matrices, noise)


def orthogonal_matrices(
    key: PRNGKeyArray, shapes: Sequence[tuple[int, int]], scales: Sequence[float]
) -> list[Float[Array, "..."]]:
    """Random (semi-)orthogonal matrices, one per shape, without LAPACK.

    Matrix `i` equals `jax.nn.initializers.orthogonal(scales[i])(keys[i],
    shapes[i])` with `keys = jax.random.split(key, len(shapes))`, up to float
    rounding: the same Gaussian draw, the same Haar-distributed result (orthonormal
    columns if tall, rows if wide, times the scale). The QR decomposition is
    [`householder_orthonormal_columns`][eqxrl.nn.householder_orthonormal_columns],
    plain arithmetic inside XLA, so a vmapped initialization (several seeds in one
    program) holds no LAPACK call, which can deadlock XLA's CPU thread pool on small
    machines. Matrices of the same shape are factorized together (one vmapped loop).

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
    keys = jr.split(key, len(shapes))
    # Tall shapes: the wide ones are drawn as the transpose, as jax draws them.
    tall_shapes = [(max(shape), min(shape)) for shape in shapes]
    orthonormal: list[Array | None] = [None] * len(shapes)
    for tall_shape in dict.fromkeys(tall_shapes):
        indices = [i for i, shape in enumerate(tall_shapes) if shape == tall_shape]
        noise = jax.vmap(lambda k: jr.normal(k, tall_shape, jnp.float32))(
            keys[jnp.asarray(indices)]
        )
        factors = _factorize(noise)
        for position, index in enumerate(indices):
            orthonormal[index] = factors[position]
    matrices = []
    for (rows, columns), scale, q in zip(shapes, scales, orthonormal):
        matrix = q if rows >= columns else q.T
        matrices.append(scale * matrix)
    return matrices
