import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from eqxrl._random import (
    _packed_sort_permutation,
    _pair_sort_permutation,
    categorical,
    permutation,
    random_bits,
    split,
    uniform,
)


def _data(keys):
    if jax.dtypes.issubdtype(keys.dtype, jax.dtypes.prng_key):
        return np.asarray(jr.key_data(keys))
    return np.asarray(keys)


@pytest.mark.parametrize("make_key", [jr.key, jr.PRNGKey])
def test_inline_threefry_matches_jax_random(make_key):
    keys = jr.split(make_key(3), 4)
    for shape in [(), (2,), (3,), (2, 3)]:
        ours = jax.jit(jax.vmap(lambda k, shape=shape: random_bits(k, shape)))(keys)
        theirs = jax.vmap(lambda k, shape=shape: jr.bits(k, shape, jnp.uint32))(keys)
        np.testing.assert_array_equal(ours, theirs)
    for num in [2, 3]:
        ours = jax.vmap(lambda k, num=num: split(k, num))(keys)
        theirs = jax.vmap(lambda k, num=num: jr.split(k, num))(keys)
        assert ours.dtype == theirs.dtype
        np.testing.assert_array_equal(_data(ours), _data(theirs))


def test_other_key_implementations_use_jax_random():
    key = jr.key(5, impl="rbg")
    np.testing.assert_array_equal(
        random_bits(key, (3,)), jr.bits(key, (3,), jnp.uint32)
    )
    np.testing.assert_array_equal(_data(split(key)), _data(jr.split(key)))


@pytest.mark.parametrize("make_key", [jr.key, jr.PRNGKey])
def test_inline_uniform_and_categorical_match_jax_random(make_key):
    keys = jr.split(make_key(7), 64)
    ours = jax.jit(jax.vmap(lambda k: uniform(k, (5,), -2.0, 3.0)))(keys)
    theirs = jax.vmap(lambda k: jr.uniform(k, (5,), jnp.float32, -2.0, 3.0))(keys)
    np.testing.assert_array_equal(ours, theirs)
    logits = jnp.log(jnp.array([0.1, 0.2, 0.3, 0.4], jnp.float32))
    ours = jax.jit(jax.vmap(lambda k: categorical(k, logits)))(keys)
    theirs = jax.vmap(lambda k: jr.categorical(k, logits))(keys)
    np.testing.assert_array_equal(ours, theirs)
    assert len(np.unique(np.asarray(ours))) == 4  # the draws do vary


@pytest.mark.parametrize("num", [0, 1, 2, 5, 512, 70_000])
def test_permutation_is_a_permutation_that_depends_on_the_key(num):
    keys = jr.split(jr.key(11), 3)
    ours = np.asarray(jax.jit(jax.vmap(lambda k: permutation(k, num)))(keys))
    assert ours.shape == (3, num) and ours.dtype == np.int32
    assert (np.sort(ours, axis=1) == np.arange(num)).all()
    np.testing.assert_array_equal(ours[0], permutation(keys[0], num))
    if num >= 5:
        assert not (ours[0] == ours[1]).all()
        assert not (ours[0] == np.arange(num)).all()


@pytest.mark.parametrize(
    "make_permutation",
    [permutation, lambda k, n: _packed_sort_permutation(k, n, 16)],
    ids=["permutation", "packed keys, 16 random bits"],
)
def test_permutation_is_uniform(make_permutation):
    # Every one of the 24 orders of 4 items about equally often (chi-square, 23
    # degrees of freedom: the 99.99% quantile is 54), and so each item's position.
    num_draws = 24_000
    keys = jr.split(jr.key(17), num_draws)
    draws = np.asarray(jax.jit(jax.vmap(lambda k: make_permutation(k, 4)))(keys))
    codes = draws @ np.array([64, 16, 4, 1])
    counts = np.array([np.sum(codes == code) for code in np.unique(codes)])
    assert len(counts) == 24
    expected = num_draws / 24
    assert np.sum((counts - expected) ** 2 / expected) < 54
    positions = np.stack([np.sum(draws == item, axis=0) for item in range(4)])
    np.testing.assert_allclose(positions / num_draws, 0.25, atol=0.015)


def test_pair_sort_permutation_is_jax_randoms():
    # The path past 2**24 indices is JAX's own algorithm: the same permutations.
    keys = jr.split(jr.key(19), 3)
    ours = jax.vmap(lambda k: _pair_sort_permutation(k, 70_000))(keys)
    theirs = jax.vmap(lambda k: jr.permutation(k, 70_000))(keys)
    np.testing.assert_array_equal(ours, theirs)


def test_permutation_off_the_cpu_is_jax_randoms(monkeypatch):
    key = jr.key(23)
    on_cpu = np.asarray(permutation(key, 512))
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    np.testing.assert_array_equal(permutation(key, 512), jr.permutation(key, 512))
    assert not (on_cpu == np.asarray(jr.permutation(key, 512))).all()


@pytest.mark.parametrize("make_key", [jr.key, jr.PRNGKey])
def test_inline_split_to_a_shape_matches_jax_random(make_key):
    key = make_key(13)
    for shape in [(3,), (2, 3), (4, 1, 2)]:
        ours = jax.jit(lambda k, shape=shape: split(k, shape))(key)
        theirs = jr.split(key, shape)
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
        np.testing.assert_array_equal(_data(ours), _data(theirs))
