"""Recurrent VDN and QMIX: the replay of sequences with their carries, the team
target through time against a step-by-step reference, and the refusals."""

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl
from eqxrl.envs import TimeLimit
from eqxrl.multiagent import QMIX, VDN, Independent
from jaxpr_walk import scan_unrolls
from test_value_decomposition import EPISODE, MaskedTeam, perturbed

# Adam's bias correction raises a float to an int32 count (see conftest.py).
STANDARD_DTYPE_PROMOTION = True

CHUNK = 4  # train_frequency: chunks of 4 steps straddle the 6-step episodes
GRU = functools.partial(eqxrl.nn.GRUQNetwork.from_env, hidden_size=8)


def recurrent_team(env, algorithm_class=VDN, **options):
    """A team of GRU agents, one network each, collecting 5 iterations whose one
    update (at the end) has a zero step size: the agents that acted are the final
    state's (the replay is what is checked)."""
    settings = dict(
        num_envs=2,
        total_timesteps=2 * CHUNK * 5,
        train_frequency=CHUNK,
        buffer_size=2 * CHUNK * 8,
        learning_starts=2 * CHUNK * 5,
        learning_rate=0.0,
        batch_size=2 * CHUNK,
        n_step=1,
        gamma=0.9,
        huber_delta=math.inf,
        network_factory=GRU,
    )
    dqn = eqxrl.DQN(env=env, **settings | options)
    return algorithm_class(dqn, share_parameters=False)


class RankedTeam(MaskedTeam):
    """`MaskedTeam` where agent `i` earns `10 * i + action + 1` (its actions are
    valid ones): rewards differ between the agents and, with the worlds' own
    random actions, between the worlds."""

    def step(self, state, action, key):
        state, timestep = super().step(state, action, key)
        reward = (10 * jnp.arange(2, dtype=jnp.int32) + action + 1).astype(jnp.float32)
        return state, eqx.tree_at(lambda t: t.reward, timestep, reward)


@pytest.fixture(scope="module")
def trained():
    """The two worlds of episodes that terminate (6 steps; `RankedTeam`, whose
    agents' rewards differ) and of episodes truncated by a time limit (4 steps),
    each after 5 iterations."""
    runs = {}
    for name, env in (
        ("terminated", RankedTeam()),
        ("truncated", TimeLimit(MaskedTeam(), 4)),
    ):
        team = recurrent_team(env)
        state, _ = team.train(jr.key(0))
        runs[name] = team, state
    return runs


def rows_in_order(buffer):
    """The stored sequences, oldest row first: `[rows, num_envs, ...]` leaves."""
    oldest = (int(buffer.position) - int(buffer.size)) % buffer.capacity
    rows = (oldest + np.arange(int(buffer.size))) % buffer.capacity
    return jax.tree.map(lambda x: np.asarray(x)[rows], buffer.transitions)


def final_carries(agents, carry, observations, episode_start):
    """Each agent's carry after its unroll of one world's chunk."""
    carry, episode_start = jax.tree.map(jnp.asarray, (carry, episode_start))
    by_agent = jax.tree.map(lambda x: jnp.swapaxes(jnp.asarray(x), 0, 1), observations)
    return eqx.filter_vmap(lambda net, c, o: net.unroll(c, o, episode_start)[0])(
        agents, carry, by_agent
    )


@pytest.mark.slow
def test_the_stored_sequences_chain_their_carries_and_flags(trained):
    """Every world's chunks follow one another: a chunk's closing observation and
    flag open the next, the next chunk's stored carry is where the agents' unroll
    of this one ends (resetting at episode starts), and the latest carry is the
    state's. The flags mark the 6-step episodes' starts."""
    team, state = trained["terminated"]
    rows = rows_in_order(state.buffer)
    assert rows.reward.shape == (5, 2, CHUNK)
    assert rows.episode_start.shape == (5, 2, CHUNK + 1)
    # Global step k starts an episode when k is a multiple of 6 (k > 0: the
    # very first observation is read with the initial carry, flag or not).
    steps = np.arange(5 * CHUNK)
    starts = rows.episode_start[:, :, :CHUNK].transpose(1, 0, 2).reshape(2, -1)
    np.testing.assert_array_equal(
        starts[:, 1:], np.broadcast_to(steps[1:] % 6 == 0, (2, 5 * CHUNK - 1))
    )
    np.testing.assert_array_equal(
        rows.terminated.transpose(1, 0, 2).reshape(2, -1),
        np.broadcast_to((steps + 1) % EPISODE == 0, (2, 5 * CHUNK)),
    )
    for r in range(5):
        for world in range(2):
            sequence = jax.tree.map(lambda x: x[r, world], rows)
            end = final_carries(
                state.agents,
                sequence.carry,
                sequence.observation.observation[:CHUNK],
                sequence.episode_start[:CHUNK],
            )
            if r + 1 < 5:
                following = jax.tree.map(lambda x: x[r + 1, world], rows)
                expected = following.carry
                np.testing.assert_array_equal(
                    following.observation.observation[0],
                    sequence.observation.observation[CHUNK],
                )
                assert following.episode_start[0] == sequence.episode_start[CHUNK]
            else:
                expected = jax.tree.map(lambda x: x[world], state.carry)
            np.testing.assert_allclose(end.hidden, expected.hidden, atol=1e-6)


def reference_loss(team, agents, target_agents, sequences):
    """VDN's double-Q team target through time, step by step in NumPy: each agent
    steps through its sequence with its carry (reset where an episode starts),
    online and target alike; `Q_tot` of the taken actions regresses on `r + 0.9 *
    sum(target values of the online greedy valid actions at the next step)`, with
    no bootstrap after a termination, and truncated steps left out; squared
    loss / 2, averaged over the kept steps."""

    def values(network, carry, observations, starts):
        out = []
        for t in range(observations.shape[0]):
            if starts[t]:
                carry = network.initial_carry()
            carry, q = network.step(carry, jnp.asarray(observations[t]))
            out.append(np.asarray(q))
        return np.stack(out)  # [steps + 1, actions]

    errors, weights = [], []
    num = jax.tree.leaves(sequences.reward)[0].shape[0]
    for s in range(num):
        seq = jax.tree.map(lambda x: np.asarray(x)[s], sequences)
        q, q_target = [], []
        for agent in range(2):
            one = lambda tree: jax.tree.map(lambda x: x[agent], tree)  # noqa: E731
            carry = jax.tree.map(jnp.asarray, one(seq.carry))
            observations = seq.observation.observation[:, agent]
            q.append(values(one(agents), carry, observations, seq.episode_start))
            q_target.append(
                values(one(target_agents), carry, observations, seq.episode_start)
            )
        q, q_target = np.stack(q), np.stack(q_target)  # [agents, steps + 1, actions]
        mask = seq.observation.action_mask  # [steps + 1, agents, actions]
        for t in range(CHUNK):
            chosen = q[np.arange(2), t, seq.action[t]]
            online = np.where(mask[t + 1], q[:, t + 1], -np.inf)
            greedy = np.argmax(online, axis=1)
            next_total = q_target[np.arange(2), t + 1, greedy].sum()
            discount = 0.0 if seq.terminated[t] else 0.9
            target = seq.reward[t] + discount * next_total
            errors.append(0.5 * (chosen.sum() - target) ** 2)
            weights.append(0.0 if seq.truncated[t] and not seq.terminated[t] else 1.0)
    errors, weights = np.asarray(errors), np.asarray(weights)
    return float(np.sum(weights * errors) / max(np.sum(weights), 1.0)), weights


@pytest.mark.slow
@pytest.mark.parametrize("ends", ["terminated", "truncated"])
def test_the_team_target_through_time_matches_a_step_by_step_reference(trained, ends):
    team, state = trained[ends]
    index = jnp.arange(int(state.buffer.size) * team.num_envs, dtype=jnp.int32)
    sequences = state.buffer.gather_sequences(index)
    target_agents = perturbed(state.agents, jr.key(3), scale=0.3)
    loss, statistics = team.sequence_loss(
        (state.agents, state.mixer),
        (target_agents, state.mixer),
        sequences,
        jr.key(0),
    )
    expected, weights = reference_loss(team, state.agents, target_agents, sequences)
    if ends == "truncated":  # steps cut by the time limit have no target
        assert 0 < weights.sum() < weights.size
    else:
        assert weights.all()
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
    assert np.isfinite(float(statistics["q_value"]))


@pytest.mark.learning
@pytest.mark.parametrize("algorithm_class", [VDN, QMIX])
def test_a_recurrent_team_learns_and_acts_with_its_carry(algorithm_class):
    """A run with updates: the loss is finite once learning starts, and the
    policy acts step by step with one carry per agent."""
    team = recurrent_team(
        MaskedTeam(declare_state=True),
        algorithm_class,
        total_timesteps=2 * CHUNK * 12,
        learning_starts=2 * CHUNK * 4,
        learning_rate=1e-3,
    )
    state, metrics = team.train(jr.key(1))
    loss = np.asarray(metrics["loss"])
    assert np.isnan(loss[:3]).all() and np.isfinite(loss[4:]).all()
    policy = team.policy(state, deterministic=True)
    assert policy.is_recurrent
    env = MaskedTeam(declare_state=True)
    _, timestep = env.reset(jr.key(0))
    carry, action = policy.step(
        policy.initial_carry(), timestep.observation, jr.key(1), timestep.action_mask
    )
    assert action.shape == (2,) and carry.hidden.shape == (2, 8)
    assert timestep.action_mask[jnp.arange(2), action].all()


def test_refusals_name_the_fix():
    with pytest.raises(ValueError, match="n_step=3 is not supported"):
        recurrent_team(MaskedTeam(), n_step=3)
    with pytest.raises(ValueError, match="must be a multiple of it; e.g. batch_size=8"):
        recurrent_team(MaskedTeam(), batch_size=10)
    with pytest.raises(ValueError, match="replay single transitions"):
        Independent(eqxrl.DQN(env=MaskedTeam(), network_factory=GRU))
    with pytest.raises(ValueError, match="VDN / QMIX, which replay sequences"):
        eqxrl.DQN(env=eqxrl.envs.make("CartPole-v1"), network_factory=GRU)


@pytest.mark.parametrize("num_sequences, unroll", [(8, 2), (64, 1)])
def test_the_agents_loops_are_unrolled_by_the_minibatch_s_sequences_on_cpu(
    trained, num_sequences, unroll
):
    # The sequence loss tells the agents' loops how many sequences they run over
    # (here one network per agent: the minibatch's); on CPU, 64 or more run the
    # plain loop, fewer 2 steps at a time.
    team, state = trained["terminated"]
    index = jnp.arange(num_sequences, dtype=jnp.int32) % (
        int(state.buffer.size) * team.num_envs
    )
    sequences = state.buffer.gather_sequences(index)
    jaxpr = jax.make_jaxpr(team.sequence_loss)(
        (state.agents, state.mixer), (state.agents, state.mixer), sequences, jr.key(0)
    )
    unrolls = scan_unrolls(jaxpr.jaxpr)
    assert unrolls and set(unrolls) == {unroll}


def test_the_stored_team_reward_is_each_world_s_sum_over_its_agents(trained):
    """5 iterations of 2 worlds x 2 agents: every stored step's team reward is
    the sum of its own world's agents' rewards (not a sum over the worlds, which
    has the same shape here)."""
    _, state = trained["terminated"]
    rows = rows_in_order(state.buffer)
    assert rows.action.shape == (5, 2, CHUNK, 2)
    expected = np.sum(10 * np.arange(2) + rows.action + 1, axis=-1)
    assert (expected[:, 0] != expected[:, 1]).any()  # the worlds' rewards differ
    np.testing.assert_array_equal(rows.reward, expected)
