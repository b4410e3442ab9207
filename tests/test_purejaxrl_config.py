"""`PPO.from_purejaxrl_config`: a PureJaxRL / JaxMARL PPO config dict as PPO's
arguments (every key to its field, derived keys checked, the rest refused by
name)."""

import equinox as eqx
import numpy as np
import pytest

import eqxrl

# PureJaxRL's `purejaxrl/ppo.py` CartPole config, as published.
PUREJAXRL_CONFIG = {
    "LR": 2.5e-4,
    "NUM_ENVS": 4,
    "NUM_STEPS": 128,
    "TOTAL_TIMESTEPS": 5e5,
    "UPDATE_EPOCHS": 4,
    "NUM_MINIBATCHES": 4,
    "GAMMA": 0.99,
    "GAE_LAMBDA": 0.95,
    "CLIP_EPS": 0.2,
    "ENT_COEF": 0.01,
    "VF_COEF": 0.5,
    "MAX_GRAD_NORM": 0.5,
    "ACTIVATION": "tanh",
    "ENV_NAME": "CartPole-v1",
    "ANNEAL_LR": True,
    "DEBUG": True,
}

# JaxMARL's `baselines/IPPO/config/ippo_ff_mpe.yaml`, with its Weights & Biases keys.
JAXMARL_IPPO_CONFIG = {
    "LR": 2.5e-4,
    "NUM_ENVS": 16,
    "NUM_STEPS": 128,
    "TOTAL_TIMESTEPS": 1e7,
    "UPDATE_EPOCHS": 4,
    "NUM_MINIBATCHES": 4,
    "GAMMA": 0.99,
    "GAE_LAMBDA": 0.95,
    "CLIP_EPS": 0.2,
    "ENT_COEF": 0.01,
    "VF_COEF": 0.5,
    "MAX_GRAD_NORM": 0.5,
    "ACTIVATION": "tanh",
    "ENV_NAME": "MPE_simple_spread_v3",
    "ENV_KWARGS": {},
    "ANNEAL_LR": True,
    "SEED": 30,
    "NUM_SEEDS": 10,
    "ENTITY": "",
    "PROJECT": "jaxmarl-mpe",
    "WANDB_MODE": "disabled",
}


@pytest.fixture
def cartpole():
    return eqxrl.envs.make("CartPole-v1")


def same(got, expected) -> bool:
    got = np.asarray(got).item()
    if isinstance(expected, float):
        return got == pytest.approx(expected)
    return got == expected


@pytest.mark.parametrize(
    ("key", "given", "field", "expected"),
    [
        ("LR", 1e-3, "learning_rate", 1e-3),
        ("NUM_ENVS", 8, "num_envs", 8),
        ("NUM_STEPS", 64, "num_steps", 64),
        ("TOTAL_TIMESTEPS", 1e5, "total_timesteps", 100_000),
        ("UPDATE_EPOCHS", 3, "num_epochs", 3),
        ("NUM_MINIBATCHES", 2, "num_minibatches", 2),
        ("GAMMA", 0.9, "gamma", 0.9),
        ("GAE_LAMBDA", 0.8, "gae_lambda", 0.8),
        ("CLIP_EPS", 0.1, "clip_eps", 0.1),
        ("ENT_COEF", 0.0, "ent_coef", 0.0),
        ("VF_COEF", 0.25, "vf_coef", 0.25),
        ("MAX_GRAD_NORM", 1.5, "max_grad_norm", 1.5),
        ("ANNEAL_LR", False, "anneal_lr", False),
        ("ACTIVATION", "relu", "activation", "relu"),
        ("NORMALIZE_ENV", True, "normalize_observations", True),
        ("NORMALIZE_ENV", True, "normalize_rewards", True),
    ],
)
def test_each_key_lands_in_its_field(cartpole, key, given, field, expected):
    ppo = eqxrl.PPO.from_purejaxrl_config(cartpole, {**PUREJAXRL_CONFIG, key: given})
    reference = eqxrl.PPO.from_purejaxrl_config(cartpole, PUREJAXRL_CONFIG)
    got = getattr(ppo, field)
    assert same(got, expected), (key, got)
    assert not same(getattr(reference, field), expected)  # the key did it
    if field == "total_timesteps":
        assert type(got) is int


def test_purejaxrl_config_is_eqxrl_ppo_with_the_same_values(cartpole):
    """PureJaxRL's published config gives the PPO written out by hand, which runs
    PureJaxRL's NUM_UPDATES iterations."""
    ppo = eqxrl.PPO.from_purejaxrl_config(cartpole, PUREJAXRL_CONFIG)
    by_hand = eqxrl.PPO(
        env=cartpole,
        learning_rate=2.5e-4,
        num_envs=4,
        num_steps=128,
        total_timesteps=500_000,
        num_epochs=4,
        num_minibatches=4,
        gamma=0.99,
        gae_lambda=0.95,
        clip_eps=0.2,
        ent_coef=0.01,
        vf_coef=0.5,
        max_grad_norm=0.5,
        anneal_lr=True,
        activation="tanh",
        hidden_sizes=(64, 64),
    )
    assert eqx.tree_equal(ppo, by_hand)
    assert ppo.num_iterations == 976  # 5e5 // 128 // 4, PureJaxRL's NUM_UPDATES
    # Keys left out take PPO's defaults, which are the same values.
    assert eqx.tree_equal(eqxrl.PPO.from_purejaxrl_config(cartpole, {}), by_hand)


def test_network_sizes_follow_purejaxrl_scripts(cartpole):
    discrete = eqxrl.PPO.from_purejaxrl_config(cartpole, {})
    continuous = eqxrl.PPO.from_purejaxrl_config(eqxrl.envs.make("Pendulum-v1"), {})
    assert discrete.hidden_sizes == (64, 64)  # ppo.py
    assert continuous.hidden_sizes == (256, 256)  # ppo_continuous_action.py


def test_overrides_replace_translated_arguments(cartpole):
    ppo = eqxrl.PPO.from_purejaxrl_config(
        cartpole, PUREJAXRL_CONFIG, hidden_sizes=(32,), num_envs=8, reward_scale=0.1
    )
    assert ppo.hidden_sizes == (32,) and ppo.num_envs == 8
    assert float(ppo.reward_scale) == pytest.approx(0.1)


def test_jaxmarl_ippo_config():
    """JaxMARL's IPPO config, bookkeeping keys included; SCALE_CLIP_EPS divides
    the clip by the agent count; MINIBATCH_SIZE and NUM_ACTORS count agents."""
    env = eqxrl.envs.make("TreasureHunt-v0")  # 2 agents
    ppo = eqxrl.PPO.from_purejaxrl_config(env, JAXMARL_IPPO_CONFIG)
    assert (ppo.num_envs, ppo.num_steps, ppo.total_timesteps) == (16, 128, 10**7)
    assert float(ppo.clip_eps) == pytest.approx(0.2)
    scaled = eqxrl.PPO.from_purejaxrl_config(
        env, {**JAXMARL_IPPO_CONFIG, "SCALE_CLIP_EPS": True}
    )
    assert float(scaled.clip_eps) == pytest.approx(0.1)
    # What JaxMARL's make_train writes into the config: consistent, accepted.
    derived = {"NUM_ACTORS": 32, "NUM_UPDATES": 4882, "MINIBATCH_SIZE": 1024}
    eqxrl.PPO.from_purejaxrl_config(env, {**JAXMARL_IPPO_CONFIG, **derived})
    with pytest.raises(
        ValueError, match=r"config\['MINIBATCH_SIZE'\]=512 .* give 1024"
    ):
        eqxrl.PPO.from_purejaxrl_config(
            env, {**JAXMARL_IPPO_CONFIG, "MINIBATCH_SIZE": 512}
        )


def test_derived_keys_are_checked(cartpole):
    # PureJaxRL's make_train adds these to the config it is given.
    derived = {"NUM_UPDATES": 976, "MINIBATCH_SIZE": 128}
    eqxrl.PPO.from_purejaxrl_config(cartpole, {**PUREJAXRL_CONFIG, **derived})
    with pytest.raises(ValueError, match=r"config\['NUM_UPDATES'\]=100 .* give 976"):
        eqxrl.PPO.from_purejaxrl_config(
            cartpole, {**PUREJAXRL_CONFIG, "NUM_UPDATES": 100}
        )


@pytest.mark.parametrize(
    "keys", [["GRU_HIDDEN_DIM"], ["REW_SHAPING_HORIZON", "lr"], ["ADD_AGENT_ID"]]
)
def test_unknown_keys_are_errors_naming_them(cartpole, keys):
    config = {**PUREJAXRL_CONFIG, **dict.fromkeys(keys, 1)}
    with pytest.raises(ValueError, match="have no PPO equivalent") as error:
        eqxrl.PPO.from_purejaxrl_config(cartpole, config)
    assert f"config keys {sorted(keys)}" in str(error.value)


@pytest.mark.parametrize(
    ("key", "given", "message"),
    [
        ("NUM_ENVS", 4.5, r"config\['NUM_ENVS'\]=4.5 must be a whole number"),
        ("TOTAL_TIMESTEPS", "1e7", r"'TOTAL_TIMESTEPS'\]='1e7' must be a whole"),
        ("ANNEAL_LR", "yes", r"config\['ANNEAL_LR'\]='yes' must be True or False"),
        ("ACTIVATION", "gelu", r"'gelu': PureJaxRL's actor-critic knows 'tanh'"),
    ],
)
def test_bad_values_are_errors_naming_the_key(cartpole, key, given, message):
    with pytest.raises(ValueError, match=message):
        eqxrl.PPO.from_purejaxrl_config(cartpole, {**PUREJAXRL_CONFIG, key: given})


def test_config_must_be_a_mapping(cartpole):
    # Refused by the runtime type checker, or without it by the method itself.
    with pytest.raises(TypeError, match="config"):
        eqxrl.PPO.from_purejaxrl_config(cartpole, [("LR", 1e-3)])
