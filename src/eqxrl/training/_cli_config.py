"""Config files of `eqxrl train` (TOML, YAML or JSON), and how their options merge
with the command line's flags."""

import difflib
import json
import os
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..algorithms import algorithm_names
from ._cli_parser import CommandError
from ._config import ConfigField


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """Options from a TOML (`.toml`) or YAML (`.yaml`/`.yml`, needs PyYAML) or JSON
    file, as a flat dict with underscored keys. A `[ppo]`-style table (named after
    an algorithm) or an `[algorithm]` / `[trainer]` table is merged into the top
    level."""
    path = Path(path)
    if not path.is_file():
        raise CommandError(f"config file {path} does not exist.")
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            with open(path, "rb") as file:
                data = tomllib.load(file)
        elif suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise CommandError(
                    "YAML config files need PyYAML: pip install pyyaml (or use TOML)."
                ) from None
            with open(path) as file:
                data = yaml.safe_load(file) or {}
        elif suffix == ".json":
            with open(path) as file:
                data = json.load(file)
        else:
            raise CommandError(
                f"config file {path}: unknown format {suffix!r}; use .toml, .yaml, "
                ".yml or .json."
            )
    except CommandError:
        raise
    except Exception as error:  # syntax errors of any of the three formats
        raise CommandError(f"config file {path} cannot be read: {error}") from None
    if not isinstance(data, dict):
        raise CommandError(f"config file {path} must hold a table of options.")
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


def merge_options(
    file_options: Mapping[str, Any],
    flags: Mapping[str, Any],
    fields: Mapping[str, ConfigField],
    other_names: Iterable[str],
    config_file: str | None,
) -> dict[str, Any]:
    """The options of a run: the config file's, each checked against the known names
    (`fields`, typed, and `other_names`) and converted to its field's type, then the
    flags given on the command line over them."""
    valid = set(fields) | set(other_names)
    unknown = sorted(set(file_options) - valid)
    if unknown:
        suggestions = []
        for name in unknown:
            close = difflib.get_close_matches(name, sorted(valid), n=1)
            suggestions.append(
                f"{name}" + (f" (did you mean {close[0]}?)" if close else "")
            )
        raise CommandError(
            f"config file {config_file}: unknown option(s) {', '.join(suggestions)}."
        )
    merged: dict[str, Any] = {}
    for name, value in file_options.items():
        field = fields.get(name)
        if field is not None and not (name == "num_envs" and value == "auto"):
            try:
                value = field.coerce(value)
            except ValueError as error:
                raise CommandError(f"config file {config_file}: {error}") from None
        merged[name] = value
    merged.update(flags)
    return merged
