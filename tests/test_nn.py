import math

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from jaxtyping import TypeCheckError

from eqxrl.nn import (
    MLPActorCritic,
    MLPGaussianActorCritic,
    batch_size_hint,
    orthogonal_matrices,
    orthonormal_columns,
)


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


@pytest.mark.parametrize(
    "shapes", [[(64, 4), (64, 64), (2, 64), (1, 64)], [(3, 7), (7, 3), (1, 1), (5, 5)]]
)
def test_orthogonal_matrices_are_the_qr_factors_of_their_gaussian_draw(shapes):
    """Each matrix is the sign-corrected Q of LAPACK's QR (NumPy's, outside XLA) of
    its block of one `jax.random.normal` draw, as `jax.nn.initializers.orthogonal`
    computes it for a draw of its own: the same function of a Gaussian matrix."""
    scales = [math.sqrt(2.0), 0.01, 1.0, 3.0][: len(shapes)]
    key = jr.key(7)
    matrices = orthogonal_matrices(key, shapes, scales)
    tall_shapes = [(max(shape), min(shape)) for shape in shapes]
    rows = max(shape[0] for shape in tall_shapes)
    columns = max(shape[1] for shape in tall_shapes)
    noise = np.asarray(jr.normal(key, (len(shapes), rows, columns)), np.float64)
    for index, (shape, scale) in enumerate(zip(shapes, scales)):
        block = noise[index, : tall_shapes[index][0], : tall_shapes[index][1]]
        q, r = np.linalg.qr(block)
        q = q * np.sign(np.diag(r))
        expected = scale * (q if shape[0] >= shape[1] else q.T)
        np.testing.assert_allclose(matrices[index], expected, atol=1e-5 * scale)


def _haar_entry_cdf(t, n):
    """CDF of one coordinate of a uniform point on the unit sphere of R^n: its
    square is Beta(1/2, (n - 1)/2) and its sign is fair."""
    t = np.clip(t, -1.0, 1.0)
    tail = np.asarray(jax.scipy.special.betainc(0.5, (n - 1) / 2.0, t * t))
    return 0.5 + 0.5 * np.sign(t) * tail


def _kolmogorov_smirnov(samples, cdf) -> float:
    samples = np.sort(samples)
    count = len(samples)
    values = cdf(samples)
    above = np.arange(1, count + 1) / count - values
    below = values - np.arange(count) / count
    return float(max(above.max(), below.max()))


def test_orthogonal_matrices_are_haar_distributed():
    """The statistics of Haar-distributed orthogonal matrices, on 4,000 draws (fixed
    keys: deterministic): every column of a tall matrix (every row of a wide one) is
    uniform on the sphere, so each entry has the distribution `_haar_entry_cdf`; and
    for a square O(6) matrix the traces of its powers have the moments Diaconis and
    Shahshahani give, E tr Q = E tr Q^3 = 0, E (tr Q)^2 = E tr Q^2 = 1. Without the
    sign correction of the QR factors the first entry would always be negative."""
    draws = 4000
    shapes = [(6, 6), (7, 3), (3, 7)]
    matrices = jax.vmap(lambda key: orthogonal_matrices(key, shapes, [1.0] * 3))(
        jr.split(jr.key(11), draws)
    )
    # Kolmogorov-Smirnov at the 0.1% level.
    critical = 1.949 / math.sqrt(draws)
    for (rows, columns), matrix in zip(shapes, matrices):
        matrix = np.asarray(matrix)
        sphere = max(rows, columns)
        for i, j in [(0, 0), (rows - 1, columns - 1), (1, 2)]:
            statistic = _kolmogorov_smirnov(
                matrix[:, i, j], lambda t: _haar_entry_cdf(t, sphere)
            )
            assert statistic < critical, ((rows, columns), (i, j), statistic)
    square = np.asarray(matrices[0], np.float64)
    trace = np.trace(square, axis1=1, axis2=2)
    squared = square @ square
    trace_of_square = np.trace(squared, axis1=1, axis2=2)
    trace_of_cube = np.trace(squared @ square, axis1=1, axis2=2)
    standard_error = 1.0 / math.sqrt(draws)
    assert abs(trace.mean()) < 4 * standard_error
    assert abs((trace**2).mean() - 1.0) < 4 * math.sqrt(2.0) * standard_error
    assert abs(trace_of_square.mean() - 1.0) < 4 * math.sqrt(2.0) * standard_error
    assert abs(trace_of_cube.mean()) < 4 * math.sqrt(3.0) * standard_error


def test_orthonormal_columns_for_ill_conditioned_matrices():
    # Columns nearly parallel (condition number about 1e6): one pass of Gram-Schmidt
    # would lose orthogonality here; the second pass restores it.
    base = jr.normal(jr.key(0), (48, 1))
    matrix = base + 1e-6 * jr.normal(jr.key(1), (48, 16))
    q = np.asarray(orthonormal_columns(matrix), np.float64)
    np.testing.assert_allclose(q.T @ q, np.eye(16), atol=1e-5)


def test_orthonormal_columns_refuses_a_wide_matrix():
    with pytest.raises(ValueError, match="pass its transpose"):
        orthonormal_columns(jnp.ones((2, 3)))


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


@pytest.mark.parametrize("network_class", ["categorical", "gaussian"])
def test_lecun_uniform_initialization_is_brax_s(network_class):
    """`initialization="lecun_uniform"`: every layer's weights uniform in
    +-sqrt(3 / fan_in) (variance 1 / fan_in, as Brax's `lecun_uniform` kernels),
    the heads included, zero biases; the default stays orthogonal."""
    make = (
        (lambda **kw: MLPActorCritic(16, 3, hidden_sizes=(256, 256), **kw))
        if network_class == "categorical"
        else (
            lambda **kw: MLPGaussianActorCritic(
                16, 3, hidden_sizes=(256, 256), state_dependent_std=True, **kw
            )
        )
    )
    network = make(initialization="lecun_uniform", key=jr.key(0))
    for layer in [*network.actor, *network.critic]:
        fan_in = layer.weight.shape[1]
        limit = math.sqrt(3.0 / fan_in)
        weight = np.asarray(layer.weight)
        assert np.all(np.abs(weight) <= limit)
        assert np.abs(weight).max() > 0.9 * limit  # not a narrower draw
        np.testing.assert_allclose(weight.var(), 1.0 / fan_in, rtol=0.25)
        assert not np.any(np.asarray(layer.bias))
    # The policy head is not scaled down as the orthogonal one (gain 0.01) is.
    orthogonal = make(key=jr.key(0))
    head = np.asarray(network.actor[-1].weight)
    assert (
        np.abs(head).max() > 10 * np.abs(np.asarray(orthogonal.actor[-1].weight)).max()
    )
    # Refused by the runtime type check (a ValueError where it is off).
    with pytest.raises((ValueError, TypeCheckError), match="initialization"):
        make(initialization="xavier", key=jr.key(0))


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


def test_from_env_builds_each_algorithm_s_default_network():
    """`from_env` of the MLP actor-critics and Q-networks is what PPO, DQN, IQN
    and PQN build by default (the same weights from the same key), so passing it as
    `network_factory` names the default network."""
    import functools

    import equinox as eqx

    import eqxrl
    from eqxrl.nn import ImplicitQuantileNetwork, MLPQNetwork

    cartpole = eqxrl.envs.make("CartPole-v1")
    pendulum = eqxrl.envs.make("Pendulum-v1")
    cases = [
        (eqxrl.PPO, cartpole, MLPActorCritic.from_env),
        (eqxrl.PPO, pendulum, MLPGaussianActorCritic.from_env),
        (eqxrl.DQN, cartpole, MLPQNetwork.from_env),
        # IQN acts on the mean of 8 quantiles, PQN's Q-networks are 256 wide and
        # normalize their layers: the algorithms' own defaults.
        (
            eqxrl.IQN,
            cartpole,
            functools.partial(ImplicitQuantileNetwork.from_env, num_acting_quantiles=8),
        ),
        (
            eqxrl.PQN,
            cartpole,
            functools.partial(
                MLPQNetwork.from_env, hidden_sizes=(256, 256), layer_norm=True
            ),
        ),
    ]
    key = jr.key(3)
    for algorithm, env, factory in cases:
        default = algorithm(env=env).make_network(key)
        named = algorithm(env=env, network_factory=factory).make_network(key)
        assert eqx.tree_equal(default, named), (algorithm, env)
