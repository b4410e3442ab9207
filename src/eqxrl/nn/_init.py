from collections.abc import Sequence

import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, PRNGKeyArray


def orthogonal_matrices(
    key: PRNGKeyArray, shapes: Sequence[tuple[int, int]], scales: Sequence[float]
) -> list[Float[Array, "..."]]:
    """Random (semi-)orthogonal matrices, one per shape, from a single batched QR.

    Each `(rows, columns)` matrix has orthonormal columns (if tall) or rows (if wide)
    times its scale, drawn from the Haar measure exactly as
    `jax.nn.initializers.orthogonal` draws it. All matrices come from one batched QR of
    zero-padded Gaussian blocks: Householder QR never mixes the padding into the
    leading block, so each block's Q is that of the block alone. One LAPACK call per
    network (instead of one per layer) also keeps a vmapped initialization from
    running several LAPACK calls at once, which can deadlock XLA's CPU thread pool on
    small machines.

    **Arguments:**

    - `key`: a PRNG key.
    - `shapes`: `(rows, columns)` of each matrix.
    - `scales`: a gain per matrix (e.g. `sqrt(2)` for hidden layers, `0.01` for a
      policy head).

    **Returns:**

    A list of float32 arrays of the requested shapes.
    """
    if len(shapes) != len(scales):
        raise ValueError("orthogonal_matrices: give one scale per shape.")
    size = max(max(shape) for shape in shapes)
    noise = jr.normal(key, (len(shapes), size, size), dtype=jnp.float32)
    row_index = jnp.arange(size)[:, None]
    column_index = jnp.arange(size)[None, :]
    masks = jnp.stack(
        [(row_index < max(shape)) & (column_index < min(shape)) for shape in shapes]
    )
    q, r = jnp.linalg.qr(jnp.where(masks, noise, 0.0))
    # Make the factorization unique (and the result Haar-distributed).
    q = q * jnp.sign(jnp.diagonal(r, axis1=-2, axis2=-1))[:, None, :]
    matrices = []
    for index, ((rows, columns), scale) in enumerate(zip(shapes, scales)):
        block = q[index, : max(rows, columns), : min(rows, columns)]
        matrix = block if rows >= columns else block.T
        matrices.append(scale * matrix)
    return matrices
