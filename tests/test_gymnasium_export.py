"""eqxrl environments exported to gymnasium (`to_gymnasium`): gymnasium's own
checker, seeding, termination vs truncation, the vector environment's same-step
autoreset, and Stable-Baselines3 when it is installed."""

import warnings

import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")

from gymnasium.utils.env_checker import check_env  # noqa: E402
from gymnasium.vector import AutoresetMode  # noqa: E402

import eqxrl  # noqa: E402
from eqxrl.envs import CartPole, TimeLimit, to_gymnasium  # noqa: E402

BUILT_IN = ["CartPole-v1", "Pendulum-v1", "Snake-v0", "GridMaze-v0"]


@pytest.mark.parametrize("env_id", BUILT_IN)
def test_gymnasium_checker_passes(env_id):
    env = to_gymnasium(eqxrl.envs.make(env_id), render_mode="rgb_array")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=False)
    # Advice only, which gymnasium's own Pendulum gets too; anything else fails.
    advice = ("symmetric and normalized space", "not having a spec")
    for warning in caught:
        assert any(text in str(warning.message) for text in advice), warning.message
    observation, _ = env.reset(seed=0)
    assert env.observation_space.contains(observation)
    frame = env.render()
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[-1] == 3


def rollout(env, seed, num_steps=30):
    observation, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    observations = [observation]
    for _ in range(num_steps):
        observation, reward, terminated, truncated, _ = env.step(
            env.action_space.sample()
        )
        observations.append(observation)
        if terminated or truncated:
            observation, _ = env.reset()
    return np.stack(observations)


def test_the_same_seed_gives_the_same_episode():
    env = to_gymnasium(eqxrl.envs.make("Pendulum-v1"))
    np.testing.assert_array_equal(rollout(env, 3), rollout(env, 3))
    assert not np.array_equal(rollout(env, 3), rollout(env, 4))


def test_truncation_and_termination_are_kept_apart():
    env = to_gymnasium(TimeLimit(CartPole(), 5))
    env.reset(seed=0)
    flags = [env.step(step % 2)[2:4] for step in range(5)]
    assert flags == [(False, False)] * 4 + [(False, True)]  # cut by the time limit
    env = to_gymnasium(TimeLimit(CartPole(), 200))
    env.reset(seed=0)
    for _ in range(100):  # always push right: the pole falls
        _, _, terminated, truncated, _ = env.step(1)
        if terminated or truncated:
            break
    assert terminated and not truncated


def test_bad_actions_and_order_are_refused():
    env = to_gymnasium(eqxrl.envs.make("CartPole-v1"))
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="outside the action space Discrete"):
        env.step(2)
    with pytest.raises(ValueError, match="integer"):
        env.step(0.5)


def test_masked_environment_gives_its_mask_in_info():
    env = to_gymnasium(eqxrl.envs.make("GridMaze-v0"))
    _, info = env.reset(seed=0)
    mask = info["action_mask"]
    assert mask.dtype == np.bool_ and mask.shape == (env.action_space.n,)
    assert mask.any()


def test_vector_environment_autoresets_in_the_same_step():
    num_envs = 4
    env = to_gymnasium(eqxrl.envs.make("CartPole-v1"), num_envs=num_envs)
    assert env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    observations, _ = env.reset(seed=0)
    assert observations.shape == (num_envs, 4)
    assert env.observation_space.contains(observations)
    ended = 0
    for _ in range(60):  # always push right: every episode ends within ~30 steps
        observations, rewards, terminated, truncated, info = env.step(
            np.ones(num_envs, np.int64)
        )
        assert rewards.shape == terminated.shape == (num_envs,)
        done = terminated | truncated
        if done.any():
            np.testing.assert_array_equal(info["_final_obs"], done)
            for index in range(num_envs):
                final = info["final_obs"][index]
                if done[index]:
                    # The last observation of the episode (the pole beyond its
                    # threshold), and a fresh first one in its place.
                    assert abs(final[2]) > 0.2 or abs(final[0]) > 2.4
                    assert np.all(np.abs(observations[index]) <= 0.05)
                else:
                    assert final is None
            ended += int(done.sum())
    assert ended >= num_envs
    with pytest.raises(ValueError, match="one action per environment"):
        env.step(np.ones(3, np.int64))


def test_vector_environment_renders_every_copy():
    env = to_gymnasium(
        eqxrl.envs.make("CartPole-v1"), num_envs=2, render_mode="rgb_array"
    )
    env.reset(seed=0)
    frames = env.render()
    assert len(frames) == 2 and frames[0].dtype == np.uint8


def test_stable_baselines3_ppo_learns_exported_cartpole(tmp_path, monkeypatch):
    sb3 = pytest.importorskip("stable_baselines3")
    # SB3's logger otherwise leaves an empty SB3-<time> folder in /tmp per run.
    monkeypatch.setenv("SB3_LOGDIR", str(tmp_path))
    env = to_gymnasium(eqxrl.envs.make("CartPole-v1"))
    model = sb3.PPO("MlpPolicy", env, n_steps=256, batch_size=64, seed=0, verbose=0)
    model.learn(total_timesteps=4096)
    lengths = []
    for episode in range(5):
        observation, _ = env.reset(seed=100 + episode)
        for length in range(1, 501):
            action, _ = model.predict(observation, deterministic=True)
            observation, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
        lengths.append(length)
    # A random policy balances CartPole for about 22 steps.
    assert np.mean(lengths) > 40, lengths


def test_vector_environment_checks_actions_and_render_mode():
    envs = to_gymnasium(eqxrl.envs.make("CartPole-v1"), num_envs=2)
    envs.reset(seed=0)
    with pytest.raises(ValueError, match="must be an integer"):
        envs.step(np.array([1.7, 0.0]))
    with pytest.raises(ValueError, match="outside the action space Discrete"):
        envs.step(np.array([0, 2]))
    from toy_training import BlindCorridor

    with pytest.raises(ValueError, match="BlindCorridor has no render"):
        to_gymnasium(BlindCorridor(), num_envs=2, render_mode="rgb_array")
    with pytest.raises(ValueError, match="render_mode"):
        to_gymnasium(eqxrl.envs.make("CartPole-v1"), num_envs=2, render_mode="human")
