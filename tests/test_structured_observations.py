"""Structured and discrete observations: `Dict` / `Tuple` spaces, their conversion
from and to gymnasium, the multi-input and asymmetric actor-critic, one-hot
`Discrete` observations, and normalization of structured observations."""

import runpy
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl
from eqxrl.algorithms._observation_storage import store_observation
from eqxrl.envs import Box, Dict, Discrete, Tuple
from eqxrl.nn import MultiInputActorCritic, ObservationEncoder
from eqxrl.training import config_fields

STANDARD_DTYPE_PROMOTION = True  # PPO's Adam (see conftest.py)


# The example's wrapper: `{"sensors": noisy observation, "true_state": observation}`.
NoisySensors = runpy.run_path(
    str(Path(__file__).parent.parent / "examples" / "dict_observations_ppo.py")
)["NoisySensors"]


class SensorCartPole(NoisySensors):
    """CartPole with a dict observation: noisy sensors for the policy (`state`),
    the true state for the critic (`privileged_state`), and which quarter of the
    track the cart is in (`quarter`, a `Discrete(4)` leaf)."""

    def __init__(self, env, noise=0.05):
        super().__init__(env, noise)

    def _observe(self, timestep, key):
        timestep = super()._observe(timestep, key)
        sensors = timestep.observation["sensors"]
        true = timestep.observation["true_state"]
        quarter = jnp.clip(((true[0] + 2.4) / 1.2).astype(jnp.int32), 0, 3)
        observation = {"state": sensors, "privileged_state": true, "quarter": quarter}
        return eqx.tree_at(lambda t: t.observation, timestep, observation)

    @property
    def observation_space(self):
        box = self.env.observation_space
        return Dict(state=box, privileged_state=box, quarter=Discrete(4))


@pytest.fixture(scope="module")
def sensor_cartpole():
    return SensorCartPole(eqxrl.envs.make("CartPole-v1"))


# Spaces


def test_dict_space_samples_contains_and_orders_leaves_by_key():
    space = Dict({"b": Box(-1.0, 1.0, (3,)), "a": Discrete(4)}, c=Tuple([Discrete(2)]))
    sample = space.sample(jr.key(0))
    assert list(sample) == ["a", "b", "c"]
    assert sample["b"].shape == (3,) and sample["a"].dtype == jnp.int32
    assert bool(space.contains(sample))
    outside = {**sample, "a": jnp.int32(4)}
    assert not bool(space.contains(outside))
    assert not bool(space.contains({"a": sample["a"]}))  # keys missing
    leaves = jax.tree.leaves(space, is_leaf=eqxrl.envs.is_leaf_space)
    assert leaves == [Discrete(4), space["b"], Discrete(2)]
    assert space.keys() == ["a", "b", "c"]
    assert space.subset(("b",)).keys() == ["b"]


def test_composite_spaces_explain_what_they_lack():
    space = Dict(position=Discrete(3))
    with pytest.raises(TypeError, match="no single shape"):
        space.shape
    with pytest.raises(KeyError, match=r"keys are \['position'\]"):
        space.subset(("velocity",))
    # (with runtime type checking on, the annotation catches it first)
    with pytest.raises(TypeError, match="not an eqxrl space|AbstractSpace"):
        Dict(position=3)
    with pytest.raises(ValueError, match="at least one"):
        Tuple([])
    pair = Tuple([Discrete(2), Box(0.0, 1.0, (2,))])
    sample = pair.sample(jr.key(1))
    assert isinstance(sample, tuple) and bool(pair.contains(sample))
    assert not bool(pair.contains((jnp.int32(2), sample[1])))


def test_check_environment_names_the_leaf_whose_shape_is_wrong(sensor_cartpole):
    eqxrl.envs.check_environment(sensor_cartpole)

    class WrongSpace(SensorCartPole):
        @property
        def observation_space(self):
            box = self.env.observation_space
            return Dict(
                state=Box(-1.0, 1.0, (3,)), privileged_state=box, quarter=Discrete(4)
            )

    with pytest.raises(ValueError, match=r"observations\['state'\] of shape \(4,\)"):
        eqxrl.envs.check_environment(WrongSpace(sensor_cartpole.env))

    class MissingKey(SensorCartPole):
        @property
        def observation_space(self):
            return Dict(state=self.env.observation_space)

    with pytest.raises(ValueError, match="structured as"):
        eqxrl.envs.check_environment(MissingKey(sensor_cartpole.env))


# Networks


def test_encoder_one_hot_encodes_discrete_leaves_and_concatenates_in_key_order():
    space = Dict(position=Discrete(5), velocity=Box(-1.0, 1.0, (2,)))
    encoder = ObservationEncoder(space, key=jr.key(0))
    assert encoder.num_features == 5 + 2
    features = encoder({"velocity": jnp.array([0.5, -0.25]), "position": jnp.int32(3)})
    np.testing.assert_array_equal(features, [0, 0, 0, 1, 0, 0.5, -0.25])
    only_velocity = ObservationEncoder(space, keys=("velocity",), key=jr.key(0))
    assert only_velocity.num_features == 2
    with pytest.raises(TypeError, match="selects parts of a Dict"):
        ObservationEncoder(Box(-1.0, 1.0, (2,)), keys=("x",), key=jr.key(0))


def test_encoder_runs_image_leaves_through_a_cnn():
    space = Dict(board=Box(0.0, 1.0, (6, 6, 2)), step=Box(0.0, 1.0))
    encoder = ObservationEncoder(space, image_features=32, key=jr.key(0))
    assert encoder.num_features == 32 + 1
    board = jnp.zeros((6, 6, 2)).at[2, 3, 0].set(1.0)
    features = encoder({"board": board, "step": jnp.float32(0.5)})
    moved = encoder({"board": jnp.roll(board, 1, axis=0), "step": jnp.float32(0.5)})
    assert features.shape == (33,) and float(features[-1]) == 0.5
    # A CNN sees where the piece is; a plain flatten of the board would have
    # 72 features rather than 32.
    assert not np.allclose(features[:32], moved[:32])


def test_asymmetric_actor_critic_keeps_privileged_keys_out_of_the_policy(
    sensor_cartpole,
):
    network = MultiInputActorCritic(
        sensor_cartpole.observation_space,
        sensor_cartpole.action_space,
        actor_keys=("state",),
        critic_keys=("privileged_state", "quarter"),
        key=jr.key(0),
    )
    observation = sensor_cartpole.observation_space.sample(jr.key(1))
    changed = {**observation, "privileged_state": observation["state"] + 1.0}
    changed["quarter"] = (observation["quarter"] + 1) % 4
    distribution, value = network(observation)
    changed_distribution, changed_value = network(changed)
    np.testing.assert_array_equal(distribution.logits, changed_distribution.logits)
    assert float(value) != float(changed_value)
    assert network.actor_encoder.num_features == 4
    assert network.critic_encoder.num_features == 4 + 4


def test_ppo_builds_the_multi_input_network_and_checks_its_keys(sensor_cartpole):
    ppo = eqxrl.PPO(env=sensor_cartpole, num_envs=2, num_steps=8, total_timesteps=16)
    assert isinstance(ppo.make_network(jr.key(0)), MultiInputActorCritic)
    with pytest.raises(ValueError, match=r"names \['camera'\], which"):
        eqxrl.PPO(env=sensor_cartpole, actor_keys=("camera",))
    with pytest.raises(TypeError, match="tuple of key names"):
        eqxrl.PPO(env=sensor_cartpole, actor_keys="state")  # not 5 one-letter keys
    with pytest.raises(ValueError, match="critic_keys is empty"):
        eqxrl.PPO(env=sensor_cartpole, critic_keys=())
    with pytest.raises(ValueError, match="select keys of a Dict"):
        eqxrl.PPO(env=eqxrl.envs.make("CartPole-v1"), critic_keys=("state",))
    with pytest.raises(ValueError, match="pass them to your network"):
        eqxrl.PPO(
            env=sensor_cartpole,
            actor_keys=("state",),
            network_factory=MultiInputActorCritic.from_env,
        )


def test_normalization_keeps_statistics_per_box_leaf(sensor_cartpole):
    ppo = eqxrl.PPO(
        env=sensor_cartpole,
        num_envs=4,
        num_steps=16,
        total_timesteps=4 * 16 * 2,
        normalize_observations=True,
    )
    state, _ = eqx.filter_jit(ppo.train)(jr.key(0))
    statistics = state.observation_statistics
    assert statistics["quarter"] is None  # one-hot encoded, not normalized
    assert statistics["state"].mean.shape == (4,)
    assert float(statistics["privileged_state"].count) > 4 * 16
    # The trained policy takes raw dict observations.
    observation = sensor_cartpole.observation_space.sample(jr.key(2))
    action = ppo.policy(state, deterministic=True).act(observation, jr.key(3))
    assert action.shape == () and 0 <= int(action) < 2


@pytest.mark.learning
def test_ppo_learns_from_noisy_sensors_with_a_privileged_critic(sensor_cartpole):
    """The asymmetric actor-critic learns CartPole from dict observations: the
    return rises from ~20 to well above 100 on at least three seeds of four."""
    ppo = eqxrl.PPO(
        env=sensor_cartpole,
        num_envs=8,
        num_steps=128,
        total_timesteps=8 * 128 * 25,
        learning_rate=1e-3,
        actor_keys=("state", "quarter"),
        critic_keys=("privileged_state",),
    )
    _, metrics = eqx.filter_jit(eqx.filter_vmap(ppo.train))(jr.split(jr.key(0), 4))
    returns = np.asarray(metrics["episode_return"])
    first = np.nanmean(returns[:, :3], axis=1)
    last = np.nanmean(returns[:, -5:], axis=1)
    assert (first < 50).all(), first
    assert (last > 150).sum() >= 3, last


# gymnasium


class DictEnv:
    """A gymnasium environment with dict / tuple / offset-discrete observations."""

    def __init__(self):
        import gymnasium

        spaces = gymnasium.spaces
        self.observation_space = spaces.Dict(
            {
                "position": spaces.Discrete(5, start=1),
                "velocity": spaces.Box(-1.0, 1.0, (2,)),
                "flags": spaces.Tuple([spaces.Discrete(3), spaces.MultiBinary(2)]),
            }
        )
        self.action_space = spaces.Discrete(2)

    def _observation(self):
        return {
            "velocity": np.array([0.5, -0.25 * self.count]),
            "position": 1 + self.count % 5,
            "flags": (self.count % 3, np.array([1, 0], np.int8)),
        }

    def reset(self, seed=None, options=None):
        self.count = 0
        return self._observation(), {}

    def step(self, action):
        self.count += 1 + int(action)
        return self._observation(), 1.0, self.count >= 6, False, {}

    def close(self):
        pass


def test_from_gymnasium_converts_dict_tuple_and_multibinary_spaces():
    pytest.importorskip("gymnasium")
    env = eqxrl.envs.from_gymnasium(DictEnv)
    space = env.observation_space
    assert space == Dict(
        position=Discrete(5),
        velocity=Box(-1.0, 1.0, (2,)),
        flags=Tuple([Discrete(3), Box(0.0, 1.0, (2,))]),
    )
    eqxrl.envs.check_environment(env)
    state, timestep = env.reset(jr.key(0))
    state, timestep = env.step(state, jnp.int32(1), jr.key(0))  # count 2
    observation = timestep.observation
    assert int(observation["position"]) == 2  # 1 + 2 % 5, less the space's start
    np.testing.assert_array_equal(observation["velocity"], [0.5, -0.5])
    assert int(observation["flags"][0]) == 2
    np.testing.assert_array_equal(observation["flags"][1], [1.0, 0.0])
    assert bool(space.contains(observation))
    env.close()


def test_from_gymnasium_reads_a_dict_with_one_key():
    """One leaf inside a dict (what gymnasium's FilterObservation leaves)."""
    gymnasium = pytest.importorskip("gymnasium")

    class OneKey(DictEnv):
        def __init__(self):
            super().__init__()
            self.observation_space = gymnasium.spaces.Dict(
                {"velocity": gymnasium.spaces.Box(-1.0, 1.0, (2,))}
            )

        def _observation(self):
            return {"velocity": np.array([0.5, -0.25 * self.count])}

    env = eqxrl.envs.from_gymnasium(OneKey)
    state, timestep = env.reset(jr.key(0))
    _, timestep = env.step(state, jnp.int32(0), jr.key(0))
    np.testing.assert_array_equal(timestep.observation["velocity"], [0.5, -0.25])
    env.close()


def test_storage_dtype_keeps_discrete_leaves_exact(sensor_cartpole):
    ppo = eqxrl.PPO(env=sensor_cartpole, observation_storage_dtype=jnp.uint8)
    stored = store_observation(
        {"state": jnp.ones(4), "quarter": jnp.int32(300)},
        ppo.observation_storage_dtype,
    )
    assert stored["state"].dtype == jnp.uint8
    assert stored["quarter"].dtype == jnp.int32 and int(stored["quarter"]) == 300


def test_from_gymnasium_still_refuses_what_it_cannot_convert():
    gymnasium = pytest.importorskip("gymnasium")

    class TextEnv(DictEnv):
        def __init__(self):
            super().__init__()
            self.observation_space = gymnasium.spaces.Text(8)

    with pytest.raises(ValueError, match="Dict and Tuple observation spaces"):
        eqxrl.envs.from_gymnasium(TextEnv)


def test_blackjack_tuple_observations_match_gymnasium():
    gymnasium = pytest.importorskip("gymnasium")
    env = eqxrl.envs.from_gymnasium("Blackjack-v1")
    assert env.observation_space == Tuple([Discrete(32), Discrete(11), Discrete(2)])
    reference = gymnasium.make("Blackjack-v1")
    for seed in range(3):
        key = jr.key(seed)
        state, timestep = env.reset(key)
        host_seed = jr.bits(key, (2,), jnp.uint32).tolist()
        expected, _ = reference.reset(seed=host_seed[0] << 32 | host_seed[1])
        assert tuple(int(x) for x in timestep.observation) == tuple(expected)
    env.close()


@pytest.mark.learning
def test_one_hot_observations_let_ppo_solve_frozen_lake():
    """FrozenLake's state index one-hot encoded: PPO reaches the goal on most
    episodes of the last iterations (with the index fed as one float it did not
    learn), on at least two seeds of three."""
    pytest.importorskip("gymnasium")
    env = eqxrl.envs.from_gymnasium("FrozenLake-v1", is_slippery=False)
    ppo = eqxrl.PPO(
        env=env,
        num_envs=4,
        num_steps=64,
        total_timesteps=4 * 64 * 40,
        learning_rate=2.5e-3,
        ent_coef=0.02,
        gamma=0.95,
    )
    _, metrics = eqx.filter_jit(eqx.filter_vmap(ppo.train))(jr.split(jr.key(0), 3))
    returns = np.asarray(metrics["episode_return"])
    last = np.nanmean(returns[:, -5:], axis=1)
    assert (last > 0.7).sum() >= 2, last
    env.close()


def test_to_gymnasium_exports_dict_observations():
    pytest.importorskip("gymnasium")
    from gymnasium.utils.env_checker import check_env

    env = SensorCartPole(eqxrl.envs.make("CartPole-v1"))
    single = eqxrl.envs.to_gymnasium(env)
    check_env(single, skip_render_check=True)
    observation, _ = single.reset(seed=0)
    assert set(observation) == {"state", "privileged_state", "quarter"}
    assert isinstance(observation["quarter"], np.integer)
    vector = eqxrl.envs.to_gymnasium(env, num_envs=3)
    observations, _ = vector.reset(seed=1)
    assert observations["privileged_state"].shape == (3, 4)
    for _ in range(200):
        observations, _, terminated, truncated, info = vector.step(np.ones(3, int))
        if (terminated | truncated).any():
            break
    index = int(np.flatnonzero(terminated | truncated)[0])
    final = info["final_obs"][index]
    assert set(final) == {"state", "privileged_state", "quarter"}
    assert abs(final["privileged_state"][2]) > 0.2  # the pole fell


def test_value_based_default_networks_encode_discrete_observations():
    pytest.importorskip("gymnasium")
    lake = eqxrl.envs.from_gymnasium("FrozenLake-v1", is_slippery=False)
    for algorithm in (eqxrl.DQN(env=lake), eqxrl.IQN(env=lake)):
        network = algorithm.make_network(jr.key(0))
        assert network.encoder.num_features == 16
        assert network.encoder(jnp.int32(5))[5] == 1.0
    box_network = eqxrl.DQN(env=eqxrl.envs.make("CartPole-v1")).make_network(jr.key(0))
    assert box_network.encoder is None  # Box observations stay flattened
    encoder = ObservationEncoder(Discrete(16), key=jr.key(0))
    with pytest.raises(ValueError, match="encoder gives 16 features"):
        eqxrl.nn.MLPQNetwork(4, 2, encoder=encoder, key=jr.key(0))
    lake.close()


def test_actor_and_critic_keys_are_settable_from_the_command_line_and_files():
    fields = {field.name: field for field in config_fields(eqxrl.PPO)}
    actor_keys = fields["actor_keys"]
    assert actor_keys.kind == "str_tuple" and actor_keys.optional
    assert actor_keys.parse("state,quarter") == ("state", "quarter")
    assert actor_keys.parse("none") is None
    assert fields["critic_keys"].coerce(["privileged_state"]) == ("privileged_state",)
    assert actor_keys.coerce(["my key"]) == ("my key",)  # names are not re-split
    with pytest.raises(ValueError, match="list of names"):
        actor_keys.coerce([1, 2])
    assert "asymmetric actor-critic" in fields["critic_keys"].help
