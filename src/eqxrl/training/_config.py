"""Algorithms as plain data: the (de)serialization of an algorithm's configuration to
JSON, and a typed description of its fields that the CLI turns into flags.

Everything here works from the algorithm Module's dataclass fields and the algorithm
registry (`eqxrl.algorithms.register_algorithm`), so a new algorithm needs one
`register_algorithm("name", Class)` line and nothing else.
"""

import dataclasses
import math
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

import equinox as eqx
import jax
import jaxtyping
import numpy as np

from ..algorithms import AbstractAlgorithm, algorithm_names, get_algorithm
from ..envs import AbstractEnvironment, make, registered_names


def algorithm_class(name: str) -> type[AbstractAlgorithm]:
    """The algorithm class registered as `name`, or an eqxrl algorithm class named by
    its import path (e.g. `eqxrl.multiagent.Independent`, which wraps registered
    algorithms); a `ValueError` lists the registered names."""
    if "." in name and (name == "eqxrl" or name.startswith("eqxrl.")):
        module, _, qualname = name.rpartition(".")
        try:
            cls = _resolve_callable(f"{module}:{qualname}")
        except ValueError:
            cls = None
        if isinstance(cls, type) and issubclass(cls, AbstractAlgorithm):
            return cls
    return get_algorithm(name)


def algorithm_name(cls: type[AbstractAlgorithm]) -> str | None:
    """The registered name of an algorithm class; for an unregistered eqxrl class,
    its public import path (the package that exports it, e.g.
    `eqxrl.multiagent.Independent`); else `None`."""
    for name in algorithm_names():
        if get_algorithm(name) is cls:
            return name
    import importlib

    parts = cls.__module__.split(".")
    if parts[0] != "eqxrl":
        return None
    # The shortest public package path that exports the class.
    for end in range(1, len(parts) + 1):
        if any(part.startswith("_") for part in parts[:end]):
            break
        package = ".".join(parts[:end])
        try:
            exported = getattr(importlib.import_module(package), cls.__name__, None)
        except ImportError:
            continue
        if exported is cls:
            return f"{package}.{cls.__name__}"
    return None


# --------------------------------------------------------------------------------------
# Fields as typed configuration
# --------------------------------------------------------------------------------------

Kind = Literal[
    "environment",
    "bool",
    "int",
    "float",
    "str",
    "int_tuple",
    "float_tuple",
    "str_tuple",
    "other",
]


class ConfigField(eqx.Module):
    """One configurable field of an algorithm class, as the CLI and config files see
    it.

    **Arguments:**

    - `name`: the field name (the flag is `--name-with-dashes`).
    - `kind`: how values are parsed: `"bool"`, `"int"`, `"float"`, `"str"`,
      `"int_tuple"`, `"float_tuple"`, `"str_tuple"`, `"environment"` (built with
      `eqxrl.envs.make`), or `"other"` (not settable from text, e.g. a callable).
    - `default`: the default value, or `None` when the field is required.
    - `required`: whether the field has no default.
    - `optional`: whether `None` is a valid value (spelled `none` on the command
      line).
    - `choices`: allowed values for `Literal[...]` fields, else `None`.
    - `help`: the field's description from the class docstring.
    """

    name: str = eqx.field(static=True)
    kind: Kind = eqx.field(static=True)
    default: Any = eqx.field(static=True)
    required: bool = eqx.field(static=True)
    optional: bool = eqx.field(static=True, default=False)
    choices: tuple | None = eqx.field(static=True, default=None)
    help: str = eqx.field(static=True, default="")

    def parse(self, text: str) -> Any:
        """Parse a command-line value; raises `ValueError` saying what is expected."""
        text = text.strip()
        if self.optional and text.lower() in ("none", "null"):
            return None
        try:
            value = _parse_kind(self.kind, text)
        except ValueError:
            raise ValueError(
                f"--{flag_name(self.name)}: cannot read {text!r} as "
                f"{_KIND_WORDS[self.kind]}."
            ) from None
        if self.choices is not None and value not in self.choices:
            raise ValueError(
                f"--{flag_name(self.name)}: {text!r} is not one of "
                f"{', '.join(map(str, self.choices))}."
            )
        return value

    def coerce(self, value: Any) -> Any:
        """Convert a value read from a config file (YAML/TOML) to this field's type."""
        if value is None and (self.optional or self.kind == "other"):
            return None
        if isinstance(value, str) and self.kind not in ("str", "environment"):
            return self.parse(value)
        where = f"config field {self.name!r}"
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise ValueError(f"{where}: expected true or false, got {value!r}.")
        elif self.kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{where}: expected an integer, got {value!r}.")
        elif self.kind == "float":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{where}: expected a number, got {value!r}.")
            value = float(value)
        elif self.kind in ("int_tuple", "float_tuple", "str_tuple"):
            if not isinstance(value, list | tuple):
                raise ValueError(f"{where}: expected a list, got {value!r}.")
            if self.kind == "str_tuple":
                if not all(isinstance(v, str) for v in value):
                    raise ValueError(
                        f"{where}: expected a list of names, got {value!r}."
                    )
                return tuple(value)
            return self.parse(",".join(str(v) for v in value))
        elif self.kind in ("str", "environment") and not isinstance(value, str):
            raise ValueError(f"{where}: expected a string, got {value!r}.")
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{where}: {value!r} is not one of {self.choices}.")
        return value


_KIND_WORDS = {
    "bool": "true/false",
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "int_tuple": "comma-separated integers (e.g. 64,64)",
    "float_tuple": "comma-separated numbers",
    "str_tuple": "comma-separated names (e.g. state,goal)",
    "environment": "an environment name",
    "other": "a value",
}


def _parse_kind(kind: Kind, text: str) -> Any:
    if kind == "bool":
        lowered = text.lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
        raise ValueError(text)
    if kind == "int":
        return int(text.replace("_", ""))
    if kind == "float":
        value = float(text)
        if math.isnan(value):
            raise ValueError(text)
        return value
    if kind in ("int_tuple", "float_tuple", "str_tuple"):
        parse = {"int_tuple": int, "float_tuple": float, "str_tuple": str}[kind]
        parts = [part for part in re.split(r"[,\s]+", text.strip("()[] ")) if part]
        return tuple(parse(part) for part in parts)
    if kind in ("str", "environment"):
        return text
    raise ValueError(text)


def flag_name(field_name: str) -> str:
    """`num_envs` -> `num-envs`."""
    return field_name.replace("_", "-")


def _kind_of(annotation: Any, default: Any) -> tuple[Kind, bool, tuple | None]:
    """The kind of a field from its annotation (or its default when the annotation
    says nothing), whether it may be `None`, and its `Literal` choices."""
    optional = False
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        arguments = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(arguments) < len(typing.get_args(annotation))
        if len(arguments) == 1:
            kind, _, choices = _kind_of(arguments[0], None)
            return kind, optional, choices
        return "other", optional, None
    if origin is Literal:
        choices = typing.get_args(annotation)
        kinds = {type(c) for c in choices}
        kind: Kind = {str: "str", int: "int", bool: "bool"}.get(
            kinds.pop() if len(kinds) == 1 else object, "other"
        )
        return kind, optional, tuple(choices)
    if origin is tuple:
        arguments = typing.get_args(annotation)
        if arguments and all(a in (int, Ellipsis) for a in arguments):
            return "int_tuple", optional, None
        if arguments and all(a in (float, int, Ellipsis) for a in arguments):
            return "float_tuple", optional, None
        if arguments and all(a in (str, Ellipsis) for a in arguments):
            return "str_tuple", optional, None
        return "other", optional, None
    if isinstance(annotation, type):
        if issubclass(annotation, AbstractEnvironment):
            return "environment", optional, None
        if issubclass(annotation, jaxtyping.AbstractArray):
            if annotation.dim_str.strip() != "":
                return "other", optional, None
            dtypes = set(annotation.dtypes)
            if "float32" in dtypes:
                return "float", optional, None
            if "bool" in dtypes:
                return "bool", optional, None
            if "int32" in dtypes:
                return "int", optional, None
            return "other", optional, None
        for python_type, kind in ((bool, "bool"), (int, "int"), (float, "float")):
            if issubclass(annotation, python_type):
                return kind, optional, None
        if issubclass(annotation, str):
            return "str", optional, None
    # Unknown annotation (e.g. a string under `from __future__ import annotations`):
    # judge by the default value.
    if isinstance(default, bool):
        return "bool", optional, None
    if isinstance(default, int):
        return "int", optional, None
    if isinstance(default, float):
        return "float", optional, None
    if isinstance(default, str):
        return "str", optional, None
    return "other", optional, None


def _argument_docs(cls: type) -> dict[str, str]:
    """`name -> description` from the `**Arguments:**` list of a class docstring."""
    docs: dict[str, str] = {}
    current = None
    in_arguments = False
    for line in (cls.__doc__ or "").splitlines():
        stripped = line.strip()
        if stripped.startswith("**Arguments:**"):
            in_arguments = True
            continue
        if not in_arguments:
            continue
        match = re.match(r"- `(\w+)`:\s*(.*)", stripped)
        if match:
            current = match.group(1)
            docs[current] = match.group(2)
        elif stripped.startswith("**") or stripped.startswith("!!!"):
            in_arguments = False
            current = None
        elif stripped and current is not None:
            docs[current] += " " + stripped
        elif not stripped:
            current = None
    return docs


def config_fields(cls: type[eqx.Module]) -> list[ConfigField]:
    """The configurable fields of an algorithm (or any Module) class, in order.

    **Arguments:**

    - `cls`: the class, e.g. `eqxrl.PPO`.

    **Returns:**

    A list of [`ConfigField`][eqxrl.training.ConfigField], one per `__init__` field,
    typed from the annotations (`Float[Array, ""]` fields are numbers, `tuple[int,
    ...]` comma-separated integers, environments names for `eqxrl.envs.make`), with
    help text from the class docstring.
    """
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # unresolvable annotations: fall back to the defaults
        hints = {}
    docs = _argument_docs(cls)
    fields = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        required = (
            field.default is dataclasses.MISSING
            and field.default_factory is dataclasses.MISSING
        )
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            default = None
        kind, optional, choices = _kind_of(hints.get(field.name), default)
        fields.append(
            ConfigField(
                name=field.name,
                kind=kind,
                default=default,
                required=required,
                optional=optional,
                choices=choices,
                help=docs.get(field.name, ""),
            )
        )
    return fields


# --------------------------------------------------------------------------------------
# JSON (de)serialization of an algorithm
# --------------------------------------------------------------------------------------


def environment_name(env: AbstractEnvironment) -> str | None:
    """The registered id `name` with `eqxrl.envs.make(name)` equal to `env`, or
    `None` if there is none."""
    for name in registered_names():
        try:
            candidate = make(name)
        except Exception:  # a factory that needs arguments
            continue
        if _tree_equal(env, candidate):
            return name
    return None


def _tree_equal(a: Any, b: Any) -> bool:
    try:
        return bool(eqx.tree_equal(a, b))
    except Exception:
        return False


def _to_json(value: Any, where: str) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, jax.Array | np.ndarray | np.generic):
        array = np.asarray(value)
        if array.dtype.kind in "biuf" and array.ndim == 0:
            if array.dtype.kind == "f":
                # The shortest text that reads back as the same float32: exact and
                # readable ("0.00025", not "0.0002500000118743628").
                number = float(str(array))
                return number if math.isfinite(number) else {"float": repr(number)}
            return array.item()
        if array.dtype.kind in "biuf":
            return {"array": array.tolist(), "dtype": str(array.dtype)}
    if isinstance(value, tuple | list):
        return [_to_json(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, np.dtype):  # e.g. PPO's observation_storage_dtype
        return {"dtype": str(value)}
    if isinstance(value, AbstractAlgorithm):  # an algorithm wrapping another
        return {"algorithm_config": algorithm_to_config(value)}
    if isinstance(value, AbstractEnvironment):
        name = environment_name(value)
        if name is None:
            return {"unserializable": f"environment {type(value).__name__}"}
        return {"environment": name, "kwargs": {}}
    qualified = _eqxrl_callable_name(value)
    if qualified is not None:
        return {"callable": qualified}
    return {"unserializable": repr(value)}


def _eqxrl_callable_name(value: Any) -> str | None:
    """`module:qualname` of a function or class method defined at module level in
    eqxrl (e.g. `eqxrl.nn.CNNActorCritic.from_env`), which a config can name;
    `None` for anything else (closures, lambdas, other packages' functions)."""
    if not callable(value) or isinstance(value, type):
        return None
    module = getattr(value, "__module__", None) or ""
    qualname = getattr(value, "__qualname__", None) or ""
    owner = getattr(value, "__self__", None)
    if isinstance(owner, type):
        # A classmethod inherited from a base class (`GRUActorCritic.from_env` is
        # `AbstractCellActorCritic.from_env` bound to GRUActorCritic): named through the
        # class it is bound to, else it would name (and rebuild) the base's.
        module = owner.__module__
        qualname = f"{owner.__qualname__}.{value.__name__}"
    if not (module == "eqxrl" or module.startswith("eqxrl.")) or "<" in qualname:
        return None
    try:
        found = _resolve_callable(f"{module}:{qualname}")
    except ValueError:
        return None
    return f"{module}:{qualname}" if found == value else None


def _resolve_callable(name: str) -> Any:
    """The eqxrl function named `module:qualname`. Only eqxrl's own modules are
    imported: a config file is data, never a way to run other code."""
    import importlib

    module_name, _, qualname = name.partition(":")
    if not (module_name == "eqxrl" or module_name.startswith("eqxrl.")) or not qualname:
        raise ValueError(f"{name!r} is not a function of eqxrl.")
    try:
        value: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError):
        raise ValueError(f"eqxrl has no function {name!r}.") from None
    # A name can reach what an eqxrl module imported (`eqxrl.x:os.system`): only
    # functions defined in eqxrl itself are allowed.
    defined_in = getattr(value, "__module__", None) or ""
    if not callable(value) or not (
        defined_in == "eqxrl" or defined_in.startswith("eqxrl.")
    ):
        raise ValueError(f"{name!r} is not a function of eqxrl.")
    return value


def _from_json(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_from_json(item) for item in value)
    if isinstance(value, dict):
        if "algorithm_config" in value:
            return algorithm_from_config(value["algorithm_config"])
        if "environment" in value:
            return make(value["environment"], **value.get("kwargs", {}))
        if "callable" in value:
            return _resolve_callable(value["callable"])
        if "array" in value:
            return np.asarray(value["array"], dtype=value["dtype"])
        if "dtype" in value:
            return np.dtype(value["dtype"])
        if "float" in value:
            return float(value["float"])
    return value


def algorithm_to_config(
    algorithm: AbstractAlgorithm,
    *,
    env_name: str | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """An algorithm's configuration as JSON-ready data.

    Works for every registered algorithm from its dataclass fields: numbers (float32
    array scalars are written as the shortest decimal that reads back to the same
    float32), bools, strings and tuples as themselves, the environment by its
    registered id, eqxrl's own functions by name (e.g.
    `network_factory=eqxrl.nn.CNNActorCritic.from_env`). Values that cannot be
    written as data (e.g. a custom `network_factory` of your own) are recorded by
    their `repr` as `{"unserializable": ...}`;
    such a config cannot be rebuilt by
    [`algorithm_from_config`][eqxrl.training.algorithm_from_config] alone.

    **Arguments:**

    - `algorithm`: the algorithm, e.g. an `eqxrl.PPO`.
    - `env_name`, `env_kwargs`: the id and keyword arguments with which
      `eqxrl.envs.make` builds the algorithm's environment; by default the id is
      found among the registered ones (built without arguments).

    **Returns:**

    `{"algorithm": name, "fields": {field: value}}`; an algorithm that wraps another
    (e.g. [`Independent`][eqxrl.multiagent.Independent]) holds the wrapped one's
    config as `{"algorithm_config": ...}`, with the same `env_name`.
    """
    cls = type(algorithm)
    name = algorithm_name(cls)
    fields = {}
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        value = getattr(algorithm, field.name)
        if isinstance(value, AbstractAlgorithm):
            # A wrapped algorithm (e.g. eqxrl.multiagent.Independent's): its own
            # config, its environment built as this one's.
            nested = algorithm_to_config(
                value, env_name=env_name, env_kwargs=env_kwargs
            )
            fields[field.name] = {"algorithm_config": nested}
        elif isinstance(value, AbstractEnvironment) and env_name is not None:
            kwargs = dict(env_kwargs or {})
            if not _tree_equal(value, make(env_name, **kwargs)):
                raise ValueError(
                    f"env_name={env_name!r} with env_kwargs={kwargs} does not build "
                    f"the algorithm's environment {field.name}; pass the id and "
                    "arguments it was made with."
                )
            fields[field.name] = {"environment": env_name, "kwargs": kwargs}
        else:
            fields[field.name] = _to_json(value, field.name)
    return {
        "algorithm": name if name is not None else f"{cls.__module__}.{cls.__name__}",
        "fields": fields,
    }


def unserializable_fields(config: Mapping[str, Any]) -> list[str]:
    """Fields of a config made by `algorithm_to_config` that cannot be rebuilt."""
    return [
        name
        for name, value in config["fields"].items()
        if _contains_unserializable(value)
    ]


def _contains_unserializable(value: Any) -> bool:
    if isinstance(value, dict):
        if "algorithm_config" in value:
            return bool(unserializable_fields(value["algorithm_config"]))
        return "unserializable" in value
    if isinstance(value, list):
        return any(_contains_unserializable(v) for v in value)
    return False


def algorithm_from_config(config: Mapping[str, Any]) -> AbstractAlgorithm:
    """Rebuild an algorithm from
    [`algorithm_to_config`][eqxrl.training.algorithm_to_config]'s output.

    **Arguments:**

    - `config`: `{"algorithm": name, "fields": {...}}`; missing fields take their
      defaults.

    **Returns:**

    The algorithm, equal (as a pytree) to the one that was written.

    Raises `ValueError` when the algorithm is not registered, a field is unknown or
    cannot be rebuilt from data.
    """
    try:
        cls = algorithm_class(config["algorithm"])
    except ValueError as error:
        raise ValueError(
            f"{error} Register the class with eqxrl.algorithms.register_algorithm, "
            "or build the algorithm yourself and pass it."
        ) from None
    known = {field.name for field in dataclasses.fields(cls) if field.init}
    unknown = sorted(set(config["fields"]) - known)
    if unknown:
        raise ValueError(
            f"The config has fields {unknown} that {cls.__name__} does not have "
            f"(written by another version of eqxrl?); known fields: {sorted(known)}."
        )
    bad = unserializable_fields(config)
    if bad:
        details = ", ".join(f"{name}={config['fields'][name]}" for name in bad)
        raise ValueError(
            f"The config cannot be rebuilt from data: {details}. Build the algorithm "
            "yourself and pass it (e.g. load_checkpoint(path, algorithm=...))."
        )
    kwargs = {name: _from_json(value) for name, value in config["fields"].items()}
    return cls(**kwargs)


def config_differences(
    expected: Mapping[str, Any], found: Mapping[str, Any]
) -> list[str]:
    """Human-readable differences between two configs from `algorithm_to_config`
    (fields that cannot be written as data are not compared)."""
    differences = []
    if expected["algorithm"] != found["algorithm"]:
        differences.append(
            f"algorithm: {found['algorithm']!r} in the file, "
            f"{expected['algorithm']!r} now"
        )
    names = sorted(set(expected["fields"]) | set(found["fields"]))
    for name in names:
        a = expected["fields"].get(name, "<missing>")
        b = found["fields"].get(name, "<missing>")
        if _contains_unserializable(a) or _contains_unserializable(b):
            continue
        if a != b:
            differences.append(f"{name}: {b!r} in the file, {a!r} now")
    return differences
