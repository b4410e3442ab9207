"""The recurrent Q-network: `unroll` is `step` in a loop, the carry starts afresh
where an episode starts, a carry of another shape is refused, and `q_values` is
an episode's first step."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import pytest

import eqxrl
from eqxrl.nn import GRUCarry, GRUQNetwork, LSTMCarry

NUM_STEPS = 7
HIDDEN_SIZE = 8


def network() -> GRUQNetwork:
    space = eqxrl.envs.Box(low=-1.0, high=1.0, shape=(3,))
    return GRUQNetwork(
        space, 4, hidden_size=HIDDEN_SIZE, encoder_sizes=(6,), key=jr.key(0)
    )


def observations() -> jax.Array:
    return jr.normal(jr.key(1), (NUM_STEPS, 3))


def nonzero_carry(network: GRUQNetwork) -> GRUCarry:
    # A carry far from `initial_carry()`, so that a missed reset shows.
    return GRUCarry(hidden=jnp.linspace(-0.9, 0.9, HIDDEN_SIZE, dtype=jnp.float32))


def test_unroll_equals_step_in_a_loop_with_resets():
    net = network()
    inputs = observations()
    # The first step continues an episode (its carry matters), two more start one.
    episode_start = jnp.array([False, False, True, False, False, True, False])
    start_carry = nonzero_carry(net)

    carry = start_carry
    stepped, hiddens = [], []
    for t in range(NUM_STEPS):
        if episode_start[t]:
            carry = net.initial_carry()
        # The GRU is Equinox's own cell, step by step.
        expected_hidden = net.core.cell(net.core.encode(inputs[t]), carry.hidden)
        carry, q_values = net.step(carry, inputs[t])
        assert jnp.allclose(carry.hidden, expected_hidden, atol=1e-6)
        stepped.append(q_values)
        hiddens.append(carry.hidden)
    stepped = jnp.stack(stepped)

    for unroll in (
        net.unroll,
        # The interface's scan over `step`, which other networks inherit.
        functools.partial(eqxrl.nn.AbstractRecurrentQNetwork.unroll, net),
    ):
        final_carry, unrolled = unroll(start_carry, inputs, episode_start)
        assert unrolled.shape == (NUM_STEPS, 4)
        assert unrolled.dtype == jnp.float32
        assert jnp.allclose(unrolled, stepped, atol=1e-6)
        assert jnp.allclose(final_carry.hidden, hiddens[-1], atol=1e-6)


def test_the_carry_resets_where_an_episode_starts():
    net = network()
    inputs = observations()
    reset_at = 3
    episode_start = jnp.zeros(NUM_STEPS, bool).at[reset_at].set(True)
    _, q_values = net.unroll(nonzero_carry(net), inputs, episode_start)
    fresh_start = jnp.zeros(NUM_STEPS - reset_at, bool).at[0].set(True)
    _, fresh = net.unroll(net.initial_carry(), inputs[reset_at:], fresh_start)
    assert jnp.allclose(q_values[reset_at:], fresh, atol=1e-6)
    # Without the flag the carry of the steps before changes the values: the
    # equality above is the reset's doing.
    _, continued = net.unroll(nonzero_carry(net), inputs, jnp.zeros(NUM_STEPS, bool))
    assert not jnp.allclose(continued[reset_at:], fresh, atol=1e-3)
    # Likewise a reset at the first step discards the carry it was given.
    _, first = net.unroll(nonzero_carry(net), inputs, jnp.ones(NUM_STEPS, bool))
    _, from_initial = net.unroll(net.initial_carry(), inputs, jnp.ones(NUM_STEPS, bool))
    assert jnp.allclose(first, from_initial, atol=1e-6)


def test_a_carry_of_the_wrong_shape_is_refused_naming_both():
    net = network()
    observation = jnp.zeros(3, jnp.float32)
    # Shapes only: the refusal is at trace time.
    step = functools.partial(eqx.filter_eval_shape, net.step)
    unroll = functools.partial(eqx.filter_eval_shape, net.unroll)
    step(net.initial_carry(), observation)
    expected = r".*but this network reads one environment's GRUCarry\(hidden=\[8\]\)"
    zeros = functools.partial(jnp.zeros, dtype=jnp.float32)
    for carry, described in (
        (GRUCarry(hidden=zeros(5)), r"GRUCarry\(hidden=\[5\]\)"),
        (GRUCarry(hidden=zeros((4, 8))), r"GRUCarry\(hidden=\[4, 8\]\)"),
        (
            LSTMCarry(hidden=zeros(8), cell=zeros(8)),
            r"LSTMCarry\(hidden=\[8\], cell=\[8\]\)",
        ),
    ):
        match = r"GRUQNetwork\.step: the carry is " + described + expected
        with pytest.raises(ValueError, match=match):
            step(carry, observation)
        with pytest.raises(ValueError, match=match):
            unroll(carry, zeros((NUM_STEPS, 3)), jnp.zeros(NUM_STEPS, bool))


def test_q_values_is_the_first_step_of_an_episode():
    net = network()
    observation = observations()[0]
    q_values = net.q_values(observation, jr.key(2))
    _, first_step = net.step(net.initial_carry(), observation)
    assert q_values.shape == (4,)
    assert jnp.allclose(q_values, first_step, atol=1e-6)
    _, later_step = net.step(nonzero_carry(net), observation)
    assert not jnp.allclose(q_values, later_step, atol=1e-3)


def test_is_recurrent_and_refused_by_learners_that_replay_transitions_only():
    assert network().is_recurrent
    feed_forward = eqxrl.nn.MLPQNetwork(3, 4, key=jr.key(0))
    assert not feed_forward.is_recurrent
    env = eqxrl.envs.make("StatelessCartPole-v1")
    factory = functools.partial(GRUQNetwork.from_env, hidden_size=16)
    built = factory(env, jr.key(0))
    assert built.initial_carry().hidden.shape == (16,)
    assert built.num_actions == 2
    # DQN replays single transitions: the memory would never be used.
    with pytest.raises(ValueError, match="DQN: .*recurrent Q-network.*GRUQNetwork"):
        eqxrl.DQN(env=env, network_factory=factory)
    # Independent learners too; VDN and QMIX replay sequences and take it.
    team = eqxrl.envs.make("TreasureHunt-v0")
    recurrent_dqn = eqxrl.DQN(env=team, network_factory=GRUQNetwork.from_env, n_step=1)
    with pytest.raises(ValueError, match="replay single transitions"):
        eqxrl.multiagent.Independent(recurrent_dqn)
    vdn = eqxrl.multiagent.VDN(recurrent_dqn, share_parameters=False)
    assert vdn.recurrent
