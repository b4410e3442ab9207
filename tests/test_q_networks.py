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
