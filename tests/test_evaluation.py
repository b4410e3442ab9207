"""Evaluation (vmapped episodes in one compiled call), GIFs and learning-curve plots."""

import csv

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl
from eqxrl.training import (
    EvaluationResult,
    evaluate,
    plot_runs,
    read_metrics,
    record_episodes,
    renderer,
    write_gif,
)
from toy_training import Corridor


class ConstantPolicy(eqxrl.nn.AbstractPolicy):
    action: int = eqx.field(static=True)

    def __call__(self, observation, key, action_mask=None):
        return jnp.int32(self.action)


class CoinPolicy(eqxrl.nn.AbstractPolicy):
    def __call__(self, observation, key, action_mask=None):
        return jr.bernoulli(key).astype(jnp.int32)


class WaitingPolicy(eqxrl.nn.AbstractPolicy):
    """Stays `wait` steps, then walks right: it must count the episode's steps in
    its carry (an int32 step counter), so it only works through `step`."""

    wait: int = eqx.field(static=True)

    def __call__(self, observation, key, action_mask=None):
        raise TypeError("WaitingPolicy is recurrent: act with step.")

    @property
    def is_recurrent(self):
        return True

    def initial_carry(self):
        return jnp.int32(0)

    def step(self, carry, observation, key, action_mask=None):
        return carry + 1, (carry >= self.wait).astype(jnp.int32)


@pytest.fixture(scope="module")
def corridor():
    return eqxrl.envs.TimeLimit(Corridor(length=5), 12)


def test_episodes_end_on_termination_and_truncation(corridor):
    right = evaluate(ConstantPolicy(1), corridor, jr.key(0), num_episodes=3)
    np.testing.assert_array_equal(right.returns, [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(right.lengths, [4, 4, 4])
    stay = evaluate(ConstantPolicy(0), corridor, jr.key(0), num_episodes=2)
    np.testing.assert_array_equal(stay.lengths, [12, 12])  # the time limit
    np.testing.assert_array_equal(stay.returns, [0.0, 0.0])
    capped = evaluate(
        ConstantPolicy(0), corridor, jr.key(0), num_episodes=2, max_steps=3
    )
    np.testing.assert_array_equal(capped.lengths, [3, 3])


def test_stochastic_episodes_and_summary(corridor):
    result = evaluate(CoinPolicy(), corridor, jr.key(1), num_episodes=64)
    assert result.returns.shape == (64,) and result.lengths.dtype == jnp.int32
    lengths = np.asarray(result.lengths)
    assert lengths.min() >= 4 and lengths.max() <= 12 and len(set(lengths)) > 2
    again = evaluate(CoinPolicy(), corridor, jr.key(1), num_episodes=64)
    np.testing.assert_array_equal(again.lengths, result.lengths)  # pure in the key
    summary = result.summary()
    returns = np.asarray(result.returns, np.float64)
    assert summary["return_mean"] == pytest.approx(returns.mean())
    assert summary["return_std"] == pytest.approx(returns.std())
    assert summary["return_p25"] == pytest.approx(np.percentile(returns, 25))
    assert summary["length_mean"] == pytest.approx(lengths.mean())
    assert summary["episodes"] == 64
    with pytest.raises(ValueError, match="num_episodes=0"):
        evaluate(CoinPolicy(), corridor, jr.key(1), num_episodes=0)


def test_cartpole_with_a_trained_style_policy():
    env = eqxrl.envs.make("CartPole-v1")
    # The configuration of test_checkpoint's, so that `init` compiles once.
    ppo = eqxrl.PPO(
        env=env,
        num_envs=2,
        num_steps=8,
        total_timesteps=160,
        num_minibatches=1,
        num_epochs=1,
        hidden_sizes=(8,),
    )
    state = eqx.filter_jit(ppo.init)(jr.key(0))
    result = evaluate(ppo.policy(state, deterministic=True), env, jr.key(0))
    assert result.returns.shape == (16,)
    assert (np.asarray(result.lengths) <= 500).all()
    np.testing.assert_array_equal(result.returns, result.lengths.astype(jnp.float32))


def test_a_recurrent_policy_evaluates_with_its_carry(corridor):
    # 3 steps waiting, then 4 to the end: the count restarts in every episode.
    result = evaluate(WaitingPolicy(3), corridor, jr.key(0), num_episodes=3)
    np.testing.assert_array_equal(result.lengths, [7, 7, 7])
    np.testing.assert_array_equal(result.returns, [1.0, 1.0, 1.0])
    # Waiting past the time limit: truncated, never rewarded.
    late = evaluate(WaitingPolicy(9), corridor, jr.key(0), num_episodes=2)
    np.testing.assert_array_equal(late.lengths, [12, 12])
    np.testing.assert_array_equal(late.returns, [0.0, 0.0])


def _greedy_episode_by_hand(policy, env, key):
    """One episode in Python, one jitted `policy.step` per observation: the
    reference for `evaluate` (the same key splits as its episodes)."""
    step = eqx.filter_jit(policy.step)
    reset_key, key = jr.split(key)
    state, timestep = env.reset(reset_key)
    carry, total, length = policy.initial_carry(), 0.0, 0
    while not (bool(timestep.terminated) or bool(timestep.truncated)):
        key, action_key, step_key = jr.split(key, 3)
        carry, action = step(carry, timestep.observation, action_key)
        state, timestep = env.step(state, action, step_key)
        total, length = total + float(timestep.reward), length + 1
    return total, length


def test_a_gru_policy_evaluates_as_a_hand_written_loop():
    env = eqxrl.envs.make("StatelessCartPole-v1")
    network = eqxrl.nn.GRUActorCritic.from_env(
        env, jr.key(3), hidden_size=8, encoder_sizes=(8,), head_sizes=(8,)
    )
    policy = eqxrl.nn.ActorCriticPolicy(network, deterministic=True)
    result = evaluate(policy, env, jr.key(4), num_episodes=3)
    by_hand = [
        _greedy_episode_by_hand(policy, env, key) for key in jr.split(jr.key(4), 3)
    ]
    np.testing.assert_array_equal(result.returns, [r for r, _ in by_hand])
    np.testing.assert_array_equal(result.lengths, [n for _, n in by_hand])


def test_batched_results_summarize_over_everything():
    result = EvaluationResult(
        returns=jnp.array([[1.0, 2.0], [3.0, 4.0]]), lengths=jnp.ones((2, 2), jnp.int32)
    )
    assert result.summary()["return_mean"] == 2.5


def test_renderer_finds_render_through_wrappers(corridor):
    assert renderer(eqxrl.envs.make("BlindCorridor-test-v0")) is None
    render = renderer(corridor)
    state, _ = corridor.reset(jr.key(0))
    frame = render(state)
    assert frame.shape == (4, 20, 3) and frame.dtype == jnp.uint8
    np.testing.assert_array_equal(frame, Corridor(length=5).render(state.env_state))


def test_record_episodes_and_gif(corridor, tmp_path):
    frames = record_episodes(ConstantPolicy(1), corridor, jr.key(0), num_episodes=2)
    # Each episode: its reset frame and one per step until it ends (4 steps).
    assert frames.shape == (2 * 5, 4, 20, 3) and frames.dtype == np.uint8
    positions = [int(np.argmax(frame[0, ::4, 0])) for frame in frames]
    assert positions == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]
    stay = record_episodes(ConstantPolicy(0), corridor, jr.key(0))
    assert len(stay) == 13  # reset + 12 steps to the time limit
    path = write_gif(tmp_path / "walk.gif", frames, fps=5)
    from PIL import Image

    with Image.open(path) as gif:
        assert gif.size == (20, 4) and gif.n_frames == 10
    # A recurrent policy records through its carry: 2 waiting steps, then 4.
    waiting = record_episodes(WaitingPolicy(2), corridor, jr.key(0), num_episodes=2)
    positions = [int(np.argmax(frame[0, ::4, 0])) for frame in waiting]
    assert positions == [0, 0, 0, 1, 2, 3, 4] * 2
    blind = eqxrl.envs.make("BlindCorridor-test-v0")
    with pytest.raises(ValueError, match="BlindCorridor has no render"):
        record_episodes(ConstantPolicy(0), blind, jr.key(0))
    with pytest.raises(ValueError, match="uint8"):
        write_gif(tmp_path / "bad.gif", np.zeros((2, 4, 4, 3), np.float32))


def _write_metrics(path, seeds, iterations=30):
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["iteration", "seed", "env_steps", "time", "episode_return"])
        for i in range(1, iterations + 1):
            for seed in seeds:
                value = "" if i == 1 else i + (seed or 0)
                writer.writerow([i, "" if seed is None else seed, i * 10, i, value])


def test_plots(tmp_path):
    single, seeds = tmp_path / "single", tmp_path / "seeds"
    single.mkdir()
    seeds.mkdir()
    _write_metrics(single / "metrics.csv", [None])
    _write_metrics(seeds / "metrics.csv", [0, 1, 2])
    columns = read_metrics(seeds)
    assert columns["seed"].shape == (90,) and set(columns["seed"]) == {0, 1, 2}
    assert np.isnan(columns["episode_return"][0])
    assert (read_metrics(single)["seed"] == -1).all()
    path = plot_runs([single, seeds], tmp_path / "both.png", labels=["a", "b"])
    assert path.read_bytes().startswith(b"\x89PNG")
    path = eqxrl.training.plot_run(seeds)
    assert path == seeds / "curve.png" and path.exists()
    with pytest.raises(ValueError, match="no column 'reward'.*episode_return"):
        plot_runs([single], tmp_path / "x.png", metric="reward")
    with pytest.raises(FileNotFoundError, match="No metrics"):
        plot_runs([tmp_path / "missing"], tmp_path / "x.png")


def test_curve_band_is_mean_and_std_over_seeds(tmp_path):
    from eqxrl.training._plots import _curves

    _write_metrics(tmp_path / "metrics.csv", [0, 1, 2])
    xs, mean, std, count = _curves(
        read_metrics(tmp_path), "episode_return", "env_steps", 1
    )
    assert count == 3
    np.testing.assert_allclose(xs[1:3], [20, 30])
    np.testing.assert_allclose(mean[1:3], [3.0, 4.0])  # i + mean(0, 1, 2)
    np.testing.assert_allclose(std[1:3], np.std([0, 1, 2]))
    assert np.isnan(mean[0])


@pytest.mark.slow
@pytest.mark.parametrize(
    "env_id", ["CartPole-v1", "Pendulum-v1", "GridMaze-v0", "Snake-v0"]
)
def test_every_built_in_environment_renders_in_jax(env_id):
    env = eqxrl.envs.make(env_id)
    assert renderer(env) is not None
    first, _ = env.reset(jr.key(0))
    states = [first]
    for step_key in jr.split(jr.key(2), 4):
        action = env.action_space.sample(step_key)
        states.append(env.step(states[-1], action, step_key)[0])
    batch = jax.tree.map(lambda *leaves: jnp.stack(leaves), *states)
    frames = eqx.filter_jit(lambda states: jax.vmap(env.render)(states))(batch)
    assert frames.dtype == jnp.uint8 and frames.ndim == 4 and frames.shape[-1] == 3
    np.testing.assert_array_equal(frames[0], env.render(first))
    # The drawing follows the state: after a few steps, some pixels differ.
    assert any(np.any(frames[0] != frame) for frame in np.asarray(frames[1:]))
