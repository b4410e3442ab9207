"""What training over several devices costs and saves, as far as a CPU can show it.

Parts (`--parts`), each in a process with its own simulated CPU devices: `overhead`
(the sharded program on one device against the plain one), `seeds` (`--seeds` on 1
against 2 devices), `memory` (PPO on Snake, 1 to 8 devices) and `model` (the
collectives in 8-device programs). README: "Scale-out".

    .venv/bin/python benchmarks/scaling.py
"""

import argparse
import functools
import json
import math
import os
import re
import statistics

import equinox as eqx
import jax
from _harness import Program, alternate, child_json, command_line, compile_timed, timed

import eqxrl

PARTS = ("overhead", "seeds", "memory", "model")


def child(part: str, options: dict) -> None:
    """Runs in a subprocess whose device count is already set."""

    def cartpole_ppo(num_envs, total_timesteps):
        return eqxrl.PPO(
            env=eqxrl.envs.make("CartPole-v1"),
            num_envs=num_envs,
            num_steps=128,
            total_timesteps=total_timesteps,
        )

    def alternated(programs: dict, warmup=None) -> dict:
        """Each program's seconds per round, alternating (compiled already)."""
        return alternate(programs, options["pairs"], warmup=warmup, unit=None).seconds

    def compile_sharded(algorithm, mesh):
        """The whole sharded run (initialization included) compiled, not run."""
        train = jax.jit(lambda key: algorithm.train(key, mesh=mesh))
        return compile_timed(train, jax.random.key(0))

    result: dict = {"devices": jax.device_count()}
    if part == "overhead":
        ppo = cartpole_ppo(options["num_envs"], options["total_timesteps"])
        mesh = jax.make_mesh((1,), ("envs",))
        key = jax.random.key(0)
        # The programs timed are the ones compiled here (each the whole run,
        # initialization included), so each compiles once.
        plain, result["compile_plain"] = compile_timed(ppo, key)
        sharded, result["compile_sharded"] = compile_timed(ppo, key, mesh=mesh)
        programs = {
            "plain": Program(lambda seed: timed(plain, ppo, key, True), 1),
            "sharded": Program(lambda seed: timed(sharded, ppo, key, True, mesh), 1),
        }
        result.update(alternated(programs), steps=ppo.total_timesteps)
    elif part == "seeds":
        ppo = cartpole_ppo(options["num_envs"], options["total_timesteps"])
        keys = jax.random.split(jax.random.key(0), options["seeds"])
        mesh = jax.make_mesh((2,), ("seeds",))
        train_seeds = functools.partial(eqxrl.train_seeds, ppo)
        programs = {
            name: Program(
                lambda seed, m=m: timed(functools.partial(train_seeds, mesh=m), keys), 1
            )
            for name, m in (("one", None), ("split", mesh))
        }
        for name, program in programs.items():  # with compiling
            result[f"first_{name}"] = program.run(0)[0]
        steps = ppo.total_timesteps * len(keys)
        result.update(alternated(programs, warmup=()), steps=steps)
    elif part == "memory":
        num_envs, num_steps = options["snake_envs"], options["snake_steps"]
        ppo = eqxrl.PPO(
            env=eqxrl.envs.make("Snake-v0"),
            num_envs=num_envs,
            num_steps=num_steps,
            total_timesteps=num_envs * num_steps,
            num_minibatches=8,
        )
        rows = []
        for devices in (1, 2, 4, 8):
            mesh = jax.make_mesh((devices,), ("envs",), devices=jax.devices()[:devices])
            compiled, seconds = compile_sharded(ppo, mesh)
            memory = compiled.memory_analysis()
            rows.append(
                {
                    "devices": devices,
                    "compile": seconds,
                    "arguments": memory.argument_size_in_bytes,
                    "outputs": memory.output_size_in_bytes,
                    "scratch": memory.temp_size_in_bytes,
                }
            )
        result["rows"] = rows
    elif part == "model":
        rows = []
        env = eqxrl.envs.make("CartPole-v1")
        snake = eqxrl.envs.make("Snake-v0")
        for name, algorithm in (
            ("PPO CartPole, 8 envs x 128", cartpole_ppo(8, 8 * 128)),
            (
                "PPO Snake, 8 envs x 128",
                eqxrl.PPO(env=snake, num_envs=8, num_steps=128, total_timesteps=1024),
            ),
            (
                "DQN CartPole, 8 envs, batch 16",
                eqxrl.DQN(
                    env=env,
                    num_envs=8,
                    total_timesteps=8 * 40,
                    learning_starts=80,
                    buffer_size=160,
                    batch_size=16,
                ),
            ),
        ):
            state = eqx.filter_eval_shape(algorithm.init, jax.random.key(0))
            model = state.model if hasattr(state, "model") else state.network
            parameters = sum(
                math.prod(leaf.shape)
                for leaf in jax.tree.leaves(model)
                if isinstance(leaf, jax.ShapeDtypeStruct)
            )
            mesh = jax.make_mesh((8,), ("envs",))
            text = compile_sharded(algorithm, mesh)[0].as_text()
            collectives = {"all-reduce": [0, 0], "all-gather": [0, 0]}
            for line in text.splitlines():
                for op, totals in collectives.items():
                    if f" {op}(" in line:
                        result_type = line.split(f" {op}(")[0].split("=", 1)[1]
                        totals[0] += 1
                        totals[1] += collective_bytes(result_type)
            rows.append(
                {
                    "name": name,
                    "parameters": parameters,
                    "collectives": collectives,
                    "updates_per_iteration": getattr(algorithm, "num_epochs", 1)
                    * getattr(algorithm, "num_minibatches", 1),
                }
            )
        result["rows"] = rows
    print(json.dumps(result))


DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "f16": 2, "bf16": 2}


def collective_bytes(result_type: str) -> int:
    """Bytes of a collective's result, from its HLO type (e.g. `(f32[4], s32[])`)."""
    total = 0
    for dtype, dims in re.findall(r"([a-z]+\d*)\[([\d,]*)\]", result_type):
        size = math.prod(int(d) for d in dims.split(",") if d)
        total += size * DTYPE_BYTES.get(dtype, 4)
    return total


def run_part(part: str, devices: int, options: dict) -> dict:
    # The caller's other XLA flags carry over (the test suite's fast compilation).
    inherited = [
        flag
        for flag in os.environ.get("XLA_FLAGS", "").split()
        if not flag.startswith("--xla_force_host_platform_device_count")
    ]
    environment = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": " ".join(
            [*inherited, f"--xla_force_host_platform_device_count={devices}"]
        ),
    }
    return child_json([__file__, "--child", part, json.dumps(options)], environment)


def print_pair(result: dict, base: tuple[str, str], ours: tuple[str, str]) -> None:
    """The median steps/s of both sides and the median and best per-pair ratio."""
    (base, base_label), (ours, ours_label) = base, ours
    rates = {side: [result["steps"] / s for s in result[side]] for side in (base, ours)}
    ratios = [a / b for a, b in zip(rates[ours], rates[base])]
    print(
        f"  {base_label}: median {statistics.median(rates[base]):,.0f} steps/s | "
        f"{ours_label}: median {statistics.median(rates[ours]):,.0f} steps/s\n"
        f"  {ours_label.split()[0]} speed / one-device speed: median "
        f"{statistics.median(ratios):.3f}x best {max(ratios):.3f}x"
    )


def main() -> None:
    args = command_line(
        __doc__,
        parts=PARTS,
        pairs=5,
        num_envs=64,
        total_timesteps=64 * 128 * 32,
        seeds=8,
        snake_envs=4096,
        snake_steps=128,
        child={"nargs": 2, "help": argparse.SUPPRESS},
    ).parse_args()
    options = {k: v for k, v in vars(args).items() if k not in ("parts", "child")}
    if args.child:
        child(args.child[0], json.loads(args.child[1]))
        return

    if "overhead" in args.parts:
        result = run_part("overhead", 1, options)
        print(
            f"overhead: PPO CartPole {args.num_envs} envs x 128 steps, "
            f"{result['steps']:,d} steps, {args.pairs} pairs\n"
            f"  compile: one-device {result['compile_plain']:.1f} s, sharded on a "
            f"1-device mesh {result['compile_sharded']:.1f} s"
        )
        print_pair(result, ("plain", "one-device"), ("sharded", "sharded"))
    if "seeds" in args.parts:
        result = run_part("seeds", 2, options)
        print(
            f"seeds: {args.seeds} PPO seeds x {args.total_timesteps:,d} steps, "
            f"{args.pairs} pairs (2 simulated devices share this machine's cores)\n"
            f"  first call (with compiling): 1 device {result['first_one']:.1f} s, "
            f"2 devices {result['first_split']:.1f} s"
        )
        print_pair(result, ("one", "1 device"), ("split", "split over 2 devices"))
    if "memory" in args.parts:
        result = run_part("memory", 8, options)
        print(
            f"memory: PPO Snake {args.snake_envs} envs x {args.snake_steps} steps, "
            "per device (MiB)"
        )
        print("  devices  arguments  outputs  scratch   total  compile")
        for row in result["rows"]:
            total = row["arguments"] + row["outputs"] + row["scratch"]
            print(
                f"  {row['devices']:7d}  {row['arguments'] / 2**20:9.1f}  "
                f"{row['outputs'] / 2**20:7.1f}  {row['scratch'] / 2**20:7.1f}  "
                f"{total / 2**20:6.1f}  {row['compile']:5.1f} s"
            )
    if "model" in args.parts:
        result = run_part("model", 8, options)
        print(
            "model: the collectives in the compiled program over 8 devices (each "
            "appears once in the program text; most run once per step or update)"
        )
        print(
            "  run                             parameters  all-reduce ops (bytes)  "
            "all-gather ops (bytes)"
        )
        for row in result["rows"]:
            reduce_ops, reduce_bytes = row["collectives"]["all-reduce"]
            gather_ops, gather_bytes = row["collectives"]["all-gather"]
            print(
                f"  {row['name']:32s} {row['parameters']:10,d}  "
                f"{reduce_ops:6d} ({reduce_bytes:10,d})  "
                f"{gather_ops:6d} ({gather_bytes:10,d})"
            )


if __name__ == "__main__":
    main()
