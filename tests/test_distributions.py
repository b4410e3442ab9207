import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from eqxrl.distributions import MaskedCategorical


def test_masked_actions_are_never_sampled():
    logits = jnp.array([5.0, 0.0, 3.0, -1.0], jnp.float32)
    mask = jnp.array([False, True, False, True])
    distribution = MaskedCategorical(logits, mask)
    samples = jax.vmap(distribution.sample)(jr.split(jr.key(0), 10_000))
    assert samples.dtype == jnp.int32
    assert set(np.unique(samples).tolist()) == {1, 3}
    assert float(distribution.probs[0]) == 0.0 and float(distribution.probs[2]) == 0.0


def test_log_prob_entropy_finite_and_zero_gradient_to_masked_logits():
    mask = jnp.array([True, False, True])

    def loss(logits):
        distribution = MaskedCategorical(logits, mask)
        return distribution.log_prob(jnp.int32(0)) + distribution.entropy()

    logits = jnp.array([0.3, 2.0, -0.5], jnp.float32)
    value, grads = jax.value_and_grad(loss)(logits)
    assert np.isfinite(value)
    assert np.isfinite(grads).all()
    assert float(grads[1]) == 0.0
    assert float(grads[0]) != 0.0


def test_entropy_is_over_valid_actions():
    logits = jnp.zeros(4, jnp.float32)
    mask = jnp.array([True, True, False, False])
    assert float(MaskedCategorical(logits, mask).entropy()) == pytest.approx(
        np.log(2.0), rel=1e-6
    )
    assert float(MaskedCategorical(logits).entropy()) == pytest.approx(
        np.log(4.0), rel=1e-6
    )


def test_all_masked_row_is_uniform_and_finite():
    mask = jnp.zeros(3, bool)

    def loss(logits):
        distribution = MaskedCategorical(logits, mask)
        return distribution.log_prob(jnp.int32(1)) + distribution.entropy()

    logits = jnp.array([1.0, 2.0, 3.0], jnp.float32)
    distribution = MaskedCategorical(logits, mask)
    assert float(distribution.log_prob(jnp.int32(1))) == pytest.approx(-np.log(3.0))
    assert float(distribution.entropy()) == pytest.approx(np.log(3.0))
    value, grads = jax.value_and_grad(loss)(logits)
    assert np.isfinite(value) and np.isfinite(grads).all()
    sample = distribution.sample(jr.key(0))
    assert 0 <= int(sample) < 3


def test_mode_and_log_prob_match_softmax():
    logits = jnp.array([0.1, 1.5, -0.2], jnp.float32)
    distribution = MaskedCategorical(logits)
    np.testing.assert_allclose(
        jnp.exp(jax.vmap(distribution.log_prob)(jnp.arange(3))),
        jax.nn.softmax(logits),
        rtol=1e-6,
    )
    assert int(distribution.mode()) == 1
    masked = MaskedCategorical(logits, jnp.array([True, False, True]))
    assert int(masked.mode()) == 0


def test_wrong_mask_shape_is_rejected():
    with pytest.raises(Exception, match="action_mask"):
        MaskedCategorical(jnp.zeros(3, jnp.float32), jnp.ones(4, bool))
