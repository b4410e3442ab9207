"""Train eqxrl's PPO on a gymnax environment, through `eqxrl.envs.from_gymnax`.

    pip install "eqxrl[gymnax]"
    python examples/gymnax_env_ppo.py                       # CartPole-v1
    python examples/gymnax_env_ppo.py --env Acrobot-v1 --total-timesteps 200000

Works with gymnax 1.0 (six-value `step`) and gymnax 0.x (five-value `step`, where
`done` merges termination and the time limit): the adapter keeps termination and
truncation apart in both cases, so PPO bootstraps through gymnax's time limit.
"""

import argparse
import time

try:
    import gymnax
except ImportError:
    raise SystemExit('this example needs gymnax: pip install "eqxrl[gymnax]"') from None
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

import eqxrl


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1", help="a gymnax id")
    parser.add_argument("--total-timesteps", type=int, default=100_000)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    args = parser.parse_args()

    gymnax_env, env_params = gymnax.make(args.env)
    env = eqxrl.envs.from_gymnax(gymnax_env, env_params)
    api = "1.0 (six values)" if env.six_value_step else "0.x (five values)"
    print(f"gymnax {args.env}: step API {api}")
    print(f"  observation space {env.observation_space}")
    print(f"  action space      {env.action_space}")

    # It is an ordinary eqxrl environment: pure, one environment, no auto-reset.
    state, timestep = env.reset(jr.key(0))
    state, timestep = env.step(state, jnp.int32(0), jr.key(1))
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
    )
    start = time.perf_counter()
    _, metrics = ppo.train(jr.key(0))
    returns = np.asarray(jax.block_until_ready(metrics["episode_return"]))
    seconds = time.perf_counter() - start
    steps = ppo.num_iterations * ppo.num_envs * ppo.num_steps
    print(f"PPO: {steps:,} steps in {seconds:.1f} s including compilation")
    # Mean return of the episodes that ended in windows of iterations (an
    # iteration where no episode ended has NaN: skip those).
    for window in np.array_split(np.arange(len(returns)), min(len(returns), 5)):
        ended = returns[window][~np.isnan(returns[window])]
        mean = f"{ended.mean():8.1f}" if ended.size else "  (none ended)"
        print(f"  iterations {window[0] + 1:3d}-{window[-1] + 1:3d}: return {mean}")


if __name__ == "__main__":
    main()
