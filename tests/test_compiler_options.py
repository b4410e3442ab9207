"""`AbstractAlgorithm.compiler_options`: applied when `train` (or `lower`) is called at
the top level with concrete arguments, left out where JAX refuses them (under `vmap`,
inside a user's `jit`, `grad` or `scan`), where the run compiles as part of the
enclosing program."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from jaxtyping import Array, PRNGKeyArray

import eqxrl
from eqxrl.algorithms import AbstractAlgorithm, cpu_compiler_options
from eqxrl.algorithms._base import jit_with_options

# Trains PPO, whose optax Adam needs standard dtype promotion (see conftest.py).
STANDARD_DTYPE_PROMOTION = True

# XLA rejects an unknown option by name: an error naming it proves the options
# reached the compiler, a result proves they were left out.
BOGUS = {"xla_cpu_no_such_option_for_tests": True}
REJECTED = "No such compile option: 'xla_cpu_no_such_option_for_tests'"


def _square_sum(x):
    return jnp.sum(x * x)


def test_options_reach_xla_at_the_top_level():
    square_sum = jit_with_options(_square_sum, BOGUS)
    with pytest.raises(jax.errors.JaxRuntimeError, match=REJECTED):
        square_sum(jnp.ones(3))
    with pytest.raises(jax.errors.JaxRuntimeError, match=REJECTED):
        square_sum.lower(jnp.ones(3)).compile()  # type: ignore[attr-defined]


def test_options_left_out_under_transformations():
    square_sum = jit_with_options(_square_sum, BOGUS)
    x = jnp.ones(3)
    assert jax.vmap(square_sum)(jnp.ones((2, 3))).tolist() == [3.0, 3.0]
    assert float(jax.jit(square_sum)(x)) == 3.0
    assert float(jax.jit(lambda: square_sum(x))()) == 3.0  # concrete, closed over
    assert jax.grad(square_sum)(x).tolist() == [2.0, 2.0, 2.0]
    total, _ = jax.lax.scan(
        lambda c, y: (c + square_sum(y), None), 0.0, jnp.ones((4, 3))
    )
    assert float(total) == 12.0


def test_one_compilation_cache_per_set_of_options():
    traces = []

    def square_sum(x):
        traces.append(None)
        return jnp.sum(x * x)

    assert jit_with_options(square_sum, {}) is jit_with_options(square_sum, {})
    options = {"xla_cpu_multi_thread_eigen": False}
    for _ in range(2):
        assert float(jit_with_options(square_sum, options)(jnp.ones(3))) == 3.0
    assert len(traces) == 1
    assert float(jit_with_options(square_sum, {})(jnp.ones(3))) == 3.0
    assert len(traces) == 2  # other options (none): another program


def test_cpu_compiler_options_are_accepted_by_xla():
    # Whatever this host gets (options depend on its CPU), XLA must know them.
    options = cpu_compiler_options()
    assert float(jit_with_options(_square_sum, options)(jnp.ones(3))) == 3.0


class _Count(AbstractAlgorithm[Array]):
    """Counts iterations; compiled with `options`."""

    options: tuple = eqx.field(static=True, default=())

    @property
    def compiler_options(self):
        return dict(self.options)

    @property
    def num_iterations(self) -> int:
        return 3

    def init(self, key: PRNGKeyArray) -> Array:
        return jr.uniform(key)

    def train_iteration(self, state: Array) -> tuple[Array, dict[str, Array]]:
        return state + 1.0, {"loss": state}

    def policy(self, state, deterministic=False):
        raise NotImplementedError


def test_train_compiles_with_the_algorithm_options_at_the_top_level_only():
    bogus = _Count(options=tuple(BOGUS.items()))
    key = jr.key(0)
    with pytest.raises(jax.errors.JaxRuntimeError, match=REJECTED):
        bogus.train(key)
    with pytest.raises(jax.errors.JaxRuntimeError, match=REJECTED):
        bogus.lower(key).compile()
    _, expected = _Count().train(key)
    _, inside_jit = eqx.filter_jit(bogus.train)(key)
    _, vmapped = eqx.filter_vmap(bogus.train)(jr.split(key, 2))
    np.testing.assert_array_equal(inside_jit["loss"], expected["loss"])
    assert vmapped["loss"].shape == (2, 3)


@pytest.mark.slow
def test_ppo_options_compile_and_keep_its_results():
    ppo = eqxrl.PPO(
        env=eqxrl.envs.make("CartPole-v1"),
        num_envs=2,
        num_steps=8,
        num_minibatches=2,
        num_epochs=1,
        total_timesteps=32,
    )
    # PPO adds to the defaults of every algorithm.
    defaults = AbstractAlgorithm.compiler_options.fget(ppo)  # type: ignore[attr-defined]
    assert defaults.items() <= ppo.compiler_options.items()
    key = jr.key(0)
    _, top = ppo.train(key)  # with the options: XLA accepts them
    _, inside_jit = eqx.filter_jit(lambda k: ppo.train(k))(key)  # without them
    _, ahead_of_time = ppo.lower(key).compile()(ppo, key, True)
    for metrics in (inside_jit, ahead_of_time):
        np.testing.assert_allclose(metrics["total_loss"], top["total_loss"], rtol=1e-5)
