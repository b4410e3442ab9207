"""PPO training speed and final return of eqxrl on CartPole-v1.

`--configs` of `eqxrl.PPO` (`CONFIGS`: `contract`, PureJaxRL's config; `wide`, 512
envs; `seeds8`, 8 seeds vmapped): compile time, steps/s (median and best of
`--repeats`) and the final return. `compile_eqxrl_ppo` is what `peers.py` compares.

    NPROC=8 .venv/bin/python benchmarks/ppo_cartpole.py --configs contract --repeats 9
"""

import statistics

import equinox as eqx
import jax
import jax.random as jr
import numpy as np
from _harness import (
    Program,
    alternate,
    command_line,
    compile_program,
    final_return,
    lowered_program,
)

import eqxrl

CONFIGS: dict[str, dict] = {
    "contract": {"num_envs": 4, "num_steps": 128, "total_timesteps": 500_000},
    "wide": {"num_envs": 512, "num_steps": 128, "total_timesteps": 2**20},
    "seeds8": {"num_envs": 4, "num_steps": 128, "total_timesteps": 500_000},
}
NUM_SEEDS = {"contract": 1, "wide": 1, "seeds8": 8}


def make_ppo(config_name: str, total_timesteps: int | None = None) -> eqxrl.PPO:
    """The `eqxrl.PPO` of a named configuration (everything else at its default),
    optionally with another number of steps (e.g. a short run that only checks that
    the benchmark works)."""
    config = dict(CONFIGS[config_name])
    if total_timesteps is not None:
        config["total_timesteps"] = total_timesteps
    return eqxrl.PPO(env=eqxrl.envs.make("CartPole-v1"), **config)


def compile_eqxrl_ppo(config_name: str, total_timesteps: int | None = None) -> Program:
    """A whole eqxrl PPO run of a named configuration (with `total_timesteps` steps
    if given), compiled: a run trains every seed of the configuration, keys derived
    from its seed. Facts: `returns`, the final return of each seed; `final_return`,
    their mean; `state`, the final training state (batched over seeds for
    `seeds8`). Its work counts the environment steps of every seed."""
    ppo = make_ppo(config_name, total_timesteps)
    num_seeds = NUM_SEEDS[config_name]
    # What users run: `ppo.train` (its XLA options included), returning the state
    # and every metric. (Returning `episode_return` alone let XLA drop the other
    # metrics, and that program ran 20% slower on this 2-core CPU: its kernels
    # were spread over two threads.)
    if num_seeds == 1:
        program = lowered_program(ppo)
    else:
        function = eqx.filter_jit(
            lambda ppo, keys: eqx.filter_vmap(ppo.train)(keys),
            compiler_options=ppo.compiler_options,
        )
        arguments = lambda seed: (ppo, jr.split(jr.key(seed), num_seeds))  # noqa: E731
        program = compile_program(function, arguments, 0)

    def facts(output, seed: int) -> dict:
        state, metrics = output
        returns = np.atleast_1d(final_return(metrics["episode_return"]))
        return {
            "final_return": float(np.mean(returns)),
            "returns": returns,
            "state": state,
        }

    program.facts = facts
    program.work = num_seeds * ppo.num_iterations * ppo.num_envs * ppo.num_steps
    return program


def main() -> None:
    args = command_line(
        __doc__,
        configs=tuple(CONFIGS),
        repeats=3,
        total_timesteps={
            "type": int,
            "help": "steps per run (per seed) for every configuration, instead of its "
            "own (e.g. 8192 for a quick check that the script works)",
        },
    ).parse_args()

    print(
        f"eqxrl PPO on CartPole-v1, median/best of {args.repeats} runs "
        f"(jax {jax.__version__}, {jax.devices()[0].platform})"
    )
    header = (
        f"{'config':>9} {'seeds':>5} {'envs x steps':>12} {'iters':>5} "
        f"{'median steps/s':>15} {'best steps/s':>13} {'compile s':>9} "
        f"{'final return':>12}"
    )
    print(header)
    for name in args.configs:
        program = compile_eqxrl_ppo(name, args.total_timesteps)
        result = alternate({name: program}, args.repeats, unit=None)
        rates, returns = result.rates(name), result.fact(name, "returns")
        ppo = make_ppo(name, args.total_timesteps)
        # The median over runs of the mean over seeds; with seeds, the worst seed.
        final = f"{statistics.median(np.mean(r) for r in returns):.1f}"
        if NUM_SEEDS[name] > 1:
            final += f" (worst seed {np.min(np.concatenate(returns)):.1f})"
        print(
            f"{name:>9} {NUM_SEEDS[name]:>5} "
            f"{f'{ppo.num_envs} x {ppo.num_steps}':>12} {ppo.num_iterations:>5} "
            f"{statistics.median(rates):>15,.0f} {max(rates):>13,.0f} "
            f"{program.compile_seconds:>9.2f} {final:>12}",
            flush=True,
        )


if __name__ == "__main__":
    main()
