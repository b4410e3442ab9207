"""Several processes on one machine, on JAX's own distributed runtime: the CPU
backend does collectives across processes with gloo, `jax.distributed.initialize`
with a localhost coordinator. Two processes with two devices each train PPO through
the Trainer and give the run of one process with four devices; the sharded
checkpoints that run writes resume in one process on one device."""

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("orbax.checkpoint")

WORKER = textwrap.dedent(
    """
    import json, os, sys
    process_id, num_processes, devices = map(int, sys.argv[1:4])
    port, out = sys.argv[4:6]
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "")
        + f" --xla_force_host_platform_device_count={devices}"
    )
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if num_processes > 1:
        jax.distributed.initialize(
            coordinator_address=f"localhost:{port}",
            num_processes=num_processes,
            process_id=process_id,
        )
    import numpy as np, equinox as eqx
    import eqxrl

    ppo = eqxrl.PPO(
        env=eqxrl.envs.make("CartPole-v1"), num_envs=8, num_steps=16,
        total_timesteps=8 * 16 * 4, normalize_observations=True,
    )
    mesh = None
    if devices * num_processes > 1:
        mesh = jax.make_mesh((jax.device_count(),), ("envs",))
    trainer = eqxrl.Trainer(
        ppo, out=out, mesh=mesh, checkpoint_every=2, verbose=False, progress=False,
        eval_episodes=2, gif_episodes=0,
    )
    state, metrics = trainer.fit(0, resume=os.path.exists(out))
    from jax.experimental import multihost_utils
    model = multihost_utils.process_allgather(
        eqx.filter(state.model, eqx.is_array), tiled=True
    )
    if process_id == 0:
        np.savez(os.path.join(out, "final_model.npz"), *jax.tree.leaves(model))
        print(json.dumps({
            "processes": jax.process_count(), "devices": jax.device_count(),
            "loss": np.asarray(metrics["total_loss"]).tolist(),
        }))
    """
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


def _run(script, tmp_path, num_processes, devices, out):
    environment = {**os.environ, "JAX_PLATFORMS": "cpu"}
    port = str(_free_port())
    processes = [
        subprocess.Popen(
            [sys.executable, str(script), str(i), str(num_processes), str(devices)]
            + [port, str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
        )
        for i in range(num_processes)
    ]
    outputs = []
    try:
        for process in processes:
            stdout, stderr = process.communicate(timeout=300)
            assert process.returncode == 0, stderr[-3000:]
            outputs.append(stdout)
    finally:
        for process in processes:
            process.kill()
    return json.loads(outputs[0].splitlines()[-1])


def _models(folder):
    import numpy as np

    with np.load(folder / "final_model.npz") as arrays:
        return [arrays[name] for name in sorted(arrays.files)]


@pytest.mark.subprocess
def test_two_processes_train_as_one_and_resume_on_one_device(tmp_path):
    import numpy as np

    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    one_process = _run(script, tmp_path, 1, 4, tmp_path / "one-process")
    two_processes = _run(script, tmp_path, 2, 2, tmp_path / "two-processes")
    assert (one_process["processes"], one_process["devices"]) == (1, 4)
    assert (two_processes["processes"], two_processes["devices"]) == (2, 4)
    np.testing.assert_allclose(two_processes["loss"], one_process["loss"], atol=1e-5)
    reference = _models(tmp_path / "one-process")
    for a, b in zip(_models(tmp_path / "two-processes"), reference):
        np.testing.assert_allclose(a, b, atol=1e-5)

    # Process 0 alone wrote the run folder's files; every process its shards.
    folder = tmp_path / "two-processes"
    assert sorted(p.name for p in (folder / "checkpoints").iterdir()) == [
        "checkpoint-000000002.orbax",
        "checkpoint-000000004.orbax",
    ]
    checkpoint = folder / "checkpoints" / "checkpoint-000000002.orbax"
    header = json.loads((checkpoint / "header.json").read_text())
    assert (header["processes"], header["devices"]) == (2, 4)
    assert len((folder / "metrics.csv").read_text().splitlines()) == 1 + 4

    # The checkpoint at iteration 2 resumes in one process on one device and
    # continues to the end: the run of four devices, up to float reduction order.
    resumed = tmp_path / "resumed"
    shutil.copytree(folder, resumed)
    shutil.rmtree(resumed / "checkpoints" / "checkpoint-000000004.orbax")
    continued = _run(script, tmp_path, 1, 1, resumed)
    assert (continued["processes"], continued["devices"]) == (1, 1)
    np.testing.assert_allclose(continued["loss"], one_process["loss"][2:], atol=1e-4)
    for a, b in zip(_models(resumed), reference):
        np.testing.assert_allclose(a, b, atol=1e-4)
    assert (resumed / "checkpoints" / "checkpoint-000000004.eqx").is_file()
