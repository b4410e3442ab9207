"""Several processes on one machine, on JAX's own distributed runtime: the CPU
backend does collectives across processes with gloo, `jax.distributed.initialize`
with a localhost coordinator. Two processes with two devices each train PPO through
the Trainer and give the run of one process on one device; the sharded checkpoints
that run writes resume in one process on one device. The one-process runs are in
the test's own process (one device): a fresh interpreter costs seconds."""

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap

import equinox as eqx
import jax
import numpy as np
import pytest

import eqxrl

pytest.importorskip("orbax.checkpoint")

# optax.adam computes `b1 ** count` with an int32 count.
STANDARD_DTYPE_PROMOTION = True

PPO_OPTIONS = dict(
    num_envs=8, num_steps=16, total_timesteps=8 * 16 * 4, normalize_observations=True
)
TRAINER_OPTIONS = dict(
    checkpoint_every=2, verbose=False, progress=False, eval_episodes=2, gif_episodes=0
)

WORKER = textwrap.dedent(
    """
    import json, os, sys
    process_id, num_processes, devices = map(int, sys.argv[1:4])
    port, out = sys.argv[4:6]
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "")
        + f" --xla_force_host_platform_device_count={{devices}}"
    )
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if num_processes > 1:
        jax.distributed.initialize(
            coordinator_address=f"localhost:{{port}}",
            num_processes=num_processes,
            process_id=process_id,
        )
    import numpy as np, equinox as eqx
    import eqxrl

    ppo = eqxrl.PPO(env=eqxrl.envs.make("CartPole-v1"), **{ppo_options!r})
    mesh = jax.make_mesh((jax.device_count(),), ("envs",))
    trainer = eqxrl.Trainer(ppo, out=out, mesh=mesh, **{trainer_options!r})
    state, metrics = trainer.fit(0)
    from jax.experimental import multihost_utils
    model = multihost_utils.process_allgather(
        eqx.filter(state.model, eqx.is_array), tiled=True
    )
    if process_id == 0:
        np.savez(os.path.join(out, "final_model.npz"), *jax.tree.leaves(model))
        print(json.dumps({{
            "processes": jax.process_count(), "devices": jax.device_count(),
            "loss": np.asarray(metrics["total_loss"]).tolist(),
        }}))
    """
).format(ppo_options=PPO_OPTIONS, trainer_options=TRAINER_OPTIONS)


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


def _saved_model(folder):
    with np.load(folder / "final_model.npz") as arrays:
        return [arrays[f"arr_{i}"] for i in range(len(arrays.files))]


def _train_here(out=None, resume=False):
    """The Trainer in this process, on its one device: the last iterations' losses
    and the final model's arrays."""
    ppo = eqxrl.PPO(env=eqxrl.envs.make("CartPole-v1"), **PPO_OPTIONS)
    trainer = eqxrl.Trainer(ppo, out=out, **TRAINER_OPTIONS)
    state, metrics = trainer.fit(0, resume=resume)
    model = jax.tree.leaves(eqx.filter(state.model, eqx.is_array))
    return np.asarray(metrics["total_loss"]), [np.asarray(x) for x in model]


@pytest.mark.subprocess
def test_two_processes_train_as_one_and_resume_on_one_device(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    two_processes = _run(script, tmp_path, 2, 2, tmp_path / "two-processes")
    assert (two_processes["processes"], two_processes["devices"]) == (2, 4)
    # The run of one device, up to the order of float sums across devices.
    reference_loss, reference = _train_here()
    np.testing.assert_allclose(two_processes["loss"], reference_loss, atol=1e-4)
    for a, b in zip(_saved_model(tmp_path / "two-processes"), reference, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4)

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
    # continues to the end: the run of one device, up to float reduction order.
    resumed = tmp_path / "resumed"
    shutil.copytree(folder, resumed)
    shutil.rmtree(resumed / "checkpoints" / "checkpoint-000000004.orbax")
    continued_loss, continued = _train_here(resumed, resume=True)
    np.testing.assert_allclose(continued_loss, reference_loss[2:], atol=1e-4)
    for a, b in zip(continued, reference, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4)
    assert (resumed / "checkpoints" / "checkpoint-000000004.eqx").is_file()
