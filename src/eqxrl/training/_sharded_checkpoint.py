"""Checkpoints of runs over a device mesh, through `orbax-checkpoint`: every process
writes the shards it holds, and nothing is gathered into one process.

A sharded checkpoint is a folder `checkpoint-{iteration:09d}.orbax/` holding

```
header.json      the header of the one-file format (configuration, metadata, the
                 path, shape and dtype of every array), with "storage": "orbax",
                 format version 3, and two tables of checksums:
                 - per array leaf, "checksum": 16 hex digits over the array's
                   values (below);
                 - "array_files": the SHA-256 of every file under arrays/, by its
                   path there
header.sha256    the SHA-256 of header.json
arrays/          orbax's checkpoint of the state's arrays, a flat dict by position
                 (PRNG keys as their key data)
```

It is written under a temporary name (`.checkpoint-{iteration:09d}.orbax.tmp`) and
renamed by process 0 once every process has written its shards: a reader sees a
whole checkpoint or none, and a run killed while writing keeps its previous one.

Loading checks, in order: the header's checksum and version; every array's path,
shape and dtype against the state the configuration builds; the SHA-256 of every
file under `arrays/` (process 0 reads them and tells the others), so that orbax is
never handed a damaged file: a failed orbax restore returns while tensorstore still
reads, and those reads later find orbax's event loop closed (unraisable "Event loop
is closed" errors); over several processes, the processes whose reads succeed can
wait forever, in orbax's barrier, for one that failed. Then orbax restores onto the
mesh given (any number of devices or processes; orbax reshards), or onto one device;
last, every array's checksum is recomputed on the restored arrays and compared with
the header, which catches values that differ from those saved though the files are
the ones recorded (e.g. damage done before process 0 read them back).

The array checksum does not depend on how the array is sharded, so it is computed
where the arrays are, under `jax.jit`, by every process at once, and checked after
a restore onto any mesh. Each element, as 32-bit words (an 8-byte element is two
words, a 1- or 2-byte element is widened to one), is mixed with its position (the
row-major index of the word, modulo 2**32):
`fmix32(fmix32(index ^ seed) ^ word)`, with murmur3's finalizer `fmix32`; the words'
mixes are summed modulo 2**32, for two seeds (64 bits in all). A sum does not
depend on the order of the reduction, and for a fixed position the mix is a
bijection of the word, so a change of any one element always changes the checksum.
It finds damage, like the SHA-256 of the one-file format; it is no signature.
"""

import functools
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import jax
import jax.lax as lax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding
from jaxtyping import Array, PyTree, Shaped, UInt32

from ..algorithms import AbstractAlgorithm
from ._checkpoint_format import (
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
# The sharded format's own version (the one-file format has its own): 3 added the
# checksums of the arrays and of orbax's files.
FORMAT_VERSION = 3
_CHECKSUM_SEEDS = (0x243F6A88, 0x85A308D3)  # two distinct constants (digits of pi)


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
    """The array leaves of `tree` by position (the order of the header's leaf
    table), PRNG keys as their key data."""
    leaves = [leaf for leaf in jtu.tree_leaves(tree) if _is_array(leaf)]
    return {
        f"{index:05d}": jr.key_data(leaf) if _is_key(leaf) else leaf
        for index, leaf in enumerate(leaves)
    }


# --------------------------------------------------------------------------------------
# Checksums
# --------------------------------------------------------------------------------------


def _fmix32(h: UInt32[Array, "*shape"]) -> UInt32[Array, "*shape"]:
    """murmur3's finalizer: a bijection of uint32 in which every input bit moves
    about half of the output bits."""
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x85EBCA6B)
    h = h ^ (h >> 13)
    h = h * jnp.uint32(0xC2B2AE35)
    return h ^ (h >> 16)


def _words(x: Shaped[Array, "*shape"]) -> UInt32[Array, "*words"]:
    """The bits of `x` as uint32 words: one per element, two (a trailing axis) for
    8-byte elements."""
    if x.dtype == jnp.bool_:
        return x.astype(jnp.uint32)
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        return _words(jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1))
    size = x.dtype.itemsize
    if size in (4, 8):
        return lax.bitcast_convert_type(x, jnp.uint32)
    unsigned = {1: jnp.uint8, 2: jnp.uint16}[size]
    return lax.bitcast_convert_type(x, unsigned).astype(jnp.uint32)


def _array_checksum(x: Shaped[Array, "*shape"]) -> UInt32[Array, "2"]:
    words = _words(x)
    # Row-major position of every word, built from iotas so that each device
    # computes the global positions of its own shard.
    index = jnp.zeros(words.shape, jnp.uint32)
    stride = 1
    for axis in reversed(range(words.ndim)):
        position = lax.broadcasted_iota(jnp.uint32, words.shape, axis)
        index = index + position * jnp.uint32(stride % 2**32)
        stride *= words.shape[axis]
    lanes = []
    for seed in _CHECKSUM_SEEDS:
        mixed = _fmix32(_fmix32(index ^ jnp.uint32(seed)) ^ words)
        lanes.append(jnp.sum(mixed, dtype=jnp.uint32))  # wraps: exact in any order
    return jnp.stack(lanes)


def _array_checksums_of(arrays: list[jax.Array]) -> UInt32[Array, "num_arrays 2"]:
    return jnp.stack([_array_checksum(x) for x in arrays])


@functools.lru_cache(maxsize=8)
def _checksum_program(out_sharding: NamedSharding | None):
    return jax.jit(_array_checksums_of, out_shardings=out_sharding)


def _array_checksums(arrays: list[Any]) -> list[str]:
    """The checksum of each array, as 16 hex digits. Every process calls it with
    the same (global) arrays; the arrays stay where they are."""
    arrays = [x if isinstance(x, jax.Array) else jnp.asarray(x) for x in arrays]
    # One compiled program per set of devices (usually one: the mesh or a device).
    groups: dict[frozenset, list[int]] = {}
    for index, x in enumerate(arrays):
        groups.setdefault(frozenset(x.sharding.device_set), []).append(index)
    checksums = [""] * len(arrays)
    for indices in groups.values():
        sharding = arrays[indices[0]].sharding
        # Replicated, so that every process holds the whole result.
        replicated = (
            NamedSharding(sharding.mesh, PartitionSpec())
            if isinstance(sharding, NamedSharding)
            else None
        )
        result = _checksum_program(replicated)([arrays[i] for i in indices])
        values = np.asarray(
            result.addressable_data(0) if result.is_fully_replicated else result
        )
        for i, (high, low) in zip(indices, values.tolist()):
            checksums[i] = f"{high:08x}{low:08x}"
    return checksums


def _file_sha256(path: Path) -> str:
    sha256 = hashlib.sha256()
    with open(path, "rb") as file:
        while block := file.read(1 << 24):
            sha256.update(block)
    return sha256.hexdigest()


def _file_table(arrays: Path) -> dict[str, str]:
    """The SHA-256 of every file under orbax's folder, by its path there."""
    return {
        path.relative_to(arrays).as_posix(): _file_sha256(path)
        for path in sorted(arrays.rglob("*"))
        if path.is_file()
    }


# --------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------


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
    storable = _storable(tree)
    checksums = _array_checksums(list(storable.values()))
    if primary:
        shutil.rmtree(temporary, ignore_errors=True)  # left by a killed run
        temporary.mkdir(parents=False)
    multihost_utils.sync_global_devices(f"eqxrl checkpoint start {path.name}")
    try:
        with ocp.StandardCheckpointer() as checkpointer:
            checkpointer.save(temporary / ARRAYS, storable)
            checkpointer.wait_until_finished()
    except OSError as error:
        raise CheckpointError(
            f"Cannot write {path}: {error.strerror or error}."
        ) from None
    multihost_utils.sync_global_devices(f"eqxrl checkpoint arrays {path.name}")
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
                "array_files": _file_table(temporary / ARRAYS),
            },
            format_version=FORMAT_VERSION,
        )
        for leaf, checksum in zip(header["leaves"], checksums, strict=True):
            leaf["checksum"] = checksum
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


# --------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------


def read_sharded_header(path: Path) -> dict[str, Any]:
    """The header of a sharded checkpoint folder, after checking its checksum and
    format version."""
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
    try:
        header = json.loads(header_bytes.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(
            f"{path} is corrupt: its JSON header cannot be read ({error}).",
            corrupt=True,
        ) from None
    if not isinstance(header, dict) or header.get("format") != "eqxrl-checkpoint":
        raise CheckpointError(
            f"{path} is corrupt: its header is not eqxrl's.", corrupt=True
        )
    version = header.get("format_version")
    if version != FORMAT_VERSION:
        written_by = header.get("versions", {}).get("eqxrl", "unknown")
        older = (
            " (an older sharded format, whose arrays carry no checksums)"
            if isinstance(version, int) and version < FORMAT_VERSION
            else ""
        )
        raise CheckpointError(
            f"{path} has sharded checkpoint format version {version}{older}; this "
            f"eqxrl reads version {FORMAT_VERSION}. Load it with the eqxrl version "
            f"that wrote it ({written_by})."
        )
    if not (path / ARRAYS).is_dir():
        raise CheckpointError(
            f"{path} is incomplete or corrupt: its arrays/ folder is missing.",
            corrupt=True,
        )
    return header


def _check_array_files(path: Path, header: dict[str, Any]) -> None:
    """Refuse a checkpoint any of whose orbax files is missing or differs from the
    one written, before orbax reads any: process 0 reads them all and tells the
    others which file failed, so that every process raises the same error."""
    names = sorted(header["array_files"])
    verdict = np.array([-1, 0], np.int32)  # (index of the bad file, missing?)
    if jax.process_index() == 0:
        for index, name in enumerate(names):
            file = path / ARRAYS / name
            if not file.is_file():
                verdict = np.array([index, 1], np.int32)
                break
            if _file_sha256(file) != header["array_files"][name]:
                verdict = np.array([index, 0], np.int32)
                break
    if jax.process_count() > 1:
        verdict = np.asarray(multihost_utils.broadcast_one_to_all(verdict))
    index, missing = (int(value) for value in verdict)
    if index >= 0:
        problem = "is missing" if missing else "differs from the one written"
        raise CheckpointError(
            f"{path} is corrupt: its file {ARRAYS}/{names[index]} {problem} "
            "(checked by its SHA-256 before any array was read).",
            corrupt=True,
        )


def read_sharded_state(
    path: Path,
    header: dict[str, Any],
    skeleton: PyTree,
    algorithm: AbstractAlgorithm,
    mesh: Mesh | None,
) -> PyTree:
    """The state of a sharded checkpoint (whose header and leaves are checked),
    restored onto `mesh` as `algorithm.state_shardings` places it, or onto this
    process's first device. Every array's checksum is checked."""
    ocp = _orbax()
    _check_array_files(path, header)
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
    except Exception as error:  # e.g. a file changed since it was checked
        raise CheckpointError(
            f"{path} is corrupt: its arrays cannot be read ({type(error).__name__}: "
            f"{str(error)[:300]}).",
            corrupt=True,
        ) from None
    keys = list(targets)  # in the order of the header's leaves
    checksums = _array_checksums([arrays[key] for key in keys])
    for entry, checksum in zip(header["leaves"], checksums, strict=True):
        if checksum != entry["checksum"]:
            raise CheckpointError(
                f"{path} is corrupt: the array {entry['path']} does not hold the "
                f"values written (its checksum is {checksum}, the header records "
                f"{entry['checksum']}).",
                corrupt=True,
            )
    restored = []
    for key, impl in zip(keys, key_impls):
        leaf = arrays[key]
        restored.append(leaf if impl is None else jr.wrap_key_data(leaf, impl=impl))
    restored_iter = iter(restored)
    return jtu.tree_map(
        lambda leaf: next(restored_iter) if _is_array(leaf) else leaf, skeleton
    )
