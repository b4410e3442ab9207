"""The gymnasium host bridge against pure-JAX CartPole: what the bridge costs.

`from_gymnasium("CartPole-v1")` against `make("CartPole-v1")`, `--pairs` alternating
rounds: a random rollout (`--num-envs` x `--rollout-steps`) and `eqxrl.PPO` at its
defaults (`--iterations`); also a plain Python loop over gymnasium's CartPole-v1.

    python benchmarks/gymnasium_bridge.py --pairs 7 --iterations 20 --num-envs 4
"""

import statistics
import time

import equinox as eqx
import gymnasium
import jax
import jax.numpy as jnp
import jax.random as jr
from _harness import Program, alternate, command_line, compile_program
from env_throughput import compile_eqxrl

import eqxrl


def ppo_program(env: eqxrl.envs.AbstractEnvironment, num_envs: int, iterations: int):
    """A compiled PPO run of `iterations` iterations."""
    ppo = eqxrl.PPO(
        env=env,
        num_envs=num_envs,
        num_steps=128,
        total_timesteps=num_envs * 128 * iterations,
    )
    train = eqx.filter_jit(lambda ppo, key: ppo.train(key)[1]["total_loss"])
    return compile_program(
        train, lambda seed: (ppo, jr.key(seed)), num_envs * 128 * iterations
    )


def compare(name: str, bridge: Program, pure: Program, pairs: int) -> None:
    """Time bridge and pure JAX alternately and print steps/s and ratios."""
    result = alternate({"bridge": bridge, "pure": pure}, pairs, unit=None)
    ratios = result.ratios("pure", "bridge")
    print(f"[{name}] {bridge.work:,} env steps per run, {pairs} pairs")
    for side, label in (
        ("bridge", "bridge   (from_gymnasium)"),
        ("pure", "pure JAX (make)          "),
    ):
        rates = result.rates(side)
        print(
            f"  {label}: median {statistics.median(rates):>12,.0f}"
            f" steps/s, best {max(rates):>12,.0f}, compile "
            f"{result.programs[side].compile_seconds:5.2f} s"
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
    args = command_line(
        __doc__, pairs=5, num_envs=4, rollout_steps=1024, iterations=10
    ).parse_args()
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
    n, steps, iterations = args.num_envs, args.rollout_steps, args.iterations
    compare(
        f"env: {n} envs x {steps} steps, random actions",
        compile_eqxrl(n, steps, bridge_env),
        compile_eqxrl(n, steps, pure_env),
        args.pairs,
    )
    compare(
        f"ppo: {n} envs x 128 steps x {iterations} iterations, "
        "4 epochs x 4 minibatches",
        ppo_program(bridge_env, n, iterations),
        ppo_program(pure_env, n, iterations),
        args.pairs,
    )
    bridge_env.close()


if __name__ == "__main__":
    jnp.zeros(())  # initialize the backend before timing anything
    main()
