"""PQN on CartPole-v1 at purejaxql's config, several seeds in one compiled program.

    python examples/pqn_cartpole.py                     # 500k steps x 4 seeds
    python examples/pqn_cartpole.py --total-timesteps 100000 --seeds 2

Prints the learning curve (mean episode return), the final training return per seed
and the return of the greedy policy of each seed (16 episodes).
"""

import argparse
import time

import equinox as eqx
import jax
import numpy as np

import eqxrl
from eqxrl.training import evaluate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-timesteps", type=int, default=500_000)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument(
        "--hidden-sizes",
        type=int,
        nargs="+",
        default=[256, 256],
        help="widths of the Q-network's hidden layers (each with LayerNorm)",
    )
    args = parser.parse_args()

    env = eqxrl.envs.make("CartPole-v1")
    pqn = eqxrl.PQN(
        env=env,
        total_timesteps=args.total_timesteps,
        hidden_sizes=tuple(args.hidden_sizes),
    )
    start = time.perf_counter()
    keys = jax.random.split(jax.random.key(0), args.seeds)
    states, metrics = eqx.filter_jit(eqx.filter_vmap(pqn.train))(keys)
    returns = np.asarray(metrics["episode_return"])
    print(
        f"{args.seeds} seeds x {pqn.num_iterations * pqn.steps_per_iteration:,} steps "
        f"in {time.perf_counter() - start:.0f} s (incl. compile)"
    )
    window = max(1, pqn.num_iterations // 10)
    for end in range(window, pqn.num_iterations + 1, window):
        steps = end * pqn.steps_per_iteration
        value = np.nanmean(returns[:, end - window : end])
        print(f"{steps:>9,d} steps: return {value:6.1f}")
    final = np.nanmean(returns[:, -window:], axis=1)
    print(f"final return per seed: {_numbers(final)}")

    greedy = [
        evaluate(
            pqn.policy(jax.tree.map(lambda x, i=i: x[i], states), deterministic=True),
            env,
            jax.random.key(1),
            num_episodes=16,
        ).summary()["return_mean"]
        for i in range(args.seeds)
    ]
    print(f"greedy return per seed (16 episodes): {_numbers(greedy)}")


def _numbers(values) -> str:
    return "[" + ", ".join(f"{value:.1f}" for value in values) + "]"


if __name__ == "__main__":
    main()
