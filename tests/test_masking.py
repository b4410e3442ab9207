"""Action-masked PPO end to end: masks are honoured at rollout and update."""

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl
from eqxrl.envs import AbstractEnvironment, Box, Discrete, TimeStep

# optax.adam computes `b1 ** count` with an int32 count.
STANDARD_DTYPE_PROMOTION = True


class BanditState(eqx.Module):
    step: jax.Array


class MaskedBandit(AbstractEnvironment[BanditState]):
    """One-step episodes; the best action overall (0) is always invalid, so the best
    valid action (2) must be learned."""

    rewards: tuple[float, ...] = (1.0, 0.2, 0.5, 0.0)
    mask: tuple[bool, ...] = (False, True, True, True)

    @property
    def observation_space(self):
        return Box(0.0, 1.0, shape=(1,))

    @property
    def action_space(self):
        return Discrete(4)

    def _timestep(self, reward, done):
        return TimeStep(
            observation=jnp.ones(1, jnp.float32),
            reward=reward,
            terminated=done,
            truncated=jnp.bool_(False),
            action_mask=jnp.asarray(self.mask),
        )

    def reset(self, key):
        return BanditState(jnp.int32(0)), self._timestep(
            jnp.float32(0.0), jnp.bool_(False)
        )

    def step(self, state, action, key):
        reward = jnp.asarray(self.rewards, jnp.float32)[action]
        return BanditState(state.step + 1), self._timestep(reward, jnp.bool_(True))


@pytest.mark.slow
def test_probe_learns_best_valid_action_never_the_masked_one():
    ppo = eqxrl.PPO(
        env=MaskedBandit(),
        num_envs=8,
        num_steps=16,
        total_timesteps=8 * 16 * 30,
        learning_rate=3e-3,
        anneal_lr=False,
    )
    with warnings.catch_warnings():
        # A one-step bandit is learned quickly: its entropy is meant to collapse.
        warnings.simplefilter("ignore", eqxrl.EntropyCollapseWarning)
        state, metrics = ppo.train(jr.key(0))
    assert int(metrics["invalid_action_count"].sum()) == 0
    # Entropy is over the 3 valid actions: near log(3) for the initial (almost
    # uniform) policy, never above it (log(4) over all actions).
    observation = jnp.ones(1, jnp.float32)
    mask = jnp.asarray(MaskedBandit().mask)
    initial_model = ppo.init(jr.key(0)).model
    initial_entropy = initial_model(observation, mask)[0].entropy()
    assert float(initial_entropy) == pytest.approx(np.log(3.0), abs=0.01)
    assert float(metrics["entropy"].max()) <= np.log(3.0) + 1e-4
    assert float(metrics["max_entropy"][0]) == pytest.approx(np.log(3.0), abs=1e-5)
    policy = ppo.policy(state, deterministic=True)
    assert int(policy.act(observation, jr.key(0), mask)) == 2
    # The underlying preference, without the mask, need not be action 2; with the
    # mask, the sampled actions are only ever valid ones.
    actions = jax.vmap(ppo.policy(state).act, in_axes=(None, 0, None))(
        observation, jr.split(jr.key(1), 1000), mask
    )
    assert not np.isin(np.asarray(actions), [0]).any()


def test_all_masked_states_never_produce_nan():
    bandit = MaskedBandit(mask=(False, False, False, False))
    ppo = eqxrl.PPO(env=bandit, num_envs=4, num_steps=8, total_timesteps=4 * 8 * 3)
    _, metrics = ppo.train(jr.key(0))
    for name in ("total_loss", "policy_loss", "value_loss", "entropy", "approx_kl"):
        assert np.isfinite(metrics[name]).all(), name


def test_entropy_collapse_warns_once_and_can_be_silenced():
    ppo = eqxrl.PPO(
        env=MaskedBandit(),
        num_envs=8,
        num_steps=16,
        total_timesteps=8 * 16 * 40,
        learning_rate=1e-2,
        ent_coef=0.0,
        anneal_lr=False,
    )
    with pytest.warns(eqxrl.EntropyCollapseWarning, match="ent_coef") as record:
        ppo.train(jr.key(0))
    assert len(record) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", eqxrl.EntropyCollapseWarning)
        ppo.train(jr.key(0))


def test_check_entropy_collapse_thresholds():
    check = eqxrl.algorithms.check_entropy_collapse
    max_entropy = np.full(20, np.log(2))
    healthy = {"entropy": np.full(20, 0.6), "max_entropy": max_entropy}
    assert check(healthy, warn=False) is None
    # Converging late in the run is not a collapse.
    late = {**healthy, "entropy": np.concatenate([np.full(10, 0.5), np.full(10, 0.01)])}
    assert check(late, warn=False) is None
    # In the first 10% of the run it is.
    early = {**healthy, "entropy": np.array([0.6, 0.01, *[0.5] * 18])}
    assert check(early, warn=False) == 1
    # Vmapped seeds: a collapse in any seed counts.
    batched = {k: np.stack([healthy[k], early[k]]) for k in healthy}
    assert check(batched, warn=False) == 1
    assert check({"entropy": np.zeros(3)}, warn=False) is None


@pytest.mark.learning
def test_grid_maze_learned_with_masks_without_invalid_actions():
    env = eqxrl.envs.make("GridMaze-v0")
    ppo = eqxrl.PPO(
        env=env,
        num_envs=16,
        num_steps=64,
        total_timesteps=16 * 64 * 60,
        learning_rate=1e-3,
        gamma=0.95,
    )
    _, metrics = eqx.filter_vmap(ppo.train)(jr.split(jr.key(0), 2))
    assert int(metrics["invalid_action_count"].sum()) == 0
    final_length = np.nanmean(np.asarray(metrics["episode_length"])[:, -5:], axis=1)
    final_return = np.nanmean(np.asarray(metrics["episode_return"])[:, -5:], axis=1)
    # The shortest path takes 8 moves; random walks mostly time out at 50.
    assert (final_return > 0.99).all(), final_return
    assert (final_length < 10).all(), final_length


def test_grid_maze_rules():
    env = eqxrl.envs.GridMaze()
    state, timestep = env.reset(jr.key(0))
    assert timestep.action_mask.tolist() == [False, True, True, False]
    assert timestep.observation.shape == (5, 5, 3)
    # A masked move (up, off the grid) leaves the agent in place.
    same, _ = env.step(state, jnp.int32(0), jr.key(0))
    assert same.position.tolist() == state.position.tolist()
    moved, _ = env.step(state, jnp.int32(1), jr.key(0))
    assert moved.position.tolist() == [0, 1]
    # Walk the shortest path: right right down down right right up up.
    for action in [1, 1, 2, 2, 1, 1, 0, 0]:
        state, timestep = env.step(state, jnp.int32(action), jr.key(0))
    assert bool(timestep.terminated) and float(timestep.reward) == 1.0
    with pytest.raises(ValueError, match="exactly one"):
        eqxrl.envs.GridMaze(layout=("S..", "..."))
