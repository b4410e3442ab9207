import json
import math
import os
import sys
import tempfile
import time
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
from jaxtyping import Array, Bool, Int, PyTree

from ..algorithms import AbstractAlgorithm, check_entropy_collapse
from ..algorithms._base import jit_with_options
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
from ._logging import AbstractLogger, ConsoleLogger, CSVLogger


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
) -> tuple[PyTree, dict[str, Array], Bool[Array, " chunk_size"]]:
    """Up to `chunk_size` iterations as one compiled program: `num_iterations` (a
    traced number, so every chunk reuses one compilation) run, the rest of the
    `lax.scan` skips them through a `lax.cond`. Metrics of skipped iterations are
    zeros, to be dropped on the host. Also returns, per iteration, whether the
    algorithm's `diverged` holds (for any seed)."""
    iterate = algorithm.train_iteration
    diverged = algorithm.diverged
    if batched:
        iterate = eqx.filter_vmap(iterate)
        diverged = eqx.filter_vmap(diverged)
    dynamic, static = eqx.partition(state, eqx.is_array)

    def run(dynamic):
        new_state, metrics = iterate(eqx.combine(dynamic, static))
        new_dynamic, new_static = eqx.partition(new_state, eqx.is_array)
        if jtu.tree_structure(new_static) != jtu.tree_structure(static):
            raise ValueError(
                "train_iteration changed the structure of the non-array part of the "
                "training state; the Trainer needs the same structure every iteration."
            )
        return new_dynamic, (metrics, jnp.any(diverged(new_state, metrics)))

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
    """A tqdm progress bar in environment steps (steps/s, ETA, latest return), when
    tqdm is installed and the output is a terminal."""

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

    def update(self, steps: int, latest_return: float | None) -> None:
        if self.bar is None:
            return
        if latest_return is not None and math.isfinite(latest_return):
            self.bar.set_postfix(ret=f"{latest_return:.4g}", refresh=False)
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
      `metrics.csv`, `config.json`, `summary.json`, `policy.eqx` (the greedy policy,
      for [`load_policy`][eqxrl.load_policy]), `curve.png` and, for environments
      with `render`, `eval.gif`.
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
    - `loggers`: logging backends; by default a
      [`ConsoleLogger`][eqxrl.training.ConsoleLogger] and, with `out`, a
      [`CSVLogger`][eqxrl.training.CSVLogger] writing `metrics.csv`.
    - `progress`: show a progress bar (steps/s, ETA, latest return) on terminals.
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
        if self.env_kwargs and self.env_name is None:
            raise ValueError("Trainer: env_kwargs needs env_name (the id they go to).")

    # ----------------------------------------------------------------------------------

    @property
    def steps_per_iteration(self) -> int:
        """Environment steps per iteration (summed over environments, per seed)."""
        return steps_per_iteration(self.algorithm)

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

        **Arguments:**

        - `seed`: the run's seed: the training key is `jax.random.key(seed)` (split
          into `num_seeds` keys when training several seeds).
        - `resume`: continue from the latest checkpoint in `out/checkpoints/` (start
          from scratch if there is none). Without it, a folder that already holds
          checkpoints is refused, so nothing is overwritten.
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
        algorithm = self.algorithm
        total = algorithm.num_iterations
        stop = total if stop_at_iteration is None else min(stop_at_iteration, total)
        spi = self.steps_per_iteration
        out = None if self.out is None else Path(self.out)
        config = self._config()
        run_config = {
            "algorithm": config,
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
            "steps_per_iteration": spi,
            "num_iterations": total,
        }

        # Everything that can fail for a wrong folder or checkpoint fails here,
        # before anything is compiled or written.
        state = None
        iteration = 0
        time_offset = 0.0
        checkpoints_dir = None
        if out is not None:
            _check_writable(out)
            checkpoints_dir = out / "checkpoints"
            existing = list_checkpoints(checkpoints_dir)
            if existing and not resume:
                raise FileExistsError(
                    f"{out} already holds a run (latest checkpoint: iteration "
                    f"{existing[-1][0]}). Resume it (resume=True, --resume) or choose "
                    "another output folder; nothing was changed."
                )
            if existing:
                state, iteration, time_offset = self._resume(
                    existing[-1][1], config, seed
                )
            elif resume:
                self._say(f"no checkpoint in {checkpoints_dir}: starting from scratch")
            checkpoints_dir.mkdir(exist_ok=True)
            for stale in checkpoints_dir.glob(".checkpoint-*.tmp"):
                stale.unlink(missing_ok=True)  # left by a process killed mid-write
        elif resume:
            raise ValueError("Trainer.fit(resume=True) needs an output folder (out=).")

        loggers = self._make_loggers(out, resumed=iteration > 0)
        key = jr.key(seed)
        eval_key = jr.fold_in(key, 0x5EED)
        history: list[dict[str, np.ndarray]] = []
        progress = None
        try:
            for logger in loggers:
                if iteration > 0:
                    logger.resume(iteration, iteration * spi)
                logger.start(run_config)
            if out is not None:
                _write_json(out / "config.json", run_config)

            self._say(
                f"{type(algorithm).__name__} on {describe_devices()} | {total:,d} "
                f"iterations x {spi:,d} steps"
                + (f" x {self.num_seeds} seeds" if self.num_seeds else "")
                + (f" | resuming at iteration {iteration:,d}" if iteration else "")
            )
            start = time.perf_counter()
            if state is None:
                state = _init(algorithm, key, self.num_seeds)
            run_chunk = jit_with_options(
                _run_chunk, algorithm.compiler_options, donate="all-except-first"
            )
            compiled = run_chunk.lower(  # type: ignore[attr-defined]
                algorithm,
                state,
                jnp.int32(0),
                self.chunk_size,
                self.num_seeds is not None,
            ).compile()
            compile_seconds = time.perf_counter() - start
            self._say(f"compiled in {compile_seconds:.1f} s")
            for logger in loggers:
                logger.log_summary({"compile_seconds": compile_seconds})

            progress = _Progress(total * spi, iteration * spi, self.progress)
            loop_start = time.perf_counter() - time_offset
            checkpoint_every = self._checkpoint_interval()
            last_saved = iteration
            while iteration < stop:
                boundaries = [stop, iteration + self.chunk_size]
                if out is not None:
                    boundaries.append(
                        (iteration // checkpoint_every + 1) * checkpoint_every
                    )
                if self.eval_every is not None:
                    boundaries.append(
                        (iteration // self.eval_every + 1) * self.eval_every
                    )
                count = min(boundaries) - iteration
                chunk_start = time.perf_counter() - loop_start
                state, metrics, diverged = compiled(
                    algorithm,
                    state,
                    jnp.int32(count),
                    self.chunk_size,
                    self.num_seeds is not None,
                )
                metrics = {
                    k: np.asarray(v[:count]) for k, v in jax.device_get(metrics).items()
                }
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
                    for logger in loggers:
                        logger.log(row)
                for logger in loggers:
                    logger.flush()
                progress.update(count * spi, _latest_return(metrics))
                if self.throw:
                    _raise_if_diverged(
                        np.asarray(diverged)[:count],
                        first,
                        None if out is None else checkpoints_dir,
                    )

                if out is not None and (
                    iteration % checkpoint_every == 0 or iteration == stop
                ):
                    self._save(
                        checkpoints_dir, state, config, seed, iteration, chunk_end
                    )
                    last_saved = iteration
                if callback is not None:
                    callback(iteration, state, metrics)
            progress.close()
            progress = None

            run_seconds = time.perf_counter() - loop_start
            if out is not None and last_saved != iteration:
                self._save(checkpoints_dir, state, config, seed, iteration, run_seconds)
            summary: dict[str, Any] = {
                "compile_seconds": compile_seconds,
                "run_seconds": run_seconds,
                "iterations": iteration,
                "env_steps": iteration * spi,
                "steps_per_second": (
                    iteration * spi / run_seconds if run_seconds > 0 else None
                ),
            }
            if iteration == total:
                summary.update(self._finish(out, state, config, seed, eval_key))
            for logger in loggers:
                logger.log_summary(
                    {k: v for k, v in summary.items() if isinstance(v, int | float)}
                )
            if out is not None:
                _write_json(out / "summary.json", summary)
                if iteration == total:
                    self._plot(out)
        finally:
            if progress is not None:
                progress.close()
            for logger in loggers:
                logger.close()

        if history:
            metrics = {k: np.concatenate([h[k] for h in history]) for k in history[0]}
        else:
            metrics = {}
        if metrics and len(metrics[next(iter(metrics))]) == total:
            # A whole run in one call: the host-side checks `algorithm.train` does.
            check_entropy_collapse(
                {k: np.moveaxis(v, 0, -1) for k, v in metrics.items()}
            )
        return state, metrics

    # ----------------------------------------------------------------------------------

    def _make_loggers(self, out: Path | None, resumed: bool) -> tuple:
        if self.loggers is not None:
            return tuple(self.loggers)
        loggers: list[AbstractLogger] = [ConsoleLogger()] if self.verbose else []
        if out is not None:
            loggers.append(CSVLogger(out / "metrics.csv", append=resumed))
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
                    row[name] = values[j] if seed is None else values[j][seed]
                rows.append(row)
        return rows

    def _save(self, directory, state, config, seed, iteration, elapsed) -> None:
        metadata = {
            "iteration": iteration,
            "env_steps": iteration * self.steps_per_iteration,
            "seed": seed,
            "num_seeds": self.num_seeds,
            "time": elapsed,
        }
        write_checkpoint_file(
            checkpoint_path(directory, iteration),
            state,
            kind="training_state",
            config=config,
            batch_shape=() if self.num_seeds is None else (self.num_seeds,),
            metadata=metadata,
        )
        prune_checkpoints(directory, self.keep_checkpoints)

    def _resume(self, path: Path, config, seed: int) -> tuple[PyTree, int, float]:
        try:
            state, _, header = load_training_state(
                path, algorithm=self.algorithm, expected_config=config
            )
        except CheckpointError as error:
            raise CheckpointError(
                f"Cannot resume: {error} (To resume from the checkpoint before it, "
                f"delete {path}.)"
            ) from None
        metadata = header.get("metadata", {})
        for name, value in (("seed", seed), ("num_seeds", self.num_seeds)):
            if metadata.get(name) != value:
                raise CheckpointError(
                    f"Cannot resume from {path}: it was written with {name}="
                    f"{metadata.get(name)!r}, this run has {name}={value!r}. Use the "
                    "same value to resume exactly."
                )
        iteration = int(metadata["iteration"])
        self._say(f"resuming from {path} (iteration {iteration:,d})")
        return state, iteration, float(metadata.get("time", 0.0))

    def _finish(self, out, state, config, seed, eval_key) -> dict[str, Any]:
        """Final evaluation; with `out`, the policy export and the GIF."""
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
            final = extras["final_evaluation"]
            self._say(
                f"final evaluation ({self.eval_episodes} episodes"
                + (" per seed" if self.num_seeds else "")
                + f"): return {final['return_mean']:.4g} +- "
                f"{final['return_std']:.3g}"
            )
        if out is None:
            return extras
        single = state
        if self.num_seeds is not None:
            single = jtu.tree_map(lambda x: x[best] if eqx.is_array(x) else x, state)
            extras["policy_seed_index"] = best
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

            plot_run(out)
        except ImportError as error:
            self._say(f"no curve.png: {error}")
        except ValueError as error:  # e.g. a custom logger set without metrics.csv
            self._say(f"no curve.png: {error}")
        except FileNotFoundError:
            pass


def _raise_if_diverged(
    diverged: np.ndarray, first: int, checkpoints: Path | None
) -> None:
    """Raise FloatingPointError naming the first iteration of a chunk after which
    the algorithm's `diverged` held."""
    if not diverged.any():
        return
    iteration = first + int(np.argmax(diverged)) + 1
    where = (
        ""
        if checkpoints is None
        else f" The latest checkpoint in {checkpoints} is from before it;"
        " resume from it with a lower learning rate."
    )
    raise FloatingPointError(
        f"Trainer: training diverged (a loss or the parameters became NaN or "
        f"infinite) at iteration {iteration}. Usual causes: a learning rate far too "
        "large, non-finite rewards or observations, unbounded rewards (try "
        "normalize_rewards)." + where + " Trainer(throw=False) trains on regardless."
    )


def _python_numbers(values: np.ndarray) -> list:
    """Metrics as (nested) lists of Python numbers; float32 values as the shortest
    decimal that reads back to the same float32 (`0.00025`, not
    `0.0002500000118743628`)."""
    if values.dtype == np.float32:
        return np.vectorize(float, otypes=[object])(values.astype(str)).tolist()
    return values.tolist()


def _latest_return(metrics: Mapping[str, np.ndarray]) -> float | None:
    values = metrics.get("episode_return")
    if values is None:
        return None
    values = np.asarray(values, dtype=np.float64).reshape(len(values), -1)
    for row in values[::-1]:
        finite = row[np.isfinite(row)]
        if finite.size:
            return float(finite.mean())
    return None
