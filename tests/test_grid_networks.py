"""CNN and grid-transformer actor-critics (eqxrl.nn)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl
from eqxrl.nn import CNNActorCritic, GridTransformerActorCritic

SMALL_TRANSFORMER = dict(d_model=16, num_layers=1, num_heads=2)
NETWORKS = [
    pytest.param(lambda shape, key: CNNActorCritic(shape, 4, key=key), id="cnn"),
    pytest.param(
        lambda shape, key: GridTransformerActorCritic(
            shape, 4, key=key, **SMALL_TRANSFORMER
        ),
        id="transformer",
    ),
]


@pytest.mark.parametrize("make", NETWORKS)
def test_outputs_and_masking(make, key):
    observation = jr.bernoulli(key, 0.2, (5, 6, 3)).astype(jnp.float32)
    mask = jnp.array([True, False, True, True])

    @jax.jit
    def run(key, observation, mask):
        network = make((5, 6, 3), key)
        distribution, value = network(observation, mask)
        unmasked, _ = network(observation)
        return distribution.probs, value, network.value(observation), unmasked.probs

    probs, value, value_alone, unmasked = run(key, observation, mask)
    assert probs.shape == (4,) and value.shape == ()
    assert probs[1] == 0.0
    np.testing.assert_allclose(probs.sum(), 1.0, rtol=1e-6)
    # Near-uniform at initialization (policy head gain 0.01).
    np.testing.assert_allclose(probs[np.asarray(mask)], 1 / 3, atol=0.02)
    np.testing.assert_allclose(value_alone, value, rtol=1e-6)
    assert (unmasked > 0).all()


@pytest.mark.parametrize("make", NETWORKS)
def test_vmap_grad_and_position_sensitivity(make, key):
    observations = jr.bernoulli(key, 0.3, (8, 4, 4, 3)).astype(jnp.float32)
    # The same pattern in two places must give different values: positions matter.
    first = jnp.zeros((4, 4, 3)).at[0, 0, 0].set(1.0)
    second = jnp.zeros((4, 4, 3)).at[3, 2, 0].set(1.0)

    def loss(network):
        def one(observation):
            distribution, value = network(observation)
            return distribution.log_prob(jnp.int32(0)) + value

        return jax.vmap(one)(observations).mean()

    @jax.jit
    def run(key):
        network = make((4, 4, 3), key)
        grads = eqx.filter_grad(loss)(network)
        norms = [
            jnp.abs(g).sum() for g in jax.tree.leaves(eqx.filter(grads, eqx.is_array))
        ]
        return jnp.stack(norms), network.value(first), network.value(second)

    norms, first_value, second_value = run(key)
    assert np.isfinite(norms).all()
    assert (norms > 0).all()
    assert first_value != second_value


def test_cnn_config_errors(key):
    with pytest.raises(ValueError, match="observation_shape"):
        CNNActorCritic((10, 10), 4, key=key)
    with pytest.raises(ValueError, match="channels"):
        CNNActorCritic((10, 10, 3), 4, channels=(0,), key=key)


def test_transformer_config(key):
    network = eqx.filter_jit(
        lambda key: GridTransformerActorCritic((3, 5, 2), 4, key=key)
    )(key)
    assert network.positional_embedding.shape == (15, 64)
    assert len(network.blocks) == 2
    assert network.blocks[0].attention.num_heads == 4
    with pytest.raises(ValueError, match="divide"):
        GridTransformerActorCritic((3, 3, 3), 4, d_model=10, num_heads=4, key=key)
    with pytest.raises(ValueError, match="observation_shape"):
        GridTransformerActorCritic((9, 3), 4, key=key)


def test_initialization_is_vmappable_without_lapack_trouble(key):
    """Several networks initialized in one vmap (one batched QR each)."""
    keys = jr.split(key, 3)
    networks = eqx.filter_jit(
        eqx.filter_vmap(lambda k: CNNActorCritic((4, 4, 3), 4, key=k))
    )(keys)
    assert networks.actor.weight.shape == (3, 4, 64)
    transformers = eqx.filter_jit(
        eqx.filter_vmap(
            lambda k: GridTransformerActorCritic(
                (3, 3, 3), 4, key=k, **SMALL_TRANSFORMER
            )
        )
    )(keys)
    assert transformers.positional_embedding.shape == (3, 9, 16)
    assert eqxrl.nn.TransformerBlock is type(transformers.blocks[0])
