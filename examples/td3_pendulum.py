"""TD3 (or DDPG) on Pendulum-v1, several seeds in one compiled program.

    python examples/td3_pendulum.py                      # TD3, 20k steps x 4 seeds
    python examples/td3_pendulum.py --algo ddpg --hidden-sizes 64 64

Prints the learning curve (mean episode return per 1,000 steps), the final training
return per seed and the return of the deterministic policy of each seed.
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
    parser.add_argument("--algo", choices=["td3", "ddpg"], default="td3")
    parser.add_argument("--total-timesteps", type=int, default=20_000)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument(
        "--hidden-sizes",
        type=int,
        nargs="+",
        default=[256, 256],
        help="widths of the actor's and critics' hidden layers (64 64 runs many "
        "times faster on a CPU)",
    )
    args = parser.parse_args()

    env = eqxrl.envs.make("Pendulum-v1")
    # DDPG is TD3 with one critic, no target smoothing and no policy delay.
    algorithm = {"td3": eqxrl.TD3, "ddpg": eqxrl.DDPG}[args.algo](
        env=env,
        total_timesteps=args.total_timesteps,
        hidden_sizes=tuple(args.hidden_sizes),
    )
    start = time.perf_counter()
    keys = jax.random.split(jax.random.key(0), args.seeds)
    states, metrics = eqx.filter_jit(eqx.filter_vmap(algorithm.train))(keys)
    returns = np.asarray(metrics["episode_return"])
    print(
        f"{type(algorithm).__name__}: {args.seeds} seeds x "
        f"{algorithm.total_timesteps:,} steps in {time.perf_counter() - start:.0f} s "
        "(incl. compile)"
    )
    window = max(1, 1_000 // algorithm.steps_per_iteration)
    for end in range(window, algorithm.num_iterations + 1, window):
        steps = end * algorithm.steps_per_iteration
        value = np.nanmean(returns[:, end - window : end])
        print(f"{steps:>9,d} steps: return {value:8.1f}")
    final = np.nanmean(returns[:, -window:], axis=1)
    print("final return per seed (last 1,000 steps): " + _numbers(final))

    deterministic = []
    for seed in range(args.seeds):
        state = jax.tree.map(lambda x: x[seed], states)
        policy = algorithm.policy(state, deterministic=True)
        result = evaluate(policy, env, jax.random.key(1), num_episodes=10)
        deterministic.append(result.summary()["return_mean"])
    print("deterministic return per seed (10 episodes): " + _numbers(deterministic))


def _numbers(values) -> str:
    return "[" + ", ".join(f"{value:.1f}" for value in values) + "]"


if __name__ == "__main__":
    main()
