"""Training over several devices (`train(key, mesh=mesh)`): the same run as on one
device, environments split over the mesh's `"envs"` axis. Devices are simulated
(`--xla_force_host_platform_device_count=8`) in a subprocess, so the rest of the
suite keeps its one CPU device."""

import os
import subprocess
import sys
import textwrap

import jax
import pytest

import eqxrl

SCRIPT = textwrap.dedent(
    """
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax, numpy as np, equinox as eqx
    import eqxrl

    def arrays(state):
        return [
            np.asarray(leaf)
            for leaf in jax.tree.leaves(eqx.filter(state, eqx.is_array))
            if not jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)
        ]

    env = eqxrl.envs.make("CartPole-v1")
    value_based = dict(
        num_envs=8, total_timesteps=8 * 40, learning_starts=8 * 10,
        buffer_size=160, batch_size=16,
    )
    algorithms = {
        "PPO": eqxrl.PPO(
            env=env, num_envs=8, num_steps=16, total_timesteps=8 * 16 * 3,
            normalize_observations=True, normalize_rewards=True,
        ),
        "DQN": eqxrl.DQN(env=env, **value_based),
    }
    # IQN shares DQN's replay path (and its environment axes).
    for name, algorithm in algorithms.items():
        reference, reference_metrics = algorithm.train(jax.random.key(0))
        for devices in (8,):
            mesh = jax.make_mesh((devices,), ("envs",), devices=jax.devices()[:devices])
            state, metrics = algorithm.train(jax.random.key(0), mesh=mesh)
            spec = jax.tree.leaves(state.env_state)[0].sharding.spec
            weights = jax.tree.leaves(eqx.filter(state, eqx.is_array))[0].sharding.spec
            difference = max(
                float(np.max(np.abs(a.astype(np.float64) - b), initial=0.0))
                for a, b in zip(arrays(reference), arrays(state))
            )
            loss = "total_loss" if name == "PPO" else "loss"
            metric_difference = float(np.nanmax(np.abs(
                np.asarray(reference_metrics[loss]) - np.asarray(metrics[loss])
            )))
            print(name, devices, tuple(spec), tuple(weights), difference,
                  metric_difference, flush=True)
    uneven = eqxrl.PPO(env=env, num_envs=12, num_steps=8, total_timesteps=96)
    try:
        uneven.train(jax.random.key(0), mesh=jax.make_mesh((8,), ("envs",)))
    except ValueError as error:
        print("refused:", error)
    """
)


@pytest.mark.slow
def test_runs_over_8_devices_match_the_one_device_run(tmp_path):
    script = tmp_path / "sharded.py"
    script.write_text(SCRIPT)
    environment = {**os.environ, "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=400,
        env=environment,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert (
        lines[-1].startswith("refused:")
        and "num_envs=12 does not split evenly" in (lines[-1])
    ), result.stdout
    rows = [line.split() for line in lines[:-1]]
    assert [(row[0], row[1]) for row in rows] == [
        ("PPO", "8"),
        ("DQN", "8"),
    ], result.stdout
    for name, devices, spec, weights, difference, metric_difference in (
        (row[0], row[1], row[2], row[3], float(row[4]), float(row[5])) for row in rows
    ):
        # Environments are split over the devices, the network is on every one.
        assert spec == "('envs',)" and weights == "()", (name, devices, spec, weights)
        # The same run, up to the order of float sums across devices.
        assert difference < 1e-4 and metric_difference < 1e-4, (name, devices)


def test_a_mesh_without_an_envs_axis_is_refused():
    env = eqxrl.envs.make("CartPole-v1")
    ppo = eqxrl.PPO(env=env, num_envs=6, num_steps=8, total_timesteps=48)
    device = jax.devices()[:1]
    seeds_mesh = jax.make_mesh((1,), ("seeds",), devices=device)
    with pytest.raises(ValueError, match="axis named 'envs'"):
        ppo.train(jax.random.key(0), mesh=seeds_mesh)
