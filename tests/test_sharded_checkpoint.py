"""Sharded checkpoints over several devices and processes: the array checksums do
not depend on the sharding, and every process reaches the same verdict on a damaged
checkpoint (none waits for the others in a collective). Devices are simulated
(`--xla_force_host_platform_device_count`) in subprocesses; two processes talk
through JAX's distributed runtime with gloo collectives. The one-process checks
(round trip, damage refused by name, old versions) are in test_checkpoint.py."""

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("orbax.checkpoint")

COMMON = textwrap.dedent(
    """
    import json, os, shutil, sys, hashlib
    from pathlib import Path

    def set_up(devices):
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "")
            + f" --xla_force_host_platform_device_count={devices}"
        )

    def resign(path, header, array_files):
        # A header whose file table has taken in other files (damage done before
        # the writer read them back), its checksum redone.
        header = dict(header, array_files=array_files)
        data = json.dumps(header).encode()
        (path / "header.json").write_bytes(data)
        (path / "header.sha256").write_text(hashlib.sha256(data).hexdigest())

    def other_arrays(path, other_path):
        # Give `path` the arrays/ of a checkpoint of another state.
        other_header = json.loads((other_path / "header.json").read_text())
        header = json.loads((path / "header.json").read_text())
        shutil.rmtree(path / "arrays")
        shutil.copytree(other_path / "arrays", path / "arrays")
        resign(path, header, other_header["array_files"])
    """
)

MESH_SCRIPT = COMMON + textwrap.dedent(
    """
    set_up(4)
    import jax, numpy as np, equinox as eqx
    import eqxrl
    from eqxrl.training import CheckpointError
    from eqxrl.training._checkpoint import load_training_state
    from eqxrl.training._config import algorithm_to_config
    from eqxrl.training._sharded_checkpoint import (
        _array_checksums, _storable, write_sharded_checkpoint,
    )

    ppo = eqxrl.PPO(
        env=eqxrl.envs.make("CartPole-v1"), num_envs=8, num_steps=4,
        total_timesteps=64, num_minibatches=1, num_epochs=1, hidden_sizes=(8,),
    )
    state = eqx.filter_jit(ppo.init)(jax.random.key(0))
    mesh = jax.make_mesh((4,), ("envs",))
    placed = ppo.place_state(state, mesh)
    out = Path(sys.argv[1])

    def write(path, tree):
        return write_sharded_checkpoint(
            path, tree, kind="training_state", config=algorithm_to_config(ppo)
        )

    def same(a, b):
        a, b = _storable(a), _storable(b)
        return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)

    path = write(out / "checkpoint-000000001.orbax", placed)
    header = json.loads((path / "header.json").read_text())
    physics = placed.env_state.env_state.env_state.physics
    results = {
        "split": str(physics.sharding.spec),
        # The checksums over 4 devices are those of the arrays on one device.
        "checksums": [leaf["checksum"] for leaf in header["leaves"]]
        == _array_checksums(list(_storable(state).values())),
    }
    for name, devices in (("4 devices", 4), ("2 devices", 2), ("1 device", None)):
        target = None
        if devices is not None:
            target = jax.make_mesh(
                (devices,), ("envs",), devices=jax.devices()[:devices]
            )
        loaded, _, _ = load_training_state(path, mesh=target)
        results[name] = same(loaded, state)

    # The arrays of another state (one split array differs), read onto the mesh.
    other = eqx.tree_at(
        lambda s: s.env_state.env_state.env_state.physics, placed, physics + 1
    )
    other_arrays(path, write(out / "other.orbax", other))
    try:
        load_training_state(path, mesh=mesh)
        results["refused"] = None
    except CheckpointError as error:
        results["refused"] = str(error)
    print(json.dumps(results))
    """
)


@pytest.mark.subprocess
def test_checksums_over_a_mesh(tmp_path):
    """Saved over 4 devices: the checksums are those of the arrays on one device,
    and they are checked on a restore onto 4, 2 or 1 devices."""
    script = tmp_path / "mesh.py"
    script.write_text(MESH_SCRIPT)
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(result.stdout.splitlines()[-1])
    assert "'envs'" in results["split"], results  # the state is split
    assert results["checksums"], results
    assert results["4 devices"] and results["2 devices"] and results["1 device"]
    assert results["refused"] is not None and (
        "the array .env_state.env_state.env_state.physics does not hold the values "
        "written" in results["refused"]
    ), results


WORKER = COMMON + textwrap.dedent(
    """
    process_id, port, out = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    set_up(2)
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"localhost:{port}", num_processes=2,
        process_id=process_id,
    )
    import numpy as np, equinox as eqx
    from jax.experimental import multihost_utils
    import eqxrl
    from eqxrl.training import CheckpointError
    from eqxrl.training._checkpoint import load_training_state
    from eqxrl.training._config import algorithm_to_config
    from eqxrl.training._sharded_checkpoint import _storable, write_sharded_checkpoint

    ppo = eqxrl.PPO(
        env=eqxrl.envs.make("CartPole-v1"), num_envs=8, num_steps=4,
        total_timesteps=64, num_minibatches=1, num_epochs=1, hidden_sizes=(8,),
    )
    mesh = jax.make_mesh((jax.device_count(),), ("envs",))
    state = ppo.place_state(eqx.filter_jit(ppo.init)(jax.random.key(0)), mesh)
    primary = jax.process_index() == 0

    def write(path, tree):
        return write_sharded_checkpoint(
            path, tree, kind="training_state", config=algorithm_to_config(ppo)
        )

    def gathered(tree):
        return [
            np.asarray(multihost_utils.process_allgather(x, tiled=True))
            for x in _storable(tree).values()
        ]

    def load(path):
        try:
            load_training_state(path, mesh=mesh)
        except CheckpointError as error:
            return str(error)

    path = write(out / "checkpoint-000000001.orbax", state)
    loaded, _, _ = load_training_state(path, mesh=mesh)
    results = {
        "process": jax.process_index(),
        "loaded": all(
            np.array_equal(a, b) for a, b in zip(gathered(loaded), gathered(state))
        ),
    }

    # A flipped byte in a data file (process 0 damages a copy): process 0 reads the
    # files, and process 1 raises the same error.
    damaged = out / "damaged" / path.name
    if primary:
        shutil.copytree(path, damaged)
        data_file = sorted(p for p in (damaged / "arrays").rglob("*")
                           if p.parent.name == "d")[0]
        data = bytearray(data_file.read_bytes())
        data[len(data) // 2] ^= 0xFF
        data_file.write_bytes(bytes(data))
    multihost_utils.sync_global_devices("damaged")
    results["file refused"] = load(damaged)

    # The arrays of another state: the checksums differ on every process.
    physics = state.env_state.env_state.env_state.physics
    other = eqx.tree_at(
        lambda s: s.env_state.env_state.env_state.physics, state, physics + 1
    )
    other_path = write(out / "other.orbax", other)
    if primary:
        other_arrays(path, other_path)
    multihost_utils.sync_global_devices("other arrays")
    results["array refused"] = load(path)
    print(json.dumps(results))
    """
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


@pytest.mark.subprocess
def test_two_processes_agree_on_a_damaged_checkpoint(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port = str(_free_port())
    processes = [
        subprocess.Popen(
            [sys.executable, str(script), str(i), port, str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
        )
        for i in range(2)
    ]
    outputs = []
    try:
        for process in processes:
            stdout, stderr = process.communicate(timeout=240)
            assert process.returncode == 0, stderr[-3000:]
            outputs.append(json.loads(stdout.splitlines()[-1]))
    finally:
        for process in processes:
            process.kill()
    first, second = outputs
    assert first["loaded"] and second["loaded"], outputs
    assert first["file refused"] == second["file refused"], outputs
    assert "its file arrays/" in first["file refused"], outputs
    assert first["array refused"] == second["array refused"], outputs
    assert (
        "the array .env_state.env_state.env_state.physics does not hold the values "
        "written" in first["array refused"]
    ), outputs
