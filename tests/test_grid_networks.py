"""CNN and grid-transformer actor-critics (eqxrl.nn)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from eqxrl.nn import CNNActorCritic, GridTransformerActorCritic, TransformerBlock

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
def test_outputs_masking_gradients_and_positions(make, key):
    shape = (4, 5, 3)
    observations = jr.bernoulli(key, 0.3, (8, *shape)).astype(jnp.float32)
    mask = jnp.array([True, False, True, True])
    # The same pattern in two places must give different values: positions matter.
    first = jnp.zeros(shape).at[0, 0, 0].set(1.0)
    second = jnp.zeros(shape).at[3, 2, 0].set(1.0)

    def loss(network):
        def one(observation):
            distribution, value = network(observation)
            return distribution.log_prob(jnp.int32(0)) + value

        return jax.vmap(one)(observations).mean()

    @jax.jit
    def run(key):
        # Initialization under vmap (no LAPACK call: see test_no_lapack).
        networks = eqx.filter_vmap(lambda key: make(shape, key))(jr.split(key, 2))
        arrays, static = eqx.partition(networks, eqx.is_array)
        network = eqx.combine(jax.tree.map(lambda x: x[0], arrays), static)
        distribution, value = network(observations[0], mask)
        unmasked, _ = network(observations[0])
        grads = eqx.filter(eqx.filter_grad(loss)(network), eqx.is_array)
        norms = jnp.stack([jnp.abs(g).sum() for g in jax.tree.leaves(grads)])
        return dict(
            probs=distribution.probs,
            value=value,
            value_alone=network.value(observations[0]),
            unmasked=unmasked.probs,
            norms=norms,
            positions=(network.value(first), network.value(second)),
            heads=jax.tree.leaves(arrays)[0].shape[0],
        )

    out = run(key)
    assert out["heads"] == 2
    probs = np.asarray(out["probs"])
    assert probs.shape == (4,) and out["value"].shape == ()
    assert probs[1] == 0.0
    np.testing.assert_allclose(probs.sum(), 1.0, rtol=1e-6)
    # Near-uniform at initialization (policy head gain 0.01).
    np.testing.assert_allclose(probs[[0, 2, 3]], 1 / 3, atol=0.02)
    np.testing.assert_allclose(out["value_alone"], out["value"], rtol=1e-6)
    assert (out["unmasked"] > 0).all()
    assert np.isfinite(out["norms"]).all() and (out["norms"] > 0).all()
    assert out["positions"][0] != out["positions"][1]


def test_cnn_config_errors(key):
    with pytest.raises(ValueError, match="observation_shape"):
        CNNActorCritic((10, 10), 4, key=key)
    with pytest.raises(ValueError, match="channels"):
        CNNActorCritic((10, 10, 3), 4, channels=(0,), key=key)


def test_transformer_defaults_and_config_errors(key):
    network = eqx.filter_eval_shape(GridTransformerActorCritic, (3, 5, 2), 4, key=key)
    assert network.positional_embedding.shape == (15, 64)
    assert len(network.blocks) == 2
    assert isinstance(network.blocks[0], TransformerBlock)
    assert network.blocks[0].attention.num_heads == 4
    assert network.blocks[0].mlp_in.weight.shape == (256, 64)
    with pytest.raises(ValueError, match="divide"):
        GridTransformerActorCritic((3, 3, 3), 4, d_model=10, num_heads=4, key=key)
    with pytest.raises(ValueError, match="observation_shape"):
        GridTransformerActorCritic((9, 3), 4, key=key)
