"""Training over several devices: environments split over a mesh's `"envs"` axis
(`train(key, mesh=mesh)`) give the run of one device (SAC's running observation
statistics, independent learners and QMIX's joint replay buffer included); runs
split over `"seeds"` (`train_seeds`) give the runs of the one-device vmap without
communicating; the Trainer over a mesh writes sharded checkpoints that resume
exactly and load on one device. Devices are simulated
(`--xla_force_host_platform_device_count`, 4 of them: enough to split over two axes
of 2) in subprocesses, so the rest of the suite keeps its one CPU device. The
first-pass checks share one subprocess: a fresh interpreter costs seconds."""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import eqxrl

# optax.adam computes `b1 ** count` with an int32 count.
STANDARD_DTYPE_PROMOTION = True

# What every script below starts with: simulated devices (added to the caller's
# XLA flags, which the first pass sets for fast compiles), and how to compare and
# describe the states it trains.
PRELUDE = textwrap.dedent(
    """
    import importlib.util, json, os, sys
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "")
        + f" --xla_force_host_platform_device_count={int(sys.argv[2])}"
    )
    import jax, jax.numpy as jnp, numpy as np, equinox as eqx
    import eqxrl

    results = {}

    def arrays(state):
        return [
            np.asarray(leaf)
            for leaf in jax.tree.leaves(eqx.filter(state, eqx.is_array))
            if not jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)
        ]

    def difference(a, b):
        return max(
            float(np.max(np.abs(x.astype(np.float64) - y), initial=0.0))
            for x, y in zip(arrays(a), arrays(b))
        )

    def spec(tree):
        return str(tuple(jax.tree.leaves(tree)[0].sharding.spec))

    def mesh(shape, axes):
        count = int(np.prod(shape))
        return jax.make_mesh(shape, axes, devices=jax.devices()[:count])
    """
)

# Each part below adds to `results`; the first-pass parts run in one subprocess.
ENVS_AND_SEEDS = textwrap.dedent(
    """
    env = eqxrl.envs.make("CartPole-v1")
    value_based = dict(
        num_envs=8, total_timesteps=8 * 40, learning_starts=8 * 10,
        buffer_size=160, batch_size=16, hidden_sizes=(16,),
    )
    ppo = eqxrl.PPO(
        env=env, num_envs=8, num_steps=16, total_timesteps=8 * 16 * 3,
        hidden_sizes=(16,), normalize_observations=True, normalize_rewards=True,
    )
    dqn = eqxrl.DQN(env=env, **value_based)
    pqn = eqxrl.PQN(
        env=env, num_envs=8, num_steps=8, total_timesteps=8 * 8 * 3,
        num_minibatches=4, hidden_sizes=(16,),
    )

    def run(states, index):
        return jax.tree.map(lambda x: x[index] if eqx.is_array(x) else x, states)

    # The one-device vmap over seeds: the reference of the runs over "seeds", and
    # its first run PPO's one-device reference over "envs" (one program fewer to
    # compile than an unvmapped run).
    keys = jax.random.split(jax.random.key(1), 4)
    seeds_reference, _ = eqx.filter_vmap(ppo.train)(keys)

    # Environments over 4 and 2 devices against one device (IQN's replay buffer is
    # DQN's: `AbstractQLearning.environment_axes`).
    for name, algorithm, devices, key in (
        ("PPO", ppo, 4, keys[0]),
        ("DQN", dqn, 2, jax.random.key(0)),
        ("PQN", pqn, 2, jax.random.key(0)),
    ):
        if name == "PPO":
            reference = run(seeds_reference, 0)
        else:
            reference, _ = algorithm.train(key)
        state, _ = algorithm.train(key, mesh=mesh((devices,), ("envs",)))
        results[f"envs {name} {devices}"] = {
            "difference": difference(reference, state),
            "env_spec": spec(state.env_state),
            "weight_spec": spec(eqx.filter(state, eqx.is_array)),
        }

    # Seeds over devices against the one-device vmap.
    reference = seeds_reference
    for shape, axes in (((4,), ("seeds",)), ((2, 2), ("seeds", "envs"))):
        states, metrics = eqxrl.train_seeds(ppo, keys, mesh=mesh(shape, axes))
        results[f"seeds {axes}"] = {
            "difference": difference(reference, states),
            "metrics_shape": list(jax.tree.leaves(metrics)[0].shape),
            "env_spec": spec(states.env_state),
        }

    # No communication between runs split over "seeds": "did any episode end"
    # is reduced over each device's own runs.
    flags = jnp.asarray([True] + [False] * 3)
    def any_ended(flag):
        return eqxrl.envs.any_in_vmapped_batch(flag)
    over_seeds = eqxrl.algorithms.vmap_over_seeds
    split = over_seeds(any_ended, mesh((4,), ("seeds",)), in_axes=(0,))
    lowered = jax.jit(split).lower(flags).compile().as_text()
    results["any per device"] = [bool(x) for x in split(flags)]
    results["any vmapped"] = [
        bool(x) for x in over_seeds(any_ended, in_axes=(0,))(flags)
    ]
    results["collectives"] = sum(
        lowered.count(op) for op in ("all-reduce", "all-gather", "collective-permute")
    )

    refusals = []
    for attempt in (
        lambda: eqxrl.PPO(env=env, num_envs=6, num_steps=8, total_timesteps=48).train(
            jax.random.key(0), mesh=mesh((4,), ("envs",))
        ),
        lambda: eqxrl.train_seeds(ppo, jax.random.split(jax.random.key(0), 6),
                                  mesh=mesh((4,), ("seeds",))),
        lambda: eqxrl.Trainer(ppo, mesh=mesh((3,), ("envs",))),
        lambda: ppo.train(jax.random.key(0), mesh=mesh((2, 2), ("seeds", "envs"))),
    ):
        try:
            attempt()
            refusals.append(None)
        except ValueError as error:
            refusals.append(str(error))
    results["refusals"] = refusals
    """
)


def run_script(script: str, tmp_path, devices: int) -> dict:
    """Run `script` in a process of its own (`devices` simulated CPU devices); the
    JSON object its last line prints."""
    path = tmp_path / "sharded.py"
    path.write_text(script)
    environment = {**os.environ, "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(
        [sys.executable, str(path), str(tmp_path / "runs"), str(devices)],
        capture_output=True,
        text=True,
        timeout=500,
        env=environment,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def first_pass_results(tmp_path_factory) -> dict:
    """What the first-pass scripts found, run in one subprocess."""
    script = PRELUDE + ENVS_AND_SEEDS + SAC_AND_INDEPENDENT + RECURRENT
    script += "print(json.dumps(results))\n"
    return run_script(script, tmp_path_factory.mktemp("sharding"), devices=4)


@pytest.mark.subprocess
def test_runs_over_devices_match_the_one_device_runs(first_pass_results):
    results = first_pass_results

    for name in ("PPO 4", "DQN 2", "PQN 2"):
        run = results[f"envs {name}"]
        # Environments are split over the devices, the network is on every one.
        assert run["env_spec"] == "('envs',)", (name, run)
        assert run["weight_spec"] == "()", (name, run)
        # The same run, up to the order of float sums across devices.
        assert run["difference"] < 1e-4, (name, run)

    seeds = results["seeds ('seeds',)"]
    assert seeds["env_spec"] == "('seeds',)", seeds
    assert seeds["difference"] < 1e-4, seeds
    assert seeds["metrics_shape"] == [4, 3], seeds
    both = results["seeds ('seeds', 'envs')"]
    assert both["env_spec"] == "('seeds', 'envs')", both
    assert both["difference"] < 1e-4, both

    # Under shard_map only the device that holds the ended episode sees it; a
    # plain vmap reduces over every run.
    assert results["any per device"] == [True] + [False] * 3
    assert results["any vmapped"] == [True] * 4
    assert results["collectives"] == 0

    uneven, seeds, trainer_mesh, seeds_in_train = results["refusals"]
    assert "num_envs=6 does not split evenly" in uneven
    assert "6 runs (seeds) do not split evenly over the mesh's 4 'seeds'" in seeds
    assert "num_envs=8 does not split evenly over the mesh's 3" in trainer_mesh
    assert "eqxrl.train_seeds" in seeds_in_train


# The Trainer over a "seeds" mesh: sharded checkpoints, exact resume, load on one
# device. Its seed 1 gives the keys below, and its chunked program computes what
# train_seeds computes, bit for bit (under XLA's default code generation: hence a
# test of its own, in the second pass). (The Trainer over an "envs" axis is checked
# across processes in test_distributed.py.)
TRAINER_SCRIPT = PRELUDE + textwrap.dedent(
    """
    env = eqxrl.envs.make("CartPole-v1")
    ppo = eqxrl.PPO(
        env=env, num_envs=4, num_steps=8, total_timesteps=4 * 8 * 3,
        hidden_sizes=(16,), normalize_observations=True, normalize_rewards=True,
    )
    seeds_mesh = mesh((2,), ("seeds",))
    whole, _ = eqxrl.train_seeds(
        ppo, jax.random.split(jax.random.key(1), 2), mesh=seeds_mesh
    )
    folder = os.path.join(sys.argv[1], "seeds")
    # No evaluation: one program fewer to compile, and not what is checked here.
    trainer = eqxrl.Trainer(
        ppo, out=folder, mesh=seeds_mesh, num_seeds=2, checkpoint_every=1,
        verbose=False, progress=False, eval_episodes=0, gif_episodes=0,
    )
    if importlib.util.find_spec("orbax") is None:  # the `test` extra has no orbax
        try:
            trainer.fit(1, stop_at_iteration=2)
        except ImportError as error:
            results["trainer"] = {"refused": str(error)}
    else:
        trainer.fit(1, stop_at_iteration=2)
        resumed, _ = trainer.fit(1, resume=True)
        loaded, _ = eqxrl.load_checkpoint(folder)
        results["trainer"] = {
            "checkpoints": sorted(os.listdir(os.path.join(folder, "checkpoints"))),
            "resumed": difference(whole, resumed),
            "loaded": difference(resumed, loaded),
            "loaded_devices": len(jax.tree.leaves(loaded.env_state)[0].devices()),
        }
    print(json.dumps(results))
    """
)


@pytest.mark.subprocess
@pytest.mark.xla_defaults
def test_the_trainer_over_seeds_resumes_exactly_and_loads_on_one_device(tmp_path):
    trainer = run_script(TRAINER_SCRIPT, tmp_path, devices=2)["trainer"]
    if importlib.util.find_spec("orbax") is None:
        # Without orbax-checkpoint, sharded checkpoints fail naming the extra.
        assert "pip install 'eqxrl[scale]'" in trainer["refused"], trainer
    else:
        assert trainer["checkpoints"] == [
            f"checkpoint-00000000{i}.orbax" for i in (1, 2, 3)
        ], trainer
        assert trainer["resumed"] == 0.0, trainer  # resuming is exact
        assert trainer["loaded"] == 0.0 and trainer["loaded_devices"] == 1, trainer


# SAC's running observation statistics, and independent learners (their states
# stacked on an agent axis, the worlds outside them), over an "envs" axis.
SAC_AND_INDEPENDENT = textwrap.dedent(
    """
    def agent(tree, index):
        return jax.tree.map(lambda x: x[index] if eqx.is_array(x) else x, tree)

    sac = eqxrl.SAC(
        env=eqxrl.envs.make("Pendulum-v1"), num_envs=4, train_frequency=2,
        gradient_steps=2, batch_size=16, buffer_size=256, learning_starts=32,
        total_timesteps=80, hidden_sizes=(16,), target_entropy=-1.0,
        normalize_observations=True,
    )
    reference, _ = sac.train(jax.random.key(0))
    state, _ = sac.train(jax.random.key(0), mesh=mesh((4,), ("envs",)))
    statistics = state.observation_statistics
    # Every observation the run has seen is in its replay buffer (never full),
    # `[rows, num_envs, 3]`; the first device holds the first environment.
    buffer = state.buffer
    seen = np.asarray(buffer.transitions.observation[: int(buffer.size)], np.float64)
    results["SAC"] = {
        "difference": difference(reference, state),
        "statistics_difference": difference(
            reference.observation_statistics, statistics
        ),
        "mean": np.asarray(statistics.mean).tolist(),
        "var": np.asarray(statistics.var).tolist(),
        "count": float(statistics.count),
        "seen_mean": seen.mean(axis=(0, 1)).tolist(),
        "seen_var": seen.var(axis=(0, 1)).tolist(),
        "seen_count": seen.shape[0] * seen.shape[1],
        "first_device_mean": seen[:, :1].mean(axis=(0, 1)).tolist(),
        "num_updates": int(state.num_updates),
        "env_spec": spec(state.env_state),
        "buffer_spec": spec(buffer.transitions),
        "statistics_spec": spec(statistics),
        "weight_spec": spec(eqx.filter(state.actor, eqx.is_array)),
    }

    world = eqxrl.envs.make(
        "TreasureHunt-v0", height=7, width=7, vision_radius=1, num_frames=2,
        spawn_probability=0.05,
    )
    ppo = eqxrl.PPO(
        env=world, num_envs=4, num_steps=8, total_timesteps=4 * 8 * 3, num_epochs=2,
        num_minibatches=2, hidden_sizes=(16,), normalize_observations=True,
    )
    # (Independent DQN's state is laid out the same way: learners on the agent
    # axis, worlds inside them, the environments' state outside.)
    # MAPPO is Independent PPO's layout and training iteration
    # (`AbstractPerAgentLearners`), its critic reading the global state: one run
    # checks both (each costs seconds to compile).
    for name, independent in (
        ("MAPPO", eqxrl.multiagent.MAPPO(ppo, critic_input="agent_specific")),
    ):
        parameters = lambda learners: learners.model
        initial = eqx.filter_jit(independent.init)(jax.random.key(0))
        reference, _ = independent.train(jax.random.key(0))
        state, _ = independent.train(jax.random.key(0), mesh=mesh((2,), ("envs",)))
        learners = state.learners
        results[f"Independent {name}"] = {
            "difference": difference(reference, state),
            "agents": [
                difference(
                    agent(parameters(reference.learners), index),
                    agent(parameters(learners), index),
                )
                for index in range(independent.num_agents)
            ],
            "trained": difference(parameters(initial.learners), parameters(learners)),
            "statistics_difference": difference(
                reference.learners.observation_statistics,
                learners.observation_statistics,
            ),
            "env_spec": spec(state.env_state),
            "timestep_spec": spec(learners.timestep),
            "weight_spec": spec(eqx.filter(parameters(learners), eqx.is_array)),
        }

    # QMIX: one replay buffer of joint transitions, `[capacity, num_envs, ...]`
    # rows split over the devices with the worlds (minibatches gather from every
    # device); agents, mixer and their targets on every device.
    dqn = eqxrl.DQN(
        env=world, num_envs=4, train_frequency=4, total_timesteps=4 * 4 * 4,
        buffer_size=64, learning_starts=16, batch_size=16, hidden_sizes=(16,),
        target_update_interval=2,
    )
    qmix = eqxrl.multiagent.QMIX(dqn, embedding_size=8, hypernet_hidden_size=16)
    initial = eqx.filter_jit(qmix.init)(jax.random.key(0))
    reference, _ = qmix.train(jax.random.key(0))
    state, _ = qmix.train(jax.random.key(0), mesh=mesh((2,), ("envs",)))
    # Where the state is placed and constrained (the returned state's shardings are
    # XLA's choice: it may replicate a small leaf).
    placement = qmix.state_shardings(initial, mesh((2,), ("envs",)))
    results["QMIX"] = {
        "placed_buffer_specs": sorted(
            {str(tuple(s.spec)) for s in jax.tree.leaves(placement.buffer.transitions)}
        ),
        "placed_weight_specs": sorted(
            {str(tuple(s.spec)) for s in jax.tree.leaves(
                (placement.agents, placement.mixer, placement.target_mixer)
            )}
        ),
        "difference": difference(reference, state),
        "trained": difference(
            (initial.agents, initial.mixer), (state.agents, state.mixer)
        ),
        "num_updates": int(state.num_updates),
        "env_spec": spec(state.env_state),
        "timestep_spec": spec(state.timestep),
        "buffer_spec": spec(state.buffer.transitions),
        "weight_spec": spec(eqx.filter((state.agents, state.mixer), eqx.is_array)),
    }
    """
)


@pytest.mark.subprocess
def test_normalized_sac_and_independent_learners_over_devices(first_pass_results):
    """SAC with `normalize_observations` over 4 devices and per-agent learners
    (MAPPO: independent PPO's layout and iteration) and QMIX over 2 give the
    one-device runs; SAC's statistics are those of every environment's
    observations, not of one device's."""
    results = first_pass_results

    sac = results["SAC"]
    assert sac["env_spec"] == "('envs',)", sac
    assert sac["buffer_spec"] == "(None, 'envs')", sac
    assert sac["statistics_spec"] == "()", sac  # one copy, on every device
    assert sac["weight_spec"] == "()", sac
    assert sac["num_updates"] > 0, sac
    # The same run, up to the order of float sums across devices.
    assert sac["difference"] < 1e-4, sac
    assert sac["statistics_difference"] < 1e-5, sac
    # The statistics of all 4 environments' observations (the prior of the empty
    # statistics, count 1e-4, shifts them by about 1e-6), which one device's
    # environment alone does not give.
    assert sac["count"] == pytest.approx(sac["seen_count"] + 1e-4), sac
    np.testing.assert_allclose(sac["mean"], sac["seen_mean"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(sac["var"], sac["seen_var"], rtol=1e-4, atol=1e-5)
    assert np.max(np.abs(np.subtract(sac["first_device_mean"], sac["mean"]))) > 1e-2

    for name in ("MAPPO",):
        run = results[f"Independent {name}"]
        assert run["env_spec"] == "('envs',)", (name, run)
        # The learners' views of the worlds: `[num_agents, num_envs, ...]`.
        assert run["timestep_spec"] == "(None, 'envs')", (name, run)
        assert run["weight_spec"] == "()", (name, run)
        assert run["difference"] < 1e-4, (name, run)
        # Each agent's parameters, which moved by about 1e-3 in these few
        # updates, agree far closer than that (1e-8 measured).
        assert run["trained"] > 1e-4, (name, run)
        assert len(run["agents"]) == 2 and max(run["agents"]) < 1e-6, (name, run)
    for name in ("MAPPO",):
        statistics = results[f"Independent {name}"]["statistics_difference"]
        assert statistics < 1e-5, (name, statistics)

    qmix = results["QMIX"]
    assert qmix["env_spec"] == "('envs',)", qmix
    assert qmix["timestep_spec"] == "('envs',)", qmix
    assert qmix["buffer_spec"] == "(None, 'envs')", qmix
    assert qmix["placed_buffer_specs"] == ["(None, 'envs')"], qmix
    assert qmix["placed_weight_specs"] == ["()"], qmix
    assert qmix["weight_spec"] == "()", qmix
    assert qmix["num_updates"] > 0 and qmix["trained"] > 1e-4, qmix
    assert qmix["difference"] < 1e-4, qmix


def test_a_mesh_without_an_envs_axis_is_refused():
    env = eqxrl.envs.make("CartPole-v1")
    ppo = eqxrl.PPO(env=env, num_envs=6, num_steps=8, total_timesteps=48)
    device = jax.devices()[:1]
    other_mesh = jax.make_mesh((1,), ("model",), devices=device)
    with pytest.raises(ValueError, match="axis named 'envs'"):
        ppo.train(jax.random.key(0), mesh=other_mesh)
    with pytest.raises(ValueError, match="axis named 'seeds'"):
        eqxrl.train_seeds(ppo, jax.random.split(jax.random.key(0), 2), mesh=other_mesh)


def test_train_seeds_needs_one_key_per_run():
    env = eqxrl.envs.make("CartPole-v1")
    ppo = eqxrl.PPO(env=env, num_envs=4, num_steps=8, total_timesteps=4 * 8 * 2)
    with pytest.raises(ValueError, match=r"one key per run, shape \[num_runs\]"):
        eqxrl.train_seeds(ppo, jax.random.key(0))


# A recurrent network over an "envs" axis: each device holds whole sequences (its
# environments' carries and rollout columns); minibatches of sequences gather
# environments from every device.
RECURRENT = textwrap.dedent(
    """
    import functools
    from eqxrl.nn import GRUActorCritic

    gru = functools.partial(
        GRUActorCritic.from_env, hidden_size=8, encoder_sizes=(16,), head_sizes=(16,)
    )
    # Episodes end inside every rollout (terminated, and truncated at 12 steps).
    env = eqxrl.envs.TimeLimit(eqxrl.envs.make("StatelessCartPole-v1"), 12)
    ppo = eqxrl.PPO(
        env=env, network_factory=gru, num_envs=8, num_steps=16,
        total_timesteps=8 * 16 * 3, num_minibatches=2,
        normalize_observations=True, normalize_rewards=True,
    )
    reference, reference_metrics = ppo.train(jax.random.key(0))
    state, metrics = ppo.train(jax.random.key(0), mesh=mesh((4,), ("envs",)))
    results["recurrent"] = {
        "difference": difference(reference, state),
        "metrics_difference": max(
            float(np.nanmax(np.abs(np.asarray(metrics[k]) - reference_metrics[k]),
                            initial=0.0))
            for k in metrics
        ),
        "episodes": int(np.sum(metrics["episode_count"])),
        "carry_shape": list(state.carry.hidden.shape),
        "carry_spec": spec(state.carry),
        "carry_devices": len(state.carry.hidden.addressable_shards),
        "carry_norm": float(np.abs(np.asarray(state.carry.hidden)).max()),
        "env_spec": spec(state.env_state),
        "weight_spec": spec(eqx.filter(state.model, eqx.is_array)),
    }
    """
)


@pytest.mark.subprocess
def test_recurrent_ppo_over_devices_matches_the_one_device_run(first_pass_results):
    run = first_pass_results["recurrent"]
    # The carries are split with the environments; each device holds 2 whole
    # sequences; the network is on every device.
    assert run["carry_shape"] == [8, 8], run
    assert run["carry_spec"] == "('envs',)", run
    assert run["carry_devices"] == 4, run
    assert run["env_spec"] == "('envs',)", run
    assert run["weight_spec"] == "()", run
    assert run["episodes"] > 8 and run["carry_norm"] > 1e-3, run
    # The same run, up to the order of float sums across devices.
    assert run["difference"] < 1e-4, run
    assert run["metrics_difference"] < 1e-4, run
