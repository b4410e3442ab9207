"""Continuous-action PPO on Pendulum-v1 with observation and reward normalization.

    python examples/pendulum_ppo.py --total-timesteps 400000 --seeds 2

Prints the learning curve (mean episode return every few iterations).
"""

import argparse
import time

import equinox as eqx
import jax
import numpy as np

import eqxrl


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-timesteps", type=int, default=400_000)
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()

    ppo = eqxrl.PPO(
        env=eqxrl.envs.make("Pendulum-v1"),
        num_envs=16,
        num_steps=256,
        num_epochs=10,
        num_minibatches=32,
        learning_rate=1e-3,
        gamma=0.95,
        gae_lambda=0.95,
        ent_coef=0.0,
        total_timesteps=args.total_timesteps,
        normalize_observations=True,
        normalize_rewards=True,
    )
    start = time.perf_counter()
    keys = jax.random.split(jax.random.key(0), args.seeds)
    _, metrics = eqx.filter_vmap(ppo.train)(keys)
    returns = np.asarray(metrics["episode_return"])
    print(
        f"{args.seeds} seeds x {ppo.total_timesteps:,} steps in "
        f"{time.perf_counter() - start:.0f} s (incl. compile)"
    )
    steps_per_iteration = ppo.num_envs * ppo.num_steps
    for i in range(0, ppo.num_iterations, max(1, ppo.num_iterations // 10)):
        print(
            f"{(i + 1) * steps_per_iteration:>9,d} steps: return "
            f"{np.nanmean(returns[:, i]):8.1f}"
        )
    final = np.nanmean(returns[:, -5:], axis=1)
    print(f"final return per seed (last 5 iterations): {np.round(final, 1)}")


if __name__ == "__main__":
    main()
