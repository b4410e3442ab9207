"""Environment throughput of eqxrl's CartPole-v1 with random actions.

Measures `AutoReset(eqxrl.envs.make("CartPole-v1"))` stepped with uniformly random
actions: `jax.vmap` over N environments inside a `jax.lax.scan` of S steps, compiled
as one program; the rollout sums rewards and observations, so that XLA cannot drop
the observation work. For each N it prints the compile time (trace + XLA compile, timed
with ahead-of-time `.lower(...).compile()`) and the environment steps per second of
the compiled program (N * S / wall time, compile excluded, best and median over
`--repeats` calls with different keys, after one untimed warm-up call). S is
`--steps`, raised for small N so that one call makes at least `--min-work`
environment steps (a 1000-step call at N=1 lasts milliseconds, within the noise).

Run (from the repository root, in the dev venv):

    NPROC=8 .venv/bin/python benchmarks/env_throughput.py
    NPROC=8 .venv/bin/python benchmarks/env_throughput.py --num-envs 1 4096 \
        --steps 2000 --repeats 9

`measure_eqxrl(num_envs, steps, repeats)` returns the numbers as a dict;
`compile_eqxrl(num_envs, steps)` returns a timed runner, which `peers.py` alternates
with gymnax's.
"""

import argparse
import statistics
import time
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

import eqxrl

DEFAULT_NUM_ENVS = (1, 64, 1024, 4096)
DEFAULT_STEPS = 1000
DEFAULT_REPEATS = 5
DEFAULT_MIN_WORK = 100_000


def scan_length(num_envs: int, steps: int, min_work: int = DEFAULT_MIN_WORK) -> int:
    """`steps`, or more so that `num_envs * length >= min_work`."""
    return max(steps, -(-min_work // num_envs))


def timed_call(compiled: Callable, *args) -> float:
    """Wall-clock seconds of one call of a compiled function, outputs ready."""
    start = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    return time.perf_counter() - start


def _eqxrl_rollout(env: eqxrl.envs.AbstractEnvironment, key, num_envs: int, steps: int):
    reset_key, scan_key = jr.split(key)
    state, _ = jax.vmap(env.reset)(jr.split(reset_key, num_envs))

    def body(carry, step_key):
        state, total = carry
        action_key, env_key = jr.split(step_key)
        actions = jr.randint(action_key, (num_envs,), 0, 2)
        state, timestep = jax.vmap(env.step)(
            state, actions, jr.split(env_key, num_envs)
        )
        # Consume reward and observation, as an agent would (else XLA drops work).
        total = total + timestep.reward + timestep.observation.sum(axis=-1)
        return (state, total), None

    init = (state, jnp.zeros(num_envs, jnp.float32))
    (state, total), _ = jax.lax.scan(body, init, jr.split(scan_key, steps))
    return state, total


def compile_eqxrl(num_envs: int, steps: int) -> tuple[Callable[[int], float], float]:
    """Compile the eqxrl rollout of `num_envs` x `steps` random-action steps.

    **Returns:**

    `(run, compile_seconds)`: `run(seed)` executes the compiled rollout once with
    `jax.random.key(seed)` and returns its wall-clock seconds.
    """
    env = eqxrl.envs.AutoReset(eqxrl.envs.make("CartPole-v1"))
    rollout = eqx.filter_jit(_eqxrl_rollout)
    start = time.perf_counter()
    compiled = rollout.lower(env, jr.key(0), num_envs, steps).compile()
    compile_seconds = time.perf_counter() - start

    def run(seed: int) -> float:
        return timed_call(compiled, env, jr.key(seed), num_envs, steps)

    return run, compile_seconds


def summarize(seconds: list[float], work: int) -> dict[str, float]:
    """Best and median of `work / seconds` (e.g. environment steps per second)."""
    rates = [work / s for s in seconds]
    return {"best_sps": max(rates), "median_sps": statistics.median(rates)}


def measure_eqxrl(
    num_envs: int, steps: int = DEFAULT_STEPS, repeats: int = DEFAULT_REPEATS
) -> dict:
    """Compile time and steps/s of eqxrl CartPole-v1 with random actions.

    **Returns:**

    A dict with `num_envs`, `steps`, `compile_s`, `warmup_s` (the first call after
    compiling, not counted), `seconds` (each timed call), `best_sps` and `median_sps`.
    """
    run, compile_seconds = compile_eqxrl(num_envs, steps)
    warmup_seconds = run(0)
    seconds = [run(seed) for seed in range(1, repeats + 1)]
    return {
        "num_envs": num_envs,
        "steps": steps,
        "compile_s": compile_seconds,
        "warmup_s": warmup_seconds,
        "seconds": seconds,
        **summarize(seconds, num_envs * steps),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=DEFAULT_NUM_ENVS)
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS)
    parser.add_argument(
        "--min-work",
        type=int,
        default=DEFAULT_MIN_WORK,
        help="raise the scan length of small N to this many env steps per call",
    )
    args = parser.parse_args()

    print(
        f"eqxrl CartPole-v1 (AutoReset), random actions, scan of S steps, "
        f"best/median of {args.repeats} (jax {jax.__version__}, "
        f"{jax.devices()[0].platform})"
    )
    print(
        f"{'N':>6} {'S':>7} {'best steps/s':>14} {'median steps/s':>15} "
        f"{'compile s':>10}"
    )
    for num_envs in args.num_envs:
        steps = scan_length(num_envs, args.steps, args.min_work)
        result = measure_eqxrl(num_envs, steps, args.repeats)
        print(
            f"{num_envs:>6} {steps:>7} {result['best_sps']:>14,.0f} "
            f"{result['median_sps']:>15,.0f} {result['compile_s']:>10.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
