"""Run folders and checkpoints: nothing lost, nothing silently wrong. Each test is a
way a user can get a run folder wrong (an edited checkpoint, a run killed early, a
second process, a full disk) and what the Trainer must do instead."""

import csv
import errno
import json
import struct

import jax.numpy as jnp
import numpy as np
import pytest

import eqxrl
from eqxrl.training import CheckpointError, Trainer, main
from toy_training import RandomSearch

ITERATIONS = 12


@pytest.fixture(scope="module")
def toy():
    return RandomSearch(env=eqxrl.envs.make("Corridor-test-v0"), iterations=ITERATIONS)


def quiet(algorithm, out, **kwargs):
    kwargs.setdefault("verbose", False)
    kwargs.setdefault("progress", False)
    kwargs.setdefault("gif_episodes", 0)
    kwargs.setdefault("chunk_size", 4)
    return Trainer(algorithm, out=out, **kwargs)


def iterations_logged(out) -> list[int]:
    with open(out / "metrics.csv") as file:
        return [int(row["iteration"]) for row in csv.DictReader(file)]


def edit_header(path, old: bytes, new: bytes) -> None:
    """Replace `old` by `new` (same length) inside the checkpoint's JSON header."""
    data = bytearray(path.read_bytes())
    magic = b"EQXRL-CHECKPOINT\n"
    (size,) = struct.unpack("<Q", data[len(magic) : len(magic) + 8])
    start = len(magic) + 8
    header = bytes(data[start : start + size])
    assert old in header and len(old) == len(new)
    data[start : start + size] = header.replace(old, new, 1)
    path.write_bytes(bytes(data))


def test_an_edited_iteration_in_the_header_is_refused(toy, tmp_path):
    quiet(toy, tmp_path, checkpoint_every=4).fit(seed=0, stop_at_iteration=8)
    latest = tmp_path / "checkpoints" / "checkpoint-000000008.eqx"
    edit_header(latest, b'"iteration": 8', b'"iteration": 2')
    with pytest.raises(CheckpointError, match="corrupt: its checksum"):
        quiet(toy, tmp_path).fit(seed=0, resume=True)
    assert iterations_logged(tmp_path) == list(range(1, 9))  # nothing overwritten


def test_header_iteration_must_match_the_state(toy, tmp_path):
    """A file whose header and state disagree (written that way, checksum intact)."""
    trainer = quiet(toy, tmp_path, checkpoint_every=4)
    state, _ = trainer.fit(seed=0, stop_at_iteration=4)
    eqxrl.save_checkpoint(
        tmp_path / "checkpoints" / "checkpoint-000000006.eqx",
        state,  # the state of iteration 4
        toy,
        metadata={"iteration": 6, "seed": 0, "num_seeds": None, "time": 1.0},
    )
    with pytest.raises(CheckpointError, match="header says iteration 6 but the state"):
        trainer.fit(seed=0, resume=True)


def test_resume_after_a_kill_before_the_first_checkpoint_logs_rows_once(toy, tmp_path):
    quiet(toy, tmp_path, checkpoint_every=100).fit(seed=0, stop_at_iteration=8)
    # As if killed before its first checkpoint: rows and config, no checkpoint.
    for checkpoint in (tmp_path / "checkpoints").iterdir():
        checkpoint.unlink()
    quiet(toy, tmp_path).fit(seed=0, resume=True)
    assert iterations_logged(tmp_path) == list(range(1, ITERATIONS + 1))


def test_cli_resume_after_a_kill_before_the_first_checkpoint_logs_rows_once(
    tmp_path, capsys
):
    argv = [
        "train",
        "Corridor-test-v0",
        "--algo",
        "random_search",
        f"--iterations={ITERATIONS}",
        "--out",
        str(tmp_path),
        "--log",
        "csv,jsonl",
        "--eval-episodes=2",
    ]
    assert main(argv) == 0
    for checkpoint in (tmp_path / "checkpoints").iterdir():
        checkpoint.unlink()
    assert main([*argv, "--resume"]) == 0
    capsys.readouterr()
    assert iterations_logged(tmp_path) == list(range(1, ITERATIONS + 1))
    records = [
        json.loads(line)
        for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
    ]
    logged = [record["iteration"] for record in records if "iteration" in record]
    assert logged == list(range(1, ITERATIONS + 1))


@pytest.mark.parametrize("name", ["config.json", "metrics.csv", "policy.eqx"])
def test_a_new_run_refuses_a_folder_with_results(toy, tmp_path, name):
    (tmp_path / name).write_text("results of an earlier run")
    with pytest.raises(FileExistsError, match=f"already holds a run.*{name}"):
        quiet(toy, tmp_path).fit(seed=0)
    assert (tmp_path / name).read_text() == "results of an earlier run"


def test_a_second_process_on_the_folder_stops_at_once(toy, tmp_path):
    """`fit` holds the folder's lock while it runs: another `fit` there (here from a
    callback, with its own file handle as another process would have) is refused."""
    refusals = []

    def second_run(iteration, state, metrics):
        if iteration == 4:
            with pytest.raises(FileExistsError, match="in use by another training"):
                quiet(toy, tmp_path).fit(seed=0, resume=True)
            refusals.append(iteration)

    quiet(toy, tmp_path).fit(seed=0, callback=second_run)
    assert refusals == [4]
    assert iterations_logged(tmp_path) == list(range(1, ITERATIONS + 1))
    # Released at the end: the folder can be resumed (here: nothing left to do).
    quiet(toy, tmp_path).fit(seed=0, resume=True)


def test_a_full_disk_ends_with_one_line(toy, tmp_path, monkeypatch):
    trainer = quiet(toy, tmp_path, checkpoint_every=4)
    trainer.fit(seed=0, stop_at_iteration=4)
    real_write = open

    def full_disk_open(path, mode="r", *args, **kwargs):
        handle = real_write(path, mode, *args, **kwargs)
        if "x" in mode and ".checkpoint-" in str(path):

            class Full:
                def __getattr__(self, name):
                    return getattr(handle, name)

                def write(self, data):
                    raise OSError(errno.ENOSPC, "No space left on device")

                def __enter__(self):
                    return self

                def __exit__(self, *exc):
                    handle.close()

            return Full()
        return handle

    monkeypatch.setattr("builtins.open", full_disk_open)
    with pytest.raises(CheckpointError) as error:
        trainer.fit(seed=0, resume=True)
    monkeypatch.undo()
    message = str(error.value)
    assert len(message.splitlines()) == 1, message
    assert "No space left on device" in message
    assert "checkpoint-000000008.eqx" in message  # the file it was writing
    assert "checkpoint-000000004.eqx (iteration 4)" in message  # the intact one
    assert not list((tmp_path / "checkpoints").glob(".checkpoint-*"))


def test_a_configuration_mismatch_does_not_invite_deleting_checkpoints(toy, tmp_path):
    quiet(toy, tmp_path, checkpoint_every=4).fit(seed=0, stop_at_iteration=8)
    other = RandomSearch(env=toy.env, iterations=ITERATIONS, step_size=0.5)
    with pytest.raises(CheckpointError) as error:
        quiet(other, tmp_path).fit(seed=0, resume=True)
    assert "step_size" in str(error.value)
    assert "delete" not in str(error.value)


def test_divergence_before_any_checkpoint_names_no_checkpoint(tmp_path):
    diverging = RandomSearch(
        env=eqxrl.envs.make("Corridor-test-v0"),
        iterations=ITERATIONS,
        transform=lambda weights: weights * jnp.inf,
    )
    with pytest.raises(FloatingPointError) as error:
        quiet(diverging, tmp_path, checkpoint_every=100).fit(seed=0)
    assert "diverged" in str(error.value)
    assert "checkpoint" not in str(error.value)


def test_cli_flags_cannot_be_abbreviated(tmp_path, capsys):
    code = main(
        [
            "train",
            "CartPole-v1",
            "--total-timestep",
            "1000",
            "--out",
            str(tmp_path / "run"),
        ]
    )
    assert code == 2
    assert "--total-timestep" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_the_run_config_is_not_rewritten_with_other_values(toy, tmp_path):
    quiet(toy, tmp_path).fit(seed=0, stop_at_iteration=4)
    config = json.loads((tmp_path / "config.json").read_text())
    with pytest.raises(CheckpointError):
        quiet(toy, tmp_path).fit(seed=1, resume=True)
    assert json.loads((tmp_path / "config.json").read_text()) == config
    assert np.array_equal(iterations_logged(tmp_path), np.arange(1, 5))
