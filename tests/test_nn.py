import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from eqxrl.nn import MLPActorCritic, orthogonal_matrices


@pytest.mark.parametrize(
    "shapes", [[(64, 4), (64, 64), (2, 64)], [(3, 7), (7, 3), (1, 1), (5, 5)]]
)
def test_orthogonal_matrices_are_orthogonal(shapes):
    scales = [2.0] * len(shapes)
    matrices = orthogonal_matrices(jr.key(0), shapes, scales)
    for (rows, columns), matrix in zip(shapes, matrices):
        assert matrix.shape == (rows, columns)
        m = np.asarray(matrix) / 2.0
        gram = m.T @ m if rows >= columns else m @ m.T
        np.testing.assert_allclose(gram, np.eye(min(rows, columns)), atol=1e-5)


def test_orthogonal_matrices_differ_between_layers_and_keys():
    a = orthogonal_matrices(jr.key(0), [(8, 8), (8, 8)], [1.0, 1.0])
    b = orthogonal_matrices(jr.key(1), [(8, 8)], [1.0])
    assert not np.allclose(a[0], a[1])
    assert not np.allclose(a[0], b[0])


def test_orthogonal_init_under_vmap():
    def first_weight(key):
        return MLPActorCritic(4, 2, key=key).actor[0].weight

    weights = jax.vmap(first_weight)(jr.split(jr.key(0), 8))
    assert weights.shape == (8, 64, 4)
    assert not np.allclose(weights[0], weights[1])


def test_mlp_actor_critic_outputs():
    network = MLPActorCritic(4, 3, hidden_sizes=(16,), key=jr.key(0))
    observation = jnp.ones(4, jnp.float32)
    distribution, value = network(observation, jnp.array([True, False, True]))
    assert distribution.probs.shape == (3,) and float(distribution.probs[1]) == 0.0
    assert value.shape == () and value.dtype == jnp.float32
    assert float(network.value(observation)) == float(value)
    # Policy head initialized small: near-uniform policy.
    np.testing.assert_allclose(
        MLPActorCritic(4, 3, key=jr.key(1))(observation)[0].probs, 1 / 3, atol=0.02
    )


def test_mlp_actor_critic_rejects_bad_sizes():
    with pytest.raises(ValueError, match="num_actions"):
        MLPActorCritic(4, 0, key=jr.key(0))
    with pytest.raises(ValueError, match="hidden_sizes"):
        MLPActorCritic(4, 2, hidden_sizes=(0,), key=jr.key(0))


def _dot_count(function, *args) -> int:
    jaxpr = jax.make_jaxpr(function)(*args)
    return str(jaxpr).count("dot_general")


@pytest.mark.parametrize("hint", [None, 1, 4, 8, 64])
def test_batch_size_hint_keeps_the_network_function(hint):
    """Under `batch_size_hint`, narrow layers of a small batch run elementwise (no
    matrix product); the outputs and gradients stay those of the plain network."""
    from eqxrl.nn._linear import batch_size_hint

    network = MLPActorCritic(4, 2, hidden_sizes=(64, 64), key=jr.key(0))
    observations = jr.normal(jr.key(1), (hint or 4, 4))

    def logits_and_values(network, observations):
        def one(observation):
            distribution, value = network(observation)
            return distribution.logits, value

        return jax.vmap(one)(observations)

    expected = logits_and_values(network, observations)
    with batch_size_hint(hint):
        hinted = logits_and_values(network, observations)
        dots = _dot_count(logits_and_values, network, observations)
        gradient = jax.grad(lambda n: jnp.sum(logits_and_values(n, observations)[0]))(
            network
        )
    for ours, plain in zip(hinted, expected, strict=True):
        np.testing.assert_allclose(ours, plain, rtol=1e-5, atol=1e-6)
    plain_gradient = jax.grad(lambda n: jnp.sum(logits_and_values(n, observations)[0]))(
        network
    )
    for ours, plain in zip(
        jax.tree.leaves(gradient), jax.tree.leaves(plain_gradient), strict=True
    ):
        np.testing.assert_allclose(ours, plain, rtol=1e-5, atol=1e-6)
    # Six layers (actor and critic: 4-64, 64-64, 64-out): the 64x64 ones always
    # multiply matrices; the narrow ones too, unless the batch is small.
    small = hint is not None and hint * 2 <= 32
    assert dots == (2 if small else 6), (hint, dots)
