"""Algorithm registry, config (de)serialization and typed fields (eqxrl.training)."""

import json

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import eqxrl
from eqxrl.training import (
    algorithm_from_config,
    algorithm_to_config,
    config_fields,
)
from toy_training import RandomSearch


@pytest.fixture(scope="module")
def cartpole():
    return eqxrl.envs.make("CartPole-v1")


def test_ppo_config_round_trips_exactly(cartpole):
    ppo = eqxrl.PPO(
        env=cartpole,
        num_envs=8,
        num_steps=32,
        learning_rate=3e-4,
        gamma=0.995,
        hidden_sizes=(32, 16),
        anneal_lr=False,
    )
    config = algorithm_to_config(ppo)
    # Plain JSON, readable numbers (float32 written as their shortest decimal).
    text = json.dumps(config)
    config = json.loads(text)
    assert config["algorithm"] == "ppo"
    assert config["fields"]["env"] == {"environment": "CartPole-v1", "kwargs": {}}
    assert config["fields"]["learning_rate"] == 0.0003
    assert config["fields"]["hidden_sizes"] == [32, 16]
    rebuilt = algorithm_from_config(config)
    assert type(rebuilt) is eqxrl.PPO
    assert eqx.tree_equal(rebuilt, ppo)
    assert rebuilt.learning_rate.dtype == jnp.float32
    assert rebuilt.learning_rate == ppo.learning_rate  # bit-identical float32
    assert rebuilt.hidden_sizes == (32, 16)


def test_generic_over_algorithms():
    env = eqxrl.envs.make("Corridor-test-v0")
    algorithm = RandomSearch(env=env, iterations=7, step_size=0.3, widths=(5,))
    config = algorithm_to_config(algorithm)
    assert config["algorithm"] == "random_search"
    assert config["fields"]["env"]["environment"] == "Corridor-test-v0"
    assert eqx.tree_equal(algorithm_from_config(config), algorithm)


def test_environment_with_arguments_needs_its_id(cartpole):
    env = eqxrl.envs.make("CartPole-v1", max_episode_steps=100)
    ppo = eqxrl.PPO(env=env)
    config = algorithm_to_config(ppo)
    assert "unserializable" in config["fields"]["env"]
    with pytest.raises(ValueError, match="cannot be rebuilt from data: env="):
        algorithm_from_config(config)
    config = algorithm_to_config(
        ppo, env_name="CartPole-v1", env_kwargs={"max_episode_steps": 100}
    )
    assert eqx.tree_equal(algorithm_from_config(config), ppo)
    with pytest.raises(ValueError, match="does not build"):
        algorithm_to_config(ppo, env_name="CartPole-v1")


def test_unserializable_fields_are_reported(cartpole):
    def factory(env, key):
        return eqxrl.nn.MLPActorCritic(4, 2, hidden_sizes=(8,), key=key)

    ppo = eqxrl.PPO(env=cartpole, network_factory=factory)
    config = algorithm_to_config(ppo)
    with pytest.raises(ValueError, match="network_factory") as error:
        algorithm_from_config(config)
    assert "pass it" in str(error.value)


def test_bad_configs_are_refused(cartpole):
    config = algorithm_to_config(eqxrl.PPO(env=cartpole))
    with pytest.raises(ValueError, match="Unknown algorithm 'a2c'"):
        algorithm_from_config({**config, "algorithm": "a2c"})
    broken = {**config, "fields": {**config["fields"], "gama": 0.9}}
    with pytest.raises(ValueError, match=r"fields \['gama'\]"):
        algorithm_from_config(broken)
    invalid = {**config, "fields": {**config["fields"], "gamma": 2.0}}
    with pytest.raises(ValueError, match="gamma"):
        algorithm_from_config(invalid)


def test_ppo_fields_are_typed_with_help():
    fields = {field.name: field for field in config_fields(eqxrl.PPO)}
    assert fields["env"].kind == "environment" and fields["env"].required
    assert fields["num_envs"].kind == "int" and fields["num_envs"].default == 4
    assert fields["learning_rate"].kind == "float"
    assert fields["anneal_lr"].kind == "bool"
    assert fields["hidden_sizes"].kind == "int_tuple"
    assert fields["network_factory"].kind == "other"
    assert fields["network_factory"].optional
    assert fields["gamma"].help == "discount factor."
    assert "divide" in fields["num_minibatches"].help
    # Every sweepable float32 field and every static number is settable.
    settable = {n for n, f in fields.items() if f.kind not in ("other", "environment")}
    assert {"gamma", "gae_lambda", "clip_eps", "ent_coef", "vf_coef"} <= settable
    assert {"num_steps", "total_timesteps", "num_epochs"} <= settable


def test_field_parsing_explains_errors():
    fields = {field.name: field for field in config_fields(eqxrl.PPO)}
    assert fields["hidden_sizes"].parse("64, 32") == (64, 32)
    assert fields["anneal_lr"].parse("false") is False
    assert fields["total_timesteps"].parse("1_000_000") == 1_000_000
    assert fields["network_factory"].parse("none") is None
    with pytest.raises(ValueError, match="cannot read 'abc' as a number"):
        fields["gamma"].parse("abc")
    with pytest.raises(ValueError, match="as an integer"):
        fields["num_envs"].parse("4.5")
    with pytest.raises(ValueError, match="true/false"):
        fields["anneal_lr"].parse("maybe")
    assert fields["gamma"].coerce(1) == 1.0
    with pytest.raises(ValueError, match="expected an integer"):
        fields["num_envs"].coerce(2.5)
    with pytest.raises(ValueError, match="expected a list"):
        fields["hidden_sizes"].coerce(64)
    assert fields["hidden_sizes"].coerce([8, 8]) == (8, 8)


def test_numpy_scalars_and_arrays_serialize():
    config = algorithm_to_config(
        RandomSearch(env=eqxrl.envs.make("Corridor-test-v0"), step_size=np.float32(0.7))
    )
    assert config["fields"]["step_size"] == 0.7


def test_storage_dtype_and_named_network_factory_round_trip():
    """A config naming eqxrl's own factory and a dtype rebuilds the same PPO (what
    `eqxrl eval` needs to open the Snake demo's policy)."""
    env = eqxrl.envs.make("Snake-v0", height=5, width=5)
    ppo = eqxrl.PPO(
        env=env,
        network_factory=eqxrl.nn.CNNActorCritic.from_env,
        observation_storage_dtype=jnp.uint8,
    )
    config = algorithm_to_config(
        ppo, env_name="Snake-v0", env_kwargs=dict(height=5, width=5)
    )
    text = json.dumps(config)
    assert "unserializable" not in text
    rebuilt = algorithm_from_config(json.loads(text))
    assert rebuilt.observation_storage_dtype == jnp.uint8
    assert rebuilt.network_factory == eqxrl.nn.CNNActorCritic.from_env
    assert rebuilt.env.observation_space.shape == (5, 5, 3)


@pytest.mark.parametrize("network", [eqxrl.nn.GRUActorCritic, eqxrl.nn.LSTMActorCritic])
def test_recurrent_network_factories_are_named_by_their_class(network):
    """`GRUActorCritic.from_env` is a classmethod its base defines: the config
    names it through GRUActorCritic (not the base), and rebuilds the same PPO."""
    ppo = eqxrl.PPO(
        env=eqxrl.envs.make("StatelessCartPole-v1"), network_factory=network.from_env
    )
    config = json.loads(json.dumps(algorithm_to_config(ppo)))
    assert config["fields"]["network_factory"] == {
        "callable": f"eqxrl.nn._recurrent:{network.__name__}.from_env"
    }
    rebuilt = algorithm_from_config(config)
    assert rebuilt.network_factory == network.from_env
    assert eqx.tree_equal(rebuilt, ppo)


def test_a_config_names_only_eqxrl_functions():
    """A config file is data: a `callable` entry cannot reach what an eqxrl module
    imported from elsewhere (here `os.system` through `eqxrl.envs._render`)."""
    config = algorithm_to_config(eqxrl.PPO(env=eqxrl.envs.make("CartPole-v1")))
    config["fields"]["network_factory"] = {"callable": "eqxrl.envs._render:os.system"}
    with pytest.raises(ValueError, match="not a function of eqxrl"):
        algorithm_from_config(config)
