"""The `eqxrl` command: `train`, `eval`, `plot` and `list`."""

import argparse
import difflib
import json
import os
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..algorithms import DQN, PPO, PQN, algorithm_names
from ..envs import make, num_agents_of, registered_names
from ..multiagent import MAPPO, PQNVDN, QMIX, VDN, Independent
from ..nn import GRUActorCritic, LSTMActorCritic
from ._checkpoint import (
    CheckpointError,
    load_policy,
    load_training_state,
    read_checkpoint_header,
    resolve_checkpoint,
)
from ._config import (
    ConfigField,
    algorithm_class,
    algorithm_from_config,
    config_fields,
    flag_name,
)
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
# Options of `eqxrl train` that are neither algorithm nor Trainer fields.
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
    "share_critic",
    "critic_input",
    "mixer",
    "network",
)
# `--mixer`: the value decomposition that trains DQN's agents as a team (and, with
# `vdn`, PQN's: PQNVDN).
_MIXERS = {"vdn": VDN, "qmix": QMIX}
# `--network`: PPO's network_factory (`mlp` is PPO's default feed-forward network).
# Named by their factories, so config.json and checkpoint headers name them too and
# `eqxrl eval` rebuilds them.
_NETWORKS = {
    "mlp": None,
    "gru": GRUActorCritic.from_env,
    "lstm": LSTMActorCritic.from_env,
}
_LOGGERS = ("console", "csv", "jsonl", "tensorboard", "wandb")


class _CommandError(Exception):
    """An error to report in one line (no traceback), exit status 1."""


class _Parser(argparse.ArgumentParser):
    """argparse with suggestions for mistyped flags, and no abbreviated flags (a
    typo such as `--total-timestep` is an error, not a silent prefix match)."""

    def __init__(self, *args, known_flags: Sequence[str] = (), **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.known_flags = list(known_flags)

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            messages = []
            for index, extra in enumerate(extras):
                if (
                    not extra.startswith("-")
                    and index
                    and extras[index - 1].startswith("--")
                ):
                    continue  # the value of an unknown flag: reported with the flag
                message = f"unknown argument {extra!r}"
                if extra.startswith("--"):
                    flags = [
                        a for action in self._actions for a in action.option_strings
                    ]
                    close = difflib.get_close_matches(extra.split("=")[0], flags, n=3)
                    if close:
                        message += f" (did you mean {', '.join(close)}?)"
                messages.append(message)
            self.error("; ".join(messages) + f". See `{self.prog} --help`.")
        return namespace


def _argument_type(field: ConfigField, allow_auto: bool = False):
    def parse(text: str) -> Any:
        if allow_auto and text.strip().lower() == "auto":
            return "auto"
        try:
            return field.parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error).split(": ", 1)[-1]) from None

    parse.__name__ = field.kind
    return parse


def _metavar(field: ConfigField) -> str:
    if field.choices is not None:
        return "{" + ",".join(map(str, field.choices)) + "}"
    return {
        "bool": "{true,false}",
        "int": "N",
        "float": "X",
        "str": "TEXT",
        "int_tuple": "N,N,...",
        "str_tuple": "KEY,KEY,...",
        "float_tuple": "X,X,...",
    }.get(field.kind, "VALUE")


def _help(field: ConfigField, extra: str = "") -> str:
    default = field.default
    if isinstance(default, tuple):
        default = ",".join(map(str, default))
    elif default is None:
        default = "none"
    elif isinstance(default, bool):
        default = str(default).lower()
    text = (field.help or field.name.replace("_", " ")).replace("`", "").rstrip(". ")
    text = f"{text}{extra} (default: {default})"
    return text.replace("%", "%%")


def _settable(fields: Sequence[ConfigField]) -> list[ConfigField]:
    return [f for f in fields if f.kind not in ("other", "environment")]


def _trainer_fields() -> list[ConfigField]:
    from ._trainer import Trainer

    return [f for f in config_fields(Trainer) if f.name in _TRAINER_FLAGS]


# --------------------------------------------------------------------------------------
# Config files
# --------------------------------------------------------------------------------------


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """Options from a TOML (`.toml`) or YAML (`.yaml`/`.yml`, needs PyYAML) or JSON
    file, as a flat dict with underscored keys. A `[ppo]`-style table (named after
    an algorithm) or an `[algorithm]` / `[trainer]` table is merged into the top
    level."""
    path = Path(path)
    if not path.is_file():
        raise _CommandError(f"config file {path} does not exist.")
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            with open(path, "rb") as file:
                data = tomllib.load(file)
        elif suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise _CommandError(
                    "YAML config files need PyYAML: pip install pyyaml (or use TOML)."
                ) from None
            with open(path) as file:
                data = yaml.safe_load(file) or {}
        elif suffix == ".json":
            with open(path) as file:
                data = json.load(file)
        else:
            raise _CommandError(
                f"config file {path}: unknown format {suffix!r}; use .toml, .yaml, "
                ".yml or .json."
            )
    except _CommandError:
        raise
    except Exception as error:  # syntax errors of any of the three formats
        raise _CommandError(f"config file {path} cannot be read: {error}") from None
    if not isinstance(data, dict):
        raise _CommandError(f"config file {path} must hold a table of options.")
    flat: dict[str, Any] = {}
    for key, value in data.items():
        key = str(key).replace("-", "_")
        if isinstance(value, dict) and (
            key in ("algorithm", "trainer") or key in algorithm_names()
        ):
            for inner_key, inner_value in value.items():
                flat[str(inner_key).replace("-", "_")] = inner_value
        else:
            flat[key] = value
    return flat


# --------------------------------------------------------------------------------------
# eqxrl train
# --------------------------------------------------------------------------------------


def _train_parser(algo: str, fields: list[ConfigField]) -> _Parser:
    parser = _Parser(
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
        type=_argument_type(ConfigField("seed", "int", 0, False)),
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
        help=f"comma-separated logging backends among {', '.join(_LOGGERS)} "
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
    run.add_argument(
        "--share-critic",
        choices=("yes", "no"),
        default=argparse.SUPPRESS,
        help="MAPPO (with --critic-input): one critic for all agents (yes) or one "
        "per agent (no), whatever --share-parameters chose for the actor (default: "
        "as --share-parameters)",
    )
    run.add_argument(
        "--critic-input",
        choices=MAPPO.critic_inputs,
        default=argparse.SUPPRESS,
        help="multi-agent environments with PPO: MAPPO (eqxrl.multiagent.MAPPO), "
        "a centralized critic reading the global state, every agent's observations "
        "concatenated, or the global state with the agent's index (default: "
        "independent PPO, each critic reading its agent's observation)",
    )
    run.add_argument(
        "--mixer",
        choices=tuple(_MIXERS),
        default=argparse.SUPPRESS,
        help="multi-agent environments with DQN: train the agents as a team on the "
        "team reward, their values summed (vdn: eqxrl.multiagent.VDN) or mixed by "
        "a monotonic network reading the global state (qmix: "
        "eqxrl.multiagent.QMIX) (default: independent DQN, each agent on its own "
        "reward); with PQN, vdn trains eqxrl.multiagent.PQNVDN",
    )
    run.add_argument(
        "--network",
        choices=tuple(_NETWORKS),
        default=argparse.SUPPRESS,
        help="PPO's network: mlp (its feed-forward default: an MLP, or "
        "MultiInputActorCritic's encoders for Dict and image observations), gru "
        "or lstm (eqxrl.nn.GRUActorCritic / LSTMActorCritic with their default "
        "sizes: a policy with memory, for partially observed environments) "
        "(default: mlp; PQN's recurrent network is --gru-size N)",
    )
    trainer = parser.add_argument_group("trainer")
    for field in _trainer_fields():
        trainer.add_argument(
            f"--{flag_name(field.name)}",
            dest=field.name,
            type=_argument_type(field),
            default=argparse.SUPPRESS,
            metavar=_metavar(field),
            help=_help(field),
        )
    group = parser.add_argument_group(f"{algo} hyperparameters")
    for field in _settable(fields):
        auto = field.name == "num_envs"
        group.add_argument(
            f"--{flag_name(field.name)}",
            dest=field.name,
            type=_argument_type(field, allow_auto=auto),
            default=argparse.SUPPRESS,
            metavar="N|auto" if auto else _metavar(field),
            help=_help(
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
        _initialize_distributed()
    algo = known.algo or file_options.get("algo") or "ppo"
    try:
        cls = algorithm_class(str(algo))
    except ValueError as error:
        raise _CommandError(str(error)) from None
    fields = config_fields(cls)
    parser = _train_parser(str(algo), fields)
    options = vars(parser.parse_args(argv))

    by_name = {f.name: f for f in fields}
    trainer_fields = {f.name: f for f in _trainer_fields()}
    valid = set(by_name) | set(trainer_fields) | set(_RUN_OPTIONS)
    unknown = sorted(set(file_options) - valid)
    if unknown:
        suggestions = []
        for name in unknown:
            close = difflib.get_close_matches(name, sorted(valid), n=1)
            suggestions.append(
                f"{name}" + (f" (did you mean {close[0]}?)" if close else "")
            )
        raise _CommandError(
            f"config file {known.config}: unknown option(s) {', '.join(suggestions)}."
        )
    merged: dict[str, Any] = {}
    for name, value in file_options.items():
        field = by_name.get(name) or trainer_fields.get(name)
        if field is not None and not (name == "num_envs" and value == "auto"):
            try:
                value = field.coerce(value)
            except ValueError as error:
                raise _CommandError(f"config file {known.config}: {error}") from None
        merged[name] = value
    merged.update({k: v for k, v in options.items() if k != "config"})

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
    share_critic = {"yes": True, "no": False, None: None}[
        merged.pop("share_critic", None)
    ]
    critic_input = merged.pop("critic_input", None)
    mixer = merged.pop("mixer", None)
    network = _network_factory(merged.pop("network", "mlp"), cls, str(algo), merged)
    if network is not None:
        merged["network_factory"] = network
    wandb_project = str(merged.pop("wandb_project", "eqxrl"))
    trainer_options = {k: merged.pop(k) for k in list(merged) if k in trainer_fields}

    env_kwargs = _env_options(merged.pop("env_option", []))
    try:
        env = make(str(env_id), **env_kwargs)
    except (ValueError, TypeError) as error:
        raise _CommandError(f"environment {env_id}: {error}") from None
    missing = [f.name for f in fields if f.required and f.kind != "environment"]
    missing = [name for name in missing if name not in merged]
    if missing:
        raise _CommandError(
            f"{cls.__name__} needs {', '.join('--' + flag_name(m) for m in missing)}."
        )

    def build(num_envs: int | None = None) -> Any:
        """The algorithm the run trains (with its multi-agent wrapper), at
        `num_envs` when given (`--num-envs auto` tries several)."""
        kwargs = {f.name: env for f in fields if f.kind == "environment"}
        kwargs.update(merged)
        if num_envs is not None:
            kwargs["num_envs"] = num_envs
        algorithm = cls(**kwargs)
        if num_agents_of(env) is not None and mixer is not None:
            return _value_decomposition(
                algorithm, mixer, share_parameters, critic_input
            )
        if share_critic is not None and critic_input is None:
            raise ValueError(
                "--share-critic: a critic apart from the actor is MAPPO's; give "
                "--critic-input (global_state, concatenated or agent_specific) or "
                "drop the flag."
            )
        if num_agents_of(env) is not None and critic_input is not None:
            if cls is not PPO:
                raise ValueError(
                    f"--critic-input: a centralized critic is MAPPO's, which trains "
                    f"PPO, not {cls.__name__}; use --algo ppo or drop the flag."
                )
            return MAPPO(
                algorithm,
                share_parameters=share_parameters,
                critic_input=critic_input,
                share_critic=share_critic,
            )
        if num_agents_of(env) is not None:
            # One learner per agent (or one shared), trained together.
            return Independent(algorithm, share_parameters=share_parameters)
        if share_parameters or critic_input is not None or mixer is not None:
            flag = (
                "--share-parameters"
                if share_parameters
                else "--critic-input"
                if critic_input is not None
                else f"--mixer {mixer}"
            )
            raise ValueError(f"{flag}: {env_id} has a single agent; drop the flag.")
        return algorithm

    mesh = _mesh(devices, split, trainer_options.get("num_seeds"))
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
        raise _CommandError(str(error)) from None

    loggers = _loggers(log, out, resume, wandb_project)
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
        raise _CommandError(str(error)) from None
    trainer.fit(seed, resume=resume)  # it says what it wrote
    return 0


def _value_decomposition(
    algorithm: Any, mixer: Any, share_parameters: bool, critic_input: Any
) -> VDN | QMIX | PQNVDN:
    """`--mixer`'s VDN or QMIX around the DQN the other flags configured (PQN-VDN
    around a PQN with `vdn`), refused beside another algorithm and beside
    `--critic-input` (MAPPO's)."""
    name = str(mixer).strip().lower()
    if name not in _MIXERS:
        raise ValueError(f"--mixer {mixer!r}: choose among {', '.join(_MIXERS)}.")
    if isinstance(algorithm, PQN) and name != "vdn":
        raise ValueError(
            f"--mixer {name}: PQN's agents train as a team with vdn (PQN-VDN: "
            "eqxrl.multiagent.PQNVDN); for QMIX use --algo dqn."
        )
    if not isinstance(algorithm, DQN | PQN):
        raise ValueError(
            f"--mixer {name}: value decomposition trains DQN's agents as a team; "
            f"{type(algorithm).__name__} does not take a mixer. Use --algo dqn (or "
            "--algo pqn with --mixer vdn), or drop --mixer."
        )
    if critic_input is not None:
        raise ValueError(
            f"--mixer {name} and --critic-input: a mixer is for DQN's agents, a "
            "centralized critic for MAPPO's (--algo ppo); keep one."
        )
    if isinstance(algorithm, PQN):
        return PQNVDN(algorithm, share_parameters=share_parameters)
    return _MIXERS[name](algorithm, share_parameters=share_parameters)


def _network_factory(
    network: Any, cls: type, algo: str, options: dict[str, Any]
) -> Any:
    """The `network_factory` that `--network` names (`None` for PPO's default),
    refused for algorithms without actor-critics and beside options that only
    shape the default network."""
    name = str(network).strip().lower()
    if name not in _NETWORKS:
        raise _CommandError(
            f"--network {network!r}: choose among {', '.join(_NETWORKS)}."
        )
    factory = _NETWORKS[name]
    if factory is None:
        return None
    if cls is PQN:
        raise _CommandError(
            f"--network {name}: PQN's recurrent network (PQN-RNN) is a GRU after "
            "its hidden layers: --gru-size N (e.g. --gru-size 256), with "
            "--hidden-sizes and --layer-norm."
        )
    if cls is not PPO:
        raise _CommandError(
            f"--network {name}: recurrent networks are actor-critics for PPO (and "
            f"independent PPO on multi-agent environments); {algo} does not take "
            "one. Use --algo ppo, or drop --network."
        )
    if options.get("network_factory") is not None:
        raise _CommandError(
            f"--network {name} and network_factory both choose the network; keep one."
        )
    default_only = [
        flag_name(option)
        for option in (
            "hidden_sizes",
            "actor_hidden_sizes",
            "critic_hidden_sizes",
            "activation",
            "actor_keys",
            "critic_keys",
            "squash_actions",
            "state_dependent_std",
            "std_parameterization",
        )
        if option in options
    ]
    if default_only:
        raise _CommandError(
            f"--network {name}: {', '.join('--' + f for f in default_only)} shape "
            "the default (mlp) network only; the recurrent networks have their "
            "default sizes from the command line. Drop them, or build the network "
            "in Python (network_factory=functools.partial("
            "eqxrl.nn.GRUActorCritic.from_env, hidden_size=...))."
        )
    return factory


def _initialize_distributed() -> None:
    import jax

    try:
        jax.distributed.initialize()
    except (ValueError, RuntimeError) as error:
        raise _CommandError(
            f"--distributed: jax.distributed.initialize() failed: {error}. Outside "
            "a cluster it detects (SLURM, TPU pods, ...), set JAX_COORDINATOR_ADDRESS "
            "(host:port of process 0), JAX_NUM_PROCESSES and JAX_PROCESS_ID."
        ) from None


def _mesh(devices: Any, split: str | None, num_seeds: int | None) -> Any:
    """The device mesh of `--devices N|all` and `--split`, or `None`."""
    if devices is None:
        if split is not None:
            raise _CommandError("--split needs --devices.")
        return None
    import jax

    available = jax.device_count()
    if str(devices) == "all":
        count = available
    else:
        try:
            count = int(devices)
        except ValueError:
            raise _CommandError(
                f"--devices {devices!r}: expected a number of devices or 'all'."
            ) from None
        if not 1 <= count <= available:
            raise _CommandError(
                f"--devices {count}: there are {available} device(s) "
                f"({jax.devices()[0].platform}); choose 1 to {available} or 'all'."
            )
    if split is None:
        split = "seeds" if num_seeds and num_seeds % count == 0 else "envs"
    if split == "seeds" and not num_seeds:
        raise _CommandError("--split seeds needs --num-seeds (a multiple of devices).")
    return jax.make_mesh((count,), (split,), devices=jax.devices()[:count])


def _env_options(options: Any) -> dict[str, Any]:
    """`["height=5", "wrap=true"]` (or a dict from a config file) as keyword
    arguments, values read as JSON where they can be (numbers, booleans)."""
    if isinstance(options, dict):
        return dict(options)
    kwargs = {}
    for option in options or []:
        key, separator, text = str(option).partition("=")
        if not separator or not key.strip():
            raise _CommandError(f"--env-option {option!r}: expected KEY=VALUE.")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        kwargs[key.strip()] = value
    return kwargs


def _loggers(log: str, out: Path, resume: bool, wandb_project: str) -> tuple:
    from ._logging import (
        ConsoleLogger,
        CSVLogger,
        JSONLLogger,
        TensorBoardLogger,
        WandbLogger,
    )

    names = [name.strip() for name in log.split(",") if name.strip()]
    unknown = [name for name in names if name not in _LOGGERS]
    if unknown:
        raise _CommandError(
            f"--log: unknown backend(s) {', '.join(unknown)}; choose among "
            f"{', '.join(_LOGGERS)}."
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
        raise _CommandError(str(error)) from None
    return tuple(loggers)


# --------------------------------------------------------------------------------------
# eqxrl eval
# --------------------------------------------------------------------------------------


def _load_policies(
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
        raise _CommandError(str(error)) from None
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
        raise _CommandError(str(error)) from None
    return path, header, algorithm.env, policies


def _eval(argv: Sequence[str]) -> int:
    parser = _Parser(
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
    path, header, env, policies = _load_policies(Path(args.checkpoint), deterministic)
    if args.gif and renderer(env) is None:
        raise _CommandError(f"--gif: {no_render_message(env)} Drop --gif.")

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


def _plot(argv: Sequence[str]) -> int:
    parser = _Parser(
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
        raise _CommandError(str(error)) from None
    print(f"wrote {path}")
    return 0


def _list(argv: Sequence[str]) -> int:
    parser = _Parser(prog="eqxrl list", description="List algorithms and environments.")
    parser.parse_args(argv)
    print("algorithms:   " + ", ".join(algorithm_names()))
    print("environments: " + ", ".join(registered_names()))
    return 0


def _export(argv: Sequence[str]) -> int:
    parser = _Parser(
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

    path, _, env, policies = _load_policies(
        Path(args.checkpoint), deterministic=not args.stochastic
    )
    if not 0 <= args.seed_index < len(policies):
        raise _CommandError(
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
        raise _CommandError(str(error)) from None
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


_COMMANDS = {
    "train": _train,
    "eval": _eval,
    "export": _export,
    "plot": _plot,
    "list": _list,
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
    except (_CommandError, CheckpointError, FileExistsError, PermissionError) as error:
        print(f"eqxrl {command}: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(
            f"eqxrl {command}: interrupted; resume from the last checkpoint with "
            "--resume.",
            file=sys.stderr,
        )
        return 130
