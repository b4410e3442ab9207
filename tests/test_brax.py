"""Adapters between eqxrl and Brax / MuJoCo Playground: `from_brax` (a Brax
environment as an eqxrl one) and `to_brax` (an eqxrl environment that Brax's own
wrappers and trainers run)."""

import sys
import time
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

brax = pytest.importorskip("brax")

with warnings.catch_warnings():
    # Brax's physics imports jaxopt, which says it is no longer maintained.
    warnings.filterwarnings("ignore", "JAXopt", DeprecationWarning)
    from brax.envs.base import Env, State
    from brax.envs.wrappers.training import (
        EpisodeWrapper,
        wrap as brax_training_wrap,
    )

import eqxrl  # noqa: E402
from eqxrl.envs import (  # noqa: E402
    AbstractEnvironment,
    AbstractWrapper,
    AutoReset,
    Box,
    CartPole,
    Dict,
    EpisodeStatistics,
    TimeLimit,
    Tuple,
    check_environment,
    from_brax,
    to_brax,
)

# Brax's physics and Brax's and eqxrl's PPO (optax's Adam) are written for standard
# dtype promotion.
STANDARD_DTYPE_PROMOTION = True

# What Brax's own code says on every use: its MJCF loader, that its pipelines are
# no longer maintained; its physics, through MuJoCo's deprecated `Data` fields.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Brax System:UserWarning"),
    pytest.mark.filterwarnings("ignore:Accessing .* from `Data`:DeprecationWarning"),
]

PENDULUM_ACTIONS = jnp.array([[0.5], [-0.3], [1.0], [0.0], [-1.0], [0.25]])


@pytest.fixture(scope="module")
def pendulum():
    """Brax's inverted pendulum on its default backend, loaded once."""
    return brax.envs.get_environment("inverted_pendulum", backend="generalized")


@eqx.filter_jit
def rollout(env, actions, key=jr.key(0)):
    """Step one eqxrl environment through `actions` in a scan; the first timestep
    and the stacked later ones (one compilation per environment and actions'
    shape: Brax's physics is slow to run op by op)."""
    state, first = env.reset(key)

    def step(state, inputs):
        action, key = inputs
        return env.step(state, action, key)

    keys = jr.split(jr.fold_in(key, 1), len(actions))
    _, timesteps = jax.lax.scan(step, state, (actions, keys))
    return first, timesteps


# -- from_brax -------------------------------------------------------------------------


class DictObservationEnv(Env):
    """A tiny Brax environment with Playground's dict observations: a point moving
    by its action, with a privileged view of its velocity; it ends past |x| > 1."""

    def reset(self, rng):
        position = jr.uniform(rng, (2,), minval=-0.1, maxval=0.1)
        zero = jnp.float32(0.0)
        return State(position, self._observation(position), zero, zero, {}, {})

    def step(self, state, action):
        position = state.pipeline_state + 0.4 * action
        done = jnp.where(jnp.abs(position).max() > 1.0, 1.0, 0.0)
        return state.replace(
            pipeline_state=position,
            obs=self._observation(position),
            reward=-jnp.sum(position**2),
            done=done,
        )

    def _observation(self, position):
        return {
            "state": position,
            "privileged_state": jnp.concatenate([position, jnp.ones(3)]),
        }

    @property
    def observation_size(self):
        return {"state": (2,), "privileged_state": (5,)}

    @property
    def action_size(self):
        return 2

    @property
    def backend(self):
        return "none"


def test_from_brax_keeps_the_contract(pendulum):
    env = from_brax(pendulum)
    check_environment(env)
    assert env.observation_space.shape == (4,)
    assert not np.isfinite(env.observation_space.low).any()
    assert env.action_space.shape == (1,)
    np.testing.assert_array_equal(env.action_space.low, [-1.0])
    np.testing.assert_array_equal(env.action_space.high, [1.0])
    # Brax's inverted pendulum returns `reward=1.0`, a Python float, from `step`.
    state, _ = jax.jit(env.reset)(jr.key(0))
    state, timestep = jax.jit(env.step)(state, jnp.zeros(1), jr.key(1))
    assert state.reward.dtype == jnp.float32 and not state.reward.weak_type
    assert timestep.reward.dtype == jnp.float32 and timestep.extras == {}


def test_from_brax_by_name_passes_the_keywords():
    env = from_brax("inverted_pendulum", backend="spring")
    assert env.brax_env.backend == "spring"
    with pytest.raises(TypeError, match="get_environment"):
        from_brax(env.brax_env, backend="spring")


@pytest.mark.slow
def test_from_brax_values_are_brax_own(pendulum):
    env = from_brax(pendulum)
    first, timesteps = rollout(env, PENDULUM_ACTIONS)

    state = jax.jit(pendulum.reset)(jr.key_data(jr.key(0)))
    np.testing.assert_array_equal(first.observation, state.obs)
    step = jax.jit(pendulum.step)
    for t, action in enumerate(PENDULUM_ACTIONS):
        state = step(state, action)
        np.testing.assert_allclose(timesteps.observation[t], state.obs, atol=1e-6)
        assert float(timesteps.reward[t]) == float(state.reward)
        assert bool(timesteps.terminated[t]) == bool(state.done)
    assert not timesteps.truncated.any()  # a raw Brax environment has no time limit


def test_actions_are_clipped_to_brax_range():
    env = from_brax(DictObservationEnv())  # moves by 0.4 x action, unclipped
    _, too_large = rollout(env, jnp.array([[3.0, -0.5], [-7.0, 0.25]]))
    _, clipped = rollout(env, jnp.array([[1.0, -0.5], [-1.0, 0.25]]))
    np.testing.assert_array_equal(
        too_large.observation["state"], clipped.observation["state"]
    )


@pytest.mark.slow
def test_brax_time_limit_is_truncation_and_a_fall_is_termination(pendulum):
    limited = from_brax(EpisodeWrapper(pendulum, episode_length=3, action_repeat=1))
    check_environment(limited)
    _, timesteps = rollout(limited, jnp.zeros((3, 1)))
    np.testing.assert_array_equal(timesteps.truncated, [False, False, True])
    assert not timesteps.terminated.any()

    # Full force one way tips the pole past 0.2 rad well within 1000 steps.
    long = from_brax(EpisodeWrapper(pendulum, episode_length=1000, action_repeat=1))
    _, timesteps = rollout(long, jnp.ones((40, 1)))
    ended = np.flatnonzero(timesteps.terminated)
    assert ended.size > 0, "the pole did not fall"
    assert not timesteps.truncated.any()
    assert abs(float(timesteps.observation[ended[0], 1])) > 0.2


@pytest.mark.slow
def test_from_brax_under_jit_vmap_and_scan_with_auto_reset(pendulum):
    env = AutoReset(EpisodeStatistics(TimeLimit(from_brax(pendulum), 5)))
    num_envs, num_steps = 3, 12
    keys = jr.split(jr.key(0), num_envs)
    states, _ = eqx.filter_jit(eqx.filter_vmap(env.reset))(keys)

    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def run(env, states):
        def step(states, key):
            actions = jnp.zeros((num_envs, 1))
            states, timesteps = jax.vmap(env.step)(
                states, actions, jr.split(key, num_envs)
            )
            return states, timesteps

        return jax.lax.scan(step, states, jr.split(jr.key(1), num_steps))

    _, timesteps = run(env, states)
    _, again = run(env, states)
    np.testing.assert_array_equal(timesteps.observation, again.observation)
    # The pole stays up for 5 zero-force steps: every episode is cut by the limit.
    assert timesteps.truncated.shape == (num_steps, num_envs)
    assert timesteps.truncated[4::5].all() and timesteps.truncated.sum() == 6
    assert not timesteps.terminated.any()
    np.testing.assert_array_equal(timesteps.extras["episode_length"][4], [5, 5, 5])

    # `jax.jit(env.step)` hashes the environment (the Brax one is a static field)
    # and steps as the scan did.
    first_env = jax.tree.map(lambda x: x[0], states)
    key = jr.split(jr.split(jr.key(1), num_steps)[0], num_envs)[0]
    _, timestep = jax.jit(env.step)(first_env, jnp.zeros(1), key)
    np.testing.assert_allclose(
        timestep.observation, timesteps.observation[0, 0], atol=1e-6
    )


def test_from_brax_refuses_brax_batching_wrappers(pendulum):
    with pytest.raises(ValueError, match="AutoResetWrapper"):
        from_brax(brax_training_wrap(pendulum, episode_length=10))


def test_dict_observations_stay_structured():
    env = from_brax(DictObservationEnv())
    check_environment(env)
    space = env.observation_space
    assert isinstance(space, Dict) and space.keys() == ["privileged_state", "state"]
    assert space["state"].shape == (2,) and space["privileged_state"].shape == (5,)
    first, timesteps = rollout(env, jnp.full((3, 2), 1.0))
    assert set(first.observation) == {"state", "privileged_state"}
    np.testing.assert_allclose(
        timesteps.observation["state"], timesteps.observation["privileged_state"][:, :2]
    )
    # +0.4 per step from |x| <= 0.1: past 1 on the third step.
    np.testing.assert_array_equal(timesteps.terminated, [False, False, True])
    # PPO's default network reads the keys it is told to.
    ppo = eqxrl.PPO(
        env=TimeLimit(env, 10),
        num_envs=2,
        num_steps=4,
        total_timesteps=8,
        num_minibatches=1,
        actor_keys=("state",),
        critic_keys=("privileged_state",),
    )
    ppo.train(jr.key(0))


@pytest.mark.slow
def test_playground_environment_converts():
    registry = pytest.importorskip("mujoco_playground").registry
    # dm_control suite tasks ship their MJCF; "jax" runs them in MJX (no warp).
    playground_env = registry.load("CartpoleBalance", config_overrides={"impl": "jax"})
    # MuJoCo's MJX relies on NumPy's rank promotion.
    with jax.numpy_rank_promotion("allow"):
        env = from_brax(playground_env)
        check_environment(env)
        _, timesteps = rollout(env, jnp.zeros((2, 1)))
    assert env.observation_space.shape == (5,) and env.action_space.shape == (1,)
    assert timesteps.reward.shape == (2,) and (timesteps.reward > 0).all()


# -- to_brax ---------------------------------------------------------------------------


def test_to_brax_takes_the_time_limit_for_brax_episode_length():
    env = to_brax(eqxrl.envs.make("CartPole-v1"))
    assert isinstance(env, Env)
    assert isinstance(env.env, CartPole) and env.episode_length == 500
    assert env.observation_size == 4 and env.action_size == 2
    assert env.backend == "eqxrl" and env.unwrapped is env
    assert to_brax(CartPole()).episode_length is None


def test_to_brax_reset_and_step():
    env = to_brax(eqxrl.envs.make("CartPole-v1"))
    state = jax.jit(env.reset)(jax.random.PRNGKey(0))  # a raw key, as Brax passes
    assert state.obs.shape == (4,) and state.obs.dtype == jnp.float32
    assert state.done.dtype == jnp.float32 and float(state.done) == 0.0
    assert set(state.info) == {"rng", "truncation", "extras"}
    assert state.info["rng"].dtype == jnp.uint32
    step = jax.jit(env.step)
    next_state = step(state, jnp.array([0.2, -0.7]))
    assert float(next_state.reward) == 1.0 and float(next_state.done) == 0.0
    assert next_state.obs.shape == (4,)
    assert not np.array_equal(next_state.info["rng"], state.info["rng"])
    # Same state, same action: the same step (pure), also called eagerly with NumPy.
    eager = env.step(state, np.array([0.2, -0.7], np.float32))
    np.testing.assert_allclose(eager.obs, next_state.obs, atol=1e-6)


@pytest.mark.parametrize(
    ("vector", "expected"),
    [([0.3, -0.2], 0), ([-0.5, 0.9], 1), ([-0.9, -0.1], 1), ([1.0, 0.99], 0)],
)
def test_discrete_action_is_the_argmax(vector, expected):
    env = to_brax(CartPole())
    state = env.reset(jax.random.PRNGKey(0))
    stepped = env.step(state, jnp.array(vector))
    env_state = state.pipeline_state.env_state
    key = jr.split(jr.wrap_key_data(state.info["rng"]))[1]
    _, taken = CartPole().step(env_state, jnp.int32(expected), key)
    _, other = CartPole().step(env_state, jnp.int32(1 - expected), key)
    np.testing.assert_array_equal(stepped.obs, taken.observation)
    assert not np.array_equal(stepped.obs, other.observation)


def test_discrete_decoding_never_takes_a_masked_action():
    maze = eqxrl.envs.GridMaze()
    env = to_brax(maze)
    assert env.action_size == 4
    state = env.reset(jax.random.PRNGKey(0))
    mask = np.asarray(state.pipeline_state.action_mask)
    assert mask.any() and not mask.all(), "the start cell should have a wall"
    # The action vector prefers every invalid action to every valid one.
    vector = np.where(mask, np.arange(4) * 0.1 - 0.9, 0.9)
    (best_valid,) = np.flatnonzero(mask)[-1:]
    stepped = env.step(state, jnp.asarray(vector, jnp.float32))
    key = jr.split(jr.wrap_key_data(state.info["rng"]))[1]
    expected, _ = maze.step(state.pipeline_state.env_state, jnp.int32(best_valid), key)
    np.testing.assert_array_equal(
        stepped.pipeline_state.env_state.position, expected.position
    )


def test_box_action_is_rescaled_to_the_bounds():
    pendulum = eqxrl.envs.Pendulum()  # torque in [-2, 2]
    env = to_brax(pendulum)
    assert env.action_size == 1
    state = env.reset(jax.random.PRNGKey(0))
    key = jr.split(jr.wrap_key_data(state.info["rng"]))[1]
    env_state = state.pipeline_state.env_state
    for vector, torque in [(0.5, 1.0), (-1.0, -2.0), (3.0, 2.0)]:
        stepped = env.step(state, jnp.array([vector]))
        _, timestep = pendulum.step(env_state, jnp.array([torque]), key)
        np.testing.assert_allclose(stepped.obs, timestep.observation, atol=1e-6)


def test_inner_truncation_ends_the_brax_episode():
    env = to_brax(EpisodeStatistics(TimeLimit(CartPole(), 2)))
    assert env.episode_length is None  # the TimeLimit is not outermost
    state = env.reset(jax.random.PRNGKey(0))
    for expected in (0.0, 1.0):
        state = env.step(state, jnp.array([1.0, 0.0]))
        assert float(state.done) == expected
        assert float(state.info["truncation"]) == expected
    assert float(state.info["extras"]["episode_length"]) == 2


class StructuredObservation(AbstractWrapper):
    """CartPole's observation split into a dict or a tuple of two parts."""

    env: AbstractEnvironment
    kind: str = eqx.field(static=True)

    def _split(self, observation):
        parts = (observation[:2], observation[2:])
        return dict(zip(("cart", "pole"), parts)) if self.kind == "dict" else parts

    @property
    def observation_space(self):
        parts = (Box(-jnp.inf, jnp.inf, (2,)), Box(-jnp.inf, jnp.inf, (2,)))
        if self.kind == "dict":
            return Dict(cart=parts[0], pole=parts[1])
        return Tuple(parts)

    def reset(self, key):
        state, timestep = self.env.reset(key)
        return state, eqx.tree_at(
            lambda t: t.observation, timestep, self._split(timestep.observation)
        )

    def step(self, state, action, key):
        state, timestep = self.env.step(state, action, key)
        return state, eqx.tree_at(
            lambda t: t.observation, timestep, self._split(timestep.observation)
        )


def test_to_brax_dict_observation_stays_a_dict():
    env = to_brax(StructuredObservation(CartPole(), "dict"))
    assert env.observation_size == {"cart": (2,), "pole": (2,)}
    state = env.step(env.reset(jax.random.PRNGKey(0)), jnp.array([1.0, 0.0]))
    assert set(state.obs) == {"cart", "pole"} and state.obs["pole"].shape == (2,)


def test_to_brax_refuses_what_brax_cannot_take():
    with pytest.raises(ValueError, match="AutoReset"):
        to_brax(AutoReset(CartPole()))
    with pytest.raises(ValueError, match="array or a dict of arrays"):
        to_brax(StructuredObservation(CartPole(), "tuple"))


def test_from_brax_of_to_brax_round_trip():
    """An eqxrl environment through Brax's interface and back: Brax's wrappers'
    truncation arrives as eqxrl's `truncated`."""
    brax_env = to_brax(eqxrl.envs.make("CartPole-v1"))
    env = from_brax(EpisodeWrapper(brax_env, brax_env.episode_length, 1))
    check_environment(env)
    assert env.action_space == Box(-1.0, 1.0, (2,))
    # Always push right: CartPole's pole falls (a termination) within 500 steps.
    _, timesteps = rollout(env, jnp.tile(jnp.array([0.0, 1.0]), (40, 1)))
    assert timesteps.terminated.any() and not timesteps.truncated.any()
    env = from_brax(EpisodeWrapper(brax_env, 3, 1))
    _, timesteps = rollout(env, jnp.tile(jnp.array([0.0, 1.0]), (3, 1)))
    np.testing.assert_array_equal(timesteps.truncated, [False, False, True])


def test_brax_training_wrappers_run_to_brax():
    """Brax's `envs.training.wrap` (what its trainers add: vmap, episode limit,
    auto-reset) runs an eqxrl CartPole; its time limit sets `truncation`."""
    episode_length = 30
    env = brax_training_wrap(to_brax(CartPole()), episode_length=episode_length)
    state = jax.jit(env.reset)(jax.random.split(jax.random.PRNGKey(0), 4))

    @jax.jit
    def run(state):
        def step(state, _):
            # Push the cart towards where the pole leans (action 1 pushes right):
            # the argmax of (left, right) entries.
            right = state.obs[:, 2] + state.obs[:, 3] > 0
            actions = jnp.stack([~right, right], axis=1).astype(jnp.float32)
            state = env.step(state, actions)
            return state, (state.done, state.info["truncation"], state.obs)

        return jax.lax.scan(step, state, None, length=2 * episode_length)

    _, (done, truncation, observation) = run(state)
    assert done.shape == (2 * episode_length, 4)
    # The balancing policy never drops the pole: only the limit ends episodes.
    np.testing.assert_array_equal(done, truncation)
    np.testing.assert_array_equal(np.flatnonzero(done[:, 0]), [29, 59])
    # After the auto-reset, the observation is the first one again (Brax's way).
    np.testing.assert_array_equal(observation[29], observation[59])


@pytest.mark.learning
@pytest.mark.filterwarnings("ignore:jax.device_put_replicated:DeprecationWarning")
def test_brax_ppo_learns_cartpole_through_to_brax():
    if not hasattr(jax, "device_put_replicated"):
        pytest.skip(
            "Brax's trainers call jax.device_put_replicated, removed in JAX 0.9: "
            f"JAX {jax.__version__} is installed (run with jax<0.9)."
        )
    from brax.training.agents.ppo import train as brax_ppo

    env = to_brax(eqxrl.envs.make("CartPole-v1"))
    returns = []
    start = time.perf_counter()
    # Brax's observation normalizer relies on NumPy's rank promotion.
    with jax.numpy_rank_promotion("allow"):
        brax_ppo.train(
            environment=env,
            episode_length=env.episode_length,
            num_timesteps=40_000,
            num_evals=2,
            num_envs=16,
            batch_size=16,
            num_minibatches=4,
            unroll_length=16,
            num_updates_per_batch=4,
            learning_rate=1e-3,
            entropy_cost=1e-2,
            normalize_observations=True,
            num_eval_envs=16,
            seed=0,
            progress_fn=lambda step, metrics: returns.append(
                (step, float(metrics["eval/episode_reward"]))
            ),
        )
    seconds = time.perf_counter() - start
    (_, before), (steps, after) = returns
    # A random policy keeps CartPole's pole up for about 22 steps; the limit is 500.
    assert before < 50.0, returns
    assert after > 200.0, (returns, seconds)
    assert steps >= 40_000


@pytest.mark.learning
def test_eqxrl_ppo_learns_inverted_pendulum_through_from_brax(pendulum):
    env = TimeLimit(from_brax(pendulum), 200)

    # A uniformly random policy: episode returns (one per episode start).
    def random_return(key):
        stats = EpisodeStatistics(env)
        state, _ = stats.reset(key)

        def step(carry, key):
            state, ended, total = carry
            state, timestep = stats.step(state, env.action_space.sample(key), key)
            total = jnp.where(ended, total, timestep.extras["episode_return"])
            return (
                state,
                ended | timestep.terminated | timestep.truncated,
                total,
            ), None

        carry = (state, jnp.bool_(False), jnp.float32(0.0))
        return jax.lax.scan(step, carry, jr.split(key, 200))[0][2]

    random = float(jax.jit(jax.vmap(random_return))(jr.split(jr.key(9), 64)).mean())
    assert 2.0 < random < 20.0  # the pole falls within a few steps

    ppo = eqxrl.PPO(
        env=env,
        num_envs=16,
        num_steps=64,
        total_timesteps=30_000,
        learning_rate=1e-3,
        num_minibatches=4,
        normalize_observations=True,
    )
    _, metrics = eqx.filter_vmap(ppo.train)(jr.split(jr.key(0), 3))
    final = np.nanmean(np.asarray(metrics["episode_return"])[:, -5:], axis=1)
    # Measured: about 130 of 200 for every seed; random gets about 6.
    assert (final > 5 * random).sum() >= 2, (final, random)


def test_missing_brax_says_which_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "brax", None)
    monkeypatch.setitem(sys.modules, "brax.envs", None)
    with pytest.raises(ImportError, match=r"eqxrl\[brax\]"):
        from_brax("inverted_pendulum")
    with pytest.raises(ImportError, match=r"eqxrl\[brax\]"):
        to_brax(CartPole())


# -- PPO with Brax's hyperparameters ---------------------------------------------------

# What PPO.from_brax_hyperparameters translates, with Brax's defaults.
TRANSLATED_BRAX_ARGUMENTS = (
    "num_envs", "action_repeat", "learning_rate", "entropy_cost", "discounting",
    "unroll_length", "batch_size", "num_minibatches", "num_updates_per_batch",
    "num_resets_per_eval", "normalize_observations", "reward_scaling",
    "clipping_epsilon", "clipping_epsilon_value", "gae_lambda", "max_grad_norm",
    "normalize_advantage", "vf_loss_coefficient", "num_evals",
)  # fmt: skip


def test_brax_hyperparameters_left_out_take_brax_defaults(pendulum):
    """Brax's own defaults (read from its `ppo.train` and `make_ppo_networks`)
    give the same PPO as leaving the arguments out: the translation's copy of the
    defaults matches the installed Brax."""
    import inspect

    from brax.training.agents.ppo import networks as brax_networks, train as brax_ppo

    train_defaults = inspect.signature(brax_ppo.train).parameters
    defaults = {
        name: train_defaults[name].default for name in TRANSLATED_BRAX_ARGUMENTS
    }
    network_defaults = inspect.signature(brax_networks.make_ppo_networks).parameters
    for name in ("policy_hidden_layer_sizes", "value_hidden_layer_sizes"):
        defaults[name] = network_defaults[name].default
    defaults["activation"] = network_defaults["activation"].default
    env = from_brax(pendulum)
    required = dict(num_timesteps=100_000, episode_length=100)
    implicit = eqxrl.PPO.from_brax_hyperparameters(env, **required)
    explicit = eqxrl.PPO.from_brax_hyperparameters(env, **required, **defaults)
    assert eqx.tree_equal(implicit, explicit)
    # Brax's default policy: tanh-squashed with the softplus scale from the actor.
    assert network_defaults["distribution_type"].default == "tanh_normal"
    assert implicit.squash_actions and implicit.std_parameterization == "softplus"
    # ... and its MLPs' initialization: lecun_uniform kernels (zero biases).
    for name in ("policy_network_kernel_init_fn", "value_network_kernel_init_fn"):
        assert network_defaults[name].default is jax.nn.initializers.lecun_uniform
    assert implicit.initialization == "lecun_uniform"


def test_brax_sac_hyperparameters_left_out_take_brax_defaults(pendulum):
    """The SAC translation's copy of Brax's defaults matches the installed Brax's
    `sac.train` and `make_sac_networks`, and so does its temperature."""
    import inspect

    from brax.training.agents.sac import (
        losses as brax_losses,
        networks as brax_networks,
        train as brax_sac,
    )

    from eqxrl.algorithms import SAC

    train_defaults = inspect.signature(brax_sac.train).parameters
    translated = (
        "num_envs", "action_repeat", "learning_rate", "discounting", "batch_size",
        "num_evals", "normalize_observations", "reward_scaling", "tau",
        "min_replay_size", "max_replay_size", "grad_updates_per_step",
    )  # fmt: skip
    defaults = {name: train_defaults[name].default for name in translated}
    network_defaults = inspect.signature(brax_networks.make_sac_networks).parameters
    defaults["hidden_layer_sizes"] = network_defaults["hidden_layer_sizes"].default
    env = from_brax(pendulum)
    required = dict(num_timesteps=10_000, episode_length=100)
    implicit = SAC.from_brax_hyperparameters(env, **required)
    explicit = SAC.from_brax_hyperparameters(env, **required, **defaults)
    assert eqx.tree_equal(implicit, explicit)
    # Brax's temperature: its own Adam at 3e-4 and a target of -action_size / 2.
    train_source = inspect.getsource(brax_sac.train)
    assert "alpha_optimizer = optax.adam(learning_rate=3e-4)" in train_source
    assert "target_entropy = -0.5 * action_size" in inspect.getsource(
        brax_losses.make_losses
    )
    assert float(implicit.alpha_learning_rate) == pytest.approx(3e-4)
    assert float(implicit.effective_target_entropy) == -0.5 * pendulum.action_size


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:jax.device_put_replicated:DeprecationWarning")
def test_translated_sac_runs_the_environment_steps_brax_runs():
    if not hasattr(jax, "device_put_replicated"):
        pytest.skip(f"Brax's trainers need jax<0.9, JAX {jax.__version__} installed.")
    from brax.training.agents.sac import train as brax_sac

    brax_env = brax.envs.get_environment("inverted_pendulum", backend="spring")
    settings = dict(
        num_timesteps=200, num_evals=3, episode_length=20, num_envs=8,
        batch_size=16, grad_updates_per_step=2, min_replay_size=20,
        max_replay_size=512, num_eval_envs=4,
    )  # fmt: skip
    steps = []
    with jax.numpy_rank_promotion("allow"):
        sac = eqxrl.SAC.from_brax_hyperparameters(from_brax(brax_env), **settings)
        brax_sac.train(
            environment=brax_env,
            progress_fn=lambda step, metrics: steps.append(step),
            **settings,
        )
    # A prefill of 3 steps of 8 environments (24 >= 20), then 2 epochs of
    # ceil((200 - 24) / 16) = 11 training steps of 8 environment steps.
    assert steps[-1] == sac.total_timesteps == 24 + 2 * 11 * 8
    assert sac.learning_starts == 24 + 8


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:jax.device_put_replicated:DeprecationWarning")
def test_translated_ppo_runs_the_environment_steps_brax_runs():
    if not hasattr(jax, "device_put_replicated"):
        pytest.skip(f"Brax's trainers need jax<0.9, JAX {jax.__version__} installed.")
    from brax.training.agents.ppo import train as brax_ppo

    brax_env = brax.envs.get_environment("inverted_pendulum", backend="spring")
    settings = dict(
        num_timesteps=1000, num_evals=3, episode_length=20, num_envs=8,
        batch_size=8, num_minibatches=4, unroll_length=5, num_updates_per_batch=2,
        num_eval_envs=4,
    )  # fmt: skip
    steps = []
    # Brax's spring physics and its normalizer rely on NumPy's rank promotion.
    with jax.numpy_rank_promotion("allow"):
        ppo = eqxrl.PPO.from_brax_hyperparameters(from_brax(brax_env), **settings)
        brax_ppo.train(
            environment=brax_env,
            progress_fn=lambda step, metrics: steps.append(step),
            **settings,
        )
    # 160 steps per training step (8 unrolls of 5 steps by 4 minibatches), 2
    # epochs of ceil(1000 / 320) = 4 training steps.
    assert steps[-1] == ppo.total_timesteps == 8 * 160
    assert ppo.num_envs * ppo.num_steps == 160 and ppo.minibatch_size == 8 * 5
    assert np.diff(steps).tolist() == [640, 640]  # after the initial evaluation


@jax.numpy_rank_promotion("allow")  # Brax's normalizer broadcasts
def test_translated_ppo_loss_and_gradients_are_brax_own(pendulum):
    """One minibatch from identical parameters, normalizer and batch: the translated
    PPO's loss terms and gradients are Brax's `compute_ppo_loss`'s, given Brax's
    advantages and value targets; eqxrl's value targets are Brax's too, while its
    advantages are GAE's, not Brax's `r + gamma * v_{t+1} - V` (documented)."""
    from brax.training import types
    from brax.training.acme import running_statistics, specs
    from brax.training.agents.ppo import losses as brax_losses, networks as brax_nets

    layers = (16, 16)
    ppo = eqxrl.PPO.from_brax_hyperparameters(
        from_brax(pendulum), num_timesteps=1000, episode_length=100, num_envs=2,
        batch_size=2, num_minibatches=1, unroll_length=32, discounting=0.97,
        entropy_cost=1e-2, reward_scaling=0.1, normalize_observations=True,
        policy_hidden_layer_sizes=layers, value_hidden_layer_sizes=layers,
    )  # fmt: skip
    size, envs, steps = pendulum.observation_size, 2, 32
    network = brax_nets.make_ppo_networks(
        size, 1, running_statistics.normalize, layers, layers
    )
    keys = jr.split(jr.key(0), 8)
    params = brax_losses.PPONetworkParams(
        policy=network.policy_network.init(keys[0]),
        value=network.value_network.init(keys[1]),
    )
    normalizer = running_statistics.update(
        running_statistics.init_state(specs.Array((size,), jnp.float32)),
        jr.normal(keys[2], (500, size)) * 2.0 + 0.5,
    )
    observation = jr.normal(keys[3], (envs, steps, size)) * 2.0 + 0.5
    logits = network.policy_network.apply(normalizer, params.policy, observation)
    distribution = network.parametric_action_distribution
    pre_squash = distribution.sample_no_postprocessing(logits, keys[4])
    # A little off-policy, so that the ratio is not 1.
    log_prob = distribution.log_prob(logits, pre_squash) + 0.05 * jr.normal(
        keys[5], (envs, steps)
    )
    reward = jr.uniform(keys[6], (envs, steps))
    zeros = jnp.zeros((envs, steps))
    data = types.Transition(
        observation=observation,
        action=jnp.tanh(pre_squash),
        reward=reward,
        discount=1.0 - zeros,
        next_observation=observation + 0.1,
        extras={
            "policy_extras": {
                "raw_action": pre_squash,
                "log_prob": log_prob,
                "distribution_params": logits,
            },
            "state_extras": {"truncation": zeros},
        },
    )
    loss_key = keys[7]
    (brax_total, brax_terms), brax_grads = jax.value_and_grad(
        brax_losses.compute_ppo_loss, has_aux=True
    )(
        params, normalizer, data, loss_key, network, ppo.ent_coef, ppo.gamma,
        ppo.reward_scale, ppo.gae_lambda, ppo.clip_eps, True, ppo.vf_coef,
    )  # fmt: skip

    def eqxrl_layers(brax_params):
        inner = brax_params["params"]
        return [
            (inner[f"hidden_{i}"]["kernel"].T, inner[f"hidden_{i}"]["bias"])
            for i in range(len(inner))
        ]

    model = ppo.init(jr.key(1)).model
    for part, brax_params in (("actor", params.policy), ("critic", params.value)):
        for i, (weight, bias) in enumerate(eqxrl_layers(brax_params)):
            model = eqx.tree_at(
                lambda m: (getattr(m, part)[i].weight, getattr(m, part)[i].bias),
                model,
                (weight, bias),
            )
    statistics = eqxrl.nn.RunningMeanStd(
        normalizer.mean, jnp.square(normalizer.std), jnp.float32(500.0)
    )

    # Brax's targets from the same values; eqxrl's GAE targets agree with them.
    def step_major(x):
        return jnp.swapaxes(x, 0, 1)

    values = step_major(
        network.value_network.apply(normalizer, params.value, observation)
    )
    last_value = network.value_network.apply(
        normalizer, params.value, observation[:, -1] + 0.1
    )
    targets, brax_advantages = brax_losses.compute_gae(
        step_major(zeros), step_major(zeros), step_major(reward) * ppo.reward_scale,
        values, last_value, ppo.gae_lambda, ppo.gamma,
    )  # fmt: skip
    no = jnp.zeros((steps, envs), bool)
    next_values = jnp.concatenate([values[1:], last_value[None]])
    gae_advantages, returns = eqxrl.algorithms.compute_gae(
        step_major(reward) * ppo.reward_scale, values, next_values, no, no,
        ppo.gamma, ppo.gae_lambda,
    )  # fmt: skip
    np.testing.assert_allclose(returns, targets, rtol=1e-5, atol=1e-5)
    assert not np.allclose(gae_advantages, brax_advantages, atol=1e-3)

    def rows(x):
        return step_major(x).reshape(steps * envs, *x.shape[2:])

    batch = jax.vmap(
        lambda o, a, p, v, r: eqxrl.buffers.Transition(
            o, a, p, v, r, jnp.bool_(False), jnp.bool_(False), None, {}
        )
    )(rows(observation), rows(pre_squash), rows(log_prob), values.ravel(), rows(reward))
    advantages = brax_advantages.ravel()
    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    # Brax's entropy estimate draws its noise for the [steps, envs] batch.
    noise = jr.normal(loss_key, (steps, envs, 1)).reshape(steps * envs, 1)
    (total, terms), grads = eqx.filter_value_and_grad(ppo._loss, has_aux=True)(
        model, statistics, batch, advantages, targets.ravel(), noise
    )
    assert float(total) == pytest.approx(float(brax_total), rel=1e-4, abs=1e-6)
    assert float(terms["policy_loss"]) == pytest.approx(
        float(brax_terms["policy_loss"]), rel=1e-4, abs=1e-6
    )
    assert float(ppo.vf_coef * terms["value_loss"]) == pytest.approx(
        float(brax_terms["v_loss"]), rel=1e-4, abs=1e-6
    )
    assert float(-ppo.ent_coef * terms["entropy"]) == pytest.approx(
        float(brax_terms["entropy_loss"]), rel=1e-4, abs=1e-6
    )
    for part, brax_params in (
        ("actor", brax_grads.policy),
        ("critic", brax_grads.value),
    ):
        for layer, (weight, bias) in zip(
            getattr(grads, part), eqxrl_layers(brax_params), strict=True
        ):
            np.testing.assert_allclose(layer.weight, weight, rtol=1e-4, atol=1e-7)
            np.testing.assert_allclose(layer.bias, bias, rtol=1e-4, atol=1e-7)
