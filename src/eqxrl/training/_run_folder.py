"""A run folder as one `Trainer.fit` holds it: locked against other processes, new
unless resumed on purpose, and where its checkpoints are written and read back."""

import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from jax.sharding import Mesh
from jaxtyping import PyTree

from ..algorithms import AbstractAlgorithm
from ._checkpoint import (
    CheckpointError,
    _atomic_write,
    checkpoint_path,
    list_checkpoints,
    load_training_state,
    prune_checkpoints,
    write_checkpoint_file,
)
from ._processes import primary_process, sync_processes, to_host
from ._sharded_checkpoint import write_sharded_checkpoint

# What a new run refuses to overwrite, and the lock file that keeps a folder to one
# process.
_RESULT_FILES = (
    "config.json",
    "metrics.csv",
    "metrics.jsonl",
    "summary.json",
    "policy.eqx",
    "curve.png",
    "eval.gif",
)
_LOCK_FILE = ".eqxrl.lock"


class RunFolder:
    """A run folder opened by one `Trainer.fit`: writable, locked against other
    processes, and either new, or resumed on purpose."""

    def __init__(self, path: Path, resume: bool, config: dict[str, Any], lock: Any):
        self.path = path
        self.resume = resume
        self.config = config  # the algorithm's, as checkpoints record it
        self.checkpoints_dir = path / "checkpoints"
        self.checkpoints = list_checkpoints(self.checkpoints_dir)
        self._lock = lock

    @classmethod
    def open(cls, path: Path, resume: bool, config: dict[str, Any]) -> "RunFolder":
        _check_writable(path)
        lock = _lock_folder(path)
        try:
            folder = cls(path, resume, config, lock)
            if not resume:
                folder.refuse_earlier_results()
            folder.checkpoints_dir.mkdir(exist_ok=True)
            for stale in folder.checkpoints_dir.glob(".checkpoint-*.tmp"):
                # Left by a process killed mid-write (a sharded one is a folder).
                if stale.is_dir():
                    shutil.rmtree(stale, ignore_errors=True)
                else:
                    stale.unlink(missing_ok=True)
        except BaseException:
            _unlock(lock)
            raise
        return folder

    @classmethod
    def follow(cls, path: Path, resume: bool, config: dict[str, Any]) -> "RunFolder":
        """The folder another process (process 0) has opened: read, not locked."""
        return cls(path, resume, config, None)

    def refuse_earlier_results(self) -> None:
        found = [name for name in _RESULT_FILES if (self.path / name).exists()]
        if self.checkpoints:
            found.insert(0, f"checkpoints up to iteration {self.checkpoints[-1][0]:,d}")
        if found:
            raise FileExistsError(
                f"{self.path} already holds a run ({', '.join(found)}). Resume it "
                "(resume=True, --resume) or choose another output folder; nothing "
                "was changed."
            )

    def describe_contents(self) -> str:
        """`runs/x/: checkpoints/, config.json, ...`: what the folder holds."""
        entries = sorted(
            entry.name + ("/" if entry.is_dir() else "")
            for entry in self.path.iterdir()
            if not entry.name.startswith(".")
        )
        return f"{self.path}/: {', '.join(entries)}"

    def save(
        self,
        state: PyTree,
        iteration: int,
        metadata: dict[str, Any],
        *,
        sharded: bool,
        batch_shape: tuple[int, ...],
        keep: int,
    ) -> None:
        """Write `state` as the checkpoint of `iteration` (a sharded one, each
        process its shards, for a run over a mesh) and keep the latest `keep`."""
        path = checkpoint_path(self.checkpoints_dir, iteration, sharded=sharded)
        write = write_sharded_checkpoint if sharded else write_checkpoint_file
        try:
            write(
                path,
                state,
                kind="training_state",
                config=self.config,
                batch_shape=batch_shape,
                metadata=metadata,
            )
        except CheckpointError as error:
            intact = list_checkpoints(self.checkpoints_dir)
            last = (
                f"The last intact checkpoint is {intact[-1][1]} (iteration "
                f"{intact[-1][0]:,d}): free space (or fix the folder) and resume "
                "from it with resume=True (--resume)."
                if intact
                else "No checkpoint of this run was written yet."
            )
            raise CheckpointError(f"{error} {last}") from None
        if primary_process():
            prune_checkpoints(self.checkpoints_dir, keep)
        sync_processes(f"eqxrl: checkpoint {iteration} pruned")
        self.checkpoints = list_checkpoints(self.checkpoints_dir)

    def load_latest(
        self,
        algorithm: AbstractAlgorithm,
        mesh: Mesh | None,
        seed: int,
        num_seeds: int | None,
    ) -> tuple[Path, PyTree, int, float]:
        """`(path, state, iteration, seconds already trained)` of the latest
        checkpoint, refused unless the run is the one that wrote it (same
        configuration, seed and number of seeds) and the file is consistent."""
        path = self.checkpoints[-1][1]
        try:
            state, _, header = load_training_state(
                path, algorithm=algorithm, expected_config=self.config, mesh=mesh
            )
        except CheckpointError as error:
            hint = ""
            if error.corrupt:
                hint = (
                    f" To resume from the checkpoint before it, delete {path}."
                    if len(self.checkpoints) > 1
                    else " It is the only checkpoint: start a new run."
                )
            raise CheckpointError(f"Cannot resume: {error}{hint}") from None
        metadata = header.get("metadata", {})
        for name, value in (("seed", seed), ("num_seeds", num_seeds)):
            if metadata.get(name) != value:
                raise CheckpointError(
                    f"Cannot resume from {path}: it was written with {name}="
                    f"{metadata.get(name)!r}, this run has {name}={value!r}. Use the "
                    "same value to resume exactly."
                )
        iteration = int(metadata["iteration"])
        counted = to_host(getattr(state, "iteration", None))
        if counted is not None and not bool(np.all(np.asarray(counted) == iteration)):
            raise CheckpointError(
                f"Cannot resume from {path}: its header says iteration {iteration:,d} "
                f"but the state it holds has done {np.asarray(counted).ravel()[0]:,d} "
                "iterations; the file is inconsistent."
            )
        if iteration > algorithm.num_iterations:
            raise CheckpointError(
                f"Cannot resume from {path}: it is at iteration {iteration:,d}, past "
                f"the {algorithm.num_iterations:,d} iterations of this run."
            )
        return path, state, iteration, float(metadata.get("time", 0.0))

    def release(self) -> None:
        _unlock(self._lock)
        self._lock = None


def _lock_folder(path: Path) -> Any:
    """An exclusive lock on `path/.eqxrl.lock` (released when the process ends,
    however it ends), or a `FileExistsError` if another process holds it."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        return None
    handle = open(path / _LOCK_FILE, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        if not isinstance(error, BlockingIOError):
            # A filesystem without locks (some network mounts): go on unlocked.
            handle.close()
            warnings.warn(
                f"Cannot lock {path / _LOCK_FILE} ({error.strerror}): another "
                "process could use this run folder at the same time.",
                stacklevel=4,
            )
            return None
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise FileExistsError(
            f"{path} is in use by another training process (pid {holder}); wait for "
            "it to finish or choose another output folder."
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def _unlock(handle: Any) -> None:
    if handle is not None:
        handle.close()  # closing the file releases the lock


def _check_writable(directory: Path) -> None:
    """Create `directory` and make sure files can be written in it, before any work
    is done."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-test-"):
            pass
    except OSError as error:
        raise PermissionError(
            f"Cannot write to the output folder {directory}: "
            f"{error.strerror or error}. Choose a writable folder (e.g. --out "
            "runs/NAME); nothing was started."
        ) from None


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    text = json.dumps(data, indent=2, default=str, allow_nan=False) + "\n"
    _atomic_write(path, lambda file: file.write(text.encode("utf-8")))
