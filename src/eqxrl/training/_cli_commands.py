"""`eqxrl eval`, `eqxrl export`, `eqxrl plot` and `eqxrl list`: the commands that
read what `eqxrl train` wrote."""

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..algorithms import algorithm_names
from ..envs import registered_names
from ._checkpoint import (
    CheckpointError,
    load_policy,
    load_training_state,
    read_checkpoint_header,
    resolve_checkpoint,
)
from ._cli_parser import CommandError, Parser
from ._config import algorithm_from_config

# --------------------------------------------------------------------------------------
# eqxrl eval
# --------------------------------------------------------------------------------------


def load_policies(
    path: Path, deterministic: bool
) -> tuple[Path, dict[str, Any], Any, list[Any]]:
    """A checkpoint, policy file or run folder's policies (one per seed of a
    `--seeds` run): `(resolved path, header, environment, policies)`."""
    try:
        if (
            path.is_dir()
            and (path / "policy.eqx").is_file()
            and not list((path / "checkpoints").glob("checkpoint-*.eqx"))
        ):
            path = path / "policy.eqx"
        path = resolve_checkpoint(path)
        header = read_checkpoint_header(path)
        algorithm = algorithm_from_config(header["config"])
    except (CheckpointError, ValueError) as error:
        raise CommandError(str(error)) from None
    batch_shape = header.get("batch_shape", [])
    try:
        if header.get("kind") == "policy":
            policies = [load_policy(path, deterministic=deterministic)]
        elif batch_shape:
            import equinox as eqx
            import jax

            state, algorithm, _ = load_training_state(path)
            policies = [
                algorithm.policy(
                    jax.tree.map(lambda x, i=i: x[i] if eqx.is_array(x) else x, state),
                    deterministic,
                )
                for i in range(batch_shape[0])
            ]
        else:
            state, algorithm, _ = load_training_state(path)
            policies = [algorithm.policy(state, deterministic)]
    except CheckpointError as error:
        raise CommandError(str(error)) from None
    return path, header, algorithm.env, policies


def eval_command(argv: Sequence[str]) -> int:
    parser = Parser(
        prog="eqxrl eval",
        description="Evaluate a checkpoint or an exported policy: episodes vmapped in "
        "one compiled call; prints the mean, standard deviation and percentiles of "
        "the return, optionally writes a GIF (environments with render).",
    )
    parser.add_argument(
        "checkpoint",
        help="a checkpoint file, a policy.eqx, or a run folder (its latest checkpoint)",
    )
    parser.add_argument(
        "--episodes", type=int, default=32, metavar="N", help="episodes (default: 32)"
    )
    parser.add_argument(
        "--stochastic",
        action="store_true",
        help="sample actions instead of acting greedily",
    )
    parser.add_argument("--seed", type=int, default=0, help="PRNG seed (default: 0)")
    parser.add_argument(
        "--max-steps",
        type=int,
        default=None,
        metavar="N",
        help="cap on episode length (default: the environment's time limit)",
    )
    parser.add_argument("--gif", metavar="FILE", help="write a GIF of episodes here")
    parser.add_argument(
        "--gif-episodes",
        type=int,
        default=1,
        metavar="N",
        help="episodes in the GIF (default: 1)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error("--episodes must be at least 1.")

    import jax.numpy as jnp
    import jax.random as jr

    from ._evaluation import (
        EvaluationResult,
        evaluate,
        no_render_message,
        record_episodes,
        renderer,
        write_gif as write_gif_file,
    )

    deterministic = not args.stochastic
    key = jr.key(args.seed)
    path, header, env, policies = load_policies(Path(args.checkpoint), deterministic)
    if args.gif and renderer(env) is None:
        raise CommandError(f"--gif: {no_render_message(env)} Drop --gif.")

    results = [
        evaluate(
            policy,
            env,
            jr.fold_in(key, i),
            num_episodes=args.episodes,
            max_steps=args.max_steps,
        )
        for i, policy in enumerate(policies)
    ]
    combined = EvaluationResult(
        returns=jnp.stack([r.returns for r in results]),
        lengths=jnp.stack([r.lengths for r in results]),
        agent_returns=(
            None
            if results[0].agent_returns is None
            else jnp.stack([r.agent_returns for r in results])
        ),
    )
    summary = combined.summary()
    report = {
        "checkpoint": str(path),
        "iteration": header.get("metadata", {}).get("iteration"),
        "deterministic": deterministic,
        **summary,
    }
    if len(results) > 1:
        report["per_seed_return_mean"] = [r.summary()["return_mean"] for r in results]
    if args.gif:
        frames = record_episodes(
            policies[0],
            env,
            jr.fold_in(key, 10_000),
            num_episodes=args.gif_episodes,
            max_steps=args.max_steps,
        )
        write_gif_file(args.gif, frames)
        report["gif"] = args.gif
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        where = (
            "" if report["iteration"] is None else f" (iteration {report['iteration']})"
        )
        print(
            f"{path}{where}, {int(summary['episodes'])} "
            f"{'greedy' if deterministic else 'stochastic'} episodes:"
        )
        print(
            f"  return {summary['return_mean']:.4g} +- {summary['return_std']:.3g} "
            f"(min {summary['return_min']:.4g}, p25 {summary['return_p25']:.4g}, "
            f"median {summary['return_p50']:.4g}, p75 {summary['return_p75']:.4g}, "
            f"max {summary['return_max']:.4g}); mean length "
            f"{summary['length_mean']:.4g}"
        )
        agents = sorted(k for k in summary if k.startswith("agent_return_mean_"))
        if agents:
            means = ", ".join(
                f"agent {k.rsplit('_', 1)[1]} {summary[k]:.4g}" for k in agents
            )
            print(f"  (the return is the agents' total) per agent: {means}")
        if "gif" in report:
            print(f"  wrote {args.gif}")
    return 0


# --------------------------------------------------------------------------------------
# eqxrl plot / list
# --------------------------------------------------------------------------------------


def plot_command(argv: Sequence[str]) -> int:
    parser = Parser(
        prog="eqxrl plot",
        description="Plot learning curves (metrics.csv) of one or several runs into "
        "one PNG; several seeds of a run show as a shaded band.",
    )
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run folders")
    parser.add_argument(
        "--out",
        metavar="FILE",
        help="the PNG (default: RUN_DIR/curve.png for one run, comparison.png for "
        "several)",
    )
    parser.add_argument(
        "--metric", default="episode_return", help="column (default: episode_return)"
    )
    parser.add_argument(
        "--x",
        default="env_steps",
        choices=("env_steps", "iteration", "time"),
        help="x axis (default: env_steps)",
    )
    parser.add_argument(
        "--smooth",
        type=int,
        default=None,
        metavar="N",
        help="trailing-mean window in iterations (default: 1/50 of the run)",
    )
    parser.add_argument(
        "--labels", help="comma-separated legend entries (default: folder names)"
    )
    args = parser.parse_args(argv)
    from ._plots import plot_runs

    labels = args.labels.split(",") if args.labels else None
    if args.out is None:
        if len(args.runs) == 1:
            out = Path(args.runs[0]) / "curve.png"
        else:
            out = Path("comparison.png")
    else:
        out = Path(args.out)
    try:
        path = plot_runs(
            args.runs,
            out,
            metric=args.metric,
            x=args.x,
            labels=labels,
            smooth=args.smooth,
        )
    except (FileNotFoundError, ValueError, ImportError) as error:
        raise CommandError(str(error)) from None
    print(f"wrote {path}")
    return 0


def list_command(argv: Sequence[str]) -> int:
    parser = Parser(prog="eqxrl list", description="List algorithms and environments.")
    parser.parse_args(argv)
    print("algorithms:   " + ", ".join(algorithm_names()))
    print("environments: " + ", ".join(registered_names()))
    return 0


def export_command(argv: Sequence[str]) -> int:
    parser = Parser(
        prog="eqxrl export",
        description="Export a trained policy to ONNX or StableHLO, to run without "
        "eqxrl (onnxruntime on a robot's computer, or jax.export): one batched "
        "function of raw observations, the normalizer, the greedy or sampled choice "
        "and the environment's action wrappers folded in; a JSON file beside it "
        "names its inputs and outputs. The file's actions are then checked against "
        "eqxrl's on random observations.",
    )
    parser.add_argument(
        "checkpoint",
        help="a checkpoint file, a policy.eqx, or a run folder (its latest checkpoint)",
    )
    parser.add_argument(
        "--format",
        choices=("onnx", "stablehlo"),
        default="onnx",
        help="onnx (default; needs the `export` extra) or stablehlo",
    )
    parser.add_argument(
        "--out",
        metavar="FILE",
        help="the file to write (default: policy.onnx or policy.stablehlo in the run "
        "folder, or beside the checkpoint)",
    )
    parser.add_argument(
        "--stochastic",
        action="store_true",
        help="export the sampling policy (StableHLO only) instead of the greedy one",
    )
    parser.add_argument(
        "--seed-index",
        type=int,
        default=0,
        metavar="I",
        help="which seed of a --seeds run to export (default: 0)",
    )
    parser.add_argument(
        "--check",
        type=int,
        default=10_000,
        metavar="N",
        help="random observations to check the file's actions on (default: 10000; "
        "0 skips the check)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(argv)
    if args.check < 0:
        parser.error("--check must be at least 0.")

    import jax.random as jr

    from .._export import ExportError, check_export, export_policy

    path, _, env, policies = load_policies(
        Path(args.checkpoint), deterministic=not args.stochastic
    )
    if not 0 <= args.seed_index < len(policies):
        raise CommandError(
            f"--seed-index {args.seed_index}: this run has {len(policies)} seed(s)."
        )
    policy = policies[args.seed_index]
    suffix = {"onnx": ".onnx", "stablehlo": ".stablehlo"}[args.format]
    if args.out is not None:
        out = Path(args.out)
    else:
        folder = (
            path.parent.parent if path.parent.name == "checkpoints" else path.parent
        )
        out = folder / f"policy{suffix}"
    try:
        metadata = export_policy(policy, out, args.format, env=env)
        difference = (
            check_export(out, policy, env, jr.key(0), args.check)
            if args.check
            else None
        )
    except ExportError as error:
        raise CommandError(str(error)) from None
    report = {
        "checkpoint": str(path),
        "file": str(out),
        "description": f"{out}.json",
        "format": args.format,
        "inputs": metadata["inputs"],
        "outputs": metadata["outputs"],
        "checked_observations": args.check,
        "max_abs_difference": difference,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        names = ", ".join(entry["name"] for entry in metadata["inputs"])
        print(f"wrote {out} ({args.format}; inputs {names}) and {out}.json")
        if difference is not None:
            print(
                f"  checked on {args.check} random observations: largest difference "
                f"from eqxrl's actions {difference:.3g}"
            )
    return 0
