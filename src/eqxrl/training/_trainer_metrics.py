"""What the Trainer shows and logs of each chunk of iterations: the progress bar
and its return, and the chunk's metrics as log rows."""

from collections.abc import Mapping
from typing import Any

import numpy as np

from ._logging import RecentEpisodes


class Progress:
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


def metric_rows(
    metrics: dict[str, np.ndarray],
    first: int,
    steps_per_iteration: int,
    chunk_start: float,
    chunk_end: float,
    num_seeds: int | None,
) -> list[dict[str, Any]]:
    """A chunk's metrics (`[iterations]`, or `[iterations, num_seeds]`, arrays) as
    log rows: one per iteration and seed, numbered from `first + 1`, their times
    spread evenly over the chunk's, and a metric with an agent axis as a column per
    agent."""
    count = len(next(iter(metrics.values()))) if metrics else 0
    seeds = [None] if num_seeds is None else list(range(num_seeds))
    columns = {name: _python_numbers(values) for name, values in metrics.items()}
    rows = []
    for j in range(count):
        iteration = first + j + 1
        elapsed = chunk_start + (chunk_end - chunk_start) * (j + 1) / max(count, 1)
        for seed in seeds:
            row: dict[str, Any] = {
                "iteration": iteration,
                "seed": seed,
                "env_steps": iteration * steps_per_iteration,
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
