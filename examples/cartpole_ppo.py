"""Train PPO on CartPole-v1 on the CPU, with a progress bar, checkpoints and a curve.

    python examples/cartpole_ppo.py --out runs/demo/cartpole
    python examples/cartpole_ppo.py --out runs/demo/cartpole --resume  # interrupted

`eqxrl.Trainer` runs the compiled PPO iteration in chunks (one compiled call per chunk,
state donated) and, between chunks, shows progress, logs metrics, writes checkpoints
and evaluates. Under `--out` it writes:

- `metrics.csv`: one row per iteration (returns, losses, entropy, KL, ...);
- `checkpoints/`: the whole training state every tenth of the run (resume is exact);
- `policy.eqx`: the greedy policy alone, for `eqxrl.load_policy`;
- `config.json`, `summary.json` (compile and run time, final evaluation), `curve.png`.

The same run from the command line: `eqxrl train CartPole-v1 --out runs/demo/cartpole`.
"""

import argparse
import math
from pathlib import Path

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
    parser.add_argument(
        "--resume", action="store_true", help="continue from the last checkpoint"
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    ppo = eqxrl.PPO(
        env=eqxrl.envs.make("CartPole-v1"),
        num_envs=args.num_envs,
        num_steps=args.num_steps,
        total_timesteps=args.total_timesteps,
        learning_rate=args.learning_rate,
    )
    trainer = eqxrl.Trainer(ppo, out=str(args.out), chunk_size=args.chunk)
    trainer.fit(seed=args.seed, resume=args.resume)

    # The whole run's metrics, also when this call only finished a resumed run.
    returns = eqxrl.training.read_metrics(args.out)["episode_return"][-10:]
    final = float(np.nanmean(returns)) if not np.isnan(returns).all() else math.nan
    print(f"final return (mean of last 10 iterations): {final:.1f}")

    # The exported policy loads alone (no pickle) and acts greedily, jitted.
    policy = eqxrl.load_policy(args.out / "policy.eqx")
    action = policy.act(jnp.zeros(4, jnp.float32), jax.random.key(0))
    print(f"greedy action at the upright state: {int(action)}")


if __name__ == "__main__":
    main()
