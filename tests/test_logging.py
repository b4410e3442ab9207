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
