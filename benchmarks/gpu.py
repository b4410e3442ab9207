"""eqxrl on an accelerator, against its peers: one prepared script.

Rows (`--rows`; README: "On a GPU"), each eqxrl against its peer alternating for
`--pairs` rounds, compile apart: `ppo_cartpole` (PureJaxRL's `ppo.py` and
`wrappers.py` in `--purejaxrl FOLDER`), `snake` (Jumanji), `value_based` (rejax),
`treasure_hunt` (Sorrel), `brax`, `memory` (XLA's `memory_analysis()`),
`pqn_headline` and `tricks`. Rows 1 and 3 also run with XLA:GPU's command buffers
(`--no-command-buffers`), row 1 is profiled (`--no-profile`). A missing peer runs
eqxrl alone; `OUT/gpu.json` and `OUT/gpu.md` are rewritten after every row.

    python benchmarks/gpu.py --out OUT --purejaxrl PUREJAXRL_FOLDER   # <= 8 min
    python benchmarks/gpu.py --smoke   # every row at its smallest, on the CPU
"""

import argparse
import contextlib
import dataclasses
import json
import platform
import re
import statistics
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import equinox as eqx
import jax
import jax.random as jr
import numpy as np
import snake
import value_based
from _harness import (
    PUREJAXRL_CONFIG,
    Program,
    alternate,
    command_line,
    compile_program,
    final_return,
    import_purejaxrl,
    missing,
    purejaxrl_program,
    rejax_program,
    train_program,
)

import eqxrl
from eqxrl.training import describe_devices

# fmt: off
FULL = {
    "pairs": 2,
    "ppo_timesteps": 124_928,  # 244 of the config's 976 iterations
    "headline_seeds": 2048, "headline_timesteps": 61_440,  # 120 iterations
    "snake_envs": (4096, 16384), "snake_steps": 1000,
    "dqn_steps": 20_000, "iqn_steps": 5_000,
    "treasure_epochs": 100, "treasure_worlds": 1024, "treasure_world_epochs": 4,
    "sorrel_epochs": 10, "wide_envs": 512, "brax_eval_episodes": 16,
    "pqn_headline_steps": 500_000, "profile_iterations": 8,
}
SMOKE = {
    "pairs": 1, "ppo_timesteps": 1024, "headline_seeds": 4, "headline_timesteps": 1024,
    "snake_envs": (8,),  # one program: a second count only changes sizes
    "snake_steps": 8, "dqn_steps": 200, "iqn_steps": 200, "treasure_epochs": 1,
    "treasure_worlds": 4, "treasure_world_epochs": 1, "sorrel_epochs": 1,
    "wide_envs": 8, "brax_eval_episodes": 2,
    "pqn_headline_steps": 16_384,  # one chunk of time_to_greedy
    # The profiles trace the programs already timed (2 iterations): no new compile.
    "profile_iterations": 2,
}
# fmt: on
ROWS = (
    "ppo_cartpole",
    "snake",
    "value_based",
    "treasure_hunt",
    "brax",
    "pqn_headline",
    "memory",
)
# XLA:GPU's command buffers (CUDA graphs) with loops and conditionals added to its
# default kinds: a `lax.scan` runs as one graph instead of one launch per kernel per
# iteration and a host read of the loop's predicate. Parsed, and unused, off the GPU.
COMMAND_BUFFERS = {
    "xla_gpu_enable_command_buffer": (
        "FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,CONDITIONAL"
    )
}


def hlo_text_of(compiled) -> str | None:
    """The compiled program's optimized HLO (on a GPU, with its CUDA graphs as
    `command_buffer` computations)."""
    compiled = getattr(compiled, "compiled", compiled)  # Equinox wraps JAX's
    try:
        return compiled.as_text()
    except Exception:  # noqa: BLE001 - not every backend gives the text
        return None


def fingerprint_of(program: Program) -> int | None:
    """A hash of the compiled program's text (two programs traced under different
    switches must differ)."""
    text = hlo_text_of(program.compiled)
    return None if text is None else hash(text)


def op_names_of(compiled) -> dict[str, str]:
    """Each instruction of the compiled program's HLO -> the JAX name stack it came
    from (its `op_name` metadata, e.g. `jit(train)/while/body/dot_general`): what a
    profile's kernels (named by instruction) are grouped by."""
    pattern = re.compile(r'^\s*(?:ROOT )?%?([\w.\-]+) = .*?op_name="([^"]*)"', re.M)
    return dict(pattern.findall(hlo_text_of(compiled) or ""))


def memory_of(compiled) -> dict | None:
    """XLA's `memory_analysis()` of a compiled program, in bytes (`None` where the
    backend gives none)."""
    compiled = getattr(compiled, "compiled", compiled)
    try:
        analysis = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 - not every backend or jax version has it
        return None
    if analysis is None:
        return None
    names = ("argument", "output", "temp", "generated_code", "alias")
    sizes = {n: int(getattr(analysis, f"{n}_size_in_bytes", 0)) for n in names}
    sizes["total"] = sum(sizes[n] for n in names[:4]) - sizes["alias"]
    return sizes


def kernel_profile(program: Program, hlo_path: Path | None = None) -> dict:
    """Trace one run of `program` with `jax.profiler` and sum the device's kernel
    time: in all, by loop depth (how many `while/body` scopes the operation sits
    in: for PPO, 1 the iteration, 2 the rollout's steps and GAE, 3 the minibatch
    updates) and the largest operations. `device_busy_fraction` is the kernel time
    over the run's wall time: low where launches and host reads, not the
    kernels, take the time. With `hlo_path`, the program's HLO is written there: on
    a GPU it says which operations each `command_buffer` (CUDA graph) holds."""
    text, op_names = hlo_text_of(program.compiled), op_names_of(program.compiled)
    if hlo_path is not None and text is not None:
        hlo_path.write_text(text)
    program.run(0)  # one-time costs (allocations, loading) out of the trace
    folder = tempfile.mkdtemp(prefix="eqxrl-profile-")
    jax.profiler.start_trace(folder)
    try:
        seconds, _ = program.run(1)
    finally:
        jax.profiler.stop_trace()
    (path,) = Path(folder).rglob("*.xplane.pb")
    data = jax.profiler.ProfileData.from_file(str(path))
    by_depth: dict[int, float] = {}
    by_operation: dict[str, tuple[int, float]] = {}
    total_ns, kernels, stat_names = 0.0, 0, set()
    # A GPU's kernels are on its device plane; on the CPU (the smoke run) XLA's
    # thunks are on the host plane's XLA client line.
    planes = [p for p in data.planes if p.name.startswith("/device:")]
    lines = [line for plane in planes for line in plane.lines]
    if not planes:
        lines = [
            line
            for plane in data.planes
            for line in plane.lines
            if line.name.startswith("tf_XLA")
        ]
    per_line: dict[str, list[float]] = {}
    for line in lines:
        events = [e for e in line.events if not e.name.startswith("end: ")]
        per_line[line.name] = [len(events), sum(e.duration_ns for e in events) * 1e-9]
        # The device plane's derived lines (XLA modules and ops) span the kernels
        # of the stream lines: count the streams' events alone.
        if line.name.startswith(("XLA Modules", "XLA Ops", "TensorFlow")):
            continue
        for event in events:
            with warnings.catch_warnings():  # jaxlib's stats type has no __module__
                warnings.simplefilter("ignore", DeprecationWarning)
                stats = dict(event.stats)
            stat_names.update(stats)
            operation = str(stats.get("hlo_op") or event.name)
            scope = str(op_names.get(operation) or operation)
            depth = scope.count("while/body")
            total_ns += event.duration_ns
            kernels += 1
            by_depth[depth] = by_depth.get(depth, 0.0) + event.duration_ns
            key = f"{depth}: {scope[-120:]}"
            count, ns = by_operation.get(key, (0, 0.0))
            by_operation[key] = (count + 1, ns + event.duration_ns)
    largest = sorted(by_operation.items(), key=lambda item: -item[1][1])[:40]
    return {
        "wall_s": seconds,
        "kernel_s": total_ns * 1e-9,
        "kernels": kernels,
        "device_busy_fraction": total_ns * 1e-9 / seconds,
        "kernel_s_by_loop_depth": {d: ns * 1e-9 for d, ns in sorted(by_depth.items())},
        "largest_operations": {k: [n, ns * 1e-9] for k, (n, ns) in largest},
        "lines": per_line,
        "event_stats": sorted(stat_names),
    }


def compare(ours: Program, peer: Program | None, pairs: int) -> dict:
    """`ours` against `peer` (`None`: `ours` alone), alternating: the medians,
    best, ratios and compile times, and the last round's facts."""
    programs = {"ours": ours} if peer is None else {"ours": ours, "peer": peer}
    result = alternate(programs, pairs, unit=None)
    rates = result.rates("ours")
    facts = {
        f"{side}_{k}": v for side in programs for k, v in result.facts[side][-1].items()
    }
    report = {
        "eqxrl_per_s": statistics.median(rates),
        "eqxrl_best_per_s": max(rates),
        "eqxrl_compile_s": ours.compile_seconds,
        "eqxrl_memory": memory_of(ours.compiled),
        **facts,
    }
    if peer is not None:
        ratios = result.ratios("ours", "peer")
        report.update(
            peer_per_s=statistics.median(result.rates("peer")),
            peer_compile_s=peer.compile_seconds,
            ratio_median=statistics.median(ratios),
            ratio_best=max(ratios),
            ratios=ratios,
        )
    return report


# --------------------------------------------------------------------------------------
# 1. PPO on CartPole against PureJaxRL


def row(name: str, program: str, peer: str, skipped: str | None, **rest) -> dict:
    return {"row": name, "program": program, "unit": "env steps", "peer": peer,
            "skipped": skipped, **rest}  # fmt: skip


def eqxrl_ppo(
    timesteps: int,
    num_seeds: int,
    num_envs: int = 4,
    compiler_options: dict | None = None,
    throw: bool = True,
    **options,
) -> Program:
    ppo = eqxrl.PPO(
        env=eqxrl.envs.make("CartPole-v1"),
        num_envs=num_envs,
        num_steps=128,
        total_timesteps=timesteps,
        **options,
    )

    def train(ppo, keys):
        if num_seeds == 1:
            return ppo.train(keys, throw=throw)
        return eqx.filter_vmap(lambda key: ppo.train(key, throw=throw))(keys)

    def arguments(seed):
        key = jr.key(seed)
        return ppo, key if num_seeds == 1 else jr.split(key, num_seeds)

    def facts(output, seed) -> dict:
        return {
            "final_return": float(np.mean(final_return(output[1]["episode_return"])))
        }

    compiler_options = {**ppo.compiler_options, **(compiler_options or {})}
    function = eqx.filter_jit(train, compiler_options=compiler_options or None)
    work = num_seeds * ppo.num_iterations * ppo.num_envs * ppo.num_steps
    return compile_program(function, arguments, work, facts)


def purejaxrl_ppo(
    folder: Path, timesteps: int, num_seeds: int, compiler_options: dict | None = None
) -> Program:
    module = import_purejaxrl(folder / "ppo.py")
    config = {**PUREJAXRL_CONFIG, "TOTAL_TIMESTEPS": timesteps}
    program = purejaxrl_program(module, config, num_seeds, compiler_options)
    facts = program.facts
    program.facts = lambda out, seed: {"final_return": facts(out, seed)["final_return"]}
    return program


def row_ppo_cartpole(sizes: dict, options) -> list[dict]:
    why = missing("gymnax", "flax", "distrax", "optax")
    if why is None and options.purejaxrl is None:
        why = "--purejaxrl FOLDER (PureJaxRL's ppo.py and wrappers.py) not given"
    results, pairs = [], sizes["pairs"]
    for label, timesteps, seeds in (
        ("PPO CartPole, PureJaxRL's config, 1 seed", sizes["ppo_timesteps"], 1),
        (
            f"PPO CartPole, {sizes['headline_seeds']:,} seeds vmapped",
            sizes["headline_timesteps"],
            sizes["headline_seeds"],
        ),
    ):
        ours = plain = eqxrl_ppo(timesteps, seeds)
        peer = None if why else purejaxrl_ppo(options.purejaxrl, timesteps, seeds)
        name, peer_name = "ppo_cartpole", "PureJaxRL ppo.py"
        results.append(
            row(
                name,
                label,
                peer_name,
                why,
                steps_per_run=ours.work,
                **compare(ours, peer, pairs),
            )
        )
        if seeds == 1:
            # `train`'s divergence check is an `eqx.error_if` after every
            # iteration: a conditional, whose predicate XLA:GPU reads on the host.
            # What it costs where launches, not kernels, take the time.
            ours = eqxrl_ppo(timesteps, seeds, throw=False)
            label_ = f"{label}; eqxrl with throw=False (no divergence check)"
            results.append(
                row(name, label_, peer_name, why, **compare(ours, peer, pairs))
            )
        if options.command_buffers:
            # Each side with the option, against the peer as it ships.
            ours = eqxrl_ppo(timesteps, seeds, compiler_options=COMMAND_BUFFERS)
            label_ = f"{label}; eqxrl with command buffers"
            results.append(
                row(name, label_, peer_name, why, **compare(ours, peer, pairs))
            )
            if peer is not None:
                peer_with = purejaxrl_ppo(
                    options.purejaxrl, timesteps, seeds, COMMAND_BUFFERS
                )
                label_ = (
                    f"{label}; PureJaxRL with command buffers (as eqxrl) vs PureJaxRL"
                )
                comparison = compare(peer_with, peer, pairs)
                results.append(row(name, label_, peer_name, why, **comparison))
        if options.profile:
            # A few iterations of each side, traced: where the time goes.
            iterations = sizes["profile_iterations"]
            short = iterations * 4 * 128
            traced = plain if short == timesteps else eqxrl_ppo(short, seeds)
            profiles = {
                "eqxrl": kernel_profile(traced, options.out / f"hlo_eqxrl_{seeds}.txt")
            }
            if peer is not None:
                profiles["PureJaxRL"] = kernel_profile(
                    purejaxrl_ppo(options.purejaxrl, short, seeds),
                    options.out / f"hlo_purejaxrl_{seeds}.txt",
                )
            label_ = f"{label}, {iterations} iterations traced"
            results.append(row("profile", label_, peer_name, why, profiles=profiles))
    return results


# --------------------------------------------------------------------------------------
# 2. Snake against Jumanji


def snake_program(loop, num_envs: int, steps: int) -> Program:
    return compile_program(loop, lambda seed: (jr.key(seed),), num_envs * steps)


def row_snake(sizes: dict, options) -> list[dict]:
    why = missing("jumanji")
    results = []
    for num_envs in sizes["snake_envs"]:
        steps = sizes["snake_steps"]
        ours = snake_program(snake.eqxrl_loop(12, num_envs, steps), num_envs, steps)
        peer = None
        if why is None:
            peer = snake_program(
                snake.jumanji_loop(12, num_envs, steps), num_envs, steps
            )
        label = f"Snake 12x12, {num_envs:,} envs x {steps:,} steps"
        comparison = compare(ours, peer, sizes["pairs"])
        results.append(row("snake", label, "Jumanji Snake-v1", why, **comparison))
    return results


# --------------------------------------------------------------------------------------
# 3. DQN and IQN against rejax


def row_value_based(sizes: dict, options) -> list[dict]:
    why = missing("rejax", "gymnax", "flax", "distrax")
    results = []
    for name, make, steps in (
        ("DQN", value_based.eqxrl_dqn_on_rejax_settings, sizes["dqn_steps"]),
        ("IQN", value_based.eqxrl_iqn_on_rejax_settings, sizes["iqn_steps"]),
    ):
        algorithm = make(max(steps, 10_000))
        if algorithm.learning_starts >= steps:  # the smoke sizes: learn at once
            algorithm = dataclasses.replace(algorithm, learning_starts=steps // 2)
        algorithm = dataclasses.replace(algorithm, total_timesteps=steps)
        ours = train_program(algorithm, steps)
        peer = None if why else rejax_program(name, value_based.REJAX[name], steps)
        label, peer_name = (
            f"{name} CartPole, rejax's settings, {steps:,} steps",
            f"rejax {name}",
        )
        comparison = compare(ours, peer, sizes["pairs"])
        results.append(row("value_based", label, peer_name, why, **comparison))
        if options.command_buffers:
            ours = train_program(algorithm, steps, compiler_options=COMMAND_BUFFERS)
            label_ = f"{label}; eqxrl with command buffers"
            comparison = compare(ours, peer, sizes["pairs"])
            results.append(row("value_based", label_, peer_name, why, **comparison))
    return results


# --------------------------------------------------------------------------------------
# 4. Sorrel's treasure hunt


def sorrel_program(epochs: int) -> Program:
    import torch
    from sorrel.examples.treasurehunt.entities import EmptyEntity
    from sorrel.examples.treasurehunt.env import TreasurehuntEnv
    from sorrel.examples.treasurehunt.world import TreasurehuntWorld

    torch.multiprocessing.set_sharing_strategy("file_system")
    folder = tempfile.mkdtemp(prefix="sorrel-")

    def run(seed):
        np.random.seed(seed)
        torch.manual_seed(seed)
        config = {  # Sorrel's treasurehunt/main.py, fewer epochs
            "experiment": {
                "epochs": epochs,
                "max_turns": 100,
                "record_period": 50,
                "log_dir": Path(folder) / "logs",
            },
            "model": {
                "agent_vision_radius": 2,
                "epsilon_decay": 0.0005,
                "observation_spec": "rgb",
            },
            "world": {
                "height": 21,
                "width": 21,
                "gem_value": 10,
                "food_value": 5,
                "bone_value": -10,
                "spawn_prob": 0.005,
            },
        }
        world = TreasurehuntWorld(config=config, default_entity=EmptyEntity())
        env = TreasurehuntEnv(world, config)
        start = time.perf_counter()
        env.run_experiment(animate=False, logging=False, output_dir=Path(folder))
        return time.perf_counter() - start, None

    # run_experiment runs epochs + 1 episodes (range(epochs + 1)).
    return Program(run, epochs + 1)


def row_treasure_hunt(sizes: dict, options) -> list[dict]:
    why = missing("sorrel", "torch")
    results = []
    env = eqxrl.envs.make("TreasureHunt-v0")
    programs = (
        (1, sizes["treasure_epochs"]),
        (sizes["treasure_worlds"], sizes["treasure_world_epochs"]),
    )
    if sizes["smoke"]:
        # The code path; one world only changes sizes (multiagent.py's smoke run
        # trains Sorrel's one-world experiment).
        programs = programs[1:]
    for worlds, epochs in programs:
        learners = eqxrl.multiagent.Independent.from_sorrel(
            env, num_epochs=epochs, num_envs=worlds
        )
        ours = train_program(learners, worlds * epochs)
        peer = sorrel_program(sizes["sorrel_epochs"]) if why is None else None
        label = (
            f"Sorrel's experiment, {worlds:,} world(s) x {epochs} epochs of 100 turns"
        )
        peer_name = f"Sorrel 1.6.0, {sizes['sorrel_epochs']} epochs"
        comparison = compare(ours, peer, sizes["pairs"])
        results.append(
            row("treasure_hunt", label, peer_name, why, **comparison, unit="epochs")
        )
    return results


# --------------------------------------------------------------------------------------
# 5. Brax


def row_brax(sizes: dict, options) -> list[dict]:
    why = missing("brax", "mujoco")
    budget = "toy sizes" if sizes["smoke"] else "small budget"
    labels = {
        algo: f"{algo.upper()} inverted_pendulum, Brax's settings"
        + ("" if why else f" ({budget}), backend {options.brax_backend}")
        for algo in ("ppo", "sac")
    }
    if why is not None:
        return [
            row("brax", label, f"Brax {a.upper()}", why) for a, label in labels.items()
        ]
    import brax_trainers

    brax_trainers.provide_device_put_replicated()
    settings = argparse.Namespace(
        quick=sizes["smoke"],
        eval_episodes=sizes["brax_eval_episodes"],
        backend=options.brax_backend,
        warmup=1,
        pairs=options.brax_pairs,
    )
    results = []
    for algo, label in labels.items():
        peer = f"Brax {algo.upper()}"
        if time_left(options) is not None and time_left(options) < 60:
            results.append(row("brax", label, peer, "the run's time budget was spent"))
            continue
        s = brax_trainers.compare(settings, algo, "inverted_pendulum")
        results.append(
            row("brax", label, peer, None, steps_per_run=s["steps"],
                eqxrl_per_s=s["eqxrl_rate"], peer_per_s=s["brax_rate"],
                ratio_median=s["median_ratio"], ratio_best=s["best_ratio"],
                eqxrl_compile_s=s["eqxrl_compile"], peer_compile_s=s["brax_compile"],
                eqxrl_memory=None, eqxrl_final_returns=s["eqxrl_returns"],
                peer_final_returns=s["brax_returns"])
        )  # fmt: skip
    return results


# --------------------------------------------------------------------------------------
# 7. PQN's headline: the wall time to a greedy 475 on CartPole, against DQN


def row_pqn_headline(sizes: dict, options) -> list[dict]:
    import pqn

    env = eqxrl.envs.make("CartPole-v1")
    steps = sizes["pqn_headline_steps"]
    algorithms = {"PQN": eqxrl.PQN(env=env, total_timesteps=steps)}
    if not sizes["smoke"]:
        # DQN at its defaults compiles for minutes under the test suite's
        # --xla_cpu_use_fusion_emitters=false; both share time_to_greedy.
        algorithms["DQN"] = eqxrl.DQN(env=env, total_timesteps=steps)
    stop = lambda: time_left(options) is not None and time_left(options) < 30  # noqa: E731
    times = pqn.headline_times(algorithms, options.headline_seeds, stop)
    medians, ratio = pqn.median_seconds(times)
    label = f"seconds to a greedy {pqn.GREEDY_BAR:.0f} on CartPole-v1, defaults, "
    return [
        {"row": "pqn_headline", "program": f"{label}up to {steps:,} steps",
         "skipped": None, "runs": times, "median_seconds": medians,
         "dqn_over_pqn": ratio}
    ]  # fmt: skip


# --------------------------------------------------------------------------------------
# 6. Memory


def row_memory(results: list[dict]) -> list[dict]:
    stats = {}
    with contextlib.suppress(Exception):
        stats = jax.devices()[0].memory_stats() or {}
    rows = [
        {"row": "memory", "program": result["program"], "unit": "bytes",
         "device_bytes_limit": stats.get("bytes_limit"),
         **{f"{k}_bytes": v for k, v in result["eqxrl_memory"].items()}}
        for result in results
        if result.get("eqxrl_memory")
    ]  # fmt: skip
    why = "memory_analysis() gave nothing on this backend"
    return rows or [{"row": "memory", "program": "all", "skipped": why}]


# --------------------------------------------------------------------------------------
# The CPU-tuned tricks, on and off


def row_tricks(sizes: dict, options) -> list[dict]:
    gru = eqxrl.nn.GRUActorCritic.from_env
    programs = (
        ("PPO CartPole, PureJaxRL's config", 4, {}),
        (f"PPO CartPole, {sizes['wide_envs']} envs", sizes["wide_envs"], {}),
        ("GRU PPO CartPole, 1 sequence per minibatch", 4, {"network_factory": gru}),
    )
    if sizes["smoke"]:
        programs = programs[:1]  # the code path; the others only change sizes
    steps, num_envs = sizes["snake_steps"], sizes["snake_envs"][0]
    builders = [
        (label, lambda n=n, extra=extra: eqxrl_ppo(
            max(sizes["headline_timesteps"], 2 * n * 128), 1, num_envs=n, **extra))
        for label, n, extra in programs
    ] + [
        (f"Snake {num_envs:,} envs", lambda: snake_program(
            snake.eqxrl_loop(12, num_envs, steps), num_envs, steps))
    ]  # fmt: skip
    results = []
    for label, build in builders:
        with eqxrl.algorithms.cpu_speed_tricks(True):
            on = build()
        with eqxrl.algorithms.cpu_speed_tricks(False):
            off = build()
        label = label + ": CPU tricks on (eqxrl) vs off (peer)"
        differ = fingerprint_of(on) != fingerprint_of(off)
        comparison = compare(on, off, sizes["pairs"])
        results.append(
            row("tricks", label, "the same, tricks off", None,
                programs_differ=differ, **comparison)
        )  # fmt: skip
    return results


# --------------------------------------------------------------------------------------


def markdown(report: dict) -> str:
    size = "smoke sizes" if report["smoke"] else "full sizes"
    lines = [
        f"Device: {report['device']}; jax {report['jax']}; {size}; {report['date']}.",
        "",
        "| row | program | eqxrl /s | peer | peer /s | median ratio | best ratio "
        "| compile eqxrl / peer (s) | eqxrl memory (MiB) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["results"]:
        if r["row"] in ("memory", "profile", "pqn_headline"):
            continue
        if "error" in r:
            lines.append(f"| {r['row']} | failed: {r['error']} |||||||")
        elif "eqxrl_per_s" not in r:
            lines.append(
                f"| {r['row']} | {r['program']} | | {r.get('peer', '')} | skipped: "
                f"{r['skipped']} ||||"
            )
        else:
            peer = r.get("peer_per_s")
            memory = r.get("eqxrl_memory")
            cells = (
                [f"{peer:,.0f}", f"{r['ratio_median']:.2f}x", f"{r['ratio_best']:.2f}x"]
                if peer
                else [f"skipped: {r['skipped']}", "", ""]
            )
            cells.append(
                f"{r['eqxrl_compile_s']:.1f} / "
                + (f"{r['peer_compile_s']:.1f}" if peer else "-")
            )
            cells.append(f"{memory['total'] / 2**20:,.1f}" if memory else "")
            lines.append(
                f"| {r['row']} | {r['program']} | {r['eqxrl_per_s']:,.0f} {r['unit']} "
                f"| {r['peer']} | " + " | ".join(cells) + " |"
            )
    profiles = [r for r in report["results"] if "profiles" in r]
    if profiles:
        lines += [
            "",
            "| profile | side | wall s | kernel s | busy | kernels | kernel s by loop "
            "depth |",
            "|---|---|---|---|---|---|---|",
        ]
    for r in profiles:
        for side, p in r["profiles"].items():
            depths = ", ".join(
                f"{depth}: {seconds:.3f}"
                for depth, seconds in p["kernel_s_by_loop_depth"].items()
            )
            lines.append(
                f"| {r['program']} | {side} | {p['wall_s']:.3f} | {p['kernel_s']:.3f} "
                f"| {p['device_busy_fraction']:.0%} | {p['kernels']:,} | {depths} |"
            )
    for r in report["results"]:
        if r["row"] == "pqn_headline" and "median_seconds" in r:
            medians = ", ".join(
                f"{name} {seconds:.2f} s" if seconds is not None else f"{name} -"
                for name, seconds in r["median_seconds"].items()
            )
            ratio = r["dqn_over_pqn"]
            lines += [
                "",
                f"pqn_headline: {r['program']}: median {medians}"
                + (f"; DQN / PQN {ratio:.1f}x" if ratio else ""),
            ]
    memory_rows = [r for r in report["results"] if r["row"] == "memory"]
    if memory_rows:
        lines += [
            "",
            "| program (eqxrl) | arguments | outputs | temporaries | code | total "
            "(MiB) |",
            "|---|---|---|---|---|---|",
        ]
    for r in memory_rows:
        if "total_bytes" not in r:
            reason = r.get("skipped") or r.get("error")
            lines.append(f"| {r.get('program', 'all')} | {reason} |||||")
            continue
        kinds = ("argument", "output", "temp", "generated_code", "total")
        cells = " | ".join(f"{r[f'{k}_bytes'] / 2**20:,.1f}" for k in kinds)
        lines.append(f"| {r['program']} | {cells} |")
    return "\n".join(lines) + "\n"


def time_left(options) -> float | None:
    """Seconds left of `--budget-s` (`None`: no budget)."""
    deadline = getattr(options, "deadline", None)
    return None if deadline is None else deadline - time.perf_counter()


def main(argv: list[str] | None = None) -> dict:
    options = command_line(
        __doc__,
        smoke={"action": "store_true", "help": "smallest sizes"},
        out={"type": Path, "help": "output folder (default: a new one in /tmp)"},
        purejaxrl=Path,
        rows=(*ROWS, "tricks"),
        pairs=int,
        no_command_buffers={
            "dest": "command_buffers",
            "action": "store_false",
            "help": "leave out rows 1 and 3's runs with COMMAND_BUFFERS",
        },
        no_profile={
            "dest": "profile",
            "action": "store_false",
            "help": "leave out row 1's kernel profiles",
        },
        brax_backend="spring",
        brax_pairs=1,
        headline_seeds={"type": int, "help": "pqn_headline's seeds"},
        budget_s={
            "type": float,
            "help": "start no further row after this many seconds (it is skipped)",
        },
    ).parse_args(argv)
    sizes = {**(SMOKE if options.smoke else FULL), "smoke": options.smoke}
    if options.pairs is not None:
        sizes["pairs"] = options.pairs
    if options.headline_seeds is None:
        options.headline_seeds = 1 if options.smoke else 2
    if options.out is None:
        options.out = Path(tempfile.mkdtemp(prefix="eqxrl-gpu-"))
    options.out.mkdir(parents=True, exist_ok=True)
    report = {
        "device": describe_devices(),
        "device_kind": jax.devices()[0].device_kind,
        "jax": jax.__version__,
        "python": platform.python_version(),
        "smoke": options.smoke,
        "sizes": sizes,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "results": [],
    }
    print(f"{report['device']}, jax {report['jax']}", flush=True)
    builders = {
        "ppo_cartpole": row_ppo_cartpole,
        "snake": row_snake,
        "value_based": row_value_based,
        "treasure_hunt": row_treasure_hunt,
        "brax": row_brax,
        "pqn_headline": row_pqn_headline,
        "tricks": row_tricks,
    }
    started = time.perf_counter()
    options.deadline = None
    if options.budget_s is not None:
        options.deadline = started + options.budget_s
    for name in options.rows:
        start = time.perf_counter()
        try:
            if options.budget_s is not None and start - started > options.budget_s:
                why = f"the run's time budget ({options.budget_s:.0f} s) was spent"
                results = [{"row": name, "program": "all", "skipped": why}]
            elif name == "memory":
                results = row_memory(report["results"])
            else:
                results = builders[name](sizes, options)
        except Exception as error:  # noqa: BLE001 - record it, go on to the next row
            traceback.print_exc()
            results = [{"row": name, "error": f"{type(error).__name__}: {error}"}]
        for result in results:
            result["row_seconds"] = time.perf_counter() - start
            print(json.dumps(result, default=str), flush=True)
        report["results"].extend(results)
        (options.out / "gpu.json").write_text(json.dumps(report, indent=1, default=str))
        (options.out / "gpu.md").write_text(markdown(report))
    print(markdown(report))
    print(f"wrote {options.out / 'gpu.json'} and {options.out / 'gpu.md'}")
    return report


if __name__ == "__main__":
    main()
