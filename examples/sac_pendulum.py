"""Soft actor-critic on Pendulum-v1, several seeds in one compiled program.

    python examples/sac_pendulum.py --total-timesteps 20000 --seeds 4

Prints the learning curve (mean episode return), the final training return per seed
and the return of the greedy policy of each seed.
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
    parser.add_argument("--total-timesteps", type=int, default=20_000)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument(
        "--hidden-sizes",
        type=int,
        nargs="+",
        default=[256, 256],
        help="widths of the actor's and critics' hidden layers (64 64 runs many "
        "times faster on a CPU and learns Pendulum as well)",
    )
    args = parser.parse_args()

    env = eqxrl.envs.make("Pendulum-v1")
    sac = eqxrl.SAC(
        env=env,
        total_timesteps=args.total_timesteps,
        hidden_sizes=tuple(args.hidden_sizes),
    )
    start = time.perf_counter()
    keys = jax.random.split(jax.random.key(0), args.seeds)
    states, metrics = eqx.filter_vmap(sac.train)(keys)
    returns = np.asarray(metrics["episode_return"])
    print(
        f"{args.seeds} seeds x {sac.total_timesteps:,} steps in "
        f"{time.perf_counter() - start:.0f} s (incl. compile)"
    )
    # Episodes last 200 steps: report means over windows of 1,000 steps.
    window = max(1, 1_000 // sac.steps_per_iteration)
    for end in range(window, sac.num_iterations + 1, window):
        steps = end * sac.steps_per_iteration
        value = np.nanmean(returns[:, end - window : end])
        print(f"{steps:>9,d} steps: return {value:8.1f}")
    final = np.nanmean(returns[:, -window:], axis=1)
    print(f"final return per seed (last 1,000 steps): {_numbers(final)}")

    greedy = [
        evaluate(
            sac.policy(jax.tree.map(lambda x, i=i: x[i], states), deterministic=True),
            env,
            jax.random.key(1),
            num_episodes=10,
        ).summary()["return_mean"]
        for i in range(args.seeds)
    ]
    print(f"greedy return per seed (10 episodes): {_numbers(greedy)}")


def _numbers(values) -> str:
    return "[" + ", ".join(f"{value:.1f}" for value in values) + "]"


if __name__ == "__main__":
    main()
