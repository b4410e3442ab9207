"""The host side of training: the Trainer (chunked compiled iterations, progress,
logging, checkpoints with exact resume, evaluation, plots) and the `eqxrl` command
line. Nothing else in the package imports it."""

from ._checkpoint import (
    list_checkpoints as list_checkpoints,
    load_checkpoint as load_checkpoint,
    load_policy as load_policy,
    read_checkpoint_header as read_checkpoint_header,
    save_checkpoint as save_checkpoint,
    save_policy as save_policy,
)
from ._checkpoint_format import CheckpointError as CheckpointError
from ._cli import main as main
from ._cli_config import read_config_file as read_config_file
from ._config import (
    ConfigField as ConfigField,
    algorithm_from_config as algorithm_from_config,
    algorithm_to_config as algorithm_to_config,
    config_fields as config_fields,
)
from ._device import (
    auto_num_envs as auto_num_envs,
    describe_devices as describe_devices,
)
from ._evaluation import (
    EvaluationResult as EvaluationResult,
    evaluate as evaluate,
    record_episodes as record_episodes,
    renderer as renderer,
    write_gif as write_gif,
)
from ._logging import (
    AbstractLogger as AbstractLogger,
    ConsoleLogger as ConsoleLogger,
    CSVLogger as CSVLogger,
    JSONLLogger as JSONLLogger,
    TensorBoardLogger as TensorBoardLogger,
    WandbLogger as WandbLogger,
)
from ._plots import (
    plot_run as plot_run,
    plot_runs as plot_runs,
    read_metrics as read_metrics,
)
from ._trainer import Trainer as Trainer, steps_per_iteration as steps_per_iteration
