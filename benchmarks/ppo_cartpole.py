"""PPO training speed and final return of eqxrl on CartPole-v1.

Three configurations of `eqxrl.PPO` on `eqxrl.envs.make("CartPole-v1")`:

- `contract`: the PPO defaults, i.e. PureJaxRL's CartPole config: 4 envs x 128
  steps, 500k steps, 4 epochs x 4 minibatches, lr 2.5e-4 (annealed), gamma 0.99,
  GAE lambda 0.95, clip 0.2, entropy 0.01, value 0.5, max grad norm 0.5.
- `wide`: the same with 512 envs x 128 steps and 2^20 steps (16 iterations): a
  throughput configuration; 16 iterations are too few to learn CartPole, so its
  final return says nothing.
- `seeds8`: `contract` for 8 seeds at once, `eqx.filter_vmap(ppo.train)(keys)`.

For each it prints the compile time (trace + XLA compile of the whole `train`,
timed with ahead-of-time `.lower(...).compile()`), environment steps per second of
the compiled run (all seeds' steps / wall time, compile excluded; median and best of
`--repeats` runs with different keys after one untimed warm-up run) and the final
return: the nan-aware mean of the per-iteration `episode_return` metric over the
last 10 iterations (for `seeds8`, the mean over seeds, with the worst seed).

Run (from the repository root, in the dev venv; with defaults about 3-4 minutes on
an idle 2-core CPU, 7.5 minutes measured with other jobs loading it ~5x):

    NPROC=8 .venv/bin/python benchmarks/ppo_cartpole.py
    NPROC=8 .venv/bin/python benchmarks/ppo_cartpole.py --configs contract \
        --repeats 9
    .venv/bin/python benchmarks/ppo_cartpole.py --configs contract seeds8 \
        --total-timesteps 4096 --repeats 1

(the last a quick check that the script works; `wide` needs at least 65,536 steps,
one iteration).

`measure_eqxrl_ppo(config_name, repeats)` returns the numbers as a dict;
`compile_eqxrl_ppo(config_name)` returns a timed runner, which `peers.py`
alternates with other libraries' PPO.
"""

import argparse
import statistics
import time
from collections.abc import Callable

import equinox as eqx
import jax
import jax.random as jr
import numpy as np

import eqxrl

CONFIGS: dict[str, dict] = {
    "contract": {"num_envs": 4, "num_steps": 128, "total_timesteps": 500_000},
    "wide": {"num_envs": 512, "num_steps": 128, "total_timesteps": 2**20},
    "seeds8": {"num_envs": 4, "num_steps": 128, "total_timesteps": 500_000},
}
NUM_SEEDS = {"contract": 1, "wide": 1, "seeds8": 8}
DEFAULT_REPEATS = 3
LAST_ITERATIONS = 10


def make_ppo(config_name: str, total_timesteps: int | None = None) -> eqxrl.PPO:
    """The `eqxrl.PPO` of a named configuration (everything else at its default),
    optionally with another number of steps (e.g. a short run that only checks that
    the benchmark works)."""
    config = dict(CONFIGS[config_name])
    if total_timesteps is not None:
        config["total_timesteps"] = total_timesteps
    return eqxrl.PPO(env=eqxrl.envs.make("CartPole-v1"), **config)


def final_return(episode_returns: np.ndarray) -> np.ndarray:
    """Nan-aware mean of the last `LAST_ITERATIONS` entries along the last axis."""
    return np.nanmean(np.asarray(episode_returns)[..., -LAST_ITERATIONS:], axis=-1)


def _train_seeds(ppo: eqxrl.PPO, keys):
    return eqx.filter_vmap(ppo.train)(keys)


def compile_eqxrl_ppo(
    config_name: str, total_timesteps: int | None = None
) -> tuple[Callable[[int], tuple[float, np.ndarray, eqxrl.PPOState]], float, int]:
    """Compile a whole eqxrl PPO run of a named configuration (with
    `total_timesteps` steps if given).

    **Returns:**

    `(run, compile_seconds, env_steps)`: `run(seed)` trains once (all seeds of the
    configuration, keys derived from `seed`) and returns `(seconds, returns,
    state)`: `returns` is the final return of each seed (shape `[num_seeds]`) and
    `state` the final training state (batched over seeds for `seeds8`). `env_steps`
    counts the environment steps of one `run`, over all seeds.
    """
    ppo = make_ppo(config_name, total_timesteps)
    num_seeds = NUM_SEEDS[config_name]
    # What users run: `ppo.train` (its XLA options included), returning the state
    # and every metric. (Returning `episode_return` alone let XLA drop the other
    # metrics, and that program ran 20% slower on this 2-core CPU: its kernels
    # were spread over two threads.)
    start = time.perf_counter()
    if num_seeds == 1:

        def make_key(seed):
            return jr.key(seed)

        compiled_train = ppo.lower(make_key(0)).compile()

        def compiled(ppo, key):
            return compiled_train(ppo, key, True)
    else:

        def make_key(seed):
            return jr.split(jr.key(seed), num_seeds)

        train = eqx.filter_jit(_train_seeds, compiler_options=ppo.compiler_options)
        compiled = train.lower(ppo, make_key(0)).compile()
    compile_seconds = time.perf_counter() - start

    def run(seed: int) -> tuple[float, np.ndarray, eqxrl.PPOState]:
        key = make_key(seed)
        start = time.perf_counter()
        state, metrics = jax.block_until_ready(compiled(ppo, key))
        seconds = time.perf_counter() - start
        returns = final_return(metrics["episode_return"])
        return seconds, np.atleast_1d(returns), state

    env_steps = num_seeds * ppo.num_iterations * ppo.num_envs * ppo.num_steps
    return run, compile_seconds, env_steps


def measure_eqxrl_ppo(
    config_name: str,
    repeats: int = DEFAULT_REPEATS,
    total_timesteps: int | None = None,
) -> dict:
    """Compile time, steps/s and final return of eqxrl PPO on CartPole-v1.

    **Arguments:**

    - `config_name`: `"contract"`, `"wide"` or `"seeds8"` (see the module docstring).
    - `repeats`: timed runs (keys 1..repeats) after one untimed warm-up (key 0).
    - `total_timesteps`: steps per run (per seed) instead of the configuration's.

    **Returns:**

    A dict with `config`, `num_seeds`, `env_steps` (per run, all seeds),
    `compile_s`, `warmup_s`, `seconds` (each timed run), `median_sps`, `best_sps`,
    `final_returns` (per timed run, mean over seeds), `final_return` (their
    median) and `worst_seed_return` (the lowest single seed's final return over all
    timed runs).
    """
    run, compile_seconds, env_steps = compile_eqxrl_ppo(config_name, total_timesteps)
    warmup_seconds, _, _ = run(0)
    seconds, returns = [], []
    for seed in range(1, repeats + 1):
        elapsed, seed_returns, _ = run(seed)
        seconds.append(elapsed)
        returns.append(seed_returns)
    rates = [env_steps / s for s in seconds]
    return {
        "config": config_name,
        "num_seeds": NUM_SEEDS[config_name],
        "env_steps": env_steps,
        "compile_s": compile_seconds,
        "warmup_s": warmup_seconds,
        "seconds": seconds,
        "median_sps": statistics.median(rates),
        "best_sps": max(rates),
        "final_returns": [float(np.mean(r)) for r in returns],
        "final_return": statistics.median(float(np.mean(r)) for r in returns),
        "worst_seed_return": float(np.min(np.concatenate(returns))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS)
    )
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS)
    parser.add_argument(
        "--total-timesteps",
        type=int,
        default=None,
        help="steps per run (per seed) for every configuration, instead of its own "
        "(e.g. 8192 for a quick check that the script works)",
    )
    args = parser.parse_args()

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
        result = measure_eqxrl_ppo(name, args.repeats, args.total_timesteps)
        ppo = make_ppo(name, args.total_timesteps)
        final = f"{result['final_return']:.1f}"
        if result["num_seeds"] > 1:
            final += f" (worst seed {result['worst_seed_return']:.1f})"
        print(
            f"{name:>9} {result['num_seeds']:>5} "
            f"{f'{ppo.num_envs} x {ppo.num_steps}':>12} {ppo.num_iterations:>5} "
            f"{result['median_sps']:>15,.0f} {result['best_sps']:>13,.0f} "
            f"{result['compile_s']:>9.2f} {final:>12}",
            flush=True,
        )


if __name__ == "__main__":
    main()
