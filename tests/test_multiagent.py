"""Independent learners (`eqxrl.multiagent.Independent`) on multi-agent
environments: independence of the stacked agents, shapes, shared parameters,
policies, refusals, the Trainer and the command line, and a short learning check
on Treasure Hunt."""

import csv
import functools
import json

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from jaxtyping import Array, Int, PRNGKeyArray, PyTree

import eqxrl
from eqxrl.envs import (
    AbstractMultiAgentEnvironment,
    AbstractWrapper,
    TimeLimit,
    TimeStep,
    TreasureHunt,
)
from eqxrl.multiagent import Independent, IndependentPolicy, SharedPolicy

# optax.adam computes `b1 ** count` with an int32 count.
STANDARD_DTYPE_PROMOTION = True

# A small world: 7x7 with two agents, frequent items, 3x3 views of 2 frames.
SMALL = TimeLimit(
    TreasureHunt(
        height=7, width=7, vision_radius=1, num_frames=2, spawn_probability=0.05
    ),
    100,
)
# Tiny learners that update within a few iterations; shared by the tests to share
# compilations.
TINY = dict(
    num_envs=2,
    total_timesteps=2 * 8 * 6,  # 6 iterations of 8 steps in 2 worlds
    train_frequency=8,
    buffer_size=64,
    learning_starts=16,
    batch_size=8,
    n_step=1,
    target_update_interval=2,
    hidden_sizes=(16,),
)


def tiny_iqn(env=SMALL, **options):
    return eqxrl.IQN(
        env=env,
        **{
            **TINY,
            "head_sizes": (16,),
            "num_quantiles": 4,
            "num_target_quantiles": 4,
            "num_acting_quantiles": 4,
            "num_cosines": 8,
            **options,
        },
    )


def arrays(tree):
    def numbers(x):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jr.key_data(x)
        return np.asarray(x)

    return [numbers(x) for x in jax.tree.leaves(eqx.filter(tree, eqx.is_array))]


# --------------------------------------------------------------------------------------
# Independence: agent i of the stacked program learns what it learns alone
# --------------------------------------------------------------------------------------


class RecordState(eqx.Module):
    env_state: PyTree
    actions: Int[Array, "steps num_agents"]
    count: Int[Array, ""]


class RecordActions(AbstractWrapper):
    """Keeps every joint action of an episode in the state."""

    env: AbstractMultiAgentEnvironment
    steps: int = eqx.field(static=True, default=100)

    def inner_state(self, state):
        return state.env_state

    def reset(self, key: PRNGKeyArray):
        env_state, timestep = self.env.reset(key)
        actions = jnp.zeros((self.steps, 2), jnp.int32)
        return RecordState(env_state, actions, jnp.int32(0)), timestep

    def step(self, state, action, key):
        env_state, timestep = self.env.step(state.env_state, action, key)
        actions = state.actions.at[state.count].set(action)
        return RecordState(env_state, actions, state.count + 1), timestep


class ScriptedCoPlayers(AbstractMultiAgentEnvironment):
    """Agent `agent` of a two-agent environment alone (`num_agents = 1`), its
    co-player replaying `script`, one joint action per step."""

    env: AbstractMultiAgentEnvironment
    script: Int[Array, "steps 2"]
    agent: int = eqx.field(static=True)
    num_agents: int = eqx.field(static=True, default=1)

    @property
    def observation_space(self):
        return self.env.observation_space

    @property
    def action_space(self):
        return self.env.action_space

    def _alone(self, timestep: TimeStep) -> TimeStep:
        one = slice(self.agent, self.agent + 1)
        return TimeStep(
            observation=timestep.observation[one],
            reward=timestep.reward[one],
            terminated=timestep.terminated,
            truncated=timestep.truncated,
        )

    def reset(self, key):
        env_state, timestep = self.env.reset(key)
        return (env_state, jnp.int32(0)), self._alone(timestep)

    def step(self, state, action, key):
        env_state, count = state
        joint = self.script[count].at[self.agent].set(action[0])
        env_state, timestep = self.env.step(env_state, joint, key)
        return (env_state, count + 1), self._alone(timestep)


def _records(env_state) -> RecordState:
    (record,) = [
        leaf
        for leaf in jax.tree.leaves(
            env_state, is_leaf=lambda x: isinstance(x, RecordState)
        )
        if isinstance(leaf, RecordState)
    ]
    return record


ONE_WORLD = dict(num_envs=1, total_timesteps=8 * 6, noisy=True, dueling=True)
ITERATIONS = 5  # of 8 steps, four of them with updates
run_iterations = eqx.filter_jit(lambda a, s, n: a.train_iterations(s, n))
init = eqx.filter_jit(lambda a, key: a.init(key))


@pytest.fixture(scope="module")
def stacked():
    """Two noisy dueling IQN agents in one world, recording their joint actions:
    the algorithm, its initial and final states, and the metrics."""
    algorithm = Independent(tiny_iqn(RecordActions(SMALL), **ONE_WORLD))
    start = init(algorithm, jr.key(3))
    end, metrics = run_iterations(algorithm, start, ITERATIONS)
    return algorithm, start, end, metrics


@pytest.mark.slow
def test_agent_learns_in_the_stack_what_it_learns_alone(stacked):
    """Agent 1 trained among two ends with the parameters, optimizer state and
    replay buffer of the same agent trained alone (a one-agent Independent) with
    the same keys, its co-player replaying the actions it took in the stack."""
    agent = 1
    _, start, end, _ = stacked
    record = _records(end.env_state)
    assert int(record.count[0]) == ITERATIONS * TINY["train_frequency"]

    alone = Independent(
        tiny_iqn(ScriptedCoPlayers(SMALL, record.actions[0], agent), **ONE_WORLD)
    )
    # The same start: the world (same reset key) and the run's key are the
    # stack's; the learner is the stack's agent `agent` (its initial network and
    # its own key).
    alone_start = init(alone, jr.key(3))
    mine = jax.tree.map(
        lambda x: x[agent : agent + 1] if eqx.is_array(x) else x, start.learners
    )
    alone_start = eqx.tree_at(lambda s: s.learners, alone_start, mine)
    alone_end, _ = run_iterations(alone, alone_start, ITERATIONS)

    def agent_of(learners, index):
        return jax.tree.map(lambda x: x[index] if eqx.is_array(x) else x, learners)

    in_stack, by_itself = agent_of(end.learners, agent), agent_of(alone_end.learners, 0)
    assert int(in_stack.num_updates) == 4  # gradient_steps = 1 per iteration
    for name in ("network", "target_network", "optimizer_state", "buffer"):
        for a, b in zip(
            arrays(getattr(in_stack, name)), arrays(getattr(by_itself, name))
        ):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=name)
    # It moved as it did in the stack, and the other agent learned something else.
    steps = ITERATIONS * TINY["train_frequency"]
    np.testing.assert_array_equal(
        by_itself.buffer.transitions.action[:steps, 0],
        record.actions[0][:steps, agent],
    )
    other = agent_of(end.learners, 1 - agent)
    assert not np.allclose(arrays(other.network)[0], arrays(in_stack.network)[0])


# Independent PPO: one iteration of 8 steps in one world, 2 epochs of 2 minibatches.
TINY_PPO = dict(
    num_envs=1,
    num_steps=8,
    total_timesteps=8 * 6,
    num_epochs=2,
    num_minibatches=2,
    hidden_sizes=(16,),
)


@pytest.mark.slow
def test_ppo_agent_learns_in_the_stack_what_it_learns_alone():
    """Independent PPO ("IPPO"): agent 1 trained among two ends with the
    actor-critic and optimizer state of the same agent trained alone with the same
    keys, its co-player replaying the stack's actions; per-agent metrics."""
    agent = 1
    stack = Independent(eqxrl.PPO(env=RecordActions(SMALL), **TINY_PPO))
    start = init(stack, jr.key(3))
    end, metrics = run_iterations(stack, start, ITERATIONS)
    record = _records(end.env_state)
    steps = ITERATIONS * TINY_PPO["num_steps"]
    assert int(record.count[0]) == steps

    scripted = ScriptedCoPlayers(SMALL, record.actions[0], agent)
    alone = Independent(eqxrl.PPO(env=scripted, **TINY_PPO))
    mine = jax.tree.map(
        lambda x: x[agent : agent + 1] if eqx.is_array(x) else x, start.learners
    )
    alone_start = eqx.tree_at(lambda s: s.learners, init(alone, jr.key(3)), mine)
    alone_end, alone_metrics = run_iterations(alone, alone_start, ITERATIONS)

    def agent_of(learners, index):
        return jax.tree.map(lambda x: x[index] if eqx.is_array(x) else x, learners)

    in_stack, by_itself = agent_of(end.learners, agent), agent_of(alone_end.learners, 0)
    for name in ("model", "optimizer_state", "timestep"):
        for a, b in zip(
            arrays(getattr(in_stack, name)), arrays(getattr(by_itself, name))
        ):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(
        metrics["policy_loss"][:, agent], alone_metrics["policy_loss"][:, 0], atol=1e-6
    )
    other = agent_of(end.learners, 1 - agent)
    assert not np.allclose(arrays(other.model)[0], arrays(in_stack.model)[0])
    for name in ("episode_return", "total_loss", "entropy", "learning_rate"):
        assert metrics[name].shape == (ITERATIONS, 2), name
    for name in ("total_episode_return", "episode_length", "episode_count"):
        assert metrics[name].shape == (ITERATIONS,), name
    assert np.isfinite(np.asarray(metrics["total_loss"])).all()
    policy = stack.policy(end, agent=0)
    _, timestep = SMALL.reset(jr.key(7))
    assert policy.act(timestep.observation[0], jr.key(8)).shape == ()


def test_shared_ppo_trains_one_network_on_every_agent():
    """IPPO with `share_parameters=True`: one actor-critic over flattened
    observations with the one-hot agent index, its rollout a column per world and
    agent (what its running reward statistics follow too)."""
    ppo = eqxrl.PPO(env=SMALL, **{**TINY_PPO, "num_envs": 2}, normalize_rewards=True)
    shared = Independent(ppo, share_parameters=True)
    end, metrics = eqx.filter_jit(lambda a, k: a.train(k))(shared, jr.key(0))
    observation_size = 2 * 3 * 3 * 3 + 2
    assert end.learners.model.actor[0].weight.shape == (16, observation_size)
    assert end.learners.discounted_returns.shape == (4,)  # 2 worlds x 2 agents
    assert metrics["total_loss"].shape == (3,)  # 3 iterations of 2 worlds x 8
    assert metrics["episode_return"].shape == (3, 2)
    actions = shared.policy(end).act(SMALL.reset(jr.key(1))[1].observation, jr.key(2))
    assert actions.shape == (2,)


def test_learners_are_stacked_with_a_leading_agent_axis(stacked):
    algorithm, start, end, metrics = stacked
    single = tiny_iqn(SMALL, **ONE_WORLD).init_learner  # one agent's shapes
    one_view = jax.tree.map(lambda x: x[0], start.learners.timestep)
    expected = eqx.filter_eval_shape(single, jr.key(0), one_view)
    for stacked_leaf, leaf in zip(
        jax.tree.leaves(end.learners), jax.tree.leaves(expected), strict=True
    ):
        assert stacked_leaf.shape == (2, *leaf.shape)
    capacity = 64  # buffer_size // num_envs rows of one world
    assert end.learners.buffer.transitions.observation.shape == (
        2,
        capacity,
        1,
        2,
        3,
        3,
        3,
    )
    assert end.learners.network.hidden[0].sigma_weight.shape == (2, 16, 16)
    assert end.iteration.shape == () and int(end.iteration) == ITERATIONS
    np.testing.assert_array_equal(end.learners.iteration, [ITERATIONS] * 2)
    # The agents' networks start different (each from its own key).
    first = start.learners.network.torso[0].weight
    assert not np.allclose(first[0], first[1])


def test_metrics_are_per_agent(stacked):
    _, _, _, metrics = stacked
    for name in ("episode_return", "loss", "q_value", "epsilon", "learning_rate"):
        assert metrics[name].shape == (ITERATIONS, 2), name
    for name in ("total_episode_return", "episode_length", "episode_count"):
        assert metrics[name].shape == (ITERATIONS,), name
    loss = np.asarray(metrics["loss"])
    assert np.isnan(loss[0]).all() and np.isfinite(loss[1:]).all()
    assert (np.asarray(metrics["episode_count"]) == 0).all()  # episodes of 100 steps


def test_policies_act_per_agent(stacked):
    """The joint policy acts for every agent with keys split per agent; `agent=i`
    is agent i's policy alone."""
    algorithm, _, end, _ = stacked
    _, timestep = SMALL.reset(jr.key(7))
    key = jr.key(8)
    joint = algorithm.policy(end, deterministic=True)
    assert isinstance(joint, IndependentPolicy)
    actions = joint.act(timestep.observation, key)
    assert actions.shape == (2,) and actions.dtype == jnp.int32
    keys = jr.split(key, 2)
    for agent in range(2):
        own = algorithm.policy(end, deterministic=True, agent=agent)
        assert int(own.act(timestep.observation[agent], keys[agent])) == int(
            actions[agent]
        )
    with pytest.raises(ValueError, match="agent"):
        algorithm.policy(end, agent=2)


@pytest.mark.slow
def test_shared_parameters_train_one_network():
    """`share_parameters=True`: one network (no agent axis) over flattened
    observations with the one-hot agent index, one replay buffer with a column per
    world and agent; per-agent episode returns, scalar learner metrics."""
    dqn = eqxrl.DQN(env=SMALL, **TINY)
    shared = Independent(dqn, share_parameters=True)
    end, metrics = eqx.filter_jit(lambda a, k: a.train(k))(shared, jr.key(0))
    observation_size = 2 * 3 * 3 * 3 + 2  # flattened view, then the agent one-hot
    assert end.learners.network.layers[0].weight.shape == (16, observation_size)
    assert end.learners.buffer.transitions.action.shape == (32, 4)  # 2 worlds x 2
    assert end.learners.num_updates.shape == ()
    assert metrics["loss"].shape == (6,) and metrics["episode_return"].shape == (6, 2)
    assert np.isfinite(np.asarray(metrics["loss"])[-1])
    policy = shared.policy(end, deterministic=True)
    assert isinstance(policy, SharedPolicy)
    _, timestep = SMALL.reset(jr.key(1))
    actions = policy.act(timestep.observation, jr.key(2))
    assert actions.shape == (2,)
    for agent in range(2):  # greedy DQN: the key does not matter
        own = shared.policy(end, deterministic=True, agent=agent)
        assert int(own.act(timestep.observation[agent], jr.key(3))) == int(
            actions[agent]
        )


@pytest.mark.slow
@pytest.mark.parametrize("share_parameters", [False, True])
def test_recurrent_policies_carry_one_state_per_agent(share_parameters):
    """Independent recurrent PPO's joint policy: one carry per agent on the agent
    axis, each agent stepping as its own policy (`agent=i`) does; evaluation
    threads the carries through an episode as a hand-written loop does."""
    env = eqxrl.envs.make("TreasureHunt-v0", **WORLD)
    ppo = eqxrl.PPO(
        env=env,
        network_factory=functools.partial(
            eqxrl.nn.GRUActorCritic.from_env,
            hidden_size=8,
            encoder_sizes=(16,),
            head_sizes=(16,),
        ),
        num_envs=2,
        num_steps=8,
        total_timesteps=16,
        num_minibatches=2,  # of the 2 worlds' sequences (whole sequences)
    )
    learners = Independent(ppo, share_parameters=share_parameters)
    state = eqx.filter_jit(learners.init)(jr.key(0))
    joint = learners.policy(state, deterministic=True)
    assert joint.is_recurrent
    carry = joint.initial_carry()
    assert carry.hidden.shape == (2, 8)  # [num_agents, hidden_size]
    with pytest.raises(TypeError, match=r"recurrent.*policy\.step"):
        joint.act(env.reset(jr.key(1))[1].observation, jr.key(2))

    # Two steps, so that the second reads the carry of the first: agent by agent
    # as the agents' own policies, each with its key of the joint key's split.
    step = eqx.filter_jit(lambda policy, *args: policy.step(*args))
    env_step = eqx.filter_jit(env.step)
    own = [learners.policy(state, deterministic=True, agent=i) for i in range(2)]
    own_carry = [policy.initial_carry() for policy in own]
    env_state, timestep = env.reset(jr.key(1))
    for key in jr.split(jr.key(2), 2):
        carry, actions = step(joint, carry, timestep.observation, key, None)
        for agent, agent_key in enumerate(jr.split(key, 2)):
            own_carry[agent], action = step(
                own[agent], own_carry[agent], timestep.observation[agent], agent_key
            )
            assert int(action) == int(actions[agent])
            np.testing.assert_allclose(
                carry.hidden[agent], own_carry[agent].hidden, rtol=1e-6, atol=1e-6
            )
        env_state, timestep = env_step(env_state, actions, key)

    result = eqxrl.training.evaluate(
        joint, env, jr.key(3), num_episodes=2, max_steps=12
    )
    assert result.agent_returns.shape == (2, 2)
    for episode, episode_key in enumerate(jr.split(jr.key(3), 2)):
        reset_key, key = jr.split(episode_key)
        env_state, timestep = env.reset(reset_key)
        carry, total = joint.initial_carry(), np.zeros(2, np.float32)
        for _ in range(12):  # Treasure Hunt's episodes last 100 steps
            key, action_key, step_key = jr.split(key, 3)
            carry, actions = step(joint, carry, timestep.observation, action_key, None)
            env_state, timestep = env_step(env_state, actions, step_key)
            total += np.asarray(timestep.reward)
        np.testing.assert_array_equal(result.agent_returns[episode], total)


def test_refusals_explain_the_fix():
    treasure = eqxrl.envs.make("TreasureHunt-v0")
    iqn = eqxrl.IQN(env=treasure)  # configured for Independent: no error yet
    with pytest.raises(ValueError, match=r"multi-agent .*Independent\(iqn\)"):
        iqn.init(jr.key(0))
    with pytest.raises(ValueError, match="multi-agent"):
        eqxrl.DQN(env=treasure).train(jr.key(0))
    cartpole = eqxrl.IQN(env=eqxrl.envs.make("CartPole-v1"))
    with pytest.raises(ValueError, match="CartPole.*single agent"):
        Independent(cartpole)
    ppo = eqxrl.PPO(env=treasure)  # independent PPO: no error
    with pytest.raises(ValueError, match=r"multi-agent .*Independent\(ppo\)"):
        ppo.init(jr.key(0))
    sac = eqxrl.SAC(env=eqxrl.envs.make("Pendulum-v1"))
    with pytest.raises(ValueError, match="SAC is not supported yet"):
        Independent(sac)
    with pytest.raises((TypeError, ValueError), match="algorithm"):
        Independent(treasure)  # the type check, or without it __check_init__


# --------------------------------------------------------------------------------------
# The Trainer, checkpoints and the command line
# --------------------------------------------------------------------------------------

WORLD = dict(  # make("TreasureHunt-v0", **WORLD): SMALL's world, registered
    height=7, width=7, vision_radius=1, num_frames=2, spawn_probability=0.05
)
CLI_FLAGS = [
    "--num-envs=2",
    "--total-timesteps=96",
    "--train-frequency=8",
    "--buffer-size=64",
    "--learning-starts=16",
    "--batch-size=8",
    "--n-step=1",
    "--target-update-interval=2",
    "--hidden-sizes=16",
    "--head-sizes=16",
    "--num-quantiles=4",
    "--num-target-quantiles=4",
    "--num-acting-quantiles=4",
    "--num-cosines=8",
    "--chunk-size=2",
    "--checkpoint-every=2",
    "--eval-episodes=2",
    "--gif-episodes=0",
    "--seed=1",
    "--log=csv",
] + [f"--env-option={key}={value}" for key, value in WORLD.items()]


def quiet_trainer(algorithm, out) -> eqxrl.Trainer:
    """A Trainer on `WORLD`'s Treasure Hunt that checkpoints every 2 iterations and
    writes no logs."""
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
def test_command_line_and_trainer_resume_exactly(tmp_path, capsys):
    """`eqxrl train TreasureHunt-v0 --algo iqn` trains independent IQN (per-agent
    columns in metrics.csv, a checkpoint that rebuilds its Independent config,
    `eqxrl eval` per agent); the Trainer stopped at iteration 3 and resumed ends
    with the command line's final state, bit for bit."""
    from eqxrl.training import main

    cli_out = tmp_path / "cli"
    assert (
        main(
            [
                "train",
                "TreasureHunt-v0",
                "--algo",
                "iqn",
                *CLI_FLAGS,
                "--out",
                str(cli_out),
            ]
        )
        == 0
    )
    with open(cli_out / "metrics.csv") as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == 6
    for column in (
        "episode_return_agent0",
        "episode_return_agent1",
        "loss_agent1",
        "epsilon_agent0",
        "total_episode_return",
    ):
        assert column in rows[0], column
    config = json.loads((cli_out / "config.json").read_text())["algorithm"]
    assert config["algorithm"] == "eqxrl.multiagent.Independent"
    assert config["fields"]["algorithm"]["algorithm_config"]["algorithm"] == "iqn"
    reference, rebuilt = eqxrl.load_checkpoint(cli_out)
    assert isinstance(rebuilt, Independent) and rebuilt.num_agents == 2

    env = eqxrl.envs.make("TreasureHunt-v0", **WORLD)
    algorithm = Independent(
        tiny_iqn(env, num_envs=2, total_timesteps=96, target_update_interval=2)
    )
    assert eqx.tree_equal(algorithm, rebuilt)

    def trainer():
        return quiet_trainer(algorithm, tmp_path / "resumed")

    trainer().fit(seed=1, stop_at_iteration=3)
    resumed, metrics = trainer().fit(seed=1, resume=True)
    assert metrics["episode_return"].shape == (3, 2)
    for a, b in zip(arrays(resumed), arrays(reference), strict=True):
        np.testing.assert_array_equal(a, b)

    capsys.readouterr()
    assert main(["eval", str(cli_out), "--episodes", "2"]) == 0
    assert "per agent: agent 0" in capsys.readouterr().out
    policy = eqxrl.load_policy(cli_out / "policy.eqx")
    _, timestep = env.reset(jr.key(0))
    assert policy.act(timestep.observation, jr.key(1)).shape == (2,)


@pytest.mark.slow
def test_independent_ppo_resumes_exactly_through_the_trainer(tmp_path):
    """Independent PPO through the Trainer: a run stopped at iteration 2 and resumed
    from its checkpoint ends bit for bit where an uninterrupted run ends, and the
    checkpoint rebuilds the Independent(PPO) configuration."""
    env = eqxrl.envs.make("TreasureHunt-v0", **WORLD)
    algorithm = Independent(
        eqxrl.PPO(env=env, **{**TINY_PPO, "num_envs": 2, "total_timesteps": 64})
    )

    def trainer(name):
        return quiet_trainer(algorithm, tmp_path / name)

    straight, _ = trainer("straight").fit(seed=1)
    trainer("resumed").fit(seed=1, stop_at_iteration=2)
    resumed, metrics = trainer("resumed").fit(seed=1, resume=True)
    assert metrics["total_loss"].shape == (2, 2)  # iterations 3-4, per agent
    for a, b in zip(arrays(resumed), arrays(straight), strict=True):
        np.testing.assert_array_equal(a, b)
    _, rebuilt = eqxrl.load_checkpoint(tmp_path / "resumed")
    assert eqx.tree_equal(rebuilt, algorithm)


# --------------------------------------------------------------------------------------
# Learning
# --------------------------------------------------------------------------------------


class RandomPolicy(eqxrl.nn.AbstractPolicy):
    """Every agent moves uniformly at random."""

    num_agents: int = eqx.field(static=True)

    def __call__(self, observation, key, action_mask=None):
        return jr.randint(key, (self.num_agents,), 0, 4, jnp.int32)


@pytest.mark.learning
@pytest.mark.run_bound
def test_independent_iqn_beats_random_on_treasure_hunt():
    """Two independent IQN agents on Sorrel's Treasure Hunt (21x21, 100 turns)
    collect more than two random walkers within 160k world steps: the agents'
    total return per episode over the last 20 iterations above the random policy's
    by 5, on at least 2 of 3 seeds (vmapped, one program). Measured on an AMD EPYC:
    38.9, 41.0, 36.0 against the random walkers' 23.5."""
    env = eqxrl.envs.make("TreasureHunt-v0")
    iqn = eqxrl.IQN(
        env=env,
        num_envs=16,
        total_timesteps=160_000,
        train_frequency=4,
        buffer_size=16_000,
        learning_starts=2_000,
        batch_size=64,
        n_step=3,
        target_update_interval=100,
        hidden_sizes=(64,),
        head_sizes=(64,),
        num_cosines=16,
        learning_rate=1e-3,
        exploration_fraction=0.5,
        kappa=1.0,
    )
    learners = Independent(iqn)
    keys = jr.split(jr.key(0), 3)
    _, metrics = eqx.filter_jit(eqx.filter_vmap(learners.train))(keys)
    totals = np.asarray(metrics["total_episode_return"])[:, -20:]
    learned = np.nanmean(totals, axis=1)
    random = eqxrl.training.evaluate(
        RandomPolicy(2), env, jr.key(1), num_episodes=256
    ).summary()["return_mean"]
    assert 5 < random < 30  # two random walkers do pick items up
    assert np.sum(learned > random + 5) >= 2, (learned, random)


def test_agent_major_gives_each_agent_its_own_per_agent_extras():
    """Each agent's view keeps its own column of a per-agent extra (from_jaxmarl's
    `agent_dones`), and a world extra repeated for every agent."""
    from eqxrl.multiagent._agents import agent_major

    num_envs, num_agents = 3, 2
    dones = jnp.array([[True, False], [False, False], [False, True]])

    def one_world(agent_dones, world):
        return eqxrl.envs.TimeStep(
            observation=jnp.zeros((num_agents, 4), jnp.float32),
            reward=jnp.zeros(num_agents, jnp.float32),
            terminated=jnp.bool_(False),
            truncated=jnp.bool_(False),
            extras={"agent_dones": agent_dones, "world": world},
        )

    timestep = jax.vmap(one_world)(dones, jnp.arange(num_envs))
    per_agent = agent_major(timestep, num_agents)
    np.testing.assert_array_equal(per_agent.extras["agent_dones"], dones.T)
    np.testing.assert_array_equal(
        per_agent.extras["world"], np.tile(np.arange(num_envs), (num_agents, 1))
    )
