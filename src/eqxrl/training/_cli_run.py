"""What the run flags of `eqxrl train` build: the distributed runtime, the device
mesh, the environment's keyword arguments and the logging backends."""

import json
from pathlib import Path
from typing import Any

from ._cli_parser import CommandError

LOGGERS = ("console", "csv", "jsonl", "tensorboard", "wandb")


def initialize_distributed() -> None:
    import jax

    try:
        jax.distributed.initialize()
    except (ValueError, RuntimeError) as error:
        raise CommandError(
            f"--distributed: jax.distributed.initialize() failed: {error}. Outside "
            "a cluster it detects (SLURM, TPU pods, ...), set JAX_COORDINATOR_ADDRESS "
            "(host:port of process 0), JAX_NUM_PROCESSES and JAX_PROCESS_ID."
        ) from None


def device_mesh(devices: Any, split: str | None, num_seeds: int | None) -> Any:
    """The device mesh of `--devices N|all` and `--split`, or `None`."""
    if devices is None:
        if split is not None:
            raise CommandError("--split needs --devices.")
        return None
    import jax

    available = jax.device_count()
    if str(devices) == "all":
        count = available
    else:
        try:
            count = int(devices)
        except ValueError:
            raise CommandError(
                f"--devices {devices!r}: expected a number of devices or 'all'."
            ) from None
        if not 1 <= count <= available:
            raise CommandError(
                f"--devices {count}: there are {available} device(s) "
                f"({jax.devices()[0].platform}); choose 1 to {available} or 'all'."
            )
    if split is None:
        split = "seeds" if num_seeds and num_seeds % count == 0 else "envs"
    if split == "seeds" and not num_seeds:
        raise CommandError("--split seeds needs --num-seeds (a multiple of devices).")
    return jax.make_mesh((count,), (split,), devices=jax.devices()[:count])


def env_options(options: Any) -> dict[str, Any]:
    """`["height=5", "wrap=true"]` (or a dict from a config file) as keyword
    arguments, values read as JSON where they can be (numbers, booleans)."""
    if isinstance(options, dict):
        return dict(options)
    kwargs = {}
    for option in options or []:
        key, separator, text = str(option).partition("=")
        if not separator or not key.strip():
            raise CommandError(f"--env-option {option!r}: expected KEY=VALUE.")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        kwargs[key.strip()] = value
    return kwargs


def make_loggers(log: str, out: Path, resume: bool, wandb_project: str) -> tuple:
    from ._logging import (
        ConsoleLogger,
        CSVLogger,
        JSONLLogger,
        TensorBoardLogger,
        WandbLogger,
    )

    names = [name.strip() for name in log.split(",") if name.strip()]
    unknown = [name for name in names if name not in LOGGERS]
    if unknown:
        raise CommandError(
            f"--log: unknown backend(s) {', '.join(unknown)}; choose among "
            f"{', '.join(LOGGERS)}."
        )
    loggers = []
    try:
        for name in names:
            if name == "console":
                loggers.append(ConsoleLogger())
            elif name == "csv":
                loggers.append(CSVLogger(out / "metrics.csv", append=resume))
            elif name == "jsonl":
                loggers.append(JSONLLogger(out / "metrics.jsonl", append=resume))
            elif name == "tensorboard":
                loggers.append(TensorBoardLogger(out / "tensorboard"))
            elif name == "wandb":
                out.mkdir(parents=True, exist_ok=True)
                loggers.append(
                    WandbLogger(project=wandb_project, dir=str(out), name=out.name)
                )
    except ImportError as error:
        raise CommandError(str(error)) from None
    return tuple(loggers)
