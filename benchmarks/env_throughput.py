"""Environment throughput of eqxrl's CartPole-v1 with random actions.

`AutoReset(make("CartPole-v1"))`, `jax.vmap` over each `--num-envs` in a `lax.scan`
of `--steps` steps (more for small N: `--min-work`): compile time and steps/s, best
and median of `--repeats` calls. `compile_eqxrl` is what `peers.py` compares.

    NPROC=8 .venv/bin/python benchmarks/env_throughput.py --num-envs 1 4096 --repeats 9
"""

import statistics

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from _harness import Program, command_line, compile_program

import eqxrl

DEFAULT_NUM_ENVS = (1, 64, 1024, 4096)


def scan_length(num_envs: int, steps: int, min_work: int = 100_000) -> int:
    """`steps`, or more so that `num_envs * length >= min_work`."""
    return max(steps, -(-min_work // num_envs))


def random_rollout(env: eqxrl.envs.AbstractEnvironment, key, num_envs: int, steps: int):
    """`num_envs` x `steps` steps of `env` with random actions of two."""
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


def compile_eqxrl(num_envs: int, steps: int, env=None) -> Program:
    """The rollout of `num_envs` x `steps` random-action steps of CartPole-v1 (or
    `env`), auto-resetting, compiled; a run uses `jax.random.key(seed)`."""
    env = eqxrl.envs.AutoReset(env or eqxrl.envs.make("CartPole-v1"))
    return compile_program(
        eqx.filter_jit(random_rollout),
        lambda seed: (env, jr.key(seed), num_envs, steps),
        num_envs * steps,
    )


def main() -> None:
    args = command_line(
        __doc__,
        num_envs=list(DEFAULT_NUM_ENVS),
        steps=1000,
        repeats=5,
        min_work={
            "type": int,
            "default": 100_000,
            "help": "raise the scan length of small N to this many env steps per call",
        },
    ).parse_args()

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
        program = compile_eqxrl(num_envs, steps)
        program.run(0)  # warm-up
        rates = [
            program.work / program.run(seed)[0] for seed in range(1, 1 + args.repeats)
        ]
        print(
            f"{num_envs:>6} {steps:>7} {max(rates):>14,.0f} "
            f"{statistics.median(rates):>15,.0f} {program.compile_seconds:>10.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
