"""PQN: its configuration checks, the one-program contract (seeds and sweeps in one
compilation), the command line, resume through the Trainer, and learning CartPole at
purejaxql's config. (Its Q(lambda) targets: `test_returns.py`.)"""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl
from eqxrl.training import Trainer, evaluate

# optax's RAdam computes `b2 ** count` with an int32 count.
STANDARD_DTYPE_PROMOTION = True

# 5 iterations of 4 envs x 8 steps, 2 epochs of 4 minibatches.
SMALL = dict(
    num_envs=4,
    num_steps=8,
    total_timesteps=160,
    num_epochs=2,
    num_minibatches=4,
    hidden_sizes=(16,),
)


@pytest.fixture(scope="module")
def env():
    return eqxrl.envs.make("CartPole-v1")


def small(env, **overrides):
    return eqxrl.PQN(env=env, **{**SMALL, **overrides})


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"num_minibatches": 3}, "num_minibatches=3 must divide the 32 steps"),
        ({"total_timesteps": 16}, "less than one iteration"),
        ({"num_epochs": 0}, "num_epochs=0 must be >= 1"),
    ],
)
def test_refuses_configurations_it_cannot_train(env, overrides, message):
    with pytest.raises(ValueError, match=message):
        small(env, **overrides)


def test_refuses_continuous_actions_and_a_wrapped_auto_reset(env):
    with pytest.raises(ValueError, match="PQN: needs a Discrete action space"):
        small(eqxrl.envs.make("Pendulum-v1"))
    with pytest.raises(ValueError, match="without AutoReset"):
        small(eqxrl.envs.AutoReset(env))


@eqx.filter_jit
@eqx.debug.assert_max_traces(max_traces=1)
def train_seeds(algorithm, keys):
    return eqx.filter_vmap(algorithm.train)(keys)


def test_seeds_and_sweeps_share_one_program(env):
    keys = jr.split(jr.key(0), 3)
    states, metrics = train_seeds(small(env), keys)
    # Array hyperparameters are leaves: another value reuses the compiled program.
    _, swept = train_seeds(small(env, learning_rate=3e-4, q_lambda=0.5), keys)
    assert set(metrics) >= {
        "episode_return",
        "episode_length",
        "episode_count",
        "td_loss",
        "q_value",
        "epsilon",
        "learning_rate",
    }
    assert metrics["td_loss"].shape == (3, 5)
    assert np.isfinite(np.asarray(metrics["td_loss"])).all()
    # Epsilon decays linearly over the first 20% of the 5 iterations (one), then
    # holds; the step size decays linearly to zero over the run.
    np.testing.assert_allclose(metrics["epsilon"][0], [1.0, 0.2, 0.2, 0.2, 0.2])
    np.testing.assert_allclose(
        metrics["learning_rate"][0],
        1e-4 * np.array([1, 0.8, 0.6, 0.4, 0.2]),
        rtol=1e-6,
    )
    assert not np.allclose(swept["td_loss"], metrics["td_loss"])
    # Seeds differ, and each is its own run.
    assert not np.allclose(metrics["td_loss"][0], metrics["td_loss"][1])
    assert states.iteration.shape == (3,) and int(states.iteration[0]) == 5


def test_the_default_network_is_pqn_s_layer_norm_mlp(env):
    network = eqxrl.PQN(env=env).make_network(jr.key(0))
    assert isinstance(network, eqxrl.nn.MLPQNetwork)
    assert [layer.out_features for layer in network.layers] == [256, 256]
    assert network.layer_norms is not None and len(network.layer_norms) == 2
    # LayerNorm before the activation: each hidden layer's pre-activations are
    # normalized, whatever the input's scale.
    q = network(jnp.array([1e3, -1e3, 1e3, 0.0]))
    assert np.isfinite(np.asarray(q)).all() and float(jnp.abs(q).max()) < 10.0


@pytest.mark.slow
def test_grid_observations_get_the_layer_norm_cnn():
    snake = eqxrl.envs.Snake()
    network = eqxrl.PQN(env=snake).make_network(jr.key(0))
    assert isinstance(network, eqxrl.nn.CNNQNetwork)
    assert network.convolution_norms is not None and network.dense_norm is not None
    assert network.head.out_features == snake.action_space.num_values
    plain = eqxrl.PQN(env=snake, layer_norm=False).make_network(jr.key(0))
    assert plain.convolution_norms is None and plain.dense_norm is None
    # It trains through PQN's loop: a finite loss, greedy values that move.
    pqn = eqxrl.PQN(
        env=snake, num_envs=8, num_steps=16, total_timesteps=256, num_minibatches=4
    )
    state, metrics = eqx.filter_jit(pqn.train)(jr.key(0))
    assert np.isfinite(np.asarray(metrics["td_loss"])).all()
    before = eqx.filter_jit(pqn.init)(jr.key(0)).network
    assert isinstance(before, eqxrl.nn.CNNQNetwork)
    assert not np.allclose(state.network.dense.weight, before.dense.weight)


def quiet(algorithm, **kwargs):
    return Trainer(algorithm, verbose=False, progress=False, gif_episodes=0, **kwargs)


def test_resume_through_the_trainer_is_exact(env, tmp_path):
    pqn = small(env, total_timesteps=320)  # 10 iterations
    full, full_metrics = quiet(pqn, chunk_size=4, eval_episodes=1).fit(seed=3)
    trainer = quiet(
        pqn, chunk_size=4, eval_episodes=1, out=tmp_path, checkpoint_every=3
    )
    _, first = trainer.fit(seed=3, stop_at_iteration=6)
    resumed, second = trainer.fit(seed=3, resume=True)
    # Everything: the network, RAdam's moments and count, environments, key,
    # iteration (the exploration schedule).
    assert eqx.tree_equal(
        eqx.filter(resumed, eqx.is_array), eqx.filter(full, eqx.is_array)
    )
    for name, values in full_metrics.items():
        np.testing.assert_array_equal(
            np.concatenate([first[name], second[name]]), values, err_msg=name
        )
    state, loaded = eqxrl.load_checkpoint(tmp_path)
    assert isinstance(loaded, eqxrl.PQN) and loaded.hidden_sizes == (16,)
    policy = eqxrl.load_policy(tmp_path)
    assert int(policy.act(jnp.zeros(4), jr.key(0))) in (0, 1)


def test_command_line_trains_pqn(tmp_path, capsys):
    out = tmp_path / "run"
    code = eqxrl.training.main(
        ["train", "CartPole-v1", "--algo", "pqn", "--total-timesteps=256"]
        + ["--num-envs=4", "--num-steps=16", "--num-minibatches=4"]
        + ["--hidden-sizes", "16", "--eval-episodes=1", "--gif-episodes=0"]
        + ["--log=csv", "--out", str(out)]
    )
    assert code == 0, capsys.readouterr().err
    state, loaded = eqxrl.load_checkpoint(out)
    assert isinstance(loaded, eqxrl.PQN) and loaded.num_steps == 16
    assert int(state.iteration) == 4
    assert "td_loss" in (out / "metrics.csv").read_text().splitlines()[0]


@pytest.mark.learning
@pytest.mark.run_bound
def test_purejaxql_s_config_learns_cartpole_in_150k_steps():
    """purejaxql's `pqn_cartpole` config (the defaults) over 150k steps instead of
    500k, 3 seeds vmapped in one program: the greedy policy averages at least 475
    over 16 episodes on 2 of 3. Training is nearly all the cost (3 seeds at 500k:
    52 CPU-s); at 150k, all of 6 other seeds scored 500 (a 2-core AMD EPYC)."""
    pqn = eqxrl.PQN(env=eqxrl.envs.make("CartPole-v1"), total_timesteps=150_000)
    states, _ = eqx.filter_jit(eqx.filter_vmap(pqn.train))(jr.split(jr.key(0), 3))
    greedy = []
    for seed in range(3):
        state = jax.tree.map(lambda x: x[seed] if eqx.is_array(x) else x, states)
        result = evaluate(
            pqn.policy(state, deterministic=True), pqn.env, jr.key(100 + seed)
        )
        greedy.append(float(result.summary()["return_mean"]))
    assert sum(r >= 475 for r in greedy) >= 2, greedy
