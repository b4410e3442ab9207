import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl

# optax.adam computes `b1 ** count` with an int32 count.
STANDARD_DTYPE_PROMOTION = True


def test_one_call_train_returns_policy_state_metrics():
    result = eqxrl.train(
        "CartPole-v1",
        algorithm="ppo",
        total_timesteps=4 * 32 * 3,
        num_envs=4,
        learning_rate=1e-3,
        seed=3,
        num_steps=32,
    )
    assert isinstance(result.algorithm, eqxrl.PPO)
    assert result.algorithm.num_steps == 32
    assert float(result.algorithm.learning_rate) == pytest.approx(1e-3)
    assert result.metrics["episode_return"].shape == (3,)
    assert int(result.state.iteration) == 3
    observation = jnp.zeros(4, jnp.float32)
    action = result.act(observation, jr.key(0))
    assert action.dtype == jnp.int32 and int(action) in (0, 1)
    masked = result.greedy_policy.act(observation, jr.key(0), jnp.array([False, True]))
    assert int(masked) == 1
    # `step` serves feed-forward policies too: the carry stays None.
    assert result.initial_carry() is None
    carry, stepped = result.step(None, observation, jr.key(0))
    assert carry is None and int(stepped) == int(action)
    again = eqxrl.train(
        eqxrl.envs.make("CartPole-v1"),
        total_timesteps=4 * 32 * 3,
        num_envs=4,
        learning_rate=1e-3,
        seed=3,
        num_steps=32,
    )
    np.testing.assert_array_equal(
        again.metrics["total_loss"], result.metrics["total_loss"]
    )


@pytest.mark.slow
def test_one_call_train_with_a_recurrent_network_steps_with_a_carry():
    result = eqxrl.train(
        "StatelessCartPole-v1",
        network_factory=eqxrl.nn.GRUActorCritic.from_env,
        total_timesteps=2 * 16 * 2,
        num_envs=2,
        num_steps=16,
        num_minibatches=2,
        num_epochs=1,
        seed=1,
    )
    assert result.policy.is_recurrent and int(result.state.iteration) == 2
    assert result.state.carry.hidden.shape == (2, 256)  # one per environment
    observation = jnp.array([0.01, -0.02], jnp.float32)
    with pytest.raises(TypeError, match=r"result\.step\(carry.*initial_carry"):
        result.act(observation, jr.key(0))
    carry = result.initial_carry()
    np.testing.assert_array_equal(carry.hidden, np.zeros(256, np.float32))
    # Two steps, jitted, as the policy's own (traced) step gives them.
    expected_carry = carry
    for key in jr.split(jr.key(2), 2):
        carry, action = result.step(carry, observation, key)
        expected_carry, expected = result.policy.step(expected_carry, observation, key)
        assert action.dtype == jnp.int32 and int(action) == int(expected)
        np.testing.assert_allclose(carry.hidden, expected_carry.hidden, atol=1e-6)
    assert not np.array_equal(carry.hidden, result.initial_carry().hidden)


def test_unknown_hyperparameter_lists_valid_ones():
    with pytest.raises(TypeError, match=r"\['gama'\].*gamma"):
        eqxrl.train("CartPole-v1", gama=0.9)


def test_unknown_algorithm_and_env():
    with pytest.raises(ValueError, match="ppo"):
        eqxrl.train("CartPole-v1", algorithm="a2c")
    with pytest.raises(ValueError, match="CartPole-v1"):
        eqxrl.train("NoSuchEnv-v0")
    assert "ppo" in eqxrl.algorithms.algorithm_names()
    assert eqxrl.algorithms.get_algorithm("PPO") is eqxrl.PPO
