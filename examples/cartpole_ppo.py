"""Train PPO on CartPole-v1 on the CPU, with a progress line.

    python examples/cartpole_ppo.py --out runs/demo

Runs the same compiled PPO iteration in chunks (one compiled call per chunk, state
donated), prints progress between chunks, and writes under `--out`:

- `metrics.csv`: one row per iteration (returns, losses, entropy, KL, ...);
- `policy.eqx`: the trained actor-critic (`eqx.tree_serialise_leaves`);
- `config.json`: the hyperparameters, enough to rebuild the network and load it.
"""

import argparse
import csv
import json
import math
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import eqxrl


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/cartpole_ppo"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--total-timesteps", type=int, default=500_000)
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=2.5e-4)
    parser.add_argument(
        "--chunk", type=int, default=64, help="iterations per compiled call"
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    ppo = eqxrl.PPO(
        env=eqxrl.envs.make("CartPole-v1"),
        num_envs=args.num_envs,
        num_steps=args.num_steps,
        total_timesteps=args.total_timesteps,
        learning_rate=args.learning_rate,
    )
    steps_per_iteration = ppo.num_envs * ppo.num_steps
    print(
        f"PPO on CartPole-v1 | device {jax.devices()[0].device_kind} | "
        f"{ppo.num_iterations} iterations x {steps_per_iteration} steps"
    )

    @eqx.filter_jit(donate="all-except-first")
    def run_chunk(ppo, state, num_iterations):
        return ppo.train_iterations(state, num_iterations)

    state = eqx.filter_jit(ppo.init)(jax.random.key(args.seed))
    history: list[dict[str, np.ndarray]] = []
    done_iterations = 0
    start = time.perf_counter()
    while done_iterations < ppo.num_iterations:
        chunk = min(args.chunk, ppo.num_iterations - done_iterations)
        state, metrics = run_chunk(ppo, state, chunk)
        history.append(jax.device_get(metrics))
        done_iterations += chunk
        elapsed = time.perf_counter() - start
        returns = np.concatenate([m["episode_return"] for m in history])[-10:]
        recent = np.nanmean(returns) if not np.isnan(returns).all() else math.nan
        steps = done_iterations * steps_per_iteration
        print(
            f"\r{steps:>9,d}/{ppo.total_timesteps:,d} steps "
            f"| {steps / elapsed:>8,.0f} steps/s (incl. compile) "
            f"| return {recent:6.1f}",
            end="",
            flush=True,
        )
    print()

    metrics = {k: np.concatenate([m[k] for m in history]) for k in history[0]}
    with open(args.out / "metrics.csv", "w", newline="") as file:
        writer = csv.writer(file)
        names = sorted(metrics)
        writer.writerow(["iteration", "env_steps", *names])
        for i in range(ppo.num_iterations):
            row = [metrics[name][i].item() for name in names]
            writer.writerow([i + 1, (i + 1) * steps_per_iteration, *row])
    eqx.tree_serialise_leaves(args.out / "policy.eqx", state.model)
    config = {
        "env": "CartPole-v1",
        "algorithm": "PPO",
        "seed": args.seed,
        "num_envs": ppo.num_envs,
        "num_steps": ppo.num_steps,
        "total_timesteps": ppo.total_timesteps,
        "learning_rate": float(ppo.learning_rate),
        "hidden_sizes": list(ppo.hidden_sizes),
        "eqxrl_version": eqxrl.__version__,
    }
    (args.out / "config.json").write_text(json.dumps(config, indent=2) + "\n")

    final = float(np.nanmean(metrics["episode_return"][-10:]))
    print(f"final return (mean of last 10 iterations): {final:.1f}")
    print(f"wrote {args.out}/metrics.csv, policy.eqx, config.json")

    # Show that the saved policy loads back and acts greedily.
    skeleton = ppo.make_network(jax.random.key(0))
    policy = eqx.tree_deserialise_leaves(args.out / "policy.eqx", skeleton)
    distribution, _ = policy(jnp.zeros(4, jnp.float32))
    print(f"greedy action at the upright state: {int(distribution.mode())}")


if __name__ == "__main__":
    main()
