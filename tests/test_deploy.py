"""`eqxrl_deploy`: an ONNX export run with onnxruntime alone reproduces eqxrl's actions
(feed-forward and recurrent, one observation or a batch) with JAX never imported; the
host-MuJoCo runner sums the rewards of a known policy on a model whose motion is known
in closed form. (The sim-to-sim benchmark's smoke run is in test_benchmarks.py.)"""

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import equinox as eqx
import jax
import jax.random as jr
import numpy as np
import pytest

import eqxrl
import eqxrl_deploy

ROOT = Path(__file__).resolve().parents[1]


def needs_onnx():
    reason = "the `export` extra (jax2onnx, onnxruntime) is not installed"
    pytest.importorskip("jax2onnx", reason=reason)
    pytest.importorskip("onnxruntime", reason=reason)


def ppo_policy(env, **options):
    ppo = eqxrl.PPO(env=env, num_envs=2, num_steps=8, total_timesteps=16, **options)
    state = ppo.init(jr.key(1))
    if state.observation_statistics is not None:
        # Statistics far from the identity: a normalizer left out would show.
        statistics = state.observation_statistics
        shape = statistics.mean.shape
        state = eqx.tree_at(
            lambda s: (s.observation_statistics.mean, s.observation_statistics.var),
            state,
            (jr.normal(jr.key(2), shape), jr.uniform(jr.key(3), shape, minval=0.2)),
        )
    return ppo.policy(state, deterministic=True)


def feed_forward():
    """A squashed Gaussian policy with a normalizer, behind `RescaleAction`."""
    env = eqxrl.envs.RescaleAction(eqxrl.envs.make("Pendulum-v1"))
    return ppo_policy(env, squash_actions=True, normalize_observations=True), env


def gru():
    env = eqxrl.envs.make("StatelessCartPole-v1")
    factory = eqx.Partial(eqxrl.nn.GRUActorCritic.from_env, hidden_size=16)
    return ppo_policy(env, network_factory=factory, num_minibatches=1), env


def eqxrl_actions(policy, env, observations):
    """eqxrl's own actions, step after step (`[num_steps, batch, ...]`), and the
    final carry."""
    carry = jax.tree.map(
        lambda x: jax.numpy.broadcast_to(x, (observations.shape[1], *x.shape)),
        policy.initial_carry(),
    )
    transform = getattr(env, "transform_action", lambda action: action)
    actions = []
    for observation in observations:
        carry, action = jax.vmap(lambda c, o: policy.step(c, o, jr.key(0)))(
            carry, jax.numpy.asarray(observation)
        )
        actions.append(np.asarray(jax.vmap(transform)(action)))
    return np.stack(actions), carry


@pytest.mark.subprocess
def test_import_leaves_jax_out():
    script = "import sys, eqxrl_deploy; print(sorted(m for m in sys.modules "
    script += "if m.split('.')[0] in ('jax', 'jaxlib', 'eqxrl')))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


CASES = {"feed_forward": feed_forward, "gru": gru}


@pytest.fixture(scope="module")
def onnx_runs(tmp_path_factory):
    """Each case's policy exported, and five steps of a batch of 8 (and of its first
    row alone, unbatched) through `OnnxPolicy`, every case in one fresh interpreter
    without JAX (an interpreter costs seconds): per case, the policy, its
    environment, the observations and the folder that holds what `OnnxPolicy`
    did."""
    needs_onnx()
    runs = {}
    for name, case in CASES.items():
        folder = tmp_path_factory.mktemp(name)
        policy, env = case()
        eqxrl.export_policy(policy, folder / "policy.onnx", "onnx", env=env)
        observations = np.asarray(
            jax.vmap(env.observation_space.sample)(jr.split(jr.key(4), 5 * 8))
        ).reshape(5, 8, -1)
        np.save(folder / "observations.npy", observations)
        runs[name] = (policy, env, observations, folder)
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        import numpy as np
        import eqxrl_deploy
        for folder in map(Path, {[str(run[-1]) for run in runs.values()]!r}):
            observations = np.load(folder / "observations.npy")
            batched = eqxrl_deploy.OnnxPolicy(folder / "policy.onnx")
            batched.reset(batch_size=len(observations[0]))
            single = eqxrl_deploy.OnnxPolicy(folder / "policy.onnx")
            single.reset()
            actions, first = [], []
            for observation in observations:
                actions.append(batched(observation))
                first.append(single(observation[0]))
            np.save(folder / "actions.npy", np.stack(actions))
            np.save(folder / "first.npy", np.stack(first))
            np.savez(folder / "carry.npz", **batched.carry)
        assert "jax" not in sys.modules and "eqxrl" not in sys.modules
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return runs


@pytest.mark.subprocess
@pytest.mark.parametrize("name", list(CASES))
def test_onnx_policy_reproduces_eqxrl(name, onnx_runs):
    """Five steps of a batch of 8 (and of its first row alone, unbatched) through
    `OnnxPolicy` in a fresh interpreter without JAX, against eqxrl's actions."""
    policy, env, observations, folder = onnx_runs[name]
    expected, carry = eqxrl_actions(policy, env, observations)
    actions = np.load(folder / "actions.npy")
    first = np.load(folder / "first.npy")
    assert actions.shape == expected.shape
    assert first.shape == expected[:, 0].shape
    np.testing.assert_allclose(actions, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(first, expected[:, 0], rtol=1e-5, atol=1e-5)
    # The carry kept after five steps is eqxrl's (none for a feed-forward policy).
    kept = dict(np.load(folder / "carry.npz"))
    assert len(kept) == len(jax.tree.leaves(carry))
    for carry_name, leaf in zip(sorted(kept), jax.tree.leaves(carry)):
        np.testing.assert_allclose(kept[carry_name], leaf, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_onnx_policy_action_mask(tmp_path):
    """A masked discrete policy: the mask goes in with the observation, batched or
    not, and the masked greedy choice is eqxrl's."""
    needs_onnx()
    env = eqxrl.envs.make("GridMaze-v0")
    policy = ppo_policy(env)
    path = tmp_path / "policy.onnx"
    eqxrl.export_policy(policy, path, "onnx", env=env)
    keys = jr.split(jr.key(5), 16)
    observations = np.asarray(jax.vmap(env.observation_space.sample)(keys))
    _, timestep = env.reset(jr.key(0))
    masks = np.array(jr.bernoulli(jr.key(6), 0.5, (16, *timestep.action_mask.shape)))
    masks[:, 0] = True  # at least one valid action per row
    expected = jax.vmap(lambda o, m: policy.step(None, o, jr.key(0), m)[1])(
        jax.numpy.asarray(observations), jax.numpy.asarray(masks)
    )
    onnx_policy = eqxrl_deploy.OnnxPolicy(path)
    actions = onnx_policy(observations, action_mask=masks)
    np.testing.assert_array_equal(actions, expected)
    assert masks[np.arange(16), actions].all()
    assert onnx_policy(observations[3], action_mask=masks[3]) == expected[3]
    with pytest.raises(eqxrl_deploy.DeployError, match="takes an action mask"):
        onnx_policy(observations)


def test_onnx_policy_errors(tmp_path):
    needs_onnx()
    policy, env = gru()
    path = tmp_path / "policy.onnx"
    eqxrl.export_policy(policy, path, "onnx", env=env)
    onnx_policy = eqxrl_deploy.OnnxPolicy(path)
    assert onnx_policy.is_recurrent and onnx_policy.observation_shape == (2,)

    with pytest.raises(eqxrl_deploy.DeployError, match=r"shape \(3,\).*\(2,\)"):
        onnx_policy(np.zeros(3))
    onnx_policy.reset(batch_size=4)
    with pytest.raises(eqxrl_deploy.DeployError, match=r"reset\(batch_size=2\)"):
        onnx_policy(np.zeros((2, 2)))
    with pytest.raises(eqxrl_deploy.DeployError, match="without an action mask"):
        onnx_policy(np.zeros((4, 2)), action_mask=np.ones((4, 2), bool))

    alone = tmp_path / "alone" / "policy.onnx"
    alone.parent.mkdir()
    shutil.copy(path, alone)
    with pytest.raises(eqxrl_deploy.DeployError, match=r"no policy\.onnx\.json"):
        eqxrl_deploy.OnnxPolicy(alone)

    description = json.loads(Path(f"{path}.json").read_text())
    for changes, message in [
        ({"sampled": True}, "samples its actions"),
        ({"format": "stablehlo"}, "format='onnx'"),
    ]:
        Path(f"{alone}.json").write_text(json.dumps({**description, **changes}))
        with pytest.raises(eqxrl_deploy.DeployError, match=message):
            eqxrl_deploy.OnnxPolicy(alone)


# A cart on a frictionless rail, no gravity along it: with the motor's force `F` and
# mass 1, MuJoCo's semi-implicit Euler step gives v_n = n F h, x_n = x_0 + F h^2
# n (n + 1) / 2 after n physics steps of h.
SLIDER = """
<mujoco>
  <option timestep="0.01" gravity="0 0 0"><flag contact="disable"/></option>
  <worldbody>
    <body name="cart">
      <joint name="rail" type="slide" axis="1 0 0"/>
      <geom type="box" size="0.1 0.1 0.1" mass="1"/>
    </body>
  </worldbody>
  <actuator><motor joint="rail" gear="2"/></actuator>
</mujoco>
"""


class ConstantPolicy:
    def __init__(self, action):
        self.action, self.resets, self.observations = action, 0, []

    def reset(self):
        self.resets += 1

    def __call__(self, observation):
        self.observations.append(observation)
        return np.array([self.action])


def test_run_mujoco_constant_policy():
    mujoco = pytest.importorskip("mujoco")
    model = mujoco.MjModel.from_xml_string(SLIDER)
    policy = ConstantPolicy(0.25)
    actions_seen = []

    def reset(model, data, rng):
        data.qpos[0] = rng.uniform(-1, 1)

    def reward(model, data, action):
        actions_seen.append(action)
        return data.qpos[0]

    episodes, length, substeps, seed = 3, 40, 2, 7
    result = eqxrl_deploy.run_mujoco(
        policy,
        model,
        observe=lambda model, data: np.concatenate([data.qpos, data.qvel]),
        reward=reward,
        reset=reset,
        episode_length=length,
        episodes=episodes,
        n_substeps=substeps,
        seed=seed,
    )
    starts = np.random.default_rng(seed).uniform(-1, 1, episodes)
    force, h = 2 * 0.25, 0.01
    n = substeps * np.arange(1, length + 1)  # physics steps after each control step
    expected = [np.sum(x0 + force * h**2 * n * (n + 1) / 2) for x0 in starts]
    np.testing.assert_allclose(result.returns, expected, rtol=1e-9)
    np.testing.assert_array_equal(result.lengths, [length] * episodes)
    assert not result.terminated.any()
    assert result.mean_return == pytest.approx(np.mean(expected))
    assert policy.resets == episodes
    # The first observation of each episode is its reset state, after mj_forward.
    np.testing.assert_allclose(policy.observations[0], [starts[0], 0.0])
    np.testing.assert_allclose(policy.observations[length], [starts[1], 0.0])
    assert all(np.array_equal(a, [0.25]) for a in actions_seen)


def test_run_mujoco_terminates():
    mujoco = pytest.importorskip("mujoco")
    model = mujoco.MjModel.from_xml_string(SLIDER)

    def reset(model, data, rng):
        data.qpos[0] = 0.0

    result = eqxrl_deploy.run_mujoco(
        ConstantPolicy(1.0),
        model,
        observe=lambda model, data: data.qpos.copy(),
        reward=lambda model, data, action: 1.0,
        reset=reset,
        episode_length=100,
        episodes=2,
        terminate=lambda model, data: data.qpos[0] > 0.01,
    )
    # x_n = 2 * 1e-4 * n (n + 1) / 2 > 0.01 first at n = 10.
    np.testing.assert_array_equal(result.lengths, [10, 10])
    np.testing.assert_array_equal(result.returns, [10.0, 10.0])
    assert result.terminated.all()
    with pytest.raises(ValueError, match="must be positive"):
        eqxrl_deploy.run_mujoco(
            ConstantPolicy(1.0),
            model,
            observe=lambda model, data: data.qpos.copy(),
            reward=lambda model, data, action: 1.0,
            reset=reset,
            episode_length=0,
            episodes=1,
        )
