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
