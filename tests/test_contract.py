"""The contract between environment, network and algorithm, checked before training,
and the range checks of sweepable numbers (also under `vmap`)."""

import math
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest
from jaxtyping import PRNGKeyArray

import eqxrl
from eqxrl.envs import Box, CartPole, Discrete, GridMaze, Snake, TimeStep

STANDARD_DTYPE_PROMOTION = True  # optax's Adam runs in some tests


# --------------------------------------------------------------------------------------
# Network against action space


def three_logits(env, key):
    """A network_factory that ignores the environment's two actions."""
    return eqxrl.nn.MLPActorCritic(4, 3, key=key)


def test_ppo_refuses_network_with_wrong_number_of_actions():
    env = eqxrl.envs.make("CartPole-v1")
    with pytest.raises(ValueError) as error:
        eqxrl.PPO(env=env, network_factory=three_logits)
    message = str(error.value)
    assert "network_factory (MLPActorCritic)" in message
    assert "3 actions" in message and "Discrete(2)" in message and "CartPole" in message
    assert "num_values" in message  # the fix


def test_ppo_refuses_continuous_network_of_wrong_size():
    env = eqxrl.envs.make("Pendulum-v1")

    def two_dimensional(env, key):
        return eqxrl.nn.MLPGaussianActorCritic(3, 2, key=key)

    with pytest.raises(ValueError, match=r"Box action space of shape \(1,\)"):
        eqxrl.PPO(env=env, network_factory=two_dimensional)


def test_ppo_refuses_a_factory_that_is_not_an_actor_critic():
    env = eqxrl.envs.make("CartPole-v1")
    with pytest.raises(ValueError, match="AbstractActorCritic, got MLPQNetwork"):
        eqxrl.PPO(
            env=env,
            network_factory=lambda env, key: eqxrl.nn.MLPQNetwork(4, 2, key=key),
        )


@pytest.mark.parametrize("algorithm", [eqxrl.DQN, eqxrl.IQN])
def test_value_based_refuse_network_with_wrong_number_of_actions(algorithm):
    env = eqxrl.envs.make("CartPole-v1")
    if algorithm is eqxrl.DQN:
        factory = lambda env, key: eqxrl.nn.MLPQNetwork(4, 3, key=key)  # noqa: E731
    else:
        factory = lambda env, key: eqxrl.nn.ImplicitQuantileNetwork(  # noqa: E731
            4, 3, key=key
        )
    with pytest.raises(ValueError) as error:
        algorithm(env=env, network_factory=factory, total_timesteps=20_000)
    message = str(error.value)
    assert "(3,)" in message and "Discrete(2)" in message and "CartPole" in message


def test_matching_network_factory_is_accepted():
    env = eqxrl.envs.make("CartPole-v1")
    eqxrl.PPO(
        env=env,
        network_factory=lambda env, key: eqxrl.nn.MLPActorCritic(4, 2, key=key),
    )


# --------------------------------------------------------------------------------------
# The environment's own contract


class WrongObservation(eqxrl.envs.AbstractEnvironment):
    """Observations of shape (3,) against a (5,) observation space."""

    def reset(self, key: PRNGKeyArray):
        return jnp.int32(0), self._timestep()

    def step(self, state, action, key: PRNGKeyArray):
        return state, self._timestep()

    def _timestep(self) -> TimeStep:
        return TimeStep(
            observation=jnp.zeros(3),
            reward=jnp.float32(0.0),
            terminated=jnp.bool_(False),
            truncated=jnp.bool_(False),
        )

    @property
    def observation_space(self):
        return Box(-1.0, 1.0, shape=(5,))

    @property
    def action_space(self):
        return Discrete(2)


class ExtrasOnlyFromStep(eqxrl.envs.AbstractEnvironment):
    """`step` adds an `extras` key that `reset` lacks."""

    def reset(self, key: PRNGKeyArray):
        return jnp.int32(0), self._timestep({})

    def step(self, state, action, key: PRNGKeyArray):
        return state + 1, self._timestep({"score": jnp.float32(1.0)})

    def _timestep(self, extras) -> TimeStep:
        return TimeStep(
            observation=jnp.zeros(2),
            reward=jnp.float32(0.0),
            terminated=jnp.bool_(False),
            truncated=jnp.bool_(False),
            extras=extras,
        )

    @property
    def observation_space(self):
        return Box(-1.0, 1.0, shape=(2,))

    @property
    def action_space(self):
        return Discrete(2)


class StateChangesDtype(ExtrasOnlyFromStep):
    """`step` returns a float state where `reset` returned an int."""

    def step(self, state, action, key: PRNGKeyArray):
        return jnp.float32(1.0), self._timestep({})


def short_message(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert len(message.splitlines()) == 1, message
    return message


def test_observation_shape_against_space_is_one_short_error():
    with pytest.raises(ValueError) as error:
        eqxrl.PPO(env=WrongObservation(), num_envs=4, num_steps=8)
    message = short_message(error)
    assert "WrongObservation" in message and "observation" in message
    assert "(3,)" in message and "(5,)" in message


def test_extras_keys_must_agree_between_reset_and_step():
    with pytest.raises(ValueError) as error:
        eqxrl.envs.check_environment(ExtrasOnlyFromStep())
    message = short_message(error)
    assert "extras" in message and "'score'" in message and "reset" in message


def test_state_dtype_must_agree_between_reset_and_step():
    with pytest.raises(ValueError) as error:
        eqxrl.DQN(env=StateChangesDtype(), total_timesteps=20_000)
    message = short_message(error)
    assert "state" in message and "int32" in message and "float32" in message


@pytest.mark.parametrize(
    "env_id", ["CartPole-v1", "Pendulum-v1", "Snake-v0", "GridMaze-v0"]
)
def test_built_in_environments_keep_the_contract(env_id):
    eqxrl.envs.check_environment(eqxrl.envs.make(env_id))


# --------------------------------------------------------------------------------------
# Out-of-range actions


@pytest.mark.parametrize(
    "env,action",
    [(CartPole(), 7), (CartPole(), -1), (Snake(), 4), (GridMaze(), 9)],
)
def test_out_of_range_action_is_an_error_outside_jit(env, action):
    state, _ = env.reset(jr.key(0))
    with pytest.raises(ValueError, match=rf"action {action} is outside"):
        env.step(state, jnp.int32(action), jr.key(1))


def test_out_of_range_action_is_an_error_inside_jit():
    env = CartPole()
    state, _ = env.reset(jr.key(0))
    step = eqx.filter_jit(env.step)
    step(state, jnp.int32(1), jr.key(1))  # a valid action runs
    with pytest.raises(Exception, match="outside the action space Discrete"):
        jax.block_until_ready(step(state, jnp.int32(2), jr.key(1)))


def test_skip_action_checks_leaves_no_check_in_the_program():
    env = CartPole()
    state, _ = env.reset(jr.key(0))

    def checked(action):
        return env.step(state, action, jr.key(1))[1].observation

    def unchecked(action):
        with eqxrl.envs.skip_action_checks():
            return env.step(state, action, jr.key(1))[1].observation

    assert "error_if" in str(jax.make_jaxpr(checked)(jnp.int32(0)))
    assert "error_if" not in str(jax.make_jaxpr(unchecked)(jnp.int32(0)))


# --------------------------------------------------------------------------------------
# Sweepable numbers: concrete and traced


@pytest.mark.parametrize(
    "field,value",
    [
        ("gamma", 1.5),
        ("gamma", -3.0),
        ("gae_lambda", float("nan")),
        ("learning_rate", math.inf),
        ("ent_coef", math.inf),
        ("clip_eps", -0.1),
    ],
)
def test_ppo_rejects_concrete_out_of_range_numbers(field, value):
    env = eqxrl.envs.make("CartPole-v1")
    with pytest.raises(ValueError, match=field):
        eqxrl.PPO(env=env, **{field: value})


def test_ppo_rejects_out_of_range_numbers_swept_under_vmap():
    env = eqxrl.envs.make("CartPole-v1")

    @jax.vmap
    def gammas(gamma):
        return eqxrl.PPO(env=env, gamma=gamma).gamma

    np.testing.assert_allclose(gammas(jnp.array([0.9, 0.99])), [0.9, 0.99])
    with pytest.raises(Exception, match=r"gamma must lie in \[0, 1\]"):
        jax.block_until_ready(gammas(jnp.array([0.9, 1.5])))
    with pytest.raises(Exception, match=r"gamma must lie in \[0, 1\]"):
        jax.block_until_ready(gammas(jnp.array([-3.0, 0.9])))


def test_infinite_learning_rate_rejected_under_vmap():
    env = eqxrl.envs.make("CartPole-v1")
    rates = jax.vmap(lambda rate: eqxrl.DQN(env=env, learning_rate=rate).learning_rate)
    with pytest.raises(Exception, match="learning_rate must lie in"):
        jax.block_until_ready(rates(jnp.array([1e-3, jnp.inf])))


@pytest.mark.parametrize("algorithm", [eqxrl.DQN, eqxrl.IQN])
def test_value_based_buffer_sizes_are_checked(algorithm):
    env = eqxrl.envs.make("CartPole-v1")
    with pytest.raises(ValueError, match="batch_size=256 is larger than buffer_size"):
        algorithm(env=env, buffer_size=200, batch_size=256, learning_starts=100)
    with pytest.raises(ValueError, match="fewer than learning_starts=5000"):
        algorithm(env=env, buffer_size=2_000, learning_starts=5_000)
    # 100 // 3 rows of 3 environments keep 99 transitions, one short of 100.
    with pytest.raises(ValueError, match="holds 99 transitions"):
        algorithm(
            env=env, num_envs=3, buffer_size=100, batch_size=32, learning_starts=100
        )
    algorithm(env=env, num_envs=4, buffer_size=100, batch_size=32, learning_starts=100)


def test_sac_buffer_rounding_is_checked():
    env = eqxrl.envs.make("Pendulum-v1")
    with pytest.raises(ValueError, match="holds 99 transitions"):
        eqxrl.SAC(
            env=env, num_envs=3, buffer_size=100, batch_size=32, learning_starts=100
        )


# --------------------------------------------------------------------------------------
# The annealed learning rate


def test_annealed_learning_rate_stays_at_zero_past_the_end():
    env = eqxrl.envs.make("CartPole-v1")
    ppo = eqxrl.PPO(env=env, num_envs=4, num_steps=8, total_timesteps=64)
    assert ppo.num_iterations == 2
    state = ppo.init(jr.key(0))
    state, metrics = eqx.filter_jit(ppo.train_iterations)(state, 4)
    rates = np.asarray(metrics["learning_rate"])
    assert rates.shape == (4,)
    # Linear decay over the 2 iterations (read at each iteration's last update),
    # then zero: never a negative step size.
    assert rates[0] > rates[1] > 0
    np.testing.assert_array_equal(rates[2:], 0.0)


# --------------------------------------------------------------------------------------
# jax.jit on environment methods, as gymnax users type it


@pytest.mark.parametrize(
    "env_id", ["CartPole-v1", "Pendulum-v1", "Snake-v0", "GridMaze-v0"]
)
def test_jax_jit_of_step_and_reset(env_id):
    env = eqxrl.envs.make(env_id)
    reset = jax.jit(env.reset)
    step = jax.jit(env.step)
    state, timestep = reset(jr.key(0))
    action = env.action_space.sample(jr.key(1))
    state, jitted = step(state, action, jr.key(2))
    eager_state, _ = env.reset(jr.key(0))
    _, eager = env.step(eager_state, action, jr.key(2))
    np.testing.assert_allclose(jitted.observation, eager.observation, rtol=1e-6)
    assert float(jitted.reward) == pytest.approx(float(eager.reward))


# --------------------------------------------------------------------------------------
# PPO's largest possible entropy, from the mask


def test_max_entropy_counts_valid_actions_not_likely_ones():
    """A policy that has collapsed onto one action (probabilities 1 and 0) still has
    two valid actions: the largest entropy is log 2, not log 1."""
    env = eqxrl.envs.make("CartPole-v1")
    ppo = eqxrl.PPO(
        env=env, num_envs=4, num_steps=8, total_timesteps=64, learning_rate=1e6
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", eqxrl.EntropyCollapseWarning)
        _, metrics = ppo.train(jr.key(0))
    np.testing.assert_allclose(metrics["max_entropy"], math.log(2), rtol=1e-6)
    # The policy did collapse: what the bound is for.
    assert np.asarray(metrics["entropy"])[-1] < 1e-3


def test_entropy_collapse_warning_fires_for_a_huge_learning_rate():
    env = eqxrl.envs.make("CartPole-v1")
    ppo = eqxrl.PPO(
        env=env, num_envs=4, num_steps=16, total_timesteps=4096, learning_rate=1e6
    )
    with pytest.warns(eqxrl.EntropyCollapseWarning):
        ppo.train(jr.key(0))


def test_optax_learning_rate_read_by_name():
    """`current_learning_rate` finds the injected step size by name, whatever the
    optimizer chain's shape."""
    env = eqxrl.envs.make("CartPole-v1")
    ppo = eqxrl.PPO(env=env, anneal_lr=False, learning_rate=3e-4)
    optimizer = optax.chain(
        optax.identity(),
        optax.identity(),
        optax.inject_hyperparams(optax.adam)(learning_rate=3e-4),
    )
    params = {"w": jnp.zeros(3)}
    rate = ppo.current_learning_rate(optimizer.init(params))
    assert float(rate) == pytest.approx(3e-4)


def test_check_environment_accepts_states_holding_typed_keys():
    """Environments (Jumanji's among them) keep a `jax.random.key` in their state;
    comparing its key dtype between reset and step must not crash the check."""

    class KeyedCartPole(eqxrl.envs.AbstractWrapper):
        env: eqxrl.envs.AbstractEnvironment

        def reset(self, key):
            state, timestep = self.env.reset(key)
            return (state, key), timestep

        def step(self, state, action, key):
            inner, _ = state
            inner, timestep = self.env.step(inner, action, key)
            return (inner, key), timestep

        def inner_state(self, state):
            return state[0]

    eqxrl.envs.check_environment(KeyedCartPole(eqxrl.envs.make("CartPole-v1")))


def test_a_passed_check_is_remembered_by_shapes_and_a_failed_one_runs_again():
    """Building an algorithm checks its environment and network by tracing them;
    a second environment of the same structure and shapes, whatever its numbers,
    reuses that answer, while other shapes are checked anew and an error is raised
    every time. (The classes are made here: a class of its own per run, which no
    earlier check can have answered.)"""
    reset_traces = []  # a Python side effect of `reset`: it counts traces only

    class CountedCartPole(CartPole):
        unused: jax.Array = eqx.field(default_factory=lambda: jnp.zeros(()))

        def reset(self, key: PRNGKeyArray):
            reset_traces.append(self.unused.shape)
            return super().reset(key)

    class ShortCountedCartPole(CountedCartPole):
        """`reset` returns observations of shape (3,), `step` of shape (4,)."""

        def reset(self, key: PRNGKeyArray):
            state, timestep = super().reset(key)
            return state, eqx.tree_at(lambda t: t.observation, timestep, jnp.zeros(3))

    eqxrl.PPO(env=CountedCartPole(gravity=9.8), num_envs=4, num_steps=8)
    first = len(reset_traces)
    assert first > 0
    eqxrl.PPO(env=CountedCartPole(gravity=1.6), num_envs=4, num_steps=8)
    eqxrl.envs.check_environment(CountedCartPole(gravity=3.7))
    assert len(reset_traces) == first  # the same shapes: nothing traced again

    # Another shape of a leaf is another program: checked again.
    eqxrl.envs.check_environment(CountedCartPole(unused=jnp.zeros(2)))
    assert reset_traces[first:] == [(2,)] * (len(reset_traces) - first) != []

    for _ in range(2):
        with pytest.raises(ValueError, match=r"observation as float32\[3\] but step"):
            eqxrl.PPO(env=ShortCountedCartPole(), num_envs=4, num_steps=8)
