"""What the training driver costs: `eqxrl.Trainer` against the one-program `train`.

PPO on CartPole-v1 for `--total-timesteps`, `--rounds` alternating rounds of `train`,
`Trainer` in chunks of 16 and 64, and chunks of 16 with every file a run writes:
compile time, steps/s and ratio to `train`; every variant must end with
bit-identical parameters.

    .venv/bin/python benchmarks/trainer_overhead.py --rounds 5
"""

import math
import statistics
import tempfile

import equinox as eqx
import jax
import numpy as np
from _harness import Program, alternate, command_line, lowered_program, timed

import eqxrl


class CompileTime(eqxrl.training.AbstractLogger):
    """A logger that keeps the compile time the Trainer reports, and nothing else."""

    def __init__(self):
        self.seconds = math.nan

    def log(self, row):
        del row

    def log_summary(self, values):
        self.seconds = values.get("compile_seconds", self.seconds)


def parameters(state) -> list[np.ndarray]:
    return [
        np.asarray(x) for x in jax.tree.leaves(eqx.filter(state.model, eqx.is_array))
    ]


def main() -> None:
    args = command_line(__doc__, total_timesteps=2**18, rounds=5).parse_args()

    ppo = eqxrl.PPO(
        env=eqxrl.envs.make("CartPole-v1"), total_timesteps=args.total_timesteps
    )
    steps = ppo.num_iterations * ppo.num_envs * ppo.num_steps
    print(
        f"PPO CartPole-v1, {ppo.num_iterations} iterations x "
        f"{ppo.num_envs * ppo.num_steps} steps = {steps:,d} steps, on "
        f"{eqxrl.training.describe_devices()}"
    )

    # Compile time of the one-program run, separately from running: `ppo.train` as
    # it compiles itself (with the algorithm's `compiler_options`).
    train = lowered_program(ppo)
    print(f"compile train:        {train.compile_seconds:6.1f} s")

    def trainer_runner(chunk_size: int, files: bool):
        def run(seed: int, compile_time: CompileTime | None = None):
            with tempfile.TemporaryDirectory() as folder:
                trainer = eqxrl.Trainer(
                    ppo,
                    out=folder if files else None,
                    chunk_size=chunk_size,
                    eval_episodes=16 if files else 0,
                    # With files, the default loggers: metrics.csv (no console
                    # logger with `verbose=False`).
                    loggers=None if files else (compile_time,) if compile_time else (),
                    progress=False,
                    verbose=False,
                )
                return timed(trainer.fit, seed)

        return run

    variants = {
        "train": train.run,
        "trainer16": trainer_runner(16, files=False),
        "trainer64": trainer_runner(64, files=False),
        "trainer16+files": trainer_runner(16, files=True),
    }
    # Warm-up: every variant once, checked against `train`. A Trainer's first `fit`
    # compiles its chunk program and reports the compile time to its loggers.
    reference = None
    for name, run in variants.items():
        compile_time = CompileTime()
        _, (state, _) = run(0) if name == "train" else run(0, compile_time)
        if reference is None:
            reference = parameters(state)
        same = all(np.array_equal(a, b) for a, b in zip(reference, parameters(state)))
        compiled = (
            ""
            if math.isnan(compile_time.seconds)
            else f" (chunk program compiled in {compile_time.seconds:.1f} s)"
        )
        print(f"warm-up {name:<16} bit-identical to train: {same}{compiled}")
        assert same, name

    programs = {name: Program(run, steps) for name, run in variants.items()}
    result = alternate(programs, args.rounds, warmup=())
    print(f"\nsteps/s over {args.rounds} rounds (compile excluded), ratio to train:")
    for name in programs:
        rates, ratios = result.rates(name), result.ratios(name, "train")
        print(
            f"  {name:<16} median {statistics.median(rates):9,.0f}  best "
            f"{max(rates):9,.0f}   ratio median {statistics.median(ratios):.3f}  "
            f"best {max(ratios):.3f}"
        )


if __name__ == "__main__":
    main()
