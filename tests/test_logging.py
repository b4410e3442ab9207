"""Logging backends behind one interface."""

import csv
import importlib.util
import json
import math

import numpy as np
import pytest

import eqxrl
from eqxrl.training import (
    AbstractLogger,
    ConsoleLogger,
    CSVLogger,
    JSONLLogger,
    TensorBoardLogger,
    Trainer,
    WandbLogger,
)
from eqxrl.training._logging import RecentEpisodes
from eqxrl.training._trainer import _return_postfix
from toy_training import RandomSearch


def rows(seed=None, start=1, stop=6):
    for i in range(start, stop):
        yield {
            "iteration": i,
            "seed": seed,
            "env_steps": 10 * i,
            "time": 0.5 * i,
            "episode_return": math.nan if i == 1 else float(i),
            "loss": 1.0 / i,
        }


def read_csv(path):
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def test_a_logger_needs_only_log(tmp_path):
    """The Trainer drives a logger that implements `log` alone (the other methods
    keep their defaults) and hands it one row per iteration and seed, with the
    documented leading keys and the algorithm's metrics."""

    class Collect(AbstractLogger):
        def __init__(self):
            self.rows = []

        def log(self, row):
            self.rows.append(dict(row))

    with pytest.raises(TypeError, match="log"):
        AbstractLogger()
    algorithm = RandomSearch(env=eqxrl.envs.make("Corridor-test-v0"), iterations=5)
    logger = Collect()
    trainer = Trainer(
        algorithm,
        chunk_size=2,
        num_seeds=2,
        loggers=(logger,),
        eval_episodes=0,
        progress=False,
        verbose=False,
    )
    _, metrics = trainer.fit(seed=0)
    steps = algorithm.num_envs * algorithm.num_steps
    for seed in (0, 1):
        rows = [row for row in logger.rows if row["seed"] == seed]
        assert [row["iteration"] for row in rows] == [1, 2, 3, 4, 5]
        assert [row["env_steps"] for row in rows] == [steps * i for i in range(1, 6)]
        times = [row["time"] for row in rows]
        assert times == sorted(times) and times[0] >= 0
        np.testing.assert_allclose(
            [row["loss"] for row in rows], metrics["loss"][:, seed]
        )
    assert len(logger.rows) == 10


def test_csv_rows_new_columns_and_resume(tmp_path):
    path = tmp_path / "metrics.csv"
    logger = CSVLogger(path)
    for row in rows():
        logger.log(row)
    logger.log({**next(rows(start=6, stop=7)), "eval_return_mean": 3.5})
    logger.flush()
    records = read_csv(path)
    assert list(records[0])[:4] == ["iteration", "seed", "env_steps", "time"]
    assert records[0]["episode_return"] == "nan" and records[0]["seed"] == ""
    assert (
        records[0]["eval_return_mean"] == "" and records[5]["eval_return_mean"] == "3.5"
    )
    logger.close()
    # Resuming at iteration 3 forgets rows 4-6 and appends after 3.
    resumed = CSVLogger(path, append=True)
    resumed.resume(3, 30)
    for row in rows(start=4, stop=8):
        resumed.log(row)
    resumed.close()
    assert [int(r["iteration"]) for r in read_csv(path)] == list(range(1, 8))


def test_jsonl_nan_is_null_and_resume(tmp_path):
    path = tmp_path / "metrics.jsonl"
    logger = JSONLLogger(path)
    for row in rows(seed=2):
        logger.log(row)
    logger.log_summary({"compile_seconds": 2.5})
    logger.close()
    with open(path, "a") as file:
        file.write('{"iteration": 9, "loss"')  # a line cut short by a kill
    lines = [json.loads(line) for line in path.read_text().splitlines()[:-1]]
    assert lines[0]["episode_return"] is None and lines[0]["seed"] == 2
    assert lines[-1] == {"summary": {"compile_seconds": 2.5}}
    resumed = JSONLLogger(path, append=True)
    resumed.resume(2, 20)
    resumed.log(next(rows(start=3, stop=4)))
    resumed.close()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["iteration"] for r in records if "iteration" in r] == [1, 2, 3]
    assert {"summary": {"compile_seconds": 2.5}} in records  # summaries are kept


def test_console_logger_throttles(capsys):
    logger = ConsoleLogger(metrics=("episode_return",), every_seconds=3600)
    for row in rows():
        logger.log(row)
    logger.close()  # prints the last pending row
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("iteration 1 | 10 steps | episode_return nan")
    assert lines[-1].startswith("iteration 5 | 50 steps | episode_return 5")
    assert len(lines) == 2
    # The Trainer prints the compile time itself: the summary leaves it out.
    logger.log_summary({"compile_seconds": 1.25, "run_seconds": 2.5})
    assert capsys.readouterr().out.strip() == "run_seconds 2.5"


def episodes(count, episode_return, seed=None, iteration=1):
    """A row of an iteration in which `count` episodes ended (NaN means when none)."""
    return {
        "iteration": iteration,
        "seed": seed,
        "env_steps": 10 * iteration,
        "time": 0.5 * iteration,
        "episode_count": count,
        "episode_return": episode_return if count else math.nan,
        "episode_length": 10.0 if count else math.nan,
        "loss": 1.0,
    }


def test_recent_episodes_are_the_last_ones_to_end():
    """The mean over the last episodes (at least `size`, whole iterations),
    unchanged by iterations that ended none, exact over the episodes it covers."""
    recent = RecentEpisodes(size=5)
    assert recent.means() == (0, {})
    recent.update(episodes(0, math.nan))
    assert recent.means() == (0, {})
    recent.update(episodes(2, 1.0))
    recent.update(episodes(0, math.nan))  # nothing ended: the window stays
    assert recent.means() == (2, {"episode_return": 1.0, "episode_length": 10.0})
    recent.update(episodes(2, 4.0))
    assert recent.means() == (4, {"episode_return": 2.5, "episode_length": 10.0})
    # 7 episodes: the oldest iteration's 2 go, the latest 5 stay.
    recent.update(episodes(3, 0.0))
    assert recent.means() == (5, {"episode_return": 1.6, "episode_length": 10.0})
    # One iteration with more than `size` episodes is the whole window.
    recent.update(episodes(6, 2.0))
    assert recent.means()[0] == 6 and recent.means()[1]["episode_return"] == 2.0
    recent.update({"iteration": 9, "seed": None, "episode_return": 7.0})  # no count
    assert recent.means()[0] == 6
    recent.clear()
    assert recent.pooled() == (0, {})
    with pytest.raises(ValueError, match="at least 1"):
        RecentEpisodes(size=0)


def test_recent_episodes_per_seed_and_pooled():
    recent = RecentEpisodes(size=100)
    recent.update(episodes(1, 1.0, seed=0))
    recent.update(episodes(3, 5.0, seed=1))
    recent.update(episodes(0, math.nan, seed=0))
    assert recent.means(0)[1]["episode_return"] == 1.0
    assert recent.means(1)[1]["episode_return"] == 5.0
    assert recent.pooled() == (4, {"episode_return": 4.0, "episode_length": 10.0})
    assert recent.means(None) == (0, {})


def test_console_carries_the_last_episodes_across_iterations(capsys):
    """After an iteration in which no episode ended the line shows the mean of the
    last episodes to end, not NaN; before any ended it says so."""
    logger = ConsoleLogger(metrics=("episode_return", "loss"), every_seconds=0)
    logger.start({})
    logger.log(episodes(0, math.nan, iteration=1))
    logger.log(episodes(2, 1.0, iteration=2))
    logger.log(episodes(2, 4.0, iteration=3))
    logger.log(episodes(0, math.nan, iteration=4))
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "iteration 1 | 10 steps | no episode ended yet | loss 1"
    assert (
        lines[1]
        == "iteration 2 | 20 steps | last 2 episodes: episode_return 1 | loss 1"
    )
    assert lines[3] == (
        "iteration 4 | 40 steps | last 4 episodes: episode_return 2.5 | loss 1"
    )
    logger.resume(3, 30)  # a resumed run starts its window anew
    logger.log(episodes(0, math.nan, iteration=4))
    assert "no episode ended yet" in capsys.readouterr().out


def test_progress_bar_return():
    recent = RecentEpisodes()
    counted = {"episode_count": np.array([0]), "episode_return": np.array([np.nan])}
    assert _return_postfix(recent, counted) is None
    for row in (episodes(2, 1.0), episodes(0, math.nan), episodes(2, 4.0)):
        recent.update(row)
    assert _return_postfix(recent, counted) == "return 2.5 (last 4 episodes)"
    # An algorithm that does not count episodes: its latest iteration's value.
    uncounted = {"episode_return": np.array([3.0, np.nan])}
    assert _return_postfix(RecentEpisodes(), uncounted) == "return 3"


@pytest.mark.skipif(
    importlib.util.find_spec("tensorboardX") is None,
    reason="tensorboardX not installed",
)
def test_tensorboard_writes_event_files(tmp_path):
    logger = TensorBoardLogger(tmp_path / "tb")
    logger.start({"algorithm": {"algorithm": "ppo"}})
    for seed in (None, 1):
        for row in rows(seed=seed):
            logger.log(row)
    logger.log_summary({"compile_seconds": 3.0})
    logger.flush()
    logger.resume(3, 30)
    logger.log(next(rows(start=4, stop=5)))
    logger.close()
    main_events = list((tmp_path / "tb").glob("events.out.tfevents.*"))
    seed_events = list((tmp_path / "tb" / "seed_1").glob("events.out.tfevents.*"))
    assert main_events and seed_events
    data = b"".join(p.read_bytes() for p in main_events)
    assert b"episode_return" in data and b"compile_seconds" in data


@pytest.mark.skipif(
    importlib.util.find_spec("wandb") is None, reason="wandb not installed"
)
def test_wandb_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = WandbLogger(project="eqxrl-test", mode="offline", dir=str(tmp_path))
    logger.start({"seed": 0})
    for row in rows():
        logger.log(row)
    logger.log_summary({"compile_seconds": 1.0})
    logger.close()
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))
