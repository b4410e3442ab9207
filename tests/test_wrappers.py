import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl
from eqxrl.envs import AutoReset, CartPole, EpisodeStatistics, TimeLimit


def run(env, num_steps, action=1, seed=0):
    """Step one environment with a fixed action; stack the timesteps."""
    state, first = env.reset(jr.key(seed))

    def step(state, key):
        state, timestep = env.step(state, jnp.int32(action), key)
        return state, timestep

    _, timesteps = jax.lax.scan(step, state, jr.split(jr.key(seed + 1), num_steps))
    return first, timesteps


def test_time_limit_truncates_only():
    env = TimeLimit(CartPole(force_magnitude=0.0, gravity=0.0), 7)
    _, timesteps = run(env, 7)
    truncated = np.asarray(timesteps.truncated)
    assert truncated.tolist() == [False] * 6 + [True]
    assert not np.asarray(timesteps.terminated).any()


def test_time_limit_rejects_non_positive_limit():
    with pytest.raises(ValueError, match="at least 1"):
        TimeLimit(CartPole(), 0)


def test_auto_reset_keeps_final_observation():
    env = AutoReset(CartPole())  # always pushing right ends the episode quickly
    first, timesteps = run(env, 200)
    done = np.asarray(timesteps.terminated)
    assert done.sum() >= 2
    t = int(np.argmax(done))
    final = np.asarray(timesteps.extras["final_observation"][t])
    observation = np.asarray(timesteps.observation[t])
    # The final observation is out of bounds; the returned one is a fresh reset.
    assert abs(final[0]) > 2.4 or abs(final[2]) > 0.2094
    assert np.abs(observation).max() <= 0.05
    # On ordinary steps the two agree.
    not_done = ~done
    np.testing.assert_array_equal(
        np.asarray(timesteps.extras["final_observation"])[not_done],
        np.asarray(timesteps.observation)[not_done],
    )
    # reset and step return the same structure (so they can be scanned).
    assert jax.tree.structure(first) == jax.tree.structure(
        jax.tree.map(lambda x: x[0], timesteps)
    )


def test_episode_statistics_report_totals_at_episode_end():
    env = AutoReset(EpisodeStatistics(TimeLimit(CartPole(), 500)))
    _, timesteps = run(env, 300)
    done = np.asarray(timesteps.terminated | timesteps.truncated)
    returns = np.asarray(timesteps.extras["episode_return"])[done]
    lengths = np.asarray(timesteps.extras["episode_length"])[done]
    ends = np.flatnonzero(done)
    expected_lengths = np.diff(np.concatenate([[-1], ends]))
    np.testing.assert_array_equal(lengths, expected_lengths)
    np.testing.assert_array_equal(returns, expected_lengths.astype(np.float32))


def test_wrappers_forward_spaces():
    env = eqxrl.envs.make("CartPole-v1")
    wrapped = AutoReset(EpisodeStatistics(env))
    assert wrapped.action_space == env.action_space
    assert wrapped.observation_space.shape == env.observation_space.shape
    assert [type(e).__name__ for e in eqxrl.envs.unwrap(wrapped)] == [
        "AutoReset",
        "EpisodeStatistics",
        "TimeLimit",
        "CartPole",
    ]


def test_spaces():
    space = eqxrl.envs.Discrete(3)
    samples = jax.vmap(space.sample)(jr.split(jr.key(0), 1000))
    assert samples.dtype == jnp.int32
    assert set(np.unique(samples).tolist()) == {0, 1, 2}
    assert bool(space.contains(2)) and not bool(space.contains(3))
    with pytest.raises(ValueError, match="num_values"):
        eqxrl.envs.Discrete(0)
    box = eqxrl.envs.Box(-1.0, 1.0, shape=(2,))
    sample = box.sample(jr.key(1))
    assert sample.shape == (2,) and bool(box.contains(sample))
    with pytest.raises(ValueError, match="low"):
        eqxrl.envs.Box(1.0, -1.0)


def test_vmapped_auto_reset_resets_only_the_ended_episodes():
    env = EpisodeStatistics(TimeLimit(CartPole(), 500))
    num_envs = 6
    keys = jr.split(jr.key(0), num_envs)
    states, _ = jax.vmap(AutoReset(env).reset)(keys)
    # Push half the cart-poles to the edge so that they terminate on this step.
    x = jnp.where(jnp.arange(num_envs) < 3, 2.39, 0.0).astype(jnp.float32)
    physics = states.env_state.env_state.physics.at[:, 0].set(x).at[:, 1].set(1.0)
    states = eqx.tree_at(lambda s: s.env_state.env_state.physics, states, physics)
    actions = jnp.ones(num_envs, jnp.int32)
    step_keys = jr.split(jr.key(1), num_envs)
    next_states, timestep = jax.vmap(AutoReset(env).step)(states, actions, step_keys)
    # What the environment itself does on this step (AutoReset steps it with the
    # first half of each key).
    inner_keys = jax.vmap(lambda key: jr.split(key)[0])(step_keys)
    _, stepped = jax.vmap(env.step)(states, actions, inner_keys)
    done = np.asarray(stepped.terminated)
    assert done.tolist() == [True] * 3 + [False] * 3
    for name in ("reward", "terminated", "truncated"):
        np.testing.assert_array_equal(getattr(timestep, name), getattr(stepped, name))
    np.testing.assert_array_equal(
        timestep.extras["final_observation"], stepped.observation
    )
    np.testing.assert_array_equal(
        timestep.extras["episode_return"], stepped.extras["episode_return"]
    )
    observation = np.asarray(timestep.observation)
    np.testing.assert_array_equal(
        observation[~done], np.asarray(stepped.observation)[~done]
    )
    assert np.abs(observation[done]).max() <= 0.05  # fresh resets
    assert (np.asarray(next_states.episode_length)[done] == 0).all()
    assert (np.asarray(next_states.episode_length)[~done] == 1).all()


@pytest.mark.slow
def test_auto_reset_under_vmap_resets_lazily():
    """Vmapped over seeds of vmapped environments, each member steps as it would
    alone (resetting only its own ended episodes), and the resets stay behind one
    `lax.cond` on the whole batch instead of becoming a select that computes them
    at every step."""
    env = AutoReset(EpisodeStatistics(TimeLimit(CartPole(), 500)))
    num_seeds, num_envs = 3, 4

    def reset(key):
        return jax.vmap(env.reset)(jr.split(key, num_envs))

    def step(states, key):
        actions = jnp.ones(num_envs, jnp.int32)
        return jax.vmap(env.step)(states, actions, jr.split(key, num_envs))

    states, _ = jax.vmap(reset)(jr.split(jr.key(0), num_seeds))
    # Only seed 1 has an environment at the edge: it ends on this step.
    physics = states.env_state.env_state.physics
    physics = physics.at[1, 0, 0].set(2.39).at[1, 0, 1].set(1.0)
    states = eqx.tree_at(lambda s: s.env_state.env_state.physics, states, physics)
    keys = jr.split(jr.key(1), num_seeds)
    batched_states, batched = jax.vmap(step)(states, keys)
    assert np.asarray(batched.terminated).sum() == 1
    for seed in range(num_seeds):
        alone_states, alone = step(jax.tree.map(lambda x: x[seed], states), keys[seed])
        np.testing.assert_array_equal(batched.observation[seed], alone.observation)
        np.testing.assert_array_equal(
            batched_states.episode_length[seed], alone_states.episode_length
        )
    jaxpr = str(jax.make_jaxpr(jax.vmap(step))(states, keys))
    assert "cond[" in jaxpr  # a batched predicate would have become a select


def test_auto_reset_of_snake_gives_fresh_games():
    snake = eqxrl.envs.Snake(height=3, width=3)  # random play dies within steps
    env = AutoReset(EpisodeStatistics(snake))
    state, _ = env.reset(jr.key(0))

    def step(state, key):
        action_key, step_key = jr.split(key)
        action = jr.randint(action_key, (), 0, 4)
        return env.step(state, action, step_key)

    _, timesteps = jax.lax.scan(step, state, jr.split(jr.key(1), 200))
    done = np.asarray(timesteps.terminated | timesteps.truncated)
    assert done.sum() >= 10
    # On reset steps the observation is a fresh game's: one head and one food, and
    # every move is allowed; the final observation is the game that ended.
    observations = np.asarray(timesteps.observation)
    assert (observations[done].sum(axis=(1, 2)) == [1, 0, 1]).all()
    assert np.asarray(timesteps.action_mask)[done].all()
    final = np.asarray(timesteps.extras["final_observation"])
    np.testing.assert_array_equal(final[~done], observations[~done])
    assert (final[done] != observations[done]).any()


def test_on_truncation_output_is_zero_where_the_episode_goes_on_under_vmap():
    """Under vmap the hook's branch runs for the whole batch when any episode is
    truncated; its output still counts only where one was."""
    env = eqxrl.envs.AutoReset(
        eqxrl.envs.TimeLimit(eqxrl.envs.CartPole(), 3),
        on_truncation=lambda final: final.observation[0] + 100.0,
    )
    keys = jax.random.split(jax.random.key(0), 2)
    states, _ = jax.vmap(env.reset)(keys)
    # The first environment is two steps ahead: it reaches the limit first.
    for _ in range(2):
        first = jax.tree.map(lambda x: x[0], states)
        first, _ = env.step(first, jnp.int32(0), jax.random.key(1))
        states = jax.tree.map(lambda x, y: x.at[0].set(y), states, first)
    states, timesteps = jax.vmap(env.step)(states, jnp.zeros(2, jnp.int32), keys)
    ended = np.asarray(timesteps.truncated)
    assert ended.tolist() == [True, False]
    outputs = np.asarray(timesteps.extras["at_truncation"])
    assert outputs[0] > 50.0 and outputs[1] == 0.0


def test_on_truncation_runs_only_on_steps_that_truncate_an_episode():
    """Terminations (frequent: the pole falls within a few steps of always pushing
    left) do not run the hook; a truncation does, and its output is the value of
    the final observation, before the reset."""
    calls = []

    def hook(final):
        jax.debug.callback(lambda: calls.append(1))
        return final.observation[0] + 100.0

    def run(max_episode_steps: int):
        calls.clear()
        env = eqxrl.envs.AutoReset(
            eqxrl.envs.TimeLimit(eqxrl.envs.CartPole(), max_episode_steps),
            on_truncation=hook,
        )
        step = jax.vmap(env.step)

        def body(states, key):
            states, timestep = step(states, jnp.zeros(4, jnp.int32), jr.split(key, 4))
            return states, timestep

        keys = jr.split(jax.random.key(0), 4)
        states, _ = jax.vmap(env.reset)(keys)
        _, timesteps = jax.jit(
            lambda s: jax.lax.scan(body, s, jr.split(jr.key(1), 40))
        )(states)
        jax.effects_barrier()
        return timesteps

    timesteps = run(max_episode_steps=1000)
    assert np.asarray(timesteps.terminated).sum() >= 4  # episodes did end
    assert not np.asarray(timesteps.truncated).any()
    assert calls == []
    assert (np.asarray(timesteps.extras["at_truncation"]) == 0.0).all()

    timesteps = run(max_episode_steps=3)
    truncated = np.asarray(timesteps.truncated)
    assert truncated.any() and len(calls) == np.asarray(truncated.any(axis=1)).sum()
    outputs = np.asarray(timesteps.extras["at_truncation"])
    final = np.asarray(timesteps.extras["final_observation"])[..., 0] + 100.0
    np.testing.assert_allclose(outputs[truncated], final[truncated])
    assert (outputs[~truncated] == 0.0).all()
