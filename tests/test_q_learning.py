"""DQN and IQN: the shared off-policy loop, their losses, masking, and learning."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl
from eqxrl.algorithms import quantile_huber_loss

# optax.adam computes `b1 ** count` with an int32 count.
STANDARD_DTYPE_PROMOTION = True

# 10 iterations of 4 envs x 2 steps; updates from the 4th iteration on.
SMALL = dict(
    num_envs=4,
    train_frequency=2,
    gradient_steps=2,
    batch_size=16,
    buffer_size=256,
    learning_starts=32,
    total_timesteps=80,
    target_update_interval=2,
    exploration_fraction=1.0,
    hidden_sizes=(16,),
)
SMALL_IQN = dict(
    SMALL,
    head_sizes=(16,),
    num_cosines=8,
    num_quantiles=4,
    num_target_quantiles=5,
    num_acting_quantiles=3,
)
ALGORITHMS = {"DQN": (eqxrl.DQN, SMALL), "IQN": (eqxrl.IQN, SMALL_IQN)}


@pytest.fixture(scope="module")
def env():
    return eqxrl.envs.make("CartPole-v1")


def small(name, env, **overrides):
    cls, config = ALGORITHMS[name]
    return cls(env=env, **{**config, **overrides})


def traced_once():
    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def train(algorithm, key):
        return algorithm.train(key)

    return train


# One compiled `train` per algorithm, shared by the tests below: a config that only
# changes array fields (gamma, tau, ...) or the key must reuse it.
TRAIN = {name: traced_once() for name in ALGORITHMS}


@pytest.fixture(scope="module", params=list(ALGORITHMS))
def trained(request, env):
    algorithm = small(request.param, env)
    state, metrics = TRAIN[request.param](algorithm, jr.key(0))
    return algorithm, state, metrics


def test_train_returns_metrics_per_iteration(trained):
    algorithm, state, metrics = trained
    assert algorithm.num_iterations == 10
    expected = {
        "episode_return",
        "episode_length",
        "episode_count",
        "loss",
        "q_value",
        "epsilon",
        "learning_rate",
    }
    assert set(metrics) == expected
    for name, values in metrics.items():
        assert values.shape == (10,), name
    assert metrics["episode_count"].dtype == jnp.int32
    # No update before learning_starts (32 steps: the first 3 iterations).
    assert np.isnan(metrics["loss"][:3]).all()
    assert np.isfinite(metrics["loss"][3:]).all()
    assert np.isfinite(metrics["q_value"][3:]).all()
    np.testing.assert_array_equal(metrics["epsilon"][:4], 1.0)
    assert (np.diff(metrics["epsilon"][3:]) < 0).all()
    assert int(state.iteration) == 10 and int(state.num_updates) == 14
    assert int(state.buffer.size) == 20 and state.buffer.capacity == 64
    assert int(metrics["episode_count"].sum()) > 0


def test_policy_acts_from_trained_state(trained):
    algorithm, state, _ = trained
    greedy = algorithm.policy(state, deterministic=True)
    observation = jnp.zeros(4, jnp.float32)
    action = greedy.act(observation, jr.key(1))
    assert action.dtype == jnp.int32 and action.shape == ()
    assert int(greedy.act(observation, jr.key(1), jnp.array([False, True]))) == 1
    assert int(greedy.act(observation, jr.key(1), jnp.array([True, False]))) == 0
    exploring = algorithm.policy(state)
    assert float(exploring.epsilon) == pytest.approx(
        float(algorithm.epsilon(10 * 8)), abs=1e-6
    )


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_compiles_once_for_two_keys_and_two_gammas(env, name):
    train = TRAIN[name]
    results = [
        train(small(name, env, gamma=gamma), jr.key(seed))[1]
        for gamma in (0.9, 0.99)
        for seed in (0, 1)
    ]
    assert not np.array_equal(results[0]["loss"][3:], results[1]["loss"][3:])
    assert not np.array_equal(results[0]["loss"][3:], results[2]["loss"][3:])
    # Same key, same result.
    np.testing.assert_array_equal(
        results[3]["loss"], train(small(name, env), jr.key(1))[1]["loss"]
    )
    # A structural change is a new program: it must retrace (and the counter must
    # notice, which makes the assertion above meaningful).
    with pytest.raises(RuntimeError, match="traced 2 times"):
        train(small(name, env, batch_size=8), jr.key(0))


def test_vmap_over_seeds_and_gammas(env):
    def train(key, gamma):
        return small("DQN", env, gamma=gamma).train(key)

    keys = jr.split(jr.key(0), 3)
    gammas = jnp.array([0.9, 0.9, 0.99], jnp.float32)
    states, metrics = eqx.filter_vmap(train)(keys, gammas)
    assert metrics["loss"].shape == (3, 10)
    assert states.iteration.tolist() == [10, 10, 10]
    assert states.buffer.transitions.reward.shape == (3, 64, 4)
    assert not np.array_equal(metrics["loss"][0, 3:], metrics["loss"][1, 3:])
    # Each member of the batch is the run it stands for.
    _, single = TRAIN["DQN"](small("DQN", env, gamma=0.99), keys[2])
    np.testing.assert_allclose(metrics["loss"][2], single["loss"], rtol=1e-4)


def test_target_network_hard_and_soft_updates(env, trained):
    algorithm, state, _ = trained

    def leaves(network):
        return jax.tree.leaves(eqx.filter(network, eqx.is_array))

    # tau = 1, a copy every 2 updates (each iteration's last): equal at the end.
    for online, target in zip(leaves(state.network), leaves(state.target_network)):
        np.testing.assert_array_equal(online, target)
    # tau = 0: never moves from the initial network (same compiled program).
    name = type(algorithm).__name__
    state, _ = TRAIN[name](small(name, env, tau=0.0), jr.key(0))
    initial = eqx.filter_jit(algorithm.init)(jr.key(0)).network
    for start, target in zip(leaves(initial), leaves(state.target_network)):
        np.testing.assert_array_equal(start, target)
    assert not all(
        np.array_equal(a, b) for a, b in zip(leaves(initial), leaves(state.network))
    )


def test_masked_actions_are_never_taken():
    env = eqxrl.envs.make("GridMaze-v0")
    dqn = eqxrl.DQN(env=env, **{**SMALL, "total_timesteps": 400})
    state, metrics = dqn.train(jr.key(0))
    assert "invalid_action_count" in metrics
    assert int(metrics["invalid_action_count"].sum()) == 0
    # Masks of the final states are stored for the bootstrap's greedy action.
    masks = np.asarray(state.buffer.transitions.next_action_mask)
    assert masks.shape == (64, 4, 4) and not masks.all()
    assert masks.any(axis=-1).all()


def test_truncation_bootstraps_from_the_final_observation():
    env = eqxrl.envs.TimeLimit(eqxrl.envs.CartPole(), 5)
    dqn = eqxrl.DQN(env=env, **{**SMALL, "num_envs": 2, "train_frequency": 12})
    state = dqn.init(jr.key(0))
    keys = jr.split(jr.key(1), 3)
    state, _, _ = eqx.filter_jit(dqn.collect)(state, *keys)  # 12 steps
    buffer = state.buffer
    data = buffer.transitions
    truncated = np.asarray(data.truncated)[:12]
    terminated = np.asarray(data.terminated)[:12]
    assert truncated[[4, 9]].all() and not terminated.any()
    observation = np.asarray(data.observation)[:12]
    next_observation = np.asarray(data.next_observation)[:12]
    # Within an episode, the next observation is the following row's observation;
    # on the truncated step it is the final observation, not the reset one.
    np.testing.assert_array_equal(next_observation[:4], observation[1:5])
    assert not np.allclose(next_observation[4], observation[5])
    sample = buffer.gather(jnp.arange(24), gamma=0.5)
    discount = np.asarray(sample.discount).reshape(12, 2)
    np.testing.assert_array_equal(discount, 0.5)  # truncation still bootstraps


def test_truncation_ends_the_target_without_bootstrap_when_asked():
    env = eqxrl.envs.TimeLimit(eqxrl.envs.CartPole(), 5)
    dqn = eqxrl.DQN(
        env=env,
        **{**SMALL, "num_envs": 2, "train_frequency": 12},
        bootstrap_on_truncation=False,
    )
    state = dqn.init(jr.key(0))
    keys = jr.split(jr.key(1), 3)
    state, _, _ = eqx.filter_jit(dqn.collect)(state, *keys)  # 12 steps
    buffer = state.buffer
    data = buffer.transitions
    terminated = np.asarray(data.terminated)[:12]
    assert terminated[[4, 9]].all() and terminated.sum() == 4  # 2 worlds x 2
    assert not np.asarray(data.truncated)[:12].any()
    sample = buffer.gather(jnp.arange(24), gamma=0.5)
    discount = np.asarray(sample.discount).reshape(12, 2)
    np.testing.assert_array_equal(discount[[4, 9]], 0.0)
    np.testing.assert_array_equal(np.delete(discount, [4, 9], axis=0), 0.5)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(num_envs=0), "num_envs"),
        (dict(batch_size=0), "batch_size"),
        (dict(learning_starts=-1), "learning_starts"),
        (dict(learning_starts=10_000), "learning_starts"),
        (dict(total_timesteps=4), "total_timesteps"),
        (dict(buffer_size=4), "buffer_size"),
        (dict(gamma=1.5), "gamma"),
        (dict(tau=-0.1), "tau"),
        (dict(learning_rate=float("nan")), "learning_rate"),
        (dict(max_grad_norm=-1.0), "max_grad_norm"),
        (dict(exploration_final_eps=2.0), "exploration_final_eps"),
        (dict(hidden_sizes=(0,)), "hidden_sizes"),
        (dict(gamma=jnp.array([0.9, 0.99])), "jax.vmap"),
    ],
)
@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_invalid_config_raises(env, name, overrides, message):
    with pytest.raises(ValueError, match=message):
        small(name, env, **overrides)


@pytest.mark.parametrize("name", ["DQN"])  # IQN shares AbstractQLearning's optimizer
def test_max_grad_norm_none_trains_without_clipping(env, name):
    """`max_grad_norm=None` leaves clipping out: the same parameters as an infinite
    threshold, and not those of a tight one."""

    def final_parameters(max_grad_norm, train):
        algorithm = small(name, env, max_grad_norm=max_grad_norm)
        state, _ = train(algorithm, jr.key(0))
        return jax.tree.leaves(eqx.filter(state.network, eqx.is_array))

    # `None` is another program; thresholds are array leaves of the shared one.
    unclipped = final_parameters(None, eqx.filter_jit(lambda a, k: a.train(k)))
    infinite = final_parameters(float("inf"), TRAIN[name])
    for ours, theirs in zip(unclipped, infinite, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    tight = final_parameters(1e-4, TRAIN[name])
    assert any(
        not np.allclose(ours, clipped, rtol=1e-5, atol=1e-6)
        for ours, clipped in zip(unclipped, tight, strict=True)
    )


def test_invalid_environments_raise(env):
    with pytest.raises(ValueError, match="AutoReset"):
        eqxrl.DQN(env=eqxrl.envs.AutoReset(env))
    with pytest.raises(ValueError, match="Discrete"):
        eqxrl.IQN(env=eqxrl.envs.make("Pendulum-v1"))
    with pytest.raises(ValueError, match="kappa"):
        eqxrl.IQN(env=env, kappa=0.0)


def cartpole_batch() -> "eqxrl.buffers.ReplaySample":
    """Eight made-up CartPole transitions, a third of them terminal."""

    def example(i):
        observation = jnp.full(4, i, jnp.float32) * 0.1
        return eqxrl.buffers.ReplaySample(
            observation=observation,
            action=i % 2,
            reward=jnp.float32(1.0) * i,
            discount=jnp.where(i % 3 == 0, 0.0, 0.9).astype(jnp.float32),
            next_observation=observation + 0.05,
            next_action_mask=None,
            num_steps=jnp.int32(1),
        )

    return jax.vmap(example)(jnp.arange(8, dtype=jnp.int32))


def test_dqn_loss_is_huber_and_squared_at_infinite_threshold(env):
    batch = cartpole_batch()

    @jax.jit
    def losses(delta):
        dqn = small("DQN", env, huber_delta=delta)
        network = dqn.make_network(jr.key(0))
        target_network = dqn.make_network(jr.key(1))
        loss_fn = eqx.filter_value_and_grad(
            lambda n: dqn.loss(n, target_network, batch, jr.key(2))[0]
        )
        loss, grads = loss_fn(network)
        q = jax.vmap(network)(batch.observation)
        next_action = jnp.argmax(jax.vmap(network)(batch.next_observation), axis=1)
        next_q = jax.vmap(target_network)(batch.next_observation)
        target = batch.reward + batch.discount * next_q[jnp.arange(8), next_action]
        error = q[jnp.arange(8), batch.action] - target
        return loss, error, jax.tree.leaves(eqx.filter(grads, eqx.is_array))

    loss, error, grads = losses(jnp.float32(jnp.inf))
    np.testing.assert_allclose(loss, np.mean(0.5 * np.square(error)), rtol=1e-5)
    assert all(np.isfinite(g).all() for g in grads)
    loss, error, _ = losses(jnp.float32(1.0))
    magnitude = np.abs(error)
    huber = np.where(magnitude <= 1.0, 0.5 * np.square(error), magnitude - 0.5)
    assert (magnitude > 1.0).any() and (magnitude <= 1.0).any()
    np.testing.assert_allclose(loss, np.mean(huber), rtol=1e-5)


def test_multiplicative_exploration_decays_once_per_iteration(env):
    """`exploration_decay`: epsilon is `initial * decay ** iteration`, at least
    `final` (Sorrel's per-epoch decay), 1 before `learning_starts`."""
    dqn = small(
        "DQN",
        env,
        exploration_initial_eps=0.8,
        exploration_final_eps=0.15,
        exploration_decay=0.5,
        learning_starts=8,
    )
    spi = dqn.steps_per_iteration  # 8
    steps = np.arange(6 * spi)
    epsilon = np.asarray(jax.vmap(dqn.epsilon)(jnp.asarray(steps, jnp.int32)))
    expected = np.maximum(0.8 * 0.5 ** (steps // spi), 0.15)
    expected = np.where(steps < 8, 1.0, expected)
    np.testing.assert_allclose(epsilon, expected, rtol=1e-6)
    with pytest.raises(ValueError, match="exploration_decay"):
        small("DQN", env, exploration_decay=1.5)
    with pytest.raises(ValueError, match="target_copy_interval"):
        small("DQN", env, target_copy_interval=0)


def test_target_copies_on_top_of_soft_updates(env):
    """`target_copy_interval`: with `tau = 0` (soft updates that never move the
    target) and a copy every 2 updates (each iteration's last), the target ends
    equal to the online network; without copies it stays the initial network."""
    algorithm = small("DQN", env, tau=0.0, target_copy_interval=2)
    state, _ = eqx.filter_jit(lambda a, k: a.train(k))(algorithm, jr.key(0))
    for online, target in zip(
        jax.tree.leaves(eqx.filter(state.network, eqx.is_array)),
        jax.tree.leaves(eqx.filter(state.target_network, eqx.is_array)),
    ):
        np.testing.assert_array_equal(online, target)
    initial = eqx.filter_jit(algorithm.init)(jr.key(0)).network
    assert not all(
        np.array_equal(a, b)
        for a, b in zip(
            jax.tree.leaves(eqx.filter(initial, eqx.is_array)),
            jax.tree.leaves(eqx.filter(state.target_network, eqx.is_array)),
        )
    )


@pytest.mark.slow
def test_iqn_mean_quantile_loss_and_noisy_draws(env):
    """`quantile_loss="mean"` is the summed loss over `num_quantiles`; with
    `noisy=True` the loss draws noise from its key (scaled by the layers'
    sigmas)."""
    batch = cartpole_batch()

    @eqx.filter_jit
    def loss(iqn, key, sigma_scale=1.0):
        network = iqn.make_network(jr.key(0))
        if iqn.noisy:
            network = eqx.tree_at(
                lambda n: [n.hidden[0].sigma_weight, n.head.linear.sigma_weight],
                network,
                replace_fn=lambda sigma: sigma * sigma_scale,
            )
        return iqn.loss(network, network, batch, key)[0]

    summed = loss(small("IQN", env), jr.key(1))
    mean = loss(small("IQN", env, quantile_loss="mean"), jr.key(1))
    np.testing.assert_allclose(mean * SMALL_IQN["num_quantiles"], summed, rtol=1e-6)
    # The scale is an array: one compiled program for both scales.
    noisy = small("IQN", env, noisy=True, dueling=True)
    one, half = jnp.float32(1.0), jnp.float32(0.5)
    a, b = loss(noisy, jr.key(1), one), loss(noisy, jr.key(2), one)
    assert a != b and a == loss(noisy, jr.key(1), one)
    assert loss(noisy, jr.key(1), half) != a  # the draw scales with sigma
    with pytest.raises((ValueError, TypeError), match="quantile_loss"):
        small("IQN", env, quantile_loss="median")
    with pytest.raises(ValueError, match="noisy"):
        small("IQN", env, noisy=True, network_factory=lambda env, key: None)


def test_quantile_huber_loss_matches_the_formula():
    rng = np.random.default_rng(0)
    td = rng.normal(scale=2.0, size=(5, 7)).astype(np.float32)
    fractions = rng.random(5).astype(np.float32)
    kappa = 1.3
    expected = 0.0
    for i in range(5):
        for j in range(7):
            u = float(td[i, j])
            if abs(u) <= kappa:
                huber = 0.5 * u * u
            else:
                huber = kappa * (abs(u) - 0.5 * kappa)
            expected += abs(fractions[i] - (u < 0)) * huber / kappa
    expected /= 7  # sum over predicted fractions, mean over target samples
    loss = quantile_huber_loss(jnp.asarray(td), jnp.asarray(fractions), kappa)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


def test_quantile_huber_loss_gradient_matches_the_formula():
    # The loss has a hand-written derivative; it must equal autodiff's of the
    # piecewise formula, in the errors and in kappa, on both sides of kappa.
    rng = np.random.default_rng(1)
    td = jnp.asarray(rng.normal(scale=2.0, size=(6, 4)).astype(np.float32))
    fractions = jnp.asarray(rng.random(6).astype(np.float32))
    kappa = jnp.float32(1.3)

    def direct(td, kappa):
        magnitude = jnp.abs(td)
        huber = jnp.where(
            magnitude <= kappa, 0.5 * td**2, kappa * (magnitude - 0.5 * kappa)
        )
        weight = jnp.abs(fractions[:, None] - (td < 0).astype(jnp.float32))
        return jnp.mean(jnp.sum(weight * huber / kappa, axis=0))

    def ours(td, kappa):
        return quantile_huber_loss(td, fractions, kappa)

    for argnum in (0, 1):
        np.testing.assert_allclose(
            jax.grad(ours, argnum)(td, kappa),
            jax.grad(direct, argnum)(td, kappa),
            rtol=1e-5,
            atol=1e-7,
        )


def final_returns(metrics, fraction=0.05):
    """Mean training return over the last `fraction` of each seed's iterations."""
    returns = np.asarray(metrics["episode_return"])
    last = max(1, int(returns.shape[-1] * fraction))
    return np.nanmean(returns[:, -last:], axis=1)


@pytest.mark.learning
@pytest.mark.run_bound
@pytest.mark.parametrize("name", ["DQN", "IQN"])
def test_defaults_learn_cartpole(env, name):
    # 3 seeds, 2 of which must learn: on 8 other seeds, DQN's 8 all reach 470.
    num_seeds, must_learn = 3, 2
    algorithm = getattr(eqxrl, name)(env=env, total_timesteps=500_000)
    _, metrics = eqx.filter_vmap(algorithm.train)(jr.split(jr.key(42), num_seeds))
    final = final_returns(metrics)
    print(f"{name} final return per seed:", final)
    assert (final >= 400).sum() >= must_learn, final
