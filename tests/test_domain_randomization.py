"""DomainRandomization: parameters sampled per environment and per episode, applied
at every step, visible in PPO's metrics; held-out evaluation; Brax / Playground
randomization functions taken as they are."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxrl
from eqxrl.envs import (
    ENV_METRICS,
    AutoReset,
    CartPole,
    DomainRandomization,
    TimeLimit,
)

# PPO runs optax's Adam (a float raised to an int32 count).
STANDARD_DTYPE_PROMOTION = True

TINY_PPO = dict(
    num_envs=4,
    num_steps=16,
    total_timesteps=4 * 16 * 3,  # 3 iterations
    num_epochs=1,
    num_minibatches=2,
    hidden_sizes=(8,),
)


def gravity_between(low, high):
    def sample_fn(key):
        return {"gravity": jr.uniform(key, (), minval=low, maxval=high)}

    return sample_fn


def sample_physics(key):
    gravity_key, mass_key = jr.split(key)
    return {
        "gravity": jr.uniform(gravity_key, (), minval=5.0, maxval=15.0),
        "pole_mass": jr.uniform(mass_key, (), minval=0.05, maxval=0.5),
    }


def test_parameters_differ_across_environments_and_lie_in_range():
    env = DomainRandomization(CartPole(), sample_physics)
    states, timesteps = jax.vmap(env.reset)(jr.split(jr.key(0), 16))
    gravity = np.asarray(states.parameters["gravity"])
    mass = np.asarray(states.parameters["pole_mass"])
    assert gravity.dtype == np.float32 and gravity.shape == (16,)
    assert len(np.unique(gravity)) == 16 and len(np.unique(mass)) == 16
    assert ((5.0 <= gravity) & (gravity <= 15.0)).all()
    assert ((0.05 <= mass) & (mass <= 0.5)).all()
    # Visible from reset on, under flattened names.
    metrics = timesteps.extras[ENV_METRICS]
    assert set(metrics) == {"domain_parameters/gravity", "domain_parameters/pole_mass"}
    np.testing.assert_array_equal(metrics["domain_parameters/gravity"], gravity)


def test_step_uses_the_parameters():
    """A pole under doubled gravity falls exactly as in a CartPole built with it."""
    env = DomainRandomization(CartPole(), lambda key: {"gravity": jnp.float32(19.6)})
    start, _ = env.reset(jr.key(0))
    action = jnp.int32(0)
    state, timestep = env.step(start, action, jr.key(1))
    heavy, _ = CartPole(gravity=19.6).step(start.env_state, action, jr.key(1))
    light, _ = CartPole().step(start.env_state, action, jr.key(1))
    np.testing.assert_array_equal(state.env_state.physics, heavy.physics)
    assert not np.array_equal(heavy.physics, light.physics)
    assert timestep.extras[ENV_METRICS]["domain_parameters/gravity"] == np.float32(19.6)


def test_parameters_are_resampled_per_episode_under_auto_reset():
    env = AutoReset(DomainRandomization(TimeLimit(CartPole(), 2), sample_physics))

    @jax.jit
    def run(key):
        state, _ = env.reset(key)

        def body(state, key):
            state, timestep = env.step(state, jnp.int32(0), key)
            return state, (state.parameters["gravity"], timestep.truncated)

        return jax.lax.scan(body, state, jr.split(jr.fold_in(key, 1), 6))[1]

    gravity, truncated = run(jr.key(0))
    # Episodes of two steps: the state after steps 1, 3 and 5 (counting from 0)
    # starts a new episode, with new parameters kept for the episode.
    assert truncated.tolist() == [False, True] * 3
    gravity = np.asarray(gravity)
    assert gravity[1] == gravity[2] and gravity[3] == gravity[4]
    assert len(np.unique(gravity[[0, 1, 3, 5]])) == 4


def test_parameters_drawn_once_per_environment_are_kept_across_episodes():
    """`per_episode=False` (Brax's way): each environment keeps its first draw
    through the episodes AutoReset starts; a fresh reset still draws anew."""
    randomized = DomainRandomization(
        TimeLimit(CartPole(), 2), sample_physics, per_episode=False
    )
    env = AutoReset(randomized)

    @jax.jit
    def run(key):
        state, _ = env.reset(key)

        def body(state, key):
            state, timestep = env.step(state, jnp.int32(0), key)
            return state, (state.parameters["gravity"], timestep.truncated, state)

        return jax.lax.scan(body, state, jr.split(jr.fold_in(key, 1), 6))[1]

    gravity, truncated, states = run(jr.key(0))
    assert truncated.tolist() == [False, True] * 3
    gravity = np.asarray(gravity)
    assert len(np.unique(gravity)) == 1
    # The episodes restarted: the time limit's step count went back to 0.
    assert np.asarray(states.env_state.step_count).tolist() == [1, 0] * 3
    # Episodes still start from new initial states.
    physics = np.asarray(states.env_state.env_state.physics)
    assert not np.array_equal(physics[1], physics[3])
    # A fresh reset (another run, an evaluation episode) draws anew, and the
    # held-out sampler keeps the choice.
    first, _ = randomized.reset(jr.key(1))
    assert float(first.parameters["gravity"]) != gravity[0]
    assert not randomized.with_sample_fn(sample_physics).per_episode


def test_check_environment_accepts_it():
    eqxrl.envs.check_environment(
        DomainRandomization(eqxrl.envs.make("CartPole-v1"), sample_physics)
    )


def test_unknown_field_is_named_with_the_fields_there_are():
    with pytest.raises(ValueError, match="'gravty', which is not an array field of "):
        DomainRandomization(CartPole(), lambda key: {"gravty": jnp.float32(1.0)})
    with pytest.raises(ValueError, match="cart_mass, force_magnitude, gravity"):
        DomainRandomization(CartPole(), lambda key: {"gravty": jnp.float32(1.0)})


def test_wrong_shape_and_wrong_type_say_what_to_return():
    with pytest.raises(ValueError, match=r"'gravity' of shape \(2,\).*shape \(\)"):
        DomainRandomization(CartPole(), lambda key: {"gravity": jnp.ones(2)})
    with pytest.raises(ValueError, match="must return a non-empty dict"):
        DomainRandomization(CartPole(), lambda key: jnp.float32(1.0))


def test_custom_apply_fn_sets_anything():
    def apply_fn(env, scale):
        return eqx.tree_at(
            lambda e: (e.pole_mass, e.pole_half_length),
            env,
            (env.pole_mass * scale, env.pole_half_length * scale),
        )

    env = DomainRandomization(
        CartPole(),
        lambda key: jr.uniform(key, (), minval=2.0, maxval=3.0),
        apply_fn=apply_fn,
    )
    state, timestep = env.reset(jr.key(0))
    scale = float(state.parameters)
    assert 2.0 <= scale <= 3.0
    scaled = env.environment(state.parameters)
    assert float(scaled.pole_mass) == pytest.approx(0.1 * scale)
    assert float(scaled.pole_half_length) == pytest.approx(0.5 * scale)
    assert list(timestep.extras[ENV_METRICS]) == ["domain_parameters/value"]


def test_ppo_metrics_report_the_sampled_parameters():
    env = DomainRandomization(eqxrl.envs.make("CartPole-v1"), gravity_between(5, 6))
    ppo = eqxrl.PPO(env=env, **TINY_PPO)
    state, metrics = ppo.train(jr.key(0))
    gravity = np.asarray(metrics["domain_parameters/gravity"])
    assert gravity.shape == (3,)
    assert ((5.0 <= gravity) & (gravity <= 6.0)).all()
    # Every environment holds its own draw in the training state.
    held = np.asarray(state.env_state.env_state.parameters["gravity"])
    assert held.shape == (4,) and len(np.unique(held)) == 4


@pytest.mark.slow
def test_off_policy_metrics_report_the_sampled_parameters():
    """SAC (the off-policy loop) and DQN (the Q-learning loop) average the
    parameters into their metrics too."""

    def pendulum_gravity(key):
        return {"gravity": jr.uniform(key, (), minval=12.0, maxval=13.0)}

    pendulum = DomainRandomization(eqxrl.envs.make("Pendulum-v1"), pendulum_gravity)
    sac = eqxrl.SAC(
        env=pendulum,
        num_envs=2,
        total_timesteps=64,
        learning_starts=16,
        batch_size=8,
        hidden_sizes=(8,),
    )
    _, metrics = sac.train(jr.key(0))
    gravity = np.asarray(metrics["domain_parameters/gravity"])
    assert gravity.shape == (32,) and ((12.0 <= gravity) & (gravity <= 13.0)).all()

    cartpole = DomainRandomization(
        eqxrl.envs.make("CartPole-v1"), gravity_between(5, 6)
    )
    dqn = eqxrl.DQN(
        env=cartpole,
        num_envs=2,
        total_timesteps=64,
        learning_starts=16,
        batch_size=8,
        hidden_sizes=(8,),
    )
    _, metrics = dqn.train(jr.key(0))
    gravity = np.asarray(metrics["domain_parameters/gravity"])
    assert ((5.0 <= gravity) & (gravity <= 6.0)).all()


def time_step_between(low, high):
    def sample_fn(key):
        return {"time_step": jr.uniform(key, (), minval=low, maxval=high)}

    return sample_fn


def test_held_out_evaluation_samples_from_the_held_out_sampler():
    train_env = DomainRandomization(
        TimeLimit(CartPole(), 50), time_step_between(0.02, 0.021)
    )
    # Held out: a time step so short that nothing moves in 50 steps.
    held_out = train_env.with_sample_fn(time_step_between(1e-5, 2e-5))
    assert held_out.env is train_env.env
    states, _ = jax.vmap(held_out.reset)(jr.split(jr.key(0), 8))
    time_step = np.asarray(states.parameters["time_step"])
    assert ((1e-5 <= time_step) & (time_step <= 2e-5)).all()

    ppo = eqxrl.PPO(env=train_env, **TINY_PPO)
    policy = ppo.policy(ppo.init(jr.key(0)), deterministic=True)
    usual = eqxrl.training.evaluate(policy, train_env, jr.key(1), num_episodes=8)
    frozen = eqxrl.training.evaluate(policy, held_out, jr.key(1), num_episodes=8)
    assert np.asarray(frozen.lengths).tolist() == [50] * 8
    assert np.asarray(usual.lengths).max() < 50


# ------------------------------------------------------------------ Brax / Playground


class FakeSystem(eqx.Module):
    """A stand-in for a Brax `System` (or an MJX `Model`)."""

    gravity: jax.Array
    friction: jax.Array


class FakeState(eqx.Module):
    pipeline_state: jax.Array
    obs: jax.Array
    reward: jax.Array
    done: jax.Array
    metrics: dict
    info: dict


class FakeBraxEnv:
    """A Brax-like environment whose dynamics read `self.sys`, as Brax's do."""

    action_size = 1

    def __init__(self):
        self.sys = FakeSystem(jnp.float32(9.8), jnp.ones(3, jnp.float32))

    def reset(self, rng):
        obs = jnp.zeros(2, jnp.float32)
        zero = jnp.float32(0.0)
        return FakeState(obs, obs, zero, zero, {}, {"truncation": zero})

    def step(self, state, action):
        velocity = state.obs[1] + 0.1 * (
            action[0] * jnp.sum(self.sys.friction) - self.sys.gravity
        )
        obs = jnp.stack([state.obs[0] + 0.1 * velocity, velocity])
        zero = jnp.float32(0.0)
        return FakeState(obs, obs, -jnp.abs(obs[0]), zero, {}, {"truncation": zero})


class FakeWrapper:
    """A stand-in for Brax's `Wrapper` (attributes forwarded to `env`)."""

    def __init__(self, env):
        self.env = env

    def __getattr__(self, name):
        if name == "__setstate__":
            raise AttributeError(name)
        return getattr(self.env, name)

    def reset(self, rng):
        return self.env.reset(rng)

    def step(self, state, action):
        return self.env.step(state, action)


def fake_randomization_fn(sys, rng):
    """Brax's convention: a batch of keys in, the batched system and its in_axes out
    (here gravity and friction randomized)."""

    @jax.vmap
    def draw(rng):
        gravity_key, friction_key = jr.split(rng)
        gravity = jr.uniform(gravity_key, (), minval=5.0, maxval=15.0)
        friction = jr.uniform(friction_key, (3,), minval=0.5, maxval=1.5)
        return gravity, friction

    gravity, friction = draw(rng)
    return FakeSystem(gravity, friction), FakeSystem(0, 0)


def gravity_only_randomization_fn(sys, rng):
    gravity = jax.vmap(lambda k: jr.uniform(k, (), minval=20.0, maxval=30.0))(rng)
    return FakeSystem(gravity, sys.friction), FakeSystem(0, None)


def test_brax_randomization_samples_per_environment_and_steps_with_it():
    brax_env = FakeWrapper(FakeBraxEnv())
    env = eqxrl.envs.brax_randomization(
        TimeLimit(eqxrl.envs.from_brax(brax_env), 10), fake_randomization_fn
    )
    eqxrl.envs.check_environment(env)
    states, timesteps = jax.vmap(env.reset)(jr.split(jr.key(0), 8))
    gravity = np.asarray(states.parameters["gravity"])
    friction = np.asarray(states.parameters["friction"])
    assert gravity.shape == (8,) and friction.shape == (8, 3)
    assert len(np.unique(gravity)) == 8
    assert ((5.0 <= gravity) & (gravity <= 15.0)).all()
    metrics = timesteps.extras[ENV_METRICS]
    np.testing.assert_allclose(
        metrics["domain_parameters/friction"], friction.mean(axis=1), rtol=1e-6
    )

    actions = jnp.ones((8, 1), jnp.float32)
    states, timesteps = jax.jit(jax.vmap(env.step))(
        states, actions, jr.split(jr.key(1), 8)
    )
    # The fake dynamics: velocity = 0.1 * (sum(friction) - gravity) after one step.
    expected = 0.1 * (friction.sum(axis=1) - gravity)
    np.testing.assert_allclose(timesteps.observation[:, 1], expected, rtol=1e-5)
    # The Brax environment given is left as it was.
    assert float(brax_env.env.sys.gravity) == pytest.approx(9.8)


def test_brax_randomization_can_draw_once_per_environment():
    """`per_episode=False`, Brax's way: a restarted episode keeps the draw."""
    env = eqxrl.envs.brax_randomization(
        TimeLimit(eqxrl.envs.from_brax(FakeBraxEnv()), 10),
        fake_randomization_fn,
        per_episode=False,
    )
    assert not env.per_episode
    state, _ = env.reset(jr.key(0))
    restarted, timestep = env.restart(state, jr.key(1))
    assert float(restarted.parameters["gravity"]) == float(state.parameters["gravity"])
    assert (
        timestep.extras[ENV_METRICS]["domain_parameters/gravity"]
        == state.parameters["gravity"]
    )
    redrawn, _ = eqxrl.envs.brax_randomization(
        TimeLimit(eqxrl.envs.from_brax(FakeBraxEnv()), 10), fake_randomization_fn
    ).restart(state, jr.key(1))
    assert float(redrawn.parameters["gravity"]) != float(state.parameters["gravity"])


def test_brax_randomization_keeps_only_the_leaves_it_batches():
    env = eqxrl.envs.brax_randomization(
        eqxrl.envs.from_brax(FakeBraxEnv()), gravity_only_randomization_fn
    )
    state, timestep = env.reset(jr.key(0))
    assert set(state.parameters) == {"gravity"}
    assert 20.0 <= float(state.parameters["gravity"]) <= 30.0
    assert list(timestep.extras[ENV_METRICS]) == ["domain_parameters/gravity"]


@pytest.mark.slow
def test_brax_hyperparameters_take_the_randomization_fn():
    """Brax's `randomization_fn` argument, given to PPO's and SAC's translations of
    Brax's settings, randomizes the time-limited environment (as Brax's trainers
    wrap theirs); on an environment that is not from_brax, brax_randomization's
    error."""
    settings = dict(
        num_timesteps=2048, episode_length=10, num_envs=8, batch_size=8,
        num_minibatches=4, unroll_length=8, randomization_fn=fake_randomization_fn,
    )  # fmt: skip
    ppo = eqxrl.PPO.from_brax_hyperparameters(
        eqxrl.envs.from_brax(FakeBraxEnv()), **settings
    )
    assert isinstance(ppo.env, DomainRandomization)
    assert isinstance(ppo.env.env, TimeLimit) and ppo.env.env.max_episode_steps == 10
    _, metrics = ppo.train(jr.key(0))
    gravity = np.asarray(metrics["domain_parameters/gravity"])
    assert ((5.0 <= gravity) & (gravity <= 15.0)).all()
    sac = eqxrl.SAC.from_brax_hyperparameters(
        eqxrl.envs.from_brax(FakeBraxEnv()),
        num_timesteps=256,
        episode_length=10,
        num_envs=8,
        batch_size=8,
        min_replay_size=16,
        randomization_fn=fake_randomization_fn,
    )
    assert isinstance(sac.env, DomainRandomization)
    with pytest.raises(ValueError, match="not a FromBrax"):
        eqxrl.PPO.from_brax_hyperparameters(
            eqxrl.envs.Pendulum(), **{**settings, "num_envs": 8}
        )


def test_brax_randomization_refuses_other_environments():
    with pytest.raises(ValueError, match="not a FromBrax"):
        eqxrl.envs.brax_randomization(CartPole(), fake_randomization_fn)


@pytest.mark.filterwarnings("ignore:JAXopt:DeprecationWarning")
@pytest.mark.filterwarnings("ignore:Brax System:UserWarning")
@pytest.mark.filterwarnings("ignore:Accessing .* from `Data`:DeprecationWarning")
def test_brax_own_randomization_function():
    """A randomization function as Brax's trainers take it, on a real Brax
    environment (only where Brax is installed)."""
    pytest.importorskip("brax")
    from brax import envs

    def randomization_fn(sys, rng):
        @jax.vmap
        def scale(rng):
            return sys.gravity * jr.uniform(rng, (), minval=0.5, maxval=1.5)

        gravity = scale(rng)
        in_axes = jax.tree.map(lambda _: None, sys)
        in_axes = in_axes.tree_replace({"gravity": 0})
        return sys.tree_replace({"gravity": gravity}), in_axes

    brax_env = envs.get_environment("inverted_pendulum", backend="generalized")
    env = eqxrl.envs.brax_randomization(
        TimeLimit(eqxrl.envs.from_brax(brax_env), 20), randomization_fn
    )
    eqxrl.envs.check_environment(env)
    states, _ = jax.vmap(env.reset)(jr.split(jr.key(0), 2))
    gravity = np.asarray(states.parameters["gravity"])
    assert gravity.shape == (2, 3) and not np.array_equal(gravity[0], gravity[1])
    action = jnp.zeros((2, brax_env.action_size), jnp.float32)
    jax.vmap(env.step)(states, action, jr.split(jr.key(1), 2))


# Every algorithm's metrics report the parameters (the rollouts share
# `episode_statistics`, the iterations `iteration_episode_metrics`): one iteration
# or two of each at toy sizes. PPO, SAC and DQN are above.
def cartpole_gravity():
    return DomainRandomization(eqxrl.envs.make("CartPole-v1"), gravity_between(5, 6))


def pendulum_gravity():
    def sample_fn(key):
        return {"gravity": jr.uniform(key, (), minval=12.0, maxval=13.0)}

    return DomainRandomization(eqxrl.envs.make("Pendulum-v1"), sample_fn)


def treasure_hunt_spawns():
    def sample_fn(key):
        return {"spawn_probability": jr.uniform(key, (), minval=0.04, maxval=0.06)}

    world = eqxrl.envs.make(
        "TreasureHunt-v0", height=7, width=7, vision_radius=1, num_frames=2
    )
    return DomainRandomization(world, sample_fn)


TINY_Q_LEARNING = dict(
    num_envs=2,
    total_timesteps=2 * 8 * 2,
    train_frequency=8,
    buffer_size=32,
    learning_starts=8,
    batch_size=8,
    hidden_sizes=(8,),
)
TINY_PQN = dict(
    num_envs=2,
    num_steps=8,
    total_timesteps=2 * 8 * 2,
    num_epochs=1,
    num_minibatches=2,
    hidden_sizes=(8,),
)


def tiny_amp():
    t = np.linspace(0.0, 6.0, 33)
    trajectory = np.stack([np.cos(t), np.sin(t), 2.0 * np.cos(2.0 * t)], axis=-1)
    reference = eqxrl.buffers.ReferenceMotion.from_trajectory(trajectory)
    ppo = eqxrl.PPO(env=pendulum_gravity(), **TINY_PPO)
    return eqxrl.algorithms.AMP(ppo, reference)


ALGORITHMS = {
    "PQN": lambda: eqxrl.PQN(env=cartpole_gravity(), **TINY_PQN),
    "IQN": lambda: eqxrl.IQN(env=cartpole_gravity(), **TINY_Q_LEARNING),
    "TD3": lambda: eqxrl.TD3(
        env=pendulum_gravity(),
        num_envs=2,
        total_timesteps=64,
        learning_starts=16,
        batch_size=8,
        hidden_sizes=(8,),
    ),
    "AMP": tiny_amp,
    "Independent PPO": lambda: eqxrl.multiagent.Independent(
        eqxrl.PPO(env=treasure_hunt_spawns(), **TINY_PPO)
    ),
    "Independent DQN": lambda: eqxrl.multiagent.Independent(
        eqxrl.DQN(env=treasure_hunt_spawns(), **TINY_Q_LEARNING)
    ),
    "MAPPO": lambda: eqxrl.multiagent.MAPPO(
        eqxrl.PPO(env=treasure_hunt_spawns(), **TINY_PPO),
        critic_input="agent_specific",
    ),
    "VDN": lambda: eqxrl.multiagent.VDN(
        eqxrl.DQN(env=treasure_hunt_spawns(), **TINY_Q_LEARNING)
    ),
    "QMIX": lambda: eqxrl.multiagent.QMIX(
        eqxrl.DQN(env=treasure_hunt_spawns(), **TINY_Q_LEARNING),
        embedding_size=8,
        hypernet_hidden_size=8,
    ),
    "PQN-VDN": lambda: eqxrl.multiagent.PQNVDN(
        eqxrl.PQN(env=treasure_hunt_spawns(), **TINY_PQN)
    ),
}
RANGES = {
    "gravity": (5.0, 6.0),  # CartPole's (Pendulum's: 12-13)
    "spawn_probability": (0.04, 0.06),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_algorithm_reports_the_sampled_parameters(name):
    algorithm = ALGORITHMS[name]()
    _, metrics = algorithm.train(jr.key(0))
    reported = {k: v for k, v in metrics.items() if k.startswith("domain_parameters/")}
    assert len(reported) == 1, sorted(metrics)
    ((key, values),) = reported.items()
    parameter = key.removeprefix("domain_parameters/")
    low, high = (12.0, 13.0) if name in ("TD3", "AMP") else RANGES[parameter]
    values = np.asarray(values)
    # One mean per iteration, over every step of every world.
    assert values.ndim == 1 and len(values) >= 2, values.shape
    assert ((low <= values) & (values <= high)).all(), values
