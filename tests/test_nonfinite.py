"""A loss that becomes NaN stops training with a clear error (DESIGN tier 3 checks),
unless `throw=False` asks to train on (sweeps)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl
from eqxrl.envs import AbstractWrapper

STANDARD_DTYPE_PROMOTION = True  # optax's Adam


class NaNRewards(AbstractWrapper):
    """Every reward NaN where `broken` (an array leaf, so a sweep can vmap it)."""

    env: eqxrl.envs.AbstractEnvironment
    broken: jax.Array

    def reset(self, key):
        return self.env.reset(key)

    def step(self, state, action, key):
        state, timestep = self.env.step(state, action, key)
        reward = jnp.where(self.broken, jnp.nan, timestep.reward)
        return state, eqx.tree_at(lambda t: t.reward, timestep, reward)


def small_ppo(broken):
    env = NaNRewards(eqxrl.envs.make("CartPole-v1"), jnp.asarray(broken))
    return eqxrl.PPO(env=env, num_envs=2, num_steps=8, total_timesteps=64)


def test_train_raises_when_the_loss_becomes_nan():
    with pytest.raises(eqx.EquinoxRuntimeError, match="PPO: training diverged"):
        small_ppo(broken=True).train(jr.key(0))


def test_throw_false_trains_on_and_shows_nan_losses():
    state, metrics = small_ppo(broken=True).train(jr.key(0), throw=False)
    assert metrics["total_loss"].shape == (4,)
    assert np.isnan(np.asarray(metrics["total_loss"])).all()


def test_healthy_runs_do_not_raise():
    state, metrics = small_ppo(broken=False).train(jr.key(0))
    assert np.isfinite(np.asarray(metrics["total_loss"])).all()


def test_a_vmapped_sweep_with_throw_false_keeps_the_healthy_members():
    def run(broken, key):
        return small_ppo(broken).train(key, throw=False)[1]["total_loss"]

    losses = np.asarray(
        eqx.filter_vmap(run)(jnp.array([False, True]), jr.split(jr.key(0), 2))
    )
    assert np.isfinite(losses[0]).all()
    assert np.isnan(losses[1]).all()


def test_trainer_stops_after_the_diverged_chunk_without_checkpointing_it(tmp_path):
    trainer = eqxrl.Trainer(
        small_ppo(broken=True),
        out=tmp_path,
        chunk_size=1,
        checkpoint_every=1,
        eval_episodes=0,
        gif_episodes=0,
        progress=False,
        verbose=False,
    )
    with pytest.raises(FloatingPointError, match="diverged .* at iteration 1"):
        trainer.fit(seed=0)
    checkpoints = tmp_path / "checkpoints"
    assert not checkpoints.exists() or not any(checkpoints.iterdir())
    assert (tmp_path / "metrics.csv").read_text().count("nan") > 0  # rows logged


def test_dqn_nan_losses_before_learning_starts_are_not_divergence():
    env = eqxrl.envs.make("CartPole-v1")
    config = dict(
        num_envs=4,
        train_frequency=2,
        gradient_steps=2,
        batch_size=16,
        buffer_size=256,
        learning_starts=32,
        total_timesteps=80,
        hidden_sizes=(16,),
    )
    state, metrics = eqxrl.DQN(env=env, **config).train(jr.key(0))
    losses = np.asarray(metrics["loss"])
    assert np.isnan(losses[0]) and np.isfinite(losses[-1])  # NaN = no update yet
    broken = NaNRewards(env, jnp.asarray(True))
    with pytest.raises(eqx.EquinoxRuntimeError, match="DQN: training diverged"):
        eqxrl.DQN(env=broken, **config).train(jr.key(0))
