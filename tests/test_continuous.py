"""Continuous control: Gaussian policies, Pendulum, action wrappers, normalization."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from jaxtyping import TypeCheckError

import eqxrl
from eqxrl.distributions import DiagonalGaussian
from eqxrl.envs import ClipAction, Pendulum, PendulumState, RescaleAction
from eqxrl.nn import MLPGaussianActorCritic, RunningMeanStd

# optax.adam computes `b1 ** count` with an int32 count.
STANDARD_DTYPE_PROMOTION = True


def test_gaussian_log_prob_matches_formula():
    mean = jnp.array([0.5, -1.0], jnp.float32)
    log_std = jnp.array([0.0, -0.5], jnp.float32)
    action = jnp.array([0.1, -0.7], jnp.float32)
    std = np.exp(np.asarray(log_std))
    expected = np.sum(
        -0.5 * ((np.asarray(action) - np.asarray(mean)) / std) ** 2
        - np.log(std)
        - 0.5 * np.log(2 * np.pi)
    )
    distribution = DiagonalGaussian(mean, log_std)
    assert float(distribution.log_prob(action)) == pytest.approx(expected, rel=1e-5)
    expected_entropy = np.sum(0.5 * np.log(2 * np.pi * np.e) + np.asarray(log_std))
    assert float(distribution.entropy()) == pytest.approx(expected_entropy, rel=1e-5)
    assert distribution.mode().tolist() == mean.tolist()


def test_squashed_gaussian_samples_and_log_probs():
    distribution = DiagonalGaussian(
        jnp.array([3.0, 0.0], jnp.float32), jnp.array([1.0, 0.0], jnp.float32), True
    )
    actions, log_probs = jax.vmap(distribution.sample_and_log_prob)(
        jr.split(jr.key(0), 2000)
    )
    assert (jnp.abs(actions) <= 1).all()
    assert np.isfinite(log_probs).all()
    np.testing.assert_allclose(
        jax.vmap(distribution.log_prob)(actions), log_probs, rtol=1e-6
    )
    # Saturated actions (tanh rounding to +-1) still have finite log-probs.
    assert np.isfinite(float(distribution.log_prob(jnp.ones(2, jnp.float32))))
    # The change of variables: density of tanh(x) at y is N(atanh y) / (1 - y^2).
    unit = DiagonalGaussian(jnp.zeros(1), jnp.zeros(1), True)
    y = 0.5
    expected = -0.5 * np.arctanh(y) ** 2 - 0.5 * np.log(2 * np.pi) - np.log(1 - y**2)
    assert float(unit.log_prob(jnp.array([y]))) == pytest.approx(expected, rel=1e-5)


def test_gaussian_actor_critic_state_dependent_and_independent_std():
    observation = jnp.ones(3, jnp.float32)
    independent = MLPGaussianActorCritic(3, 2, initial_log_std=-1.0, key=jr.key(0))
    distribution, value = independent(observation)
    assert distribution.log_std.tolist() == [-1.0, -1.0]
    assert distribution.sample(jr.key(1)).shape == (2,) and value.shape == ()
    dependent = MLPGaussianActorCritic(
        3, 2, state_dependent_std=True, initial_log_std=-1.0, key=jr.key(0)
    )
    assert dependent.log_std is None
    np.testing.assert_allclose(dependent(observation)[0].log_std, -1.0, atol=0.1)


@pytest.mark.parametrize("seed", range(3))
def test_pendulum_matches_gymnasium(seed):
    gymnasium = pytest.importorskip("gymnasium")
    reference = gymnasium.make("Pendulum-v1").unwrapped
    reference.reset(seed=seed)
    env = Pendulum()
    state, _ = env.reset(jr.key(seed))
    step = eqx.filter_jit(env.step)
    rng = np.random.default_rng(seed)
    for t in range(200):
        # Step by step from the same state: float32 here vs float64 there would
        # otherwise drift apart over a long swing.
        reference.state = np.array([float(state.theta), float(state.theta_dot)])
        torque = rng.uniform(-3.0, 3.0, size=(1,)).astype(np.float32)
        observation, reward, terminated, truncated, _ = reference.step(torque)
        state, timestep = step(state, jnp.asarray(torque), jr.key(t))
        np.testing.assert_allclose(
            timestep.observation, observation, rtol=1e-4, atol=1e-4
        )
        assert float(timestep.reward) == pytest.approx(reward, rel=1e-4, abs=1e-4)
        assert not bool(timestep.terminated) and not terminated


def test_pendulum_time_limit_and_reset_distribution():
    env = eqxrl.envs.make("Pendulum-v1")
    assert env.max_episode_steps == 200
    states, timesteps = jax.vmap(env.reset)(jr.split(jr.key(0), 4000))
    theta = np.asarray(states.env_state.theta)
    assert theta.min() >= -np.pi and theta.max() <= np.pi and theta.std() > 1.5
    assert np.abs(np.asarray(timesteps.observation)[:, 2]).max() <= 1.0


def test_clip_and_rescale_action():
    pendulum = Pendulum()
    state = PendulumState(jnp.float32(0.0), jnp.float32(0.0))
    key = jr.key(0)
    _, clipped = ClipAction(pendulum).step(state, jnp.array([5.0]), key)
    _, at_bound = pendulum.step(state, jnp.array([2.0]), key)
    assert float(clipped.reward) == float(at_bound.reward)
    rescaled_env = RescaleAction(pendulum)
    assert rescaled_env.action_space.low.tolist() == [-1.0]
    next_rescaled, _ = rescaled_env.step(state, jnp.array([0.5]), key)
    next_direct, _ = pendulum.step(state, jnp.array([1.0]), key)
    assert float(next_rescaled.theta_dot) == float(next_direct.theta_dot)
    with pytest.raises(ValueError, match="Box"):
        ClipAction(eqxrl.envs.CartPole())
    with pytest.raises(ValueError, match="low"):
        RescaleAction(pendulum, low=1.0, high=-1.0)


def test_running_mean_std_matches_numpy():
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=(n, 2)).astype(np.float32) for n in (5, 50, 7)]
    statistics = RunningMeanStd.zeros((2,))
    for batch in batches:
        statistics = statistics.update(jnp.asarray(batch))
    everything = np.concatenate(batches)
    np.testing.assert_allclose(statistics.mean, everything.mean(0), rtol=1e-4)
    np.testing.assert_allclose(statistics.var, everything.var(0), rtol=1e-3)
    normalized = jax.vmap(statistics.normalize)(jnp.asarray(everything))
    np.testing.assert_allclose(normalized.mean(0), 0.0, atol=1e-3)


def test_normalized_ppo_exports_normalizer_with_policy():
    env = eqxrl.envs.make("Pendulum-v1")
    ppo = eqxrl.PPO(
        env=env,
        num_envs=4,
        num_steps=32,
        total_timesteps=4 * 32 * 3,
        num_minibatches=4,
        normalize_observations=True,
        normalize_rewards=True,
    )
    state, metrics = ppo.train(jr.key(0))
    assert "max_entropy" not in metrics and "invalid_action_count" not in metrics
    assert np.isfinite(metrics["total_loss"]).all()
    assert float(state.observation_statistics.count) > 4 * 32 * 2
    assert float(state.return_statistics.var) > 0
    assert state.discounted_returns.shape == (4,)
    policy = ppo.policy(state, deterministic=True)
    assert isinstance(policy.model, eqxrl.nn.NormalizedActorCritic)
    raw = jnp.array([1.0, 0.0, 0.5], jnp.float32)
    expected = state.model(state.observation_statistics.normalize(raw))[0].mode()
    np.testing.assert_allclose(policy.act(raw, jr.key(0)), expected, rtol=1e-6)


@pytest.mark.learning
@pytest.mark.run_bound
def test_ppo_learns_pendulum():
    """Four seeds in one vmapped program; three must swing up (a random policy
    scores about -1200; float rounding differs between CPUs, and so do the runs)."""
    ppo = eqxrl.PPO(
        env=eqxrl.envs.make("Pendulum-v1"),
        num_envs=16,
        num_steps=256,
        num_epochs=10,
        num_minibatches=32,
        learning_rate=1e-3,
        gamma=0.95,
        gae_lambda=0.95,
        ent_coef=0.0,
        total_timesteps=16 * 256 * 60,
        normalize_observations=True,
        normalize_rewards=True,
    )
    _, metrics = eqx.filter_vmap(ppo.train)(jr.split(jr.key(0), 4))
    returns = np.asarray(metrics["episode_return"])
    first = np.nanmean(returns[:, :5], axis=1)
    final = np.nanmean(returns[:, -5:], axis=1)
    print("Pendulum return per seed, first and last 5 iterations:", first, final)
    assert np.sum(final > -400) >= 3, final
    assert np.sum(final > first + 500) >= 3, (first, final)


# -- Brax-style PPO: tanh-squashed Gaussians stored before the tanh, softplus
# scale, separate actor / critic sizes, reward scaling, Brax's hyperparameters ----


@pytest.mark.xla_defaults
def test_pre_squash_log_prob_is_exact_where_the_tanh_saturates():
    mean = jnp.array([0.3, 12.0], jnp.float32)
    log_std = jnp.array([-0.5, 0.0], jnp.float32)
    distribution = DiagonalGaussian(mean, log_std, True)
    pre_squash, log_prob = distribution.sample_pre_squash_and_log_prob(jr.key(3))
    # The same draw as `sample`, before the tanh.
    np.testing.assert_allclose(
        jnp.tanh(pre_squash), distribution.sample(jr.key(3)), rtol=1e-6
    )
    u, mu, std = (
        np.asarray(x, np.float64) for x in (pre_squash, mean, np.exp(log_std))
    )
    # log N(u) - log(1 - tanh(u)^2), with 1 - tanh(u)^2 = 4 / (e^u + e^-u)^2.
    log_det = np.log(4.0) - 2.0 * np.logaddexp(u, -u)
    expected = np.sum(
        -0.5 * ((u - mu) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi) - log_det
    )
    assert float(log_prob) == pytest.approx(expected, rel=1e-5)
    # tanh(u) of the second entry rounds to 1: inverting it cannot recover u.
    assert float(jnp.tanh(pre_squash)[1]) == 1.0
    assert float(distribution.log_prob(jnp.tanh(pre_squash))) != pytest.approx(
        expected, rel=1e-2
    )
    # Where it does not saturate, both ways agree.
    moderate = jnp.array([0.4, -1.2], jnp.float32)
    np.testing.assert_allclose(
        distribution.log_prob_pre_squash(moderate),
        distribution.log_prob(jnp.tanh(moderate)),
        rtol=1e-4,
    )
    # Without squashing the pre-squash sample is the action.
    plain = DiagonalGaussian(mean, log_std)
    sample, plain_log_prob = plain.sample_pre_squash_and_log_prob(jr.key(3))
    np.testing.assert_allclose(sample, plain.sample(jr.key(3)))
    np.testing.assert_allclose(plain_log_prob, plain.log_prob(sample), rtol=1e-6)


def test_squashed_entropy_estimate():
    mean = jnp.array([0.5, -2.0], jnp.float32)
    log_std = jnp.array([0.0, -1.0], jnp.float32)
    squashed = DiagonalGaussian(mean, log_std, True)
    noise = jnp.array([0.3, -1.1], jnp.float32)
    u = np.asarray(mean) + np.exp(np.asarray(log_std)) * np.asarray(noise)
    gaussian = np.sum(0.5 * np.log(2 * np.pi * np.e) + np.asarray(log_std))
    log_det = np.sum(np.log(1.0 - np.tanh(u) ** 2))
    estimate = squashed.entropy_estimate(noise)
    assert float(estimate) == pytest.approx(gaussian + log_det, rel=1e-5)
    # Averaged over draws, the entropy of tanh(u) (by the change of variables:
    # -E[log p(tanh u)] over samples u).
    draws = jr.normal(jr.key(0), (20_000, 2), jnp.float32)
    mean_estimate = float(jax.vmap(squashed.entropy_estimate)(draws).mean())
    samples = mean[None] + jnp.exp(log_std)[None] * draws
    reference = -float(jax.vmap(squashed.log_prob_pre_squash)(samples).mean())
    assert mean_estimate == pytest.approx(reference, abs=0.02)
    # Its gradient pushes the mean away from the tanh's flat ends.
    grad = jax.grad(
        lambda m: DiagonalGaussian(m, log_std, True).entropy_estimate(noise)
    )
    assert float(grad(mean)[1]) > 0.0  # the mean of -2 is pushed up towards 0
    unsquashed = DiagonalGaussian(mean, log_std)
    assert float(unsquashed.entropy_estimate(noise)) == float(unsquashed.entropy())


def test_softplus_scale_and_separate_actor_critic_sizes():
    observation = jnp.ones(3, jnp.float32)
    space = eqxrl.envs.Dict(state=eqxrl.envs.Box(-1.0, 1.0, (3,)))

    @eqx.filter_jit  # one compilation instead of many small eager ones
    def build(key):
        network = MLPGaussianActorCritic(
            3,
            2,
            hidden_sizes=(8, 8, 8),
            critic_hidden_sizes=(16,),
            std_parameterization="softplus",
            key=key,
        )
        # The structured-observation network has the same options; its
        # state-dependent scale starts at exp(initial_log_std) (up to the small
        # initial weights).
        multi = eqxrl.nn.MultiInputActorCritic(
            space,
            eqxrl.envs.Box(-1.0, 1.0, (2,)),
            critic_hidden_sizes=(16,),
            state_dependent_std=True,
            squash=True,
            std_parameterization="softplus",
            initial_log_std=float(np.log(0.3)),
            key=key,
        )
        return network, network(observation)[0], multi, multi({"state": observation})[0]

    network, distribution, multi, multi_distribution = build(jr.key(0))
    assert [layer.weight.shape for layer in network.actor] == [
        (8, 3), (8, 8), (8, 8), (2, 8)
    ]  # fmt: skip
    assert [layer.weight.shape for layer in network.critic] == [(16, 3), (1, 16)]
    # A zero parameter: std = softplus(0) + 0.001 (Brax's NormalTanhDistribution).
    np.testing.assert_allclose(
        jnp.exp(distribution.log_std), np.log(2.0) + 1e-3, rtol=1e-6
    )
    assert multi_distribution.squash and multi.log_std is None
    assert multi.actor[-1].weight.shape[0] == 4 and len(multi.critic) == 2
    np.testing.assert_allclose(jnp.exp(multi_distribution.log_std), 0.3, rtol=0.05)
    with pytest.raises(ValueError, match="below the softplus"):
        MLPGaussianActorCritic(
            3, 2, std_parameterization="softplus", initial_log_std=-8.0, key=jr.key(0)
        )


def test_ppo_network_options_are_checked():
    pendulum = eqxrl.envs.make("Pendulum-v1")
    with pytest.raises(ValueError, match="RescaleAction"):
        eqxrl.PPO(env=pendulum, squash_actions=True)
    with pytest.raises(ValueError, match="state_dependent_std only apply to a Gauss"):
        eqxrl.PPO(env=eqxrl.envs.make("CartPole-v1"), state_dependent_std=True)
    with pytest.raises(ValueError, match="critic_hidden_sizes only apply to the def"):
        eqxrl.PPO(
            env=pendulum,
            critic_hidden_sizes=(8,),
            network_factory=eqxrl.nn.MultiInputActorCritic.from_env,
        )
    with pytest.raises(ValueError, match=r"actor_hidden_sizes=\(0,\)"):
        eqxrl.PPO(env=pendulum, actor_hidden_sizes=(0,))
    with pytest.raises(ValueError, match="reward_scale=-1.0"):
        eqxrl.PPO(env=pendulum, reward_scale=-1.0)
    with pytest.raises((ValueError, TypeCheckError), match="initialization"):
        eqxrl.PPO(env=pendulum, initialization="glorot")
    with pytest.raises(ValueError, match="initialization only apply to the def"):
        eqxrl.PPO(
            env=pendulum,
            initialization="lecun_uniform",
            network_factory=eqxrl.nn.MultiInputActorCritic.from_env,
        )
    fields = {f.name: f for f in eqxrl.training.config_fields(eqxrl.PPO)}
    assert fields["activation"].choices == ("tanh", "relu", "swish", "elu", "gelu")
    assert fields["reward_scale"].kind == "float" and fields["reward_scale"].optional
    assert fields["critic_hidden_sizes"].kind == "int_tuple"


def _zero_critic(env, key):
    """CartPole's default network with a critic that outputs 0."""
    network = eqxrl.nn.MLPActorCritic(4, 2, key=key)
    last = network.critic[-1]
    return eqx.tree_at(
        lambda n: (n.critic[-1].weight, n.critic[-1].bias),
        network,
        (jnp.zeros_like(last.weight), jnp.zeros_like(last.bias)),
    )


def test_reward_scale_scales_the_value_targets():
    """With gamma = 0 the value target of every step is its scaled reward (CartPole
    pays 1 per step), and a critic fixed at 0 (step size 0) has the value loss
    0.5 * scale**2. Two scales in one vmapped program (the field is sweepable)."""

    def train(scale):
        ppo = eqxrl.PPO(
            env=eqxrl.envs.make("CartPole-v1"),
            num_envs=4,
            num_steps=32,
            total_timesteps=256,
            num_minibatches=2,
            num_epochs=1,
            gamma=0.0,
            learning_rate=0.0,
            reward_scale=scale,
            network_factory=_zero_critic,
        )
        return ppo.train(jr.key(0))[1]

    metrics = eqx.filter_vmap(train)(jnp.array([1.0, 3.0], jnp.float32))
    np.testing.assert_allclose(metrics["value_loss"], [[0.5, 0.5], [4.5, 4.5]])
    # The same rollouts (nothing learns): reported returns are not scaled.
    returns = np.asarray(metrics["episode_return"])
    np.testing.assert_array_equal(returns[0], returns[1])
    assert np.nanmax(returns) >= 1.0


@pytest.mark.slow
def test_brax_style_ppo_learns_pendulum():
    """Brax's policy head (tanh-squashed, softplus scale from the actor), swish
    layers, separate actor / critic widths and a reward scale: three seeds in one
    vmapped program, two must improve well past a random policy (about -1200)."""
    ppo = eqxrl.PPO(
        env=RescaleAction(eqxrl.envs.make("Pendulum-v1")),
        num_envs=16,
        num_steps=128,
        num_epochs=4,
        num_minibatches=8,
        learning_rate=3e-3,
        anneal_lr=False,
        gamma=0.95,
        ent_coef=0.0,
        total_timesteps=16 * 128 * 40,
        normalize_observations=True,
        reward_scale=0.1,
        squash_actions=True,
        state_dependent_std=True,
        std_parameterization="softplus",
        activation="swish",
        actor_hidden_sizes=(32, 32),
        critic_hidden_sizes=(64, 64),
    )
    states, metrics = eqx.filter_vmap(ppo.train)(jr.split(jr.key(0), 3))
    returns = np.asarray(metrics["episode_return"])
    first = np.nanmean(returns[:, :3], axis=1)
    final = np.nanmean(returns[:, -3:], axis=1)
    print("Pendulum return per seed, first and last 3 iterations:", first, final)
    # Measured: 3 of 3 after 40 iterations, -543, -397, -596 (8 other seeds: 8 of
    # 8; after 30 iterations, 5 of 8).
    assert np.sum((final > -1000.0) & (final > first + 250.0)) >= 2, (first, final)
    state = jax.tree.map(lambda x: x[0], states)
    model = state.model
    assert [layer.weight.shape for layer in model.actor] == [(32, 3), (32, 32), (2, 32)]
    assert [layer.weight.shape for layer in model.critic] == [
        (64, 3),
        (64, 64),
        (1, 64),
    ]
    assert model.log_std is None and model.squash
    # The deterministic policy acts with tanh(mean) of the normalized observation.
    observation = jnp.array([0.0, 1.0, 0.5], jnp.float32)
    action = ppo.policy(state, deterministic=True).act(observation, jr.key(0))
    normalized = state.observation_statistics.normalize(observation)
    np.testing.assert_allclose(action, jnp.tanh(model(normalized)[0].mean), rtol=1e-6)


BRAX_PENDULUM = dict(
    num_timesteps=2_000_000, num_evals=20, reward_scaling=10, episode_length=1000,
    normalize_observations=True, action_repeat=1, unroll_length=5,
    num_minibatches=32, num_updates_per_batch=4, discounting=0.97,
    learning_rate=3e-4, entropy_cost=1e-2, num_envs=2048, batch_size=1024, seed=1,
)  # fmt: skip


@pytest.mark.parametrize(
    ("published", "num_steps", "total_timesteps"),
    [
        # Brax's training notebook: inverted_pendulum, inverted_double_pendulum, ant.
        (BRAX_PENDULUM, 80, 19 * 163_840),
        ({**BRAX_PENDULUM, "num_timesteps": 20_000_000}, 80, 7 * 19 * 163_840),
        (
            {**BRAX_PENDULUM, "num_timesteps": 50_000_000, "num_evals": 10}
            | {"num_envs": 4096, "batch_size": 2048},
            80,
            17 * 9 * 327_680,
        ),
    ],
)
def test_brax_hyperparameters_translate(published, num_steps, total_timesteps):
    """Brax's published settings go in unchanged. Brax collects batch_size *
    num_minibatches unrolls of unroll_length steps per training step and runs
    ceil(num_timesteps / (epochs * that)) training steps in each of
    max(num_evals - 1, 1) epochs."""
    env = RescaleAction(eqxrl.envs.Pendulum())
    ppo = eqxrl.PPO.from_brax_hyperparameters(env, **published)
    b = published
    assert ppo.num_envs == b["num_envs"] and ppo.num_steps == num_steps
    steps_per_training_step = (
        b["batch_size"] * b["unroll_length"] * b["num_minibatches"]
    )
    assert ppo.num_envs * ppo.num_steps == steps_per_training_step
    assert ppo.minibatch_size == b["batch_size"] * b["unroll_length"]
    assert ppo.num_minibatches == b["num_minibatches"]
    assert ppo.num_epochs == b["num_updates_per_batch"]
    assert ppo.total_timesteps == total_timesteps
    assert ppo.num_iterations * steps_per_training_step == total_timesteps
    assert isinstance(ppo.env, eqxrl.envs.TimeLimit)
    assert ppo.env.max_episode_steps == 1000
    assert float(ppo.gamma) == pytest.approx(0.97)
    assert float(ppo.ent_coef) == pytest.approx(0.01)
    assert float(ppo.reward_scale) == 10.0
    assert float(ppo.clip_eps) == pytest.approx(0.3)
    assert float(ppo.learning_rate) == pytest.approx(3e-4) and not ppo.anneal_lr
    assert float(ppo.max_grad_norm) == np.inf and not ppo.clip_value_loss
    assert ppo.normalize_observations and ppo.normalize_advantages
    assert ppo.hidden_sizes == (32,) * 4 and ppo.critic_hidden_sizes == (256,) * 5
    assert ppo.activation == "swish" and ppo.squash_actions
    assert ppo.state_dependent_std and ppo.std_parameterization == "softplus"
    # Brax's MLPs' initial weights: lecun_uniform in every layer, the heads too.
    assert ppo.initialization == "lecun_uniform"
    # Not recomputed at every epoch (see docs/continuous-control.md).
    assert not ppo.recompute_advantages
    # Brax's order: the batch joins the normalizer before the updates on it.
    assert ppo.update_observation_statistics_first
    model = ppo.make_network(jr.key(0))
    head = np.asarray(model.actor[-1].weight)
    assert np.abs(head).max() <= np.sqrt(3.0 / head.shape[1])
    assert np.abs(head).max() > 0.5 * np.sqrt(3.0 / head.shape[1])


def test_brax_hyperparameters_refuse_what_does_not_translate():
    env = RescaleAction(eqxrl.envs.Pendulum())
    with pytest.raises(ValueError, match="action_repeat=2"):
        eqxrl.PPO.from_brax_hyperparameters(
            env, **{**BRAX_PENDULUM, "action_repeat": 2}
        )
    with pytest.raises(ValueError, match="learning_rate_schedule='ADAPTIVE_KL'"):
        eqxrl.PPO.from_brax_hyperparameters(
            env, **BRAX_PENDULUM, learning_rate_schedule="ADAPTIVE_KL"
        )
    with pytest.raises(ValueError, match=r"\['unrol_length'\]"):
        eqxrl.PPO.from_brax_hyperparameters(env, **BRAX_PENDULUM, unrol_length=5)
    with pytest.raises(ValueError, match="must be a multiple of num_envs=3000"):
        eqxrl.PPO.from_brax_hyperparameters(env, **{**BRAX_PENDULUM, "num_envs": 3000})
    with pytest.raises(ValueError, match="time limit of 200 steps"):
        eqxrl.PPO.from_brax_hyperparameters(
            RescaleAction(eqxrl.envs.make("Pendulum-v1")), **BRAX_PENDULUM
        )
    # Host-side arguments are accepted; Brax's network sizes can be changed.
    ppo = eqxrl.PPO.from_brax_hyperparameters(
        env,
        **BRAX_PENDULUM,
        num_eval_envs=128,
        deterministic_eval=True,
        policy_hidden_layer_sizes=(64, 64),
        activation=jax.nn.tanh,
    )
    assert ppo.hidden_sizes == (64, 64) and ppo.activation == "tanh"
