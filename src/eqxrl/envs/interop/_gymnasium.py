"""A host bridge: a NumPy / gymnasium environment as an eqxrl environment.

The environments live in this Python process; JAX reaches them through
`jax.pure_callback`. gymnasium is imported only by `from_gymnasium` (install
`eqxrl[gymnasium]`).
"""

import copy
import math
import threading
from typing import Any, no_type_check

import equinox as eqx
import jax
import jax.lax as lax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, ArrayLike, Int, PRNGKeyArray, PyTree, UInt32

from .._environment import AbstractEnvironment
from .._spaces import AbstractSpace, Box, Dict, Discrete, Tuple, is_leaf_space
from .._types import TimeStep

_UNBOUND = -1  # `episode` of a state no host environment runs yet
_OK, _UNKNOWN_EPISODE, _STALE_STATE = 0, 1, 2
_ERRORS = [
    "from_gymnasium: no host environment runs this state's episode: it has ended, "
    "the environment was closed, or the state comes from another Python process "
    "(host environments do not survive a restart or a checkpoint). Step the state "
    "returned by the latest step, or reset.",
    "from_gymnasium: this state was stepped before. A host environment cannot go "
    "back in time: step each state once (the one returned by the latest step), or "
    "reset.",
]


class FromGymnasiumState(eqx.Module):
    """State of a [`from_gymnasium`][eqxrl.envs.from_gymnasium] environment: a
    reference to a host environment, not the environment's physics.

    **Arguments:**

    - `episode`: int32 id of the host episode this state belongs to; `-1` after
      `reset`, until the first `step` binds a host environment to the episode.
    - `seed`: the two uint32 words of the gymnasium seed the episode was reset with
      (drawn from the `reset` key).
    - `step_count`: int32 steps taken in the episode; the host checks it to refuse a
      state that was stepped already.
    """

    episode: Int[Array, ""]
    seed: UInt32[Array, " 2"]
    step_count: Int[Array, ""]


# The callbacks exchange one int32 array each way: every pure_callback argument and
# result costs tens of microseconds, so values are packed, and float32 observations,
# actions and rewards travel bit-cast to int32 (both are 4 bytes).
#   step input:  [episode, seed_high, seed_low, step_count, *action]
#   step output: [episode, terminated, truncated, status, reward, *observation]
_STEP_IN, _STEP_OUT = 4, 5


@no_type_check  # host code, called with NumPy arrays: no trace-time checks to make
class _HostEnvironments:
    """The host side: a pool of environment instances, one per running episode.

    Not an `eqx.Module`: it is mutable host state, not a pytree. A `FromGymnasium`
    module holds it as a static field. Every method may be called from an XLA
    thread, hence the lock.
    """

    def __init__(self, make_env):
        self.make_env = make_env
        # `reset` computes initial observations on this instance; it never steps.
        self.scratch = make_env()
        observation_space = self.scratch.observation_space
        action_space = self.scratch.action_space
        self.observation_space = _convert_space(observation_space, "observation")
        self.action_space = _convert_space(action_space, "action")
        # Plain NumPy metadata: the hot loop must not touch JAX objects.
        self.observation_leaves = _host_leaves(observation_space)
        self.observation_size = sum(leaf.size for leaf in self.observation_leaves)
        self.action_shape = tuple(self.action_space.shape)
        self.action_size = int(np.prod(self.action_shape))
        self.action_dtype = np.dtype(self.action_space.dtype)
        self.discrete_action = isinstance(self.action_space, Discrete)
        self.host_action_dtype = action_space.dtype
        self.action_start = int(getattr(action_space, "start", 0))
        self.idle = []
        self.running = {}  # episode id -> [environment, steps taken]
        self.next_episode = 0
        self.lock = threading.Lock()

    def observation(self, observation):
        """A host observation as the flat int32 row the callbacks return: every
        leaf cast to its 4-byte dtype, flattened and bit-cast, in leaf order."""
        rows = [leaf.row(leaf.find(observation)) for leaf in self.observation_leaves]
        return np.concatenate(rows)

    def reset(self, seeds):
        """Initial observations for a batch of seeds `[..., 2]` (uint32)."""
        seeds = np.asarray(seeds)
        batch = seeds.shape[:-1]
        rows = np.zeros((int(np.prod(batch)), self.observation_size), np.int32)
        with self.lock:
            for i, (high, low) in enumerate(seeds.reshape(-1, 2).tolist()):
                observation, _ = self.scratch.reset(seed=high << 32 | low)
                rows[i] = self.observation(observation)
        return rows.reshape((*batch, self.observation_size))

    def step(self, inputs):
        """Step a batch of episodes, `inputs[..., :]` packed as `_STEP_IN` says; an
        episode of `-1` first gets an instance, reset with the episode's seed."""
        inputs = np.asarray(inputs)
        batch = inputs.shape[:-1]
        inputs = inputs.reshape(-1, inputs.shape[-1])
        actions = inputs[:, _STEP_IN:].view(self.action_dtype)
        outputs = np.zeros((len(inputs), _STEP_OUT + self.observation_size), np.int32)
        rewards = outputs[:, 4].view(np.float32)
        with self.lock:
            for i, (episode, high, low, step_count) in enumerate(
                inputs[:, :_STEP_IN].tolist()
            ):
                if episode == _UNBOUND:
                    env = self.idle.pop() if self.idle else self.make_env()
                    env.reset(seed=(high & 0xFFFFFFFF) << 32 | (low & 0xFFFFFFFF))
                    episode = self.next_episode
                    self.next_episode = (self.next_episode + 1) % (2**31 - 1)
                    entry = self.running[episode] = [env, 0]
                elif episode not in self.running:
                    outputs[i, :4] = (_UNBOUND, 0, 0, _UNKNOWN_EPISODE)
                    continue
                else:
                    entry = self.running[episode]
                    if entry[1] != step_count:
                        outputs[i, :4] = (_UNBOUND, 0, 0, _STALE_STATE)
                        continue
                env = entry[0]
                if self.discrete_action:
                    action = int(actions[i, 0]) + self.action_start
                else:
                    action = actions[i].reshape(self.action_shape)
                    action = action.astype(self.host_action_dtype)
                observation, reward, terminated, truncated, _ = env.step(action)
                entry[1] += 1
                outputs[i, :4] = (episode, terminated, truncated, _OK)
                rewards[i] = reward
                outputs[i, _STEP_OUT:] = self.observation(observation)
                if terminated or truncated:
                    del self.running[episode]
                    self.idle.append(env)
        return outputs.reshape((*batch, -1))

    def close(self):
        with self.lock:
            environments = [
                self.scratch,
                *self.idle,
                *(env for env, _ in self.running.values()),
            ]
            self.idle.clear()
            self.running.clear()
        for env in environments:
            env.close()


def _convert_space(space: Any, what: str) -> AbstractSpace:
    """gymnasium's Discrete, Box, MultiBinary, Dict and Tuple spaces as eqxrl's."""
    import gymnasium

    spaces = gymnasium.spaces
    if isinstance(space, spaces.Discrete):
        return Discrete(int(space.n))
    if isinstance(space, spaces.Box):
        low = np.asarray(space.low, np.float32)
        high = np.asarray(space.high, np.float32)
        return Box(low, high)
    if isinstance(space, spaces.MultiBinary) and what == "observation":
        return Box(0.0, 1.0, tuple(int(n) for n in np.atleast_1d(space.shape)))
    if isinstance(space, spaces.Dict) and what == "observation":
        return Dict(
            {name: _convert_space(part, what) for name, part in space.spaces.items()}
        )
    if isinstance(space, spaces.Tuple) and what == "observation":
        return Tuple([_convert_space(part, what) for part in space.spaces])
    raise ValueError(
        f"from_gymnasium: the {what} space is a {type(space).__name__}; eqxrl "
        "converts Discrete, Box, MultiBinary, Dict and Tuple observation spaces "
        "and Discrete and Box action spaces. Wrap the environment first, e.g. "
        "with gymnasium.wrappers.FlattenObservation."
    )


@no_type_check  # host code
class _HostLeaf:
    """Where one observation leaf sits in a host observation, and how it travels:
    `path` (dict keys and tuple positions, in eqxrl's leaf order), the 4-byte
    dtype it is cast to, and the offset of a `Discrete` space's `start`."""

    def __init__(self, path, shape, dtype, start):
        self.path = path
        self.shape = shape
        self.dtype = np.dtype(dtype)
        self.start = start
        self.size = max(int(np.prod(shape)), 1)

    def find(self, observation):
        for part in self.path:
            observation = observation[part]
        return observation

    def row(self, value):
        value = np.asarray(value) - self.start
        return value.astype(self.dtype).reshape(-1).view(np.int32)


def _host_leaves(space: Any, path: tuple = ()) -> list[_HostLeaf]:
    """The leaves of a gymnasium observation space, in eqxrl's order (sorted
    `Dict` keys, as `jax.tree.leaves` orders a dict)."""
    import gymnasium

    spaces = gymnasium.spaces
    if isinstance(space, spaces.Dict):
        return [
            leaf
            for name in sorted(space.spaces)
            for leaf in _host_leaves(space.spaces[name], (*path, name))
        ]
    if isinstance(space, spaces.Tuple):
        return [
            leaf
            for index, part in enumerate(space.spaces)
            for leaf in _host_leaves(part, (*path, index))
        ]
    if isinstance(space, spaces.Discrete):
        return [_HostLeaf(path, (), np.int32, int(space.start))]
    return [_HostLeaf(path, tuple(space.shape), np.float32, 0)]


class FromGymnasium(AbstractEnvironment[FromGymnasiumState]):
    """A gymnasium (or any NumPy) environment run on the host, behind the eqxrl
    interface; build it with [`from_gymnasium`][eqxrl.envs.from_gymnasium].

    `reset` and `step` call the host through `jax.pure_callback`, so they work inside
    `jit`, `vmap` and `lax.scan`, and [`PPO`][eqxrl.PPO] trains on it unchanged.

    **How state maps to host environments.** The state is a
    [`FromGymnasiumState`][eqxrl.envs.FromGymnasiumState]: an int32 episode id that
    names a host environment instance, the episode's seed and its step count.

    - `reset(key)` draws a seed from `key` and returns the initial observation of
      `env.reset(seed=seed)`, computed on a scratch instance; the state's episode is
      `-1` (no instance yet). This makes `reset` a pure function of `key` and cheap
      to discard: [`AutoReset`][eqxrl.envs.AutoReset] (how PPO, DQN and IQN step
      environments) resets every environment of a batch on steps where some
      episode of the batch ended, and keeps only the resets it needs.
    - The first `step` of an episode takes an idle instance (or makes a new one),
      resets it with the same seed, so that it is in exactly the state whose
      observation `reset` returned (gymnasium's seeding makes `reset(seed=...)`
      deterministic), and steps it. Later steps find the instance by episode id.
      When the episode ends the instance goes back to the idle pool.
    - Under `jax.vmap` (`vmap_method="broadcast_all"`) one callback receives the
      whole batch and loops over it in Python; every batch element is its own
      episode on its own instance, so `num_envs` environments use `num_envs`
      instances (plus one scratch instance), and vmapping over seeds as well works.

    **Limits.**

    - Not pure: a state can be stepped once. Stepping a state again (or a state from
      another process, or of an ended episode) raises an error rather than silently
      continuing from wherever the host environment is.
    - Reproducible in one process (seeds come from the keys) but nothing on the host
      is saved with a checkpoint: a restored state cannot continue its episode.
    - Slower: a host call per step (two on steps where an episode ends), a Python
      loop over environments, and no parallelism; see
      the benchmark
      `benchmarks/gymnasium_bridge.py`. Use it to migrate step by step, then port
      the environment to JAX.
    - Not differentiable. Actions must be `Box` or `Discrete`; observations may
      also be `MultiBinary` (a 0/1 `Box`), `Dict` and `Tuple` (eqxrl's
      [`Dict`][eqxrl.envs.Dict] and [`Tuple`][eqxrl.envs.Tuple], dict and tuple
      observations).

    **Arguments:**

    - `host`: the host-side pool of environment instances (static).
    """

    host: _HostEnvironments = eqx.field(static=True)

    @property
    def observation_space(self) -> AbstractSpace:
        return self.host.observation_space

    @property
    def action_space(self) -> AbstractSpace:
        return self.host.action_space

    def _decode_observation(self, row: Int[Array, " size"]) -> PyTree[Array]:
        """The observation from the int32 words the host packed it into."""
        space = self.observation_space
        leaves, offset = [], 0
        for leaf in jax.tree.leaves(space, is_leaf=is_leaf_space):
            size = max(math.prod(leaf.shape), 1)
            words = row[offset : offset + size]
            leaves.append(
                lax.bitcast_convert_type(words, leaf.dtype).reshape(leaf.shape)
            )
            offset += size
        structure = jax.tree.structure(eqx.filter_eval_shape(space.sample, jr.key(0)))
        return jax.tree.unflatten(structure, leaves)

    def reset(self, key: PRNGKeyArray) -> tuple[FromGymnasiumState, TimeStep]:
        seed = jr.bits(key, (2,), jnp.uint32)
        row = jax.pure_callback(
            self.host.reset,
            jax.ShapeDtypeStruct((self.host.observation_size,), jnp.int32),
            seed,
            vmap_method="broadcast_all",
        )
        observation = self._decode_observation(row)
        state = FromGymnasiumState(
            episode=jnp.int32(_UNBOUND), seed=seed, step_count=jnp.int32(0)
        )
        timestep = TimeStep(
            observation=observation,
            reward=jnp.float32(0.0),
            terminated=jnp.bool_(False),
            truncated=jnp.bool_(False),
        )
        return state, timestep

    def step(
        self, state: FromGymnasiumState, action: ArrayLike, key: PRNGKeyArray
    ) -> tuple[FromGymnasiumState, TimeStep]:
        del key  # the host environment's own generator, seeded at reset, is used
        action = jnp.asarray(action).astype(self.action_space.dtype)
        inputs = jnp.concatenate(
            [
                jnp.stack(
                    [
                        state.episode,
                        lax.bitcast_convert_type(state.seed[0], jnp.int32),
                        lax.bitcast_convert_type(state.seed[1], jnp.int32),
                        state.step_count,
                    ]
                ),
                lax.bitcast_convert_type(action.reshape(-1), jnp.int32),
            ]
        )
        outputs = jax.pure_callback(
            self.host.step,
            jax.ShapeDtypeStruct((_STEP_OUT + self.host.observation_size,), jnp.int32),
            inputs,
            vmap_method="broadcast_all",
        )
        episode, terminated, truncated, status = outputs[:4]
        episode = eqx.branched_error_if(
            episode, status != _OK, jnp.maximum(status - 1, 0), _ERRORS
        )
        next_state = FromGymnasiumState(episode, state.seed, state.step_count + 1)
        timestep = TimeStep(
            observation=self._decode_observation(outputs[_STEP_OUT:]),
            reward=lax.bitcast_convert_type(outputs[4], jnp.float32),
            terminated=terminated.astype(jnp.bool_),
            truncated=truncated.astype(jnp.bool_),
        )
        return next_state, timestep

    def close(self) -> None:
        """Close every host environment instance (running episodes end)."""
        self.host.close()


def from_gymnasium(env_or_id: Any, **make_kwargs: Any) -> FromGymnasium:
    """Run a gymnasium (NumPy, host) environment under the eqxrl interface, so that
    the same trainers run on it: a migration path for environments not yet written in
    JAX. Much slower than a JAX environment; read the limits in
    [`FromGymnasium`][eqxrl.envs.FromGymnasium].

    **Arguments:**

    - `env_or_id`: a gymnasium id for `gymnasium.make` (e.g. `"CartPole-v1"`), a
      `gymnasium.Env` (copied with `copy.deepcopy` for every instance the bridge
      needs, the object itself is never stepped), or a zero-argument function (or
      a class) returning a new environment with gymnasium's `reset(seed=...)` /
      `step(action)` API and `observation_space` / `action_space`.
    - `**make_kwargs`: passed to `gymnasium.make` with an id.

    **Returns:**

    A [`FromGymnasium`][eqxrl.envs.FromGymnasium] environment. Time limits are the
    gymnasium environment's own: `gymnasium.make` adds `TimeLimit`, whose truncation
    comes through as `truncated`.

    !!! example

        ```python
        env = eqxrl.envs.from_gymnasium("CartPole-v1")
        ppo = eqxrl.PPO(env=env, num_envs=4, num_steps=128, total_timesteps=20_480)
        state, metrics = ppo.train(jax.random.key(0))
        ```
    """
    if isinstance(env_or_id, str):
        import gymnasium

        env_id = env_or_id

        def make_env() -> Any:
            return gymnasium.make(env_id, **make_kwargs)

    elif make_kwargs:
        raise ValueError(
            "from_gymnasium: keyword arguments are passed to gymnasium.make, so they "
            "need an environment id; got an environment object."
        )
    elif isinstance(env_or_id, type) or (
        callable(env_or_id) and not hasattr(env_or_id, "step")
    ):
        # A class is a constructor, though it has a `step` attribute.
        make_env = env_or_id
    else:
        template = env_or_id

        def make_env() -> Any:
            return copy.deepcopy(template)

    return FromGymnasium(_HostEnvironments(make_env))


def to_gymnasium(
    env: AbstractEnvironment,
    num_envs: int | None = None,
    *,
    render_mode: str | None = None,
) -> Any:
    """An eqxrl environment as a gymnasium environment, for Stable-Baselines3,
    CleanRL-style loops and gymnasium's own tools (install `eqxrl[gymnasium]`).

    NumPy in, NumPy out: `reset(seed=...)` seeds the episode's randomness (the
    same seed gives the same episode), `step(action)` returns `(observation,
    reward, terminated, truncated, info)` with termination and truncation kept
    apart (a `TimeLimit` truncates), and `info["action_mask"]` holds the mask of
    masked environments. `reset` and `step` are compiled once (`eqx.filter_jit`)
    and called eagerly from Python, one host round trip per step: the speed of a
    fast gymnasium environment, not of eqxrl's compiled training.

    With `num_envs`, a `gymnasium.vector.VectorEnv` of that many copies, all
    stepped in one compiled call (`jax.vmap`), with gymnasium's same-step
    autoreset (`metadata["autoreset_mode"]` is `AutoresetMode.SAME_STEP`): where
    an episode ends, the observation is the next episode's first and the last one
    is in `info["final_obs"]` (`info["_final_obs"]` marks where).

    **Arguments:**

    - `env`: an eqxrl environment with `Discrete` or `Box` spaces, usually with its
      time limit (e.g. `eqxrl.envs.make("CartPole-v1")`).
    - `num_envs`: `None` for a `gymnasium.Env`, or the number of copies of a
      `gymnasium.vector.VectorEnv`.
    - `render_mode`: `"rgb_array"` to get frames from `render()` (environments
      with `render(state)`), or `None`.

    **Returns:**

    A `gymnasium.Env` (or `gymnasium.vector.VectorEnv`).

    !!! example

        ```python
        env = eqxrl.envs.to_gymnasium(eqxrl.envs.make("CartPole-v1"))
        observation, info = env.reset(seed=0)
        observation, reward, terminated, truncated, info = env.step(1)

        from stable_baselines3 import PPO
        PPO("MlpPolicy", env).learn(10_000)
        ```
    """
    try:
        from ._gymnasium_export import GymnasiumEnv, GymnasiumVectorEnv
    except ImportError as error:
        raise ImportError(
            f"to_gymnasium needs gymnasium ({error}): pip install 'eqxrl[gymnasium]'."
        ) from None
    if num_envs is None:
        return GymnasiumEnv(env, render_mode=render_mode)
    return GymnasiumVectorEnv(env, num_envs, render_mode=render_mode)
