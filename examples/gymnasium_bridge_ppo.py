"""Train eqxrl's PPO on a gymnasium (NumPy) environment through the host bridge, then
run the trained policy in a plain gymnasium loop.

    pip install "eqxrl[gymnasium]"
    python examples/gymnasium_bridge_ppo.py
    python examples/gymnasium_bridge_ppo.py --env CartPole-v1 --total-timesteps 50000

`eqxrl.envs.from_gymnasium` runs the environment on the host through
`jax.pure_callback`: the same compiled PPO program trains on it, but every step is a
round trip to Python, so it is one to two orders of magnitude slower than a JAX
environment (see benchmarks/gymnasium_bridge.py). It is the migration path: train on
the environment you have, then port it to JAX and keep the rest of the code.
"""

import argparse
import time

try:
    import gymnasium
except ImportError:
    raise SystemExit(
        'this example needs gymnasium: pip install "eqxrl[gymnasium]"'
    ) from None
import jax
import jax.random as jr
import numpy as np

import eqxrl


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1", help="a gymnasium id")
    parser.add_argument("--total-timesteps", type=int, default=8 * 128 * 24)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--eval-episodes", type=int, default=5)
    args = parser.parse_args()

    env = eqxrl.envs.from_gymnasium(args.env)
    print(
        f"gymnasium {args.env} on the host: {env.observation_space}, {env.action_space}"
    )
    ppo = eqxrl.PPO(
        env=env,
        num_envs=args.num_envs,  # num_envs gymnasium instances on the host
        num_steps=args.num_steps,
        total_timesteps=args.total_timesteps,
        learning_rate=1e-3,
    )
    start = time.perf_counter()
    state, metrics = ppo.train(jr.key(0))
    returns = np.asarray(jax.block_until_ready(metrics["episode_return"]))
    seconds = time.perf_counter() - start
    steps = ppo.num_iterations * ppo.num_envs * ppo.num_steps
    print(
        f"PPO: {steps:,} steps in {seconds:.1f} s "
        f"({steps / seconds:,.0f} steps/s including compilation)"
    )
    print(
        f"  mean episode return: first 3 iterations {np.nanmean(returns[:3]):.1f}, "
        f"last 3 {np.nanmean(returns[-3:]):.1f}"
    )
    env.close()

    # The trained policy is a jitted function of one observation: use it in any
    # Python loop, like Stable-Baselines3's `model.predict`.
    policy = ppo.policy(state, deterministic=True)
    evaluation = gymnasium.make(args.env)
    for episode in range(args.eval_episodes):
        observation, _ = evaluation.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            action = policy.act(np.asarray(observation, np.float32), jr.key(0))
            observation, reward, terminated, truncated, _ = evaluation.step(int(action))
            total += float(reward)
            done = terminated or truncated
        print(f"  greedy episode {episode}: return {total:.0f}")


if __name__ == "__main__":
    main()
