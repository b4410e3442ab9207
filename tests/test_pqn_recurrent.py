"""PQN-RNN (PQN with a recurrent Q-network): training, the carry's resets at episode
starts, its configuration check, resume through the Trainer, evaluation with the
carry, and learning what a feed-forward PQN cannot (gymnax's MemoryChain)."""

import functools

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

# 5 iterations of 4 envs x 8 steps, 2 epochs of 2 minibatches of 2 sequences.
SMALL = dict(
    num_envs=4,
    num_steps=8,
    total_timesteps=160,
    num_epochs=2,
    num_minibatches=2,
    network_factory=functools.partial(
        eqxrl.nn.GRUQNetwork.from_env, hidden_size=16, encoder_sizes=(16,)
    ),
)


@pytest.fixture(scope="module")
def env():
    return eqxrl.envs.make("StatelessCartPole-v1")


def small(env, **overrides):
    return eqxrl.PQN(env=env, **{**SMALL, **overrides})


def test_trains_on_stateless_cartpole_with_a_carry_per_environment(env):
    pqn = small(env)
    state, metrics = eqx.filter_jit(pqn.train)(jr.key(0))
    assert isinstance(state.network, eqxrl.nn.GRUQNetwork)
    assert state.carry.hidden.shape == (4, 16)
    assert int(state.iteration) == 5
    assert metrics["td_loss"].shape == (5,)
    for name in ("td_loss", "q_value", "epsilon", "learning_rate"):
        assert np.isfinite(np.asarray(metrics[name])).all(), name
    # Episodes of random actions on CartPole end within the 40 steps.
    assert float(metrics["episode_count"].sum()) > 0
    # A feed-forward PQN's state has no carry.
    feed_forward = eqxrl.PQN(env=env, num_envs=4, num_steps=8, total_timesteps=160)
    assert feed_forward.init(jr.key(0)).carry is None


def test_refuses_minibatches_that_split_no_whole_sequences(env):
    # 32 steps divide into 8 minibatches, but 4 environments' sequences do not.
    with pytest.raises(ValueError, match="num_minibatches=8 must divide num_envs=4"):
        small(env, num_minibatches=8)


@pytest.mark.slow
def test_the_carry_resets_where_an_episode_starts(env):
    """The rollout's values, acted step by step, are the network's stepped from the
    state's carry with a reset exactly where `episode_start` is set, and its
    `unroll` of the stored sequences (what the learner replays) gives them too."""
    pqn = small(env, num_steps=32, total_timesteps=128)
    state = pqn.init(jr.key(1))
    # A few random iterations first, so that the carries are not initial ones.
    state, _ = eqx.filter_jit(pqn.train_iterations)(state, 2)
    collect = eqx.filter_jit(pqn.collect)
    _, _, final_carry, rollout = collect(state, jnp.float32(1.0), jr.key(2))
    network = state.network
    # One program for the steps below (op by op, each step dispatched dozens).
    step = eqx.filter_jit(network.step)
    starts = np.asarray(rollout.episode_start)
    assert starts[1:].any(), "no episode started inside the rollout"
    for env_index in range(pqn.num_envs):
        carry = jax.tree.map(lambda x: x[env_index], state.carry)
        stepped = []
        for t in range(pqn.num_steps):
            if starts[t, env_index]:
                carry = network.initial_carry()
            carry, q_values = step(carry, rollout.observation[t, env_index])
            stepped.append(float(q_values.max()))
        np.testing.assert_allclose(
            np.asarray(rollout.value[:, env_index]), stepped, rtol=1e-4, atol=1e-5
        )
        np.testing.assert_allclose(
            np.asarray(final_carry.hidden[env_index]),
            np.asarray(carry.hidden),
            rtol=1e-4,
            atol=1e-5,
        )
    _, unrolled = jax.vmap(network.unroll, in_axes=(0, 1, 1), out_axes=(0, 1))(
        state.carry, rollout.observation, rollout.episode_start
    )
    np.testing.assert_allclose(
        np.asarray(unrolled.max(axis=-1)),
        np.asarray(rollout.value),
        rtol=1e-4,
        atol=1e-5,
    )
    # The resets matter: without them the values differ after the first start.
    _, never_reset = jax.vmap(network.unroll, in_axes=(0, 1, 1), out_axes=(0, 1))(
        state.carry, rollout.observation, jnp.zeros_like(rollout.episode_start)
    )
    assert not np.allclose(
        np.asarray(never_reset.max(axis=-1)), np.asarray(rollout.value), atol=1e-3
    )


def test_the_policy_evaluates_with_its_carry(env):
    pqn = small(env)
    state, _ = eqx.filter_jit(pqn.train)(jr.key(0))
    policy = pqn.policy(state, deterministic=True)
    assert policy.is_recurrent
    assert policy.initial_carry().hidden.shape == (16,)
    result = evaluate(policy, pqn.env, jr.key(3), num_episodes=4)
    returns = np.asarray(result.returns)
    assert returns.shape == (4,) and np.isfinite(returns).all() and returns.min() > 0


def quiet(algorithm, **kwargs):
    return Trainer(algorithm, verbose=False, progress=False, gif_episodes=0, **kwargs)


@pytest.mark.slow
def test_resume_through_the_trainer_is_exact(env, tmp_path):
    # A factory the checkpoint's configuration can name: GRUQNetwork at its
    # defaults.
    pqn = small(
        env, total_timesteps=320, network_factory=eqxrl.nn.GRUQNetwork.from_env
    )  # 10 iterations
    full, full_metrics = quiet(pqn, chunk_size=4, eval_episodes=1).fit(seed=3)
    trainer = quiet(
        pqn, chunk_size=4, eval_episodes=1, out=tmp_path, checkpoint_every=3
    )
    _, first = trainer.fit(seed=3, stop_at_iteration=6)
    resumed, second = trainer.fit(seed=3, resume=True)
    # Everything: the network, RAdam's moments and count, environments, carries,
    # key, iteration.
    assert eqx.tree_equal(
        eqx.filter(resumed, eqx.is_array), eqx.filter(full, eqx.is_array)
    )
    for name, values in full_metrics.items():
        np.testing.assert_array_equal(
            np.concatenate([first[name], second[name]]), values, err_msg=name
        )
    state, loaded = eqxrl.load_checkpoint(tmp_path)
    assert isinstance(loaded, eqxrl.PQN)
    assert loaded.network_factory == eqxrl.nn.GRUQNetwork.from_env
    assert state.carry.hidden.shape == (4, 64)
    policy = eqxrl.load_policy(tmp_path)
    assert policy.is_recurrent
    _, action = policy.step(policy.initial_carry(), jnp.zeros(2), jr.key(0))
    assert int(action) in (0, 1)


def memory_chain(memory_length: int) -> eqxrl.envs.AbstractEnvironment:
    gymnax = pytest.importorskip("gymnax")
    from gymnax.environments.bsuite.memory_chain import EnvParams

    gymnax_env, _ = gymnax.make("MemoryChain-bsuite")
    return eqxrl.envs.from_gymnax(gymnax_env, EnvParams(memory_length=memory_length))


@pytest.mark.learning
def test_remembers_what_a_feed_forward_pqn_cannot():
    """MemoryChain (bsuite) with a memory of 5 steps: the context, shown at an
    episode's first step only, decides the +1 or -1 of its last. Without memory the
    best policy guesses (mean 0). 4 seeds vmapped in one program each: the greedy
    PQN-RNN averages at least 0.9 over 64 episodes on 3 of 4 seeds, the
    feed-forward PQN at most 0.5 on all."""
    env = memory_chain(memory_length=5)
    config = dict(
        env=env,
        num_envs=16,
        num_steps=32,
        # 16 iterations: every seed's greedy PQN-RNN already averages 1.0.
        total_timesteps=8_192,
        num_minibatches=4,
        learning_rate=1e-3,
        anneal_lr=False,
        reward_scale=1.0,
        exploration_final_eps=0.05,
    )
    recurrent = eqxrl.PQN(**config, network_factory=eqxrl.nn.GRUQNetwork.from_env)
    feed_forward = eqxrl.PQN(**config, hidden_sizes=(64, 64))
    greedy = {}
    for name, pqn in (("recurrent", recurrent), ("feed_forward", feed_forward)):
        states, _ = eqx.filter_jit(eqx.filter_vmap(pqn.train))(jr.split(jr.key(0), 4))
        greedy[name] = []
        for seed in range(4):
            state = jax.tree.map(lambda x: x[seed] if eqx.is_array(x) else x, states)
            result = evaluate(
                pqn.policy(state, deterministic=True),
                pqn.env,
                jr.key(100 + seed),
                num_episodes=64,
            )
            greedy[name].append(float(result.summary()["return_mean"]))
    assert sum(r >= 0.9 for r in greedy["recurrent"]) >= 3, greedy
    assert all(r <= 0.5 for r in greedy["feed_forward"]), greedy


@pytest.mark.slow
def test_command_line_trains_pqn_rnn(tmp_path, capsys):
    """`--algo pqn --gru-size N` is PQN-RNN: the checkpoint rebuilds a GRU
    Q-network with a carry per environment, and `eqxrl eval` acts with it."""
    out = tmp_path / "run"
    code = eqxrl.training.main(
        ["train", "StatelessCartPole-v1", "--algo", "pqn", "--gru-size", "8"]
        + ["--hidden-sizes", "16", "--total-timesteps=128", "--num-envs=4"]
        + ["--num-steps=16"]
        + ["--num-minibatches=2", "--eval-episodes=1", "--gif-episodes=0"]
        + ["--log=csv", "--out", str(out)]
    )
    assert code == 0, capsys.readouterr().err
    state, loaded = eqxrl.load_checkpoint(out)
    assert isinstance(state.network, eqxrl.nn.GRUQNetwork)
    assert loaded.gru_size == 8 and state.network.core.cell.hidden_size == 8
    assert jax.tree.leaves(state.carry)[0].shape == (4, 8)
    capsys.readouterr()
    assert eqxrl.training.main(["eval", str(out), "--episodes", "2"]) == 0
    assert "return" in capsys.readouterr().out


def test_gru_size_makes_the_default_network_purejaxql_s_pqn_rnn(env):
    """`gru_size` puts a GRU after the LayerNorm hidden layers; `layer_norm=False`
    leaves the norms out; a factory and `gru_size` together are refused."""
    pqn = eqxrl.PQN(env=env, hidden_sizes=(32, 16), gru_size=8)
    network = pqn.make_network(jr.key(0))
    assert isinstance(network, eqxrl.nn.GRUQNetwork) and network.is_recurrent
    assert [layer.out_features for layer in network.core.layers] == [32, 16]
    assert [norm.shape for norm in network.core.layer_norms] == [(32,), (16,)]
    assert network.core.cell.hidden_size == 8
    # LayerNorm before each activation: the GRU's input does not grow with the
    # observation's scale (without it, it grows as the observation).
    plain = eqxrl.PQN(env=env, hidden_sizes=(32, 16), gru_size=8, layer_norm=False)
    plain = plain.make_network(jr.key(0))
    assert plain.core.layer_norms is None
    observation = jnp.array([0.1, -0.2])
    for model, growth in ((network, 1.0), (plain, 1e4)):
        small, large = (model.core.encode(observation * s) for s in (1.0, 1e4))
        np.testing.assert_allclose(large, growth * small, rtol=1e-3, atol=1e-4)
    with pytest.raises(ValueError, match="gru_size=0 must be >= 1"):
        eqxrl.PQN(env=env, gru_size=0)
    with pytest.raises(ValueError, match="gru_size shapes the default network"):
        eqxrl.PQN(env=env, gru_size=8, network_factory=SMALL["network_factory"])
