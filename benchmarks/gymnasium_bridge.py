"""The gymnasium host bridge against pure-JAX CartPole: what the bridge costs.

Two measurements, each alternating bridge and pure JAX in one process (A B A B ...,
`--pairs` pairs after one untimed warm-up of each), printing the median and best of
each side and the median and best ratio (pure JAX / bridge, per pair):

- `env`: environment steps per second of a random-action rollout, `num_envs`
  auto-resetting environments x `num_steps` steps in one `lax.scan` (vmapped over
  environments; observations are consumed, as a policy would), for
  `eqxrl.envs.from_gymnasium("CartPole-v1")` and `eqxrl.envs.make("CartPole-v1")`.
- `ppo`: environment steps per second of `eqxrl.PPO` training with the same config
  on both (4 envs x 128 steps, 4 epochs x 4 minibatches, the PPO defaults), over
  `--iterations` iterations.

Compile time (ahead-of-time `.lower(...).compile()`) is printed separately. As a
reference it also prints the steps/s of a plain Python loop over gymnasium's
CartPole-v1 (no JAX at all), the ceiling of any host bridge.

    python benchmarks/gymnasium_bridge.py
    python benchmarks/gymnasium_bridge.py --pairs 7 --iterations 20 --num-envs 4
"""

import argparse
import statistics
import time

import equinox as eqx
import gymnasium
import jax
import jax.numpy as jnp
import jax.random as jr

import eqxrl


def rollout_runner(env: eqxrl.envs.AbstractEnvironment, num_envs: int, steps: int):
    """A compiled random-action rollout: `(run(seed) -> seconds, compile_s)`."""
    env = eqxrl.envs.AutoReset(env)

    def rollout(key):
        reset_key, key = jr.split(key)
        state, timestep = jax.vmap(env.reset)(jr.split(reset_key, num_envs))

        def body(carry, key):
            state, _ = carry
            action_key, step_key = jr.split(key)
            actions = jr.randint(action_key, (num_envs,), 0, 2)
            state, timestep = jax.vmap(env.step)(
                state, actions, jr.split(step_key, num_envs)
            )
            # Use the observation, as a policy would: otherwise XLA drops the
            # (unused) reset observations and with them the bridge's reset calls.
            return (state, timestep), timestep.observation.sum() + timestep.reward.sum()

        _, rewards = jax.lax.scan(body, (state, timestep), jr.split(key, steps))
        return rewards.sum()

    start = time.perf_counter()
    compiled = jax.jit(rollout).lower(jr.key(0)).compile()
    compile_seconds = time.perf_counter() - start

    def run(seed: int) -> float:
        start = time.perf_counter()
        jax.block_until_ready(compiled(jr.key(seed)))
        return time.perf_counter() - start

    return run, compile_seconds


def ppo_runner(env: eqxrl.envs.AbstractEnvironment, num_envs: int, iterations: int):
    """A compiled PPO run of `iterations` iterations: `(run(seed), compile_s)`."""
    ppo = eqxrl.PPO(
        env=env,
        num_envs=num_envs,
        num_steps=128,
        total_timesteps=num_envs * 128 * iterations,
    )

    @eqx.filter_jit
    def train(ppo, key):
        return ppo.train(key)[1]["total_loss"]

    start = time.perf_counter()
    compiled = train.lower(ppo, jr.key(0)).compile()
    compile_seconds = time.perf_counter() - start

    def run(seed: int) -> float:
        start = time.perf_counter()
        jax.block_until_ready(compiled(ppo, jr.key(seed)))
        return time.perf_counter() - start

    return run, compile_seconds


def alternate(name: str, bridge, pure, env_steps: int, pairs: int) -> None:
    """Time bridge and pure JAX alternately and print steps/s and ratios."""
    (run_bridge, compile_bridge), (run_pure, compile_pure) = bridge, pure
    run_bridge(0), run_pure(0)  # warm-up
    bridge_rates, pure_rates = [], []
    for seed in range(1, pairs + 1):
        bridge_rates.append(env_steps / run_bridge(seed))
        pure_rates.append(env_steps / run_pure(seed))
    ratios = [p / b for p, b in zip(pure_rates, bridge_rates, strict=True)]
    print(f"[{name}] {env_steps:,} env steps per run, {pairs} pairs (A B A B ...)")
    print(
        f"  bridge   (from_gymnasium): median {statistics.median(bridge_rates):>12,.0f}"
        f" steps/s, best {max(bridge_rates):>12,.0f}, compile {compile_bridge:5.2f} s"
    )
    print(
        f"  pure JAX (make)          : median {statistics.median(pure_rates):>12,.0f}"
        f" steps/s, best {max(pure_rates):>12,.0f}, compile {compile_pure:5.2f} s"
    )
    print(
        f"  pure JAX / bridge: median {statistics.median(ratios):.1f}x, "
        f"best {max(ratios):.1f}x, worst {min(ratios):.1f}x"
    )


def python_loop_rate(steps: int) -> float:
    """Steps/s of gymnasium CartPole-v1 in a plain Python loop (random actions)."""
    env = gymnasium.make("CartPole-v1")
    env.reset(seed=0)
    env.action_space.seed(0)
    start = time.perf_counter()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--rollout-steps", type=int, default=1024)
    parser.add_argument("--iterations", type=int, default=10)
    args = parser.parse_args()
    print(
        f"gymnasium bridge vs pure JAX, CartPole-v1 | jax {jax.__version__} on "
        f"{jax.devices()[0].device_kind} | gymnasium {gymnasium.__version__}"
    )
    print(
        f"reference: plain Python loop over gymnasium CartPole-v1: "
        f"{python_loop_rate(20_000):,.0f} steps/s"
    )
    bridge_env = eqxrl.envs.from_gymnasium("CartPole-v1")
    pure_env = eqxrl.envs.make("CartPole-v1")
    n = args.num_envs
    alternate(
        f"env: {n} envs x {args.rollout_steps} steps, random actions",
        rollout_runner(bridge_env, n, args.rollout_steps),
        rollout_runner(pure_env, n, args.rollout_steps),
        n * args.rollout_steps,
        args.pairs,
    )
    alternate(
        f"ppo: {n} envs x 128 steps x {args.iterations} iterations, "
        "4 epochs x 4 minibatches",
        ppo_runner(bridge_env, n, args.iterations),
        ppo_runner(pure_env, n, args.iterations),
        n * 128 * args.iterations,
        args.pairs,
    )
    bridge_env.close()


if __name__ == "__main__":
    jnp.zeros(())  # initialize the backend before timing anything
    main()
