"""`jax.random.bits`, `split`, `uniform` and `categorical` computed inline, and a
faster `permutation` on CPU.

On CPU, XLA runs JAX's threefry hash as a rolled loop (a `while` of five iterations,
each a few separate kernels): for the handful of words an environment step or an
action sample draws, that loop's overhead costs more than the rest of a cheap step.
These functions compute the same hash unrolled in `jax.numpy`, so XLA fuses it with the
code around it. For threefry keys (JAX's default) with `jax_threefry_partitionable`
on (the default) the results are bit for bit those of `jax.random`; for any other key
implementation or setting, and off the CPU backend (`cpu_speed_tricks`), they call
`jax.random` itself. `permutation` on CPU draws from
the same distribution as `jax.random.permutation`, not the same permutations.
"""

import math

import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int, Key, PRNGKeyArray, UInt32

from ._speed_tricks import cpu_speed_tricks_apply

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _threefry_key_data(key: PRNGKeyArray) -> UInt32[Array, " 2"] | None:
    """The two key words of a threefry key, or `None` to fall back to `jax.random`
    (also off the CPU, see `cpu_speed_tricks`)."""
    if not cpu_speed_tricks_apply() or not jax.config.jax_threefry_partitionable:
        return None
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != () or jr.key_impl(key) != "threefry2x32":
            return None
        return jr.key_data(key)
    default_threefry = jax.config.jax_default_prng_impl == "threefry2x32"
    if key.dtype == jnp.uint32 and key.shape == (2,) and default_threefry:
        return key
    return None


def _rotate_left(x: UInt32[Array, "*shape"], bits: int) -> UInt32[Array, "*shape"]:
    return (x << jnp.uint32(bits)) | (x >> jnp.uint32(32 - bits))


def _threefry2x32(
    key: UInt32[Array, " 2"], counts: UInt32[Array, " n"]
) -> tuple[UInt32[Array, " n"], UInt32[Array, " n"]]:
    """Threefry-2x32 (20 rounds) of the counters `(0, counts)`, unrolled."""
    k0, k1 = key[0], key[1]
    ks = (k0, k1, k0 ^ k1 ^ jnp.uint32(0x1BD11BDA))
    x0 = jnp.zeros_like(counts) + ks[0]
    x1 = counts + ks[1]
    for group in range(5):
        for rotation in _ROTATIONS[group % 2]:
            x0 = x0 + x1
            x1 = _rotate_left(x1, rotation) ^ x0
        x0 = x0 + ks[(group + 1) % 3]
        x1 = x1 + ks[(group + 2) % 3] + jnp.uint32(group + 1)
    return x0, x1


def random_bits(key: PRNGKeyArray, shape: tuple[int, ...] = ()) -> UInt32[Array, "..."]:
    """`jax.random.bits(key, shape, jnp.uint32)`, fused with its surroundings.

    **Arguments:**

    - `key`: one PRNG key (typed, or a legacy `uint32[2]` key).
    - `shape`: the shape of the result.

    **Returns:**

    uint32 random bits of shape `shape`.
    """
    data = _threefry_key_data(key)
    if data is None:
        return jr.bits(key, shape, jnp.uint32)
    counts = jnp.arange(math.prod(shape), dtype=jnp.uint32)
    x0, x1 = _threefry2x32(data, counts)
    return (x0 ^ x1).reshape(shape)


def split(
    key: PRNGKeyArray, num: int | tuple[int, ...] = 2
) -> Key[Array, "..."] | UInt32[Array, "... 2"]:
    """`jax.random.split(key, num)`, fused with its surroundings.

    **Arguments:**

    - `key`: one PRNG key (typed, or a legacy `uint32[2]` key).
    - `num`: how many keys, or the shape of the array of keys.

    **Returns:**

    Keys of shape `num`, of the same kind as `key`.
    """
    data = _threefry_key_data(key)
    if data is None:
        return jr.split(key, num)
    shape = (num,) if isinstance(num, int) else tuple(num)
    counts = jnp.arange(math.prod(shape), dtype=jnp.uint32)
    x0, x1 = _threefry2x32(data, counts)
    new = jnp.stack([x0, x1], axis=-1).reshape(*shape, 2)
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jr.wrap_key_data(new, impl=jr.key_impl(key))
    return new


def uniform(
    key: PRNGKeyArray,
    shape: tuple[int, ...] = (),
    minval: float = 0.0,
    maxval: float = 1.0,
) -> Float[Array, "..."]:
    """`jax.random.uniform(key, shape, jnp.float32, minval, maxval)`, fused with its
    surroundings (the same numbers for threefry keys)."""
    bits = random_bits(key, shape)
    # As jax.random: random mantissa bits under the exponent of 1.0, minus 1.
    float_bits = (bits >> jnp.uint32(32 - 23)) | jnp.uint32(0x3F800000)
    floats = jax.lax.bitcast_convert_type(float_bits, jnp.float32) - 1.0
    low, high = jnp.float32(minval), jnp.float32(maxval)
    return jnp.maximum(low, floats * (high - low) + low)


def categorical(
    key: PRNGKeyArray, logits: Float[Array, " num_classes"]
) -> Int[Array, ""]:
    """`jax.random.categorical(key, logits)` for one vector of logits (Gumbel-max),
    fused with its surroundings (the same sample for threefry keys)."""
    tiny = float(jnp.finfo(jnp.float32).tiny)
    gumbel = -jnp.log(-jnp.log(uniform(key, logits.shape, tiny, 1.0)))
    return jnp.argmax(gumbel + logits)


# Fewer random bits per key would need more sort rounds than JAX's pair sort costs.
_MIN_PACKED_RANDOM_BITS = 8


def permutation(key: PRNGKeyArray, num: int) -> Int[Array, " {num}"]:
    """A uniformly random permutation of `range(num)`, by the criterion of
    `jax.random.permutation` but several times cheaper on CPU (not the same
    permutation).

    Both stable-sort the indices by random keys, in as many rounds as make a tie
    over all rounds unlikely (key space ** rounds >= num ** 3). XLA's CPU sort of
    (key, index) pairs calls the comparator per comparison; a sort of one uint32
    array runs natively, 4x faster. So each key here is one uint32: random high bits
    over the index in the low bits, which also makes the sort stable. Fewer random
    bits per round need more rounds (3 instead of 2 for 65,536 indices), still 2.6x
    less time overall. Past 2**24 indices, fewer than 8 random bits would remain and
    JAX's pair sort is cheaper. Off the CPU (GPU radix sorts, TPU sorting networks,
    not measured here) the extra rounds may cost more than they save, so there this
    is JAX's pair sort: the same permutations as `jax.random.permutation`.
    """
    if num <= 1:
        return jnp.arange(num)
    index_bits = (num - 1).bit_length()
    use_pairs = 32 - index_bits < _MIN_PACKED_RANDOM_BITS
    if use_pairs or not cpu_speed_tricks_apply():
        return _pair_sort_permutation(key, num)
    return _packed_sort_permutation(key, num, index_bits)


def _sort_rounds(num: int, key_bits: int) -> int:
    """Rounds of sorting by `key_bits`-bit random keys after which a tie between
    two of `num` indices in every round is unlikely (JAX's rule)."""
    return max(1, math.ceil(3 * math.log(num) / math.log(2.0**key_bits - 1)))


def _packed_sort_permutation(
    key: PRNGKeyArray, num: int, index_bits: int
) -> Int[Array, " {num}"]:
    index_mask = jnp.uint32((1 << index_bits) - 1)
    positions = jnp.arange(num, dtype=jnp.uint32)
    indices = None
    for _ in range(_sort_rounds(num, 32 - index_bits)):
        key, subkey = split(key)
        packed = (random_bits(subkey, (num,)) & ~index_mask) | positions
        order = (jax.lax.sort(packed, is_stable=False) & index_mask).astype(jnp.int32)
        indices = order if indices is None else indices[order]
    return indices


def _pair_sort_permutation(key: PRNGKeyArray, num: int) -> Int[Array, " {num}"]:
    indices = jnp.arange(num)
    for _ in range(_sort_rounds(num, 32)):
        key, subkey = split(key)
        _, indices = jax.lax.sort_key_val(random_bits(subkey, (num,)), indices)
    return indices
