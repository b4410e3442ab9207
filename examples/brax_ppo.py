"""Train eqxrl's PPO on a Brax environment, through `eqxrl.envs.from_brax`.

    pip install "eqxrl[brax]"
    python examples/brax_ppo.py                             # inverted_pendulum
    python examples/brax_ppo.py --env inverted_double_pendulum --total-timesteps 1000000

A Brax environment has no time limit of its own: `--episode-length` adds eqxrl's
`TimeLimit`, whose truncation PPO bootstraps through. The physics runs inside the
compiled training program, like eqxrl's own environments.
"""

import argparse
import time

try:
    import brax  # noqa: F401
except ImportError:
    raise SystemExit('this example needs brax: pip install "eqxrl[brax]"') from None
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

import eqxrl


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="inverted_pendulum", help="a Brax name")
    parser.add_argument(
        "--backend",
        default="generalized",
        help="Brax physics backend: generalized, positional, spring or mjx",
    )
    parser.add_argument("--episode-length", type=int, default=1000)
    parser.add_argument("--total-timesteps", type=int, default=100_000)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--num-steps", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    brax_env = eqxrl.envs.from_brax(args.env, backend=args.backend)
    env = eqxrl.envs.TimeLimit(brax_env, args.episode_length)
    print(f"Brax {args.env} ({args.backend} backend)")
    print(f"  observation space {env.observation_space}")
    print(f"  action space      {env.action_space}")

    # It is an ordinary eqxrl environment: pure, one environment, no auto-reset.
    state, timestep = env.reset(jr.key(0))
    action = jnp.zeros(env.action_space.shape)
    state, timestep = env.step(state, action, jr.key(1))
    print(
        f"  one step: reward {float(timestep.reward)}, terminated "
        f"{bool(timestep.terminated)}, truncated {bool(timestep.truncated)}"
    )

    ppo = eqxrl.PPO(
        env=env,
        num_envs=args.num_envs,
        num_steps=args.num_steps,
        total_timesteps=args.total_timesteps,
        learning_rate=args.learning_rate,
        num_minibatches=4,
        normalize_observations=True,
    )
    start = time.perf_counter()
    _, metrics = ppo.train(jr.key(args.seed))
    returns = np.asarray(jax.block_until_ready(metrics["episode_return"]))
    seconds = time.perf_counter() - start
    steps = ppo.num_iterations * ppo.num_envs * ppo.num_steps
    print(f"PPO: {steps:,} steps in {seconds:.1f} s including compilation")
    # Mean return of the episodes that ended in windows of iterations (an
    # iteration where no episode ended has NaN: skip those).
    windows = np.array_split(np.arange(len(returns)), min(len(returns), 5))
    means = []
    for window in windows:
        ended = returns[window][~np.isnan(returns[window])]
        means.append(float(ended.mean()) if ended.size else float("nan"))
        mean = f"{means[-1]:8.1f}" if ended.size else "  (none ended)"
        print(f"  iterations {window[0] + 1:3d}-{window[-1] + 1:3d}: return {mean}")
    print(f"return: first {means[0]:.1f}, last {means[-1]:.1f}")


if __name__ == "__main__":
    main()
