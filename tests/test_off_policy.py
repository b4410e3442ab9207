"""The shared bases of the replay-based and of the rollout-based algorithms: one
declaration of each schedule, each algorithm's own defaults, the quantities
derived from them, and one off-policy iteration (value decomposition's teams
included)."""

import dataclasses

import pytest

import eqxrl
from eqxrl.algorithms import AbstractOffPolicyAlgorithm, AbstractOffPolicyIteration

SCHEDULE = (
    "env",
    "num_envs",
    "total_timesteps",
    "buffer_size",
    "learning_starts",
    "train_frequency",
    "gradient_steps",
    "batch_size",
)


@pytest.mark.parametrize("algorithm", [eqxrl.DQN, eqxrl.IQN, eqxrl.SAC])
def test_the_schedule_comes_first_in_one_order(algorithm):
    assert issubclass(algorithm, AbstractOffPolicyAlgorithm)
    names = [field.name for field in dataclasses.fields(algorithm)]
    assert tuple(names[: len(SCHEDULE)]) == SCHEDULE
    # Keyword construction by position is kept: `DQN(env, 8)` is 8 environments.
    env = eqxrl.envs.make("Pendulum-v1" if algorithm is eqxrl.SAC else "CartPole-v1")
    assert algorithm(env, 8).num_envs == 8


def test_each_algorithm_keeps_its_own_defaults():
    def defaults(algorithm):
        fields = {field.name: field.default for field in dataclasses.fields(algorithm)}
        return {name: fields[name] for name in SCHEDULE[1:]}

    assert defaults(eqxrl.DQN) == dict(
        num_envs=16,
        total_timesteps=500_000,
        buffer_size=20_000,
        learning_starts=10_000,
        train_frequency=1,
        gradient_steps=1,
        batch_size=128,
    )
    assert defaults(eqxrl.SAC) == dict(
        num_envs=1,
        total_timesteps=20_000,
        buffer_size=100_000,
        learning_starts=1_000,
        train_frequency=1,
        gradient_steps=1,
        batch_size=256,
    )


def test_derived_quantities():
    dqn = eqxrl.DQN(
        env=eqxrl.envs.make("CartPole-v1"),
        num_envs=4,
        train_frequency=3,
        total_timesteps=1_000,
        buffer_size=1_002,
        learning_starts=12,
        batch_size=8,
    )
    assert dqn.steps_per_iteration == 12
    assert dqn.num_iterations == 83  # 1000 // 12
    assert dqn.buffer_capacity == 250  # rows of 4 environments
    sac = eqxrl.SAC(
        env=eqxrl.envs.make("Pendulum-v1"),
        num_envs=2,
        buffer_size=1_001,
        learning_starts=100,
        batch_size=32,
    )
    assert (sac.steps_per_iteration, sac.buffer_capacity) == (2, 500)
    assert sac.num_iterations == 10_000


@pytest.mark.parametrize(
    "algorithm",
    [
        eqxrl.DQN,
        eqxrl.IQN,
        eqxrl.SAC,
        eqxrl.TD3,
        eqxrl.DDPG,
        eqxrl.multiagent.VDN,
        eqxrl.multiagent.QMIX,
    ],
)
def test_one_iteration_serves_every_replay_based_learner(algorithm):
    # Each writes how it collects and how it updates, not the iteration around them.
    assert issubclass(algorithm, AbstractOffPolicyIteration)
    assert algorithm.train_iteration is AbstractOffPolicyIteration.train_iteration
    assert algorithm.collect is not AbstractOffPolicyIteration.collect
    assert algorithm.update is not AbstractOffPolicyIteration.update


def test_a_team_iterates_on_its_dqn_s_schedule():
    dqn = eqxrl.DQN(
        env=eqxrl.envs.make("TreasureHunt-v0"),
        num_envs=4,
        train_frequency=4,
        total_timesteps=64,
        buffer_size=64,
        learning_starts=32,
        batch_size=16,
    )
    vdn = eqxrl.multiagent.VDN(dqn)
    assert (vdn.steps_per_iteration, vdn.learning_starts) == (16, 32)


ROLLOUT_SCHEDULE = (
    "env",
    "num_envs",
    "num_steps",
    "total_timesteps",
    "num_epochs",
    "num_minibatches",
)


@pytest.mark.parametrize("algorithm", [eqxrl.PPO, eqxrl.PQN])
def test_the_on_policy_schedule_comes_first_with_each_algorithm_s_defaults(algorithm):
    assert issubclass(algorithm, eqxrl.algorithms.AbstractOnPolicyAlgorithm)
    fields = dataclasses.fields(algorithm)
    assert tuple(f.name for f in fields[: len(ROLLOUT_SCHEDULE)]) == ROLLOUT_SCHEDULE
    defaults = {f.name: f.default for f in fields[1 : len(ROLLOUT_SCHEDULE)]}
    expected = {
        eqxrl.PPO: (4, 128, 500_000, 4, 4),  # PureJaxRL's CartPole config
        eqxrl.PQN: (32, 64, 500_000, 4, 16),  # purejaxql's pqn_cartpole config
    }[algorithm]
    assert tuple(defaults.values()) == expected
    learner = algorithm(eqxrl.envs.make("CartPole-v1"), 8, 16, 4096)
    assert (learner.steps_per_iteration, learner.num_iterations) == (128, 32)
    assert learner.minibatch_size == 128 // learner.num_minibatches
