"""The speed guard: the working tree against an earlier commit, side by side.

`make bench-check` times four workloads (`ppo-contract`, `ppo-wide`, `dqn`, `snake`:
`--workloads`) with the tree's `src/` and with `--base`'s (default: the upstream, else
`HEAD`), each side in a process of its own, alternating for `--pairs` rounds (each
process: the best of `--repeats` runs), and warns where a median ratio tree/base falls
more than 3% below 1. README: "The speed guard".

    .venv/bin/python benchmarks/bench_check.py --base main~3 --pairs 3 --workloads snake
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from _harness import (
    child_json,
    command_line,
    compile_program,
    cpu_name,
    lowered_program,
)

REPOSITORY = Path(__file__).resolve().parent.parent
WORKLOADS = ("ppo-contract", "ppo-wide", "dqn", "snake")
DROP = 0.03


def _measure(workload: str, repeats: int, quick: bool) -> dict[str, float]:
    """Steps per second (the best of `repeats` timed runs after a first one) and
    compile seconds of one workload, in this process (`quick`: toy sizes, to check
    that the script works)."""
    import equinox as eqx
    import jax.random as jr

    sys.path.insert(0, str(REPOSITORY / "benchmarks"))
    if workload in ("ppo-contract", "ppo-wide"):
        from ppo_cartpole import make_ppo

        ppo = make_ppo(workload.removeprefix("ppo-"), 4096 if quick else None)
        program = lowered_program(ppo)
    elif workload == "dqn":
        from value_based import eqxrl_dqn_on_rejax_settings

        dqn = eqxrl_dqn_on_rejax_settings(6_000 if quick else 50_000)
        train = eqx.filter_jit(
            lambda algorithm, key: algorithm.train(key),
            compiler_options=dqn.compiler_options,
        )
        steps = dqn.num_iterations * dqn.steps_per_iteration
        program = compile_program(train, lambda seed: (dqn, jr.key(seed)), steps)
    elif workload == "snake":
        from snake import eqxrl_loop

        num_envs, num_steps = (64, 16) if quick else (1024, 2048)
        loop = eqxrl_loop(10, num_envs, num_steps)
        program = compile_program(
            loop, lambda seed: (jr.key(seed),), num_envs * num_steps
        )
    else:
        raise ValueError(f"unknown workload {workload!r}; choose from {WORKLOADS}")
    # Snake's runs are short (half a second) and this 2-core VM's speed for them is
    # bimodal (1.8M or 3.9M steps/s, whatever the code): more runs find the fast mode.
    runs = repeats * 5 if workload == "snake" else repeats
    program.run(0)
    best = min(program.run(seed)[0] for seed in range(1, runs + 1))
    return {
        "steps_per_second": program.work / best,
        "compile_seconds": program.compile_seconds,
    }


def _worker(workloads: list[str], repeats: int, quick: bool) -> None:
    import eqxrl

    results = {"eqxrl": eqxrl.__file__}
    for workload in workloads:
        results[workload] = _measure(workload, repeats, quick)
    print("RESULT " + json.dumps(results), flush=True)


def _git(*arguments: str) -> str:
    return subprocess.run(
        ["git", *arguments], cwd=REPOSITORY, check=True, capture_output=True, text=True
    ).stdout.strip()


def _default_base() -> str:
    try:
        return _git("rev-parse", "--verify", "-q", "@{upstream}")
    except subprocess.CalledProcessError:
        return _git("rev-parse", "HEAD")


def _export_source(commit: str, folder: Path) -> Path:
    """`commit`'s `src/` written under `folder`; returns the folder to import from."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit, "src"],
        cwd=REPOSITORY,
        check=True,
        capture_output=True,
    ).stdout
    archive_path = folder / "src.tar"
    archive_path.write_bytes(archive)
    with tarfile.open(archive_path) as tar:
        tar.extractall(folder, filter="data")
    return folder / "src"


def _run_side(source: Path, workloads: list[str], repeats: int, quick: bool) -> dict:
    environment = dict(os.environ, PYTHONPATH=str(source))
    command = [
        __file__,
        "--worker",
        "--repeats",
        str(repeats),
        "--workloads",
        *workloads,
        *(["--quick"] if quick else []),
    ]
    result = child_json(command, environment, prefix="RESULT ")
    if not result["eqxrl"].startswith(str(source)):
        raise RuntimeError(f"the worker imported {result['eqxrl']}, not {source}")
    return result


def main() -> None:
    args = command_line(
        __doc__,
        base={"help": "commit to compare against"},
        pairs=5,
        repeats=2,
        workloads=WORKLOADS,
        quick={
            "action": "store_true",
            "help": "toy sizes: check that the script works",
        },
        worker={"action": "store_true", "help": argparse.SUPPRESS},
    ).parse_args()
    if args.worker:
        _worker(args.workloads, args.repeats, args.quick)
        return

    base = _git("rev-parse", args.base or _default_base())
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no", "--", "src"))
    head = _git("rev-parse", "--short", "HEAD")
    cpu = cpu_name()
    print(
        f"bench-check: tree ({head}{' + uncommitted changes' if dirty else ''}) vs "
        f"base {base[:7]}, {args.pairs} pairs, best of {args.repeats} runs per "
        f"process; CPU: {cpu}",
        flush=True,
    )
    tree_source = REPOSITORY / "src"
    results: dict[str, list[dict]] = {"tree": [], "base": []}
    with tempfile.TemporaryDirectory(prefix="eqxrl-bench-check-") as folder:
        base_source = _export_source(base, Path(folder))
        sides = {"tree": tree_source, "base": base_source}
        for pair in range(args.pairs):
            order = ("tree", "base") if pair % 2 == 0 else ("base", "tree")
            for side in order:
                results[side].append(
                    _run_side(sides[side], args.workloads, args.repeats, args.quick)
                )
            ratios = [
                results["tree"][-1][w]["steps_per_second"]
                / results["base"][-1][w]["steps_per_second"]
                for w in args.workloads
            ]
            print(
                f"  pair {pair + 1}: "
                + ", ".join(f"{w} {r:.3f}x" for w, r in zip(args.workloads, ratios)),
                flush=True,
            )
    print(
        f"\n{'workload':>13} {'tree steps/s':>13} {'base steps/s':>13} "
        f"{'median':>7} {'best':>6} {'compile tree/base s':>20}"
    )
    drops = []
    for workload in args.workloads:
        tree = [r[workload]["steps_per_second"] for r in results["tree"]]
        base_rates = [r[workload]["steps_per_second"] for r in results["base"]]
        ratios = [t / b for t, b in zip(tree, base_rates)]
        median = statistics.median(ratios)
        compiles = [
            statistics.median(r[workload]["compile_seconds"] for r in results[side])
            for side in ("tree", "base")
        ]
        print(
            f"{workload:>13} {statistics.median(tree):13,.0f} "
            f"{statistics.median(base_rates):13,.0f} {median:6.3f}x "
            f"{max(ratios):5.3f}x {compiles[0]:9.1f} / {compiles[1]:.1f}"
        )
        if median < 1.0 - DROP:
            drops.append(workload)
    if drops:
        print(
            f"\nSLOWER by more than {DROP:.0%}: {', '.join(drops)}. Fix it, or justify "
            "it in the CHANGELOG."
        )
    else:
        print(f"\nNo workload slower by more than {DROP:.0%} (median of the pairs).")


if __name__ == "__main__":
    main()
