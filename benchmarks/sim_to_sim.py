"""Sim-to-sim: a policy trained in MJX (MuJoCo Playground's `CartpoleBalance`, through
`eqxrl.envs.from_brax`) replayed in host MuJoCo (the `mujoco` package) through its
ONNX export, with no JAX in the replay.

Checks the NumPy ports below against Playground, trains `eqxrl.PPO` for
`--timesteps` steps, evaluates it in training, exports it and replays `--episodes`
episodes in a fresh interpreter without JAX (`--replay DIR`). The bar: the host
return within 5% of the training evaluation. README: "Sim-to-sim".

    .venv-robot/bin/python benchmarks/sim_to_sim.py --smoke   # a minute: no learning
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TASK = "CartpoleBalance"
EPISODE_LENGTH = 1000
BAR = 0.05

# eqxrl PPO with Stable-Baselines3's defaults for MuJoCo-like tasks (normalized
# observations and rewards, 10 passes of 32 minibatches, no entropy bonus) and a long
# horizon: greedy returns of ~1,000 (the most there is) in 2M steps. Playground's
# published Brax settings (`dm_control_suite_params.brax_ppo_config`: 60M steps over
# 2,048 environments) scaled down to a few million steps through
# `PPO.from_brax_hyperparameters` stayed below a zero-action policy's ~695.
PPO_SETTINGS = dict(
    num_envs=64,
    num_steps=256,
    num_epochs=10,
    num_minibatches=32,
    learning_rate=3e-4,
    gamma=0.995,
    gae_lambda=0.95,
    ent_coef=0.0,
    normalize_observations=True,
    normalize_rewards=True,
)
PACKAGES = ("jax", "eqxrl", "mujoco", "mujoco-mjx", "playground", "onnxruntime")
PACKAGES += ("jax2onnx", "brax")
SMOKE_SETTINGS = dict(num_envs=8, num_steps=16, num_epochs=1, num_minibatches=2)


# NumPy ports of Playground's CartpoleBalance
# (`mujoco_playground/_src/dm_control_suite/cartpole.py`, `Balance` with
# `swing_up=False, sparse=False`) and of the two sigmoids of its `reward.tolerance`
# that the task uses. They read `qpos`, `qvel` and `xmat` of a `mujoco.MjData` (or an
# MJX `Data`: the check below passes Playground's own).


def tolerance(
    x: np.ndarray,
    margin: float,
    sigmoid: str = "gaussian",
    value_at_margin: float = 0.1,
) -> np.ndarray:
    """dm_control's `rewards.tolerance` with `bounds=(0, 0)`: 1 at `x = 0`, falling to
    `value_at_margin` at `|x| = margin`."""
    distance = np.abs(x) / margin
    if sigmoid == "gaussian":
        scale = np.sqrt(-2 * np.log(value_at_margin))
        value = np.exp(-0.5 * (distance * scale) ** 2)
    elif sigmoid == "quadratic":
        scaled = distance * np.sqrt(1 - value_at_margin)
        value = np.where(np.abs(scaled) < 1, 1 - scaled**2, 0.0)
    else:
        raise ValueError(f"tolerance: sigmoid {sigmoid!r} is not ported.")
    return np.where(x == 0, 1.0, value)


def _pole_rotations(data) -> np.ndarray:
    """The poles' world rotation matrices, `[num_poles, 3, 3]` (body 0 is the world,
    1 the cart)."""
    return np.asarray(data.xmat, np.float64).reshape(-1, 3, 3)[2:]


def observe(model, data) -> np.ndarray:
    """Cart position, the poles' angle cosines and sines, every joint velocity."""
    del model
    rotations = _pole_rotations(data)
    qpos = np.asarray(data.qpos, np.float64)
    return np.concatenate(
        [qpos[:1], rotations[:, 2, 2], rotations[:, 0, 2], np.asarray(data.qvel)]
    )


def reward(model, data, action) -> float:
    """Upright x centered x small control x small velocity, each in `[0, 1]`."""
    del model
    qpos = np.asarray(data.qpos, np.float64)
    qvel = np.asarray(data.qvel, np.float64)
    # from_brax clips the action to [-1, 1] before Playground's step sees it.
    action = np.clip(np.asarray(action, np.float64), -1.0, 1.0)
    upright = (_pole_rotations(data)[0, 2, 2] + 1) / 2
    centered = (1 + tolerance(qpos[0], margin=2)) / 2
    small_control = (
        4 + tolerance(action[0], margin=1, sigmoid="quadratic", value_at_margin=0)
    ) / 5
    small_velocity = (1 + tolerance(qvel[1:], margin=5).min()) / 2
    return float(upright * centered * small_control * small_velocity)


def reset(model, data, rng: np.random.Generator) -> None:
    """The cart within +-0.1, the poles within +-0.034 rad, velocities ~ 0.01 N(0, 1)
    (the distribution of Playground's reset; the draws are NumPy's)."""
    data.qpos[0] = rng.uniform(-0.1, 0.1)
    data.qpos[1:] = rng.uniform(-0.034, 0.034, model.nq - 1)
    data.qvel[:] = 0.01 * rng.standard_normal(model.nv)


# The replay: a fresh interpreter, no JAX.


def replay(directory: Path) -> dict:
    """Replay the exported policy in host MuJoCo; the settings are in
    `directory/replay.json`."""
    import mujoco

    import eqxrl_deploy

    settings = json.loads((directory / "replay.json").read_text())
    model = mujoco.MjModel.from_binary_path(str(directory / "model.mjb"))
    policy = eqxrl_deploy.OnnxPolicy(directory / "policy.onnx")
    start = time.perf_counter()
    result = eqxrl_deploy.run_mujoco(
        policy,
        model,
        observe=observe,
        reward=reward,
        reset=reset,
        episode_length=settings["episode_length"],
        episodes=settings["episodes"],
        n_substeps=settings["n_substeps"],
        seed=settings["seed"],
    )
    seconds = time.perf_counter() - start
    assert "jax" not in sys.modules and "eqxrl" not in sys.modules, "JAX imported"
    return {
        "returns": result.returns.tolist(),
        "lengths": result.lengths.tolist(),
        "seconds": seconds,
        "jax_imported": "jax" in sys.modules,
    }


# The JAX side.


def check_port(brax_env, num_steps: int, seed: int) -> dict:
    """The NumPy ports against Playground: observation and reward on Playground's own
    states, and host MuJoCo's trajectory against MJX's under the same actions."""
    import jax
    import mujoco

    model = brax_env.mj_model
    reset_fn, step_fn = jax.jit(brax_env.reset), jax.jit(brax_env.step)
    key, action_key = jax.random.split(jax.random.PRNGKey(seed))
    state = reset_fn(key)
    data = mujoco.MjData(model)
    data.qpos[:] = np.asarray(state.data.qpos)
    data.qvel[:] = np.asarray(state.data.qvel)
    mujoco.mj_forward(model, data)
    actions = np.asarray(
        jax.random.uniform(action_key, (num_steps, brax_env.action_size), minval=-1)
    )
    observation_error = float(np.abs(observe(model, state.data) - state.obs).max())
    reward_error, trajectory_gap = 0.0, 0.0
    for action in actions:
        state = step_fn(state, action)
        observation_error = max(
            observation_error,
            float(np.abs(observe(model, state.data) - np.asarray(state.obs)).max()),
        )
        reward_error = max(
            reward_error, abs(reward(model, state.data, action) - float(state.reward))
        )
        data.ctrl[:] = action
        for _ in range(brax_env.n_substeps):
            mujoco.mj_step(model, data)
        trajectory_gap = max(
            trajectory_gap,
            float(np.abs(observe(model, data) - np.asarray(state.obs)).max()),
        )
    return {
        "steps": num_steps,
        "observation_error": observation_error,
        "reward_error": reward_error,
        "host_trajectory_gap": trajectory_gap,
    }


def run(options: argparse.Namespace) -> dict:
    # Imported here, as JAX (which the harness imports): never in the replay.
    import jax.random as jr
    import mujoco
    from _harness import child_json, compile_timed, cpu_name, timed, versions
    from mujoco_playground import registry

    import eqxrl

    out = Path(options.out or tempfile.mkdtemp(prefix="sim_to_sim_"))
    out.mkdir(parents=True, exist_ok=True)
    brax_env = registry.load(TASK, config_overrides={"impl": options.impl})
    check = check_port(brax_env, options.check_steps, options.seed)
    print(f"port check ({check['steps']} steps): {check}", flush=True)
    if check["observation_error"] > 1e-5 or check["reward_error"] > 1e-5:
        raise SystemExit(f"the NumPy ports disagree with Playground: {check}")

    settings = dict(PPO_SETTINGS, **(SMOKE_SETTINGS if options.smoke else {}))
    env = eqxrl.envs.TimeLimit(eqxrl.envs.from_brax(brax_env), EPISODE_LENGTH)
    ppo = eqxrl.PPO(env=env, total_timesteps=options.timesteps, **settings)
    train, compile_seconds = compile_timed(ppo, jr.key(options.seed))
    train_seconds, (state, _) = timed(train, ppo, jr.key(options.seed), True)
    steps = ppo.num_iterations * ppo.steps_per_iteration
    print(
        f"trained {steps:,} steps in {train_seconds:.1f} s "
        f"(compile apart: {compile_seconds:.1f} s)",
        flush=True,
    )

    policy = ppo.policy(state, deterministic=True)
    evaluation = eqxrl.training.evaluate(
        policy,
        ppo.env,
        jr.key(options.seed + 1),
        num_episodes=options.episodes,
        max_steps=options.episode_length,
    )
    training_returns = np.asarray(evaluation.returns, np.float64)

    eqxrl.export_policy(policy, out / "policy.onnx", "onnx", env=ppo.env)
    mujoco.mj_saveModel(brax_env.mj_model, str(out / "model.mjb"), None)
    (out / "replay.json").write_text(
        json.dumps(
            {
                "episode_length": options.episode_length,
                "episodes": options.episodes,
                "n_substeps": brax_env.n_substeps,
                "seed": options.seed,
            }
        )
    )
    host = child_json([__file__, "--replay", str(out)], timeout=600)
    host_returns = np.asarray(host["returns"])

    training_mean = float(training_returns.mean())
    host_mean = float(host_returns.mean())
    ratio = host_mean / training_mean if training_mean else float("nan")
    result = {
        "task": TASK,
        "impl": options.impl,
        "smoke": options.smoke,
        "timesteps": int(steps),
        "steps_per_second": steps / train_seconds,
        "train_seconds": train_seconds,
        "compile_seconds": compile_seconds,
        "ppo": settings,
        "episodes": options.episodes,
        "episode_length": options.episode_length,
        "sim_dt": brax_env.sim_dt,
        "ctrl_dt": brax_env.dt,
        "n_substeps": brax_env.n_substeps,
        "port_check": check,
        "training_evaluation": {
            "mean": training_mean,
            "std": float(training_returns.std()),
            "returns": training_returns.tolist(),
        },
        "host_mujoco": {
            "mean": host_mean,
            "std": float(host_returns.std()),
            "returns": host["returns"],
            "seconds": host["seconds"],
            "jax_imported": host["jax_imported"],
        },
        "ratio": ratio,
        "within_bar": bool(abs(ratio - 1) <= BAR),
        "cpu": cpu_name(),
        "versions": versions(*PACKAGES),
        "out": str(out),
    }
    (out / "sim_to_sim.json").write_text(json.dumps(result, indent=1))
    print(
        f"in-training evaluation: {training_mean:.1f} +- {training_returns.std():.1f}"
        f" ({options.episodes} episodes)\n"
        f"host MuJoCo via ONNX:   {host_mean:.1f} +- {host_returns.std():.1f}"
        f" ({options.episodes} episodes, {host['seconds']:.1f} s)\n"
        f"ratio {ratio:.4f} (bar: within {BAR:.0%}: "
        f"{'met' if result['within_bar'] else 'NOT met'})\n"
        f"written to {out / 'sim_to_sim.json'}",
        flush=True,
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timesteps", type=int, default=2_000_000)
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--episode-length", type=int, default=EPISODE_LENGTH)
    parser.add_argument("--check-steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--impl", default="jax", choices=["jax", "warp"])
    parser.add_argument("--out", help="directory for the files (default: a new one)")
    parser.add_argument(
        "--smoke", action="store_true", help="a tiny run: 1 short episode"
    )
    parser.add_argument("--replay", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.replay:
        print(json.dumps(replay(Path(options.replay))))
        return
    if options.smoke:
        options.timesteps = min(options.timesteps, 512)
        options.episodes, options.episode_length = 1, 50
        options.check_steps = min(options.check_steps, 20)
    import jax  # here: the replay (above) must not import it

    # Playground's environments broadcast arrays of different ranks (the test
    # suite runs benchmarks with rank promotion raising).
    with jax.numpy_rank_promotion("allow"):
        run(options)


if __name__ == "__main__":
    main()
