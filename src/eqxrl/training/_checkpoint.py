"""Checkpoints: the whole training state behind a JSON header, written atomically.

File layout (all integers little-endian):

```
b"EQXRL-CHECKPOINT\\n"           magic, 17 bytes
uint64                          length of the header in bytes
header                          UTF-8 JSON: format version, library versions, kind,
                                algorithm config, batch shape, metadata and the path,
                                shape and dtype of every array leaf
payload                         eqx.tree_serialise_leaves of the pytree (.npy records;
                                PRNG keys as their key data)
b"EQXRL-END"                    trailer magic, 9 bytes
uint64                          payload length
32 bytes                        SHA-256 of the header and the payload
```

The header comes first so that it can be read without the payload (`eqxrl eval`
prints it; a mismatched checkpoint is refused before any array is read); the trailer
holds the payload's length and the checksum, so the file is written in one pass.
The checksum covers the header too: an edited iteration count or configuration is
refused like a damaged array. Loading never unpickles.

This module is the one-file format and the entry points; they hand `.orbax` folders
(runs over a device mesh) to `_sharded_checkpoint.py`. What both formats share (the
header, `CheckpointError`) is in `_checkpoint_format.py`, so imports point one way.
"""

import hashlib
import json
import os
import re
import shutil
import struct
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np
from jax.sharding import Mesh
from jaxtyping import PyTree

from .._shape_memo import memoized_on_shapes
from .._version import __version__
from ..algorithms import AbstractAlgorithm
from ..nn import AbstractPolicy
from ._checkpoint_format import (
    CheckpointError,
    _fsync_directory,
    _is_key,
    _leaf_table,
    checkpoint_header,
)
from ._config import (
    algorithm_from_config,
    algorithm_to_config,
    config_differences,
)
from ._sharded_checkpoint import (
    SUFFIX as SHARDED_SUFFIX,
    read_sharded_header,
    read_sharded_state,
)

MAGIC = b"EQXRL-CHECKPOINT\n"
TRAILER_MAGIC = b"EQXRL-END"
FORMAT_VERSION = 2
_TRAILER_SIZE = len(TRAILER_MAGIC) + 8 + 32
_MAX_HEADER = 1 << 30


# --------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------


class _HashingWriter:
    """A binary file wrapper that hashes and counts what is written through it (the
    hash may be fed more, e.g. the header, beforehand)."""

    def __init__(self, file: BinaryIO):
        self.file = file
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        self.sha256.update(view)
        self.size += view.nbytes
        return self.file.write(data)


def _serialise_leaf(file: Any, x: Any) -> None:
    if _is_key(x):
        np.save(file, np.asarray(jr.key_data(x)), allow_pickle=False)
    elif isinstance(x, jax.Array | np.ndarray):
        np.save(file, np.asarray(x), allow_pickle=False)
    # Anything else (Python scalars, functions) is configuration: rebuilt, not saved.


def _atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Write through a temporary file in the same folder, then rename over `path`:
    readers see the old file or the complete new one, never a partial one."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        with open(temporary, "xb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)  # make the rename durable


def write_checkpoint_file(
    path: str | os.PathLike,
    tree: PyTree,
    *,
    kind: str,
    config: Mapping[str, Any],
    batch_shape: tuple[int, ...] = (),
    metadata: Mapping[str, Any] | None = None,
    extra_header: Mapping[str, Any] | None = None,
) -> Path:
    """Write `tree` with a header (the building block of `save_checkpoint` and of the
    policy export). `config` is `algorithm_to_config`'s output."""
    path = Path(path)
    header = checkpoint_header(
        tree,
        kind,
        config,
        batch_shape,
        metadata,
        extra_header,
        format_version=FORMAT_VERSION,
    )
    header_bytes = json.dumps(header, indent=1, allow_nan=False).encode("utf-8")

    def write(file: BinaryIO) -> None:
        file.write(MAGIC)
        file.write(struct.pack("<Q", len(header_bytes)))
        file.write(header_bytes)
        writer = _HashingWriter(file)
        writer.sha256.update(header_bytes)
        eqx.tree_serialise_leaves(writer, tree, filter_spec=_serialise_leaf)
        file.write(TRAILER_MAGIC)
        file.write(struct.pack("<Q", writer.size))
        file.write(writer.sha256.digest())

    if not path.parent.is_dir():
        raise CheckpointError(
            f"Cannot write {path}: the folder {path.parent} does not exist."
        )
    try:
        _atomic_write(path, write)
    except Exception as error:
        # Equinox reports a failed leaf write wrapped in its own error: find the
        # operating system's error (a full disk, a lost mount) and say that.
        os_error = _os_error_in(error)
        if os_error is None:
            raise
        reason = os_error.strerror or str(os_error)
        raise CheckpointError(f"Cannot write {path}: {reason}.") from None
    return path


def _os_error_in(error: BaseException) -> OSError | None:
    """`error` if it is an `OSError`, else the first one it was raised from."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, OSError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _batch_shape(
    algorithm: AbstractAlgorithm, state: PyTree, skeleton: PyTree | None = None
) -> tuple[int, ...]:
    """The leading axes `state` has beyond `algorithm.init`'s (e.g. `(num_seeds,)`),
    checking that the structure is a training state of `algorithm`."""
    if skeleton is None:
        skeleton = _init_skeleton(algorithm, ())
    state_leaves = _leaf_table(state)
    skeleton_leaves = _leaf_table(skeleton)
    if len(state_leaves) != len(skeleton_leaves):
        raise ValueError(
            f"The state has {len(state_leaves)} array leaves but "
            f"{type(algorithm).__name__}.init gives {len(skeleton_leaves)}: it is not "
            "a training state of this algorithm."
        )
    batch_shape = None
    for found, expected in zip(state_leaves, skeleton_leaves):
        extra = len(found["shape"]) - len(expected["shape"])
        if (
            found["path"] != expected["path"]
            or found["dtype"] != expected["dtype"]
            or extra < 0
            or found["shape"][extra:] != expected["shape"]
        ):
            raise ValueError(
                f"The state's leaf {found['path']} ({found['dtype']}"
                f"{found['shape']}) does not match {type(algorithm).__name__}.init's "
                f"{expected['path']} ({expected['dtype']}{expected['shape']}): it "
                "is not a training state of this algorithm."
            )
        leading = tuple(found["shape"][:extra])
        if batch_shape is None:
            batch_shape = leading
        elif leading != batch_shape:
            raise ValueError(
                f"The state's leaves have different leading axes ({batch_shape} and "
                f"{leading} at {found['path']}); a batched state (e.g. over seeds) "
                "must batch every leaf the same way."
            )
    return batch_shape or ()


@memoized_on_shapes
def _init_skeleton(algorithm: AbstractAlgorithm, batch_shape: tuple[int, ...]):
    """Shapes and dtypes of `algorithm.init` (batched), without running anything
    (remembered: every checkpoint of a run saves against the same one)."""
    init = algorithm.init
    for _ in batch_shape:
        init = eqx.filter_vmap(init)
    key = jax.ShapeDtypeStruct(batch_shape, jr.key(0).dtype)
    return eqx.filter_eval_shape(init, key)


def save_checkpoint(
    path: str | os.PathLike,
    state: PyTree,
    config: AbstractAlgorithm,
    *,
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Save a whole training state, atomically, with its configuration.

    Everything the state holds (policy, optimizer state, normalizer statistics,
    environment states, replay buffer, PRNG key, counters) is written with
    `eqx.tree_serialise_leaves` behind a JSON header with the algorithm's
    configuration, the library versions and the shape and dtype of every array. The
    file appears complete or not at all: it is written to a temporary file that is
    renamed over `path`.

    **Arguments:**

    - `path`: the file to write (conventionally `*.eqx`); its folder must exist.
    - `state`: a training state of `config`, e.g. the first output of
      `algorithm.train(key)`, or a batch of them (e.g. vmapped over seeds).
    - `config`: the algorithm the state belongs to (its hyperparameters; e.g. an
      `eqxrl.PPO`).
    - `metadata`: optional JSON-serializable extras stored in the header (the
      [`Trainer`][eqxrl.Trainer] stores the iteration count and the seed).

    **Returns:**

    The path written.

    !!! example

        ```python
        state, metrics = ppo.train(jax.random.key(0))
        eqxrl.save_checkpoint("ppo.eqx", state, ppo)
        state, ppo = eqxrl.load_checkpoint("ppo.eqx")
        ```
    """
    if not isinstance(config, AbstractAlgorithm):
        raise TypeError(
            f"save_checkpoint: config must be the algorithm (e.g. eqxrl.PPO), got "
            f"{type(config).__name__}."
        )
    return write_checkpoint_file(
        path,
        state,
        kind="training_state",
        config=algorithm_to_config(config),
        batch_shape=_batch_shape(config, state),
        metadata=metadata,
    )


# --------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------


class _Checkpoint:
    """An opened, verified checkpoint file: its header and where the payload is."""

    def __init__(self, path: Path, header: dict[str, Any], payload_offset: int):
        self.path = path
        self.header = header
        self.payload_offset = payload_offset


def read_checkpoint_header(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON header of a checkpoint or policy file, after checking the file is
    complete and uncorrupted.

    **Arguments:**

    - `path`: a file written by [`save_checkpoint`][eqxrl.save_checkpoint], the
      [`Trainer`][eqxrl.Trainer] or `eqxrl train` (or the `.orbax` folder of a
      run over a device mesh).

    **Returns:**

    A dict with `kind` (`"training_state"` or `"policy"`), `config` (the algorithm
    configuration), `versions`, `metadata` (e.g. `iteration`), `batch_shape` and
    `leaves`.

    Raises [`CheckpointError`][eqxrl.training.CheckpointError] saying what is wrong.
    """
    path = Path(path)
    if path.is_dir() and path.name.endswith(SHARDED_SUFFIX):
        return read_sharded_header(path)
    return _open_checkpoint(path).header


def _open_checkpoint(path: Path) -> _Checkpoint:
    if not path.exists():
        raise CheckpointError(f"No checkpoint at {path}: the file does not exist.")
    if path.is_dir():
        raise CheckpointError(
            f"{path} is a folder; pass a checkpoint file (e.g. "
            f"{path}/checkpoints/checkpoint-000000010.eqx) or use resolve_checkpoint."
        )
    size = path.stat().st_size
    with open(path, "rb") as file:
        magic = file.read(len(MAGIC))
        if magic != MAGIC:
            raise CheckpointError(
                f"{path} is not an eqxrl checkpoint (it does not start with "
                f"{MAGIC!r}); pass a file written by eqxrl.save_checkpoint or "
                "`eqxrl train`."
            )
        length_bytes = file.read(8)
        if len(length_bytes) < 8:
            raise CheckpointError(f"{path} is truncated: it ends inside the header.")
        (header_size,) = struct.unpack("<Q", length_bytes)
        header_end = len(MAGIC) + 8 + header_size
        if header_size > _MAX_HEADER or header_end + _TRAILER_SIZE > size:
            raise CheckpointError(
                f"{path} is truncated or corrupt: the header says {header_size} "
                f"bytes but the file has {size} bytes in all.",
                corrupt=True,
            )
        header_bytes = file.read(header_size)
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
            raise CheckpointError(
                f"{path} has checkpoint format version {version}; this eqxrl reads "
                f"version {FORMAT_VERSION}. Load it with the eqxrl version that wrote "
                f"it ({header.get('versions', {}).get('eqxrl', 'unknown')})."
            )
        file.seek(size - _TRAILER_SIZE)
        trailer = file.read(_TRAILER_SIZE)
        payload_size = size - _TRAILER_SIZE - header_end
        if trailer[: len(TRAILER_MAGIC)] != TRAILER_MAGIC:
            raise CheckpointError(
                f"{path} is truncated or corrupt: the end-of-file marker is "
                "missing (was the write interrupted, or the file cut short?).",
                corrupt=True,
            )
        (recorded_size,) = struct.unpack(
            "<Q", trailer[len(TRAILER_MAGIC) : len(TRAILER_MAGIC) + 8]
        )
        if recorded_size != payload_size:
            raise CheckpointError(
                f"{path} is truncated or corrupt: it holds {payload_size} bytes of "
                f"arrays but {recorded_size} were written.",
                corrupt=True,
            )
        file.seek(header_end)
        sha256 = hashlib.sha256(header_bytes)
        remaining = payload_size
        while remaining:
            block = file.read(min(remaining, 1 << 24))
            if not block:
                break
            sha256.update(block)
            remaining -= len(block)
        if sha256.digest() != trailer[-32:]:
            raise CheckpointError(
                f"{path} is corrupt: its checksum (of the header and the arrays) "
                "does not match the one written with them.",
                corrupt=True,
            )
    return _Checkpoint(path, header, header_end)


def _check_leaves(checkpoint: _Checkpoint, skeleton: PyTree, what: str) -> None:
    found = checkpoint.header.get("leaves", [])
    expected = _leaf_table(skeleton)
    path = checkpoint.path
    if len(found) != len(expected):
        raise CheckpointError(
            f"{path} does not match {what}: it holds {len(found)} arrays, the "
            f"configuration builds {len(expected)}."
        )
    for a, b in zip(found, expected):
        if (a["path"], a["shape"], a["dtype"]) != (b["path"], b["shape"], b["dtype"]):
            raise CheckpointError(
                f"{path} does not match {what}: array {a['path']} is "
                f"{a['dtype']}{a['shape']} in the file but the configuration builds "
                f"{b['path']} as {b['dtype']}{b['shape']}."
            )


def _read_payload(checkpoint: _Checkpoint, skeleton: PyTree) -> PyTree:
    key_impls = iter(
        [
            leaf.get("key_impl")
            for leaf in checkpoint.header["leaves"]
            if _is_keyish(leaf)
        ]
    )

    def deserialise_leaf(file: Any, x: Any) -> Any:
        if _is_key(x):
            data = np.load(file, allow_pickle=False)
            return jr.wrap_key_data(jnp.asarray(data), impl=next(key_impls))
        if isinstance(x, jax.ShapeDtypeStruct | jax.Array):
            data = np.load(file, allow_pickle=False)
            if data.shape != tuple(x.shape) or data.dtype != x.dtype:
                raise CheckpointError(
                    f"{checkpoint.path} is corrupt: an array has shape {data.shape} "
                    f"and dtype {data.dtype} where the header says {x.shape} "
                    f"{x.dtype}.",
                    corrupt=True,
                )
            return jnp.asarray(data)
        if isinstance(x, np.ndarray):
            return np.load(file, allow_pickle=False)
        return x

    # Equinox checks that each loaded leaf has the type of the `like` leaf: give key
    # leaves a key array of the right shape and implementation.
    key_impls_for_like = iter(
        [
            leaf.get("key_impl")
            for leaf in checkpoint.header["leaves"]
            if _is_keyish(leaf)
        ]
    )

    def key_like(x: Any) -> Any:
        if _is_key(x) and isinstance(x, jax.ShapeDtypeStruct):
            impl = next(key_impls_for_like)
            data_shape = jax.eval_shape(lambda: jr.key_data(jr.key(0, impl=impl))).shape
            zeros = jnp.zeros((*x.shape, *data_shape), jnp.uint32)
            return jr.wrap_key_data(zeros, impl=impl)
        return x

    skeleton = jtu.tree_map(key_like, skeleton)
    with open(checkpoint.path, "rb") as file:
        file.seek(checkpoint.payload_offset)
        try:
            tree = eqx.tree_deserialise_leaves(
                file, skeleton, filter_spec=deserialise_leaf
            )
        except CheckpointError:
            raise
        except Exception as error:  # a malformed .npy record
            raise CheckpointError(
                f"{checkpoint.path} is corrupt: its arrays cannot be read ({error}).",
                corrupt=True,
            ) from None
    return tree


def _is_keyish(entry: Mapping[str, Any]) -> bool:
    return "key_impl" in entry


def _algorithm_for(
    checkpoint: _Checkpoint,
    algorithm: AbstractAlgorithm | None,
    expected_config: Mapping[str, Any] | None = None,
) -> AbstractAlgorithm:
    """The algorithm of a checkpoint: rebuilt from its header, or the one given
    (checked against the header, through `expected_config` if given)."""
    config = checkpoint.header["config"]
    if algorithm is None:
        try:
            return algorithm_from_config(config)
        except ValueError as error:
            raise CheckpointError(f"{checkpoint.path}: {error}") from None
    if expected_config is None:
        expected_config = algorithm_to_config(algorithm)
    differences = config_differences(expected_config, config)
    if differences:
        raise CheckpointError(
            f"{checkpoint.path} was written with another configuration: "
            + "; ".join(differences)
            + ". Use the same hyperparameters to resume, or start a new run."
        )
    return algorithm


def _warn_on_version(checkpoint: _Checkpoint) -> None:
    written = checkpoint.header.get("versions", {}).get("eqxrl")
    if written != __version__:
        warnings.warn(
            f"{checkpoint.path} was written by eqxrl {written}; this is "
            f"{__version__}. Its arrays match this version's configuration, so it "
            "loads.",
            stacklevel=3,
        )


def load_checkpoint(
    path: str | os.PathLike,
    *,
    algorithm: AbstractAlgorithm | None = None,
) -> tuple[PyTree, AbstractAlgorithm]:
    """Load a training state saved by [`save_checkpoint`][eqxrl.save_checkpoint] (or
    by the [`Trainer`][eqxrl.Trainer] / `eqxrl train`).

    The file is checked completely before anything is returned: its header, its
    length, the SHA-256 of its arrays, and the path, shape and dtype of every array
    against the state that the configuration builds (`algorithm.init` under
    `eqx.filter_eval_shape`, so nothing is run). No pickle is involved.

    **Arguments:**

    - `path`: a checkpoint file, or a run folder / its `checkpoints/` folder (the
      latest checkpoint in it is loaded).
    - `algorithm`: the algorithm the state belongs to. By default it is rebuilt from
      the header; pass it when the configuration holds something that cannot be
      written as data (a custom `network_factory` or an unregistered environment).
      It must match the header's configuration.

    **Returns:**

    `(state, algorithm)`: the training state (exactly as saved) and its algorithm,
    ready for `algorithm.train_iterations(state, n)` or `algorithm.policy(state)`.

    Raises [`CheckpointError`][eqxrl.training.CheckpointError] (a `ValueError`) when
    the file is missing, truncated, corrupt or made for another configuration.
    """
    state, algorithm, _ = load_training_state(path, algorithm=algorithm)
    return state, algorithm


def load_training_state(
    path: str | os.PathLike,
    *,
    algorithm: AbstractAlgorithm | None = None,
    expected_config: Mapping[str, Any] | None = None,
    mesh: Mesh | None = None,
) -> tuple[PyTree, AbstractAlgorithm, dict[str, Any]]:
    """`load_checkpoint` that also returns the header. A sharded checkpoint (a
    `.orbax` folder) is restored onto `mesh` (or onto one device without one)."""
    path = resolve_checkpoint(path)
    if path.is_dir():
        checkpoint = _Checkpoint(path, read_sharded_header(path), 0)
    else:
        checkpoint = _open_checkpoint(path)
    if checkpoint.header.get("kind") != "training_state":
        raise CheckpointError(
            f"{checkpoint.path} holds a {checkpoint.header.get('kind')}, not a "
            "training state; load it with eqxrl.load_policy."
        )
    algorithm = _algorithm_for(checkpoint, algorithm, expected_config)
    batch_shape = tuple(checkpoint.header.get("batch_shape", []))
    skeleton = _init_skeleton(algorithm, batch_shape)
    _check_leaves(checkpoint, skeleton, f"{type(algorithm).__name__}'s training state")
    _warn_on_version(checkpoint)
    if path.is_dir():
        state = read_sharded_state(path, checkpoint.header, skeleton, algorithm, mesh)
        return state, algorithm, checkpoint.header
    return _read_payload(checkpoint, skeleton), algorithm, checkpoint.header


def save_policy(
    path: str | os.PathLike,
    state: PyTree,
    algorithm: AbstractAlgorithm,
    *,
    deterministic: bool = True,
    metadata: Mapping[str, Any] | None = None,
    env_name: str | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
) -> Path:
    """Export the policy alone (no optimizer state, buffers or environments), for
    [`load_policy`][eqxrl.load_policy] and `eqxrl eval`: the format the
    [`Trainer`][eqxrl.Trainer] writes as `policy.eqx`.

    **Arguments:**

    - `path`: the file to write (conventionally `policy.eqx`).
    - `state`: a (single, unbatched) training state of `algorithm`.
    - `algorithm`: its algorithm.
    - `deterministic`: the default way the loaded policy acts (greedy if `True`).
    - `metadata`: optional JSON-serializable extras for the header.
    - `env_name`, `env_kwargs`: the id and keyword arguments with which
      `eqxrl.envs.make` builds the algorithm's environment, so that the file can
      be loaded without the algorithm; found automatically for registered
      environments made without arguments.

    **Returns:**

    The path written.
    """
    policy = algorithm.policy(state, deterministic)
    return write_checkpoint_file(
        path,
        policy,
        kind="policy",
        config=algorithm_to_config(algorithm, env_name=env_name, env_kwargs=env_kwargs),
        metadata=metadata,
        extra_header={"deterministic": deterministic},
    )


def load_policy(
    path: str | os.PathLike,
    *,
    deterministic: bool | None = None,
    algorithm: AbstractAlgorithm | None = None,
) -> AbstractPolicy:
    """Load a trained policy, ready to act.

    **Arguments:**

    - `path`: a policy file (`policy.eqx`, written by `eqxrl train` or
      `save_policy`), a checkpoint file, or a run folder (its `policy.eqx`, else its
      latest checkpoint).
    - `deterministic`: act greedily (`True`) or sample (`False`); by default as the
      file says (policy files from `eqxrl train` are greedy; checkpoints sample).
    - `algorithm`: as for [`load_checkpoint`][eqxrl.load_checkpoint], when the
      configuration cannot be rebuilt from the header.

    **Returns:**

    An [`AbstractPolicy`][eqxrl.nn.AbstractPolicy]: `policy.act(observation, key,
    action_mask=None)` is jitted and takes one observation. A recurrent policy
    (`policy.is_recurrent`, e.g. from `eqxrl train --network gru`) acts with
    `carry, action = policy.step(carry, observation, key)` instead, from
    `policy.initial_carry()` at each episode's start.

    !!! example

        ```python
        policy = eqxrl.load_policy("runs/cartpole/policy.eqx")
        action = policy.act(observation, jax.random.key(0))
        ```
    """
    path = Path(path)
    if path.is_dir() and (path / "policy.eqx").is_file():
        path = path / "policy.eqx"
    path = resolve_checkpoint(path)
    checkpoint = _open_checkpoint(path)
    kind = checkpoint.header.get("kind")
    if kind == "training_state":
        if checkpoint.header.get("batch_shape"):
            raise CheckpointError(
                f"{path} holds a batch of training states (batch shape "
                f"{checkpoint.header['batch_shape']}, e.g. several seeds); load it "
                "with load_checkpoint and pick one with jax.tree.map(lambda x: x[i])."
            )
        state, algorithm = load_checkpoint(path, algorithm=algorithm)
        return algorithm.policy(state, bool(deterministic))
    if kind != "policy":
        raise CheckpointError(f"{path} holds an unknown kind of data: {kind!r}.")
    algorithm = _algorithm_for(checkpoint, algorithm)
    if deterministic is None:
        deterministic = bool(checkpoint.header.get("deterministic", True))
    # The flag is static configuration: the arrays are the same either way.
    skeleton = eqx.filter_eval_shape(
        lambda key: algorithm.policy(algorithm.init(key), deterministic), jr.key(0)
    )
    _check_leaves(checkpoint, skeleton, f"{type(algorithm).__name__}'s policy")
    _warn_on_version(checkpoint)
    return _read_payload(checkpoint, skeleton)


# --------------------------------------------------------------------------------------
# Folders of checkpoints
# --------------------------------------------------------------------------------------

_CHECKPOINT_NAME = re.compile(r"^checkpoint-(\d+)\.(eqx|orbax)$")


def checkpoint_path(
    directory: str | os.PathLike, iteration: int, *, sharded: bool = False
) -> Path:
    """`directory/checkpoint-{iteration:09d}.eqx`, or with `sharded` the folder
    `directory/checkpoint-{iteration:09d}.orbax` (a run over a device mesh)."""
    suffix = "orbax" if sharded else "eqx"
    return Path(directory) / f"checkpoint-{iteration:09d}.{suffix}"


def list_checkpoints(directory: str | os.PathLike) -> list[tuple[int, Path]]:
    """`(iteration, path)` of the checkpoints in a folder, oldest first: files
    (`.eqx`) and sharded checkpoint folders (`.orbax`). Temporary files and folders
    of interrupted writes are ignored."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for entry in directory.iterdir():
        match = _CHECKPOINT_NAME.match(entry.name)
        if not match:
            continue
        if entry.is_file() if match.group(2) == "eqx" else entry.is_dir():
            found.append((int(match.group(1)), entry))
    return sorted(found)


def resolve_checkpoint(path: str | os.PathLike) -> Path:
    """A checkpoint from a checkpoint file or `.orbax` folder, a `checkpoints/`
    folder or a run folder (the latest checkpoint)."""
    path = Path(path)
    if not path.is_dir() or _CHECKPOINT_NAME.match(path.name):
        if not path.exists():
            raise CheckpointError(f"No checkpoint at {path}: the file does not exist.")
        return path
    for directory in (path / "checkpoints", path):
        found = list_checkpoints(directory)
        if found:
            return found[-1][1]
    raise CheckpointError(
        f"No checkpoint in {path}: expected files named checkpoint-NNNNNNNNN.eqx "
        f"(or folders checkpoint-NNNNNNNNN.orbax) in {path}/checkpoints/ or in "
        f"{path}."
    )


def prune_checkpoints(directory: str | os.PathLike, keep: int) -> list[Path]:
    """Delete all but the `keep` most recent checkpoints of a folder; returns the
    deleted paths."""
    found = list_checkpoints(directory)
    deleted = []
    for _, path in found[: max(len(found) - keep, 0)]:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        deleted.append(path)
    return deleted
