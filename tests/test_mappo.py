"""MAPPO: a centralized critic (global state, concatenated observations, or
agent-specific state), shared or per-agent parameters, recurrent networks, the
world-major layout as a trace-time error, and decentralized policies."""

import functools
import json

import equinox as eqx
import jax
import jax.monitoring
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl
from eqxrl.envs import GLOBAL_STATE, TimeLimit, TreasureHunt
from eqxrl.multiagent import MAPPO, DecentralizedPolicy
from eqxrl.nn import ActorCriticCarry, GRUActorCritic

# optax.adam computes `b1 ** count` with an int32 count.
STANDARD_DTYPE_PROMOTION = True

# A small world whose episodes are truncated every 4 steps: inside each 8-step
# rollout and at the start of the second.
WORLD = TimeLimit(
    TreasureHunt(
        height=7, width=7, vision_radius=1, num_frames=2, spawn_probability=0.05
    ),
    4,
)
SMALL = dict(num_envs=2, num_steps=8, total_timesteps=2 * 8 * 2, num_minibatches=2)


def mappo(share_parameters=True, critic_input="global_state", env=WORLD, **options):
    ppo = eqxrl.PPO(env=env, **{**SMALL, **options})
    return MAPPO(ppo, share_parameters=share_parameters, critic_input=critic_input)


def parameters(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(eqx.filter(tree, eqx.is_array))]


def world_timesteps(algorithm, key=jr.key(1)):
    """A world-major batch of `num_envs` reset timesteps of the environment."""
    keys = jr.split(key, algorithm.num_envs)
    return jax.vmap(algorithm.algorithm.training_env.reset)(keys)[1]


# --------------------------------------------------------------------------------------
# The critic's input
# --------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("critic_input", "shape"),
    [
        ("global_state", (7, 7, 3)),
        ("concatenated", (2 * 2 * 3 * 3 * 3,)),  # agents x frames x 3 x 3 x RGB
        ("agent_specific", (7 * 7 * 3 + 2,)),
    ],
)
def test_the_critic_reads_its_input_by_name(critic_input, shape):
    algorithm = mappo(critic_input=critic_input)
    space = algorithm.view.observation_space
    assert space.spaces["critic"].shape == shape
    timestep = world_timesteps(algorithm)
    inputs = jax.vmap(algorithm.view.agent_inputs)(timestep)
    critic = np.asarray(inputs["critic"])  # [num_envs, num_agents, *shape]
    assert critic.shape == (2, 2, *shape)
    global_state = np.asarray(timestep.extras[GLOBAL_STATE])
    if critic_input == "global_state":
        np.testing.assert_array_equal(critic[:, 0], global_state)
        np.testing.assert_array_equal(critic[:, 1], global_state)
    elif critic_input == "concatenated":
        joint = np.asarray(timestep.observation).reshape(2, -1)
        np.testing.assert_array_equal(critic[:, 0], joint)
        np.testing.assert_array_equal(critic[:, 1], joint)
    else:
        flat = global_state.reshape(2, -1)
        np.testing.assert_array_equal(critic[:, 1, :-2], flat)
        np.testing.assert_array_equal(critic[:, 0, -2:], [[1, 0], [1, 0]])
        np.testing.assert_array_equal(critic[:, 1, -2:], [[0, 1], [0, 1]])


@pytest.mark.slow
@pytest.mark.parametrize("share_parameters", [True, False], ids=["shared", "own"])
def test_the_critic_sees_the_global_state_and_the_policy_does_not(share_parameters):
    # A trained state (the one the sharing tests read: no program of its own).
    algorithm, state, _, _ = trained(share_parameters)
    timestep = world_timesteps(algorithm)
    values = algorithm.values(state, timestep)
    assert values.shape == (2, 2)
    other = eqx.tree_at(
        lambda t: t.extras[GLOBAL_STATE],
        timestep,
        1.0 - timestep.extras[GLOBAL_STATE],
    )
    changed = algorithm.values(state, other)
    assert np.abs(np.asarray(changed) - np.asarray(values)).min() > 1e-6
    # Acting reads the agents' own observations only: one action per agent.
    policy = algorithm.policy(state, deterministic=True)
    assert isinstance(policy, DecentralizedPolicy)
    actions = policy(timestep.observation[0], jr.key(2), timestep.action_mask)
    assert actions.shape == (2,)
    alone = algorithm.policy(state, deterministic=True, agent=1)
    action = alone(timestep.observation[0, 1], jr.key(3))
    assert action.shape == ()


@pytest.mark.slow
def test_a_batch_in_the_wrong_layout_is_a_trace_time_error_naming_both_shapes():
    # JaxMARL #169: a critic batch built agent-major where world-major was meant.
    algorithm = mappo(num_envs=4, num_minibatches=2)
    state = eqx.filter_eval_shape(algorithm.init, jr.key(0))  # shapes are enough
    timestep = world_timesteps(algorithm)
    swapped = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), timestep.observation)
    wrong = eqx.tree_at(lambda t: t.observation, timestep, swapped)
    with pytest.raises(ValueError) as error:
        jax.eval_shape(algorithm.values, state, wrong)
    message = str(error.value)
    assert "(2, 4, 2, 3, 3, 3)" in message  # what was given: [agents, envs, ...]
    assert "(4, 2, 2, 3, 3, 3)" in message  # what the critic reads: [envs, agents]
    assert "num_envs=4, num_agents=2" in message


# --------------------------------------------------------------------------------------
# Sharing
# --------------------------------------------------------------------------------------


@functools.cache
def trained(share_parameters: bool):
    """MAPPO on the small world, trained from seeds 0 and 1 with a listener on
    XLA's compilations: the state of seed 0, how many programs the first run
    compiled and how many the second did. Shared by the tests that read a trained
    state and the one that counts compilations, so each configuration compiles
    once in this module."""
    compiled = []
    listening = [True]

    def listen(event, seconds, **_):
        if listening[0] and event == "/jax/core/compile/backend_compile_duration":
            compiled.append(seconds)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        algorithm = mappo(share_parameters=share_parameters)
        state, _ = algorithm.train(jr.key(0))
        first = len(compiled)
        algorithm.train(jr.key(1))
    finally:
        listening[0] = False
    return algorithm, state, first, len(compiled) - first


@pytest.mark.slow
def test_unshared_agents_differ_and_shared_ones_are_one_copy():
    _, own_state, _, _ = trained(False)
    model = own_state.learners.model
    for leaf in parameters(model):
        assert leaf.shape[0] == 2  # one network per agent, on the agent axis
        assert np.abs(leaf[0] - leaf[1]).max() > 0
    for leaf in parameters(own_state.learners.optimizer_state):
        if leaf.ndim and leaf.size > 2:
            assert leaf.shape[0] == 2
            assert np.abs(leaf[0] - leaf[1]).max() > 0

    _, shared_state, _, _ = trained(True)
    shared = shared_state.learners.model
    # One copy: the network's own shapes, no agent axis.
    expected = algorithm_network_shapes(mappo(share_parameters=True))
    assert [leaf.shape for leaf in parameters(shared)] == expected


def agent_copies_equal(stacked: np.ndarray) -> np.ndarray:
    """Per entry of a stack of two agents' arrays, whether the copies are equal."""
    return np.asarray(stacked[0] == stacked[1])


def assert_one_part_is_one_copy(state, share_critic: bool):
    """The part shared (the critic where `share_critic`, else the actor) has
    bit-identical copies on every agent, and so do its Adam moments; the other
    part's copies differ."""
    model = eqx.filter(state.learners.model, eqx.is_array)
    critic = model.critic_mask()
    for leaf, is_critic in zip(jax.tree.leaves(model), jax.tree.leaves(critic)):
        assert leaf.shape[0] == 2  # a copy per agent, on the agent axis
        if is_critic == share_critic:
            assert agent_copies_equal(leaf).all()
        else:
            assert not agent_copies_equal(leaf).all()
    # Adam's moments, over the parameters flattened in one vector per agent.
    shared_entries = jax.flatten_util.ravel_pytree(
        jax.tree.map(
            lambda leaf, c: np.full(leaf.shape[1:], c == share_critic), model, critic
        )
    )[0]
    moments = [
        leaf
        for leaf in jax.tree.leaves(state.learners.optimizer_state)
        if leaf.ndim == 2 and leaf.shape[1] == shared_entries.size
    ]
    assert len(moments) == 2  # mu and nu
    for moment in moments:
        equal = agent_copies_equal(np.asarray(moment))
        assert equal[np.asarray(shared_entries)].all()
        assert not equal[~np.asarray(shared_entries)].all()


@pytest.mark.slow
def test_a_shared_actor_is_one_copy_on_every_agent_and_the_critic_differs():
    """The actor shared, the critics each agent's own: the actor's copies (and
    their Adam moments) are bit-identical after training, the critics' differ.
    (The other way round, one critic beside an actor per agent: the recurrent
    command line's test.)"""
    ppo = eqxrl.PPO(env=WORLD, **SMALL)
    algorithm = MAPPO(ppo, share_parameters=True, share_critic=False)
    assert not algorithm.one_network
    state, metrics = algorithm.train(jr.key(0))
    assert np.isfinite(np.asarray(metrics["total_episode_return"])).all()
    assert_one_part_is_one_copy(state, share_critic=False)


def test_synchronized_gradients_are_the_team_mean_under_one_clip():
    """Two agents' gradients through the transformation, vmapped over the agent
    axis: the shared leaf becomes their mean on both, and one scale brings the
    largest agent's norm to the clip."""
    transform = eqxrl.multiagent.synchronized_shared_gradients(
        lambda tree: {"shared": True, "own": False}, jnp.float32(1.0)
    )
    gradients = {
        "shared": jnp.array([[3.0, 0.0], [1.0, 0.0]]),
        "own": jnp.array([[0.0, 0.0], [0.0, 4.0]]),
    }
    update = jax.vmap(
        lambda g: transform.update(g, transform.init(g))[0], axis_name="agents"
    )
    out = jax.tree.map(np.asarray, update(gradients))
    # Mean of the shared leaf: [2, 0]; norms then 2 and sqrt(4 + 16): the larger
    # becomes the clip (less the margin), the same scale for both agents.
    scale = (1.0 - 1e-4) / np.sqrt(20.0)
    np.testing.assert_allclose(out["shared"], [[2 * scale, 0.0]] * 2, rtol=1e-6)
    np.testing.assert_allclose(out["own"], [[0.0, 0.0], [0.0, 4 * scale]], rtol=1e-6)
    small = jax.tree.map(lambda g: g / 100.0, gradients)
    np.testing.assert_allclose(
        update(small)["shared"], [[0.02, 0.0], [0.02, 0.0]], rtol=1e-6
    )


@pytest.mark.slow
@pytest.mark.parametrize("share_parameters", [True, False], ids=["shared", "own"])
def test_a_run_is_one_program_compiled_once(share_parameters):
    """Every agent's learner (stacked or shared) is in one compiled program,
    which a second seed reuses."""
    algorithm, _, first, second = trained(share_parameters)
    assert first >= 1
    assert second == 0  # the second seed compiles nothing
    # One program: its lowering has one entry point, whatever the agents.
    text = algorithm.lower(jr.key(0)).as_text()
    assert text.count("func.func public @main") == 1


def algorithm_network_shapes(algorithm):
    network = eqx.filter_eval_shape(algorithm.learner.make_network, jr.key(0))
    is_shape = lambda x: isinstance(x, jax.ShapeDtypeStruct)  # noqa: E731
    return [leaf.shape for leaf in jax.tree.leaves(eqx.filter(network, is_shape))]


# --------------------------------------------------------------------------------------
# Recurrent MAPPO
# --------------------------------------------------------------------------------------


def sharp_gru(env, key, **options):
    """A small GRU whose actor outputs are 30 times their initial scale, so that
    a log-probability replayed with another carry than the rollout's differs by
    far more than float rounding."""
    network = GRUActorCritic.from_env(
        env, key, hidden_size=8, encoder_sizes=(16,), head_sizes=(16,), **options
    )
    last = network.actor[-1]
    return eqx.tree_at(lambda n: n.actor[-1].weight, network, 30.0 * last.weight)


@pytest.mark.slow
@pytest.mark.parametrize("share_parameters", [True, False], ids=["shared", "own"])
def test_recurrent_mappo_replays_its_rollout_exactly(share_parameters):
    """Two members of one program: a frozen policy (learning rate 0, ratios
    clipped at 1 +- 1e-4) whose replayed log-probabilities must be the rollout's
    (its actor's carries reset where episodes end), and a learning one."""
    sweep = dict(
        learning_rate=jnp.array([0.0, 1e-3], jnp.float32),
        clip_eps=jnp.array([1e-4, 0.2], jnp.float32),
    )

    def train(options):
        algorithm = mappo(
            share_parameters=share_parameters, network_factory=sharp_gru, **options
        )
        return algorithm.train(jr.key(0))

    states, metrics = eqx.filter_vmap(train)(sweep)
    assert np.all(np.asarray(metrics["clip_fraction"][0]) == 0.0)
    assert np.all(np.abs(np.asarray(metrics["approx_kl"][0])) < 1e-7)
    assert (np.asarray(metrics["episode_count"]) > 0).all()  # truncations inside
    for name in ("total_loss", "value_loss", "entropy"):
        assert np.isfinite(np.asarray(metrics[name][1])).all(), name
    carry = states.learners.carry
    # The critic has a cell of its own (it reads the global state).
    assert isinstance(carry, ActorCriticCarry)
    assert carry.critic is not None


# --------------------------------------------------------------------------------------
# Refusals
# --------------------------------------------------------------------------------------


class Pair(eqxrl.envs.AbstractMultiAgentEnvironment):
    """Two agents, no global state."""

    num_agents: int = eqx.field(static=True, default=2)

    def reset(self, key):
        timestep = eqxrl.envs.TimeStep(
            observation=jnp.zeros((2, 3)),
            reward=jnp.zeros(2),
            terminated=jnp.bool_(False),
            truncated=jnp.bool_(False),
        )
        return jnp.int32(0), timestep

    def step(self, state, action, key):
        return self.reset(key)

    @property
    def observation_space(self):
        return eqxrl.envs.Box(0.0, 1.0, shape=(3,))

    @property
    def action_space(self):
        return eqxrl.envs.Discrete(2)


def test_refusals_say_what_to_do():
    with pytest.raises(ValueError, match="declares none") as error:
        mappo(env=Pair(), critic_input="agent_specific")
    assert "critic_input='concatenated'" in str(error.value)
    algorithm = mappo(env=Pair(), critic_input="concatenated")
    assert algorithm.view.observation_space.spaces["critic"].shape == (6,)
    with pytest.raises(ValueError, match="must be one of"):
        mappo(critic_input="world")
    with pytest.raises(ValueError, match="must be an eqxrl.PPO"):
        MAPPO(eqxrl.DQN(env=WORLD))


class SharedTrunk(eqxrl.nn.AbstractActorCritic):
    """An actor-critic that does not say which parameters are its critic's."""

    inner: eqxrl.nn.MultiInputActorCritic

    def __call__(self, observation, action_mask=None):
        return self.inner(observation, action_mask)

    def value(self, observation):
        return self.inner.value(observation)


def test_sharing_one_part_needs_a_critic_of_its_own():
    def factory(env, key, **keys):
        return SharedTrunk(
            eqxrl.nn.MultiInputActorCritic(
                env.observation_space, env.action_space, key=key, **keys
            )
        )

    ppo = eqxrl.PPO(env=WORLD, network_factory=factory, **SMALL)
    MAPPO(ppo, share_parameters=True)  # both shared: no split needed
    with pytest.raises(ValueError, match="critic with parameters of its own") as error:
        MAPPO(ppo, share_parameters=True, share_critic=False)
    assert "SharedTrunk does not say" in str(error.value)
    # The recurrent network's critic has a core of its own under MAPPO's keys.
    recurrent = eqxrl.PPO(env=WORLD, network_factory=sharp_gru, **SMALL)
    mixed = MAPPO(recurrent, share_parameters=False, share_critic=True)
    network = eqx.filter_eval_shape(mixed.learner.make_network, jr.key(0))
    assert any(jax.tree.leaves(network.critic_mask()))


@pytest.mark.slow
def test_mappo_trains_on_treasure_hunt_and_the_team_return_moves():
    """The scope statement: MAPPO runs on TreasureHunt-v0, and its team return
    moves (the learning bars are in benchmarks/multiagent.py)."""
    env = eqxrl.envs.make("TreasureHunt-v0", preset="mp")
    # Its episodes last 50 steps: one ends in each world in each iteration.
    ppo = eqxrl.PPO(
        env=env,
        num_envs=2,
        num_steps=50,
        total_timesteps=2 * 50 * 4,
        num_minibatches=2,
        hidden_sizes=(16,),
    )
    algorithm = MAPPO(ppo, share_parameters=True)
    _, metrics = algorithm.train(jr.key(0))
    returns = np.asarray(metrics["total_episode_return"])
    assert returns.shape == (4,)
    assert np.isfinite(returns).all()
    assert np.ptp(returns) > 0


# --------------------------------------------------------------------------------------
# The Trainer, the command line, checkpoints
# --------------------------------------------------------------------------------------

WORLD_OPTIONS = dict(  # make("TreasureHunt-v0", **WORLD_OPTIONS)
    height=7, width=7, vision_radius=1, num_frames=2, spawn_probability=0.05
)


def arrays(tree):
    def numbers(x):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jr.key_data(x)
        return np.asarray(x)

    return [numbers(x) for x in jax.tree.leaves(eqx.filter(tree, eqx.is_array))]


@pytest.mark.slow
def test_recurrent_mappo_from_the_command_line_resumes_exactly(tmp_path, capsys):
    """`eqxrl train TreasureHunt-v0 --critic-input agent_specific --network gru
    --share-critic yes` trains recurrent MAPPO with one actor per agent and one
    critic for all (kept in step); its checkpoint rebuilds the MAPPO config; a
    Trainer run stopped at iteration 2 and resumed ends with the command line's
    final state bit for bit (carries included); `eqxrl eval` reports every
    agent."""
    from eqxrl.training import main

    flags = ["--num-envs=2", "--num-steps=8", "--total-timesteps=64"]
    # The Trainer's chunks below: the command line's compiled program serves them.
    flags += ["--num-minibatches=2", "--eval-episodes=2", "--chunk-size=2"]
    flags += ["--checkpoint-every=2"]
    flags += [f"--env-option={k}={v}" for k, v in WORLD_OPTIONS.items()]
    out = tmp_path / "cli"
    argv = ["train", "TreasureHunt-v0", "--critic-input", "agent_specific"]
    argv += ["--share-critic", "yes"]
    argv += ["--network", "gru", *flags, "--out", str(out), "--log", "csv"]
    assert main(argv) == 0
    config = json.loads((out / "config.json").read_text())["algorithm"]
    assert config["algorithm"] == "eqxrl.multiagent.MAPPO"
    assert config["fields"]["critic_input"] == "agent_specific"
    reference, rebuilt = eqxrl.load_checkpoint(out)
    assert isinstance(rebuilt, MAPPO) and not rebuilt.share_parameters
    assert rebuilt.share_critic is True
    assert_one_part_is_one_copy(reference, share_critic=True)
    assert isinstance(reference.learners.carry, ActorCriticCarry)

    def trainer():
        return eqxrl.Trainer(
            rebuilt,
            out=str(tmp_path / "resumed"),
            chunk_size=2,
            checkpoint_every=2,
            eval_episodes=2,
            gif_episodes=0,
            env_name="TreasureHunt-v0",
            env_kwargs=WORLD_OPTIONS,
            verbose=False,
            progress=False,
            loggers=(),
        )

    trainer().fit(seed=0, stop_at_iteration=2)
    resumed, _ = trainer().fit(seed=0, resume=True)
    for a, b in zip(arrays(resumed), arrays(reference), strict=True):
        np.testing.assert_array_equal(a, b)

    capsys.readouterr()
    assert main(["eval", str(out), "--episodes", "2"]) == 0
    assert "per agent: agent 0" in capsys.readouterr().out
    policy = eqxrl.load_policy(out / "policy.eqx")
    assert policy.is_recurrent
    env = eqxrl.envs.make("TreasureHunt-v0", **WORLD_OPTIONS)
    _, timestep = env.reset(jr.key(0))
    _, action = policy.step(policy.initial_carry(), timestep.observation, jr.key(1))
    assert action.shape == (2,)


# --------------------------------------------------------------------------------------
# Heterogeneous agents
# --------------------------------------------------------------------------------------


@pytest.mark.learning
def test_mappo_on_agents_that_differ_never_takes_a_padding_action():
    """Speaker-listener: a speaker with 3 actions and a listener with 5, padded to
    5 with the speaker's last two masked off by `from_jaxmarl`; observations of
    3 and 11 padded to 11. MAPPO (critic on the concatenated observations) trains
    on it, and no agent ever takes a padding action."""
    pytest.importorskip("jaxmarl")
    env = eqxrl.envs.from_jaxmarl("MPE_simple_speaker_listener_v4")
    assert env.action_space.num_values == 5
    ppo = eqxrl.PPO(
        env=env,
        num_envs=2,
        num_steps=16,
        total_timesteps=2 * 16 * 2,
        num_minibatches=2,
        hidden_sizes=(16,),
    )
    algorithm = MAPPO(ppo, share_parameters=True, critic_input="concatenated")
    state, metrics = algorithm.train(jr.key(0))
    assert np.isfinite(np.asarray(metrics["total_loss"])).all()
    assert np.asarray(metrics["invalid_action_count"]).sum() == 0
    policy = algorithm.policy(state)
    _, timestep = env.reset(jr.key(1))
    keys = jr.split(jr.key(2), 256)
    actions = jax.vmap(lambda k: policy(timestep.observation, k, timestep.action_mask))(
        keys
    )
    assert int(np.asarray(actions[:, 0]).max()) < 3  # the speaker's own 3 actions


def test_old_british_spellings_are_deprecated_aliases():
    for old, new in (
        ("CentralisedCriticView", "CentralizedCriticView"),
        ("DecentralisedPolicy", "DecentralizedPolicy"),
        ("synchronised_shared_gradients", "synchronized_shared_gradients"),
    ):
        with pytest.warns(DeprecationWarning, match=f"use eqxrl.multiagent.{new}"):
            alias = getattr(eqxrl.multiagent, old)
        assert alias is getattr(eqxrl.multiagent, new)
    with pytest.raises(AttributeError, match="no attribute 'Centralized'"):
        eqxrl.multiagent.Centralized  # noqa: B018
