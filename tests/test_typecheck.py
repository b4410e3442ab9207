import jax.numpy as jnp
import jax.random as jr
import pytest

import eqxrl


def test_typechecking_is_on_in_tests():
    assert eqxrl.TYPECHECK


def test_wrong_shaped_action_names_argument():
    env = eqxrl.envs.make("CartPole-v1")
    state, _ = env.reset(jr.key(0))
    with pytest.raises(Exception, match=r"(?s)action.*Int\[.*''\]"):
        env.env.step(state.env_state, jnp.array([1, 0], jnp.int32), jr.key(1))


def test_wrong_shaped_observation_names_argument():
    with pytest.raises(Exception, match="observation"):
        eqxrl.envs.TimeStep(
            observation=jnp.zeros(4),
            reward=jnp.zeros(3),
            terminated=jnp.bool_(False),
            truncated=jnp.bool_(False),
        )


def test_wrong_shaped_mask_is_rejected_when_acting():
    network = eqxrl.nn.MLPActorCritic(4, 2, key=jr.key(0))
    with pytest.raises(Exception, match="action_mask"):
        network(jnp.zeros(4), jnp.ones((2, 2), bool))
