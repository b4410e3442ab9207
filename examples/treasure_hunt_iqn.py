"""Two independent IQN agents learn Treasure Hunt (Sorrel's multi-agent gridworld),
several seeds in one compiled program.

    python examples/treasure_hunt_iqn.py                  # a few CPU minutes
    python examples/treasure_hunt_iqn.py --sorrel          # Sorrel's own agents

Each agent has its own network, replay buffer and exploration, trained side by side
(`eqxrl.multiagent.Independent`). Prints the learning curve (the agents' total
reward per episode), each agent's final return per seed, and what two random
walkers collect. `--sorrel` trains Sorrel 1.6.0's agents instead
(`eqxrl.multiagent.Independent.from_sorrel`: 1000 epochs of 100 turns in one world, one
gradient step per agent per epoch).
"""

import argparse
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import eqxrl
from eqxrl.multiagent import Independent
from eqxrl.training import evaluate


class RandomWalkers(eqxrl.nn.AbstractPolicy):
    """Every agent moves uniformly at random: the baseline."""

    num_agents: int = eqx.field(static=True)

    def __call__(self, observation, key, action_mask=None):
        return jax.random.randint(key, (self.num_agents,), 0, 4, jnp.int32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-timesteps", type=int, default=400_000)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument(
        "--share-parameters",
        action="store_true",
        help="one network for both agents, the agent index as an input",
    )
    parser.add_argument(
        "--sorrel",
        action="store_true",
        help="Sorrel's agents and schedule (1000 epochs; --total-timesteps unused)",
    )
    args = parser.parse_args()

    env = eqxrl.envs.make("TreasureHunt-v0")
    if args.sorrel:
        learners = Independent.from_sorrel(env, share_parameters=args.share_parameters)
    else:
        iqn = eqxrl.IQN(
            env=env,
            num_envs=16,
            total_timesteps=args.total_timesteps,
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
        learners = Independent(iqn, share_parameters=args.share_parameters)

    start = time.perf_counter()
    keys = jax.random.split(jax.random.key(0), args.seeds)
    _, metrics = eqx.filter_jit(eqx.filter_vmap(learners.train))(keys)
    totals = np.asarray(metrics["total_episode_return"])  # [seeds, iterations]
    per_agent = np.asarray(metrics["episode_return"])  # [seeds, iterations, agents]
    steps = learners.num_iterations * learners.steps_per_iteration
    print(
        f"{args.seeds} seeds x {steps:,} world steps x {learners.num_agents} agents "
        f"in {time.perf_counter() - start:.0f} s (incl. compile)"
    )
    # One point per tenth of the run: the mean total reward per episode.
    window = max(1, learners.num_iterations // 10)
    for end in range(window, learners.num_iterations + 1, window):
        value = np.nanmean(totals[:, end - window : end])
        step = end * learners.steps_per_iteration
        print(f"{step:>9,d} world steps: total reward per episode {value:7.1f}")
    final = np.nanmean(per_agent[:, -window:], axis=1)  # [seeds, agents]
    for seed, returns in enumerate(final):
        agents = ", ".join(f"agent {i} {r:.1f}" for i, r in enumerate(returns))
        print(f"seed {seed}: final return per episode: {agents}")
    random = evaluate(
        RandomWalkers(learners.num_agents), env, jax.random.key(1), num_episodes=256
    )
    print(
        f"two random walkers: total reward per episode "
        f"{random.summary()['return_mean']:.1f}"
    )


if __name__ == "__main__":
    main()
