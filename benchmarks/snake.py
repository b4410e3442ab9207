"""Snake throughput: eqxrl's Snake against Jumanji's Snake-v1, and PPO steps/s.

Environment steps/s of `--num-envs` games per `--sizes` board (random valid moves)
against Jumanji's where installed, `--pairs` rounds; PPO's steps/s with each of
`--policies`. README: "Snake".

    python benchmarks/snake.py --sizes 6 --num-envs 64 --pairs 1 --ppo-size 6 --smoke
"""

import statistics

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from _harness import alternate, command_line, compile_program

import eqxrl

try:
    import jumanji
    from jumanji.wrappers import AutoResetWrapper
except ImportError:  # not installed outside the peers venv
    jumanji = None


def valid_move(key, action_mask):
    """Uniform over the valid moves, for a batch of masks."""
    logits = jnp.where(action_mask, 0.0, -jnp.inf)
    return jr.categorical(key, logits).astype(jnp.int32)


def eqxrl_loop(size: int, num_envs: int, num_steps: int, consume: bool = True):
    env = eqxrl.envs.AutoReset(eqxrl.envs.Snake(height=size, width=size))

    def run(key):
        state, timestep = jax.vmap(env.reset)(jr.split(key, num_envs))

        def body(carry, key):
            state, timestep = carry
            action_key, step_key = jr.split(key)
            action = valid_move(action_key, timestep.action_mask)
            state, timestep = jax.vmap(env.step)(
                state, action, jr.split(step_key, num_envs)
            )
            checksum = timestep.reward.sum()
            if consume:
                checksum = checksum + timestep.observation.sum()
            return (state, timestep), checksum

        _, checksums = jax.lax.scan(body, (state, timestep), jr.split(key, num_steps))
        return checksums.sum()

    return eqx.filter_jit(run)


def jumanji_loop(size: int, num_envs: int, num_steps: int, consume: bool = True):
    env = AutoResetWrapper(jumanji.make("Snake-v1", num_rows=size, num_cols=size))

    def run(key):
        state, timestep = jax.vmap(env.reset)(jr.split(key, num_envs))

        def body(carry, key):
            state, timestep = carry
            action = valid_move(key, timestep.observation.action_mask)
            state, timestep = jax.vmap(env.step)(state, action)
            checksum = timestep.reward.sum()
            if consume:
                checksum = checksum + timestep.observation.grid.sum()
            return (state, timestep), checksum

        _, checksums = jax.lax.scan(body, (state, timestep), jr.split(key, num_steps))
        return checksums.sum()

    return jax.jit(run)


def benchmark_env(
    size: int, num_envs: int, pairs: int, consume: bool, smoke: bool = False
) -> None:
    num_steps = 64 if smoke else max(64, min(32768, 2**18 // num_envs))
    steps, keys = num_envs * num_steps, lambda seed: (jr.key(seed),)
    programs = {"eqxrl": eqxrl_loop(size, num_envs, num_steps, consume)}
    if jumanji is not None:
        programs["Jumanji"] = jumanji_loop(size, num_envs, num_steps, consume)
    programs = {n: compile_program(f, keys, steps) for n, f in programs.items()}
    result = alternate(programs, pairs, unit=None)
    line = f"{size}x{size} N={num_envs:>5}: " + ", ".join(
        f"{name} {max(result.rates(name)) / 1e6:6.3f} M steps/s (median "
        f"{statistics.median(result.rates(name)) / 1e6:.3f})"
        for name in programs
    )
    if jumanji is not None:
        ratios = result.ratios("eqxrl", "Jumanji")
        line += (
            f" | ratio median {statistics.median(ratios):5.2f}x best "
            f"{max(ratios):5.2f}x"
        )
    compiles = ", ".join(f"{n} {p.compile_seconds:.1f} s" for n, p in programs.items())
    print(f"{line} | best of {pairs}; compile {compiles}", flush=True)


# PPO's `network_factory` per policy (`None`: the default MLP on the flat board), and
# the iterations of a timed run.
NETWORK_FACTORIES = {
    "mlp": None,
    "cnn": eqxrl.nn.CNNActorCritic.from_env,
    "transformer": eqxrl.nn.GridTransformerActorCritic.from_env,
}
PPO_ITERATIONS = {"mlp": 4, "cnn": 2, "transformer": 1}


def benchmark_ppo(policy: str, size: int, iterations: int, repeats: int) -> None:
    env = eqxrl.envs.Snake(height=size, width=size)
    num_envs, num_steps = 64, 64
    ppo = eqxrl.PPO(
        env=env,
        num_envs=num_envs,
        num_steps=num_steps,
        total_timesteps=num_envs * num_steps * iterations,
        network_factory=NETWORK_FACTORIES[policy],
        observation_storage_dtype=jnp.uint8,
    )
    train = eqx.filter_jit(ppo.train, compiler_options=ppo.compiler_options)
    steps = ppo.num_iterations * num_envs * num_steps
    program = compile_program(train, lambda seed: (jr.key(seed),), steps)
    times = alternate({"ppo": program}, repeats, unit=None).seconds["ppo"]
    compile_time = program.compile_seconds
    print(
        f"PPO {policy:>11} {size}x{size}, {num_envs} envs x {num_steps} steps, "
        f"{ppo.num_epochs} epochs x {ppo.num_minibatches} minibatches: "
        f"{steps / min(times):8,.0f} steps/s (best of {repeats}, median "
        f"{steps / statistics.median(times):,.0f}) | compile {compile_time:.1f} s",
        flush=True,
    )


def main() -> None:
    args = command_line(
        __doc__,
        pairs=5,
        sizes=[10, 12],
        num_envs=[1, 64, 1024, 4096],
        skip_env=False,
        ignore_observation={
            "action": "store_true",
            "help": "do not consume the observation (XLA then never computes it): the "
            "state update alone",
        },
        skip_ppo=False,
        policies={
            "nargs": "+",
            "choices": list(NETWORK_FACTORIES),
            "default": list(NETWORK_FACTORIES),
            "help": "actor-critics timed in the PPO part",
        },
        ppo_size={
            "type": int,
            "default": 10,
            "help": "board height and width, PPO part",
        },
        smoke={
            "action": "store_true",
            "help": "check that the script runs (seconds, not a measurement): 64 steps "
            "per environment loop, and each policy's PPO timed once over one iteration",
        },
    ).parse_args()
    print(
        f"jax {jax.__version__} on {jax.devices()[0].device_kind}; Jumanji "
        f"{jumanji.__version__ if jumanji else 'not installed: eqxrl only'}; "
        f"observation {'ignored' if args.ignore_observation else 'consumed'}"
    )
    if not args.skip_env:
        for size in args.sizes:
            for num_envs in args.num_envs:
                benchmark_env(
                    size,
                    num_envs,
                    args.pairs,
                    not args.ignore_observation,
                    smoke=args.smoke,
                )
    if not args.skip_ppo:
        for policy in args.policies:
            repeats = 1 if policy == "transformer" or args.smoke else 3
            iterations = 1 if args.smoke else PPO_ITERATIONS[policy]
            benchmark_ppo(policy, args.ppo_size, iterations, repeats)


if __name__ == "__main__":
    main()
