"""PPO learns Snake with the CNN policy; the grid transformer trains end to end."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl

# optax.adam computes `b1 ** count` with an int32 count.
STANDARD_DTYPE_PROMOTION = True


@eqx.filter_jit
def mean_score(env, policy, key, num_games=256):
    """Mean food eaten per game over full games, played in one batch until every game
    has ended."""
    reset_key, key = jr.split(key)
    states, timesteps = jax.vmap(env.reset)(jr.split(reset_key, num_games))
    act = jax.vmap(policy)

    def playing(carry):
        *_, done, _, _ = carry
        return ~jnp.all(done)

    def step(carry):
        states, timesteps, done, score, key = carry
        key, action_key, step_key = jr.split(key, 3)
        actions = act(
            timesteps.observation,
            jr.split(action_key, num_games),
            timesteps.action_mask,
        )
        states, timesteps = jax.vmap(env.step)(
            states, actions, jr.split(step_key, num_games)
        )
        score = jnp.where(done, score, states.length - 1)
        done = done | timesteps.terminated | timesteps.truncated
        return states, timesteps, done, score, key

    done = jnp.zeros(num_games, bool)
    score = jnp.zeros(num_games, jnp.int32)
    carry = (states, timesteps, done, score, key)
    *_, score, _ = jax.lax.while_loop(playing, step, carry)
    return score.astype(jnp.float32).mean()


def uniform_valid_move(observation, key, action_mask):
    del observation
    return jr.categorical(key, jnp.where(action_mask, 0.0, -jnp.inf)).astype(jnp.int32)


@pytest.mark.slow
def test_cnn_ppo_beats_random_play_fivefold():
    env = eqxrl.envs.Snake(height=5, width=5)
    ppo = eqxrl.PPO(
        env=env,
        num_envs=32,
        num_steps=64,
        total_timesteps=32 * 64 * 40,
        learning_rate=1e-3,
        network_factory=lambda env, key: eqxrl.nn.CNNActorCritic(
            env.observation_space.shape, 4, key=key
        ),
        observation_storage_dtype=jnp.uint8,
    )
    state, metrics = ppo.train(jr.key(0))
    trained = float(mean_score(env, ppo.policy(state), jr.key(1)))
    random = float(mean_score(env, uniform_valid_move, jr.key(1)))
    assert trained >= 5 * random, (trained, random)
    assert metrics["invalid_action_count"].sum() == 0


@pytest.mark.slow
def test_transformer_ppo_runs_and_its_loss_decreases():
    env = eqxrl.envs.Snake(height=4, width=4)
    ppo = eqxrl.PPO(
        env=env,
        num_envs=16,
        num_steps=32,
        total_timesteps=16 * 32 * 8,
        learning_rate=1e-3,
        network_factory=lambda env, key: eqxrl.nn.GridTransformerActorCritic(
            env.observation_space.shape, 4, key=key
        ),
        observation_storage_dtype=jnp.uint8,
    )
    _, metrics = ppo.train(jr.key(0))
    value_loss = np.asarray(metrics["value_loss"])
    assert np.isfinite(np.asarray(metrics["total_loss"])).all()
    assert value_loss[-2:].mean() < value_loss[:2].mean(), value_loss
