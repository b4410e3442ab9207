"""`eqxrl.algorithms.cpu_speed_tricks`: the one switch of the CPU-tuned tricks."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import pytest

import eqxrl
from eqxrl._random import permutation, split
from eqxrl.nn._linear import apply_linear
from jaxpr_walk import equations, scan_unrolls


def _primitive_list(jaxpr) -> list[str]:
    return [equation.primitive.name for equation in equations(jaxpr)]


def _primitives(jaxpr) -> set[str]:
    return set(_primitive_list(jaxpr))


def test_random_draws_are_jax_random_s_bits_with_the_tricks_on_or_off():
    key = jr.key(3)
    default = split(key, 5)
    with eqxrl.algorithms.cpu_speed_tricks(False):
        off = split(key, 5)
        off_primitives = _primitives(jax.make_jaxpr(lambda k: split(k, 5))(key).jaxpr)
    on_primitives = _primitives(jax.make_jaxpr(lambda k: split(k, 5))(key).jaxpr)
    assert (jr.key_data(default) == jr.key_data(jr.split(key, 5))).all()
    assert (jr.key_data(off) == jr.key_data(default)).all()
    # Off: JAX's own threefry; on (the CPU default): the inline hash.
    assert "random_split" in off_primitives or "threefry2x32" in off_primitives
    assert "random_split" not in on_primitives and "threefry2x32" not in on_primitives


def test_the_shuffle_is_jax_random_permutation_with_the_tricks_off():
    key = jr.key(0)
    with eqxrl.algorithms.cpu_speed_tricks(False):
        shuffled = permutation(key, 1000)
    assert (shuffled == jr.permutation(key, 1000)).all()
    # On the CPU by default: the packed sort, another permutation of the same law.
    packed = permutation(key, 1000)
    assert not (packed == shuffled).all()
    assert (jnp.sort(packed) == jnp.arange(1000)).all()


def test_the_switch_turns_the_batch_size_hint_off_and_the_unroll_rule_off():
    layer = eqx.nn.Linear(4, 64, key=jr.key(0))
    x = jnp.ones(4)

    def dot_products(enabled):
        with eqxrl.nn.batch_size_hint(4), eqxrl.algorithms.cpu_speed_tricks(enabled):
            jaxpr = jax.make_jaxpr(lambda x: apply_linear(layer, x))(x).jaxpr
        return "dot_general" in _primitives(jaxpr)

    assert not dot_products(None)  # on the CPU: elementwise, with the hint
    assert not dot_products(True)
    assert dot_products(False)
    network = eqxrl.nn.GRUActorCritic(
        eqxrl.envs.Box(low=-1.0, high=1.0, shape=(3,)),
        eqxrl.envs.Discrete(2),
        hidden_size=8,
        key=jr.key(0),
    )
    starts = jnp.zeros(9, bool)

    def unroll(enabled):
        with (
            eqxrl.nn.sequence_batch_hint(1),
            eqxrl.algorithms.cpu_speed_tricks(enabled),
        ):
            jaxpr = jax.make_jaxpr(
                lambda o: network.unroll(network.initial_carry(), o, starts)
            )(jnp.zeros((9, 3))).jaxpr
        return scan_unrolls(jaxpr)

    assert unroll(None) == [1]
    assert unroll(False) == [4]


@pytest.mark.xla_defaults
def test_auto_reset_selects_the_reset_off_the_cpu_with_the_same_results():
    # Lazy (a conditional, the CPU's) and eager (a select every step, off the CPU):
    # the same steps, resets, final observations and truncation hook outputs.
    env = eqxrl.envs.AutoReset(
        eqxrl.envs.TimeLimit(eqxrl.envs.make("CartPole-v1"), max_episode_steps=15),
        on_truncation=lambda final: final.observation.sum(),
    )

    def conditionals(enabled):
        # A new function per trace: JAX caches traces by function, not by the
        # switch (a context variable), which is read while tracing.
        def rollout(key):
            state, timestep = jax.vmap(env.reset)(jr.split(key, 3))

            def step(carry, key):
                state, _ = carry
                action = jr.randint(key, (3,), 0, 2)
                carry = jax.vmap(env.step)(state, action, jr.split(key, 3))
                return carry, carry[1]

            return jax.lax.scan(step, (state, timestep), jr.split(key, 100))[1]

        with (
            eqxrl.algorithms.cpu_speed_tricks(enabled),
            eqxrl.envs.skip_action_checks(),
        ):
            jaxpr = jax.make_jaxpr(rollout)(jr.key(0)).jaxpr
            return _primitive_list(jaxpr).count("cond"), jax.jit(rollout)(jr.key(0))

    lazy, on = conditionals(True)
    eager, off = conditionals(False)
    assert (lazy, eager) == (2, 0)  # the reset's and the hook's, nested
    assert bool(off.truncated.any()) and bool(off.terminated.any())
    for leaf_on, leaf_off in zip(jax.tree.leaves(on), jax.tree.leaves(off)):
        assert (leaf_on == leaf_off).all()
