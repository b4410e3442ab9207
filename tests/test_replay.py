import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from eqxrl.buffers import ReplayBuffer, ReplayTransition, n_step_return


def make_batch(step, num_envs, num_actions=3, terminated=None, truncated=None):
    """A batch of transitions (one per environment) whose values encode
    `100 * step + env`; built per environment and vmapped, as algorithms do."""
    if terminated is None:
        terminated = truncated = np.zeros(num_envs, bool)
    return _make_batch(jnp.int32(step), num_envs, num_actions, terminated, truncated)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _make_batch(step, num_envs, num_actions, terminated, truncated):

    def one(env, terminated, truncated):
        value = (100 * step + env).astype(jnp.float32)
        observation = jnp.stack([value, -value])
        return ReplayTransition(
            observation=observation,
            action=env % num_actions,
            reward=value,
            terminated=terminated,
            truncated=truncated,
            next_observation=observation + 0.5,
            next_action_mask=jnp.ones(num_actions, bool),
        )

    return jax.vmap(one)(
        jnp.arange(num_envs, dtype=jnp.int32),
        jnp.asarray(terminated),
        jnp.asarray(truncated),
    )


def fill(capacity, num_steps, num_envs, terminated=None, truncated=None):
    buffer = ReplayBuffer.empty(make_batch(0, num_envs), capacity)
    add = jax.jit(ReplayBuffer.add)
    for step in range(num_steps):
        flags = {}
        if terminated is not None:
            flags = dict(terminated=terminated[step], truncated=truncated[step])
        buffer = add(buffer, make_batch(step, num_envs, **flags))
    return buffer


def test_empty_buffer_shapes_and_capacity():
    buffer = ReplayBuffer.empty(jax.eval_shape(lambda: make_batch(0, 3)), 7)
    assert buffer.capacity == 7 and buffer.num_envs == 3
    assert buffer.transitions.observation.shape == (7, 3, 2)
    assert buffer.transitions.next_action_mask.shape == (7, 3, 3)
    assert int(buffer.size) == 0 and int(buffer.position) == 0


def test_wrap_around_overwrites_the_oldest_rows():
    buffer = fill(capacity=4, num_steps=6, num_envs=2)
    assert int(buffer.size) == 4 and int(buffer.position) == 2
    rewards = np.asarray(buffer.transitions.reward)
    # Rows 0 and 1 were overwritten by steps 4 and 5.
    np.testing.assert_array_equal(rewards[:, 0], [400, 500, 200, 300])
    np.testing.assert_array_equal(rewards[:, 1], [401, 501, 201, 301])
    # Index i is env i % 2 of the (i // 2)-th oldest row: steps 2, 3, 4, 5.
    sample = buffer.gather(jnp.arange(8), gamma=1.0)
    expected = [200, 201, 300, 301, 400, 401, 500, 501]
    np.testing.assert_array_equal(sample.reward, expected)
    np.testing.assert_array_equal(sample.observation[:, 0], expected)
    np.testing.assert_array_equal(sample.next_observation[:, 0], np.add(expected, 0.5))


def test_sample_is_uniform_over_stored_transitions_only():
    buffer = fill(capacity=50, num_steps=5, num_envs=2)
    sample = jax.jit(lambda b, k: b.sample(k, 20_000))(buffer, jr.key(0))
    values, counts = np.unique(np.asarray(sample.reward), return_counts=True)
    expected = [100 * s + e for s in range(5) for e in range(2)]
    np.testing.assert_array_equal(values, expected)
    assert counts.min() > 1700 and counts.max() < 2300, counts


def test_sampling_an_empty_buffer_is_an_error():
    buffer = ReplayBuffer.empty(make_batch(0, 2), 8)
    with pytest.raises(Exception, match="buffer is empty"):
        jax.block_until_ready(jax.jit(lambda b: b.sample(jr.key(0), 4))(buffer))


def test_add_rejects_a_batch_of_the_wrong_shape():
    buffer = ReplayBuffer.empty(make_batch(0, 2), 8)
    with pytest.raises(ValueError, match="shape"):
        buffer.add(make_batch(0, 3))
    with pytest.raises(ValueError, match="positive"):
        ReplayBuffer.empty(make_batch(0, 2), 0)


def test_add_is_in_place_when_donated():
    buffer = ReplayBuffer.empty(make_batch(0, 4), 10_000)
    add = jax.jit(ReplayBuffer.add, donate_argnums=0)
    buffer = add(buffer, make_batch(0, 4))
    pointer = buffer.transitions.observation.unsafe_buffer_pointer()
    buffer = add(buffer, make_batch(1, 4))
    assert buffer.transitions.observation.unsafe_buffer_pointer() == pointer
    assert int(buffer.size) == 2
    text = add.lower(buffer, make_batch(2, 4)).as_text()
    assert "dynamic_update_slice" in text


def reference_sample(rows, age, env, size, n_step, gamma, frame_stack):
    """Plain-Python n-step return and frame stacks of one stored transition.

    `rows` lists the stored rows oldest first (dicts of numpy arrays)."""
    total, discount, last = 0.0, None, 0
    for i in range(n_step):
        if age + i >= size:
            break
        row = rows[age + i]
        total += gamma**i * float(row["reward"][env])
        last = i
        if row["terminated"][env]:
            discount = 0.0
            break
        if row["truncated"][env]:
            break
    if discount is None:
        discount = gamma ** (last + 1)

    def ended(a):
        return bool(rows[a]["terminated"][env] or rows[a]["truncated"][env])

    def stack(end, k):
        frames = []
        for back in range(k - 1, -1, -1):
            a = end - back
            in_episode = a >= 0 and not any(ended(b) for b in range(a, end))
            frame = rows[a]["observation"][env] if in_episode else None
            frames.append(frame)
        shape = rows[0]["observation"][env].shape
        return [np.zeros(shape, np.float32) if f is None else f for f in frames]

    observation = stack(age, frame_stack)
    next_observation = stack(age + last, frame_stack - 1) + [
        rows[age + last]["next_observation"][env]
    ]
    return total, discount, last + 1, observation, next_observation


@pytest.mark.parametrize("n_step, frame_stack", [(1, 1), (3, 1), (5, 4), (1, 3)])
def test_n_step_and_frame_stack_match_a_python_reference(n_step, frame_stack):
    rng = np.random.default_rng(n_step * 10 + frame_stack)
    num_envs, num_steps, capacity, gamma = 3, 45, 32, 0.9
    terminated = rng.random((num_steps, num_envs)) < 0.12
    truncated = rng.random((num_steps, num_envs)) < 0.12
    buffer = fill(capacity, num_steps, num_envs, terminated, truncated)
    assert terminated[-capacity:].any() and truncated[-capacity:].any()
    rows = []
    for step in range(num_steps - capacity, num_steps):
        batch = make_batch(
            step, num_envs, terminated=terminated[step], truncated=truncated[step]
        )
        fields = ["observation", "reward", "terminated", "truncated"]
        row = {name: np.asarray(getattr(batch, name)) for name in fields}
        row["next_observation"] = np.asarray(batch.next_observation)
        rows.append(row)
    index = jnp.arange(capacity * num_envs)
    sample = jax.jit(
        lambda b, i: b.gather(i, n_step=n_step, gamma=gamma, frame_stack=frame_stack)
    )(buffer, index)
    for i in range(capacity * num_envs):
        age, env = divmod(i, num_envs)
        reward, discount, steps, observation, next_observation = reference_sample(
            rows, age, env, capacity, n_step, gamma, frame_stack
        )
        np.testing.assert_allclose(sample.reward[i], reward, rtol=1e-5)
        np.testing.assert_allclose(sample.discount[i], discount, rtol=1e-5)
        assert int(sample.num_steps[i]) == steps
        assert int(sample.action[i]) == env % 3
        if frame_stack == 1:
            np.testing.assert_array_equal(sample.observation[i], observation[0])
            np.testing.assert_array_equal(
                sample.next_observation[i], next_observation[0]
            )
        else:
            np.testing.assert_array_equal(sample.observation[i], np.stack(observation))
            np.testing.assert_array_equal(
                sample.next_observation[i], np.stack(next_observation)
            )
    if n_step > 1:
        # Both kinds of endings and the newest rows cut some windows short.
        assert (np.asarray(sample.num_steps) < n_step).any()
        assert (np.asarray(sample.discount) == 0).any()
    if frame_stack > 1:
        assert (np.asarray(sample.observation)[:, 0] == 0).all(axis=-1).any()


def test_n_step_return_stops_at_episode_ends():
    rewards = jnp.array([1.0, 2.0, 4.0, 8.0])
    no = jnp.zeros(4, bool)
    every = jnp.ones(4, bool)
    at_1 = jnp.array([False, True, False, False])
    gamma = 0.5

    reward, discount, last = n_step_return(rewards, no, no, every, gamma)
    assert (float(reward), float(discount), int(last)) == (4.0, 0.0625, 3)
    # Terminated at step 1: two rewards, no bootstrap.
    reward, discount, last = n_step_return(rewards, at_1, no, every, gamma)
    assert (float(reward), float(discount), int(last)) == (2.0, 0.0, 1)
    # Truncated at step 1: two rewards, bootstrap with gamma ** 2.
    reward, discount, last = n_step_return(rewards, no, at_1, every, gamma)
    assert (float(reward), float(discount), int(last)) == (2.0, 0.25, 1)
    # Only the first three steps collected so far.
    available = jnp.array([True, True, True, False])
    reward, discount, last = n_step_return(rewards, no, no, available, gamma)
    assert (float(reward), float(discount), int(last)) == (3.0, 0.125, 2)


def test_buffer_is_a_pytree_that_vmaps_over_seeds():
    def build(seed):
        batch = make_batch(0, 2)
        batch = eqx.tree_at(lambda b: b.reward, batch, batch.reward + seed)
        return ReplayBuffer.empty(batch, 4).add(batch)

    buffers = jax.vmap(build)(jnp.arange(3, dtype=jnp.float32))
    assert buffers.transitions.reward.shape == (3, 4, 2)
    np.testing.assert_array_equal(buffers.transitions.reward[:, 0, 0], [0, 1, 2])
