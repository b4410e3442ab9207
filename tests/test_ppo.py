import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl
from eqxrl.algorithms import compute_gae

# optax.adam computes `b1 ** count` with an int32 count.
STANDARD_DTYPE_PROMOTION = True

SMALL = dict(num_envs=4, num_steps=16, total_timesteps=4 * 16 * 3, num_minibatches=2)


@pytest.fixture(scope="module")
def env():
    return eqxrl.envs.make("CartPole-v1")


def test_train_returns_metrics_per_iteration(env):
    ppo = eqxrl.PPO(env=env, **SMALL)
    state, metrics = ppo.train(jr.key(0))
    assert ppo.num_iterations == 3
    expected = {
        "episode_return",
        "episode_length",
        "episode_count",
        "total_loss",
        "policy_loss",
        "value_loss",
        "entropy",
        "approx_kl",
        "clip_fraction",
        "learning_rate",
    }
    assert expected <= set(metrics)
    for name, values in metrics.items():
        assert values.shape == (3,), name
    assert metrics["episode_count"].dtype == jnp.int32
    assert int(state.iteration) == 3
    for name in expected - {"episode_return", "episode_length"}:
        assert np.isfinite(metrics[name]).all(), name


def test_learning_rate_anneals_linearly(env):
    ppo = eqxrl.PPO(env=env, learning_rate=1e-3, **SMALL)
    _, metrics = ppo.train(jr.key(0))
    np.testing.assert_allclose(metrics["learning_rate"], [1e-3, 2e-3 / 3, 1e-3 / 3])
    constant = eqxrl.PPO(env=env, learning_rate=1e-3, anneal_lr=False, **SMALL)
    _, metrics = constant.train(jr.key(0))
    np.testing.assert_allclose(metrics["learning_rate"], 1e-3)


def test_episode_return_is_nan_when_no_episode_ends(env):
    ppo = eqxrl.PPO(env=env, num_envs=1, num_steps=4, total_timesteps=8)
    _, metrics = ppo.train(jr.key(0))
    assert np.isnan(metrics["episode_return"]).all()
    assert (metrics["episode_count"] == 0).all()


def test_same_key_same_result_and_different_keys_differ(env):
    ppo = eqxrl.PPO(env=env, **SMALL)
    _, first = ppo.train(jr.key(3))
    _, again = ppo.train(jr.key(3))
    _, other = ppo.train(jr.key(4))
    np.testing.assert_array_equal(first["total_loss"], again["total_loss"])
    assert not np.array_equal(first["total_loss"], other["total_loss"])


def test_compiles_once_for_two_keys_and_two_gammas(env):
    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def train(ppo, key):
        return ppo.train(key)

    results = [
        train(eqxrl.PPO(env=env, gamma=gamma, **SMALL), jr.key(seed))[1]
        for gamma in (0.9, 0.99)
        for seed in (0, 1)
    ]
    assert not np.array_equal(results[0]["total_loss"], results[2]["total_loss"])
    # A structural change is a new program, so it must retrace (and the counter
    # must notice: this is what makes the assertion above meaningful).
    with pytest.raises(RuntimeError, match="traced 2 times"):
        train(eqxrl.PPO(env=env, **{**SMALL, "num_steps": 8}), jr.key(0))


@pytest.mark.slow
def test_vmap_over_seeds_and_over_gammas(env):
    ppo = eqxrl.PPO(env=env, **SMALL)
    keys = jr.split(jr.key(0), 3)
    states, metrics = eqx.filter_vmap(ppo.train)(keys)
    assert metrics["total_loss"].shape == (3, 3)
    assert states.iteration.tolist() == [3, 3, 3]

    def train_with_gamma(gamma):
        return eqxrl.PPO(env=env, gamma=gamma, **SMALL).train(jr.key(0))[1]

    gammas = jnp.array([0.5, 0.9, 0.99, 0.999], jnp.float32)
    sweep = jax.vmap(train_with_gamma)(gammas)
    assert sweep["total_loss"].shape == (4, 3)
    single = train_with_gamma(jnp.float32(0.9))
    np.testing.assert_allclose(
        sweep["total_loss"][1], single["total_loss"], rtol=1e-4, atol=1e-6
    )


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(num_envs=3, num_steps=5, num_minibatches=4), "divisible"),
        (dict(learning_rate=-1e-3), "learning_rate"),
        (dict(gamma=1.5), "gamma"),
        (dict(gae_lambda=-0.1), "gae_lambda"),
        (dict(clip_eps=-0.2), "clip_eps"),
        (dict(ent_coef=float("nan")), "ent_coef"),
        (dict(num_envs=0), "num_envs"),
        (dict(num_epochs=0), "num_epochs"),
        (dict(total_timesteps=10), "total_timesteps"),
        (dict(hidden_sizes=(64, 0)), "hidden_sizes"),
        (dict(gamma=jnp.array([0.9, 0.99])), "jax.vmap"),
    ],
)
def test_invalid_config_raises(env, overrides, message):
    with pytest.raises(ValueError, match=message):
        eqxrl.PPO(env=env, **overrides)


def test_rejects_auto_reset_env(env):
    with pytest.raises(ValueError, match="AutoReset"):
        eqxrl.PPO(env=eqxrl.envs.AutoReset(env))


@pytest.mark.learning
@pytest.mark.run_bound
def test_learns_cartpole_contract_config(env):
    ppo = eqxrl.PPO(
        env=env,
        num_envs=4,
        num_steps=128,
        total_timesteps=500_000,
        num_epochs=4,
        num_minibatches=4,
        learning_rate=2.5e-4,
        gamma=0.99,
        gae_lambda=0.95,
        clip_eps=0.2,
        ent_coef=0.01,
        vf_coef=0.5,
        max_grad_norm=0.5,
    )
    _, metrics = eqx.filter_vmap(ppo.train)(jr.split(jr.key(42), 4))
    final = np.nanmean(np.asarray(metrics["episode_return"])[:, -10:], axis=1)
    print("final return per seed:", final)
    assert (final >= 450).all(), final
    assert final.mean() >= 475, final


def test_policy_acts_from_trained_state(env):
    ppo = eqxrl.PPO(env=env, **SMALL)
    state, _ = ppo.train(jr.key(0))
    observation = jnp.zeros(4, jnp.float32)
    greedy = ppo.policy(state, deterministic=True)
    action = greedy.act(observation, jr.key(1))
    assert action.dtype == jnp.int32 and action.shape == ()
    assert int(action) == int(greedy.act(observation, jr.key(2)))
    masked = greedy.act(observation, jr.key(1), jnp.array([True, False]))
    assert int(masked) == 0
    sampled = jax.vmap(ppo.policy(state).act, in_axes=(None, 0))(
        observation, jr.split(jr.key(3), 200)
    )
    assert set(np.unique(sampled).tolist()) == {0, 1}


def test_rollout_bootstraps_truncation_from_the_final_observation():
    env = eqxrl.envs.TimeLimit(eqxrl.envs.CartPole(), 5)
    ppo = eqxrl.PPO(env=env, num_envs=2, num_steps=12, total_timesteps=24)
    state = ppo.init(jr.key(0))
    _, transitions, truncated_values, _ = ppo.rollout(state, jr.key(1))
    truncated = np.asarray(transitions.truncated)
    assert truncated[[4, 9]].all() and truncated.sum() == 4
    values = np.asarray(truncated_values)
    assert (values[~truncated] == 0).all()
    assert (values[truncated] != 0).all()
    # The bootstrap value is not the value of the reset observation that follows.
    assert not np.allclose(values[4], np.asarray(transitions.value)[5])


def _arrays(tree):
    return jax.tree.leaves(eqx.filter(tree, eqx.is_array))


@pytest.mark.slow
@pytest.mark.filterwarnings(
    "ignore:PPO\\(recompute_advantages=True\\):DeprecationWarning"
)
def test_recompute_advantages_revalues_the_rollout_with_the_current_critic(env):
    """`recompute_advantages=True`: every epoch's advantages and value targets
    come from the critic as it is then. With the critic frozen (`vf_coef=0`: no
    value gradient reaches the default network's separate critic) they are the
    rollout's, and training is what it is without the option; with the critic
    learning, the later epochs' advantages differ and so does the result."""
    settings = dict(SMALL, num_epochs=3)

    def final_model(**options):
        state, _ = eqxrl.PPO(env=env, **settings, **options).train(jr.key(0))
        return _arrays(state.model)

    frozen = final_model(vf_coef=0.0)
    frozen_recomputed = final_model(vf_coef=0.0, recompute_advantages=True)
    for a, b in zip(frozen, frozen_recomputed):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    learning = final_model()
    learning_recomputed = final_model(recompute_advantages=True)
    assert any(
        not np.allclose(a, b, rtol=1e-4, atol=1e-5)
        for a, b in zip(learning, learning_recomputed)
    )


class TaggedEnvironment(eqxrl.envs.AbstractEnvironment):
    """Observes one number, drawn at reset and kept: the environment's tag (its
    episodes outlast the test's rollouts)."""

    def reset(self, key):
        tag = jr.uniform(key, (1,))
        return tag, self._timestep(tag)

    def step(self, state, action, key):
        return state, self._timestep(state)

    def _timestep(self, tag):
        return eqxrl.envs.TimeStep(
            observation=tag,
            reward=jnp.float32(1.0),
            terminated=jnp.bool_(False),
            truncated=jnp.bool_(False),
        )

    @property
    def observation_space(self):
        return eqxrl.envs.Box(0.0, 1.0, shape=(1,))

    @property
    def action_space(self):
        return eqxrl.envs.Discrete(2)


class MinibatchRecordingPPO(eqxrl.PPO):
    """PPO whose loss sends every minibatch's observations to the host."""

    def _loss(self, model, observation_statistics, batch, *rest):
        jax.debug.callback(MINIBATCHES.append, batch.observation[:, 0])
        return super()._loss(model, observation_statistics, batch, *rest)


MINIBATCHES = []


@pytest.mark.parametrize("whole_environments", [False, True])
@pytest.mark.filterwarnings(
    "ignore:PPO\\(minibatch_environments=True\\):DeprecationWarning"
)
def test_minibatch_environments_draws_whole_rollouts(whole_environments):
    """With `minibatch_environments=True` each minibatch is the whole rollouts of
    num_envs / num_minibatches environments (each environment's tag seen
    num_steps times); by default its rows come from across the environments."""
    num_envs, num_steps, num_minibatches = 8, 16, 4
    ppo = MinibatchRecordingPPO(
        env=TaggedEnvironment(),
        num_envs=num_envs,
        num_steps=num_steps,
        total_timesteps=num_envs * num_steps,
        num_epochs=2,
        num_minibatches=num_minibatches,
        hidden_sizes=(4,),
        minibatch_environments=whole_environments,
    )
    MINIBATCHES.clear()
    jax.block_until_ready(ppo.train(jr.key(0)))
    assert len(MINIBATCHES) == 2 * num_minibatches
    for epoch in (MINIBATCHES[:num_minibatches], MINIBATCHES[num_minibatches:]):
        # Every step of every environment, once per epoch.
        tags, repeats = np.unique(np.concatenate(epoch), return_counts=True)
        assert len(tags) == num_envs and (repeats == num_steps).all()
        counts = [np.unique(rows, return_counts=True) for rows in epoch]
        if whole_environments:
            for tags, repeats in counts:
                assert len(tags) == num_envs // num_minibatches
                assert (repeats == num_steps).all()
        else:
            assert all(len(tags) > num_envs // num_minibatches for tags, _ in counts)


@pytest.mark.filterwarnings(
    "ignore:PPO\\(minibatch_environments=True\\):DeprecationWarning"
)
def test_minibatch_environments_needs_num_minibatches_to_divide_num_envs(env):
    with pytest.raises(ValueError, match="num_minibatches=3 must divide num_envs=4"):
        eqxrl.PPO(
            env=env,
            num_envs=4,
            num_steps=6,
            total_timesteps=48,
            num_minibatches=3,
            minibatch_environments=True,
        )


class StatisticsRecordingPPO(eqxrl.PPO):
    """PPO whose loss sends the observation statistics it normalizes by (their
    count) to the host."""

    def _loss(self, model, observation_statistics, *rest):
        jax.debug.callback(
            STATISTICS_COUNTS.append, observation_statistics.count, ordered=True
        )
        return super()._loss(model, observation_statistics, *rest)


STATISTICS_COUNTS = []


@pytest.mark.slow
@pytest.mark.parametrize("first", [False, True])
def test_update_observation_statistics_first_normalizes_the_updates_by_the_rollout(
    env, first
):
    """By default the updates of an iteration see the statistics its rollout
    acted with; with `update_observation_statistics_first=True` (Brax's order)
    they see those statistics merged with the rollout's observations. Either way
    the rollout is merged once: after one iteration (the same rollout) the
    statistics are the same."""
    settings = dict(SMALL, num_epochs=2, normalize_observations=True)
    batch = SMALL["num_envs"] * SMALL["num_steps"]
    STATISTICS_COUNTS.clear()
    ppo = StatisticsRecordingPPO(
        env=env, update_observation_statistics_first=first, **settings
    )
    state, _ = ppo.train(jr.key(0))
    updates_per_iteration = 2 * SMALL["num_minibatches"]
    counts = np.asarray(STATISTICS_COUNTS).reshape(3, updates_per_iteration)
    # The statistics start from a pseudo-count of 1e-4 (RunningMeanStd.zeros).
    merged = 1e-4 + batch * (np.arange(3) + (1 if first else 0))
    np.testing.assert_allclose(
        counts, np.repeat(merged[:, None], updates_per_iteration, axis=1)
    )
    np.testing.assert_allclose(state.observation_statistics.count, 1e-4 + 3 * batch)
    one_iteration = dict(settings, total_timesteps=batch)
    ordered, _ = eqxrl.PPO(
        env=env, update_observation_statistics_first=first, **one_iteration
    ).train(jr.key(0))
    default, _ = eqxrl.PPO(env=env, **one_iteration).train(jr.key(0))
    for a, b in zip(
        _arrays(ordered.observation_statistics), _arrays(default.observation_statistics)
    ):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("option", ["recompute_advantages", "minibatch_environments"])
def test_options_without_a_measured_gain_are_deprecated(env, option):
    """Setting either warns, at the line that builds the PPO; leaving it does not."""
    with pytest.warns(DeprecationWarning, match=rf"PPO\({option}=True\)") as record:
        eqxrl.PPO(env=env, **SMALL, **{option: True})
    assert record[0].filename == __file__
    eqxrl.PPO(env=env, **SMALL, **{option: False})


def test_update_observation_statistics_first_needs_normalized_observations(env):
    with pytest.raises(ValueError, match="needs normalize_observations=True"):
        eqxrl.PPO(env=env, update_observation_statistics_first=True, **SMALL)


@pytest.mark.filterwarnings(
    "ignore:PPO\\(recompute_advantages=True\\):DeprecationWarning"
)
def test_recompute_advantages_refuses_a_recurrent_critic(env):
    ppo = eqxrl.PPO(
        env=env,
        **SMALL,
        recompute_advantages=True,
        network_factory=eqxrl.nn.GRUActorCritic.from_env,
    )
    with pytest.raises(ValueError, match="recompute_advantages=True needs a feed"):
        ppo.train(jr.key(0))


def test_loss_is_policy_loss_plus_weighted_value_loss_minus_entropy_bonus(env):
    """PPO's total loss on a hand-built minibatch of 5 rows is `policy_loss +
    vf_coef * value_loss - ent_coef * entropy`: the entropy is a bonus (it lowers
    the loss), and the entropy it subtracts is the mean entropy of the policy."""
    ppo = eqxrl.PPO(
        env=env,
        num_envs=1,
        num_steps=5,
        total_timesteps=5,
        num_minibatches=1,
        hidden_sizes=(4,),
        ent_coef=0.3,
        vf_coef=0.7,
    )

    @eqx.filter_jit  # one compilation for the network, the batch and the loss
    def loss_and_entropies(ppo, key):
        network_key, observation_key, log_prob_key, value_key, advantage_key = jr.split(
            key, 5
        )
        model = ppo.make_network(network_key)
        observations = jr.normal(observation_key, (5, 4))
        batch = jax.vmap(
            lambda observation, action, log_prob, value: eqxrl.buffers.Transition(
                observation=observation,
                action=action,
                log_prob=log_prob,
                value=value,
                reward=jnp.float32(0.0),
                terminated=jnp.bool_(False),
                truncated=jnp.bool_(False),
                action_mask=None,
                extras={},
            )
        )(
            observations,
            jnp.array([0, 1, 1, 0, 1], jnp.int32),
            jnp.log(0.5) + 0.2 * jr.normal(log_prob_key, (5,)),
            jr.normal(value_key, (5,)),
        )
        advantages, returns = jr.normal(advantage_key, (2, 5))
        total, statistics = ppo._loss(model, None, batch, advantages, returns)
        entropies = jax.vmap(lambda o: model(o, None)[0].entropy())(observations)
        return total, statistics, entropies

    total, statistics, entropies = loss_and_entropies(ppo, jr.key(0))
    entropy = np.mean(entropies)
    assert entropy > 0.1  # a bonus of ent_coef * entropy that a sign flip doubles
    np.testing.assert_allclose(statistics["entropy"], entropy, rtol=1e-5)
    np.testing.assert_allclose(statistics["total_loss"], total, rtol=1e-6)
    np.testing.assert_allclose(
        total,
        statistics["policy_loss"]
        + 0.7 * statistics["value_loss"]
        - 0.3 * statistics["entropy"],
        rtol=1e-5,
        atol=1e-6,
    )


class AdvantageRecordingPPO(eqxrl.PPO):
    """PPO whose loss sends every minibatch's advantages and value targets to the
    host."""

    def _loss(self, model, observation_statistics, batch, advantages, returns, *rest):
        jax.debug.callback(ADVANTAGES.append, (advantages, returns))
        return super()._loss(
            model, observation_statistics, batch, advantages, returns, *rest
        )


ADVANTAGES = []


def test_update_bootstraps_truncated_steps_from_their_final_observation_value():
    """The advantages and value targets PPO updates with, on a rollout of 2
    environments truncated every 3 steps, are `compute_gae`'s with each step's
    next value the critic's value of the observation the step reached before any
    reset (the final one where an episode was truncated), not the next episode's
    first observation's."""
    env = eqxrl.envs.TimeLimit(eqxrl.envs.CartPole(), 3)
    ppo = AdvantageRecordingPPO(
        env=env,
        num_envs=2,
        num_steps=8,
        total_timesteps=16,
        num_epochs=1,
        num_minibatches=1,
        hidden_sizes=(4,),
        normalize_advantages=False,
    )

    @eqx.filter_jit
    def iteration(ppo, state, key):
        rollout_key, update_key = jr.split(key)
        state, transitions, truncation_values, _ = ppo.rollout(
            state, rollout_key, next_observation=True
        )
        ppo.learn(state, transitions, truncation_values, update_key)
        return transitions

    state = ppo.init(jr.key(0))
    ADVANTAGES.clear()
    transitions = jax.block_until_ready(iteration(ppo, state, jr.key(1)))
    truncated = np.asarray(transitions.truncated)
    assert truncated[[2, 5]].all() and truncated.sum() == 4

    def gae(next_observations):
        next_values = jax.vmap(jax.vmap(state.model.value))(next_observations)
        return compute_gae(
            transitions.reward,
            transitions.value,
            next_values,
            transitions.terminated,
            transitions.truncated,
            ppo.gamma,
            ppo.gae_lambda,
        )

    expected = gae(transitions.extras["next_observation"])
    # The next episode's first observation would give other advantages.
    following = jnp.concatenate(
        [transitions.observation[1:], transitions.extras["next_observation"][-1:]]
    )
    assert not np.allclose(gae(following)[0], expected[0], rtol=1e-3, atol=1e-4)
    (advantages, returns), *others = ADVANTAGES
    assert not others  # one epoch of one minibatch: the whole rollout
    for recorded, promised in zip((advantages, returns), expected):
        # The minibatch's rows come shuffled.
        np.testing.assert_allclose(
            np.sort(recorded), np.sort(np.ravel(promised)), rtol=1e-5, atol=1e-6
        )


def test_minibatch_epochs_visits_every_row_once_per_epoch():
    """Each epoch is a new order of all the rows, one update per minibatch; with
    `minibatch_keys` every update gets its own key, and `epoch_rows` recomputes the
    rows from the carry as it is at the epoch's start."""

    def update(count, minibatch, key):
        return count + 1, (minibatch, jr.key_data(key))

    count, (seen, keys) = eqxrl.algorithms.minibatch_epochs(
        update,
        jnp.int32(0),
        jnp.arange(12),
        jr.key(0),
        num_epochs=2,
        num_minibatches=3,
        minibatch_keys=True,
        epoch_rows=lambda count: jnp.arange(12) + 100 * count,
    )
    assert int(count) == 6 and seen.shape == (2, 3, 4)
    assert sorted(np.asarray(seen[0]).ravel().tolist()) == list(range(12))
    # The second epoch's rows come from the carry after the first epoch's 3 updates.
    assert sorted(np.asarray(seen[1]).ravel().tolist()) == list(range(300, 312))
    assert not np.array_equal(seen[0], seen[1] - 300)  # a new order
    assert len({tuple(k) for k in np.asarray(keys).reshape(6, -1).tolist()}) == 6
