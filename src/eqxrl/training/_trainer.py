import json
import math
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.lax as lax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh
from jaxtyping import Array, Bool, Int, PyTree

from ..algorithms import (
    AbstractAlgorithm,
    check_entropy_collapse,
    vmap_over_seeds,
)
from ..envs import num_agents_of
from ._checkpoint import (
    CheckpointError,
    _atomic_write,
    checkpoint_path,
    list_checkpoints,
    load_training_state,
    prune_checkpoints,
    save_policy,
    write_checkpoint_file,
)
from ._config import algorithm_to_config
from ._device import describe_devices
from ._evaluation import (
    EvaluationResult,
    default_max_steps,
    record_episodes,
    renderer,
    run_episodes,
    write_gif,
)
from ._logging import AbstractLogger, ConsoleLogger, CSVLogger, RecentEpisodes
from ._sharded_checkpoint import write_sharded_checkpoint


def steps_per_iteration(algorithm: AbstractAlgorithm) -> int:
    """Environment steps (summed over environments) of one `train_iteration`.

    Read from the algorithm's `steps_per_iteration` if it has one, else
    `num_envs * num_steps` (on-policy rollouts), else
    `total_timesteps // num_iterations`, else 1 (progress is then counted in
    iterations).
    """
    explicit = getattr(algorithm, "steps_per_iteration", None)
    if isinstance(explicit, int):
        return explicit
    num_envs = getattr(algorithm, "num_envs", None)
    num_steps = getattr(algorithm, "num_steps", None)
    if isinstance(num_envs, int) and isinstance(num_steps, int):
        return num_envs * num_steps
    total = getattr(algorithm, "total_timesteps", None)
    if isinstance(total, int) and algorithm.num_iterations > 0:
        return max(total // algorithm.num_iterations, 1)
    return 1


def _run_chunk(
    algorithm: AbstractAlgorithm,
    state: PyTree,
    num_iterations: Int[Array, ""],
    chunk_size: int,
    batched: bool,
    mesh: Mesh | None = None,
) -> tuple[PyTree, dict[str, Array], Bool[Array, " chunk_size"]]:
    """Up to `chunk_size` iterations as one compiled program: `num_iterations` (a
    traced number, so every chunk reuses one compilation) run, the rest of the
    `lax.scan` skips them through a `lax.cond`. Metrics of skipped iterations are
    zeros, to be dropped on the host. Also returns, per iteration, whether the
    algorithm's `diverged` holds (for any seed). With `batched`, the seeds are
    vmapped (over the mesh's `"seeds"` axis when it has one)."""

    def one_run(state: PyTree) -> tuple[PyTree, dict[str, Array], Array]:
        dynamic, static = eqx.partition(state, eqx.is_array)

        def run(dynamic):
            new_state, metrics = algorithm.train_iteration(eqx.combine(dynamic, static))
            if mesh is not None:
                new_state = algorithm.shard_state(new_state, mesh)
            new_dynamic, new_static = eqx.partition(new_state, eqx.is_array)
            if jtu.tree_structure(new_static) != jtu.tree_structure(static):
                raise ValueError(
                    "train_iteration changed the structure of the non-array part of "
                    "the training state; the Trainer needs the same structure every "
                    "iteration."
                )
            return new_dynamic, (metrics, algorithm.diverged(new_state, metrics))

        metric_shapes = jax.eval_shape(run, dynamic)[1]

        def skip(dynamic):
            zeros = jtu.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), metric_shapes)
            return dynamic, zeros

        def body(dynamic, index):
            return lax.cond(index < num_iterations, run, skip, dynamic)

        dynamic, (metrics, diverged_flags) = lax.scan(
            body, dynamic, jnp.arange(chunk_size, dtype=jnp.int32)
        )
        return eqx.combine(dynamic, static), metrics, diverged_flags

    if not batched:
        return one_run(state)
    state, metrics, diverged_flags = vmap_over_seeds(one_run, mesh, in_axes=(0,))(state)
    # Seeds first inside the vmap, iterations first on the host.
    metrics = jtu.tree_map(lambda x: jnp.moveaxis(x, 0, 1), metrics)
    return state, metrics, jnp.any(diverged_flags, axis=0)


@eqx.filter_jit
def _init(algorithm: AbstractAlgorithm, key, num_seeds: int | None) -> PyTree:
    if num_seeds is None:
        return algorithm.init(key)
    return eqx.filter_vmap(algorithm.init)(jr.split(key, num_seeds))


@eqx.filter_jit
def _evaluate_state(
    algorithm: AbstractAlgorithm,
    env,
    state: PyTree,
    key,
    num_episodes: int,
    max_steps: int,
    deterministic: bool,
    num_seeds: int | None,
):
    def one(state, key):
        policy = algorithm.policy(state, deterministic)
        return run_episodes(policy, env, key, num_episodes, max_steps)

    if num_seeds is None:
        return one(state, key)
    return eqx.filter_vmap(one)(state, jr.split(key, num_seeds))


class _Progress:
    """A tqdm progress bar in environment steps (steps/s, ETA, the mean return of
    the last episodes to end), when tqdm is installed and the output is a
    terminal."""

    def __init__(self, total: int, initial: int, enabled: bool):
        self.bar = None
        if not enabled:
            return
        try:
            from tqdm import tqdm
        except ImportError:
            return
        self.bar = tqdm(
            total=total,
            initial=initial,
            unit="step",
            unit_scale=True,
            dynamic_ncols=True,
            disable=None,  # off when not writing to a terminal
            smoothing=0.1,
        )

    def update(self, steps: int, postfix: str | None) -> None:
        """Advance by `steps`, showing `postfix` (the return) when there is one."""
        if self.bar is None:
            return
        if postfix is not None:
            self.bar.set_postfix_str(postfix, refresh=False)
        self.bar.update(steps)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


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


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    text = json.dumps(data, indent=2, default=str, allow_nan=False) + "\n"
    _atomic_write(path, lambda file: file.write(text.encode("utf-8")))


def _tuple_or_none(loggers: Sequence[AbstractLogger] | None):
    return None if loggers is None else tuple(loggers)


class Trainer(eqx.Module):
    """Run an algorithm for a long time and watch it: progress, logs, checkpoints
    with exact resume, evaluation and plots.

    The algorithm's compiled iteration runs in chunks of up to `chunk_size`
    iterations, each chunk one call of one compiled program with the training state
    donated (no recompilation after the first chunk; shorter chunks, e.g. up to the
    next checkpoint, reuse the same program). Between chunks, on the host: the
    progress bar, metric logging, checkpoints and evaluation. Device memory does not
    grow with the length of the run: each chunk's metrics (`[chunk_size]` scalars) are
    copied to the host and logged.

    Works with every [`AbstractAlgorithm`][eqxrl.AbstractAlgorithm]. Resuming is
    exact: a run stopped after N iterations (or killed) and resumed from its
    checkpoint ends with the same parameters, bit for bit, as the run done in one go.

    **Arguments:**

    - `algorithm`: the algorithm to train, e.g. `eqxrl.PPO(...)`.
    - `out`: the run folder; `None` writes nothing. It receives `checkpoints/`,
      `metrics.csv`, `config.json`, `summary.json` (with `recent_episodes` and the
      `recent_` means of the episode statistics over the last 100 or so episodes to
      end), `policy.eqx` (the greedy policy, for
      [`load_policy`][eqxrl.load_policy]), `curve.png` and, for environments with
      `render`, `eval.gif`.
    - `chunk_size`: iterations per compiled call (at most).
    - `checkpoint_every`: iterations between checkpoints; by default a tenth of the
      run. A checkpoint is also written when `fit` returns.
    - `keep_checkpoints`: how many of the latest checkpoints to keep.
    - `eval_every`: iterations between evaluations (`None`: only a final one).
    - `eval_episodes`: episodes per evaluation, vmapped in one compiled call (`0`:
      no evaluation, not even the final one).
    - `eval_deterministic`: evaluate the greedy policy (`False`: sample actions).
    - `gif_episodes`: episodes recorded to `eval.gif` at the end when the
      environment renders (`0`: no GIF).
    - `num_seeds`: train this many seeds vmapped in one program (`None`: one seed,
      unbatched state). Curves then show the seeds as a shaded band.
    - `mesh`: a `jax.sharding.Mesh` to train over several devices: its `"envs"`
      axis splits the environments (as `algorithm.train(key, mesh=mesh)`), its
      `"seeds"` axis splits `num_seeds` seeds (as
      [`train_seeds`][eqxrl.train_seeds]). See [Scaling out](../scaling-out.md).
    - `loggers`: logging backends; by default a
      [`ConsoleLogger`][eqxrl.training.ConsoleLogger] and, with `out`, a
      [`CSVLogger`][eqxrl.training.CSVLogger] writing `metrics.csv`.
    - `progress`: show a progress bar on terminals (steps/s, ETA, the mean return
      of the last 100 or so episodes to end).
    - `env_name`, `env_kwargs`: how `eqxrl.envs.make` builds the algorithm's
      environment, recorded in checkpoints; found automatically for registered
      environments made without arguments.
    - `verbose`: print the device, the compile time and where files go.
    - `throw`: stop `fit` with a `FloatingPointError` after a chunk in which the
      algorithm's [`diverged`][eqxrl.AbstractAlgorithm.diverged] became true, e.g. a
      NaN loss (its rows are logged first; no checkpoint of the diverged state is
      written, so the latest checkpoint is from before the divergence). `False`:
      train on.

    !!! example

        ```python
        ppo = eqxrl.PPO(env=eqxrl.envs.make("CartPole-v1"), total_timesteps=500_000)
        trainer = eqxrl.Trainer(ppo, out="runs/cartpole", checkpoint_every=100)
        state, metrics = trainer.fit(seed=0)
        # later, or after a crash: continue from the latest checkpoint
        state, metrics = trainer.fit(seed=0, resume=True)
        ```
    """

    algorithm: AbstractAlgorithm
    out: str | os.PathLike | None = eqx.field(static=True, default=None)
    chunk_size: int = eqx.field(static=True, default=16)
    checkpoint_every: int | None = eqx.field(static=True, default=None)
    keep_checkpoints: int = eqx.field(static=True, default=3)
    eval_every: int | None = eqx.field(static=True, default=None)
    eval_episodes: int = eqx.field(static=True, default=16)
    eval_deterministic: bool = eqx.field(static=True, default=True)
    gif_episodes: int = eqx.field(static=True, default=1)
    num_seeds: int | None = eqx.field(static=True, default=None)
    mesh: Mesh | None = eqx.field(static=True, default=None)
    loggers: Sequence[AbstractLogger] | None = eqx.field(
        static=True, default=None, converter=_tuple_or_none
    )
    progress: bool = eqx.field(static=True, default=True)
    env_name: str | None = eqx.field(static=True, default=None)
    env_kwargs: Mapping[str, Any] | None = eqx.field(static=True, default=None)
    verbose: bool = eqx.field(static=True, default=True)
    throw: bool = eqx.field(static=True, default=True)

    def __check_init__(self):
        if not isinstance(self.algorithm, AbstractAlgorithm):
            raise ValueError(
                f"Trainer: algorithm must be an eqxrl algorithm (e.g. eqxrl.PPO), got "
                f"{type(self.algorithm).__name__}."
            )
        for name in ("chunk_size", "keep_checkpoints"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Trainer: {name}={value!r} must be an integer >= 1.")
        if self.eval_episodes < 0:
            raise ValueError(
                f"Trainer: eval_episodes={self.eval_episodes} must be >= 0 (0: no "
                "evaluation)."
            )
        if self.eval_every is not None and self.eval_episodes == 0:
            raise ValueError(
                "Trainer: eval_every needs eval_episodes >= 1; set eval_every=None "
                "to train without evaluation."
            )
        for name in ("checkpoint_every", "eval_every", "num_seeds"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ValueError(
                    f"Trainer: {name}={value!r} must be None or an integer >= 1."
                )
        if self.gif_episodes < 0:
            raise ValueError(f"Trainer: gif_episodes={self.gif_episodes} must be >= 0.")
        if self.mesh is not None:
            if not isinstance(self.mesh, Mesh):
                raise ValueError(
                    f"Trainer: mesh must be a jax.sharding.Mesh, got "
                    f"{type(self.mesh).__name__}."
                )
            self.algorithm.check_mesh(self.mesh, num_runs=self.num_seeds)
        if self.env_kwargs and self.env_name is None:
            raise ValueError("Trainer: env_kwargs needs env_name (the id they go to).")

    # ----------------------------------------------------------------------------------

    @property
    def steps_per_iteration(self) -> int:
        """Environment steps per iteration (summed over environments, per seed)."""
        return steps_per_iteration(self.algorithm)

    def _place(self, state: PyTree) -> PyTree:
        """`state` on the mesh's devices (as it is without a mesh)."""
        if self.mesh is None:
            return state
        return self.algorithm.place_state(
            state, self.mesh, batched=self.num_seeds is not None
        )

    def _say(self, text: str) -> None:
        if self.verbose:
            print(text, file=sys.stderr, flush=True)

    def _checkpoint_interval(self) -> int:
        if self.checkpoint_every is not None:
            return self.checkpoint_every
        return max(1, math.ceil(self.algorithm.num_iterations / 10))

    def _config(self) -> dict[str, Any]:
        return algorithm_to_config(
            self.algorithm,
            env_name=self.env_name,
            env_kwargs=dict(self.env_kwargs or {}),
        )

    def _env(self):
        env = getattr(self.algorithm, "env", None)
        if env is None:
            raise ValueError(
                f"Trainer: {type(self.algorithm).__name__} has no `env` field to "
                "evaluate on."
            )
        return env

    def evaluate(
        self, state: PyTree, key, *, num_episodes: int | None = None
    ) -> EvaluationResult:
        """Evaluate a training state (a batch of them with `num_seeds`): episodes
        vmapped in one compiled call, greedy unless `eval_deterministic=False`.

        **Arguments:**

        - `state`: a training state of the algorithm.
        - `key`: a PRNG key.
        - `num_episodes`: episodes (per seed); default `eval_episodes`.

        **Returns:**

        An [`EvaluationResult`][eqxrl.training.EvaluationResult] with
        `[num_episodes]` (or `[num_seeds, num_episodes]`) returns and lengths.
        """
        env = self._env()
        returns, lengths = _evaluate_state(
            self.algorithm,
            env,
            state,
            key,
            num_episodes if num_episodes is not None else max(self.eval_episodes, 1),
            default_max_steps(env),
            self.eval_deterministic,
            self.num_seeds,
        )
        if jax.process_count() > 1:  # the episodes span processes
            returns, lengths = map(jnp.asarray, _to_host((returns, lengths)))
        return EvaluationResult(returns=returns, lengths=lengths)

    def _evaluation_rows(
        self, state: PyTree, key, iteration: int
    ) -> tuple[list[dict[str, float]], EvaluationResult]:
        result = self.evaluate(state, jr.fold_in(key, iteration))
        if self.num_seeds is None:
            return [result.summary()], result
        rows = []
        for seed in range(self.num_seeds):
            rows.append(
                EvaluationResult(
                    returns=result.returns[seed], lengths=result.lengths[seed]
                ).summary()
            )
        return rows, result

    # ----------------------------------------------------------------------------------

    def fit(
        self,
        seed: int = 0,
        *,
        resume: bool = False,
        stop_at_iteration: int | None = None,
        callback: Callable[[int, PyTree, dict[str, np.ndarray]], Any] | None = None,
    ) -> tuple[PyTree, dict[str, np.ndarray]]:
        """Train, from scratch or from the latest checkpoint in `out`.

        A run folder belongs to one process at a time (a lock file: a second `fit`
        on the same folder stops at once), and a new run never overwrites one: a
        folder that holds checkpoints or results (`config.json`, `metrics.csv`,
        `policy.eqx`, ...) is refused unless `resume`.

        **Arguments:**

        - `seed`: the run's seed: the training key is `jax.random.key(seed)` (split
          into `num_seeds` keys when training several seeds).
        - `resume`: continue from the latest checkpoint in `out/checkpoints/`; with
          none, start from scratch (dropping rows logged by a run killed before its
          first checkpoint).
        - `stop_at_iteration`: return once this many iterations (counted from the
          start of the run) are done, writing a checkpoint there; resume later to
          finish. Default: the algorithm's `num_iterations`.
        - `callback`: called after every chunk as `callback(iteration, state,
          metrics)` with the chunk's metrics on the host.

        **Returns:**

        `(state, metrics)`: the final training state (batched over seeds with
        `num_seeds`) and the metrics of the iterations run by this call, as NumPy
        arrays `[iterations]` (`[iterations, num_seeds]`).
        """
        total = self.algorithm.num_iterations
        stop = total if stop_at_iteration is None else min(stop_at_iteration, total)
        if resume and self.out is None:
            raise ValueError("Trainer.fit(resume=True) needs an output folder (out=).")
        # Everything that can fail for a wrong folder or checkpoint fails here,
        # before anything is compiled or written.
        folder = None
        if self.out is not None:
            # One process owns the folder (the lock, the logs); with several
            # processes (`jax.distributed`) the others follow it to read and write
            # their checkpoint shards.
            if _primary():
                folder = _RunFolder.open(Path(self.out), resume, self._config())
            _sync("eqxrl: run folder open")
            if not _primary():
                folder = _RunFolder.follow(Path(self.out), resume, self._config())
        loggers: tuple = ()
        progress = None
        recent = RecentEpisodes()  # for the progress bar and the summary
        try:
            state, iteration, time_offset = self._starting_point(folder, seed)
            loggers = self._start_logging(folder, seed, iteration, resume)
            state, run_chunk, compile_seconds = self._compile(state, seed, iteration)
            for logger in loggers:
                logger.log_summary({"compile_seconds": compile_seconds})
            progress = _Progress(
                total * self.steps_per_iteration,
                iteration * self.steps_per_iteration,
                self.progress,
            )
            state, history, run_seconds = self._train_chunks(
                run_chunk,
                state,
                iteration,
                stop,
                time_offset,
                folder,
                seed,
                loggers,
                progress,
                recent,
                callback,
            )
            progress.close()
            progress = None
            iteration = iteration + sum(len(next(iter(h.values()))) for h in history)
            self._finish_run(
                folder,
                state,
                seed,
                iteration,
                compile_seconds,
                run_seconds,
                loggers,
                recent,
            )
        finally:
            if progress is not None:
                progress.close()
            for logger in loggers:
                logger.close()
            if folder is not None:
                folder.release()
        if folder is not None and iteration == total:
            self._say(f"wrote {folder.describe_contents()}")

        metrics = {}
        if history:
            metrics = {k: np.concatenate([h[k] for h in history]) for k in history[0]}
        if metrics and len(next(iter(metrics.values()))) == total:
            # A whole run in one call: the host-side checks `algorithm.train` does.
            check_entropy_collapse(
                {k: np.moveaxis(v, 0, -1) for k, v in metrics.items()}
            )
        return state, metrics

    # ----------------------------------------------------------------------------------
    # The steps of `fit`

    def _run_config(self, seed: int) -> dict[str, Any]:
        return {
            "algorithm": self._config(),
            "seed": seed,
            "num_seeds": self.num_seeds,
            "trainer": {
                "chunk_size": self.chunk_size,
                "checkpoint_every": self._checkpoint_interval(),
                "keep_checkpoints": self.keep_checkpoints,
                "eval_every": self.eval_every,
                "eval_episodes": self.eval_episodes,
                "eval_deterministic": self.eval_deterministic,
            },
            "steps_per_iteration": self.steps_per_iteration,
            "num_iterations": self.algorithm.num_iterations,
        }

    def _starting_point(
        self, folder: "_RunFolder | None", seed: int
    ) -> tuple[PyTree | None, int, float]:
        """`(state, iteration, seconds already trained)` from the latest checkpoint,
        or `(None, 0, 0.0)` to start from scratch."""
        if folder is None or not folder.checkpoints:
            if folder is not None and folder.resume:
                self._say(f"no checkpoint in {folder.checkpoints_dir}: starting anew")
            return None, 0, 0.0
        return self._resume(folder, seed)

    def _start_logging(
        self, folder: "_RunFolder | None", seed: int, iteration: int, resume: bool
    ) -> tuple:
        """The loggers, cut back to `iteration` when resuming, and the run's
        `config.json`."""
        loggers = self._make_loggers(folder, resumed=iteration > 0)
        run_config = self._run_config(seed)
        for logger in loggers:
            if resume:
                # Also with no checkpoint to resume from (iteration 0): rows logged
                # by a run killed before its first checkpoint are dropped, not
                # logged twice.
                logger.resume(iteration, iteration * self.steps_per_iteration)
            logger.start(run_config)
        if folder is not None and _primary():
            _write_json(folder.path / "config.json", run_config)
        return loggers

    def _compile(
        self, state: PyTree | None, seed: int, iteration: int
    ) -> tuple[PyTree, Callable, float]:
        """The initial state (when not resuming) and the chunk program compiled with
        the algorithm's `compiler_options` (always a top-level call here)."""
        algorithm = self.algorithm
        self._say(
            f"{type(algorithm).__name__} on {describe_devices()} | "
            f"{algorithm.num_iterations:,d} iterations x "
            f"{self.steps_per_iteration:,d} steps"
            + (f" x {self.num_seeds} seeds" if self.num_seeds else "")
            + (f" | resuming at iteration {iteration:,d}" if iteration else "")
        )
        start = time.perf_counter()
        if state is None:
            # Built on one device, then placed on the mesh (see `train_seeds`).
            state = _init(algorithm, jr.key(seed), self.num_seeds)
        state = self._place(state)
        run_chunk = eqx.filter_jit(
            _run_chunk,
            donate="all-except-first",
            compiler_options=algorithm.compiler_options or None,
        )
        compiled = run_chunk.lower(
            algorithm,
            state,
            jnp.int32(0),
            self.chunk_size,
            self.num_seeds is not None,
            self.mesh,
        ).compile()
        compile_seconds = time.perf_counter() - start
        self._say(f"compiled in {compile_seconds:.1f} s")
        return state, compiled, compile_seconds

    def _train_chunks(
        self,
        run_chunk: Callable,
        state: PyTree,
        iteration: int,
        stop: int,
        time_offset: float,
        folder: "_RunFolder | None",
        seed: int,
        loggers: tuple,
        progress: "_Progress",
        recent: RecentEpisodes,
        callback: Callable | None,
    ) -> tuple[PyTree, list[dict[str, np.ndarray]], float]:
        """Chunks of iterations until `stop`: each chunk one compiled call, then on
        the host its rows logged (and added to `recent`), a check for divergence,
        and a checkpoint or an evaluation when one is due. Returns the state, the
        chunks' metrics and the seconds of training (of the whole run, with earlier
        sessions')."""
        spi = self.steps_per_iteration
        key = jr.key(seed)
        eval_key = jr.fold_in(key, _EVAL_SEED)
        checkpoint_every = self._checkpoint_interval()
        history: list[dict[str, np.ndarray]] = []
        loop_start = time.perf_counter() - time_offset
        while iteration < stop:
            count = self._chunk_length(iteration, stop, checkpoint_every, folder)
            chunk_start = time.perf_counter() - loop_start
            state, metrics, diverged = run_chunk(
                self.algorithm,
                state,
                jnp.int32(count),
                self.chunk_size,
                self.num_seeds is not None,
                self.mesh,
            )
            metrics, diverged = _to_host((metrics, diverged))
            metrics = {k: np.asarray(v[:count]) for k, v in metrics.items()}
            history.append(metrics)
            chunk_end = time.perf_counter() - loop_start
            first = iteration
            iteration += count

            rows = self._rows(metrics, first, spi, chunk_start, chunk_end)
            if self.eval_every is not None and iteration % self.eval_every == 0:
                evaluations, _ = self._evaluation_rows(state, eval_key, iteration)
                for row, evaluation in zip(rows[-len(evaluations) :], evaluations):
                    row.update({f"eval_{k}": v for k, v in evaluation.items()})
            for row in rows:
                recent.update(row)
                for logger in loggers:
                    logger.log(row)
            for logger in loggers:
                logger.flush()
            progress.update(count * spi, _return_postfix(recent, metrics))
            if self.throw:
                _raise_if_diverged(np.asarray(diverged)[:count], first, folder)
            if folder is not None and (
                iteration % checkpoint_every == 0 or iteration == stop
            ):
                self._save(folder, state, seed, iteration, chunk_end)
            if callback is not None:
                callback(iteration, state, metrics)
        return state, history, time.perf_counter() - loop_start

    def _chunk_length(
        self,
        iteration: int,
        stop: int,
        checkpoint_every: int,
        folder: "_RunFolder | None",
    ) -> int:
        """Iterations of the next chunk: up to `chunk_size`, ending at the next
        checkpoint or evaluation if one comes first."""
        boundaries = [stop, iteration + self.chunk_size]
        if folder is not None:
            boundaries.append((iteration // checkpoint_every + 1) * checkpoint_every)
        if self.eval_every is not None:
            boundaries.append((iteration // self.eval_every + 1) * self.eval_every)
        return min(boundaries) - iteration

    def _finish_run(
        self,
        folder: "_RunFolder | None",
        state: PyTree,
        seed: int,
        iteration: int,
        compile_seconds: float,
        run_seconds: float,
        loggers: tuple,
        recent: RecentEpisodes,
    ) -> None:
        """At the end of a whole run, the final evaluation, the policy export, the
        GIF and the curve; after any `fit`, `summary.json` and the loggers'
        summary, with the episode statistics over the last episodes to end
        (`recent_episodes` of them, all seeds together)."""
        spi = self.steps_per_iteration
        summary: dict[str, Any] = {
            "compile_seconds": compile_seconds,
            "run_seconds": run_seconds,
            "iterations": iteration,
            "env_steps": iteration * spi,
            "steps_per_second": iteration * spi / run_seconds if run_seconds else None,
        }
        episodes, means = recent.pooled()
        if episodes:
            summary["recent_episodes"] = episodes
            for name, value in means.items():
                # summary.json holds no NaN; a diverged statistic is null there.
                summary[f"recent_{name}"] = value if math.isfinite(value) else None
        if iteration == self.algorithm.num_iterations:
            eval_key = jr.fold_in(jr.key(seed), _EVAL_SEED)
            summary.update(self._finish(folder, state, seed, eval_key))
        for logger in loggers:
            logger.log_summary(
                {k: v for k, v in summary.items() if isinstance(v, int | float)}
            )
        if "final_evaluation" in summary:
            # After the summary, which the console logger prints after the last
            # metrics line: the run's output ends with its results.
            final = summary["final_evaluation"]
            self._say(
                f"final evaluation ({self.eval_episodes} episodes"
                + (" per seed" if self.num_seeds else "")
                + f"): return {final['return_mean']:.4g} +- "
                f"{final['return_std']:.3g}"
            )
        if folder is not None and _primary():
            _write_json(folder.path / "summary.json", summary)
            if iteration == self.algorithm.num_iterations:
                self._plot(folder.path)

    def _make_loggers(self, folder: "_RunFolder | None", resumed: bool) -> tuple:
        if not _primary():
            return ()
        if self.loggers is not None:
            return tuple(self.loggers)
        loggers: list[AbstractLogger] = [ConsoleLogger()] if self.verbose else []
        if folder is not None:
            loggers.append(CSVLogger(folder.path / "metrics.csv", append=resumed))
        return tuple(loggers)

    def _rows(
        self,
        metrics: dict[str, np.ndarray],
        first: int,
        spi: int,
        chunk_start: float,
        chunk_end: float,
    ) -> list[dict[str, Any]]:
        count = len(next(iter(metrics.values()))) if metrics else 0
        seeds = [None] if self.num_seeds is None else list(range(self.num_seeds))
        columns = {name: _python_numbers(values) for name, values in metrics.items()}
        rows = []
        for j in range(count):
            iteration = first + j + 1
            elapsed = chunk_start + (chunk_end - chunk_start) * (j + 1) / max(count, 1)
            for seed in seeds:
                row: dict[str, Any] = {
                    "iteration": iteration,
                    "seed": seed,
                    "env_steps": iteration * spi,
                    "time": round(elapsed, 4),
                }
                for name, values in columns.items():
                    value = values[j] if seed is None else values[j][seed]
                    if isinstance(value, list):  # per agent: a column per agent
                        for agent, entry in enumerate(value):
                            row[f"{name}_agent{agent}"] = entry
                    else:
                        row[name] = value
                rows.append(row)
        return rows

    def _save(
        self,
        folder: "_RunFolder",
        state: PyTree,
        seed: int,
        iteration: int,
        elapsed: float,
    ) -> None:
        metadata = {
            "iteration": iteration,
            "env_steps": iteration * self.steps_per_iteration,
            "seed": seed,
            "num_seeds": self.num_seeds,
            "time": elapsed,
        }
        sharded = self.mesh is not None
        path = checkpoint_path(folder.checkpoints_dir, iteration, sharded=sharded)
        # A run over a mesh writes a sharded checkpoint: each process its shards.
        write = write_sharded_checkpoint if sharded else write_checkpoint_file
        try:
            write(
                path,
                state,
                kind="training_state",
                config=folder.config,
                batch_shape=() if self.num_seeds is None else (self.num_seeds,),
                metadata=metadata,
            )
        except CheckpointError as error:
            intact = list_checkpoints(folder.checkpoints_dir)
            last = (
                f"The last intact checkpoint is {intact[-1][1]} (iteration "
                f"{intact[-1][0]:,d}): free space (or fix the folder) and resume "
                "from it with resume=True (--resume)."
                if intact
                else "No checkpoint of this run was written yet."
            )
            raise CheckpointError(f"{error} {last}") from None
        if _primary():
            prune_checkpoints(folder.checkpoints_dir, self.keep_checkpoints)
        _sync(f"eqxrl: checkpoint {iteration} pruned")
        folder.checkpoints = list_checkpoints(folder.checkpoints_dir)

    def _resume(self, folder: "_RunFolder", seed: int) -> tuple[PyTree, int, float]:
        path = folder.checkpoints[-1][1]
        try:
            state, _, header = load_training_state(
                path,
                algorithm=self.algorithm,
                expected_config=folder.config,
                mesh=self.mesh,
            )
        except CheckpointError as error:
            hint = ""
            if error.corrupt:
                hint = (
                    f" To resume from the checkpoint before it, delete {path}."
                    if len(folder.checkpoints) > 1
                    else " It is the only checkpoint: start a new run."
                )
            raise CheckpointError(f"Cannot resume: {error}{hint}") from None
        metadata = header.get("metadata", {})
        for name, value in (("seed", seed), ("num_seeds", self.num_seeds)):
            if metadata.get(name) != value:
                raise CheckpointError(
                    f"Cannot resume from {path}: it was written with {name}="
                    f"{metadata.get(name)!r}, this run has {name}={value!r}. Use the "
                    "same value to resume exactly."
                )
        iteration = int(metadata["iteration"])
        counted = _to_host(getattr(state, "iteration", None))
        if counted is not None and not bool(np.all(np.asarray(counted) == iteration)):
            raise CheckpointError(
                f"Cannot resume from {path}: its header says iteration {iteration:,d} "
                f"but the state it holds has done {np.asarray(counted).ravel()[0]:,d} "
                "iterations; the file is inconsistent."
            )
        if iteration > self.algorithm.num_iterations:
            raise CheckpointError(
                f"Cannot resume from {path}: it is at iteration {iteration:,d}, past "
                f"the {self.algorithm.num_iterations:,d} iterations of this run."
            )
        self._say(f"resuming from {path} (iteration {iteration:,d})")
        return state, iteration, float(metadata.get("time", 0.0))

    def _finish(
        self, folder: "_RunFolder | None", state: PyTree, seed: int, eval_key
    ) -> dict[str, Any]:
        """Final evaluation; with a run folder, the policy export and the GIF."""
        extras: dict[str, Any] = {}
        has_env = getattr(self.algorithm, "env", None) is not None
        best = 0
        if has_env and self.eval_episodes > 0:
            rows, result = self._evaluation_rows(
                state, eval_key, self.algorithm.num_iterations + 1
            )
            if self.num_seeds is not None:
                best = int(np.argmax([row["return_mean"] for row in rows]))
                extras["final_evaluation_per_seed"] = rows
                extras["final_evaluation"] = EvaluationResult(
                    returns=result.returns, lengths=result.lengths
                ).summary()
            else:
                extras["final_evaluation"] = rows[0]
        if folder is None:
            return extras
        out = folder.path
        single = state
        if self.num_seeds is not None:
            single = jtu.tree_map(lambda x: x[best] if eqx.is_array(x) else x, state)
            extras["policy_seed_index"] = best
        if jax.process_count() > 1:
            single = _to_local(single)
        if not _primary():
            return extras
        save_policy(
            out / "policy.eqx",
            single,
            self.algorithm,
            deterministic=True,
            metadata={
                "iteration": self.algorithm.num_iterations,
                "seed": seed,
                "seed_index": best if self.num_seeds else None,
            },
            env_name=self.env_name,
            env_kwargs=self.env_kwargs,
        )
        if not has_env:
            return extras
        env = self._env()
        if self.gif_episodes > 0 and renderer(env) is not None:
            frames = record_episodes(
                self.algorithm.policy(single, self.eval_deterministic),
                env,
                jr.fold_in(eval_key, 1),
                num_episodes=self.gif_episodes,
            )
            write_gif(out / "eval.gif", frames)
            extras["gif"] = str(out / "eval.gif")
        return extras

    def _plot(self, out: Path) -> None:
        try:
            from ._plots import plot_run

            # Several agents: the team's return (per-agent returns have a column
            # per agent).
            env = getattr(self.algorithm, "env", None)
            multi_agent = env is not None and num_agents_of(env) is not None
            plot_run(out, **({"metric": "total_episode_return"} if multi_agent else {}))
        except ImportError as error:
            self._say(f"no curve.png: {error}")
        except ValueError as error:  # e.g. a custom logger set without metrics.csv
            self._say(f"no curve.png: {error}")
        except FileNotFoundError:
            pass


def _primary() -> bool:
    """Whether this is the process that writes logs, plots and the run folder's
    files (process 0; the only one without `jax.distributed`)."""
    return jax.process_index() == 0


def _sync(name: str) -> None:
    """Wait for every process (with `jax.distributed`; nothing otherwise)."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


def _to_host(tree: PyTree) -> PyTree:
    """`tree`'s arrays as NumPy arrays on this host. With several processes the
    arrays span processes, and every process gets the whole of each."""
    if jax.process_count() == 1:
        return jax.device_get(tree)
    return multihost_utils.process_allgather(tree, tiled=True)


def _to_local(tree: PyTree) -> PyTree:
    """`tree` with arrays that span processes replaced by whole copies on this
    process's device (PRNG keys included)."""

    def local(leaf: Any) -> Any:
        if not isinstance(leaf, jax.Array):
            return leaf
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            data = jnp.asarray(_to_host(jr.key_data(leaf)))
            return jr.wrap_key_data(data, impl=jr.key_impl(leaf))
        return jnp.asarray(_to_host(leaf))

    return jtu.tree_map(local, tree)


def _raise_if_diverged(
    diverged: np.ndarray, first: int, folder: "_RunFolder | None"
) -> None:
    """Raise FloatingPointError naming the first iteration of a chunk after which
    the algorithm's `diverged` held."""
    if not diverged.any():
        return
    iteration = first + int(np.argmax(diverged)) + 1
    where = ""
    if folder is not None and folder.checkpoints:
        latest_iteration, latest = folder.checkpoints[-1]
        where = (
            f" The latest checkpoint, {latest} (iteration {latest_iteration:,d}), is "
            "from before it; resume from it with a lower learning rate."
        )
    raise FloatingPointError(
        f"Trainer: training diverged (a loss or the parameters became NaN or "
        f"infinite) at iteration {iteration}. Usual causes: a learning rate far too "
        "large, non-finite rewards or observations, unbounded rewards (try "
        "normalize_rewards)." + where + " Trainer(throw=False) trains on regardless."
    )


# Run folders: what a new run refuses to overwrite, and one process at a time.
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
_EVAL_SEED = 0x5EED


class _RunFolder:
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
    def open(cls, path: Path, resume: bool, config: dict[str, Any]) -> "_RunFolder":
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
    def follow(cls, path: Path, resume: bool, config: dict[str, Any]) -> "_RunFolder":
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


def _python_numbers(values: np.ndarray) -> list:
    """Metrics as (nested) lists of Python numbers; float32 values as the shortest
    decimal that reads back to the same float32 (`0.00025`, not
    `0.0002500000118743628`)."""
    if values.dtype == np.float32:
        return np.vectorize(float, otypes=[object])(values.astype(str)).tolist()
    return values.tolist()


def _return_postfix(
    recent: RecentEpisodes, metrics: Mapping[str, np.ndarray]
) -> str | None:
    """The progress bar's return: the mean over the last episodes to end, all
    seeds together (with several agents, the team's return: their sum); for an
    algorithm that does not count its episodes, the latest iteration's value."""
    episodes, means = recent.pooled()
    value = means.get("total_episode_return", means.get("episode_return"))
    if episodes and value is not None:
        return f"return {value:.4g} (last {episodes:,d} episodes)"
    latest = None if "episode_count" in metrics else _latest_return(metrics)
    return None if latest is None else f"return {latest:.4g}"


def _latest_return(metrics: Mapping[str, np.ndarray]) -> float | None:
    # With several agents, the team's return (their sum).
    values = metrics.get("total_episode_return", metrics.get("episode_return"))
    if values is None:
        return None
    values = np.asarray(values, dtype=np.float64).reshape(len(values), -1)
    for row in values[::-1]:
        finite = row[np.isfinite(row)]
        if finite.size:
            return float(finite.mean())
    return None
