"""What the two checkpoint storage formats share: the JSON header and its table of
array leaves, the error they raise, and durable folder writes.

The one-file format (`_checkpoint.py`) and the sharded format
(`_sharded_checkpoint.py`) both build on this module and never on each other;
`_checkpoint.py` dispatches to the sharded format for `.orbax` folders.
"""

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.tree_util as jtu
import numpy as np
from jaxtyping import PyTree

from .._version import __version__


class CheckpointError(ValueError):
    """A checkpoint file cannot be used, or cannot be written: missing, not a
    checkpoint, truncated, corrupt, made for another configuration, or a failed
    write (e.g. a full disk). The message says which and what to do; nothing has
    been loaded.

    **Attributes:**

    - `corrupt`: `True` when the file itself is damaged (truncated, checksum
      mismatch, unreadable): an earlier checkpoint may still be intact. `False` for
      a file that is fine but does not fit (another configuration, another format
      version) or could not be written.
    """

    def __init__(self, message: str, *, corrupt: bool = False):
        super().__init__(message)
        self.corrupt = corrupt


def _is_key(x: Any) -> bool:
    return isinstance(x, jax.Array | jax.ShapeDtypeStruct) and jax.dtypes.issubdtype(
        x.dtype, jax.dtypes.prng_key
    )


def _is_array(x: Any) -> bool:
    return isinstance(x, jax.Array | jax.ShapeDtypeStruct | np.ndarray)


def _leaf_table(tree: PyTree) -> list[dict[str, Any]]:
    """Path, shape and dtype of every array leaf, in serialization order."""
    table = []
    for path, leaf in jtu.tree_flatten_with_path(tree)[0]:
        if not _is_array(leaf):
            continue
        entry: dict[str, Any] = {
            "path": jtu.keystr(path),
            "shape": list(leaf.shape),
            "dtype": str(leaf.dtype),
        }
        if _is_key(leaf):
            entry["key_impl"] = str(leaf.dtype._impl.name)
        table.append(entry)
    return table


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, np.generic):
        return _json_safe(value.item())
    return value


def _versions() -> dict[str, str]:
    return {
        "eqxrl": __version__,
        "jax": jax.__version__,
        "equinox": eqx.__version__,
    }


def checkpoint_header(
    tree: PyTree,
    kind: str,
    config: Mapping[str, Any],
    batch_shape: tuple[int, ...] = (),
    metadata: Mapping[str, Any] | None = None,
    extra_header: Mapping[str, Any] | None = None,
    *,
    format_version: int,
) -> dict[str, Any]:
    """The JSON header of a checkpoint of `tree`, in the storage format of version
    `format_version`."""
    return {
        "format": "eqxrl-checkpoint",
        "format_version": format_version,
        "kind": kind,
        "versions": _versions(),
        "config": dict(config),
        "batch_shape": list(batch_shape),
        "metadata": _json_safe(dict(metadata or {})),
        "leaves": _leaf_table(tree),
        **dict(extra_header or {}),
    }


def _fsync_directory(folder: Path) -> None:
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)
