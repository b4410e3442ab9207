"""The Trainer: an algorithm's compiled iterations run in chunks, with progress,
logging, checkpoints and exact resume, evaluation and plots between them."""

import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np
from jax.sharding import Mesh
from jaxtyping import PyTree

from ..algorithms import AbstractAlgorithm, check_entropy_collapse
from ..envs import num_agents_of
from ._checkpoint import save_policy
from ._config import algorithm_to_config
from ._device import describe_devices
from ._evaluation import (
    EvaluationResult,
    default_max_steps,
    record_episodes,
    renderer,
    write_gif,
)
from ._logging import AbstractLogger, ConsoleLogger, CSVLogger, RecentEpisodes
from ._processes import primary_process, sync_processes, to_host, to_local
from ._run_folder import RunFolder, write_json
from ._trainer_metrics import Progress, _return_postfix, metric_rows
from ._trainer_programs import evaluate_state, init_state, run_chunk

# The key of evaluations: `fold_in(key(seed), _EVAL_SEED)`, apart from training's.
_EVAL_SEED = 0x5EED


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
        returns, lengths = evaluate_state(
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
            returns, lengths = map(jnp.asarray, to_host((returns, lengths)))
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
            if primary_process():
                folder = RunFolder.open(Path(self.out), resume, self._config())
            sync_processes("eqxrl: run folder open")
            if not primary_process():
                folder = RunFolder.follow(Path(self.out), resume, self._config())
        loggers: tuple = ()
        progress = None
        recent = RecentEpisodes()  # for the progress bar and the summary
        try:
            state, iteration, time_offset = self._starting_point(folder, seed)
            loggers = self._start_logging(folder, seed, iteration, resume)
            state, run_chunk, compile_seconds = self._compile(state, seed, iteration)
            for logger in loggers:
                logger.log_summary({"compile_seconds": compile_seconds})
            progress = Progress(
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
        self, folder: RunFolder | None, seed: int
    ) -> tuple[PyTree | None, int, float]:
        """`(state, iteration, seconds already trained)` from the latest checkpoint,
        or `(None, 0, 0.0)` to start from scratch."""
        if folder is None or not folder.checkpoints:
            if folder is not None and folder.resume:
                self._say(f"no checkpoint in {folder.checkpoints_dir}: starting anew")
            return None, 0, 0.0
        return self._resume(folder, seed)

    def _start_logging(
        self, folder: RunFolder | None, seed: int, iteration: int, resume: bool
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
        if folder is not None and primary_process():
            write_json(folder.path / "config.json", run_config)
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
            state = init_state(algorithm, jr.key(seed), self.num_seeds)
        state = self._place(state)
        chunk_program = eqx.filter_jit(
            run_chunk,
            donate="all-except-first",
            compiler_options=algorithm.compiler_options or None,
        )
        compiled = chunk_program.lower(
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
        folder: RunFolder | None,
        seed: int,
        loggers: tuple,
        progress: Progress,
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
            metrics, diverged = to_host((metrics, diverged))
            metrics = {k: np.asarray(v[:count]) for k, v in metrics.items()}
            history.append(metrics)
            chunk_end = time.perf_counter() - loop_start
            first = iteration
            iteration += count

            rows = metric_rows(
                metrics, first, spi, chunk_start, chunk_end, self.num_seeds
            )
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
        folder: RunFolder | None,
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
        folder: RunFolder | None,
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
        if folder is not None and primary_process():
            write_json(folder.path / "summary.json", summary)
            if iteration == self.algorithm.num_iterations:
                self._plot(folder.path)

    def _make_loggers(self, folder: RunFolder | None, resumed: bool) -> tuple:
        if not primary_process():
            return ()
        if self.loggers is not None:
            return tuple(self.loggers)
        loggers: list[AbstractLogger] = [ConsoleLogger()] if self.verbose else []
        if folder is not None:
            loggers.append(CSVLogger(folder.path / "metrics.csv", append=resumed))
        return tuple(loggers)

    def _save(
        self,
        folder: RunFolder,
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
        folder.save(
            state,
            iteration,
            metadata,
            sharded=self.mesh is not None,
            batch_shape=() if self.num_seeds is None else (self.num_seeds,),
            keep=self.keep_checkpoints,
        )

    def _resume(self, folder: RunFolder, seed: int) -> tuple[PyTree, int, float]:
        path, state, iteration, seconds = folder.load_latest(
            self.algorithm, self.mesh, seed, self.num_seeds
        )
        self._say(f"resuming from {path} (iteration {iteration:,d})")
        return state, iteration, seconds

    def _finish(
        self, folder: RunFolder | None, state: PyTree, seed: int, eval_key
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
            single = to_local(single)
        if not primary_process():
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


def _raise_if_diverged(
    diverged: np.ndarray, first: int, folder: RunFolder | None
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
