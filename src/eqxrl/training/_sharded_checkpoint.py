"""Checkpoints of runs over a device mesh, through `orbax-checkpoint`: every process
writes the shards it holds, and nothing is gathered into one process.

A sharded checkpoint is a folder `checkpoint-{iteration:09d}.orbax/` holding

```
header.json      the header of the one-file format (configuration, metadata, the
                 path, shape and dtype of every array), with "storage": "orbax"
header.sha256    the SHA-256 of header.json
arrays/          orbax's checkpoint of the state's arrays, a flat dict by position
                 (PRNG keys as their key data)
```

It is written under a temporary name (`.checkpoint-{iteration:09d}.orbax.tmp`) and
renamed by process 0 once every process has written its shards: a reader sees a
whole checkpoint or none, and a run killed while writing keeps its previous one.
Loading checks the header's checksum and every array's path, shape and dtype
against the state the configuration builds, then restores onto the mesh given (any
number of devices or processes; orbax reshards), or onto one device.
"""

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.random as jr
import jax.tree_util as jtu
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding
from jaxtyping import PyTree

from ..algorithms import AbstractAlgorithm
from ._checkpoint import (
    FORMAT_VERSION,
    CheckpointError,
    _fsync_directory,
    _is_array,
    _is_key,
    checkpoint_header,
)

SUFFIX = ".orbax"
HEADER = "header.json"
HEADER_CHECKSUM = "header.sha256"
ARRAYS = "arrays"


def _orbax():
    try:
        import orbax.checkpoint as ocp
    except ImportError:
        raise ImportError(
            "Checkpoints of a run over a device mesh are written with "
            "orbax-checkpoint: pip install 'eqxrl[scale]' (or orbax-checkpoint)."
        ) from None
    return ocp


def _storable(tree: PyTree) -> dict[str, jax.Array]:
    """The array leaves of `tree` by position, PRNG keys as their key data."""
    leaves = [leaf for leaf in jtu.tree_leaves(tree) if eqx.is_array(leaf)]
    return {
        f"{index:05d}": jr.key_data(leaf) if _is_key(leaf) else leaf
        for index, leaf in enumerate(leaves)
    }


def write_sharded_checkpoint(
    path: str | os.PathLike,
    tree: PyTree,
    *,
    kind: str,
    config: dict[str, Any],
    batch_shape: tuple[int, ...] = (),
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Write `tree` (arrays possibly sharded over devices and processes) as a
    sharded checkpoint folder at `path` (ending in `.orbax`). Every process calls
    it; each writes its own shards."""
    ocp = _orbax()
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp")
    primary = jax.process_index() == 0
    if primary:
        shutil.rmtree(temporary, ignore_errors=True)  # left by a killed run
        temporary.mkdir(parents=False)
    multihost_utils.sync_global_devices(f"eqxrl checkpoint start {path.name}")
    try:
        with ocp.StandardCheckpointer() as checkpointer:
            checkpointer.save(temporary / ARRAYS, _storable(tree))
            checkpointer.wait_until_finished()
    except OSError as error:
        raise CheckpointError(
            f"Cannot write {path}: {error.strerror or error}."
        ) from None
    if primary:
        header = checkpoint_header(
            tree,
            kind,
            config,
            batch_shape,
            metadata,
            {
                "storage": "orbax",
                "processes": jax.process_count(),
                "devices": jax.device_count(),
            },
        )
        header_bytes = json.dumps(header, indent=1, allow_nan=False).encode("utf-8")
        (temporary / HEADER).write_bytes(header_bytes)
        (temporary / HEADER_CHECKSUM).write_text(
            hashlib.sha256(header_bytes).hexdigest()
        )
        _fsync_tree(temporary)
        if path.exists():
            shutil.rmtree(path)
        os.replace(temporary, path)
        _fsync_directory(path.parent)
    multihost_utils.sync_global_devices(f"eqxrl checkpoint end {path.name}")
    return path


def _fsync_tree(folder: Path) -> None:
    for root, _, files in os.walk(folder):
        for name in files:
            with open(os.path.join(root, name), "rb") as file:
                os.fsync(file.fileno())
        _fsync_directory(Path(root))


def read_sharded_header(path: Path) -> dict[str, Any]:
    """The header of a sharded checkpoint folder, after checking its checksum."""
    try:
        header_bytes = (path / HEADER).read_bytes()
        recorded = (path / HEADER_CHECKSUM).read_text().strip()
    except FileNotFoundError as error:
        raise CheckpointError(
            f"{path} is incomplete or corrupt: {Path(error.filename).name} is missing.",
            corrupt=True,
        ) from None
    if hashlib.sha256(header_bytes).hexdigest() != recorded:
        raise CheckpointError(
            f"{path} is corrupt: the checksum of its header does not match the one "
            "written with it.",
            corrupt=True,
        )
    header = json.loads(header_bytes.decode("utf-8"))
    version = header.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has checkpoint format version {version}; this eqxrl reads "
            f"version {FORMAT_VERSION}. Load it with the eqxrl version that wrote it "
            f"({header.get('versions', {}).get('eqxrl', 'unknown')})."
        )
    if not (path / ARRAYS).is_dir():
        raise CheckpointError(
            f"{path} is incomplete or corrupt: its arrays/ folder is missing.",
            corrupt=True,
        )
    return header


def read_sharded_state(
    path: Path,
    header: dict[str, Any],
    skeleton: PyTree,
    algorithm: AbstractAlgorithm,
    mesh: Mesh | None,
) -> PyTree:
    """The state of a sharded checkpoint (whose header and leaves are checked),
    restored onto `mesh` as `algorithm.state_shardings` places it, or onto this
    process's first device."""
    ocp = _orbax()
    batched = bool(header.get("batch_shape"))
    if mesh is not None:
        shardings = algorithm.state_shardings(skeleton, mesh, batched=batched)
    else:
        device = SingleDeviceSharding(jax.local_devices()[0])
        shardings = jax.tree.map(
            lambda leaf: device if _is_array(leaf) else None, skeleton
        )
    leaves = [leaf for leaf in jtu.tree_leaves(skeleton) if _is_array(leaf)]
    placements = [
        sharding
        for sharding in jtu.tree_leaves(shardings, is_leaf=lambda x: x is None)
        if sharding is not None
    ]
    key_impls = [entry.get("key_impl") for entry in header["leaves"]]
    targets = {}
    for index, (leaf, sharding, impl) in enumerate(zip(leaves, placements, key_impls)):
        shape, dtype = leaf.shape, leaf.dtype
        if impl is not None:
            data = jax.eval_shape(lambda impl=impl: jr.key_data(jr.key(0, impl=impl)))
            shape, dtype = (*shape, *data.shape), data.dtype
            if isinstance(sharding, NamedSharding):
                # Key data has trailing axes that are never split.
                spec = (*sharding.spec, *[None] * (len(shape) - len(sharding.spec)))
                sharding = NamedSharding(sharding.mesh, PartitionSpec(*spec))
        targets[f"{index:05d}"] = jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)
    try:
        with ocp.StandardCheckpointer() as checkpointer:
            arrays = checkpointer.restore(path / ARRAYS, targets)
    except Exception as error:  # a missing or damaged shard file
        raise CheckpointError(
            f"{path} is corrupt: its arrays cannot be read ({type(error).__name__}: "
            f"{str(error)[:300]}).",
            corrupt=True,
        ) from None
    restored = []
    for index, impl in enumerate(key_impls):
        leaf = arrays[f"{index:05d}"]
        restored.append(leaf if impl is None else jr.wrap_key_data(leaf, impl=impl))
    restored_iter = iter(restored)
    return jtu.tree_map(
        lambda leaf: next(restored_iter) if _is_array(leaf) else leaf, skeleton
    )
