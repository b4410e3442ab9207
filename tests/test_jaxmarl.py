"""`from_jaxmarl`: JaxMARL's dict-per-agent environments as eqxrl multi-agent
environments (stacked agents, masks from available actions, termination vs
truncation by the time limit, refusals naming the agents or space)."""

import contextlib
import re
import warnings
from pathlib import Path

import equinox as eqx
import jax
import jax.lax as lax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

with warnings.catch_warnings():
    # JaxMARL imports jaxopt, which warns on import that it is unmaintained.
    warnings.filterwarnings("ignore", message="JAXopt is no longer maintained")
    jaxmarl = pytest.importorskip("jaxmarl")

from jaxmarl.environments.multi_agent_env import (  # noqa: E402
    MultiAgentEnv,
    State,
)
from jaxmarl.environments.smax import map_name_to_scenario  # noqa: E402
from jaxmarl.environments.spaces import (
    Box as JaxMARLBox,  # noqa: E402
    Discrete as JaxMARLDiscrete,  # noqa: E402
)
from jaxmarl.wrappers.baselines import LogWrapper  # noqa: E402

from eqxrl.envs import (  # noqa: E402
    GLOBAL_STATE,
    AutoReset,
    Box,
    Discrete,
    EpisodeStatistics,
    FromJaxMARL,
    FromJaxMARLState,
    check_environment,
    from_jaxmarl,
    global_state_space_of,
    num_agents_of,
    skip_action_checks,
)


@contextlib.contextmanager
def jaxmarl_rules():
    """JAX's default promotion rules, which JaxMARL's code needs when a test calls
    it directly (conftest.py raises on rank promotion and promotes dtypes
    strictly); `from_jaxmarl` sets them itself."""
    with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
        yield


class Relay(MultiAgentEnv):
    """A tiny JaxMARL environment whose episodes end both ways: agent_0's action 2
    ends it (a termination), and `max_steps` steps end it (the time limit).
    agent_1's action 2 is available only on the first step; rewards are the step
    count times the agent's number. agent_1 is done from step 2 on, before the
    episode ends; the infos hold one entry of each kind the adapter converts."""

    def __init__(self, max_steps=3, agent_1_actions=3):
        super().__init__(num_agents=2)
        self.max_steps = max_steps
        self.observation_spaces = {a: JaxMARLBox(0.0, 9.0, (2,)) for a in self.agents}
        self.action_spaces = {
            "agent_0": JaxMARLDiscrete(3),
            "agent_1": JaxMARLDiscrete(agent_1_actions),
        }

    def get_obs(self, state):
        return {
            agent: jnp.stack([state.step, i]).astype(jnp.float32)
            for i, agent in enumerate(self.agents)
        }

    def reset(self, key):
        state = State(done=jnp.bool_(False), step=jnp.int32(0))
        return self.get_obs(state), state

    def step_env(self, key, state, actions):
        step = state.step + 1
        done = (actions["agent_0"] == 2) | (step >= self.max_steps)
        state = State(done=done, step=step)
        rewards = {
            agent: (step * (i + 1)).astype(jnp.float32)
            for i, agent in enumerate(self.agents)
        }
        dones = {"agent_0": done, "agent_1": done | (step >= 2), "__all__": done}
        infos = {
            # keyed by agent: stacked in agent order
            "distance": {"agent_1": 10.0 * step, "agent_0": -1.0 * step},
            "step": step,  # the episode's: kept as it is
            "bonus": 0.5,  # a Python number: a float32 array
            "name": "relay",  # neither a number nor an array: dropped
            # keyed by agent, different shapes: kept as a dict
            "ragged": {"agent_0": jnp.zeros(2), "agent_1": jnp.ones(3) * step},
        }
        return self.get_obs(state), state, rewards, dones, infos

    def get_avail_actions(self, state):
        extra = self.action_spaces["agent_1"].n - 3
        agent_1 = jnp.stack([1, 1, state.step < 1, *[1] * extra])
        return {
            "agent_0": jnp.ones(3, jnp.uint8),
            "agent_1": agent_1.astype(jnp.uint8),
        }


# --------------------------------------------------------------------------------------
# Conversion


def test_mpe_simple_spread_spaces_and_contract():
    env = from_jaxmarl("MPE_simple_spread_v3")
    assert isinstance(env, FromJaxMARL)
    check_environment(env)
    assert num_agents_of(env) == 3 and num_agents_of(AutoReset(env)) == 3
    assert isinstance(env.observation_space, Box)
    assert env.observation_space.shape == (18,)
    assert env.action_space == Discrete(5)
    assert env.time_limit == 25  # MPE's max_steps
    state, timestep = env.reset(jr.key(0))
    assert isinstance(state, FromJaxMARLState)
    assert timestep.observation.shape == (3, 18)
    assert timestep.observation.dtype == jnp.float32
    assert timestep.reward.shape == (3,) and timestep.reward.dtype == jnp.float32
    assert timestep.terminated.shape == () and timestep.truncated.shape == ()
    assert timestep.action_mask is None  # MPE has no available actions
    assert set(timestep.extras) == {"agent_dones", "info", GLOBAL_STATE}
    assert timestep.extras["info"] == {}  # MPE's infos are empty
    np.testing.assert_array_equal(timestep.extras["agent_dones"], [False] * 3)


def test_matches_jaxmarl_step_by_step():
    """For the same keys and actions, eqxrl's step gives JaxMARL's `step_env`
    exactly, and JaxMARL's `step` (which auto-resets) until the episode ends."""
    jaxmarl_env = jaxmarl.make("MPE_simple_spread_v3")
    env = from_jaxmarl(jaxmarl_env)
    agents = jaxmarl_env.agents

    def stack(tree):
        return np.stack([np.asarray(tree[agent]) for agent in agents])

    # Unjitted, so both sides run JaxMARL's own compiled `step_env`.
    state, timestep = env.reset(jr.key(0))
    with jaxmarl_rules():
        observations, reference = jaxmarl_env.reset(jr.key_data(jr.key(0)))
    np.testing.assert_array_equal(timestep.observation, stack(observations))
    jax.tree.map(np.testing.assert_array_equal, state.env_state, reference)
    # The same state with eqxrl's dtypes (JaxMARL's reset leaves Python ints in
    # it), so that the reference reuses the compiled `step_env`.
    reference = state.env_state
    rng = np.random.default_rng(0)
    for t in range(1, 27):
        actions = rng.integers(0, 5, len(agents)).astype(np.int32)
        key = jr.key(t)
        state, timestep = env.step(state, jnp.asarray(actions), key)
        as_dict = {agent: jnp.int32(actions[i]) for i, agent in enumerate(agents)}
        step_key, _ = jr.split(jr.key_data(key))
        with jaxmarl_rules():
            auto_reset = jaxmarl_env.step(jr.key_data(key), reference, as_dict)
            expected = jaxmarl_env.step_env(step_key, reference, as_dict)
        observations, reference, rewards, dones, _ = expected
        np.testing.assert_array_equal(timestep.observation, stack(observations))
        np.testing.assert_array_equal(timestep.reward, stack(rewards))
        done = bool(dones["__all__"])
        if not done:  # JaxMARL's public step, another compiled program
            np.testing.assert_allclose(
                timestep.observation, stack(auto_reset[0]), rtol=1e-6, atol=1e-6
            )
        assert bool(timestep.terminated) is False
        assert bool(timestep.truncated) is done  # MPE ends only by its time limit
        if done:
            break
    assert t == 26  # MPE's episodes: done once 25 steps have passed
    # JaxMARL's step started a new episode; eqxrl's kept the final observation.
    assert not np.allclose(timestep.observation, stack(auto_reset[0]))
    assert int(state.step_count) == 26


def test_termination_truncation_and_masks_on_a_relay():
    env = from_jaxmarl(Relay())
    check_environment(env)
    assert env.observation_space == Box(0.0, 9.0, (2,))
    assert env.action_space == Discrete(3)
    state, timestep = env.reset(jr.key(0))
    np.testing.assert_array_equal(timestep.observation, [[0, 0], [0, 1]])
    np.testing.assert_array_equal(
        timestep.action_mask, [[True, True, True], [True, True, True]]
    )
    assert timestep.action_mask.dtype == jnp.bool_
    flags = []
    for t in range(3):
        state, timestep = env.step(state, jnp.array([0, 1], jnp.int32), jr.key(t))
        flags.append((bool(timestep.terminated), bool(timestep.truncated)))
        np.testing.assert_array_equal(timestep.reward, [t + 1, 2 * (t + 1)])
        # agent_1's action 2 is available only before the first step.
        np.testing.assert_array_equal(timestep.action_mask[1], [True, True, False])
    assert flags == [(False, False), (False, False), (False, True)]

    # agent_0's action 2 ends the episode before the time limit: terminated.
    state, _ = env.reset(jr.key(0))
    state, timestep = env.step(state, jnp.array([2, 0], jnp.int32), jr.key(0))
    assert bool(timestep.terminated) and not bool(timestep.truncated)
    # ... and on the limit's step it counts as truncated (the documented rule).
    state, _ = env.reset(jr.key(0))
    for t in range(3):
        state, timestep = env.step(state, jnp.array([2 * (t == 2), 0]), jr.key(t))
    assert bool(timestep.truncated) and not bool(timestep.terminated)

    # time_limit=None: every ending terminates; another limit moves the boundary.
    never = from_jaxmarl(Relay(), time_limit=None)
    later = from_jaxmarl(Relay(), time_limit=4)
    for env, want in ((never, (True, False)), (later, (True, False))):
        state, _ = env.reset(jr.key(0))
        for t in range(3):
            state, timestep = env.step(state, jnp.array([0, 0]), jr.key(t))
        assert (bool(timestep.terminated), bool(timestep.truncated)) == want
    with pytest.raises(ValueError, match="time_limit=0 must be a positive int"):
        from_jaxmarl(Relay(), time_limit=0)


def test_per_agent_dones_and_infos_are_extras():
    """JaxMARL's per-agent dones and infos are in `extras`, with the same structure
    after `reset` (zeros) as after `step`, through AutoReset and a compiled scan."""
    env = from_jaxmarl(Relay())
    check_environment(env)
    state, timestep = env.reset(jr.key(0))
    np.testing.assert_array_equal(timestep.extras["agent_dones"], [False, False])
    info = timestep.extras["info"]
    assert set(info) == {"distance", "step", "bonus", "ragged"}  # "name" dropped
    np.testing.assert_array_equal(info["distance"], [0.0, 0.0])
    assert info["bonus"].dtype == jnp.float32 and float(info["bonus"]) == 0.0
    assert set(info["ragged"]) == {"agent_0", "agent_1"}
    reset_structure = jax.eval_shape(lambda: timestep)

    dones = []
    for t in range(1, 4):
        state, timestep = env.step(state, jnp.array([0, 0], jnp.int32), jr.key(t))
        assert jax.eval_shape(lambda: timestep) == reset_structure
        dones.append(np.asarray(timestep.extras["agent_dones"]).tolist())
        info = timestep.extras["info"]
        # agent order, not the info dict's order
        np.testing.assert_array_equal(info["distance"], [-t, 10.0 * t])
        assert info["distance"].dtype == jnp.float32
        assert int(info["step"]) == t and info["step"].dtype == jnp.int32
        assert float(info["bonus"]) == 0.5
        np.testing.assert_array_equal(info["ragged"]["agent_1"], [t, t, t])
    # agent_1 is done from step 2, before the episode ends on step 3.
    assert dones == [[False, False], [False, True], [True, True]]
    assert bool(timestep.truncated)

    # AutoReset keeps the final step's extras on the step that resets, and a
    # compiled scan carries the timestep from reset to step.
    auto = AutoReset(env)

    @eqx.filter_jit
    def rollout(key):
        carry = auto.reset(key)

        def body(carry, key):
            state, _ = carry
            state, timestep = auto.step(state, jnp.array([0, 0], jnp.int32), key)
            return (state, timestep), timestep

        return lax.scan(body, carry, jr.split(key, 7))[1]

    timesteps = rollout(jr.key(0))
    agent_dones = np.asarray(timesteps.extras["agent_dones"])
    np.testing.assert_array_equal(agent_dones[:, 0], [0, 0, 1, 0, 0, 1, 0])
    np.testing.assert_array_equal(agent_dones[:, 1], [0, 1, 1, 0, 1, 1, 0])
    np.testing.assert_array_equal(timesteps.extras["info"]["step"], [1, 2, 3] * 2 + [1])


def test_action_checks():
    env = from_jaxmarl(Relay())
    state, _ = env.reset(jr.key(0))
    with pytest.raises(ValueError, match=r"outside the action space Discrete\(3\)"):
        env.step(state, jnp.array([0, 3], jnp.int32), jr.key(0))
    with pytest.raises(ValueError, match=r"give one action per agent, shape \(2,\)"):
        env.step(state, jnp.array([0, 1, 2], jnp.int32), jr.key(0))


def test_smax_available_actions_are_masks():
    scenario = map_name_to_scenario("3m")
    jaxmarl_env = jaxmarl.make("SMAX", scenario=scenario)
    env = from_jaxmarl(jaxmarl_env)
    check_environment(env)
    assert num_agents_of(env) == 6  # 3 allies and 3 enemies, all controlled
    assert env.action_space == Discrete(8)
    state, timestep = env.reset(jr.key(0))  # unjitted: JaxMARL's compiled calls
    for t in range(3):
        with jaxmarl_rules():
            avail = jaxmarl_env.get_avail_actions(state.env_state)
        expected = np.stack([np.asarray(avail[a]) != 0 for a in jaxmarl_env.agents])
        np.testing.assert_array_equal(timestep.action_mask, expected)
        assert timestep.action_mask.shape == (6, 8)
        actions = jnp.argmax(timestep.action_mask, axis=1).astype(jnp.int32)
        state, timestep = env.step(state, actions, jr.key(t))


def test_continuous_mpe_actions():
    jaxmarl_env = jaxmarl.make("MPE_simple_spread_v3", action_type="Continuous")
    env = from_jaxmarl(jaxmarl_env)
    assert env.action_space == Box(0.0, 1.0, (5,))
    start, _ = env.reset(jr.key(0))
    actions = jnp.full((3, 5), 0.5, jnp.float32).at[:, 1].set(1.0)
    state, timestep = env.step(start, actions, jr.key(1))
    step_key, _ = jr.split(jr.key_data(jr.key(1)))
    as_dict = {agent: actions[i] for i, agent in enumerate(jaxmarl_env.agents)}
    with jaxmarl_rules():
        observations, *_ = jaxmarl_env.step_env(step_key, start.env_state, as_dict)
    np.testing.assert_array_equal(timestep.observation[2], observations["agent_2"])


def test_random_policy_rollout():
    """A vmapped, auto-resetting random rollout in one compiled scan: every episode
    is 26 steps and ends truncated, with one return per agent."""
    env = EpisodeStatistics(from_jaxmarl("MPE_simple_spread_v3"))
    env = AutoReset(env)
    num_envs, num_steps = 4, 60

    @eqx.filter_jit
    def rollout(env, key):
        states, timesteps = jax.vmap(env.reset)(jr.split(key, num_envs))

        def body(carry, key):
            states, _ = carry
            action_key, step_key = jr.split(key)
            actions = jr.randint(action_key, (num_envs, 3), 0, 5, jnp.int32)
            states, timesteps = jax.vmap(env.step)(
                states, actions, jr.split(step_key, num_envs)
            )
            return (states, timesteps), timesteps

        _, timesteps = lax.scan(body, (states, timesteps), jr.split(key, num_steps))
        return timesteps

    timesteps = rollout(env, jr.key(0))
    assert timesteps.observation.shape == (num_steps, num_envs, 3, 18)
    assert timesteps.reward.shape == (num_steps, num_envs, 3)
    truncated = np.asarray(timesteps.truncated)
    assert not np.asarray(timesteps.terminated).any()
    steps = np.flatnonzero(truncated[:, 0]) + 1
    np.testing.assert_array_equal(steps, [26, 52])  # every env, every 26 steps
    assert truncated.sum() == 2 * num_envs
    returns = np.asarray(timesteps.extras["episode_return"])[truncated]
    assert returns.shape == (2 * num_envs, 3)
    assert np.isfinite(returns).all() and (returns < 0).all()  # distance costs


# --------------------------------------------------------------------------------------
# Global state


def test_mpe_global_state_is_the_agents_observations_concatenated():
    """Without a world state of its own (MPE), the global state is the agents'
    observations concatenated in their order, one copy, at reset and after a step,
    unjitted and under `vmap` and `jit`."""
    jaxmarl_env = jaxmarl.make("MPE_simple_spread_v3")
    env = from_jaxmarl(jaxmarl_env)
    check_environment(env)
    assert env.global_state_space == Box(-np.inf, np.inf, (54,))
    assert global_state_space_of(AutoReset(env)) == env.global_state_space
    agents = jaxmarl_env.agents

    def concatenated(observations):
        return np.concatenate([np.asarray(observations[agent]) for agent in agents])

    state, timestep = env.reset(jr.key(0))
    with jaxmarl_rules():
        observations, _ = jaxmarl_env.reset(jr.key_data(jr.key(0)))
    global_state = timestep.extras[GLOBAL_STATE]
    assert global_state.shape == (54,) and global_state.dtype == jnp.float32
    np.testing.assert_array_equal(global_state, concatenated(observations))
    np.testing.assert_array_equal(global_state, timestep.observation.reshape(-1))
    actions = jnp.array([1, 2, 4], jnp.int32)
    step_key, _ = jr.split(jr.key_data(jr.key(1)))
    as_dict = {agent: actions[i] for i, agent in enumerate(agents)}
    with jaxmarl_rules():
        observations, *_ = jaxmarl_env.step_env(step_key, state.env_state, as_dict)
    state, timestep = env.step(state, actions, jr.key(1))
    np.testing.assert_array_equal(
        timestep.extras[GLOBAL_STATE], concatenated(observations)
    )

    @eqx.filter_jit
    def reset_and_step(keys):
        states, timesteps = jax.vmap(env.reset)(keys)
        actions = jnp.zeros((len(keys), 3), jnp.int32)
        return timesteps, jax.vmap(env.step)(states, actions, keys)[1]

    for timesteps in reset_and_step(jr.split(jr.key(2), 4)):
        global_state = timesteps.extras[GLOBAL_STATE]
        assert global_state.shape == (4, 54)
        np.testing.assert_array_equal(
            global_state, timesteps.observation.reshape(4, 54)
        )


def test_smax_global_state_is_jaxmarl_world_state():
    """SMAX's own world state (every unit's features and teams, what JaxMARL's
    MAPPO baseline gives its critic) is the global state, instead of an extras
    entry of its own."""
    jaxmarl_env = jaxmarl.make("SMAX", scenario=map_name_to_scenario("3m"))
    env = from_jaxmarl(jaxmarl_env)
    check_environment(env)
    assert env.global_state_space == Box(-np.inf, np.inf, (72,))
    state, timestep = env.reset(jr.key(0))  # unjitted: JaxMARL's compiled calls
    assert "world_state" not in timestep.extras
    for t in range(3):
        with jaxmarl_rules():
            world_state = jaxmarl_env.get_world_state(state.env_state)
        assert timestep.extras[GLOBAL_STATE].dtype == jnp.float32
        np.testing.assert_array_equal(timestep.extras[GLOBAL_STATE], world_state)
        actions = jnp.argmax(timestep.action_mask, axis=1).astype(jnp.int32)
        state, timestep = env.step(state, actions, jr.key(t))


# --------------------------------------------------------------------------------------
# Agents that differ: padded


def test_differing_observations_are_zero_padded():
    """MPE simple adversary: the adversary's 8 observation entries are padded with
    zeros to the good agents' 10; the global state concatenates the unpadded
    observations."""
    jaxmarl_env = jaxmarl.make("MPE_simple_adversary_v3")
    env = from_jaxmarl(jaxmarl_env)
    check_environment(env)
    assert env.observation_space == Box(-np.inf, np.inf, (10,))
    assert env.action_space == Discrete(5)
    assert env.global_state_space.shape == (8 + 10 + 10,)
    agents = jaxmarl_env.agents  # adversary_0, agent_0, agent_1

    def check(timestep, observations):
        observation = np.asarray(timestep.observation)
        assert observation.shape == (3, 10)
        np.testing.assert_array_equal(observation[0, :8], observations["adversary_0"])
        np.testing.assert_array_equal(observation[0, 8:], 0.0)  # the padding
        np.testing.assert_array_equal(observation[1], observations["agent_0"])
        np.testing.assert_array_equal(observation[2], observations["agent_1"])
        np.testing.assert_array_equal(
            timestep.extras[GLOBAL_STATE],
            np.concatenate([observations[agent] for agent in agents]),
        )
        assert timestep.action_mask is None  # every agent has Discrete(5)

    state, timestep = env.reset(jr.key(0))
    with jaxmarl_rules():
        observations, _ = jaxmarl_env.reset(jr.key_data(jr.key(0)))
    check(timestep, observations)
    actions = jnp.array([1, 2, 3], jnp.int32)
    step_key, _ = jr.split(jr.key_data(jr.key(1)))
    as_dict = {agent: actions[i] for i, agent in enumerate(agents)}
    with jaxmarl_rules():
        observations, *_ = jaxmarl_env.step_env(step_key, state.env_state, as_dict)
    state, timestep = env.step(state, actions, jr.key(1))
    check(timestep, observations)

    # Simple tag: the good agent's 14 entries padded to the adversaries' 16.
    tag = from_jaxmarl("MPE_simple_tag_v3")
    _, timestep = eqx.filter_jit(tag.reset)(jr.key(0))
    assert timestep.observation.shape == (4, 16)
    np.testing.assert_array_equal(timestep.observation[3, 14:], 0.0)
    assert timestep.extras[GLOBAL_STATE].shape == (3 * 16 + 14,)


def test_differing_action_counts_are_padded_and_masked():
    """MPE speaker-listener: the speaker's Discrete(3) actions are padded to the
    listener's Discrete(5), its padding actions masked off and refused."""
    jaxmarl_env = jaxmarl.make("MPE_simple_speaker_listener_v4")
    env = from_jaxmarl(jaxmarl_env)
    check_environment(env)
    assert env.action_space == Discrete(5)
    assert env.observation_space.shape == (11,)  # the speaker's 3, padded
    state, timestep = env.reset(jr.key(0))
    want = [[True, True, True, False, False], [True] * 5]
    np.testing.assert_array_equal(timestep.action_mask, want)
    actions = jnp.array([2, 4], jnp.int32)
    step_key, _ = jr.split(jr.key_data(jr.key(1)))
    as_dict = {"speaker_0": actions[0], "listener_0": actions[1]}
    with jaxmarl_rules():
        observations, *_ = jaxmarl_env.step_env(step_key, state.env_state, as_dict)
    _, timestep = env.step(state, actions, jr.key(1))
    np.testing.assert_array_equal(
        timestep.observation[0, :3], observations["speaker_0"]
    )
    np.testing.assert_array_equal(timestep.observation[1], observations["listener_0"])
    np.testing.assert_array_equal(timestep.action_mask, want)

    # A padding action is refused, at once or when the compiled step runs ...
    with pytest.raises(ValueError, match=r"action 3 of speaker_0 .* padding action"):
        env.step(state, jnp.array([3, 0], jnp.int32), jr.key(1))
    with pytest.raises(eqx.EquinoxRuntimeError, match="one of its padding actions"):
        eqx.filter_jit(env.step)(state, jnp.array([4, 0], jnp.int32), jr.key(1))
    # ... unless the caller's actions are valid by construction (traced anew: a
    # compiled step keeps the checks it was traced with).
    with skip_action_checks():
        step = eqx.filter_jit(lambda state, action, key: env.step(state, action, key))
        step(state, jnp.array([4, 0], jnp.int32), jr.key(1))


def test_padding_masks_combine_with_available_actions():
    """The Relay's agent_1 with 4 actions (its third available only before the
    first step) beside agent_0's 3: its availability and agent_0's padding action
    both mask."""
    env = from_jaxmarl(Relay(agent_1_actions=4))
    assert env.action_space == Discrete(4)
    state, timestep = env.reset(jr.key(0))
    np.testing.assert_array_equal(
        timestep.action_mask, [[True, True, True, False], [True] * 4]
    )
    state, timestep = env.step(state, jnp.array([0, 3], jnp.int32), jr.key(0))
    np.testing.assert_array_equal(
        timestep.action_mask, [[True, True, True, False], [True, True, False, True]]
    )


def test_differing_box_actions_are_padded():
    """Continuous speaker-listener: the speaker's 3 action entries are the first 3
    of a 5-entry Box; the rest is dropped."""
    jaxmarl_env = jaxmarl.make(
        "MPE_simple_speaker_listener_v4", action_type="Continuous"
    )
    env = from_jaxmarl(jaxmarl_env)
    assert env.action_space == Box(0.0, 1.0, (5,))
    state, _ = env.reset(jr.key(0))
    actions = jnp.array([[0.2, 0.9, 0.1, 0.7, 0.7], [0.5, 0.1, 0.3, 0.8, 0.0]])
    _, timestep = env.step(state, actions, jr.key(1))
    step_key, _ = jr.split(jr.key_data(jr.key(1)))
    as_dict = {"speaker_0": actions[0, :3], "listener_0": actions[1]}
    with jaxmarl_rules():
        observations, *_ = jaxmarl_env.step_env(step_key, state.env_state, as_dict)
    np.testing.assert_array_equal(
        timestep.observation[0, :3], observations["speaker_0"]
    )
    np.testing.assert_array_equal(timestep.observation[1], observations["listener_0"])


class RelayWithBoxAction(Relay):
    """A Relay whose agent_1 acts with a Box, beside agent_0's Discrete(3)."""

    def __init__(self):
        super().__init__()
        self.action_spaces["agent_1"] = JaxMARLBox(-1.0, 1.0, (2,))


def test_differing_spaces_that_cannot_be_padded_are_refused():
    with pytest.raises(ValueError) as error:
        from_jaxmarl(RelayWithBoxAction())
    message = str(error.value)
    assert "do not share one action space and cannot be padded" in message
    assert "agent_0 has Discrete(3); agent_1 has Box(shape=(2,)" in message
    assert "a mix of Discrete and Box spaces" in message
    # pad_agents=False refuses every difference, naming the agents.
    with pytest.raises(ValueError) as error:
        from_jaxmarl("MPE_simple_adversary_v3", pad_agents=False)
    message = str(error.value)
    assert "do not share one observation space" in message
    assert "adversary_0 has Box(shape=(8,)" in message
    assert "agent_0 and agent_1 have Box(shape=(10,)" in message
    assert "pad_agents=True pads" in message
    with pytest.raises(ValueError, match=r"adversary_0, adversary_1 and adversary_2"):
        from_jaxmarl("MPE_simple_tag_v3", pad_agents=False)
    with pytest.raises(
        ValueError,
        match=r"do not share one action space: agent_0 has Discrete\(3\); agent_1 "
        r"has Discrete\(4\)",
    ):
        from_jaxmarl(Relay(agent_1_actions=4), pad_agents=False)


# --------------------------------------------------------------------------------------
# Refusals


class RelayWithInfoObservation(Relay):
    """A Relay whose observations have an entry of no agent named "info"."""

    def get_obs(self, state):
        return {**super().get_obs(state), "info": jnp.zeros(1)}


class RelayWithoutAgentDones(Relay):
    """A Relay whose `dones` has only the episode's flag."""

    def step_env(self, key, state, actions):
        observations, state, rewards, dones, infos = super().step_env(
            key, state, actions
        )
        return observations, state, rewards, {"__all__": dones["__all__"]}, infos


def test_extras_names_and_missing_dones_are_refused():
    with pytest.raises(ValueError, match=r"entries named \['info'\], the extras"):
        from_jaxmarl(RelayWithInfoObservation())
    env = from_jaxmarl(RelayWithoutAgentDones())
    with pytest.raises(ValueError, match="returns no done for agent_0 and agent_1"):
        env.reset(jr.key(0))


def test_unsupported_spaces_and_wrappers_are_refused():
    with pytest.raises(ValueError, match=r"agent_0 is MultiDiscrete\(\[2, 2\]\)"):
        from_jaxmarl("switch_riddle")
    with pytest.raises(TypeError, match="JaxMARL's wrappers"):
        from_jaxmarl(LogWrapper(Relay()))
    with pytest.raises(TypeError, match="configure an environment built by name"):
        from_jaxmarl(Relay(), max_steps=5)


# --------------------------------------------------------------------------------------
# Independent PPO learns


@pytest.mark.learning
@pytest.mark.run_bound
def test_independent_ppo_example_learns_simple_spread(run_script):
    """`examples/jaxmarl_ippo.py` at its defaults (IPPO, one actor-critic per agent,
    4 vmapped seeds of 102,400 steps on MPE simple spread): the team's return over
    the last 20 iterations rises above the random policy's by 8 on at least 3 of 4
    seeds; a random team scores about -84 per episode."""
    example = Path(__file__).parent.parent / "examples" / "jaxmarl_ippo.py"
    with jax.numpy_dtype_promotion("standard"):  # optax's Adam
        output = run_script(example)
    (random,) = re.findall(r"random policy: team return (-?[0-9.]+)", output)
    learned = re.findall(r"-> (-?[0-9.]+) \(last 20\)", output)
    random, learned = float(random), np.array(learned, float)
    assert -100 < random < -60, output
    assert len(learned) == 4 and np.sum(learned > random + 8) >= 3, output
