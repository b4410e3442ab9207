"""Learning curves from `metrics.csv` files (matplotlib, no global pyplot state)."""

import csv
import math
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def read_metrics(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The columns of a `metrics.csv` (written by the
    [`CSVLogger`][eqxrl.training.CSVLogger]) as float64 arrays.

    **Arguments:**

    - `path`: the CSV file, or a run folder holding `metrics.csv`.

    **Returns:**

    `{column: values}`; empty cells are NaN, and `seed` is `-1` for a single-seed
    run.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.csv"
    if not path.is_file():
        raise FileNotFoundError(
            f"No metrics at {path}: expected a metrics.csv written by eqxrl train / "
            "the Trainer."
        )
    with open(path, newline="") as file:
        reader = csv.reader(file)
        header = next(reader, None)
        if not header:
            raise ValueError(f"{path} is empty.")
        rows = [row for row in reader if row]
    columns: dict[str, np.ndarray] = {}
    for index, name in enumerate(header):
        values = []
        for row in rows:
            cell = row[index] if index < len(row) else ""
            try:
                values.append(float(cell) if cell != "" else math.nan)
            except ValueError:
                values.append(math.nan)
        columns[name] = np.asarray(values, dtype=np.float64)
    if "seed" in columns:
        columns["seed"] = np.where(np.isnan(columns["seed"]), -1.0, columns["seed"])
    return columns


def _smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over `window` points, ignoring NaN (NaN where all are)."""
    if window <= 1:
        return values
    finite = np.isfinite(values)
    filled = np.where(finite, values, 0.0)
    sums = np.convolve(filled, np.ones(window), mode="full")[: len(values)]
    counts = np.convolve(finite.astype(float), np.ones(window), mode="full")[
        : len(values)
    ]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _curves(
    columns: dict[str, np.ndarray], metric: str, x: str, smooth: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int]:
    """x, the mean over seeds, the standard deviation over seeds (None for one
    seed) and the number of seeds."""
    seeds = np.unique(columns.get("seed", np.array([-1.0])))
    per_seed = []
    xs = None
    for seed in seeds:
        selected = columns["seed"] == seed if "seed" in columns else slice(None)
        order = np.argsort(columns["iteration"][selected], kind="stable")
        seed_x = columns[x][selected][order]
        values = columns[metric][selected][order]
        if smooth is None:
            window = max(1, len(values) // 50)
        else:
            window = smooth
        per_seed.append(_smooth(values, window))
        if xs is None or len(seed_x) < len(xs):
            xs = seed_x
    assert xs is not None
    length = len(xs)
    stacked = np.stack([values[:length] for values in per_seed])
    with warnings.catch_warnings():  # all-NaN columns (no episode ended yet)
        warnings.simplefilter("ignore", category=RuntimeWarning)
        mean = np.nanmean(stacked, axis=0)
        std = np.nanstd(stacked, axis=0) if len(per_seed) > 1 else None
    return xs, mean, std, len(per_seed)


def plot_runs(
    runs: Sequence[str | os.PathLike],
    path: str | os.PathLike,
    *,
    metric: str = "episode_return",
    x: str = "env_steps",
    labels: Sequence[str] | None = None,
    smooth: int | None = None,
    title: str | None = None,
) -> Path:
    """Plot learning curves of one or several runs into one PNG.

    Each run is a line; a run whose `metrics.csv` has several seeds (trained
    vmapped) is drawn as the mean over seeds with a shaded band of one standard
    deviation.

    **Arguments:**

    - `runs`: run folders (or `metrics.csv` files).
    - `path`: the PNG to write.
    - `metric`: the column to plot (default the mean episode return).
    - `x`: the x axis: `"env_steps"`, `"iteration"` or `"time"` (seconds of
      running).
    - `labels`: legend entries (default the run folders' names).
    - `smooth`: trailing-mean window in iterations (default 1/50 of the run; `1`
      for none).
    - `title`: the figure title.

    **Returns:**

    The path written.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            "Plots need matplotlib: pip install matplotlib (or eqxrl[training])."
        ) from None
    if not runs:
        raise ValueError("plot_runs: give at least one run.")
    if labels is not None and len(labels) != len(runs):
        raise ValueError(
            f"plot_runs: {len(labels)} labels for {len(runs)} runs; give one each."
        )
    figure = Figure(figsize=(7, 4.2), dpi=110)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for index, run in enumerate(runs):
        columns = read_metrics(run)
        for name in (metric, x):
            if name not in columns:
                available = ", ".join(sorted(columns))
                raise ValueError(
                    f"{run}: no column {name!r} in its metrics; available: {available}."
                )
        xs, mean, std, num_seeds = _curves(columns, metric, x, smooth)
        run_path = Path(run)
        label = (
            labels[index]
            if labels is not None
            else (run_path.name if run_path.is_dir() else run_path.parent.name)
        )
        if num_seeds > 1:
            label = f"{label} ({num_seeds} seeds)"
        (line,) = axes.plot(xs, mean, label=label, linewidth=1.6)
        if std is not None:
            axes.fill_between(
                xs, mean - std, mean + std, color=line.get_color(), alpha=0.2
            )
    axes.set_xlabel({"env_steps": "environment steps", "time": "seconds"}.get(x, x))
    axes.set_ylabel(metric.replace("_", " "))
    axes.grid(alpha=0.3)
    axes.legend(loc="best", fontsize="small")
    if title:
        axes.set_title(title)
    figure.tight_layout()
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp.png")
    figure.savefig(temporary)
    os.replace(temporary, path)
    return path


def plot_run(
    run: str | os.PathLike,
    path: str | os.PathLike | None = None,
    *,
    metric: str = "episode_return",
    x: str = "env_steps",
    smooth: int | None = None,
) -> Path:
    """The learning curve of one run: [`plot_runs`][eqxrl.training.plot_runs] with
    a single run, written to `RUN/curve.png` by default."""
    run = Path(run)
    if path is None:
        path = (run if run.is_dir() else run.parent) / "curve.png"
    return plot_runs([run], path, metric=metric, x=x, smooth=smooth, title=run.name)
