"""PPO's `observation_storage_dtype`: compact rollout observations."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl

# optax.adam computes `b1 ** count` with an int32 count.
STANDARD_DTYPE_PROMOTION = True


def snake_ppo(size=4, num_envs=8, num_steps=16, iterations=2, **kwargs):
    return eqxrl.PPO(
        env=eqxrl.envs.Snake(height=size, width=size),
        num_envs=num_envs,
        num_steps=num_steps,
        total_timesteps=num_envs * num_steps * iterations,
        num_minibatches=2,
        hidden_sizes=(32, 32),
        **kwargs,
    )


def run_one_iteration(ppo: eqxrl.PPO):
    """One `train_iteration`, compiled with `jax.jit`; returns its metrics, the
    updated model's arrays and XLA's scratch memory for it (`temp_size_in_bytes`)."""
    state = eqx.filter_jit(ppo.init)(jr.key(0))
    dynamic, static = eqx.partition((ppo, state), eqx.is_array)

    def iteration(dynamic):
        ppo, state = eqx.combine(dynamic, static)
        state, metrics = ppo.train_iteration(state)
        return eqx.filter(state.model, eqx.is_array), metrics

    compiled = jax.jit(iteration).lower(dynamic).compile()
    model, metrics = compiled(dynamic)
    return metrics, model, compiled.memory_analysis().temp_size_in_bytes


@pytest.mark.slow
def test_exact_uint8_storage_trains_like_float32_in_less_memory():
    num_envs, num_steps, size = 32, 16, 6
    reference, model, float32_bytes = run_one_iteration(
        snake_ppo(size, num_envs, num_steps)
    )
    compact, compact_model, uint8_bytes = run_one_iteration(
        snake_ppo(size, num_envs, num_steps, observation_storage_dtype=jnp.uint8)
    )
    # The same observations after the round trip, so the same update.
    for name in reference:
        np.testing.assert_allclose(
            compact[name], reference[name], rtol=1e-5, atol=1e-6, err_msg=name
        )
    for a, b in zip(jax.tree.leaves(model), jax.tree.leaves(compact_model)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # Three of every four observation bytes disappear (allow a little slack).
    observation_bytes = num_envs * num_steps * size * size * 3 * 4
    assert float32_bytes - uint8_bytes >= 0.9 * 0.75 * observation_bytes


def test_storage_dtype_accepts_names_and_defaults_to_none():
    assert snake_ppo().observation_storage_dtype is None
    ppo = snake_ppo(observation_storage_dtype="uint8")
    assert ppo.observation_storage_dtype == jnp.dtype(jnp.uint8)
