"""Environments for memory (recurrent) policies: the `HideObservation` wrapper,
`make("StatelessCartPole-v1")`, and gymnax's bsuite `MemoryChain` through
`from_gymnax`."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from jaxtyping import Array, Float, PRNGKeyArray

import eqxrl
from eqxrl.envs import (
    AbstractEnvironment,
    AbstractMultiAgentEnvironment,
    AutoReset,
    Box,
    CartPole,
    Discrete,
    HideObservation,
    TimeLimit,
    TimeStep,
    check_environment,
)


def rollout(env, actions, key):
    """Reset `env` (no auto-reset added), step it through `actions`; the states and
    timesteps of the reset and of every step, stacked on a leading time axis."""
    reset_key, step_key = jr.split(key)
    state, first = env.reset(reset_key)

    def step(state, inputs):
        action, key = inputs
        state, timestep = env.step(state, action, key)
        return state, (state, timestep)

    keys = jr.split(step_key, len(actions))
    _, (states, timesteps) = jax.lax.scan(step, state, (actions, keys))
    stack = lambda a, b: jnp.concatenate([a[None], b])  # noqa: E731
    return jax.tree.map(stack, (state, first), (states, timesteps))


def random_actions(num_steps, key=jr.key(7)):
    return jr.randint(key, (num_steps,), 0, 2, dtype=jnp.int32)


# -- HideObservation ------------------------------------------------------------------


def test_observation_is_the_kept_entries_at_reset_and_after_steps():
    hidden = HideObservation(CartPole(), hidden=(1,))
    assert hidden.kept == (0, 2, 3)
    actions = random_actions(40)
    full_states, full = jax.jit(rollout, static_argnums=0)(
        CartPole(), actions, jr.key(0)
    )
    states, timesteps = jax.jit(rollout, static_argnums=0)(hidden, actions, jr.key(0))
    assert np.asarray(full.terminated).any()  # the episode ended within the rollout
    assert timesteps.observation.shape == (41, 3)
    assert timesteps.observation.dtype == jnp.float32
    np.testing.assert_array_equal(
        timesteps.observation, np.asarray(full.observation)[:, [0, 2, 3]]
    )
    # The state is the wrapped environment's, untouched: the entries are hidden
    # from the observation only.
    np.testing.assert_array_equal(states.physics, full_states.physics)
    for field in ("reward", "terminated", "truncated"):
        np.testing.assert_array_equal(getattr(timesteps, field), getattr(full, field))


@pytest.mark.parametrize("auto_reset_inside", [True, False])
def test_final_observation_is_hidden_too(auto_reset_inside):
    """Whichever way round `AutoReset` and the wrapper are composed, neither the
    observation nor `extras["final_observation"]` (what PPO's critic bootstraps
    from) shows a hidden entry."""
    if auto_reset_inside:
        env = HideObservation(AutoReset(CartPole()), hidden=(1, 3))
    else:
        env = AutoReset(HideObservation(CartPole(), hidden=(1, 3)))
    actions = random_actions(60)
    _, full = jax.jit(rollout, static_argnums=0)(
        AutoReset(CartPole()), actions, jr.key(1)
    )
    _, timesteps = jax.jit(rollout, static_argnums=0)(env, actions, jr.key(1))
    assert np.asarray(full.terminated).sum() >= 2  # episodes ended and restarted
    for got, want in (
        (timesteps.observation, full.observation),
        (timesteps.extras["final_observation"], full.extras["final_observation"]),
    ):
        assert got.shape == (61, 2)
        np.testing.assert_array_equal(got, np.asarray(want)[:, [0, 2]])
    check_environment(env)


def test_observation_space_is_the_kept_bounds():
    inner = CartPole().observation_space
    space = HideObservation(CartPole(), hidden=(0, 3)).observation_space
    assert isinstance(space, Box)
    assert space.shape == (2,)
    np.testing.assert_array_equal(space.low, np.asarray(inner.low)[[1, 2]])
    np.testing.assert_array_equal(space.high, np.asarray(inner.high)[[1, 2]])
    # One index or any sequence of them (a NumPy array too) is accepted.
    assert HideObservation(CartPole(), hidden=2).kept == (0, 1, 3)
    assert HideObservation(CartPole(), hidden=np.array([3, 1])).hidden == (3, 1)
    assert HideObservation(CartPole(), hidden=np.array([3, 1])).kept == (0, 2)


def test_render_draws_the_wrapped_environment():
    env = HideObservation(CartPole(), hidden=(1, 3))
    state, _ = env.reset(jr.key(0))
    np.testing.assert_array_equal(env.render(state), CartPole().render(state))


class TwoAgentVectors(AbstractMultiAgentEnvironment):
    """Two agents, each observing a vector of 3 entries that counts the steps."""

    num_agents: int = 2

    @property
    def observation_space(self) -> Box:
        return Box(-10.0, 10.0, shape=(3,))

    @property
    def action_space(self) -> Discrete:
        return Discrete(2)

    def _timestep(self, count):
        agent = jnp.arange(2, dtype=jnp.float32)[:, None]
        entry = jnp.arange(3, dtype=jnp.float32)[None, :]
        return TimeStep(
            observation=count + 10 * agent + entry,
            reward=jnp.zeros(2, jnp.float32),
            terminated=jnp.bool_(False),
            truncated=jnp.bool_(False),
        )

    def reset(self, key: PRNGKeyArray) -> tuple[Float[Array, ""], TimeStep]:
        count = jnp.float32(0.0)
        return count, self._timestep(count)

    def step(self, state, action, key: PRNGKeyArray):
        return state + 1, self._timestep(state + 1)


def test_multi_agent_observations_hide_the_same_entries_for_every_agent():
    env = HideObservation(TwoAgentVectors(), hidden=(1,))
    assert env.num_agents == 2
    assert env.observation_space.shape == (2,)
    check_environment(env)
    state, timestep = env.reset(jr.key(0))
    _, timestep = env.step(state, jnp.zeros(2, jnp.int32), jr.key(1))
    np.testing.assert_array_equal(timestep.observation, [[1.0, 3.0], [11.0, 13.0]])


class DiscreteObservation(AbstractEnvironment):
    @property
    def observation_space(self) -> Discrete:
        return Discrete(3)

    @property
    def action_space(self) -> Discrete:
        return Discrete(2)

    def reset(self, key):
        raise NotImplementedError

    def step(self, state, action, key):
        raise NotImplementedError


@pytest.mark.parametrize(
    "env, hidden, message",
    [
        (CartPole(), (1, 4), r"index 4 is out of range for observations of shape "
         r"\(4,\); indices are the integers 0 to 3\."),
        (CartPole(), (-1,), r"index -1 is negative; indices are the integers 0 to 3 "
         r"\(the last entry is 3\)\."),
        (CartPole(), (1.0,), r"1\.0 is not an integer index"),
        (CartPole(), (3, 1, 3), r"index 3 is listed more than once; list each "
         r"hidden index once\."),
        (CartPole(), (3, 0, 1, 2), r"hides all 4 entries of the observation, which "
         r"would leave nothing to observe; keep at least one entry visible\."),
        (eqxrl.envs.Snake(), (1,), r"the wrapped environment Snake has a Box of shape "
         r"\(10, 10, 3\) as its observation_space, but HideObservation hides entries "
         r"of a 1-D Box \(a vector\); reshape it to one vector in your environment "
         r"\(e\.g\. \(300,\)\)"),
        (TimeLimit(DiscreteObservation(), 5), (0,), r"the wrapped environment "
         r"TimeLimit\(DiscreteObservation\) has a Discrete space as its "
         r"observation_space, but HideObservation hides entries of a 1-D Box"),
    ],
)  # fmt: skip
def test_bad_arguments_say_what_to_do(env, hidden, message):
    with pytest.raises(ValueError, match=r"^HideObservation\(hidden=.*" + message):
        HideObservation(env, hidden=hidden)


# -- StatelessCartPole-v1 -------------------------------------------------------------


def test_stateless_cartpole_observes_position_and_angle():
    env = eqxrl.envs.make("StatelessCartPole-v1")
    assert "StatelessCartPole-v1" in eqxrl.envs.registered_names()
    assert isinstance(env, TimeLimit) and env.max_episode_steps == 500
    assert env.observation_space.shape == (2,)
    assert env.action_space == Discrete(2)
    check_environment(env)
    _, timestep = env.reset(jr.key(0))
    assert timestep.observation.shape == (2,)
    assert timestep.observation.dtype == jnp.float32
    # The wrapper is recognized from the chain, and keyword arguments still reach
    # the physics and the limit.
    assert [type(part).__name__ for part in eqxrl.envs.unwrap(env)] == [
        "TimeLimit",
        "HideObservation",
        "CartPole",
    ]
    heavy = eqxrl.envs.make("StatelessCartPole-v1", gravity=20.0, max_episode_steps=3)
    assert float(eqxrl.envs.unwrap(heavy)[-1].gravity) == 20.0
    _, timesteps = rollout(heavy, jnp.array([0, 1, 0], jnp.int32), jr.key(2))
    assert np.asarray(timesteps.truncated).tolist() == [False, False, False, True]


def test_stateless_cartpole_has_cartpole_v1_dynamics():
    """Under the same keys and actions, the full state inside (physics and step
    count), rewards and flags are those of CartPole-v1, and the observations (the
    final ones included) are its `[x, theta]`."""
    actions = random_actions(80, jr.key(3))
    keys = jr.split(jr.key(4), 3)
    run = jax.jit(
        jax.vmap(rollout, in_axes=(None, None, 0)), static_argnums=0
    )  # three seeds
    stateless = AutoReset(eqxrl.envs.make("StatelessCartPole-v1"))
    full = AutoReset(eqxrl.envs.make("CartPole-v1"))
    states, timesteps = run(stateless, actions, keys)
    full_states, full_timesteps = run(full, actions, keys)
    assert np.asarray(full_timesteps.terminated).sum() >= 6
    assert eqx.tree_equal(states, full_states)
    for field in ("reward", "terminated", "truncated"):
        np.testing.assert_array_equal(
            getattr(timesteps, field), getattr(full_timesteps, field)
        )
    np.testing.assert_array_equal(
        timesteps.observation, np.asarray(full_timesteps.observation)[..., [0, 2]]
    )
    np.testing.assert_array_equal(
        timesteps.extras["final_observation"],
        np.asarray(full_timesteps.extras["final_observation"])[..., [0, 2]],
    )


# -- gymnax's bsuite MemoryChain through from_gymnax ----------------------------------

MEMORY_LENGTH = 5  # gymnax's default: the episode is MEMORY_LENGTH + 1 steps
CONTEXT = 2  # observation: [time remaining, query, context] (one context bit)


@pytest.fixture
def memory_chain():
    gymnax = pytest.importorskip("gymnax")
    gymnax_env, params = gymnax.make("MemoryChain-bsuite")
    assert params.memory_length == MEMORY_LENGTH
    # gymnax's reward arithmetic mixes bools and floats: standard promotion.
    with jax.numpy_dtype_promotion("standard"):
        yield eqxrl.envs.from_gymnax(gymnax_env, params)


def play(env, policy, keys):
    """One episode per key (vmapped, jitted), acting with `policy(memory,
    observation) -> (memory, action)`, where `memory` starts as the reset
    observation; the reset timesteps, the step timesteps and the contexts."""

    def episode(key):
        reset_key, step_key = jr.split(key)
        state, first = env.reset(reset_key)

        def step(carry, key):
            state, memory, observation = carry
            memory, action = policy(memory, observation)
            state, timestep = env.step(state, action, key)
            return (state, memory, timestep.observation), timestep

        keys = jr.split(step_key, MEMORY_LENGTH + 1)
        carry = (state, first.observation, first.observation)
        _, timesteps = jax.lax.scan(step, carry, keys)
        return first, timesteps, state.context[state.query]

    return jax.jit(jax.vmap(episode))(keys)


def remembers_the_context(memory, observation):
    """The oracle: it keeps the first observation and answers its context."""
    return memory, (memory[CONTEXT] > 0).astype(jnp.int32)


def reads_the_current_observation(memory, observation):
    """Without memory: the context entry of what it sees now (0 at the end)."""
    return memory, (observation[CONTEXT] > 0).astype(jnp.int32)


def test_memory_chain_resets_and_steps_under_jit_and_vmap(memory_chain):
    env = memory_chain
    assert env.observation_space.shape == (3,)
    assert env.action_space == Discrete(2)
    check_environment(env)
    check_environment(AutoReset(env))
    keys = jr.split(jr.key(0), 8)
    states, timesteps = jax.jit(jax.vmap(AutoReset(env).reset))(keys)
    step = jax.jit(jax.vmap(AutoReset(env).step))
    ended = []
    for t in range(2 * (MEMORY_LENGTH + 1)):
        actions = jnp.full(8, t % 2, jnp.int32)
        states, timesteps = step(states, actions, jr.split(jr.key(t + 1), 8))
        assert timesteps.observation.shape == (8, 3)
        assert timesteps.reward.dtype == jnp.float32
        ended.append(np.asarray(timesteps.terminated))
    ended = np.stack(ended)
    # Every episode terminates after MEMORY_LENGTH + 1 steps, never truncated.
    assert ended[[MEMORY_LENGTH, 2 * MEMORY_LENGTH + 1]].all()
    assert ended.sum() == 2 * 8


def test_memory_chain_shows_the_context_only_at_the_start(memory_chain):
    """The context (+1 or -1) is in the reset observation and in the first step's
    (bsuite's step returns the observation from before it); every later observation
    has 0 there. Reward is 0 until the last step, then +1 or -1."""
    first, timesteps, context = play(
        memory_chain, remembers_the_context, jr.split(jr.key(0), 64)
    )
    context = np.asarray(context)
    assert 0 < context.sum() < 64  # both contexts occur
    signed = 2.0 * context - 1.0
    np.testing.assert_array_equal(first.observation[:, CONTEXT], signed)
    np.testing.assert_array_equal(timesteps.observation[:, 0, CONTEXT], signed)
    assert not np.asarray(timesteps.observation)[:, 1:, CONTEXT].any()
    rewards = np.asarray(timesteps.reward)
    assert not rewards[:, :MEMORY_LENGTH].any()
    assert set(np.abs(rewards[:, MEMORY_LENGTH]).tolist()) == {1.0}
    terminated = np.asarray(timesteps.terminated)
    assert terminated[:, MEMORY_LENGTH].all() and not terminated[:, :-1].any()
    assert not np.asarray(timesteps.truncated).any()


def test_memory_chain_rewards_remembering_the_context(memory_chain):
    """Answering the remembered context always earns +1; reading the current
    observation instead (whose context entry is 0 by then) is right about half
    the time."""
    keys = jr.split(jr.key(1), 2000)
    _, oracle, _ = play(memory_chain, remembers_the_context, keys)
    _, memoryless, _ = play(memory_chain, reads_the_current_observation, keys)
    assert (np.asarray(oracle.reward)[:, -1] == 1.0).all()
    correct = np.asarray(memoryless.reward)[:, -1] == 1.0
    assert 0.45 < correct.mean() < 0.55
