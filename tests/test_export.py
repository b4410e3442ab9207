"""`export_policy`: trained policies written as StableHLO and ONNX reproduce eqxrl's
actions (normalizer, mask, squashing, action wrappers and carry included), the ONNX
file runs under onnxruntime with JAX never imported, and bad requests fail clearly."""

import json
import subprocess
import sys
import textwrap

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl
from eqxrl.training import main

ONNX_REASON = "the `export` extra (jax2onnx, onnxruntime) is not installed"


def needs_onnx(format):
    if format == "onnx":
        pytest.importorskip("jax2onnx", reason=ONNX_REASON)
        pytest.importorskip("onnxruntime", reason=ONNX_REASON)


def with_statistics(statistics, key):
    """Observation statistics far from the identity, so that a normalizer left out
    of an export would change its actions."""
    mean_key, var_key = jr.split(key)
    shape = statistics.mean.shape
    return eqx.tree_at(
        lambda s: (s.mean, s.var),
        statistics,
        (
            jr.normal(mean_key, shape),
            jr.uniform(var_key, shape, minval=0.2, maxval=5.0),
        ),
    )


def ppo_policy(env, **options):
    ppo = eqxrl.PPO(env=env, num_envs=2, num_steps=8, total_timesteps=16, **options)
    state = ppo.init(jr.key(1))
    if state.observation_statistics is not None:
        state = eqx.tree_at(
            lambda s: s.observation_statistics,
            state,
            with_statistics(state.observation_statistics, jr.key(2)),
        )
    return ppo.policy(state, deterministic=True), env


def masked_discrete():
    return ppo_policy(eqxrl.envs.make("GridMaze-v0"))


def gaussian():
    env = eqxrl.envs.ClipAction(eqxrl.envs.make("Pendulum-v1"))
    return ppo_policy(env, normalize_observations=True)


def squashed():
    env = eqxrl.envs.RescaleAction(eqxrl.envs.make("Pendulum-v1"))
    return ppo_policy(env, squash_actions=True, normalize_observations=True)


def sac():
    env = eqxrl.envs.make("Pendulum-v1")
    algorithm = eqxrl.SAC(
        env=env,
        num_envs=2,
        total_timesteps=64,
        learning_starts=8,
        batch_size=8,
        normalize_observations=True,
    )
    state = algorithm.init(jr.key(1))
    state = eqx.tree_at(
        lambda s: s.observation_statistics,
        state,
        with_statistics(state.observation_statistics, jr.key(2)),
    )
    return algorithm.policy(state, deterministic=True), env


def gru():
    env = eqxrl.envs.make("StatelessCartPole-v1")
    factory = eqx.Partial(eqxrl.nn.GRUActorCritic.from_env, hidden_size=32)
    return ppo_policy(env, network_factory=factory, num_minibatches=1)


CASES = {
    "masked_discrete": masked_discrete,
    "gaussian": gaussian,
    "squashed": squashed,
    "sac": sac,
    "gru": gru,
}


@pytest.mark.slow
@pytest.mark.parametrize("format", ["stablehlo", "onnx"])
@pytest.mark.parametrize("case", list(CASES))
def test_export_reproduces_actions(case, format, tmp_path):
    needs_onnx(format)
    policy, env = CASES[case]()
    path = tmp_path / f"policy.{format}"
    metadata = eqxrl.export_policy(policy, path, format, env=env)
    assert path.is_file() and (tmp_path / f"policy.{format}.json").is_file()
    assert json.loads((tmp_path / f"policy.{format}.json").read_text()) == metadata
    difference = eqxrl.check_export(path, policy, env, jr.key(3), 10_000)
    assert difference <= 1e-5, difference
    names = [entry["name"] for entry in metadata["inputs"]]
    assert names[0] == "observation" and not metadata["sampled"]
    assert ("action_mask" in names) == (case == "masked_discrete")
    if case == "gru":
        assert names[1:] == ["carry.hidden"]
        assert metadata["outputs"] == ["action", "next_carry.hidden"]
        assert np.shape(metadata["initial_carry"]["carry.hidden"]) == (32,)
    if case == "squashed":
        assert metadata["action_transforms"] == ["RescaleAction"]


def test_export_folds_in_what_the_environment_does(tmp_path):
    """The exported action is the one the inner environment receives: a squashed
    policy's (-1, 1) action rescaled onto Pendulum's [-2, 2]; and the normalizer is
    inside (the same network on raw observations acts differently)."""
    policy, env = squashed()
    # At its initial gain (0.01) the actor's means are near 0: scale them up so
    # that the rescaled actions reach past (-1, 1).
    policy = eqx.tree_at(
        lambda p: p.model.model.actor[-1].weight,
        policy,
        policy.model.model.actor[-1].weight * 300,
    )
    path = tmp_path / "policy.stablehlo"
    eqxrl.export_policy(policy, path, env=env)
    exported = eqxrl.ExportedPolicy(path)
    observations = jax.vmap(env.observation_space.sample)(jr.split(jr.key(0), 512))
    actions = exported(observation=observations)["action"]
    assert actions.shape == (512, 1)
    assert np.abs(actions).max() > 1.0 and np.abs(actions).max() <= 2.0
    unscaled = jax.vmap(lambda o: policy(o, jr.key(0)))(observations)
    np.testing.assert_allclose(actions, 2.0 * np.asarray(unscaled), atol=1e-5)
    unnormalized = jax.vmap(
        lambda o: policy.model.model(o)[0].mode()  # the network without statistics
    )(observations)
    assert np.abs(2.0 * np.asarray(unnormalized) - actions).max() > 1e-2


def test_sampled_policy_exports_exactly_to_stablehlo(tmp_path):
    """A sampling policy takes the key as input; row i samples with split(key)[i],
    bit for bit."""
    env = eqxrl.envs.make("CartPole-v1")
    ppo = eqxrl.PPO(env=env, num_envs=2, num_steps=8, total_timesteps=16)
    policy = ppo.policy(ppo.init(jr.key(0)))
    path = tmp_path / "sampled.stablehlo"
    metadata = eqxrl.export_policy(policy, path, env=env)
    assert metadata["sampled"] and metadata["inputs"][-1]["name"] == "key"
    assert eqxrl.check_export(path, policy, env, jr.key(1), 4096) == 0.0
    exported = eqxrl.ExportedPolicy(path)
    observations = jnp.zeros((4096, 4))
    first = exported(observation=observations, key=np.array([0, 1], np.uint32))
    second = exported(observation=observations, key=np.array([0, 2], np.uint32))
    assert 0.3 < first["action"].mean() < 0.7  # it samples: both actions occur
    assert (first["action"] != second["action"]).any()


@pytest.mark.subprocess
def test_onnx_runs_without_jax(tmp_path):
    """The robot's side: onnxruntime and NumPy in a fresh interpreter, JAX never
    imported, reproduces eqxrl's actions and carries step after step."""
    needs_onnx("onnx")
    policy, env = gru()
    path = tmp_path / "policy.onnx"
    eqxrl.export_policy(policy, path, "onnx", env=env)
    observations = np.asarray(
        jax.vmap(env.observation_space.sample)(jr.split(jr.key(0), 3 * 64))
    ).reshape(3, 64, -1)
    np.save(tmp_path / "observations.npy", observations)
    script = textwrap.dedent(
        f"""
        import json, sys
        import numpy as np
        import onnxruntime
        description = json.load(open({str(path) + ".json"!r}))
        session = onnxruntime.InferenceSession({str(path)!r})
        carry = {{
            name: np.broadcast_to(np.asarray(value, np.float32), (64, len(value)))
            for name, value in description["initial_carry"].items()
        }}
        actions = []
        for observation in np.load({str(tmp_path / "observations.npy")!r}):
            action, hidden = session.run(
                None, {{"observation": observation.astype(np.float32), **carry}}
            )
            carry = {{"carry.hidden": hidden}}
            actions.append(action)
        np.save({str(tmp_path / "actions.npy")!r}, np.stack(actions))
        assert "jax" not in sys.modules and "eqxrl" not in sys.modules
        print("no jax")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "no jax" in done.stdout
    carry = jax.tree.map(
        lambda x: jnp.broadcast_to(x, (64, *x.shape)), policy.initial_carry()
    )
    expected = []
    for observation in observations:
        carry, action = jax.vmap(lambda c, o: policy.step(c, o, jr.key(0)))(
            carry, jnp.asarray(observation)
        )
        expected.append(np.asarray(action))
    np.testing.assert_array_equal(np.load(tmp_path / "actions.npy"), expected)


def test_export_refusals(tmp_path, monkeypatch):
    env = eqxrl.envs.make("CartPole-v1")
    ppo = eqxrl.PPO(env=env, num_envs=2, num_steps=8, total_timesteps=16)
    state = ppo.init(jr.key(0))
    greedy = ppo.policy(state, deterministic=True)
    with pytest.raises(eqxrl.ExportError, match="'onnx' or 'stablehlo', not 'tflite'"):
        eqxrl.export_policy(greedy, tmp_path / "p", "tflite", env=env)
    with pytest.raises(eqxrl.ExportError, match="needs an eqxrl policy"):
        eqxrl.export_policy(state.model, tmp_path / "p", env=env)
    team = eqxrl.envs.make("TreasureHunt-v0")
    with pytest.raises(eqxrl.ExportError, match="one agent's policy"):
        eqxrl.export_policy(greedy, tmp_path / "p", env=team)
    with pytest.raises(eqxrl.ExportError, match="no p.json beside it"):
        (tmp_path / "p").write_bytes(b"")
        eqxrl.ExportedPolicy(tmp_path / "p")
    stablehlo = tmp_path / "policy.stablehlo"
    eqxrl.export_policy(greedy, stablehlo, env=env)
    with pytest.raises(eqxrl.ExportError, match=r"missing \['observation'\]"):
        eqxrl.ExportedPolicy(stablehlo)(obs=np.zeros((1, 4)))

    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "jax2onnx" else real_find_spec(name, *a),
    )
    with pytest.raises(eqxrl.ExportError, match=r"pip install 'eqxrl\[export\]'"):
        eqxrl.export_policy(greedy, tmp_path / "p.onnx", "onnx", env=env)
    monkeypatch.undo()
    needs_onnx("onnx")
    sampling = ppo.policy(state)
    with pytest.raises(eqxrl.ExportError, match="use format='stablehlo'"):
        eqxrl.export_policy(sampling, tmp_path / "p.onnx", "onnx", env=env)


@pytest.mark.slow
def test_cli_exports_a_run(capsys, tmp_path):
    """`eqxrl export RUN_DIR` writes policy.stablehlo (and with --format onnx,
    policy.onnx) beside the run and reports the checked difference."""
    out = tmp_path / "run"
    argv = [
        "train",
        "Pendulum-v1",
        "--algo",
        "sac",
        "--total-timesteps=64",
        "--num-envs=2",
        "--learning-starts=8",
        "--batch-size=8",
        "--chunk-size=4",
        "--eval-episodes=1",
        "--gif-episodes=0",
        "--log=csv",
        "--out",
        str(out),
    ]
    with jax.numpy_dtype_promotion("standard"):
        assert main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    code = main(
        ["export", str(out), "--format", "stablehlo", "--check", "500", "--json"]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(captured.out)
    assert report["file"] == str(out / "policy.stablehlo")
    assert report["max_abs_difference"] <= 1e-5
    assert (out / "policy.stablehlo.json").is_file()
    policy = eqxrl.load_policy(out)
    observation = jnp.array([[0.5, -0.5, 1.0]], jnp.float32)
    action = eqxrl.ExportedPolicy(out / "policy.stablehlo")(observation=observation)
    np.testing.assert_allclose(
        action["action"][0], policy(observation[0], jr.key(0)), atol=1e-6
    )
    code = main(["export", str(out), "--seed-index", "3"])
    assert code == 1 and "has 1 seed(s)" in capsys.readouterr().err
    if all(
        __import__("importlib").util.find_spec(m) for m in ("jax2onnx", "onnxruntime")
    ):
        assert main(["export", str(out), "--check", "200"]) == 0
        text = capsys.readouterr().out
        assert f"wrote {out / 'policy.onnx'}" in text and "largest difference" in text
