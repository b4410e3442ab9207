"""Runtime shape checks (jaxtyping + beartype): on in the tests, and their errors name
the offending argument."""

import jax.numpy as jnp
import jax.random as jr
import pytest
from jaxtyping import TypeCheckError

import eqxrl


def test_typechecking_is_on_in_tests(request):
    # pyproject.toml runs the tests under the jaxtyping pytest plugin (on top of
    # eqxrl's own import hook; see conftest.py): a wrong shape must raise.
    packages = request.config.getoption("jaxtyping_packages") or ""
    assert "eqxrl" in packages.split(","), packages
    assert eqxrl.TYPECHECK
    env = eqxrl.envs.CartPole()
    state, _ = env.reset(jr.key(0))
    with pytest.raises(TypeCheckError):
        env.step(state, jnp.zeros(3, jnp.int32), jr.key(1))


def test_wrong_shaped_action_names_argument():
    env = eqxrl.envs.make("CartPole-v1")
    state, _ = env.reset(jr.key(0))
    with pytest.raises(TypeCheckError, match="parameter 'action'"):
        env.env.step(state.env_state, jnp.array([1, 0], jnp.int32), jr.key(1))


def test_wrong_shaped_observation_names_argument():
    network = eqxrl.nn.CNNActorCritic((5, 5, 3), 4, key=jr.key(0))
    network(jnp.zeros((5, 5, 3)))  # the right shape passes
    with pytest.raises(TypeCheckError, match="parameter 'observation'"):
        network(jnp.zeros((5, 5)))  # no channel axis


def test_wrong_shaped_reward_names_field():
    # A reward vector is one reward per agent; its agent axis must be the mask's.
    with pytest.raises(TypeCheckError, match="parameter 'reward'|action_mask"):
        eqxrl.envs.TimeStep(
            observation=jnp.zeros(4),
            reward=jnp.zeros(3),
            terminated=jnp.bool_(False),
            truncated=jnp.bool_(False),
            action_mask=jnp.ones(4, bool),
        )
    # More than one axis is never a reward.
    with pytest.raises(ValueError, match=r"reward has shape \(3, 2\)"):
        eqxrl.envs.TimeStep(
            observation=jnp.zeros(4),
            reward=jnp.zeros((3, 2)),
            terminated=jnp.bool_(False),
            truncated=jnp.bool_(False),
        )


def test_wrong_shaped_mask_is_rejected_when_acting():
    network = eqxrl.nn.MLPActorCritic(4, 2, key=jr.key(0))
    with pytest.raises(TypeCheckError, match="parameter 'action_mask'"):
        network(jnp.zeros(4), jnp.ones((2, 2), bool))
