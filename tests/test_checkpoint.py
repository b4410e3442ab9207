"""Checkpoints: round trips, atomic writes, and clear errors for every bad file."""

import dataclasses
import hashlib
import json
import struct

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl
from eqxrl.training import CheckpointError, read_checkpoint_header, save_policy
from eqxrl.training._checkpoint import MAGIC, list_checkpoints, prune_checkpoints
from toy_training import RandomSearch


@pytest.fixture(scope="module")
def ppo():
    return eqxrl.PPO(
        env=eqxrl.envs.make("CartPole-v1"),
        num_envs=2,
        num_steps=8,
        total_timesteps=160,
        num_minibatches=1,
        num_epochs=1,
        hidden_sizes=(8,),
    )


@pytest.fixture(scope="module")
def toy():
    return RandomSearch(env=eqxrl.envs.make("Corridor-test-v0"), step_size=0.25)


@pytest.fixture(scope="module")
def state(ppo):
    # A fresh state is a complete training state: model, Adam state, env states,
    # timesteps, key, counter.
    return eqx.filter_jit(ppo.init)(jr.key(3))


@pytest.fixture
def saved(tmp_path, ppo, state):
    path = tmp_path / "state.eqx"
    eqxrl.save_checkpoint(path, state, ppo, metadata={"iteration": 0, "note": "x"})
    return path


def assert_bitwise_equal(a, b):
    leaves_a, tree_a = jax.tree.flatten(eqx.filter(a, eqx.is_array))
    leaves_b, tree_b = jax.tree.flatten(eqx.filter(b, eqx.is_array))
    assert tree_a == tree_b
    for x, y in zip(leaves_a, leaves_b):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jr.key_data(x), jr.key_data(y)
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_round_trip_is_exact(saved, ppo, state):
    loaded, algorithm = eqxrl.load_checkpoint(saved)
    assert_bitwise_equal(loaded, state)
    assert eqx.tree_equal(algorithm, ppo)
    assert isinstance(loaded, eqxrl.PPOState)
    # The key still works as a key, with the same stream.
    np.testing.assert_array_equal(
        jr.key_data(jr.split(loaded.key)), jr.key_data(jr.split(state.key))
    )
    header = read_checkpoint_header(saved)
    assert header["kind"] == "training_state"
    assert header["versions"]["eqxrl"] == eqxrl.__version__
    assert header["metadata"] == {"iteration": 0, "note": "x"}
    assert header["config"]["fields"]["num_envs"] == 2


def test_header_is_plain_json_before_the_arrays(saved):
    data = saved.read_bytes()
    assert data.startswith(MAGIC)
    (length,) = struct.unpack("<Q", data[len(MAGIC) : len(MAGIC) + 8])
    header = json.loads(data[len(MAGIC) + 8 : len(MAGIC) + 8 + length])
    assert header["format"] == "eqxrl-checkpoint"
    paths = [leaf["path"] for leaf in header["leaves"]]
    assert ".key" in paths and ".iteration" in paths
    assert any(p.startswith(".optimizer_state") for p in paths)
    assert any(p.startswith(".env_state") for p in paths)


def test_batched_states(tmp_path, toy):
    states = eqx.filter_jit(eqx.filter_vmap(toy.init))(jr.split(jr.key(0), 3))
    path = eqxrl.save_checkpoint(tmp_path / "seeds.eqx", states, toy)
    assert read_checkpoint_header(path)["batch_shape"] == [3]
    loaded, _ = eqxrl.load_checkpoint(path)
    assert_bitwise_equal(loaded, states)
    with pytest.raises(CheckpointError, match="batch of training states"):
        eqxrl.load_policy(path)


def test_save_refuses_a_foreign_state(tmp_path, ppo):
    with pytest.raises(ValueError, match="not a training state"):
        eqxrl.save_checkpoint(tmp_path / "x.eqx", {"a": jnp.zeros(3)}, ppo)
    with pytest.raises((TypeError, ValueError)):
        eqxrl.save_checkpoint(tmp_path / "x.eqx", {"a": jnp.zeros(3)}, {"lr": 1})
    assert not (tmp_path / "x.eqx").exists()


def test_missing_and_foreign_files(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        eqxrl.load_checkpoint(tmp_path / "nope.eqx")
    with pytest.raises(CheckpointError, match="No checkpoint in"):
        eqxrl.load_checkpoint(tmp_path)
    other = tmp_path / "model.eqx"
    eqx.tree_serialise_leaves(other, jnp.zeros(3))
    with pytest.raises(CheckpointError, match="not an eqxrl checkpoint"):
        eqxrl.load_checkpoint(other)
    empty = tmp_path / "empty.eqx"
    empty.write_bytes(b"")
    with pytest.raises(CheckpointError, match="not an eqxrl checkpoint"):
        eqxrl.load_checkpoint(empty)


@pytest.mark.parametrize("fraction", [0.001, 0.01, 0.5, 0.99])
def test_truncated_files(saved, fraction):
    data = saved.read_bytes()
    cut = max(len(MAGIC) + 2, int(len(data) * fraction))
    saved.write_bytes(data[:cut])
    with pytest.raises(CheckpointError, match="truncated"):
        eqxrl.load_checkpoint(saved)


def test_corrupt_payload_is_caught_by_the_checksum(saved):
    data = bytearray(saved.read_bytes())
    data[-100] ^= 0xFF  # a byte inside the arrays
    saved.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="checksum"):
        eqxrl.load_checkpoint(saved)


def test_corrupt_header(saved):
    data = bytearray(saved.read_bytes())
    start = len(MAGIC) + 8
    data[start : start + 1] = b"]"
    saved.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="JSON header cannot be read"):
        eqxrl.load_checkpoint(saved)


def _rewrite_header(path, change, sign=True):
    """Edit the JSON header; with `sign`, also recompute the checksum (which covers
    the header), as a file written that way would have."""
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[len(MAGIC) : len(MAGIC) + 8])
    start = len(MAGIC) + 8
    header = json.loads(data[start : start + length])
    change(header)
    new = json.dumps(header).encode()
    rest = data[start + length :]
    if sign:
        payload = rest[: -(len(b"EQXRL-END") + 8 + 32)]
        rest = rest[:-32] + hashlib.sha256(new + payload).digest()
    path.write_bytes(MAGIC + struct.pack("<Q", len(new)) + new + rest)


def test_an_edited_header_fails_the_checksum(saved):
    _rewrite_header(saved, lambda h: h["metadata"].update(iteration=7), sign=False)
    with pytest.raises(CheckpointError, match="corrupt: its checksum") as error:
        eqxrl.load_checkpoint(saved)
    assert error.value.corrupt


def test_other_format_version(saved):
    _rewrite_header(saved, lambda h: h.update(format_version=99))
    with pytest.raises(CheckpointError, match="format version 99"):
        eqxrl.load_checkpoint(saved)


def test_mismatched_configuration(saved, ppo):
    wider = dataclasses.replace(ppo, hidden_sizes=(16,))
    with pytest.raises(CheckpointError, match="another configuration: hidden_sizes"):
        eqxrl.load_checkpoint(saved, algorithm=wider)
    # A header edited to another configuration: the arrays no longer fit it.
    _rewrite_header(saved, lambda h: h["config"]["fields"].update(hidden_sizes=[16]))
    with pytest.raises(CheckpointError, match=r"does not match.*\(8, 4\)|\[8, 4\]"):
        eqxrl.load_checkpoint(saved)


def test_library_version_mismatch_warns(saved, state):
    _rewrite_header(saved, lambda h: h["versions"].update(eqxrl="0.0.1"))
    with pytest.warns(UserWarning, match="written by eqxrl 0.0.1"):
        loaded, _ = eqxrl.load_checkpoint(saved)
    assert_bitwise_equal(loaded, state)


def test_unserializable_config_needs_the_algorithm(tmp_path):
    algorithm = RandomSearch(
        env=eqxrl.envs.make("Corridor-test-v0"), transform=lambda w: jnp.clip(w, -1, 1)
    )
    state = algorithm.init(jr.key(0))
    path = eqxrl.save_checkpoint(tmp_path / "custom.eqx", state, algorithm)
    with pytest.raises(CheckpointError, match="transform=.*algorithm="):
        eqxrl.load_checkpoint(path)
    loaded, rebuilt = eqxrl.load_checkpoint(path, algorithm=algorithm)
    assert rebuilt is algorithm
    assert_bitwise_equal(loaded, state)


def test_atomic_write_keeps_the_old_file(saved, ppo, state, monkeypatch):
    before = saved.read_bytes()

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(eqx, "tree_serialise_leaves", fail)
    with pytest.raises(CheckpointError, match=r"Cannot write .*state.eqx: disk full"):
        eqxrl.save_checkpoint(saved, state, ppo)
    assert saved.read_bytes() == before
    assert [p.name for p in saved.parent.iterdir()] == [saved.name]


def test_unwritable_destination(tmp_path, ppo, state):
    with pytest.raises(CheckpointError, match="does not exist"):
        eqxrl.save_checkpoint(tmp_path / "missing" / "x.eqx", state, ppo)


def test_policy_export(tmp_path, ppo, state):
    path = save_policy(tmp_path / "policy.eqx", state, ppo, deterministic=True)
    header = read_checkpoint_header(path)
    assert header["kind"] == "policy" and header["deterministic"] is True
    # Only the network: far smaller than the training state.
    assert len(header["leaves"]) == len(
        jax.tree.leaves(eqx.filter(state.model, eqx.is_array))
    )
    policy = eqxrl.load_policy(path)
    assert isinstance(policy, eqxrl.nn.AbstractPolicy) and policy.deterministic
    observation = jnp.array([0.01, 0.0, 0.02, 0.0], jnp.float32)
    expected = ppo.policy(state, deterministic=True)(observation, jr.key(0))
    assert policy.act(observation, jr.key(0)) == expected
    assert policy.act(observation, jr.key(0)).dtype == jnp.int32
    sampling = eqxrl.load_policy(path, deterministic=False)
    assert not sampling.deterministic
    # A training-state checkpoint gives its policy too (sampling by default).
    checkpoint = eqxrl.save_checkpoint(tmp_path / "state.eqx", state, ppo)
    assert not eqxrl.load_policy(checkpoint).deterministic
    with pytest.raises(CheckpointError, match="load it with eqxrl.load_policy"):
        eqxrl.load_checkpoint(path)


def test_checkpoint_folders(tmp_path, ppo, state):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for iteration in (5, 10, 15, 20):
        eqxrl.save_checkpoint(folder / f"checkpoint-{iteration:09d}.eqx", state, ppo)
    (folder / ".checkpoint-000000025.eqx.123.tmp").write_bytes(b"partial")
    assert [i for i, _ in list_checkpoints(folder)] == [5, 10, 15, 20]
    prune_checkpoints(folder, keep=2)
    assert [i for i, _ in list_checkpoints(folder)] == [15, 20]
    loaded, _ = eqxrl.load_checkpoint(tmp_path)  # a run folder: its latest checkpoint
    assert_bitwise_equal(loaded, state)


def test_generic_algorithm_round_trip(tmp_path, toy):
    algorithm = toy
    state, _ = algorithm.train(jr.key(1))
    path = eqxrl.save_checkpoint(tmp_path / "toy.eqx", state, algorithm)
    loaded, rebuilt = eqxrl.load_checkpoint(path)
    assert_bitwise_equal(loaded, state)
    assert eqx.tree_equal(rebuilt, algorithm)


# orbax's asyncio tasks can outlive a failed restore (the damaged data files below)
# and report "Event loop is closed" as unraisable exceptions when they are
# collected; the restore's own error is what this test checks.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_sharded_checkpoint_folders(tmp_path, ppo, state):
    """The `.orbax` folders of runs over a mesh: a round trip is exact, and a
    folder that does not fit (another configuration, an edited header, a damaged
    shard) is refused with the reason."""
    pytest.importorskip("orbax.checkpoint")
    from eqxrl.training._config import algorithm_to_config
    from eqxrl.training._sharded_checkpoint import write_sharded_checkpoint

    directory = tmp_path / "checkpoints"
    directory.mkdir()
    (directory / ".checkpoint-000000001.orbax.tmp").mkdir()  # a killed write
    path = directory / "checkpoint-000000002.orbax"
    write_sharded_checkpoint(
        path,
        state,
        kind="training_state",
        config=algorithm_to_config(ppo),
        metadata={"iteration": 2},
    )
    assert list_checkpoints(directory) == [(2, path)]
    assert read_checkpoint_header(path)["metadata"] == {"iteration": 2}
    loaded, algorithm = eqxrl.load_checkpoint(tmp_path / "checkpoints")
    assert_bitwise_equal(loaded, state)
    assert algorithm.num_envs == ppo.num_envs

    wider = dataclasses.replace(ppo, hidden_sizes=(16,))
    with pytest.raises(CheckpointError, match="another configuration: hidden_sizes"):
        eqxrl.load_checkpoint(path, algorithm=wider)

    header_path = path / "header.json"
    original = header_path.read_bytes()
    header = json.loads(original)
    header["config"]["fields"].update(hidden_sizes=[16])
    header_path.write_text(json.dumps(header))
    with pytest.raises(CheckpointError, match="checksum of its header") as error:
        eqxrl.load_checkpoint(path)
    assert error.value.corrupt
    # The same edit with its checksum redone: the arrays no longer fit it.
    edited = header_path.read_bytes()
    (path / "header.sha256").write_text(hashlib.sha256(edited).hexdigest())
    with pytest.raises(CheckpointError, match=r"does not match.*\[8, 4\]"):
        eqxrl.load_checkpoint(path)
    header_path.write_bytes(original)
    (path / "header.sha256").write_text(hashlib.sha256(original).hexdigest())

    # orbax's data files (tensorstore's OCDBT), overwritten in place.
    data_files = [p for p in (path / "arrays").rglob("*") if p.parent.name == "d"]
    assert data_files
    for data_file in data_files:
        data_file.write_bytes(b"\0" * data_file.stat().st_size)
    with pytest.raises(CheckpointError, match="is corrupt") as error:
        eqxrl.load_checkpoint(path)
    assert error.value.corrupt

    assert prune_checkpoints(directory, 0) == [path] and not path.exists()
