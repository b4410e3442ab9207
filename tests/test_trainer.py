"""The Trainer with a tiny algorithm: chunking, compile-once, bounded memory, resume,
checkpoints, evaluation and the files of a run."""

import csv
import io
import json
import sys

import equinox as eqx
import jax
import jax.random as jr
import numpy as np
import pytest

import eqxrl
from eqxrl.training import CheckpointError, CSVLogger, JSONLLogger, Trainer
from toy_training import TRACES, RandomSearch


@pytest.fixture(scope="module")
def toy():
    return RandomSearch(env=eqxrl.envs.make("Corridor-test-v0"), iterations=20)


def quiet(algorithm, **kwargs):
    kwargs.setdefault("verbose", False)
    kwargs.setdefault("progress", False)
    kwargs.setdefault("gif_episodes", 0)
    return Trainer(algorithm, **kwargs)


def test_chunks_give_exactly_the_one_program_result(toy):
    reference, reference_metrics = toy.train(jr.key(4))
    for chunk_size in (3, 8):
        state, metrics = quiet(toy, chunk_size=chunk_size).fit(seed=4)
        assert eqx.tree_equal(
            eqx.filter(state, eqx.is_array, inverse=False),
            eqx.filter(reference, eqx.is_array),
        ), chunk_size
        assert set(metrics) == set(reference_metrics)
        for name, values in metrics.items():
            assert values.shape == (20,)
            # The same states, so the same metrics up to the order of a sum's terms,
            # which XLA may choose by the program around it (jax 0.12 does: one ulp).
            np.testing.assert_allclose(
                values, np.asarray(reference_metrics[name]), rtol=1e-6, atol=0
            )


def test_compiles_once_and_device_memory_stays_flat(toy, tmp_path):
    algorithm = RandomSearch(env=toy.env, iterations=90)
    compiles = []

    def listener(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(event)

    seen = {"traces": [], "compiles": [], "chunk_lengths": [], "live": []}

    def callback(iteration, state, metrics):
        seen["traces"].append(TRACES["train_iteration"])
        seen["compiles"].append(len(compiles))
        seen["chunk_lengths"].append(len(metrics["loss"]))
        seen["live"].append(sum(x.nbytes for x in jax.live_arrays()))

    # Checkpoints every 5 iterations with chunks of 4: chunks of 4 and 1 iterations.
    trainer = quiet(algorithm, chunk_size=4, checkpoint_every=5, out=str(tmp_path))
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        trainer.fit(seed=0, callback=callback)
    finally:
        # jax < 0.7 has no public way to remove a listener; it only appends here.
        unregister = getattr(jax.monitoring, "unregister_event_duration_listener", None)
        if unregister is not None:
            unregister(listener)
    assert set(seen["chunk_lengths"]) == {4, 1}
    assert len(seen["live"]) == 36
    # No tracing or compiling after the first chunk, whatever its length.
    assert len(set(seen["traces"])) == 1
    assert len(set(seen["compiles"])) == 1
    # Device memory after chunk k does not grow with k.
    assert max(seen["live"][2:]) <= seen["live"][1]


def test_files_of_a_run(toy, tmp_path):
    trainer = quiet(
        toy,
        out=tmp_path / "run",
        chunk_size=4,
        checkpoint_every=6,
        keep_checkpoints=2,
        eval_every=10,
        eval_episodes=3,
        gif_episodes=2,
    )
    trainer.fit(seed=1)
    run = tmp_path / "run"
    names = {p.name for p in run.iterdir()}
    assert {"checkpoints", "metrics.csv", "config.json", "summary.json"} <= names
    assert {"policy.eqx", "curve.png", "eval.gif"} <= names
    # The last k checkpoints, including the final one.
    checkpoints = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert checkpoints == ["checkpoint-000000018.eqx", "checkpoint-000000020.eqx"]
    with open(run / "metrics.csv") as file:
        rows = list(csv.DictReader(file))
    assert [int(r["iteration"]) for r in rows] == list(range(1, 21))
    assert [int(r["env_steps"]) for r in rows][:2] == [10, 20]  # num_envs * num_steps
    evaluated = [int(r["iteration"]) for r in rows if r["eval_return_mean"]]
    assert evaluated == [10, 20]
    assert float(rows[9]["eval_episodes"]) == 3
    summary = json.loads((run / "summary.json").read_text())
    assert summary["compile_seconds"] > 0 and summary["run_seconds"] > 0
    assert summary["iterations"] == 20 and summary["env_steps"] == 200
    assert {"return_mean", "return_std", "return_p50"} <= set(
        summary["final_evaluation"]
    )
    config = json.loads((run / "config.json").read_text())
    assert config["algorithm"]["algorithm"] == "random_search"
    assert config["seed"] == 1
    policy = eqxrl.load_policy(run)
    assert policy.deterministic
    from PIL import Image

    with Image.open(run / "eval.gif") as gif:
        assert gif.size == (20, 4)  # the corridor's frames
    assert (run / "curve.png").read_bytes().startswith(b"\x89PNG")


def test_resume_with_seeds_is_exact(toy, tmp_path):
    full, full_metrics = quiet(toy, num_seeds=3, chunk_size=4).fit(seed=2)
    assert full.weights.shape == (3, 4, 2)
    assert full_metrics["loss"].shape == (20, 3)
    trainer = quiet(toy, num_seeds=3, chunk_size=4, out=tmp_path, checkpoint_every=3)
    _, first = trainer.fit(seed=2, stop_at_iteration=8)
    assert first["loss"].shape == (8, 3)
    # A killed run would have logged rows past its last checkpoint: they go.
    with open(tmp_path / "metrics.csv", "a") as file:
        file.write("9,0,90,1.0,1.0,1.0,9\n")
    resumed, second = trainer.fit(seed=2, resume=True)
    assert second["loss"].shape == (12, 3)
    assert eqx.tree_equal(
        eqx.filter(resumed, eqx.is_array), eqx.filter(full, eqx.is_array)
    )
    np.testing.assert_array_equal(
        np.concatenate([first["loss"], second["loss"]]), full_metrics["loss"]
    )
    with open(tmp_path / "metrics.csv") as file:
        rows = [(int(r["iteration"]), int(r["seed"])) for r in csv.DictReader(file)]
    assert rows == [(i, s) for i in range(1, 21) for s in range(3)]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert len(summary["final_evaluation_per_seed"]) == 3


def test_refuses_to_overwrite_or_mix_runs(toy, tmp_path):
    quiet(toy, out=tmp_path, chunk_size=4).fit(seed=0, stop_at_iteration=4)
    before = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    with pytest.raises(FileExistsError, match="already holds a run.*resume"):
        quiet(toy, out=tmp_path, chunk_size=4).fit(seed=0)
    other = RandomSearch(env=toy.env, iterations=20, step_size=0.2)
    with pytest.raises(CheckpointError, match=r"step_size: 0.1 in the file, 0.2 now"):
        quiet(other, out=tmp_path, chunk_size=4).fit(seed=0, resume=True)
    with pytest.raises(CheckpointError, match="seed=0, this run has seed=1"):
        quiet(toy, out=tmp_path, chunk_size=4).fit(seed=1, resume=True)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == before


def test_corrupt_latest_checkpoint_is_reported(toy, tmp_path):
    trainer = quiet(toy, out=tmp_path, chunk_size=4, checkpoint_every=2)
    trainer.fit(seed=0, stop_at_iteration=4)
    latest = tmp_path / "checkpoints" / "checkpoint-000000004.eqx"
    latest.write_bytes(latest.read_bytes()[:-10])
    with pytest.raises(CheckpointError, match="truncated.*delete .*000000004"):
        trainer.fit(seed=0, resume=True)
    latest.unlink()  # as the message says: resume from the one before
    stale = tmp_path / "checkpoints" / ".checkpoint-000000004.eqx.123.abcd.tmp"
    stale.write_bytes(b"half a checkpoint, from a process killed mid-write")
    state, metrics = trainer.fit(seed=0, resume=True)
    assert metrics["loss"].shape == (18,)
    assert not stale.exists()


def test_resume_without_a_checkpoint_starts_from_scratch(toy, tmp_path):
    state, metrics = quiet(toy, out=tmp_path, chunk_size=8).fit(seed=0, resume=True)
    assert metrics["loss"].shape == (20,)
    with pytest.raises(ValueError, match="needs an output folder"):
        quiet(toy).fit(resume=True)


def test_unwritable_output_folder(toy, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(PermissionError, match="Cannot write to the output folder"):
        quiet(toy, out=blocker / "run").fit()
    assert blocker.read_text() == "not a folder"


def test_loggers_receive_rows_and_summaries(toy, tmp_path):
    jsonl = JSONLLogger(tmp_path / "metrics.jsonl")
    csv_logger = CSVLogger(tmp_path / "metrics.csv")
    quiet(toy, loggers=(jsonl, csv_logger), chunk_size=8).fit(seed=0)
    text = (tmp_path / "metrics.jsonl").read_text()
    lines = [json.loads(line) for line in text.splitlines()]
    rows = [line for line in lines if "summary" not in line]
    summaries = [line["summary"] for line in lines if "summary" in line]
    assert [row["iteration"] for row in rows] == list(range(1, 21))
    assert rows[0]["seed"] is None and rows[0]["env_steps"] == 10
    assert "compile_seconds" in summaries[0]
    assert "run_seconds" in summaries[-1]


@pytest.mark.parametrize(
    "options, message",
    [
        ({"chunk_size": 0}, "chunk_size=0"),
        ({"checkpoint_every": 0}, "checkpoint_every=0"),
        ({"num_seeds": -2}, "num_seeds=-2"),
        ({"eval_episodes": -1}, "eval_episodes=-1"),
        ({"eval_every": 5, "eval_episodes": 0}, "eval_every needs eval_episodes"),
        ({"env_kwargs": {"length": 3}}, "env_kwargs needs env_name"),
    ],
)
def test_bad_trainer_options(toy, options, message):
    with pytest.raises(ValueError, match=message):
        Trainer(toy, **options)


def test_evaluate_method(toy):
    state = toy.init(jr.key(0))
    trainer = quiet(toy, eval_episodes=5)
    result = trainer.evaluate(state, jr.key(1))
    assert result.returns.shape == (5,)
    assert result.lengths.max() <= 12  # the corridor's time limit


def test_console_output_reads_in_order(toy, tmp_path, monkeypatch):
    """The device and the compile time once, the last metrics line before the
    summary, the results, and last what was written (every file of the folder)."""
    console = io.StringIO()
    monkeypatch.setattr(sys, "stdout", console)
    monkeypatch.setattr(sys, "stderr", console)
    Trainer(toy, out=tmp_path, progress=False, gif_episodes=0, eval_episodes=2).fit(
        seed=0
    )
    lines = console.getvalue().splitlines()
    assert sum(" on cpu" in line for line in lines) == 1
    assert sum(line.startswith("compiled in") for line in lines) == 1
    last_metrics = max(
        i for i, line in enumerate(lines) if line.startswith("iteration")
    )
    assert lines[last_metrics].startswith("iteration 20 ")
    summary = next(i for i, line in enumerate(lines) if line.startswith("run_seconds"))
    results = next(i for i, line in enumerate(lines) if "final evaluation" in line)
    assert last_metrics < summary < results < len(lines) - 1
    written = lines[-1]
    assert written.startswith(f"wrote {tmp_path}/: ")
    for entry in tmp_path.iterdir():
        if not entry.name.startswith("."):
            assert entry.name in written
