import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from eqxrl.nn import MLPActorCritic, batch_size_hint, orthogonal_matrices


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
    """Matrix products in a fresh trace of `function` (a new function each time:
    `make_jaxpr` caches traces, and `batch_size_hint` acts when tracing)."""
    jaxpr = jax.make_jaxpr(lambda *args: function(*args))(*args)
    return str(jaxpr).count("dot_general")


def _logits_and_values(network, observations):
    def one(observation):
        distribution, value = network(observation)
        return distribution.logits, value

    return jax.vmap(one)(observations)


@pytest.mark.parametrize("hint", [None, 1, 4, 8, 64])
def test_batch_size_hint_keeps_the_network_function(hint):
    """Whatever `batch_size_hint` makes of the layers, the outputs and gradients stay
    those of the plain network (whose layers are `eqx.nn.Linear` calls)."""
    network = MLPActorCritic(4, 2, hidden_sizes=(64, 64), key=jr.key(0))
    observations = jr.normal(jr.key(1), (hint or 4, 4))

    def loss(network):
        logits, values = _logits_and_values(network, observations)
        return jnp.sum(logits @ jnp.arange(1.0, 3.0)) + jnp.sum(values**2)

    expected = _logits_and_values(network, observations)
    plain_gradient = jax.grad(loss)(network)
    with batch_size_hint(hint):
        hinted = _logits_and_values(network, observations)
        gradient = jax.grad(loss)(network)
    for ours, plain in zip(hinted, expected, strict=True):
        np.testing.assert_allclose(ours, plain, rtol=1e-5, atol=1e-6)
    for ours, plain in zip(
        jax.tree.leaves(gradient), jax.tree.leaves(plain_gradient), strict=True
    ):
        np.testing.assert_allclose(ours, plain, rtol=1e-5, atol=1e-6)


def test_batch_size_hint_drops_matrix_products_of_small_batches_on_cpu():
    network = MLPActorCritic(4, 2, hidden_sizes=(64, 64), key=jr.key(0))
    observations = jnp.zeros((4, 4))
    plain = _dot_count(_logits_and_values, network, observations)

    def dots(hint):
        with batch_size_hint(hint):
            return _dot_count(_logits_and_values, network, observations)

    counts = [dots(hint) for hint in (1, 2, 4, 8, 16, 32, 64, 1024)]
    assert dots(None) == plain
    assert counts == sorted(counts), counts  # more examples, more matrix products
    assert counts[-1] == plain  # a large batch: every layer a matrix product
    if jax.default_backend() == "cpu":
        # One example: the narrow layers (4 inputs, 2 or 1 outputs) run
        # elementwise; the 64 x 64 ones still multiply matrices.
        assert 0 < counts[0] < plain, (counts, plain)
    else:
        assert counts[0] == plain
    assert _dot_count(_logits_and_values, network, observations) == plain  # reset
