"""Recurrent PPO with every PPO feature: action masks, `Box` actions (Gaussian and
squashed), observation and reward normalization, an asymmetric actor-critic,
seeds and sweeps under `vmap` (one trace), independent learners (one carry per
agent), and the refusals of what cannot work. (A mesh over environments:
`test_sharding.py`.)

Several tests train two members in one program (a sweep built inside `jax.vmap`):
a frozen policy (learning rate 0, ratios clipped at 1 +- 1e-4) and a learning one.
The frozen policy never changes, so every minibatch's replayed log-probabilities
must be the rollout's (`clip_fraction` 0), which fails if the replay reads a mask,
a normalizer, a squashed sample or a carry differently from the rollout; the
environments truncate episodes every few steps, so carries are reset inside and
at the start of the rollouts. The learning member shows that training runs.
"""

import functools
import math
import runpy
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl
from eqxrl.envs import RescaleAction, TimeLimit, TreasureHunt
from eqxrl.nn import ActorCriticCarry, GRUActorCritic, GRUCarry, LSTMCarry

# optax.adam computes `b1 ** count` with an int32 count.
STANDARD_DTYPE_PROMOTION = True

GRU = functools.partial(
    GRUActorCritic.from_env, hidden_size=8, encoder_sizes=(16,), head_sizes=(16,)
)


def sharp_gru(env, key, **options):
    """`GRU`, with the actor's outputs 30 times larger than at its initialization
    (gain 0.3 instead of 0.01): a log-probability read with another carry, mask or
    normalization than the rollout's differs by far more than float rounding."""
    network = GRU(env, key, **options)
    last = network.actor[-1]
    return eqx.tree_at(lambda n: n.actor[-1].weight, network, 30.0 * last.weight)


# 3 iterations of 4 environments x 16 steps, minibatches of 2 environments.
SMALL = dict(num_envs=4, num_steps=16, total_timesteps=4 * 16 * 3, num_minibatches=2)
# Two members of one program (built inside `jax.vmap`): a frozen policy
# (learning rate 0) whose ratios are clipped at 1 +- 1e-4, and a learning one.
SWEEP = dict(
    learning_rate=jnp.array([0.0, 1e-3], jnp.float32),
    clip_eps=jnp.array([1e-4, 0.2], jnp.float32),
)


def short(name):
    """`make(name)` with episodes truncated after 8 steps: every 16-step rollout
    has an episode boundary inside it and (after the first) at its start, where
    carries are reset (and truncated episodes bootstrap from the value their
    carry gives)."""
    return TimeLimit(eqxrl.envs.make(name), 8)


# The example's wrapper: `{"sensors": noisy observation, "true_state": observation}`.
NoisySensors = runpy.run_path(
    str(Path(__file__).parent.parent / "examples" / "dict_observations_ppo.py")
)["NoisySensors"]


def parameters(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(eqx.filter(tree, eqx.is_array))]


def train_sweep(make_algorithm, key=jr.key(0)):
    """`make_algorithm(**SWEEP[i]).train(key)` for both members, in one program."""
    return eqx.filter_vmap(lambda sweep: make_algorithm(**sweep).train(key))(SWEEP)


def assert_replay_matches_rollout(metrics):
    """The frozen member's policy never changes, so every replayed
    log-probability is the rollout's up to float rounding: no ratio is off by
    1e-4 (`clip_fraction` 0), `approx_kl` (about half the mean squared
    log-ratio) is 0 up to float32 rounding."""
    assert np.all(np.asarray(metrics["clip_fraction"][0]) == 0.0)
    approx_kl = np.asarray(metrics["approx_kl"][0])
    assert np.all(np.abs(approx_kl) < 1e-7), approx_kl


def assert_trained(states, metrics):
    """The learning member has finite metrics, and its parameters moved away
    from the frozen member's (the initial ones)."""
    for name in ("total_loss", "policy_loss", "value_loss", "entropy", "approx_kl"):
        assert np.isfinite(np.asarray(metrics[name][1])).all(), name
    frozen = parameters(jax.tree.map(lambda x: x[0], states.model))
    trained = parameters(jax.tree.map(lambda x: x[1], states.model))
    assert max(np.max(np.abs(a - b)) for a, b in zip(frozen, trained)) > 1e-4


# --------------------------------------------------------------------------------------
# Action masks
# --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_recurrent_policy_never_takes_a_masked_action():
    env = short("GridMaze-v0")  # masks the moves into walls

    def make(**sweep):
        return eqxrl.PPO(env=env, network_factory=sharp_gru, **sweep, **SMALL)

    states, metrics = train_sweep(make)
    assert (np.asarray(metrics["invalid_action_count"]) == 0).all()
    # The masks restricted the choice (the uniform policy over the valid moves
    # has less entropy than over all 4), and the replayed distributions are
    # masked too: their entropy is at most that of the valid moves.
    max_entropy = np.asarray(metrics["max_entropy"])
    assert (max_entropy < math.log(4) - 0.1).all(), max_entropy
    assert (np.asarray(metrics["entropy"]) <= max_entropy + 1e-5).all()
    assert_replay_matches_rollout(metrics)
    assert_trained(states, metrics)


# --------------------------------------------------------------------------------------
# Box actions, observation and reward normalization
# --------------------------------------------------------------------------------------


def rollout_actions(ppo, state, num_steps=64):
    """What `ppo.act` stores and steps with over `num_steps` steps of every
    environment from `state`, acting as the rollout does."""
    env = ppo.training_env
    model = ppo.acting_model(state.model, state.observation_statistics)

    @eqx.filter_jit
    def run(state):
        def step(carry, key):
            env_state, timestep, network_carry = carry
            action_key, step_key = jr.split(key)
            network_carry, stored, action, _, _ = ppo.act(
                model, timestep, jr.split(action_key, ppo.num_envs), network_carry
            )
            env_state, timestep = jax.vmap(env.step)(
                env_state, action, jr.split(step_key, ppo.num_envs)
            )
            return (env_state, timestep, network_carry), (stored, action)

        _, outputs = jax.lax.scan(
            step,
            (state.env_state, state.timestep, state.carry),
            jr.split(state.key, num_steps),
        )
        return outputs

    return jax.tree.map(np.asarray, run(state))


# Brax's PPO policy (a tanh-squashed Gaussian whose softplus scale the actor
# outputs) on Pendulum's actions rescaled to [-1, 1], with both normalizations.
SQUASHED_GRU = functools.partial(
    sharp_gru, squash=True, state_dependent_std=True, std_parameterization="softplus"
)


def squashed_pendulum(**sweep):
    return eqxrl.PPO(
        env=RescaleAction(short("Pendulum-v1")),
        network_factory=SQUASHED_GRU,
        **sweep,
        normalize_observations=True,
        normalize_rewards=True,
        **SMALL,
    )


@pytest.fixture(scope="module")
def squashed_pendulum_runs():
    return train_sweep(squashed_pendulum)


@pytest.mark.slow
def test_box_actions_with_a_recurrent_gaussian_policy():
    def make(**sweep):
        return eqxrl.PPO(
            env=short("Pendulum-v1"),
            network_factory=sharp_gru,
            **sweep,
            **SMALL,
        )

    states, metrics = train_sweep(make)
    assert_replay_matches_rollout(metrics)
    assert_trained(states, metrics)
    # The learned log standard deviation (a parameter of its own) moved.
    frozen, trained = np.asarray(states.model.log_std)
    assert frozen.shape == (1,) and np.abs(trained - frozen).max() > 1e-5


@pytest.mark.slow
def test_box_actions_with_a_recurrent_squashed_policy(squashed_pendulum_runs):
    states, metrics = squashed_pendulum_runs
    assert_replay_matches_rollout(metrics)
    assert_trained(states, metrics)
    trained = jax.tree.map(lambda x: x[1], states)
    assert trained.model.squash and trained.model.log_std is None
    ppo = squashed_pendulum(learning_rate=1e-3)
    stored, actions = rollout_actions(ppo, trained)
    assert np.isfinite(actions).all()
    assert (np.abs(actions) <= 1.0).all()  # in the rescaled space's bounds
    # The rollout steps with the tanh of the sample it stores (whose
    # log-probability is exact), which is not bounded.
    np.testing.assert_allclose(actions, np.tanh(stored), rtol=1e-6, atol=1e-7)
    assert np.abs(stored).max() > 1.0


def test_normalized_observations_and_rewards_with_a_recurrent_policy(
    squashed_pendulum_runs,
):
    states, metrics = squashed_pendulum_runs
    # Every observation and every discounted return of the 3 iterations of 4 x
    # 16 steps was merged (on the empty statistics' count of 1e-4).
    seen = 3 * 4 * 16
    for statistics in (states.observation_statistics, states.return_statistics):
        np.testing.assert_allclose(statistics.count, seen + 1e-4, rtol=1e-6)
    mean = np.asarray(states.observation_statistics.mean)
    assert mean.shape == (2, 3) and (np.abs(mean) > 1e-3).all()
    assert np.asarray(states.discounted_returns).shape == (2, 4)
    # The statistics are frozen within an iteration: the replay normalized as the
    # rollout did (learning rate 0), and the network reads normalized
    # observations in both.
    assert_replay_matches_rollout(metrics)
    trained = jax.tree.map(lambda x: x[1], states)
    ppo = squashed_pendulum(learning_rate=1e-3)
    acting = ppo.acting_model(trained.model, trained.observation_statistics)
    observation = jnp.array([0.5, -0.5, 3.0], jnp.float32)
    normalized = eqxrl.nn.normalize_observation(
        trained.observation_statistics, observation
    )
    carry = trained.model.initial_carry()
    read = eqx.filter_jit(lambda network, o: network.step(carry, o))
    acted = parameters(read(acting, observation))
    for expected, actual in zip(parameters(read(trained.model, normalized)), acted):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)
    raw = parameters(read(trained.model, observation))
    assert np.abs(raw[0] - acted[0]).max() > 1e-3


# --------------------------------------------------------------------------------------
# Asymmetric actor-critic
# --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_an_asymmetric_recurrent_actor_never_reads_the_critic_keys():
    env = NoisySensors(short("CartPole-v1"), 0.1)
    factory = functools.partial(
        sharp_gru, actor_keys=("sensors",), critic_keys=("true_state",)
    )

    def make(**sweep):
        return eqxrl.PPO(env=env, network_factory=factory, **sweep, **SMALL)

    states, metrics = train_sweep(make)
    assert_replay_matches_rollout(metrics)
    assert_trained(states, metrics)
    # The actor and the critic carry their own memory, per environment.
    assert isinstance(states.carry, ActorCriticCarry)
    assert states.carry.actor.hidden.shape == (2, 4, 8)
    assert states.carry.critic.hidden.shape == (2, 4, 8)

    # The trained network reads a sequence of observations, then the same
    # sequence with another true state: the actor's carries and distributions
    # are the same bit for bit, the critic's carries and values are not.
    network = jax.tree.map(lambda x: x[1], states).model
    sensors, true_state = jr.normal(jr.key(1), (2, 6, 4))

    @eqx.filter_jit
    def read(network, true_state):
        def step(carry, observation):
            carry, distribution, value = network.step(carry, observation)
            return carry, (carry, distribution, value)

        observations = {"sensors": sensors, "true_state": true_state}
        return jax.lax.scan(step, network.initial_carry(), observations)[1]

    carries, distributions, values = read(network, true_state)
    other_carries, other_distributions, other_values = read(network, true_state + 1)
    for actual, expected in zip(
        parameters((other_carries.actor, other_distributions)),
        parameters((carries.actor, distributions)),
    ):
        np.testing.assert_array_equal(actual, expected)
    critic, other_critic = carries.critic.hidden, other_carries.critic.hidden
    assert (np.abs(np.asarray(critic - other_critic)).max(axis=-1) > 1e-4).all()
    assert (np.abs(np.asarray(values - other_values)) > 1e-5).all()


# --------------------------------------------------------------------------------------
# Seeds and sweeps under vmap
# --------------------------------------------------------------------------------------


def stateless_cartpole(**overrides):
    return eqxrl.PPO(
        env=eqxrl.envs.make("StatelessCartPole-v1"),
        network_factory=GRU,
        **{**SMALL, **overrides},
    )


def assert_close(actual, expected):
    for a, b in zip(parameters(actual), parameters(expected)):
        if not jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_seeds_under_vmap_are_the_runs_of_each_seed_in_one_trace():
    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def train_seeds(ppo, keys):
        return eqx.filter_vmap(ppo.train)(keys)

    ppo = stateless_cartpole()
    keys = jr.split(jr.key(0), 4)
    states, metrics = train_seeds(ppo, keys)
    # Other seeds, another learning rate: the same program, not traced again.
    _, other = train_seeds(stateless_cartpole(learning_rate=1e-3), jr.split(keys[0], 4))
    assert not np.array_equal(other["total_loss"], metrics["total_loss"])
    assert states.carry.hidden.shape == (4, 4, 8)
    for index, key in enumerate(keys):
        state, seed_metrics = ppo.train(key)
        seed_state = jax.tree.map(lambda x: x[index], states)
        assert_close((state.model, state.carry), (seed_state.model, seed_state.carry))
        assert_close(seed_metrics, {k: v[index] for k, v in metrics.items()})
    assert not np.array_equal(metrics["total_loss"][0], metrics["total_loss"][1])


@pytest.mark.slow
def test_a_learning_rate_sweep_built_inside_vmap():
    def train_with(learning_rate):
        return stateless_cartpole(learning_rate=learning_rate).train(jr.key(0))

    rates = jnp.array([1e-4, 1e-3, 1e-2], jnp.float32)
    states, sweep = jax.vmap(train_with)(rates)
    np.testing.assert_allclose(sweep["learning_rate"][:, 0], rates, rtol=1e-6)
    assert states.carry.hidden.shape == (3, 4, 8)
    state, single = train_with(jnp.float32(1e-3))
    assert_close(
        (state.model, single),
        (
            jax.tree.map(lambda x: x[1], states.model),
            {k: v[1] for k, v in sweep.items()},
        ),
    )
    # The members trained differently.
    assert len({float(x) for x in sweep["total_loss"][:, -1]}) == 3


# --------------------------------------------------------------------------------------
# Independent learners: one carry per agent
# --------------------------------------------------------------------------------------

# A small world whose episodes are truncated every 4 steps: inside each 8-step
# rollout and at the start of the second (the carries reset there, and the
# bootstrap values read each agent's carry).
WORLD = TimeLimit(
    TreasureHunt(
        height=7, width=7, vision_radius=1, num_frames=2, spawn_probability=0.05
    ),
    4,
)


@pytest.mark.slow
@pytest.mark.parametrize("share_parameters", [False, True], ids=["own", "shared"])
def test_independent_recurrent_learners_carry_one_state_per_agent(share_parameters):
    factory = functools.partial(sharp_gru, hidden_size=16)

    def make(**sweep):
        ppo = eqxrl.PPO(
            env=WORLD,
            network_factory=factory,
            **sweep,
            num_envs=2,
            num_steps=8,
            total_timesteps=2 * 8 * 2,
            num_minibatches=2,
        )
        return eqxrl.multiagent.Independent(ppo, share_parameters=share_parameters)

    states, metrics = train_sweep(make)
    learners = states.learners
    assert_replay_matches_rollout(metrics)
    assert_trained(learners, metrics)
    assert (np.asarray(metrics["episode_count"]) > 0).all()  # truncated episodes
    hidden = np.asarray(learners.carry.hidden)
    if share_parameters:
        # One learner, every agent of every world a column of it (world-major).
        assert hidden.shape == (2, 2 * 2, 16)  # [runs, worlds * agents, hidden]
        per_agent = hidden.reshape(2, 2, 2, 16).swapaxes(1, 2)
    else:
        assert hidden.shape == (2, 2, 2, 16)  # [runs, agents, worlds, hidden]
        per_agent = hidden
    # per_agent: [runs, agents, worlds, hidden].
    # Each agent remembers its own observations.
    assert np.abs(per_agent[:, 0] - per_agent[:, 1]).max(axis=-1).min() > 1e-4


# --------------------------------------------------------------------------------------
# Refusals
# --------------------------------------------------------------------------------------


def test_minibatches_of_whole_sequences_must_divide_the_environments():
    env = eqxrl.envs.make("StatelessCartPole-v1")
    # 6 x 4 = 24 steps split into 4 minibatches, but 6 sequences do not: refused
    # when PPO is built, not when it is first traced.
    with pytest.raises(ValueError, match=r"num_minibatches=4 must divide num_envs=6"):
        eqxrl.PPO(
            env=env,
            network_factory=GRU,
            num_envs=6,
            num_steps=4,
            total_timesteps=24,
            num_minibatches=4,
        )
    # A feed-forward network takes minibatches of steps.
    eqxrl.PPO(env=env, num_envs=6, num_steps=4, total_timesteps=24, num_minibatches=4)


def test_independent_minibatches_of_whole_sequences_must_divide_the_columns():
    def independent(num_envs, num_minibatches, share_parameters):
        ppo = eqxrl.PPO(
            env=WORLD,
            network_factory=GRU,
            num_envs=num_envs,
            num_steps=4,
            total_timesteps=4 * num_envs,
            num_minibatches=num_minibatches,
        )
        return eqxrl.multiagent.Independent(ppo, share_parameters=share_parameters)

    # 1 world: 1 sequence per agent for its own learner, 2 for a shared one.
    independent(1, 2, share_parameters=True)
    with pytest.raises(
        ValueError, match=r"num_minibatches=2 must divide the num_envs=1 worlds"
    ):
        independent(1, 2, share_parameters=False)
    with pytest.raises(
        ValueError,
        match=r"num_minibatches=4 must divide the 6 columns \(num_envs=3 worlds x 2",
    ):
        independent(3, 4, share_parameters=True)


def test_a_carry_of_the_wrong_shape_is_refused_naming_both():
    env = eqxrl.envs.make("StatelessCartPole-v1")
    # Shapes only: nothing runs, the refusal is at trace time.
    network = eqx.filter_eval_shape(GRU, env, jr.key(0))
    observation = jnp.zeros(2, jnp.float32)
    read = functools.partial(eqx.filter_eval_shape, network.step)
    read(network.initial_carry(), observation)
    expected = r".*but this network reads one environment's GRUCarry\(hidden=\[8\]\)"
    for carry, described in (
        (GRUCarry(hidden=jnp.zeros(5, jnp.float32)), r"GRUCarry\(hidden=\[5\]\)"),
        (
            GRUCarry(hidden=jnp.zeros((4, 8), jnp.float32)),
            r"GRUCarry\(hidden=\[4, 8\]\)",
        ),
        (
            LSTMCarry(hidden=jnp.zeros(8, jnp.float32), cell=jnp.zeros(8, jnp.float32)),
            r"LSTMCarry\(hidden=\[8\], cell=\[8\]\)",
        ),
    ):
        with pytest.raises(
            ValueError,
            match=r"GRUActorCritic\.step: the carry is " + described + expected,
        ):
            read(carry, observation)
