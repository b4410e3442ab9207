"""The `eqxrl` command: `main`, which dispatches to `train`, `eval`, `export`, `plot`
and `list`, and `eqxrl train` itself. Its flags come from the algorithm's fields, the
Trainer's, a few run options of its own, and the options that algorithms and
multi-agent wrappers register (`eqxrl.algorithms.command_line_options`)."""

import argparse
import difflib
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..algorithms import (
    AbstractAlgorithm,
    CommandLineOption,
    algorithm_names,
    command_line_options,
)
from ..envs import AbstractEnvironment, make, num_agents_of, registered_names
from ..multiagent import Independent
from ._checkpoint import CheckpointError
from ._cli_commands import eval_command, export_command, list_command, plot_command
from ._cli_config import merge_options, read_config_file
from ._cli_parser import (
    CommandError,
    Parser,
    argument_type,
    field_help,
    field_metavar,
    settable,
)
from ._cli_run import (
    LOGGERS,
    device_mesh,
    env_options,
    initialize_distributed,
    make_loggers,
)
from ._config import ConfigField, algorithm_class, config_fields, flag_name
from ._device import _bytes, _pick_num_envs

# Trainer fields that are flags of `eqxrl train` (the others are set by the CLI).
_TRAINER_FLAGS = (
    "chunk_size",
    "checkpoint_every",
    "keep_checkpoints",
    "eval_every",
    "eval_episodes",
    "eval_deterministic",
    "gif_episodes",
    "num_seeds",
)
# Options of `eqxrl train` that are neither algorithm nor Trainer fields, nor
# registered options (`command_line_options()`).
_RUN_OPTIONS = (
    "env",
    "env_option",
    "algo",
    "seed",
    "out",
    "resume",
    "log",
    "wandb_project",
    "devices",
    "split",
    "distributed",
    "share_parameters",
)


def _trainer_fields() -> list[ConfigField]:
    from ._trainer import Trainer

    return [f for f in config_fields(Trainer) if f.name in _TRAINER_FLAGS]


def _train_parser(algo: str, fields: list[ConfigField]) -> Parser:
    parser = Parser(
        prog="eqxrl train",
        description=(
            "Train an algorithm on a registered environment, with progress, logs, "
            "checkpoints (exact resume), evaluation and a learning curve. Writes "
            "OUT/checkpoints/, OUT/metrics.csv, OUT/policy.eqx, OUT/curve.png, "
            "OUT/config.json and OUT/summary.json. Every hyperparameter of the "
            f"algorithm ({algo}) is a flag; `--algo NAME --help` lists another's."
        ),
    )
    parser.add_argument(
        "env",
        nargs="?",
        default=argparse.SUPPRESS,
        help=f"environment id, one of: {', '.join(registered_names())}",
    )
    run = parser.add_argument_group("run")
    run.add_argument(
        "--env-option",
        action="append",
        metavar="KEY=VALUE",
        default=argparse.SUPPRESS,
        help="keyword argument for eqxrl.envs.make(ENV, ...), e.g. "
        "max_episode_steps=200 (repeatable)",
    )
    run.add_argument(
        "--algo",
        default=argparse.SUPPRESS,
        choices=algorithm_names(),
        help="the algorithm (default: ppo)",
    )
    run.add_argument(
        "--config",
        metavar="FILE",
        help="options from a TOML or YAML file (flags given here override it)",
    )
    run.add_argument(
        "--seed",
        type=argument_type(ConfigField("seed", "int", 0, False)),
        default=argparse.SUPPRESS,
        metavar="S",
        help="the run's seed (default: 0)",
    )
    run.add_argument(
        "--out",
        metavar="DIR",
        default=argparse.SUPPRESS,
        help="the run folder (default: runs/ENV-ALGO-seedS)",
    )
    run.add_argument(
        "--resume",
        action="store_true",
        default=argparse.SUPPRESS,
        help="continue from the latest checkpoint in OUT/checkpoints/ (start from "
        "scratch if there is none); the hyperparameters must be the same",
    )
    run.add_argument(
        "--log",
        metavar="BACKENDS",
        default=argparse.SUPPRESS,
        help=f"comma-separated logging backends among {', '.join(LOGGERS)} "
        "(default: console,csv; wandb honours WANDB_MODE, e.g. offline)",
    )
    run.add_argument(
        "--wandb-project",
        metavar="NAME",
        default=argparse.SUPPRESS,
        help="the Weights & Biases project (default: eqxrl)",
    )
    run.add_argument(
        "--devices",
        metavar="N|all",
        default=argparse.SUPPRESS,
        help="train over N devices (all: every device, of every process with "
        "--distributed) as one program (default: one device)",
    )
    run.add_argument(
        "--split",
        choices=("envs", "seeds"),
        default=argparse.SUPPRESS,
        help="what --devices splits: the environments (envs) or, with --num-seeds, "
        "the seeds (default: seeds when --num-seeds divides over the devices, else "
        "envs)",
    )
    run.add_argument(
        "--distributed",
        action="store_true",
        default=argparse.SUPPRESS,
        help="call jax.distributed.initialize() first (one process per host; it "
        "finds the cluster on SLURM, TPU pods and others); only process 0 writes "
        "logs",
    )
    run.add_argument(
        "--share-parameters",
        action="store_true",
        default=argparse.SUPPRESS,
        help="multi-agent environments: one network for all agents, the agent index "
        "as an input (default: one network per agent, eqxrl.multiagent.Independent)",
    )
    for option in command_line_options():
        run.add_argument(
            option.flag,
            choices=option.choices,
            default=argparse.SUPPRESS,
            help=option.help,
        )
    trainer = parser.add_argument_group("trainer")
    for field in _trainer_fields():
        trainer.add_argument(
            f"--{flag_name(field.name)}",
            dest=field.name,
            type=argument_type(field),
            default=argparse.SUPPRESS,
            metavar=field_metavar(field),
            help=field_help(field),
        )
    group = parser.add_argument_group(f"{algo} hyperparameters")
    for field in settable(fields):
        auto = field.name == "num_envs"
        group.add_argument(
            f"--{flag_name(field.name)}",
            dest=field.name,
            type=argument_type(field, allow_auto=auto),
            default=argparse.SUPPRESS,
            metavar="N|auto" if auto else field_metavar(field),
            help=field_help(
                field,
                "; `auto`: the largest power of two whose compiled program fits "
                "the free memory"
                if auto
                else "",
            ),
        )
    return parser


def _train(argv: Sequence[str]) -> int:
    # First pass: which algorithm (its flags depend on it) and which config file.
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--algo")
    pre.add_argument("--config")
    pre.add_argument("--distributed", action="store_true")
    known, _ = pre.parse_known_args(argv)
    file_options = read_config_file(known.config) if known.config else {}
    if known.distributed or file_options.get("distributed"):
        # Before anything touches a device: JAX's backends start with it.
        initialize_distributed()
    algo = known.algo or file_options.get("algo") or "ppo"
    try:
        cls = algorithm_class(str(algo))
    except ValueError as error:
        raise CommandError(str(error)) from None
    fields = config_fields(cls)
    parser = _train_parser(str(algo), fields)
    options = vars(parser.parse_args(argv))

    trainer_fields = {f.name: f for f in _trainer_fields()}
    registered = {option.name: option for option in command_line_options()}
    merged = merge_options(
        file_options,
        {k: v for k, v in options.items() if k != "config"},
        {**trainer_fields, **{f.name: f for f in fields}},
        (*_RUN_OPTIONS, *registered),
        known.config,
    )

    env_id = merged.pop("env", None)
    if env_id is None:
        parser.error("the environment id ENV is required (e.g. CartPole-v1).")
    merged.pop("algo", None)
    seed = int(merged.pop("seed", 0))
    resume = bool(merged.pop("resume", False))
    out = Path(merged.pop("out", f"runs/{env_id}-{algo}-seed{seed}"))
    log = str(merged.pop("log", "console,csv"))
    devices = merged.pop("devices", None)
    split = merged.pop("split", None)
    merged.pop("distributed", None)
    share_parameters = bool(merged.pop("share_parameters", False))
    wandb_project = str(merged.pop("wandb_project", "eqxrl"))
    trainer_options = {k: merged.pop(k) for k in list(merged) if k in trainer_fields}
    env_option = merged.pop("env_option", [])
    given = {
        name: value
        for name in registered
        if (value := merged.pop(name, None)) is not None
    }
    # What is left are the algorithm's keyword arguments; options such as PPO's
    # `--network` change them.
    for name, value in given.items():
        configure = registered[name].configure
        if configure is not None:
            try:
                merged = configure(value, cls, merged)
            except ValueError as error:
                raise CommandError(str(error)) from None

    env_kwargs = env_options(env_option)
    try:
        env = make(str(env_id), **env_kwargs)
    except (ValueError, TypeError) as error:
        raise CommandError(f"environment {env_id}: {error}") from None
    missing = [f.name for f in fields if f.required and f.kind != "environment"]
    missing = [name for name in missing if name not in merged]
    if missing:
        raise CommandError(
            f"{cls.__name__} needs {', '.join('--' + flag_name(m) for m in missing)}."
        )
    run_options = {"env": str(env_id), "share_parameters": share_parameters, **given}

    def build(num_envs: int | None = None) -> AbstractAlgorithm:
        """The algorithm the run trains (with its multi-agent wrapper), at
        `num_envs` when given (`--num-envs auto` tries several)."""
        kwargs = {f.name: env for f in fields if f.kind == "environment"}
        kwargs.update(merged)
        if num_envs is not None:
            kwargs["num_envs"] = num_envs
        return _wrap(cls(**kwargs), env, registered, run_options)

    mesh = device_mesh(devices, split, trainer_options.get("num_seeds"))
    try:
        if merged.get("num_envs") == "auto":
            # The largest power of two whose compiled program fits the free memory.
            choice = _pick_num_envs(build, num_seeds=trainer_options.get("num_seeds"))
            merged["num_envs"] = choice.num_envs
            print(
                f"--num-envs auto: {choice.num_envs} (its compiled program needs "
                f"{_bytes(choice.needed_bytes)}; {_bytes(choice.available_bytes)} "
                f"free on {choice.where})",
                file=sys.stderr,
            )
        algorithm = build()
    except (ValueError, TypeError) as error:
        raise CommandError(str(error)) from None

    loggers = make_loggers(log, out, resume, wandb_project)
    from ._trainer import Trainer

    try:
        trainer = Trainer(
            algorithm,
            out=str(out),
            loggers=loggers,
            env_name=str(env_id),
            env_kwargs=env_kwargs,
            mesh=mesh,
            **trainer_options,
        )
    except ValueError as error:
        raise CommandError(str(error)) from None
    trainer.fit(seed, resume=resume)  # it says what it wrote
    return 0


def _wrap(
    algorithm: AbstractAlgorithm,
    env: AbstractEnvironment,
    registered: Mapping[str, CommandLineOption],
    run_options: Mapping[str, Any],
) -> AbstractAlgorithm:
    """What the run trains: the wrapper of the first registered option given that
    returns one (e.g. MAPPO for `--critic-input`); else, on a multi-agent
    environment, independent learners; else the algorithm itself."""
    for name, option in registered.items():
        if option.wrap is not None and name in run_options:
            wrapped = option.wrap(algorithm, run_options[name], run_options)
            if wrapped is not None:
                return wrapped
    share_parameters = run_options["share_parameters"]
    if num_agents_of(env) is not None:
        # One learner per agent (or one shared), trained together.
        return Independent(algorithm, share_parameters=share_parameters)
    if share_parameters:
        raise ValueError(
            f"--share-parameters: {run_options['env']} has a single agent; drop the "
            "flag."
        )
    return algorithm


_COMMANDS = {
    "train": _train,
    "eval": eval_command,
    "export": export_command,
    "plot": plot_command,
    "list": list_command,
}
_USAGE = """usage: eqxrl {train,eval,export,plot,list} ...

  eqxrl train ENV --algo ppo --total-timesteps N --seed S --out DIR
              [--checkpoint-every ITERATIONS] [--resume] [--config FILE]
              [--devices N|all] [--distributed] [--flag value ...]
  eqxrl eval CHECKPOINT [--episodes N] [--gif out.gif]
  eqxrl export RUN_DIR [--format onnx|stablehlo] [--out FILE]
  eqxrl plot RUN_DIR [RUN_DIR ...] [--out FILE]
  eqxrl list

`eqxrl COMMAND --help` describes each command and its flags."""


def main(argv: Sequence[str] | None = None) -> int:
    """The `eqxrl` command line (also `python -m eqxrl`).

    **Arguments:**

    - `argv`: the arguments after the program name (default `sys.argv[1:]`).

    **Returns:**

    The exit status: 0 on success, 1 for an error (reported in one line on
    stderr), 2 for a command-line usage error.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in _COMMANDS:
        close = difflib.get_close_matches(command, list(_COMMANDS), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        print(f"eqxrl: unknown command {command!r}{hint}.\n\n{_USAGE}", file=sys.stderr)
        return 2
    try:
        return _COMMANDS[command](rest)
    except SystemExit as exit:  # argparse: --help (0) or a usage error (2)
        return exit.code if isinstance(exit.code, int) else 2
    except (CommandError, CheckpointError, FileExistsError, PermissionError) as error:
        print(f"eqxrl {command}: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(
            f"eqxrl {command}: interrupted; resume from the last checkpoint with "
            "--resume.",
            file=sys.stderr,
        )
        return 130
