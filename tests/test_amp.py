"""Adversarial Motion Priors: the discriminator's loss against a NumPy reference, the
style reward, reference data from `.npz`, the mixed reward PPO learns from, a
discriminator that learns to separate, one compilation, and exact resume."""

import functools
import re
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl
from eqxrl.algorithms import (
    AMP,
    AMPDiscriminator,
    discriminator_loss,
    style_reward,
)
from eqxrl.buffers import ReferenceMotion

# optax.adam computes `b1 ** count` with an int32 count.
STANDARD_DTYPE_PROMOTION = True

SMALL = dict(
    num_envs=4,
    num_steps=16,
    total_timesteps=4 * 16 * 3,
    num_epochs=1,
    num_minibatches=2,
    hidden_sizes=(8,),
)


@pytest.fixture(scope="module")
def env():
    return eqxrl.envs.make("Pendulum-v1")


def _reference(offset: float = 0.0, n: int = 64) -> ReferenceMotion:
    t = np.linspace(0.0, 6.0, n + 1)
    trajectory = np.stack([np.cos(t), np.sin(t), 2.0 * np.cos(2.0 * t)], axis=-1)
    return ReferenceMotion.from_trajectory(trajectory + offset)


def _constant_discriminator(value: float, observation_size: int = 3):
    discriminator = AMPDiscriminator.make(observation_size, (4,), jr.key(0))
    last = discriminator.layers[-1]
    return eqx.tree_at(
        lambda d: (d.layers[-1].weight, d.layers[-1].bias),
        discriminator,
        (jnp.zeros_like(last.weight), jnp.full_like(last.bias, value)),
    )


def test_discriminator_loss_and_gradient_penalty_match_numpy():
    rng = np.random.default_rng(0)
    discriminator = AMPDiscriminator.make(2, (5,), jr.key(1))
    reference = rng.normal(size=(6, 4)).astype(np.float32)
    policy = rng.normal(size=(6, 4)).astype(np.float32)
    loss, statistics = discriminator_loss(
        discriminator, jnp.asarray(reference), jnp.asarray(policy), jnp.float32(10.0)
    )

    w1 = np.asarray(discriminator.layers[0].weight, np.float64)
    b1 = np.asarray(discriminator.layers[0].bias, np.float64)
    w2 = np.asarray(discriminator.layers[1].weight, np.float64)[0]
    b2 = float(np.asarray(discriminator.layers[1].bias)[0])

    def score(x):
        return np.maximum(x @ w1.T + b1, 0.0) @ w2 + b2

    def input_gradient(x):
        active = (x @ w1.T + b1 > 0).astype(np.float64)
        return (active * w2) @ w1

    reference64, policy64 = reference.astype(np.float64), policy.astype(np.float64)
    d_reference, d_policy = score(reference64), score(policy64)
    penalty = np.mean(np.sum(input_gradient(reference64) ** 2, axis=-1))
    expected = (
        np.mean((d_reference - 1) ** 2) + np.mean((d_policy + 1) ** 2) + 5.0 * penalty
    )
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        float(statistics["amp_gradient_penalty"]), penalty, rtol=1e-5, atol=1e-5
    )
    assert float(statistics["amp_reference_accuracy"]) == np.mean(d_reference > 0)
    assert float(statistics["amp_policy_accuracy"]) == np.mean(d_policy < 0)
    # The penalty is not a constant: it has a gradient through the parameters.
    grads = eqx.filter_grad(
        lambda d: (
            discriminator_loss(
                d, jnp.asarray(reference), jnp.asarray(policy), jnp.float32(10.0)
            )[0]
            - discriminator_loss(
                d, jnp.asarray(reference), jnp.asarray(policy), jnp.float32(0.0)
            )[0]
        )
    )(discriminator)
    assert float(jnp.abs(grads.layers[0].weight).sum()) > 0


def test_style_reward_formula():
    scores = jnp.asarray([-2.0, -1.0, 0.0, 0.5, 1.0, 2.0, 3.0, 4.0])
    expected = np.maximum(0.0, 1.0 - 0.25 * (np.asarray(scores) - 1.0) ** 2)
    np.testing.assert_allclose(style_reward(scores), expected, rtol=1e-6)
    assert float(style_reward(jnp.float32(1.0))) == 1.0
    assert float(style_reward(jnp.float32(-1.0))) == 0.0


def test_reference_from_npz_round_trip_and_errors(tmp_path, env):
    reference = _reference()
    assert reference.num_transitions == 64 and reference.observation_size == 3
    np.testing.assert_array_equal(
        reference.observation[1:], reference.next_observation[:-1]
    )
    reference.save_npz(tmp_path / "pairs.npz")
    loaded = ReferenceMotion.from_npz(tmp_path / "pairs.npz", observation_size=3)
    assert eqx.tree_equal(loaded, reference)

    trajectory = np.asarray(jr.normal(jr.key(0), (10, 3)))
    np.savez(tmp_path / "clip.npz", trajectory=trajectory)
    clip = ReferenceMotion.from_npz(tmp_path / "clip.npz")
    np.testing.assert_array_equal(clip.observation, trajectory[:-1])
    np.testing.assert_array_equal(clip.next_observation, trajectory[1:])

    np.savez(tmp_path / "wrong_keys.npz", states=trajectory)
    with pytest.raises(ValueError, match="expected the arrays 'observation'"):
        ReferenceMotion.from_npz(tmp_path / "wrong_keys.npz")
    np.savez(
        tmp_path / "mismatch.npz",
        observation=trajectory,
        next_observation=trajectory[:, :2],
    )
    with pytest.raises(ValueError, match="must both have shape"):
        ReferenceMotion.from_npz(tmp_path / "mismatch.npz")
    with pytest.raises(ValueError, match="size 3, the environment's 4"):
        ReferenceMotion.from_npz(tmp_path / "clip.npz", observation_size=4)
    with pytest.raises(ValueError, match=r"\[T >= 2, dim\]"):
        ReferenceMotion.from_trajectory(trajectory[:1])

    wide = ReferenceMotion.from_trajectory(np.zeros((5, 4), np.float32))
    with pytest.raises(ValueError, match="size 4, the environment's 3"):
        AMP(eqxrl.PPO(env=env, **SMALL), wide)
    with pytest.raises(ValueError, match="discriminator_minibatches=5"):
        AMP(eqxrl.PPO(env=env, **SMALL), reference, discriminator_minibatches=5)


@pytest.mark.slow
def test_ppo_learns_from_the_mixed_reward(env, monkeypatch):
    """PPO's update sees `task_weight * reward + style_weight * style_reward(D)`;
    with a discriminator of constant score `c`, the style reward is
    `max(0, 1 - 0.25 (c - 1)^2)` on every step."""
    seen = []
    learn = eqxrl.PPO.learn

    def spy(self, state, transitions, *args):
        seen.append(np.asarray(transitions.reward))
        return learn(self, state, transitions, *args)

    monkeypatch.setattr(eqxrl.PPO, "learn", spy)
    ppo = eqxrl.PPO(env=env, **SMALL)
    c = 0.2
    rewards = {}
    for task_weight, style_weight in ((1.0, 0.0), (0.0, 1.0), (0.5, 2.0)):
        amp = AMP(
            ppo,
            _reference(),
            task_weight=task_weight,
            style_weight=style_weight,
            discriminator_hidden_sizes=(4,),
        )
        state = amp.init(jr.key(0))
        state = eqx.tree_at(
            lambda s: s.discriminator, state, _constant_discriminator(c)
        )
        _, metrics = amp.train_iteration(state)
        rewards[task_weight, style_weight] = seen.pop()
    task = rewards[1.0, 0.0]
    style = max(0.0, 1.0 - 0.25 * (c - 1.0) ** 2)
    assert np.all(task < 0)  # Pendulum's rewards: the task reward is really there.
    np.testing.assert_allclose(rewards[0.0, 1.0], np.full_like(task, style), rtol=1e-6)
    np.testing.assert_allclose(
        rewards[0.5, 2.0], 0.5 * task + 2.0 * style, rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(metrics["amp_style_reward"], style, rtol=1e-6)


@pytest.mark.slow
def test_discriminator_separates_distant_reference_and_compiles_once(env):
    # The reference lies far from every state Pendulum can show ([cos, sin] on the
    # unit circle): the discriminator must learn to tell them apart.
    amp = AMP(
        eqxrl.PPO(env=env, **{**SMALL, "total_timesteps": 4 * 16 * 6}),
        _reference(offset=3.0),
        task_weight=0.0,
        style_weight=1.0,
        discriminator_hidden_sizes=(16,),
        discriminator_learning_rate=1e-2,
    )

    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def train(amp, key):
        return amp.train(key)

    state, metrics = train(amp, jr.key(0))
    assert metrics["amp_discriminator_loss"].shape == (6,)
    assert float(metrics["amp_reference_accuracy"][-1]) > 0.9
    assert float(metrics["amp_policy_accuracy"][-1]) > 0.9
    # Separated: the policy's transitions earn little style reward.
    assert float(metrics["amp_style_reward"][-1]) < float(
        metrics["amp_style_reward"][0]
    )
    assert int(state.ppo.iteration) == 6
    # A new weight is an array: the same program.
    other = eqx.tree_at(lambda a: a.gradient_penalty, amp, jnp.float32(5.0))
    _, again = train(other, jr.key(1))
    assert np.all(np.isfinite(again["amp_discriminator_loss"]))
    # Seeds vmap: each member is its key's run.
    keys = jr.split(jr.key(0), 2)
    _, per_seed = eqx.filter_vmap(amp.train)(keys)
    assert per_seed["amp_policy_accuracy"].shape == (2, 6)
    _, second = train(amp, keys[1])
    np.testing.assert_allclose(
        per_seed["amp_discriminator_loss"][1],
        second["amp_discriminator_loss"],
        rtol=1e-4,
        atol=1e-5,
    )


@pytest.mark.slow
def test_trainer_resume_is_exact(env, tmp_path):
    amp = AMP(
        eqxrl.PPO(env=env, **{**SMALL, "total_timesteps": 4 * 16 * 4}),
        _reference(),
        discriminator_hidden_sizes=(8,),
    )

    def trainer(**options):
        return eqxrl.Trainer(
            amp,
            chunk_size=2,
            verbose=False,
            progress=False,
            gif_episodes=0,
            eval_episodes=2,
            **options,
        )

    full, full_metrics = trainer().fit(seed=3)
    run = trainer(out=tmp_path / "run", checkpoint_every=2)
    _, first = run.fit(seed=3, stop_at_iteration=2)
    resumed, second = run.fit(seed=3, resume=True)
    assert eqx.tree_equal(
        eqx.filter(resumed, eqx.is_array), eqx.filter(full, eqx.is_array)
    )
    for name in ("amp_discriminator_loss", "amp_policy_accuracy", "total_loss"):
        np.testing.assert_array_equal(
            np.concatenate([first[name], second[name]]), full_metrics[name]
        )
    header = (tmp_path / "run" / "metrics.csv").read_text().splitlines()[0]
    assert "amp_discriminator_loss" in header and "amp_reference_accuracy" in header
    # What `eqxrl plot RUN --metric amp_policy_accuracy` draws.
    from eqxrl.training import plot_runs

    figure = plot_runs(
        [tmp_path / "run"], tmp_path / "accuracy.png", metric="amp_policy_accuracy"
    )
    assert figure.read_bytes().startswith(b"\x89PNG")


def test_next_observation_is_the_pre_reset_observation():
    ppo = eqxrl.PPO(
        env=eqxrl.envs.make("CartPole-v1"),
        **{**SMALL, "num_steps": 64, "total_timesteps": 256},
    )
    state = ppo.init(jr.key(0))
    after, transitions, _, _ = ppo.rollout(state, jr.key(1), next_observation=True)
    timestep = after.timestep
    observation = np.asarray(transitions.observation)
    following = np.concatenate([observation[1:], timestep.observation[None]])
    next_observation = np.asarray(transitions.extras["next_observation"])
    done = np.asarray(transitions.terminated | transitions.truncated)
    assert done.any() and not done.all()
    np.testing.assert_array_equal(next_observation[~done], following[~done])
    # Where an episode ended: the state it ended in (CartPole's pole fell or the
    # cart left the track), not the next episode's first observation.
    ended = next_observation[done]
    assert not np.any(np.all(ended == following[done], axis=-1))
    assert np.all((np.abs(ended[:, 0]) > 2.4) | (np.abs(ended[:, 2]) > 0.2094))
    # Off by default: PPO's own rollouts store nothing more.
    _, plain, _, _ = ppo.rollout(state, jr.key(1))
    assert "next_observation" not in plain.extras


@pytest.mark.learning
def test_pendulum_example_reports_distances(run_script):
    output = run_script(
        Path(__file__).parent.parent / "examples" / "amp_pendulum.py",
        "--total-timesteps",
        "2048",  # one iteration of 16 envs x 128 steps
        "--seeds",
        "1",
    )
    assert "amp_reference_accuracy: first" in output, output
    (line,) = re.findall(r"^\s+0\s+([\d.]+) -> ([\d.]+) \(", output, re.MULTILINE)
    before, after = map(float, line)
    assert 0 < after and 0 < before, output


@pytest.mark.slow
def test_recurrent_policy(env):
    """A recurrent PPO learns with AMP too: its carries flow as in PPO's iteration."""
    amp = AMP(
        eqxrl.PPO(
            env=env,
            network_factory=functools.partial(
                eqxrl.nn.GRUActorCritic.from_env, hidden_size=8
            ),
            **{**SMALL, "total_timesteps": 4 * 16 * 2},
        ),
        _reference(),
        discriminator_hidden_sizes=(8,),
    )
    state, metrics = amp.train(jr.key(0))
    assert state.ppo.carry is not None
    for name in ("total_loss", "amp_discriminator_loss", "amp_style_reward"):
        assert np.all(np.isfinite(metrics[name])), name
