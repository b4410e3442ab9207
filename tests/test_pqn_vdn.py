"""PQN-VDN: the team's Q(lambda) targets and loss against NumPy (feed-forward
agents, and recurrent agents' sequence loss against a step-by-step reference), what
a rollout keeps, shared and per-agent networks, the one-program contract,
refusals, the Trainer and the command line, and a short training on Treasure
Hunt."""

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl
from eqxrl.envs import AbstractMultiAgentEnvironment, Box, TimeStep
from eqxrl.multiagent import PQNVDN, PQNVDNRollout, PQNVDNState, SharedPolicy
from test_value_decomposition import EPISODE, WORLD, MaskedTeam, arrays, perturbed

# optax's RAdam computes `b2 ** count` with an int32 count.
STANDARD_DTYPE_PROMOTION = True

# 6 iterations of 4 worlds x 8 steps, 2 epochs of 4 minibatches.
SMALL = dict(
    num_envs=4,
    num_steps=8,
    total_timesteps=4 * 8 * 6,
    num_epochs=2,
    num_minibatches=4,
    hidden_sizes=(16,),
)


def small(env=None, **overrides):
    return eqxrl.PQN(env=MaskedTeam() if env is None else env, **SMALL | overrides)


def agent_network(pqn_vdn, agents, agent):
    """Agent `agent`'s own network and a function from its observation to what
    that network reads (the observation itself, or for a shared network the
    flattened observation with the one-hot agent index)."""
    if pqn_vdn.share_parameters:
        index = np.eye(pqn_vdn.num_agents, dtype=np.float32)[agent]

        def inputs(observation):
            return jnp.concatenate([jnp.ravel(observation), jnp.asarray(index)])

        return agents, inputs
    network = jax.tree.map(lambda x: x[agent] if eqx.is_array(x) else x, agents)
    return network, lambda observation: observation


def numpy_q_values(pqn_vdn, agents, observations):
    """Every agent's Q-values, each agent's network called directly on its own
    observation: `[..., num_agents, num_actions]` float64 from `[..., num_agents,
    observation...]` observations."""
    observations = np.asarray(observations)
    batch = observations.shape[:-2]
    flat = observations.reshape(-1, *observations.shape[-2:])
    values = []
    for agent in range(pqn_vdn.num_agents):
        network, inputs = agent_network(pqn_vdn, agents, agent)
        values.append(jax.vmap(lambda o: network(inputs(o)))(flat[:, agent]))
    values = np.stack([np.asarray(v, np.float64) for v in values], axis=1)
    return values.reshape(*batch, pqn_vdn.num_agents, -1)


def numpy_greedy_team_value(q_values, mask):
    """The sum over agents of the largest valid Q-value."""
    return np.where(mask, q_values, -np.inf).max(axis=-1).sum(axis=-1)


def numpy_q_lambda(reward, next_value, terminated, truncated, gamma, lam):
    """Peng's Q(lambda) from its recursive definition, in float64: a terminated
    step's target is its reward; a truncated step, or the rollout's last,
    bootstraps one step from `next_value`; otherwise the next state's value and
    the next target are mixed by lambda."""
    num_steps, num_envs = reward.shape
    targets = np.zeros((num_steps, num_envs))
    for n in range(num_envs):
        for t in reversed(range(num_steps)):
            if terminated[t, n]:
                targets[t, n] = reward[t, n]
            elif truncated[t, n] or t == num_steps - 1:
                targets[t, n] = reward[t, n] + gamma * next_value[t, n]
            else:
                mixed = (1 - lam) * next_value[t, n] + lam * targets[t + 1, n]
                targets[t, n] = reward[t, n] + gamma * mixed
    return targets


# ------------------------------------------------------------- team targets


@pytest.mark.slow
@pytest.mark.parametrize("share_parameters", [True, False])
def test_team_targets_and_loss_match_numpy(share_parameters):
    """On a hand-built rollout of 5 steps in 3 worlds (terminations and
    truncations, masks hiding each agent's best action), the targets bootstrap
    from the sum over agents of their greedy valid values (at a truncation, of
    the final observation's; at a termination, from nothing), on the team reward
    times `reward_scale`; the loss is the mean squared difference between the sum
    of the agents' values of their actions and those targets."""
    gamma, lam, scale = 0.9, 0.65, 0.5
    pqn_vdn = PQNVDN(
        small(gamma=gamma, q_lambda=lam, reward_scale=scale),
        share_parameters=share_parameters,
    )
    agents = perturbed(pqn_vdn.init(jr.key(0)).agents, jr.key(1))
    num_steps, num_envs, num_agents = 5, 3, 2
    keys = jr.split(jr.key(2), 6)
    observation = jr.normal(keys[0], (num_steps, num_envs, num_agents, 3))
    final_observation = jr.normal(keys[1], (num_steps, num_envs, num_agents, 3))
    last_observation = jr.normal(keys[2], (num_envs, num_agents, 3))
    action = jr.randint(keys[3], (num_steps, num_envs, num_agents), 0, 3)
    reward = jr.normal(keys[4], (num_steps, num_envs))
    terminated = np.zeros((num_steps, num_envs), bool)
    truncated = np.zeros((num_steps, num_envs), bool)
    terminated[1, 0] = terminated[3, 2] = True
    truncated[2, 0] = truncated[1, 1] = truncated[4, 1] = True

    def masks(observations):
        """Hide each agent's best action (and, for agent 1, one more), so that a
        greedy value ignoring the mask would differ."""
        q = numpy_q_values(pqn_vdn, agents, observations)
        mask = np.arange(3) != q.argmax(-1)[..., None]
        mask[..., 1, :] &= np.arange(3) != q.argmin(-1)[..., 1, None]
        return mask

    mask, final_mask, last_mask = map(
        masks, (observation, final_observation, last_observation)
    )
    greedy = jax.vmap(pqn_vdn.greedy_team_value, in_axes=(None, 0, 0))
    over_steps = jax.vmap(greedy, in_axes=(None, 0, 0))
    rollout = PQNVDNRollout(
        observation=observation,
        action_mask=jnp.asarray(mask),
        action=action.astype(jnp.int32),
        reward=reward,
        terminated=jnp.asarray(terminated),
        truncated=jnp.asarray(truncated),
        value=over_steps(agents, observation, jnp.asarray(mask)),
        truncation_value=jnp.where(
            truncated,
            over_steps(agents, final_observation, jnp.asarray(final_mask)),
            0.0,
        ),
        extras={},
    )
    last_value = greedy(agents, last_observation, jnp.asarray(last_mask))
    targets = pqn_vdn.q_lambda_targets(rollout, last_value)

    value = numpy_greedy_team_value(numpy_q_values(pqn_vdn, agents, observation), mask)
    final_value = numpy_greedy_team_value(
        numpy_q_values(pqn_vdn, agents, final_observation), final_mask
    )
    last = numpy_greedy_team_value(
        numpy_q_values(pqn_vdn, agents, last_observation), last_mask
    )
    next_value = np.concatenate([value[1:], last[None]])
    next_value = np.where(truncated, final_value, next_value)
    expected = numpy_q_lambda(
        scale * np.asarray(reward, np.float64),
        next_value,
        terminated,
        truncated,
        gamma,
        lam,
    )
    np.testing.assert_allclose(targets, expected, rtol=1e-5, atol=1e-5)

    rows = num_steps * num_envs
    loss, statistics = pqn_vdn.loss(
        agents,
        observation.reshape(rows, num_agents, 3),
        rollout.action.reshape(rows, num_agents),
        targets.reshape(rows),
    )
    q = numpy_q_values(pqn_vdn, agents, observation)
    chosen = np.take_along_axis(q, np.asarray(action)[..., None], -1)[..., 0]
    q_total = chosen.sum(-1)
    np.testing.assert_allclose(
        float(loss), np.mean((q_total - expected) ** 2), rtol=1e-5
    )
    assert float(statistics["td_loss"]) == float(loss)
    np.testing.assert_allclose(float(statistics["q_value"]), q_total.mean(), rtol=1e-5)


def test_the_loss_predicts_the_sum_of_the_chosen_values():
    """With targets of zero, the loss is the mean of `Q_tot^2` and its
    `q_value` the mean `Q_tot`, where `Q_tot` is each agent's own network's value
    of its action, summed; its gradient reaches every agent's network."""
    pqn_vdn = PQNVDN(small(), share_parameters=False)
    agents = perturbed(pqn_vdn.init(jr.key(0)).agents, jr.key(1))
    observation = jr.normal(jr.key(2), (7, 2, 3))
    action = jnp.array([[0, 2], [1, 1], [2, 0], [0, 0], [1, 2], [2, 2], [0, 1]])
    action = action.astype(jnp.int32)
    loss, statistics = pqn_vdn.loss(agents, observation, action, jnp.zeros(7))
    q_total = np.zeros(7)
    for agent in range(2):
        network, _ = agent_network(pqn_vdn, agents, agent)
        q = jax.vmap(network)(observation[:, agent])
        q_total += np.asarray(q)[np.arange(7), np.asarray(action[:, agent])]
    np.testing.assert_allclose(float(statistics["q_value"]), q_total.mean(), rtol=1e-5)
    np.testing.assert_allclose(float(loss), np.mean(q_total**2), rtol=1e-5)
    grads = eqx.filter_grad(
        lambda a: pqn_vdn.loss(a, observation, action, jnp.zeros(7))[0]
    )(agents)
    last = np.asarray(grads.layers[-1].weight)  # [agents, actions, hidden]
    assert np.abs(last[0]).sum() > 0 and np.abs(last[1]).sum() > 0


@pytest.mark.slow
def test_a_rollout_keeps_the_team_reward_and_the_team_greedy_values():
    """A collected rollout on MaskedTeam under a time limit of 4 steps: the team
    reward (2 per step: both agents act validly), episodes truncated every 4
    steps and never terminated, valid actions only, each step's value the sum of
    the agents' greedy valid values, and the truncation value that of the final
    observation (step 4's, which the rollout does not show)."""
    env = eqxrl.envs.TimeLimit(MaskedTeam(), 4)
    pqn_vdn = PQNVDN(small(env), share_parameters=False)
    state = pqn_vdn.init(jr.key(0))
    state = eqx.tree_at(lambda s: s.agents, state, perturbed(state.agents, jr.key(1)))
    _, _, carry, rollout = pqn_vdn.collect(state, jnp.float32(0.5), jr.key(2))
    assert carry is None and rollout.episode_start is None
    assert isinstance(state, PQNVDNState)
    np.testing.assert_array_equal(rollout.reward, 2.0)
    truncated = np.asarray(rollout.truncated)
    assert not np.asarray(rollout.terminated).any()
    expected = np.broadcast_to((np.arange(8) % 4 == 3)[:, None], truncated.shape)
    np.testing.assert_array_equal(truncated, expected)
    mask = np.asarray(rollout.action_mask)
    action = np.asarray(rollout.action)
    assert np.take_along_axis(mask, action[..., None], -1).all()
    q = numpy_q_values(pqn_vdn, state.agents, rollout.observation)
    np.testing.assert_allclose(
        rollout.value, numpy_greedy_team_value(q, mask), rtol=1e-5
    )
    _, final = MaskedTeam().step(jnp.int32(3), jnp.zeros(2, jnp.int32), jr.key(0))
    final_q = numpy_q_values(pqn_vdn, state.agents, final.observation)
    final_value = numpy_greedy_team_value(final_q, np.asarray(final.action_mask))
    np.testing.assert_allclose(
        rollout.truncation_value, np.where(truncated, final_value, 0.0), rtol=1e-5
    )


# ------------------------------------------------------------------ agents


@eqx.filter_jit
@eqx.debug.assert_max_traces(max_traces=1)
def train_seeds(algorithm, keys):
    """Runs of `PQNVDN(small())` (any keys, any sweepable numbers) vmapped over
    seeds: one program for every test below that trains it (the program contract's
    test asserts it is traced once)."""
    return eqx.filter_vmap(algorithm.train)(keys)


def first_seed(tree):
    return jax.tree.map(lambda x: x[0] if eqx.is_array(x) else x, tree)


def test_shared_agents_are_one_network_and_unshared_ones_each_trained():
    shared = PQNVDN(small())
    state, metrics = first_seed(train_seeds(shared, jr.split(jr.key(0), 2)))
    # One network (not stacked), reading the observation and the agent index.
    assert state.agents.layers[0].weight.shape == (16, 3 + 2)
    assert np.isfinite(np.asarray(metrics["td_loss"])).all()
    assert isinstance(shared.policy(state), SharedPolicy)

    own = PQNVDN(small(), share_parameters=False)
    initial = own.init(jr.key(0))
    state, _ = own.train(jr.key(0))
    weights = state.agents.layers[0].weight
    assert weights.shape == (2, 16, 3)
    assert not np.allclose(weights[0], weights[1])
    before = initial.agents.layers[0].weight
    for agent in range(2):
        assert not np.allclose(weights[agent], before[agent])


@pytest.mark.parametrize("share_parameters", [True, False])
def test_masked_actions_are_never_taken(share_parameters):
    """MaskedTeam gives -100 for a masked action: every episode returns its
    length, exploring or not, and the policy respects the mask too."""
    pqn_vdn = PQNVDN(small(), share_parameters=share_parameters)
    if share_parameters:
        # Seed 0 of the seed-vmapped program the other tests compile.
        state, metrics = first_seed(train_seeds(pqn_vdn, jr.split(jr.key(0), 2)))
    else:
        state, metrics = pqn_vdn.train(jr.key(0))
    returns = np.asarray(metrics["episode_return"])  # [iterations, agents]
    ended = ~np.isnan(returns[:, 0])
    assert ended.sum() >= 5
    np.testing.assert_array_equal(returns[ended], EPISODE)
    np.testing.assert_array_equal(metrics["total_episode_return"][ended], 2 * EPISODE)
    _, timestep = MaskedTeam().reset(jr.key(0))
    for deterministic in (False, True):
        policy = pqn_vdn.policy(state, deterministic=deterministic)
        actions = jax.vmap(
            lambda key: policy(timestep.observation, key, timestep.action_mask)
        )(jr.split(jr.key(1), 100))
        valid = np.asarray(timestep.action_mask)[np.arange(2), np.asarray(actions)]
        assert valid.all()


# ------------------------------------------------------- the program contract


@pytest.mark.slow
def test_one_compilation_for_keys_and_sweepable_numbers_and_vmap_over_seeds():
    # One program, vmapped over seeds, for other keys and other sweepable numbers
    # (`train_seeds` is traced at most once in this module).
    train = train_seeds
    first = PQNVDN(small())
    second = PQNVDN(small(gamma=0.5, learning_rate=1e-3, q_lambda=0.3))
    keys = jr.split(jr.key(0), 2)
    states, metrics = train(first, keys)
    _, again = train(first, jr.split(jr.key(1), 2))
    _, other = train(second, keys)
    assert not np.allclose(metrics["q_value"], other["q_value"])
    assert not np.allclose(metrics["q_value"], again["q_value"])

    seeds = metrics
    assert seeds["td_loss"].shape == (2, first.num_iterations)
    assert seeds["episode_return"].shape == (2, first.num_iterations, 2)
    assert np.isfinite(np.asarray(seeds["td_loss"])).all()
    weights = np.asarray(states.agents.layers[0].weight)
    assert not np.allclose(weights[0], weights[1])


class ContinuousTeam(AbstractMultiAgentEnvironment):
    """Two agents with a continuous action each (for the refusal test)."""

    num_agents: int = eqx.field(static=True, default=2)

    @property
    def observation_space(self):
        return Box(0.0, 1.0, shape=(3,))

    @property
    def action_space(self):
        return Box(-1.0, 1.0, shape=(1,))

    def _timestep(self):
        return TimeStep(
            observation=jnp.zeros((2, 3), jnp.float32),
            reward=jnp.zeros(2, jnp.float32),
            terminated=jnp.bool_(False),
            truncated=jnp.bool_(False),
        )

    def reset(self, key):
        return jnp.int32(0), self._timestep()

    def step(self, state, action, key):
        return state, self._timestep()


def test_refusals_explain_the_fix():
    with pytest.raises(ValueError, match="single agent; PQNVDN trains a cooperative"):
        PQNVDN(eqxrl.PQN(env=eqxrl.envs.make("CartPole-v1"), **SMALL))
    with pytest.raises(ValueError, match="must be an eqxrl.PQN"):
        PQNVDN(eqxrl.DQN(env=MaskedTeam()))
    with pytest.raises(ValueError, match="PQN: needs a Discrete action space"):
        PQNVDN(small(ContinuousTeam()))
    with pytest.raises(ValueError, match="num_minibatches=4 must divide num_envs=2"):
        PQNVDN(small(num_envs=2, num_steps=16, network_factory=GRU))
    # PQN alone refuses a team, and independent PQN learners say what trains one.
    with pytest.raises(ValueError, match=r"multi-agent .* as a team with eqxrl"):
        small().init(jr.key(0))
    with pytest.raises(ValueError, match=r"eqxrl.multiagent.PQNVDN\(pqn\)"):
        eqxrl.multiagent.Independent(small())


# ---------------------------------------------------------- recurrent agents

GRU = eqxrl.nn.GRUQNetwork.from_env


@eqx.filter_jit
def step(network, carry, observation):
    """One step of a recurrent network (compiled: the reference steps it often)."""
    return network.step(carry, observation)


@pytest.mark.slow
@pytest.mark.parametrize("share_parameters", [True, False])
def test_recurrent_sequence_loss_matches_a_step_by_step_reference(share_parameters):
    """GRU agents on 2 hand-built sequences of 5 steps (an episode terminated
    inside one, truncated inside the other, truncated at the last step): the loss
    equals a reference that steps each agent's own network through each sequence
    from its carry (the initial carry where an episode starts, one step past the
    end), sums the agents' greedy valid values as the team's, bootstraps a
    truncated step from its stored final value, and runs Q(lambda) in float64."""
    gamma, lam, scale = 0.9, 0.65, 0.5
    pqn = small(gamma=gamma, q_lambda=lam, reward_scale=scale, network_factory=GRU)
    pqn_vdn = PQNVDN(pqn, share_parameters=share_parameters)
    state = pqn_vdn.init(jr.key(0))
    agents = perturbed(state.agents, jr.key(1), scale=0.3)
    num_worlds, num_steps, num_agents = 2, 5, 2
    keys = jr.split(jr.key(2), 8)
    carry = jax.tree.map(
        lambda x: jr.normal(keys[0], x[:num_worlds].shape), state.carry
    )
    observation = jr.normal(keys[1], (num_worlds, num_steps, num_agents, 3))
    next_observation = jr.normal(keys[2], (num_worlds, num_agents, 3))
    hidden = jr.randint(keys[3], (num_worlds, num_steps + 1, num_agents), 0, 3)
    mask = np.arange(3) != np.asarray(hidden)[..., None]  # one action hidden
    action = jr.randint(keys[4], (num_worlds, num_steps, num_agents), 0, 3)
    reward = jr.normal(keys[5], (num_worlds, num_steps))
    terminated = np.zeros((num_worlds, num_steps), bool)
    truncated = np.zeros((num_worlds, num_steps), bool)
    terminated[0, 1] = truncated[1, 2] = truncated[0, 4] = True
    ended = terminated | truncated
    episode_start = np.concatenate([[[False], [True]], ended[:, :-1]], axis=1)
    truncation_value = np.where(truncated, np.asarray(jr.normal(keys[6], (2, 5))), 0)

    sequences = PQNVDNRollout(
        observation=observation,
        action_mask=jnp.asarray(mask[:, :-1]),
        action=action.astype(jnp.int32),
        reward=reward,
        terminated=jnp.asarray(terminated),
        truncated=jnp.asarray(truncated),
        value=jnp.zeros((num_worlds, num_steps)),  # not read
        truncation_value=jnp.asarray(truncation_value, jnp.float32),
        extras={},
        episode_start=jnp.asarray(episode_start),
    )
    next_timestep = jax.vmap(
        lambda o, terminated, truncated, m: TimeStep(
            observation=o,
            reward=jnp.zeros(2, jnp.float32),
            terminated=terminated,
            truncated=truncated,
            action_mask=m,
        )
    )(
        next_observation,
        jnp.zeros(2, bool),
        jnp.asarray(ended[:, -1]),
        jnp.asarray(mask[:, -1]),
    )
    loss, statistics = eqx.filter_jit(pqn_vdn.sequence_loss)(
        agents, carry, sequences, next_timestep
    )

    q = np.zeros((num_worlds, num_steps + 1, num_agents, 3))
    starts = np.concatenate([episode_start, ended[:, -1:]], axis=1)
    observations = np.concatenate(
        [np.asarray(observation), np.asarray(next_observation)[:, None]], axis=1
    )
    for world in range(num_worlds):
        for agent in range(num_agents):
            network, inputs = agent_network(pqn_vdn, agents, agent)
            agent_carry = jax.tree.map(lambda x: x[world, agent], carry)
            for t in range(num_steps + 1):
                if starts[world, t]:
                    agent_carry = network.initial_carry()
                agent_carry, values = step(
                    network,
                    agent_carry,
                    inputs(jnp.asarray(observations[world, t, agent])),
                )
                q[world, t, agent] = np.asarray(values)
    value = numpy_greedy_team_value(q, mask)  # [worlds, steps + 1]
    next_value = np.where(truncated, truncation_value, value[:, 1:])
    expected = numpy_q_lambda(
        scale * np.asarray(reward, np.float64).T,
        next_value.T,
        terminated.T,
        truncated.T,
        gamma,
        lam,
    ).T
    chosen = np.take_along_axis(q[:, :-1], np.asarray(action)[..., None], -1)
    q_total = chosen[..., 0].sum(-1)
    np.testing.assert_allclose(
        float(loss), np.mean((q_total - expected) ** 2), rtol=1e-5
    )
    np.testing.assert_allclose(float(statistics["q_value"]), q_total.mean(), rtol=1e-5)


# ----------------------------------------------------------------- learning


@pytest.mark.learning
def test_team_return_grows_on_treasure_hunt():
    """40k world steps on Treasure Hunt (16 worlds x 32 steps per iteration,
    episodes of 100 turns): the team's return over the last 5 iterations in which
    episodes ended is above its return over the first 3 (mostly exploring)."""
    env = eqxrl.envs.make("TreasureHunt-v0")
    pqn = eqxrl.PQN(
        env=env,
        num_envs=16,
        num_steps=32,
        total_timesteps=40_000,
        num_epochs=2,
        num_minibatches=4,
        hidden_sizes=(64,),
        learning_rate=1e-3,
        exploration_fraction=0.5,
        gamma=0.9,
    )
    _, metrics = PQNVDN(pqn).train(jr.key(0))
    totals = np.asarray(metrics["total_episode_return"])
    totals = totals[~np.isnan(totals)]
    assert len(totals) >= 20
    assert totals[-5:].mean() > totals[:3].mean() + 10, totals


# ------------------------------------------- the Trainer and the command line

# 4 iterations of 8 steps in 2 worlds, 2 epochs of 2 minibatches.
TINY_TEAM = dict(
    num_envs=2,
    num_steps=8,
    total_timesteps=2 * 8 * 4,
    num_epochs=2,
    num_minibatches=2,
    hidden_sizes=(16,),
)


def quiet_trainer(algorithm, out) -> eqxrl.Trainer:
    return eqxrl.Trainer(
        algorithm,
        out=str(out),
        chunk_size=2,
        checkpoint_every=2,
        eval_episodes=2,
        gif_episodes=0,
        env_name="TreasureHunt-v0",
        env_kwargs=WORLD,
        verbose=False,
        progress=False,
        loggers=(),
    )


@pytest.mark.slow
def test_resumes_exactly_through_the_trainer(tmp_path):
    """GRU agents, one network each: a run stopped at iteration 2 and resumed
    from its checkpoint ends bit for bit where an uninterrupted run ends (agents,
    optimizer state, worlds, key, the agents' carries), and the checkpoint
    rebuilds the configuration. (Feed-forward agents with one shared network
    through the Trainer: the command line's test.)"""
    env = eqxrl.envs.make("TreasureHunt-v0", **WORLD)
    algorithm = PQNVDN(
        eqxrl.PQN(env=env, **TINY_TEAM, network_factory=GRU), share_parameters=False
    )
    straight, _ = quiet_trainer(algorithm, tmp_path / "straight").fit(seed=1)
    quiet_trainer(algorithm, tmp_path / "resumed").fit(seed=1, stop_at_iteration=2)
    resumed, metrics = quiet_trainer(algorithm, tmp_path / "resumed").fit(
        seed=1, resume=True
    )
    assert metrics["episode_return"].shape == (2, 2)  # iterations 3-4, per agent
    assert int(resumed.iteration) == 4
    assert jax.tree.leaves(resumed.carry)[0].shape[:2] == (2, 2)  # worlds, agents
    for a, b in zip(arrays(resumed), arrays(straight), strict=True):
        np.testing.assert_array_equal(a, b)
    loaded, rebuilt = eqxrl.load_checkpoint(tmp_path / "resumed")
    assert eqx.tree_equal(rebuilt, algorithm)
    for a, b in zip(arrays(loaded), arrays(straight), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_the_command_line_trains_pqn_vdn(tmp_path, capsys):
    """`eqxrl train TreasureHunt-v0 --algo pqn --mixer vdn` trains PQN-VDN
    (config.json names the class; its checkpoint rebuilds it); `eqxrl eval`
    reports every agent; the policy acts for both."""
    from eqxrl.training import main

    flags = [f"--{k.replace('_', '-')}={v}" for k, v in TINY_TEAM.items()]
    flags = [flag.replace("(16,)", "16") for flag in flags]
    flags += [f"--env-option={k}={v}" for k, v in WORLD.items()]
    out = tmp_path / "cli"
    argv = ["train", "TreasureHunt-v0", "--algo", "pqn", "--mixer", "vdn"]
    argv += [*flags, "--share-parameters", "--gif-episodes=0"]
    argv += ["--out", str(out), "--log", "csv"]
    assert main(argv) == 0
    config = json.loads((out / "config.json").read_text())["algorithm"]
    assert config["algorithm"] == "eqxrl.multiagent.PQNVDN"
    state, rebuilt = eqxrl.load_checkpoint(out)
    assert type(rebuilt) is PQNVDN and rebuilt.share_parameters
    assert int(state.iteration) == 4
    header = (out / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"episode_return_agent0", "episode_return_agent1", "td_loss"} <= set(header)
    capsys.readouterr()
    assert main(["eval", str(out), "--episodes", "2"]) == 0
    assert "per agent: agent 0" in capsys.readouterr().out
    policy = eqxrl.load_policy(out / "policy.eqx")
    _, timestep = eqxrl.envs.make("TreasureHunt-v0", **WORLD).reset(jr.key(0))
    assert policy.act(timestep.observation, jr.key(1)).shape == (2,)


def test_the_command_line_refuses_pqn_with_qmix(tmp_path, capsys):
    from eqxrl.training import main

    argv = ["train", "TreasureHunt-v0", "--algo", "pqn", "--mixer", "qmix"]
    argv += ["--num-envs=2", "--num-steps=8", "--total-timesteps=16"]
    argv += ["--num-minibatches=2", "--out", str(tmp_path / "run")]
    assert main(argv) == 1
    assert "--mixer qmix: PQN's agents train as a team with vdn" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "run").exists()
