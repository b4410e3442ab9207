"""`AbstractAlgorithm.compiler_options`: applied to top-level (and vmapped) `train`
calls, left out where JAX refuses them (inside a user's `jit` or `grad`)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import pytest

import eqxrl
from eqxrl.algorithms._base import jit_with_options


def _square_sum(x):
    return jnp.sum(x * x)


# Trains PPO, whose optax Adam needs standard dtype promotion (see conftest.py).
STANDARD_DTYPE_PROMOTION = True

BOGUS = {"xla_cpu_no_such_option_for_tests": True}


def test_options_reach_xla_at_top_level_and_under_vmap():
    square_sum = jit_with_options(_square_sum, BOGUS)
    # XLA rejects the unknown option: proof that the options were passed.
    with pytest.raises(Exception, match="xla_cpu_no_such_option_for_tests"):
        square_sum(jnp.ones(3))
    with pytest.raises(Exception, match="xla_cpu_no_such_option_for_tests"):
        jax.vmap(square_sum)(jnp.ones((2, 3)))


def test_options_left_out_inside_transformations():
    square_sum = jit_with_options(_square_sum, BOGUS)
    assert float(jax.jit(square_sum)(jnp.ones(3))) == 3.0
    assert float(jax.grad(square_sum)(jnp.ones(3))[0]) == 2.0
    total = jax.lax.scan(lambda c, x: (c + square_sum(x), None), 0.0, jnp.ones((4, 3)))
    assert float(total[0]) == 12.0


def test_no_options_is_plain_filter_jit():
    square_sum = jit_with_options(_square_sum, {})
    assert float(square_sum(jnp.ones(3))) == 3.0
    assert jit_with_options(_square_sum, {}) is square_sum  # one compilation cache


def test_ppo_trains_with_its_options_everywhere():
    ppo = eqxrl.PPO(
        env=eqxrl.envs.make("CartPole-v1"),
        num_envs=2,
        num_steps=8,
        num_minibatches=2,
        num_epochs=1,
        total_timesteps=32,
    )
    if jax.default_backend() == "cpu":
        assert ppo.compiler_options == {
            **eqxrl.algorithms.cpu_compiler_options(),
            "xla_cpu_multi_thread_eigen": False,
        }
        dqn = eqxrl.DQN(env=eqxrl.envs.make("CartPole-v1"))
        assert dqn.compiler_options == eqxrl.algorithms.cpu_compiler_options()
    key = jr.key(0)
    _, top = ppo.train(key)
    _, inside_jit = eqx.filter_jit(lambda k: ppo.train(k))(key)
    _, vmapped = eqx.filter_vmap(ppo.train)(jr.split(key, 2))
    compiled = ppo.lower(key).compile()
    _, ahead_of_time = compiled(ppo, key, True)
    for metrics in (inside_jit, ahead_of_time):
        assert jnp.allclose(metrics["total_loss"], top["total_loss"])
    assert vmapped["total_loss"].shape == (2, ppo.num_iterations)
