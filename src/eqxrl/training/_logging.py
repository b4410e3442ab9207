"""Logging backends behind one small interface.

A row is a flat dict: `iteration`, `env_steps`, `seed` (`None` for a single run,
the seed's index when several seeds train vmapped), `time` (seconds of running, not
counting compilation) and the algorithm's metrics (floats; NaN when undefined, e.g. no
episode ended in the iteration). The files keep these per-iteration values; the
console, the progress bar and the summary show the episode statistics over the last
episodes to end instead (`RecentEpisodes`), which no iteration leaves undefined once
an episode has ended.
"""

import abc
import csv
import io
import json
import math
import os
import sys
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

_LEADING = ("iteration", "seed", "env_steps", "time")


class AbstractLogger(abc.ABC):
    """Where the [`Trainer`][eqxrl.Trainer] sends metrics.

    Subclasses implement `log`; the other methods have do-nothing defaults.
    """

    def start(self, config: Mapping[str, Any]) -> None:
        """Called once before training with the run's configuration (algorithm
        config, trainer options, seed)."""

    @abc.abstractmethod
    def log(self, row: Mapping[str, Any]) -> None:
        """Record one iteration of one seed (see the module docstring for the keys)."""

    def log_summary(self, values: Mapping[str, Any]) -> None:
        """Record run-level values, e.g. `compile_seconds` (logged once, apart from
        the per-iteration `time`) and at the end `run_seconds`."""

    def resume(self, iteration: int, env_steps: int) -> None:
        """The run restarts from a checkpoint at `iteration`: forget rows after it."""

    def flush(self) -> None:
        """Make what was logged durable (called after every chunk)."""

    def close(self) -> None:
        """Release files and connections (called when training ends)."""


def _number(value: Any) -> float | int | None:
    if value is None:
        return None
    if isinstance(value, bool | int):
        return int(value)
    return float(value)


def _format(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,d}"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
            return f"{value:.3e}"
        return f"{value:.4g}"
    return str(value)


RECENT_EPISODES = 100


def is_episode_statistic(name: str) -> bool:
    """Whether a metric is a mean over the episodes that ended in the iteration
    (`episode_return`, `episode_length`, `total_episode_return`, per-agent
    `episode_return_agent0`, ...), not their count."""
    episodic = name.startswith("episode_") or name.startswith("total_episode_")
    return episodic and name != "episode_count"


class RecentEpisodes:
    """The episode statistics over the last episodes to end, carried across
    iterations in which none ended: what Stable-Baselines3 prints as `ep_rew_mean`
    (the mean of its last 100 episodes), kept on the host from the logged rows.

    A row holds, per iteration, the mean of each episode statistic over the episodes
    that ended in it and their number, `episode_count`. For each seed the window is
    the fewest latest iterations that together ended at least `size` episodes (all
    of them until that many have ended), so its means are exact means over the
    episodes it holds: `size` or more, since iterations are kept whole. Rows
    without `episode_count` (an algorithm that does not count its episodes) are not
    tracked.
    """

    def __init__(self, size: int = RECENT_EPISODES):
        if size < 1:
            raise ValueError(f"size must be at least 1 episode, got {size}.")
        self.size = size
        self._windows: dict[Any, deque[tuple[int, dict[str, float]]]] = {}

    def clear(self) -> None:
        """Forget every episode (a new run, or a resumed one)."""
        self._windows.clear()

    def update(self, row: Mapping[str, Any]) -> None:
        """Add one logged row (one iteration of one seed)."""
        count = row.get("episode_count")
        if count is None or int(count) <= 0:
            return
        values = {
            name: float(value)
            for name, value in row.items()
            if is_episode_statistic(name) and value is not None
        }
        window = self._windows.setdefault(row.get("seed"), deque())
        window.append((int(count), values))
        total = sum(entry_count for entry_count, _ in window)
        while total - window[0][0] >= self.size:
            total -= window.popleft()[0]

    def means(self, seed: Any = None) -> tuple[int, dict[str, float]]:
        """`(count, means)` over the window of one seed (`None` for a single run):
        how many episodes it holds and the mean of each statistic over them; `(0,
        {})` before any episode has ended."""
        return _pooled_means(self._windows.get(seed, ()))

    def pooled(self) -> tuple[int, dict[str, float]]:
        """`(count, means)` over the windows of every seed together: the mean over
        all the episodes they hold."""
        return _pooled_means([e for w in self._windows.values() for e in w])


def _pooled_means(
    entries: Sequence[tuple[int, dict[str, float]]] | deque,
) -> tuple[int, dict[str, float]]:
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    for count, values in entries:
        for name, value in values.items():
            totals[name] = totals.get(name, 0.0) + count * value
            counts[name] = counts.get(name, 0) + count
    episodes = sum(count for count, _ in entries)
    return episodes, {name: totals[name] / counts[name] for name in totals}


def _write_line(text: str) -> None:
    """Print without breaking a tqdm progress bar."""
    try:
        from tqdm import tqdm
    except ImportError:
        print(text, flush=True)
    else:
        tqdm.write(text, file=sys.stdout)


class ConsoleLogger(AbstractLogger):
    """Print a line of chosen metrics, at most once every `every_seconds` (and for
    the last row).

    Episode statistics (`episode_return`, `total_episode_return`, `episode_length`)
    are shown as means over the last `last_episodes` episodes to end, carried
    across iterations in which none ended (Stable-Baselines3's `ep_rew_mean`), e.g.
    `iteration 625 | 20,000 steps | last 128 episodes: total_episode_return -71.27,
    episode_length 100`: the count is the episodes the means cover (iterations are
    kept whole, so it can pass `last_episodes`), and before the first episode ends
    the line says `no episode ended yet`. The per-iteration values, NaN where no
    episode ended, are what the file loggers keep. Rows without `episode_count`
    show their per-iteration values.

    **Arguments:**

    - `metrics`: the metric names to show (missing ones are skipped).
    - `every_seconds`: the minimum time between two lines; `0` prints every row.
    - `last_episodes`: how many of the latest episodes the episode statistics
      average over.
    """

    def __init__(
        self,
        metrics: Sequence[str] = (
            "episode_return",
            "total_episode_return",
            "episode_length",
            "entropy",
            "approx_kl",
            "eval_return_mean",
        ),
        every_seconds: float | int = 10.0,
        last_episodes: int = RECENT_EPISODES,
    ):
        self.metrics = tuple(metrics)
        self.every_seconds = every_seconds
        self._recent = RecentEpisodes(last_episodes)
        self._last_print = -math.inf
        self._pending: Mapping[str, Any] | None = None

    def start(self, config: Mapping[str, Any]) -> None:
        del config
        self._recent.clear()

    def resume(self, iteration: int, env_steps: int) -> None:
        del iteration, env_steps
        self._recent.clear()

    def log(self, row: Mapping[str, Any]) -> None:
        self._recent.update(row)  # every row, also those not printed
        now = time.monotonic()
        if (
            now - self._last_print < self.every_seconds
            and "eval_return_mean" not in row
        ):
            self._pending = row
            return
        self._print(row)
        self._last_print = now
        self._pending = None

    def _print(self, row: Mapping[str, Any]) -> None:
        parts = [f"iteration {row['iteration']:,d}", f"{row['env_steps']:,d} steps"]
        if row.get("seed") is not None:
            parts.insert(0, f"seed {row['seed']}")
        shown = [name for name in self.metrics if name in row]
        if "episode_count" in row:
            episodic = [name for name in shown if is_episode_statistic(name)]
            shown = [name for name in shown if name not in episodic]
            count, means = self._recent.means(row.get("seed"))
            if episodic and count:
                parts.append(
                    f"last {count:,d} episodes: "
                    + ", ".join(
                        f"{name} {_format(means.get(name, math.nan))}"
                        for name in episodic
                    )
                )
            elif episodic:
                parts.append("no episode ended yet")
        for name in shown:
            parts.append(f"{name} {_format(row[name])}")
        _write_line(" | ".join(parts))

    def log_summary(self, values: Mapping[str, Any]) -> None:
        """Print the summary, after the last metrics line if it is still pending.
        `compile_seconds` is left out: the [`Trainer`][eqxrl.Trainer] prints it
        when compilation ends."""
        if self._pending is not None:
            self._print(self._pending)
            self._pending = None
        shown = {k: v for k, v in values.items() if k != "compile_seconds"}
        if shown:
            _write_line(", ".join(f"{k} {_format(v)}" for k, v in shown.items()))

    def close(self) -> None:
        if self._pending is not None:
            self._print(self._pending)
            self._pending = None


class _AbstractRowFile(AbstractLogger):
    """Shared by the CSV and JSON-lines loggers: rows in a file, appended, with
    `resume` cutting the file at an iteration (atomically)."""

    def __init__(self, path: str | os.PathLike, append: bool = False):
        self.path = Path(path)
        self._append = append
        self._file: io.TextIOBase | None = None

    def _open(self) -> io.TextIOBase:
        if self._file is None:
            mode = "a" if self._append and self.path.exists() else "w"
            self._file = open(self.path, mode, newline="")
        return self._file

    def _rewrite(self, lines: list[str]) -> None:
        temporary = self.path.with_name(f".{self.path.name}.tmp")
        with open(temporary, "w", newline="") as file:
            file.writelines(lines)
        os.replace(temporary, self.path)

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class CSVLogger(_AbstractRowFile):
    """One CSV row per iteration (and seed): `iteration, seed, env_steps, time` then
    the metrics, in the order first seen. A metric that appears later (e.g. the first
    evaluation) adds a column: the file is rewritten once with the wider header.

    **Arguments:**

    - `path`: the CSV file (created or overwritten; appended to after `resume`).
    - `append`: append to an existing file with the same columns instead of
      overwriting it.
    """

    def __init__(self, path: str | os.PathLike, append: bool = False):
        super().__init__(path, append)
        self._columns: list[str] | None = None
        if append and self.path.exists():
            self._columns = self._read_header()

    def _read_header(self) -> list[str] | None:
        with open(self.path, newline="") as file:
            header = next(csv.reader(file), None)
        return list(header) if header else None

    def log(self, row: Mapping[str, Any]) -> None:
        if self._columns is None:
            self._columns = list(_LEADING) + [k for k in row if k not in _LEADING]
            file = self._open()
            if file.tell() == 0:
                csv.writer(file).writerow(self._columns)
        new = [k for k in row if k not in self._columns]
        if new:
            self._widen(new)
        file = self._open()
        csv.writer(file).writerow(
            ["" if row.get(k) is None else _number(row[k]) for k in self._columns]
        )

    def _widen(self, new: list[str]) -> None:
        assert self._columns is not None
        self.close()
        old_columns = self._columns
        self._columns = old_columns + new
        lines = [",".join(self._columns) + "\r\n"]
        if self.path.exists():
            with open(self.path, newline="") as file:
                reader = csv.reader(file)
                next(reader, None)
                buffer = io.StringIO()
                writer = csv.writer(buffer)
                for record in reader:
                    writer.writerow(record + [""] * len(new))
                lines.append(buffer.getvalue())
        self._rewrite(lines)
        self._append = True

    def resume(self, iteration: int, env_steps: int) -> None:
        del env_steps
        self.close()
        if not self.path.exists():
            return
        with open(self.path, newline="") as file:
            reader = csv.reader(file)
            header = next(reader, None)
            if header is None:
                return
            index = header.index("iteration")
            buffer = io.StringIO()
            writer = csv.writer(buffer)
            writer.writerow(header)
            for record in reader:
                if record and int(float(record[index])) <= iteration:
                    writer.writerow(record)
        self._rewrite([buffer.getvalue()])
        self._columns = header
        self._append = True


class JSONLLogger(_AbstractRowFile):
    """One JSON object per line per iteration (and seed); NaN is written as `null`.
    Summaries are lines with a `"summary"` key.

    **Arguments:**

    - `path`: the `.jsonl` file (created or overwritten; appended to after `resume`).
    - `append`: append to an existing file instead of overwriting it.
    """

    def log(self, row: Mapping[str, Any]) -> None:
        record = {}
        for key, value in row.items():
            number = _number(value)
            if isinstance(number, float) and not math.isfinite(number):
                number = None
            record[key] = number
        self._open().write(json.dumps(record) + "\n")

    def log_summary(self, values: Mapping[str, Any]) -> None:
        self._open().write(json.dumps({"summary": dict(values)}) + "\n")

    def resume(self, iteration: int, env_steps: int) -> None:
        del env_steps
        self.close()
        if not self.path.exists():
            return
        kept = []
        with open(self.path) as file:
            for line in file:
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:  # a line cut by a kill
                    continue
                if record.get("iteration", -1) <= iteration:
                    kept.append(line if line.endswith("\n") else line + "\n")
        self._rewrite(kept)
        self._append = True


class TensorBoardLogger(AbstractLogger):
    """Scalars for TensorBoard (needs `tensorboardX`), with `env_steps` as the step.
    Several seeds go to sub-folders `seed_N`, shown as separate runs.

    **Arguments:**

    - `logdir`: the folder for event files.
    """

    def __init__(self, logdir: str | os.PathLike):
        try:
            import tensorboardX
        except ImportError:
            raise ImportError(
                "TensorBoardLogger needs tensorboardX: pip install tensorboardX "
                "(or eqxrl[tensorboard])."
            ) from None
        self._module = tensorboardX
        self.logdir = Path(logdir)
        self._writers: dict[Any, Any] = {}
        self._purge_step: int | None = None
        self._session = 0

    def _writer(self, seed: int | None):
        if seed not in self._writers:
            directory = self.logdir if seed is None else self.logdir / f"seed_{seed}"
            # A new file per session: a writer reopened within the same second
            # would otherwise reuse (and truncate) the previous event file.
            self._writers[seed] = self._module.SummaryWriter(
                str(directory),
                purge_step=self._purge_step,
                filename_suffix=f".{os.getpid()}.{self._session}",
            )
        return self._writers[seed]

    def start(self, config: Mapping[str, Any]) -> None:
        text = "```\n" + json.dumps(dict(config), indent=2, default=str) + "\n```"
        self._writer(None).add_text("config", text, 0)

    def log(self, row: Mapping[str, Any]) -> None:
        writer = self._writer(row.get("seed"))
        step = int(row["env_steps"])
        for key, value in row.items():
            if key in ("seed", "env_steps") or value is None:
                continue
            number = float(value)
            if math.isfinite(number):
                writer.add_scalar(key, number, step)

    def log_summary(self, values: Mapping[str, Any]) -> None:
        writer = self._writer(None)
        for key, value in values.items():
            if isinstance(value, int | float) and math.isfinite(value):
                writer.add_scalar(f"summary/{key}", float(value), 0)

    def resume(self, iteration: int, env_steps: int) -> None:
        del iteration
        self.close()
        self._session += 1
        self._purge_step = env_steps + 1  # TensorBoard drops events from this step on

    def flush(self) -> None:
        for writer in self._writers.values():
            writer.flush()

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers = {}


class WandbLogger(AbstractLogger):
    """Weights & Biases (needs `wandb`). The run starts with the training config;
    `env_steps` is the step; several seeds log as `seed_N/metric`.

    **Arguments:**

    - `project`: the W&B project.
    - `mode`: `"online"`, `"offline"` (no network; sync later with `wandb sync`) or
      `"disabled"`; by default W&B's own (its `WANDB_MODE` variable).
    - `**init_kwargs`: passed to `wandb.init` (e.g. `name`, `dir`, `tags`).
    """

    def __init__(
        self, project: str | None = None, mode: str | None = None, **init_kwargs: Any
    ):
        try:
            import wandb
        except ImportError:
            raise ImportError(
                "WandbLogger needs wandb: pip install wandb (or eqxrl[wandb])."
            ) from None
        self._wandb = wandb
        self.project = project
        self.mode = mode
        self.init_kwargs = init_kwargs
        self.run: Any = None

    def start(self, config: Mapping[str, Any]) -> None:
        if self.run is None:
            self.run = self._wandb.init(
                project=self.project,
                mode=self.mode,
                config=dict(config),
                **self.init_kwargs,
            )

    def log(self, row: Mapping[str, Any]) -> None:
        if self.run is None:
            self.start({})
        seed = row.get("seed")
        prefix = "" if seed is None else f"seed_{seed}/"
        values = {}
        for key, value in row.items():
            if key in ("seed", "env_steps") or value is None:
                continue
            number = float(value)
            if math.isfinite(number):
                values[prefix + key] = number
        self.run.log(values, step=int(row["env_steps"]))

    def log_summary(self, values: Mapping[str, Any]) -> None:
        if self.run is None:
            self.start({})
        for key, value in values.items():
            self.run.summary[key] = value

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None
