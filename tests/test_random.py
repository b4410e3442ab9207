import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from eqxrl._random import categorical, permutation, random_bits, split, uniform


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


@pytest.mark.parametrize("num", [1, 5, 512, 70_000])
def test_inline_permutation_matches_jax_random(num):
    keys = jr.split(jr.key(11), 3)
    ours = jax.jit(jax.vmap(lambda k: permutation(k, num)))(keys)
    theirs = jax.vmap(lambda k: jr.permutation(k, num))(keys)
    np.testing.assert_array_equal(ours, theirs)
    assert (np.sort(np.asarray(ours), axis=1) == np.arange(num)).all()


@pytest.mark.parametrize("make_key", [jr.key, jr.PRNGKey])
def test_inline_split_to_a_shape_matches_jax_random(make_key):
    key = make_key(13)
    for shape in [(3,), (2, 3), (4, 1, 2)]:
        ours = jax.jit(lambda k, shape=shape: split(k, shape))(key)
        theirs = jr.split(key, shape)
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
        np.testing.assert_array_equal(_data(ours), _data(theirs))
