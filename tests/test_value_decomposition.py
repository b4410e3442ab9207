"""VDN and QMIX: the mixers, the double-Q team target, action masks, the global
state, and short trainings on Treasure Hunt."""

import json
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl
from eqxrl.buffers import ReplayBuffer, ReplayTransition
from eqxrl.envs import (
    GLOBAL_STATE,
    AbstractMultiAgentEnvironment,
    Box,
    Discrete,
    TimeStep,
)
from eqxrl.multiagent import QMIX, VDN, MonotonicMixer, SumMixer
from eqxrl.multiagent._joint_view import _JointObservation

# Adam's bias correction raises a float to an int32 count (see conftest.py).
STANDARD_DTYPE_PROMOTION = True

EPISODE = 6


class MaskedTeam(AbstractMultiAgentEnvironment):
    """Two agents, three actions. At step `t` agent `i` may not take action
    `(t + i) % 3` (its observation is that action, one-hot): +1 for every valid
    action, -100 for a masked one. The episode terminates after 6 steps. With
    `declare_state`, the global state is `[t, 1]`."""

    declare_state: bool = eqx.field(static=True, default=False)
    num_agents: int = eqx.field(static=True, default=2)

    @property
    def observation_space(self):
        return Box(0.0, 1.0, shape=(3,))

    @property
    def action_space(self):
        return Discrete(3)

    @property
    def global_state_space(self):
        return Box(0.0, 10.0, shape=(2,)) if self.declare_state else None

    def _timestep(self, t, reward, terminated):
        forbidden = (t + jnp.arange(self.num_agents, dtype=jnp.int32)) % 3
        mask = jnp.arange(3)[None, :] != forbidden[:, None]
        extras = {}
        if self.declare_state:
            extras[GLOBAL_STATE] = jnp.stack([t.astype(jnp.float32), jnp.float32(1)])
        return TimeStep(
            observation=jax.nn.one_hot(forbidden, 3, dtype=jnp.float32),
            reward=reward,
            terminated=terminated,
            truncated=jnp.bool_(False),
            action_mask=mask,
            extras=extras,
        )

    def reset(self, key):
        t = jnp.int32(0)
        return t, self._timestep(t, jnp.zeros(2, jnp.float32), jnp.bool_(False))

    def step(self, state, action, key):
        mask = self._timestep(state, jnp.zeros(2), jnp.bool_(False)).action_mask
        valid = mask[jnp.arange(2), action]
        reward = jnp.where(valid, 1.0, -100.0).astype(jnp.float32)
        t = state + 1
        return t, self._timestep(t, reward, t >= EPISODE)


def tiny_dqn(env=None, **options):
    settings = dict(
        num_envs=4,
        total_timesteps=4 * 4 * 12,
        train_frequency=4,
        buffer_size=256,
        learning_starts=32,
        batch_size=16,
        hidden_sizes=(16,),
        target_update_interval=4,
    )
    return eqxrl.DQN(env=MaskedTeam() if env is None else env, **settings | options)


def perturbed(module, key, scale=1.0):
    """`module` with normal noise of `scale` added to every float array."""
    leaves, treedef = jax.tree.flatten(eqx.filter(module, eqx.is_inexact_array))
    keys = jr.split(key, len(leaves))
    noisy = [x + scale * jr.normal(k, x.shape) for x, k in zip(leaves, keys)]
    arrays = jax.tree.unflatten(treedef, noisy)
    return eqx.combine(arrays, module)


# ------------------------------------------------------------------- mixers


def test_vdn_team_value_is_the_sum_of_the_chosen_values():
    vdn = VDN(tiny_dqn(), share_parameters=False)
    state = vdn.init(jr.key(0))
    agents = perturbed(state.agents, jr.key(1))
    observation = jr.normal(jr.key(2), (2, 3))
    action = jnp.array([2, 0], jnp.int32)
    q_total, chosen = vdn.team_value(
        agents, state.mixer, observation, None, action, jr.key(3)
    )
    # Each agent's own network, called directly.
    expected = [
        jax.tree.map(lambda x: x[i] if eqx.is_array(x) else x, agents)(observation[i])[
            action[i]
        ]
        for i in range(2)
    ]
    np.testing.assert_allclose(chosen, expected, rtol=1e-6)
    np.testing.assert_allclose(q_total, sum(expected), rtol=1e-6)
    assert isinstance(state.mixer, SumMixer)


@eqx.filter_jit
def random_mixer(key, num_agents, state_size, scale):
    """A mixer with random parameters (far from the tiny initial ones, negative
    weights too)."""
    init_key, noise_key = jr.split(key)
    mixer = MonotonicMixer(
        num_agents, state_size, embedding_size=8, hypernet_hidden_size=16, key=init_key
    )
    return perturbed(mixer, noise_key, scale)


def test_qmix_mixer_is_monotonic_in_every_agent_value():
    def gradients(key):
        mixer_key, q_key, state_key = jr.split(key, 3)
        mixer = random_mixer(mixer_key, 3, 5, 1.0)
        q_values = 3 * jr.normal(q_key, (64, 3))
        states = jr.normal(state_key, (64, 5))
        return jax.vmap(jax.grad(mixer))(q_values, states)

    grads = np.asarray(eqx.filter_jit(jax.vmap(gradients))(jr.split(jr.key(0), 8)))
    assert grads.shape == (8, 64, 3)
    assert np.all(grads >= 0.0)
    assert np.mean(grads > 1e-3) > 0.5


def test_qmix_mixer_reads_the_global_state():
    mixer = random_mixer(jr.key(0), 2, 4, 0.3)
    q_values = jnp.array([0.5, -1.0])
    state = jnp.array([0.1, 0.2, 0.3, 0.4])
    other = state.at[2].set(-2.0)
    assert abs(float(mixer(q_values, state)) - float(mixer(q_values, other))) > 1e-4


def test_qmix_initial_mixer_uses_jaxmarl_sizes():
    qmix = QMIX(tiny_dqn(MaskedTeam(declare_state=True)))
    mixer = qmix.make_mixer(jr.key(0))
    assert mixer.weight_1[0].weight.shape == (128, 2)
    assert mixer.weight_1[1].weight.shape == (32 * 2, 128)
    # Orthogonal with gain 0.001: singular values 0.001, biases zero.
    singular = np.linalg.svd(np.asarray(mixer.weight_1[1].weight), compute_uv=False)
    np.testing.assert_allclose(singular, 0.001, rtol=1e-4)
    assert not np.any(np.asarray(mixer.bias_1.bias))


def test_qmix_global_state_is_declared_or_the_concatenated_observations():
    assert QMIX(tiny_dqn(MaskedTeam(declare_state=True))).state_size == 2
    assert QMIX(tiny_dqn(MaskedTeam())).state_size == 2 * 3
    hunt = eqxrl.envs.make("TreasureHunt-v0")
    assert QMIX(tiny_dqn(hunt)).state_size == 21 * 21 * 3


# ------------------------------------------------------------------ targets


def _reference_loss(algorithm, agents, target_agents, mixer, target_mixer, data):
    """The double-Q team target in NumPy: argmax of the online agents' valid
    values, evaluated by the target agents, mixed by the target mixer; no
    bootstrap after a termination, `gamma` after a truncation; squared loss / 2."""

    def agent_values(network, observation):
        one_hot = np.eye(2, dtype=np.float32)
        return np.stack(
            [
                np.asarray(
                    network(jnp.asarray(np.concatenate([observation[i], one_hot[i]])))
                )
                for i in range(2)
            ]
        )

    losses = []
    for row in data:
        q = agent_values(agents, row["observation"])
        chosen = q[np.arange(2), row["action"]]
        q_total = float(mixer(jnp.asarray(chosen), row["state"]))
        online = agent_values(agents, row["next_observation"])
        online = np.where(row["next_mask"], online, -np.inf)
        greedy = np.argmax(online, axis=1)
        target_q = agent_values(target_agents, row["next_observation"])
        next_values = target_q[np.arange(2), greedy]
        next_total = float(target_mixer(jnp.asarray(next_values), row["next_state"]))
        discount = 0.0 if row["terminated"] else 0.9
        target = row["reward"] + discount * next_total
        losses.append(0.5 * (q_total - target) ** 2)
    return np.mean(losses)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm_class", [VDN, QMIX])
def test_double_q_team_target_matches_numpy(algorithm_class):
    env = MaskedTeam(declare_state=True)
    algorithm = algorithm_class(
        tiny_dqn(env, double_q=True, gamma=0.9, huber_delta=math.inf)
    )
    state = algorithm.init(jr.key(0))
    agents = perturbed(state.agents, jr.key(1))
    target_agents = perturbed(state.agents, jr.key(2))
    mixer = perturbed(state.mixer, jr.key(3), scale=0.3)
    target_mixer = perturbed(state.mixer, jr.key(4), scale=0.3)

    keys = jr.split(jr.key(5), 4)
    observation = jr.normal(keys[0], (2, 2, 3))
    next_observation = jr.normal(keys[1], (2, 2, 3))
    global_state = jr.normal(keys[2], (2, 2))
    next_state = jr.normal(keys[3], (2, 2))
    # Mask out each agent's online argmax at the next observation, so that a
    # target that ignored the mask would differ.
    online_next = jax.vmap(lambda o: algorithm.agent_q_values(agents, o, jr.key(0)))(
        next_observation
    )
    next_mask = jnp.arange(3)[None, None] != jnp.argmax(online_next, axis=-1)[..., None]
    everything = jnp.ones((2, 2, 3), bool)
    action = jnp.array([[0, 2], [1, 1]], jnp.int32)
    reward = jnp.array([1.5, -0.5], jnp.float32)
    # World 0's episode terminated, world 1's was truncated.
    terminated = jnp.array([True, False])
    truncated = jnp.array([False, True])
    reads_state = algorithm_class is QMIX

    def world(observation, next_observation, state, next_state, *rest):
        mask, next_mask, action, reward, terminated, truncated = rest
        return ReplayTransition(
            observation=_JointObservation(observation, mask, state),
            action=action,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            next_observation=_JointObservation(next_observation, next_mask, next_state),
        )

    transition = jax.vmap(world)(
        observation,
        next_observation,
        global_state if reads_state else None,
        next_state if reads_state else None,
        everything,
        next_mask,
        action,
        reward,
        terminated,
        truncated,
    )
    buffer = ReplayBuffer.empty(transition, 1).add(transition)
    batch = buffer.gather(jnp.arange(2, dtype=jnp.int32), n_step=1, gamma=0.9)
    loss, statistics = algorithm.loss(
        (agents, mixer), (target_agents, target_mixer), batch, jr.key(0)
    )

    data = [
        {
            "observation": np.asarray(observation[n]),
            "next_observation": np.asarray(next_observation[n]),
            "state": global_state[n] if reads_state else None,
            "next_state": next_state[n] if reads_state else None,
            "next_mask": np.asarray(next_mask[n]),
            "action": np.asarray(action[n]),
            "reward": float(reward[n]),
            "terminated": bool(terminated[n]),
        }
        for n in range(2)
    ]
    expected = _reference_loss(
        algorithm, agents, target_agents, mixer, target_mixer, data
    )
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
    assert float(statistics["loss"]) == float(loss)


# ---------------------------------------------------------- masks and state


# Each mixer once, with the one parameter layout whose `train` another test here
# compiles (VDN's stacked agents: test_unshared_agents_are_stacked_and_each_trained;
# QMIX's shared one: test_replay_rows_hold_the_global_state_of_their_own_step):
# the mask is applied to each agent's values, whichever the mixer and the layout.
@pytest.mark.parametrize(
    ("algorithm_class", "share_parameters"),
    [(VDN, False), (QMIX, True)],
    ids=["vdn-own", "qmix-shared"],
)
def test_masked_actions_are_never_taken(algorithm_class, share_parameters):
    algorithm = algorithm_class(
        tiny_dqn(MaskedTeam(declare_state=True), exploration_fraction=0.5),
        share_parameters=share_parameters,
    )
    state, metrics = algorithm.train(jr.key(0))
    returns = np.asarray(metrics["episode_return"])  # [iterations, agents]
    ended = ~np.isnan(returns[:, 0])
    assert ended.sum() >= 5
    # +1 per valid action, -100 per masked one: every episode returns its length.
    np.testing.assert_array_equal(returns[ended], EPISODE)
    np.testing.assert_array_equal(metrics["total_episode_return"][ended], 2 * EPISODE)
    # The policy (exploring or greedy) respects the mask too.
    env = MaskedTeam()
    _, timestep = env.reset(jr.key(0))
    for deterministic in (False, True):
        policy = algorithm.policy(state, deterministic=deterministic)
        actions = jax.vmap(
            lambda key: policy(timestep.observation, key, timestep.action_mask)
        )(jr.split(jr.key(1), 200))
        valid = np.asarray(timestep.action_mask)[np.arange(2), np.asarray(actions)]
        assert valid.all()


def test_replay_rows_hold_the_global_state_of_their_own_step():
    """The global state stored with an observation is that observation's step's
    (also at the first step of an episode, after an automatic reset), and the one
    stored with the next observation of an episode's last step is the final
    step's."""
    qmix = QMIX(tiny_dqn(MaskedTeam(declare_state=True)))
    state, _ = qmix.train(jr.key(0))
    size = int(state.buffer.size)  # rows written, oldest first (not yet wrapped)
    assert size < state.buffer.capacity
    stored = jax.tree.map(lambda x: x[:size], state.buffer.transitions)
    step = np.asarray(stored.observation.global_state[..., 0])
    next_step = np.asarray(stored.next_observation.global_state[..., 0])
    # Agent 0's observation is the one-hot of t % 3.
    seen = np.argmax(np.asarray(stored.observation.observation[..., 0, :]), -1)
    np.testing.assert_array_equal(seen, step % 3)
    np.testing.assert_array_equal(next_step, step + 1)
    assert (step == 0).any() and (next_step == EPISODE).any()


def test_unshared_agents_are_stacked_and_each_trained():
    # test_masked_actions_are_never_taken's VDN (the global state declared): its
    # compiled `train`.
    vdn = VDN(tiny_dqn(MaskedTeam(declare_state=True)), share_parameters=False)
    initial = vdn.init(jr.key(0))
    state, _ = vdn.train(jr.key(0))
    weights = state.agents.layers[0].weight
    assert weights.shape[0] == 2
    assert not np.allclose(weights[0], weights[1])
    before = initial.agents.layers[0].weight
    for agent in range(2):
        assert not np.allclose(weights[agent], before[agent])


def test_make_agents_is_a_deprecated_alias_of_make_network():
    vdn = VDN(tiny_dqn(MaskedTeam(declare_state=True)), share_parameters=False)
    network = eqx.filter_eval_shape(vdn.make_network, jr.key(0))
    assert network.layers[0].weight.shape[0] == 2  # one network per agent
    with pytest.warns(DeprecationWarning, match="VDN.make_agents is deprecated"):
        old = eqx.filter_eval_shape(vdn.make_agents, jr.key(0))
    assert jax.tree.structure(old) == jax.tree.structure(network)

    class OldSubclass(VDN):
        # Written before the rename: overrides make_agents, and init still uses it.
        def make_agents(self, key):
            return eqx.tree_at(
                lambda n: n.head.linear.bias,
                super().make_agents(key),
                replace_fn=jnp.ones_like,
            )

    old_subclass = OldSubclass(
        tiny_dqn(MaskedTeam(declare_state=True)), share_parameters=False
    )
    with pytest.warns(DeprecationWarning):
        bias = old_subclass.make_network(jr.key(0)).head.linear.bias
    assert np.all(np.asarray(bias) == 1.0)


@eqx.filter_jit
@eqx.debug.assert_max_traces(max_traces=1)
def train_seeds(algorithm, keys):
    """`algorithm.train` vmapped over seeds in one compiled program, traced once
    for every config that differs only in array leaves (the two tests below
    share it)."""
    return eqx.filter_vmap(algorithm.train)(keys)


def test_train_vmaps_over_seeds():
    qmix = QMIX(tiny_dqn(MaskedTeam(declare_state=True)))
    keys = jr.split(jr.key(0), 2)
    states, metrics = train_seeds(qmix, keys)
    assert metrics["loss"].shape == (2, qmix.num_iterations)
    assert metrics["episode_return"].shape == (2, qmix.num_iterations, 2)
    assert np.isfinite(np.asarray(metrics["loss"])[:, -1]).all()
    assert not np.allclose(states.mixer.bias_1.weight[0], states.mixer.bias_1.weight[1])


def test_sweepable_numbers_reuse_the_compiled_run():
    """`gamma`, the learning rate and the mixer's `init_scale` are array leaves:
    a config that changes only them (or the key) reuses the compiled `train` (here
    vmapped over seeds: test_train_vmaps_over_seeds's program, which
    `train_seeds` allows to be traced once in all)."""
    env = MaskedTeam(declare_state=True)
    first = QMIX(tiny_dqn(env))
    second = QMIX(tiny_dqn(env, gamma=0.5, learning_rate=1e-3), init_scale=0.01)
    _, metrics = train_seeds(first, jr.split(jr.key(0), 2))
    _, other = train_seeds(second, jr.split(jr.key(1), 2))
    assert not np.allclose(metrics["q_value"][:, -1], other["q_value"][:, -1])


def test_refusals_explain_the_fix():
    with pytest.raises(ValueError, match="single agent"):
        VDN(eqxrl.DQN(env=eqxrl.envs.make("CartPole-v1")))
    with pytest.raises(ValueError, match="must be an eqxrl.DQN"):
        QMIX(eqxrl.IQN(env=MaskedTeam()))
    with pytest.raises(ValueError, match="embedding_size"):
        QMIX(tiny_dqn(), embedding_size=0)
    with pytest.raises(ValueError, match="init_scale"):
        QMIX(tiny_dqn(), init_scale=-1.0)


def test_jaxmarl_presets():
    env = eqxrl.envs.make("TreasureHunt-v0")
    vdn = VDN.from_jaxmarl(env)
    assert vdn.algorithm.num_envs == 32 and vdn.algorithm.train_frequency == 16
    assert vdn.algorithm.hidden_sizes == () and not vdn.algorithm.double_q
    assert float(vdn.algorithm.gamma) == pytest.approx(0.9)
    qmix = QMIX.from_jaxmarl(env, total_timesteps=1_000_000)
    assert qmix.algorithm.double_q and qmix.algorithm.total_timesteps == 1_000_000
    assert (qmix.embedding_size, qmix.hypernet_hidden_size) == (32, 128)
    assert float(qmix.init_scale) == pytest.approx(0.001)
    # JaxMARL's one `done` flag ends MPE's episodes at the time limit.
    assert not vdn.algorithm.bootstrap_on_truncation
    assert not qmix.algorithm.bootstrap_on_truncation
    # The presets' old names: the same algorithms, with a warning.
    with pytest.warns(DeprecationWarning, match=r"use eqxrl.multiagent.VDN.from_jax"):
        assert eqx.tree_equal(VDN.jaxmarl(env), vdn)
    with pytest.warns(DeprecationWarning, match=r"use eqxrl.multiagent.QMIX.from_jax"):
        assert eqx.tree_equal(QMIX.jaxmarl(env, total_timesteps=1_000_000), qmix)
    with pytest.warns(DeprecationWarning, match=r"Independent.from_sorrel"):
        sorrel_iqn = eqxrl.multiagent.sorrel_iqn
    assert eqx.tree_equal(
        sorrel_iqn(env), eqxrl.multiagent.Independent.from_sorrel(env)
    )


@pytest.mark.parametrize("bootstrap_on_truncation", [True, False])
def test_the_team_replay_keeps_truncations_as_its_algorithm_says(
    bootstrap_on_truncation,
):
    # A time limit shorter than the team's episodes: every ending is a truncation.
    env = eqxrl.envs.TimeLimit(MaskedTeam(), EPISODE - 2)
    dqn = tiny_dqn(env, bootstrap_on_truncation=bootstrap_on_truncation)
    state, _ = VDN(dqn).train(jr.key(0))
    size = int(state.buffer.size)
    stored = jax.tree.map(lambda x: x[:size], state.buffer.transitions)
    truncated = np.asarray(stored.truncated)
    terminated = np.asarray(stored.terminated)
    if bootstrap_on_truncation:
        assert truncated.any() and not terminated.any()
    else:
        assert terminated.any() and not truncated.any()
        assert terminated.sum() == terminated.size // (EPISODE - 2)


# ----------------------------------------------------------------- learning


@pytest.mark.learning
@pytest.mark.parametrize("algorithm_class", [VDN, QMIX])
def test_team_return_grows_on_treasure_hunt(algorithm_class):
    """40k world steps on Treasure Hunt (16 worlds, episodes of 100 turns): the
    team's return over the last 5 iterations in which episodes ended is above its
    return over the first 3 (mostly exploring) by 10. Measured on a 2-core CPU:
    VDN 13.5 -> 41.5, QMIX 6.3 -> 62.1 (first 5 / last 10)."""
    env = eqxrl.envs.make("TreasureHunt-v0")
    dqn = eqxrl.DQN(
        env=env,
        num_envs=16,
        total_timesteps=40_000,
        train_frequency=4,
        buffer_size=16_000,
        learning_starts=2_000,
        batch_size=64,
        n_step=3,
        target_update_interval=100,
        hidden_sizes=(64,),
        learning_rate=1e-3,
        exploration_fraction=0.5,
    )
    _, metrics = algorithm_class(dqn).train(jr.key(0))
    totals = np.asarray(metrics["total_episode_return"])
    totals = totals[~np.isnan(totals)]
    assert len(totals) >= 20
    assert totals[-5:].mean() > totals[:3].mean() + 10, totals


# ------------------------------------------- the Trainer and the command line

# make("TreasureHunt-v0", **WORLD): a 7x7 world, 3x3 views of 2 frames.
WORLD = dict(height=7, width=7, vision_radius=1, num_frames=2, spawn_probability=0.05)
# 4 iterations of 8 steps in 2 worlds, one update in each; the targets are copied
# at the third, so that at iteration 2 (where a run stops) they differ.
TINY_TEAM = dict(
    num_envs=2,
    total_timesteps=2 * 8 * 4,
    train_frequency=8,
    buffer_size=64,
    learning_starts=16,
    batch_size=8,
    target_update_interval=3,
    hidden_sizes=(16,),
)


def arrays(tree):
    def numbers(x):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jr.key_data(x)
        return np.asarray(x)

    return [numbers(x) for x in jax.tree.leaves(eqx.filter(tree, eqx.is_array))]


def quiet_trainer(algorithm, out) -> eqxrl.Trainer:
    return eqxrl.Trainer(
        algorithm,
        out=str(out),
        chunk_size=2,
        checkpoint_every=2,
        eval_episodes=2,
        gif_episodes=0,
        env_name="TreasureHunt-v0",
        env_kwargs=WORLD,
        verbose=False,
        progress=False,
        loggers=(),
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("algorithm_class", "share_parameters", "recurrent"),
    [(QMIX, True, False), (VDN, False, False), (QMIX, True, True)],
    ids=["qmix", "vdn-own", "qmix-gru"],
)
def test_resumes_exactly_through_the_trainer(
    tmp_path, algorithm_class, share_parameters, recurrent
):
    """VDN and QMIX through the Trainer: a run stopped at iteration 2 and resumed
    from its checkpoint ends bit for bit where an uninterrupted run ends (agents,
    mixer, their targets, optimizer state, replay buffer, worlds, key, and the
    recurrent agents' carries), and the checkpoint rebuilds the configuration
    (the wrapped DQN and the mixer's sizes)."""
    env = eqxrl.envs.make("TreasureHunt-v0", **WORLD)
    # The recurrent QMIX's mixer has sizes of its own (which the checkpoint must
    # rebuild); the feed-forward QMIX is the command line's (its default sizes), so
    # that the two tests share their compiled programs.
    options = {"embedding_size": 8, "hypernet_hidden_size": 16} if recurrent else {}
    gru = dict(network_factory=eqxrl.nn.GRUQNetwork.from_env, n_step=1)
    algorithm = algorithm_class(
        eqxrl.DQN(env=env, **TINY_TEAM, **(gru if recurrent else {})),
        share_parameters=share_parameters,
        **(options if algorithm_class is QMIX else {}),
    )
    assert algorithm.recurrent == recurrent

    straight, _ = quiet_trainer(algorithm, tmp_path / "straight").fit(seed=1)
    quiet_trainer(algorithm, tmp_path / "resumed").fit(seed=1, stop_at_iteration=2)
    resumed, metrics = quiet_trainer(algorithm, tmp_path / "resumed").fit(
        seed=1, resume=True
    )
    assert metrics["episode_return"].shape == (2, 2)  # iterations 3-4, per agent
    # A row per step of the worlds, or per iteration (their sequences).
    assert int(resumed.num_updates) == 4
    assert int(resumed.buffer.size) == (4 if recurrent else 4 * 8)
    assert (resumed.carry is not None) == recurrent
    for a, b in zip(arrays(resumed), arrays(straight), strict=True):
        np.testing.assert_array_equal(a, b)
    loaded, rebuilt = eqxrl.load_checkpoint(tmp_path / "resumed")
    assert eqx.tree_equal(rebuilt, algorithm)
    for a, b in zip(arrays(loaded), arrays(straight), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
@pytest.mark.parametrize(("mixer", "algorithm_class"), [("vdn", VDN), ("qmix", QMIX)])
def test_the_command_line_trains_a_team(tmp_path, capsys, mixer, algorithm_class):
    """`eqxrl train TreasureHunt-v0 --algo dqn --mixer vdn|qmix` (for VDN, from a
    config file) trains VDN or QMIX (config.json names the class; its checkpoint
    rebuilds it, one network per agent unless `--share-parameters`); `eqxrl eval`
    reports every agent; the policy acts for both."""
    from eqxrl.training import main

    flags = [f"--{k.replace('_', '-')}={v}" for k, v in TINY_TEAM.items()]
    flags = [flag.replace("(16,)", "16") for flag in flags]
    flags += [f"--env-option={k}={v}" for k, v in WORLD.items()]
    # quiet_trainer's chunks and evaluations: the programs are then those of
    # test_resumes_exactly_through_the_trainer[vdn-own] and [qmix].
    flags += ["--chunk-size=2", "--checkpoint-every=2", "--eval-episodes=2"]
    if algorithm_class is QMIX:
        share = ["--share-parameters"]
        run = ["--algo", "dqn", "--mixer", mixer, *share]
    else:
        share = []
        config_file = tmp_path / "team.toml"
        config_file.write_text(f'algo = "dqn"\nmixer = "{mixer}"\n')
        run = ["--config", str(config_file)]
    out = tmp_path / "cli"
    argv = ["train", "TreasureHunt-v0", *run, *flags, "--gif-episodes=0"]
    argv += ["--out", str(out), "--log", "csv"]
    assert main(argv) == 0
    config = json.loads((out / "config.json").read_text())["algorithm"]
    assert config["algorithm"] == f"eqxrl.multiagent.{algorithm_class.__name__}"
    state, rebuilt = eqxrl.load_checkpoint(out)
    assert type(rebuilt) is algorithm_class
    assert rebuilt.share_parameters == bool(share)
    assert int(state.num_updates) > 0
    header = (out / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"episode_return_agent0", "episode_return_agent1", "loss"} <= set(header)

    capsys.readouterr()
    assert main(["eval", str(out), "--episodes", "2"]) == 0
    assert "per agent: agent 0" in capsys.readouterr().out
    policy = eqxrl.load_policy(out / "policy.eqx")
    _, timestep = eqxrl.envs.make("TreasureHunt-v0", **WORLD).reset(jr.key(0))
    assert policy.act(timestep.observation, jr.key(1)).shape == (2,)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["TreasureHunt-v0", "--algo", "ppo", "--num-steps=8", "--mixer", "vdn"],
            "--mixer vdn: value decomposition trains DQN's agents as a team; PPO "
            "does not take a mixer. Use --algo dqn",
        ),
        (
            ["CartPole-v1", "--algo", "dqn", "--learning-starts=8", "--mixer", "qmix"],
            "--mixer qmix: CartPole-v1 has a single agent; drop the flag.",
        ),
        (
            ["TreasureHunt-v0", "--algo", "dqn", "--learning-starts=8"]
            + ["--mixer", "qmix", "--critic-input", "global_state"],
            "--mixer qmix and --critic-input",
        ),
    ],
)
def test_the_command_line_refuses_a_mixer_it_cannot_train(
    tmp_path, capsys, argv, message
):
    from eqxrl.training import main

    tiny = ["--num-envs=2", "--total-timesteps=16", "--out", str(tmp_path / "run")]
    assert main(["train", *argv, *tiny]) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
