import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl
from eqxrl.nn import (
    EpsilonGreedyPolicy,
    ImplicitQuantileNetwork,
    MLPQNetwork,
    greedy_action,
)


def test_mlp_q_network_shapes_and_dueling_head():
    network = MLPQNetwork(4, 3, hidden_sizes=(8, 8), key=jr.key(0))
    dueling = MLPQNetwork(4, 3, hidden_sizes=(8,), dueling=True, key=jr.key(0))

    @jax.jit
    def compute(network, dueling, observation):
        features = jax.nn.relu(dueling.layers[0](observation))
        outputs = dueling.head.linear(features)
        value, advantage = outputs[0], outputs[1:]
        expected = value + advantage - advantage.mean()
        return (
            network(observation),
            network.q_values(observation, jr.key(1)),
            dueling(observation),
            expected,
            outputs.shape,
        )

    q, q_keyed, q_dueling, expected, _ = compute(network, dueling, jnp.ones(4))
    assert q.shape == (3,) and q.dtype == jnp.float32
    np.testing.assert_array_equal(q_keyed, q)
    assert dueling.head.linear.out_features == 4  # value + 3 advantages
    np.testing.assert_allclose(q_dueling, expected, rtol=1e-6)
    with pytest.raises(ValueError, match="hidden_sizes"):
        MLPQNetwork(4, 3, hidden_sizes=(8, 0), key=jr.key(0))


def test_implicit_quantile_network_embeds_fractions_with_cosines():
    network = ImplicitQuantileNetwork(
        4, 2, hidden_sizes=(16,), head_sizes=(8,), num_cosines=5, key=jr.key(0)
    )
    observation = jnp.linspace(-1.0, 1.0, 4)
    fractions = jnp.array([0.1, 0.5, 0.9])

    @jax.jit
    def compute(network, observation, fractions):
        quantiles = network.quantile_values(observation, fractions)
        # The same computation written out for one fraction.
        psi = jax.nn.relu(network.torso[0](observation))
        frequencies = jnp.arange(1, 6, dtype=jnp.float32)
        cosines = jnp.cos(jnp.pi * frequencies * fractions[1])
        phi = jax.nn.relu(network.embedding(cosines))
        expected = network.head(jax.nn.relu(network.hidden[0](psi * phi)))
        # q_values averages K sampled quantiles.
        q = network.q_values(observation, jr.key(1))
        sampled = jr.uniform(jr.key(1), (network.num_acting_quantiles,))
        expected_q = network.quantile_values(observation, sampled).mean(axis=0)
        return quantiles, expected, q, expected_q

    quantiles, expected, q, expected_q = compute(network, observation, fractions)
    assert quantiles.shape == (3, 2) and q.shape == (2,)
    np.testing.assert_allclose(quantiles[1], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(q, expected_q, rtol=1e-5)


@pytest.mark.slow
def test_q_networks_match_equinox_linear_layers_row_by_row():
    # The networks compute their layers as `x @ W.T + b` (a faster layout under
    # vmap); the reference applies each `eqx.nn.Linear` to one vector at a time.
    observations = jr.normal(jr.key(2), (5, 4))
    fractions = jr.uniform(jr.key(3), (5, 3))

    def linear_rows(layer, x):
        return jnp.stack([layer(row) for row in x])

    def head_reference(head, features):
        outputs = linear_rows(head.linear, features)
        if not head.dueling:
            return outputs
        value, advantage = outputs[:, :1], outputs[:, 1:]
        return value + advantage - advantage.mean(axis=1, keepdims=True)

    for dueling in (False, True):
        mlp = MLPQNetwork(4, 3, hidden_sizes=(8, 8), dueling=dueling, key=jr.key(0))
        x = observations
        for layer in mlp.layers:
            x = jax.nn.relu(linear_rows(layer, x))
        np.testing.assert_allclose(
            jax.vmap(mlp)(observations), head_reference(mlp.head, x), atol=1e-5
        )

        iqn = ImplicitQuantileNetwork(
            4,
            3,
            hidden_sizes=(8,),
            head_sizes=(8,),
            num_cosines=5,
            dueling=dueling,
            key=jr.key(1),
        )
        quantiles = jax.vmap(iqn.quantile_values)(observations, fractions)
        for b in range(5):
            psi = jax.nn.relu(iqn.torso[0](observations[b]))
            frequencies = jnp.arange(1, 6, dtype=jnp.float32)
            cosines = jnp.cos(jnp.pi * fractions[b][:, None] * frequencies[None, :])
            phi = jax.nn.relu(linear_rows(iqn.embedding, cosines))
            h = jax.nn.relu(linear_rows(iqn.hidden[0], psi[None, :] * phi))
            np.testing.assert_allclose(
                quantiles[b], head_reference(iqn.head, h), atol=1e-5
            )


def test_greedy_action_only_among_valid_actions():
    q = jnp.array([5.0, 1.0, 3.0, 4.0])
    assert int(greedy_action(q)) == 0
    assert int(greedy_action(q, jnp.array([False, True, True, False]))) == 2
    assert int(greedy_action(q, jnp.array([False, True, False, False]))) == 1
    assert greedy_action(q).dtype == jnp.int32


def test_epsilon_greedy_policy_respects_masks():
    network = MLPQNetwork(4, 4, hidden_sizes=(8,), key=jr.key(0))
    observation = jnp.ones(4)
    mask = jnp.array([False, True, False, True])
    keys = jr.split(jr.key(1), 400)

    def act(epsilon):
        policy = EpsilonGreedyPolicy(network, epsilon)
        actions = jax.vmap(policy, in_axes=(None, 0, None))(observation, keys, mask)
        return np.asarray(actions)

    greedy = int(greedy_action(network(observation), mask))
    assert set(act(0.0).tolist()) == {greedy}
    assert set(act(1.0).tolist()) == {1, 3}  # uniform over the valid actions only
    mixed = act(0.5)
    assert set(mixed.tolist()) == {1, 3}
    assert 0.6 < np.mean(mixed == greedy) < 0.9  # 0.5 + 0.5 / 2 in expectation
    unmasked = jax.vmap(EpsilonGreedyPolicy(network, 1.0), in_axes=(None, 0))(
        observation, keys
    )
    assert set(np.asarray(unmasked).tolist()) == {0, 1, 2, 3}


def test_algorithms_take_q_networks_by_their_interface():
    env = eqxrl.envs.make("CartPole-v1")

    def quantile_network(env, key):
        return ImplicitQuantileNetwork(
            4, 2, hidden_sizes=(8,), head_sizes=(8,), key=key
        )

    def plain_network(env, key):
        return MLPQNetwork(4, 2, hidden_sizes=(8,), key=key)

    # A quantile network is a Q-network: DQN takes it and acts greedily on its
    # averaged quantiles.
    dqn = eqxrl.DQN(env=env, network_factory=quantile_network)
    state = dqn.init(jr.key(0))
    assert isinstance(state.network, ImplicitQuantileNetwork)
    observation = jnp.array([0.1, -0.2, 0.05, 0.3])
    action = dqn.policy(state, deterministic=True).act(observation, jr.key(1))
    assert int(action) in (0, 1)
    # IQN needs quantiles, and neither takes an actor-critic: refused when built,
    # naming what the factory must return.
    with pytest.raises(
        ValueError, match="IQN: network_factory must return an eqxrl.nn.Abstract"
    ):
        eqxrl.IQN(env=env, network_factory=plain_network)
    with pytest.raises(ValueError, match="AbstractQNetwork, got MLPActorCritic"):
        eqxrl.DQN(
            env=env,
            network_factory=lambda env, key: eqxrl.nn.MLPActorCritic(4, 2, key=key),
        )


@pytest.mark.slow
def test_noisy_linear_noise_is_keyed_and_zero_sigma_is_linear():
    """A NoisyLinear is its mean layer when called; `sample_noise` draws noise that
    changes with the key, is the same for the same key, and is nothing at
    sigma = 0 (where the layer is an ordinary linear layer of its means)."""
    from eqxrl.nn import NoisyLinear, has_noisy_layers, sample_noise

    layer = NoisyLinear(5, 3, key=jr.key(0))
    x = jnp.arange(5, dtype=jnp.float32) / 5
    linear = eqx.nn.Linear(5, 3, key=jr.key(1))
    linear = eqx.tree_at(
        lambda lin: (lin.weight, lin.bias), linear, (layer.weight, layer.bias)
    )
    np.testing.assert_allclose(layer(x), linear(x), rtol=1e-6)
    bound = np.sqrt(3 / 5)  # Sorrel's initialization of the means
    assert np.all(np.abs(layer.weight) <= bound) and np.all(np.abs(layer.bias) <= bound)
    np.testing.assert_array_equal(
        layer.sigma_weight, np.full((3, 5), 0.017, np.float32)
    )

    noisy = jax.jit(lambda layer, key: sample_noise(layer, key)(x))
    a, a_again, b = (
        noisy(layer, jr.key(2)),
        noisy(layer, jr.key(2)),
        noisy(layer, jr.key(3)),
    )
    np.testing.assert_array_equal(a, a_again)
    assert not np.allclose(a, b) and not np.allclose(a, layer(x))
    # The noise is Gaussian with the layer's scales: weight + sigma * eps.
    many = jax.vmap(lambda k: sample_noise(layer, k).weight)(jr.split(jr.key(4), 4000))
    np.testing.assert_allclose(many.mean(0), layer.weight, atol=0.0017 * 5)
    np.testing.assert_allclose(many.std(0), 0.017, rtol=0.1)

    quiet = NoisyLinear(5, 3, sigma_init=0.0, key=jr.key(0))
    # Jitted and not: the same products, up to the kernel's rounding (jax 0.6).
    np.testing.assert_allclose(noisy(quiet, jr.key(2)), quiet(x), rtol=1e-6, atol=0)
    np.testing.assert_allclose(noisy(quiet, jr.key(2)), linear(x), rtol=1e-6)

    # Gradients reach the scales through a draw.
    def loss(layer):
        return jnp.sum(sample_noise(layer, jr.key(5))(x) ** 2)

    grads = jax.grad(loss)(layer)
    assert np.any(np.asarray(grads.sigma_weight) != 0)
    assert has_noisy_layers([1, {"a": layer}]) and not has_noisy_layers(linear)
    assert sample_noise(linear, jr.key(0)) is linear
    with pytest.raises(ValueError, match="in_features"):
        NoisyLinear(0, 3, key=jr.key(0))


@pytest.mark.slow
def test_implicit_quantile_network_noisy_dueling_head():
    """`noisy=True` makes the layers after the fraction embedding noisy (Sorrel's
    IQN), `dueling=True` centres the advantages; the network's own outputs use
    the means."""
    from eqxrl.nn import NoisyLinear, sample_noise

    network = ImplicitQuantileNetwork(
        6,
        4,
        hidden_sizes=(8,),
        head_sizes=(8,),
        num_cosines=5,
        dueling=True,
        noisy=True,
        key=jr.key(0),
    )
    assert [type(layer) for layer in network.torso] == [eqx.nn.Linear]
    assert type(network.embedding) is eqx.nn.Linear
    assert [type(layer) for layer in network.hidden] == [NoisyLinear]
    assert type(network.head.linear) is NoisyLinear
    assert network.head.linear.out_features == 5  # value + 4 advantages
    fractions = jnp.array([0.1, 0.5, 0.9])
    observation = jnp.linspace(0, 1, 6)
    quantiles = eqx.filter_jit(network.quantile_values)(observation, fractions)
    assert quantiles.shape == (3, 4)
    noisy = sample_noise(network, jr.key(1))
    assert not np.allclose(noisy.quantile_values(observation, fractions), quantiles)
    # Dueling: value plus centred advantages of the (mean) head layer.
    features = jnp.linspace(-1, 1, 8)
    outputs = network.head.linear(features)
    np.testing.assert_allclose(
        network.head(features),
        outputs[0] + outputs[1:] - outputs[1:].mean(),
        rtol=1e-6,
    )
    plain = ImplicitQuantileNetwork(6, 4, hidden_sizes=(8,), key=jr.key(0))
    assert all(type(layer) is eqx.nn.Linear for layer in plain.hidden)


def _conv_reference(network, observation):
    """`CNNQNetwork`'s forward written with XLA's own convolution (VALID, HWIO
    kernel) and LayerNorm by hand: the im2col layout must agree with it."""
    x = jnp.asarray(observation, jnp.float32)[None] * network.observation_scale
    for index, convolution in enumerate(network.convolutions):
        in_channels = x.shape[-1]
        kernel = convolution.weight.T.reshape(3, 3, in_channels, -1)
        x = jax.lax.conv_general_dilated(
            x, kernel, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
        x = x + convolution.bias[None, None, None]
        norm = network.convolution_norms[index]
        mean = x.mean(-1, keepdims=True)
        variance = ((x - mean) ** 2).mean(-1, keepdims=True)
        normalized = (x - mean) / jnp.sqrt(variance + norm.eps)
        x = normalized * norm.weight[None, None, None] + norm.bias[None, None, None]
        x = jax.nn.relu(x)
    x = network.dense.weight @ x.ravel() + network.dense.bias
    mean, variance = x.mean(), x.var()
    norm = network.dense_norm
    x = (x - mean) / jnp.sqrt(variance + norm.eps) * norm.weight + norm.bias
    return network.head.weight @ jax.nn.relu(x) + network.head.bias


@pytest.mark.slow
def test_cnn_q_network_equals_xla_convolutions_with_layer_norm():
    sizes = {"channels": (8, 4), "hidden_size": 16}
    network = eqxrl.nn.CNNQNetwork(
        (7, 6, 3), 5, **sizes, observation_scale=0.5, key=jr.key(0)
    )
    # Learned-looking LayerNorm scales and biases, so that their layout counts.
    leaves, treedef = jax.tree.flatten(network)
    keys = jr.split(jr.key(1), len(leaves))
    network = jax.tree.unflatten(
        treedef,
        [
            leaf + 0.3 * jr.normal(key, leaf.shape)
            if eqx.is_inexact_array(leaf)
            else leaf
            for leaf, key in zip(leaves, keys)
        ],
    )
    observations = jr.uniform(jr.key(2), (4, 7, 6, 3))
    ours = jax.vmap(network)(observations)
    reference = jax.vmap(lambda o: _conv_reference(network, o))(observations)
    assert ours.shape == (4, 5)
    np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        network.q_values(observations[0], jr.key(3)), ours[0], rtol=1e-5, atol=1e-6
    )
    # The 0/1 scale of a board does not matter to the first LayerNorm, but the
    # observation is scaled before the convolution's bias is added.
    unscaled = jax.tree.unflatten(
        jax.tree.structure(eqxrl.nn.CNNQNetwork((7, 6, 3), 5, **sizes, key=jr.key(0))),
        jax.tree.leaves(network),
    )
    assert not np.allclose(jax.vmap(unscaled)(observations), ours)


def test_cnn_q_network_initialization_and_refusals():
    network = eqxrl.nn.CNNQNetwork((10, 10, 4), 6, key=jr.key(0))
    [convolution] = network.convolutions
    assert convolution.weight.shape == (16, 36)
    assert network.dense.weight.shape == (128, 8 * 8 * 16)
    # He-uniform (variance 2 / fan_in) and LeCun-uniform head, zero biases.
    np.testing.assert_allclose(network.dense.weight.var(), 2 / 1024, rtol=0.05)
    np.testing.assert_allclose(network.head.weight.var(), 1 / 128, rtol=0.2)
    assert not np.asarray(network.dense.bias).any()
    plain = eqxrl.nn.CNNQNetwork((10, 10, 4), 6, layer_norm=False, key=jr.key(0))
    assert plain.convolution_norms is None and plain.dense_norm is None
    with pytest.raises(
        ValueError, match=r"height and width above 4 .* got \(4, 9, 2\)"
    ):
        eqxrl.nn.CNNQNetwork((4, 9, 2), 3, channels=(8, 8), key=jr.key(0))
    with pytest.raises(ValueError, match="hidden_size=0"):
        eqxrl.nn.CNNQNetwork((5, 5, 1), 3, hidden_size=0, key=jr.key(0))
