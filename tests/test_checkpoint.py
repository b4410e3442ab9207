"""Checkpoints: round trips, atomic writes, and clear errors for every bad file."""

import dataclasses
import gc
import hashlib
import json
import re
import shutil
import struct
import sys
import time

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


def test_recurrent_state_and_policy_round_trip(tmp_path):
    """A recurrent PPO's checkpoint holds each environment's carry and rebuilds
    its configuration from the header alone; its policy file loads a policy that
    steps with a carry exactly as the saved one does."""
    ppo = eqxrl.PPO(
        env=eqxrl.envs.make("StatelessCartPole-v1"),
        network_factory=eqxrl.nn.LSTMActorCritic.from_env,
        num_envs=2,
        num_steps=8,
        total_timesteps=16,
        num_minibatches=1,
    )
    state = eqx.filter_jit(ppo.init)(jr.key(3))
    # A carry that is not the initial one, as mid-run.
    state = eqx.tree_at(
        lambda s: s.carry.cell, state, jr.normal(jr.key(4), state.carry.cell.shape)
    )
    path = eqxrl.save_checkpoint(tmp_path / "state.eqx", state, ppo)
    loaded, algorithm = eqxrl.load_checkpoint(path)
    assert algorithm.network_factory == eqxrl.nn.LSTMActorCritic.from_env
    assert loaded.carry.cell.shape == (2, 256)
    assert_bitwise_equal(loaded, state)

    policy = eqxrl.load_policy(save_policy(tmp_path / "policy.eqx", state, ppo))
    assert policy.is_recurrent and policy.deterministic
    expected = ppo.policy(state, deterministic=True)
    step = eqx.filter_jit(lambda policy, *args: policy.step(*args))
    carry = expected_carry = policy.initial_carry()
    observation = jnp.array([0.01, 0.02], jnp.float32)
    for key in jr.split(jr.key(5), 3):
        carry, action = step(policy, carry, observation, key)
        expected_carry, expected_action = step(
            expected, expected_carry, observation, key
        )
        assert int(action) == int(expected_action)
        assert_bitwise_equal(carry, expected_carry)


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


# --------------------------------------------------------------------------------------
# Sharded checkpoints: the `.orbax` folders of runs over a mesh
# --------------------------------------------------------------------------------------


@pytest.fixture
def sharded(tmp_path, ppo, state):
    """A sharded checkpoint of `state`, in a run's `checkpoints/` folder."""
    pytest.importorskip("orbax.checkpoint")
    directory = tmp_path / "checkpoints"
    directory.mkdir()
    return _write_sharded(directory / "checkpoint-000000002.orbax", state, ppo)


def _write_sharded(path, state, ppo):
    from eqxrl.training._config import algorithm_to_config
    from eqxrl.training._sharded_checkpoint import write_sharded_checkpoint

    return write_sharded_checkpoint(
        path,
        state,
        kind="training_state",
        config=algorithm_to_config(ppo),
        metadata={"iteration": 2},
    )


def _resign_sharded(path, change=lambda header: None):
    """Rewrite a sharded checkpoint's header, its table of orbax's files taken from
    the files as they are now (as a writer would have recorded damage done before it
    read them back), `change`d, with its checksum redone."""
    header = json.loads((path / "header.json").read_bytes())
    arrays = path / "arrays"
    header["array_files"] = {
        file.relative_to(arrays).as_posix(): hashlib.sha256(
            file.read_bytes()
        ).hexdigest()
        for file in sorted(arrays.rglob("*"))
        if file.is_file()
    }
    change(header)
    data = json.dumps(header).encode()
    (path / "header.json").write_bytes(data)
    (path / "header.sha256").write_text(hashlib.sha256(data).hexdigest())


def _flip_a_bit_of(path, values):
    """Flip the lowest bit of the first element of `values` wherever orbax stored
    its bytes; the files changed."""
    raw = np.asarray(values).tobytes()
    changed = []
    for file in sorted((path / "arrays").rglob("*")):
        data = bytearray(file.read_bytes()) if file.is_file() else bytearray()
        offset = data.find(raw)
        if offset >= 0:
            data[offset] ^= 1
            file.write_bytes(bytes(data))
            changed.append(file)
    assert changed, "orbax stores arrays compressed now: find their bytes another way"
    return changed


def test_sharded_round_trip_is_exact(sharded, ppo, state):
    directory = sharded.parent
    (directory / ".checkpoint-000000001.orbax.tmp").mkdir()  # a killed write
    assert list_checkpoints(directory) == [(2, sharded)]
    header = read_checkpoint_header(sharded)
    assert header["metadata"] == {"iteration": 2}
    assert header["format_version"] == 3
    for leaf in header["leaves"]:
        assert re.fullmatch(r"[0-9a-f]{16}", leaf["checksum"]), leaf
    assert header["array_files"] and all(
        (sharded / "arrays" / name).is_file() for name in header["array_files"]
    )
    for _ in range(2):  # loading changes nothing in the folder
        loaded, algorithm = eqxrl.load_checkpoint(directory)
        assert_bitwise_equal(loaded, state)
    assert algorithm.num_envs == ppo.num_envs
    assert prune_checkpoints(directory, 0) == [sharded] and not sharded.exists()


def test_sharded_checkpoint_that_does_not_fit(sharded, ppo):
    """Another configuration, an edited header, a missing file: refused with the
    reason."""
    wider = dataclasses.replace(ppo, hidden_sizes=(16,))
    with pytest.raises(CheckpointError, match="another configuration: hidden_sizes"):
        eqxrl.load_checkpoint(sharded, algorithm=wider)

    header_path = sharded / "header.json"
    original = header_path.read_bytes()
    header = json.loads(original)
    header["config"]["fields"].update(hidden_sizes=[16])
    header_path.write_text(json.dumps(header))
    with pytest.raises(CheckpointError, match="checksum of its header") as error:
        eqxrl.load_checkpoint(sharded)
    assert error.value.corrupt
    # The same edit with its checksum redone: the arrays no longer fit it.
    _resign_sharded(sharded, lambda h: h["config"]["fields"].update(hidden_sizes=[16]))
    with pytest.raises(CheckpointError, match=r"does not match.*\[8, 4\]"):
        eqxrl.load_checkpoint(sharded)
    header_path.write_bytes(original)
    (sharded / "header.sha256").write_text(hashlib.sha256(original).hexdigest())

    (sharded / "arrays" / "_METADATA").unlink()
    with pytest.raises(CheckpointError, match="its file arrays/_METADATA is missing"):
        eqxrl.load_checkpoint(sharded)


@pytest.mark.parametrize("damage", ["bit flip", "arrays of another state"])
def test_sharded_damage_is_refused_by_name(tmp_path, ppo, damage):
    """A shard changed on disk is refused before orbax reads a file, naming the
    file; one whose damage the file table took in is refused after the restore,
    naming the array."""
    pytest.importorskip("orbax.checkpoint")
    # An array over 1 KiB, which orbax stores outside its checksummed index, of
    # random bits, which it stores verbatim (they do not compress): orbax would
    # read a flipped bit in it as another value.
    ppo = dataclasses.replace(ppo, hidden_sizes=(256,))
    state = eqx.filter_jit(ppo.init)(jr.key(3))
    bits = jr.bits(jr.key(4), state.model.actor[0].weight.shape, jnp.uint32)
    weight = jax.lax.bitcast_convert_type(bits, jnp.float32)
    state = eqx.tree_at(lambda s: s.model.actor[0].weight, state, weight)
    sharded = _write_sharded(tmp_path / "checkpoint-000000002.orbax", state, ppo)
    if damage == "bit flip":
        changed = _flip_a_bit_of(sharded, weight)
    else:
        # The arrays/ of a checkpoint of another state (one array differs).
        other = eqx.tree_at(lambda s: s.model.actor[0].weight, state, weight + 1)
        other_path = _write_sharded(tmp_path / "other.orbax", other, ppo)
        shutil.rmtree(sharded / "arrays")
        shutil.copytree(other_path / "arrays", sharded / "arrays")
        changed = None
    with pytest.raises(CheckpointError, match=r"its file arrays/\S+ ") as error:
        eqxrl.load_checkpoint(sharded)
    assert error.value.corrupt
    if changed is not None:
        name = re.search(r"its file (\S+) differs", str(error.value)).group(1)
        assert sharded / name in changed

    _resign_sharded(sharded)
    with pytest.raises(CheckpointError) as error:
        eqxrl.load_checkpoint(sharded)
    assert error.value.corrupt
    assert str(error.value).startswith(
        f"{sharded} is corrupt: the array .model.actor[0].weight does not hold the "
        "values written"
    ), error.value


def test_an_old_sharded_format_is_refused(sharded):
    def as_version_2(header):
        header["format_version"] = 2
        del header["array_files"]
        for leaf in header["leaves"]:
            del leaf["checksum"]

    _resign_sharded(sharded, as_version_2)
    with pytest.raises(
        CheckpointError,
        match=r"format version 2 \(an older sharded format, whose arrays carry no "
        r"checksums\); this eqxrl reads version 3",
    ):
        eqxrl.load_checkpoint(sharded)


@pytest.mark.slow
def test_a_failed_sharded_load_leaves_no_orbax_work_behind(
    sharded, tmp_path, monkeypatch
):
    """orbax, failing on a damaged file, returned while tensorstore still read
    others; their callbacks found its event loop closed and raised "Event loop is
    closed" as unraisable exceptions, in whatever test ran by then. Damaged files
    are now refused before orbax reads any."""
    events = []
    monkeypatch.setattr(sys, "unraisablehook", events.append)
    for file in (sharded / "arrays").rglob("*"):
        if file.parent.name == "d":  # tensorstore's data files
            data = bytearray(file.read_bytes())
            data[len(data) // 2] ^= 0xFF
            file.write_bytes(bytes(data))
    # Whether a read is still in flight when another fails is a race, which
    # tensorstore's threads, once started, lose often: try often, each on a new
    # copy (tensorstore remembers a folder's failures), giving the reads in
    # flight, if any, time to complete.
    for attempt in range(20):
        copy = tmp_path / f"copy-{attempt}" / sharded.name
        shutil.copytree(sharded, copy)
        with pytest.raises(CheckpointError, match="is corrupt"):
            eqxrl.load_checkpoint(copy)
        time.sleep(0.1)
    gc.collect()
    assert not events, [
        f"{event.exc_type.__name__}: {event.exc_value}" for event in events
    ]
