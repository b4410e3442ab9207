"""PPO's cache-sized row blocks on CPU (`eqxrl.algorithms._row_blocks`): the same
gradients and values as the whole batch, only for large networks."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl
import eqxrl.algorithms._ppo as ppo_module
import eqxrl.algorithms._ppo_rollout as ppo_rollout_module
from eqxrl.algorithms._row_blocks import (
    cpu_row_blocks,
    map_over_row_blocks,
    mean_over_row_blocks,
)

# optax.adam computes `b1 ** count` with an int32 count.
STANDARD_DTYPE_PROMOTION = True

pytestmark = pytest.mark.skipif(
    jax.default_backend() != "cpu", reason="row blocks apply on the CPU backend only"
)


def test_blocks_only_for_large_networks_and_large_even_batches():
    large = eqx.nn.MLP(8, 1, 256, 5, key=jr.key(0))  # 265k parameters
    small = eqx.nn.MLP(4, 2, 64, 2, key=jr.key(0))
    assert cpu_row_blocks(5120, large) == 4  # blocks of 1,280
    assert cpu_row_blocks(10240, large) == 8
    assert cpu_row_blocks(1280, large) == 1  # small enough already
    assert cpu_row_blocks(2 * 1283, large) == 1  # no blocks of 640-1,280 rows
    assert cpu_row_blocks(16384, small) == 1


@pytest.mark.slow
def test_mean_over_blocks_is_the_whole_batch_mean_and_its_gradient():
    network = eqx.nn.MLP(8, 1, 64, 2, key=jr.key(0))
    inputs = jr.normal(jr.key(1), (512, 8))
    targets = jr.normal(jr.key(2), (512,))

    def loss(network, inputs, targets):
        errors = jax.vmap(network)(inputs)[:, 0] - targets
        return jnp.mean(errors**2), {"mean_error": jnp.mean(errors)}

    grad_fn = eqx.filter_value_and_grad(loss, has_aux=True)
    whole = grad_fn(network, inputs, targets)
    blocked = mean_over_row_blocks(
        lambda *rows: grad_fn(network, *rows), (inputs, targets), 4
    )
    for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(blocked), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    values = map_over_row_blocks(jax.vmap(network), (inputs,), 8)
    np.testing.assert_allclose(values, jax.vmap(network)(inputs), rtol=1e-6, atol=1e-7)


@pytest.mark.slow
def test_ppo_trains_the_same_in_blocks(monkeypatch):
    """A 256 x 3 critic (over 100k parameters) and 4,096-row minibatches: the
    rollout's values and the updates go in blocks of 1,024 rows, and one iteration
    ends with the parameters of the whole-batch iteration, up to float rounding."""
    ppo = eqxrl.PPO(
        env=eqxrl.envs.make("Pendulum-v1"),
        num_envs=64,
        num_steps=64,
        num_minibatches=1,
        num_epochs=2,
        total_timesteps=64 * 64,
        critic_hidden_sizes=(256, 256, 256),
    )
    state = ppo.init(jr.key(0))
    assert cpu_row_blocks(ppo.minibatch_size, state.model) == 4
    blocked, blocked_metrics = eqx.filter_jit(ppo.train_iteration)(state)
    monkeypatch.setattr(ppo_module, "cpu_row_blocks", lambda rows, network: 1)
    monkeypatch.setattr(ppo_rollout_module, "cpu_row_blocks", lambda rows, network: 1)
    jax.clear_caches()  # trace again, without blocks
    whole, whole_metrics = eqx.filter_jit(ppo.train_iteration)(state)
    for a, b in zip(
        jax.tree.leaves(eqx.filter(blocked.model, eqx.is_array)),
        jax.tree.leaves(eqx.filter(whole.model, eqx.is_array)),
        strict=True,
    ):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    for name in ("value_loss", "policy_loss", "approx_kl"):
        np.testing.assert_allclose(
            blocked_metrics[name], whole_metrics[name], rtol=1e-4, atol=1e-7
        )
