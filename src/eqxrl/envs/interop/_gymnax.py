"""Adapters between eqxrl environments and gymnax environments, both ways.

gymnax is not a dependency of eqxrl: `from_gymnax` only calls the methods of the
object it is given, and `to_gymnax` imports `gymnax.environments.spaces` only when its
`observation_space` / `action_space` are asked for (install `eqxrl[gymnax]`).
"""

import dataclasses
import functools
import math
from typing import Any

import equinox as eqx
import jax
import jax.lax as lax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np
from jaxtyping import Array, ArrayLike, PRNGKeyArray, PyTree

from .._environment import AbstractEnvironment, unwrap
from .._spaces import AbstractSpace, Box, Discrete
from .._types import TimeStep
from .._wrappers import AutoReset, TimeLimit

# A step count no episode reaches: gymnax 0.x's time limit "switched off".
_NO_LIMIT = 2**31 - 1


def _strong(tree: PyTree) -> PyTree:
    """Every leaf as a strongly typed JAX array (Python `time=0` becomes int32), so
    that `reset` and `step` return identical types and can be carried by a scan."""

    def leaf(x: Any) -> Array:
        x = jnp.asarray(x)
        return lax.convert_element_type(x, x.dtype)

    return jtu.tree_map(leaf, tree)


def _space_from_gymnax(space: Any, what: str) -> AbstractSpace:
    """A gymnax `Discrete` or `Box` (0.x or 1.0; matched by name and attributes) as
    an eqxrl space."""
    kind = type(space).__name__
    if kind == "Discrete" and hasattr(space, "n"):
        return Discrete(int(space.n))
    if kind == "Box" and hasattr(space, "low") and hasattr(space, "high"):
        shape = tuple(space.shape)
        low = jnp.broadcast_to(jnp.asarray(space.low, jnp.float32), shape)
        high = jnp.broadcast_to(jnp.asarray(space.high, jnp.float32), shape)
        return Box(low, high)
    raise ValueError(
        f"from_gymnax: the {what} space is a gymnax {kind}; eqxrl converts only "
        "Discrete and Box spaces. Wrap the gymnax environment so that its "
        f"{what}s are one array (e.g. flatten a Dict or Tuple space) first."
    )


def _cast(value: Any, space: AbstractSpace) -> Array:
    """An observation or action as the dtype of its eqxrl space (float32 for `Box`,
    including gymnax's boolean MinAtar frames; int32 for `Discrete`)."""
    return jnp.asarray(value).astype(space.dtype)


def _scalar(value: Any, dtype: Any) -> Array:
    return jnp.reshape(jnp.asarray(value).astype(dtype), ())


def _params_without_time_limit(params: PyTree) -> PyTree | None:
    """`params` with gymnax's `max_steps_in_episode` set beyond reach, or `None` when
    the params have no such field (then there is no gymnax time limit to lift)."""
    if not dataclasses.is_dataclass(params) or not any(
        field.name == "max_steps_in_episode" for field in dataclasses.fields(params)
    ):
        return None
    limit = params.max_steps_in_episode
    if isinstance(limit, int | float):  # keep Python numbers Python numbers
        lifted = type(limit)(_NO_LIMIT)
    else:
        lifted = jnp.full_like(limit, _NO_LIMIT)
    return dataclasses.replace(params, max_steps_in_episode=lifted)


class FromGymnax(AbstractEnvironment[PyTree]):
    """A gymnax environment as an eqxrl environment; build it with
    [`from_gymnax`][eqxrl.envs.from_gymnax], which also detects `six_value_step`.

    `reset` and `step` call gymnax's `reset_env` and `step_env` (never gymnax's
    `step`, which auto-resets), so this is one pure environment with no auto-reset,
    like every eqxrl environment. The state is the gymnax state.

    **Termination and truncation.** gymnax's time limit is `max_steps_in_episode` in
    the params, and the two gymnax APIs report it differently:

    - gymnax >= 1.0 (six-value `step`): `step_env` returns the natural termination
      only; truncation is gymnax's own `is_truncated(next_state, params)` (the time
      limit). Both are passed through unchanged.
    - gymnax 0.x (five-value `step`): `step_env`'s `done` merges termination and the
      time limit. `step` evaluates `step_env` a second time with
      `max_steps_in_episode` lifted beyond reach and takes that call's `done` as
      `terminated`; `truncated` is `done and not terminated`. Observation, state,
      reward and info come from the call with the real params, so environments that
      read `max_steps_in_episode` elsewhere (e.g. bsuite's DiscountingChain puts
      `time / max_steps_in_episode` in its observation) behave exactly as in gymnax.
      Both calls get the same key and inputs, so XLA merges their common work
      (measured: no slower than one call). A step that both terminates and reaches
      the limit reports `terminated` only. Params without a `max_steps_in_episode`
      field have no gymnax time limit: `done` is taken as `terminated`.

    Spaces become [`Discrete`][eqxrl.envs.Discrete] or [`Box`][eqxrl.envs.Box];
    observations are cast to the space's dtype (float32 for boxes, including the
    boolean frames of MinAtar; int32 for discrete), actions are passed to gymnax as
    the int32 / float32 arrays eqxrl produces. `reward` becomes a float32 scalar.
    gymnax's per-step `info` dict is in `extras["info"]` (zeros after `reset`).

    **Arguments:**

    - `gymnax_env`: the gymnax environment object.
    - `env_params`: its params (a pytree; array leaves may be batched by `jax.vmap`
      for domain randomization).
    - `six_value_step`: whether the environment follows the gymnax >= 1.0 API.
    """

    gymnax_env: Any
    env_params: PyTree
    six_value_step: bool = eqx.field(static=True)

    def __check_init__(self):
        if self.six_value_step and not hasattr(self.gymnax_env, "is_truncated"):
            raise ValueError(
                f"FromGymnax: {type(self.gymnax_env).__name__} has a six-value step "
                "(gymnax >= 1.0) but no `is_truncated(state, params)` method, which "
                "gives its truncation; subclass gymnax's `Environment`."
            )

    @property
    def observation_space(self) -> AbstractSpace:
        space = self.gymnax_env.observation_space(self.env_params)
        return _space_from_gymnax(space, "observation")

    @property
    def action_space(self) -> AbstractSpace:
        return _space_from_gymnax(
            self.gymnax_env.action_space(self.env_params), "action"
        )

    def _info_zeros(self, key: PRNGKeyArray, state: PyTree) -> PyTree:
        """Zeros shaped like `step_env`'s info, so `reset` and `step` match."""
        action = self.action_space.sample(key)
        shapes = jax.eval_shape(
            lambda: _strong(
                self.gymnax_env.step_env(key, state, action, self.env_params)[4]
            )
        )
        return jtu.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    def reset(self, key: PRNGKeyArray) -> tuple[PyTree, TimeStep]:
        observation, state = self.gymnax_env.reset_env(key, self.env_params)
        state = _strong(state)
        timestep = TimeStep(
            observation=_cast(observation, self.observation_space),
            reward=jnp.float32(0.0),
            terminated=jnp.bool_(False),
            truncated=jnp.bool_(False),
            extras={"info": self._info_zeros(key, state)},
        )
        return state, timestep

    def step(
        self, state: PyTree, action: Array, key: PRNGKeyArray
    ) -> tuple[PyTree, TimeStep]:
        action = _cast(action, self.action_space)
        observation, next_state, reward, done, info = self.gymnax_env.step_env(
            key, state, action, self.env_params
        )
        done = _scalar(done, jnp.bool_)
        if self.six_value_step:
            terminated = done
            truncated = _scalar(
                self.gymnax_env.is_truncated(next_state, self.env_params), jnp.bool_
            )
        else:
            lifted = _params_without_time_limit(self.env_params)
            if lifted is None:
                terminated, truncated = done, jnp.bool_(False)
            else:
                natural = self.gymnax_env.step_env(key, state, action, lifted)[3]
                terminated = _scalar(natural, jnp.bool_)
                truncated = done & ~terminated
        timestep = TimeStep(
            observation=_cast(observation, self.observation_space),
            reward=_scalar(reward, jnp.float32),
            terminated=terminated,
            truncated=truncated,
            extras={"info": _strong(info)},
        )
        return _strong(next_state), timestep


def from_gymnax(env: Any, env_params: PyTree | None = None) -> FromGymnax:
    """Use a gymnax environment as an eqxrl environment (one environment, pure, no
    auto-reset), e.g. to train [`PPO`][eqxrl.PPO] on it.

    Works with both gymnax APIs, detected from the number of values `env.step`
    returns: gymnax 0.x (`obs, state, reward, done, info`, where `done` merges
    termination and the time limit) and gymnax >= 1.0 (`obs, state, reward,
    terminated, truncated, info`). In both cases the result keeps termination and
    truncation apart, so PPO bootstraps through gymnax's time limit; see
    [`FromGymnax`][eqxrl.envs.FromGymnax] for exactly how.

    **Arguments:**

    - `env`: a gymnax environment (an instance of a gymnax `Environment`, or any
      object with gymnax's `reset_env`, `step_env`, `step`, `observation_space` and
      `action_space`).
    - `env_params`: its params; `None` uses `env.default_params`.

    **Returns:**

    A [`FromGymnax`][eqxrl.envs.FromGymnax] environment.

    !!! example

        ```python
        import gymnax

        gymnax_env, params = gymnax.make("Acrobot-v1")
        env = eqxrl.envs.from_gymnax(gymnax_env, params)
        ppo = eqxrl.PPO(env=env, total_timesteps=200_000)
        state, metrics = ppo.train(jax.random.key(0))
        ```
    """
    if env_params is None:
        env_params = env.default_params

    def probe(key: PRNGKeyArray) -> tuple:
        _, state = env.reset(key, env_params)
        action = env.action_space(env_params).sample(key)
        return tuple(env.step(key, state, action, env_params))

    num_values = len(jax.eval_shape(probe, jr.key(0)))
    if num_values not in (5, 6):
        raise ValueError(
            f"from_gymnax: {type(env).__name__}.step returned {num_values} values; "
            "expected gymnax 0.x's 5 (obs, state, reward, done, info) or gymnax "
            "1.0's 6 (obs, state, reward, terminated, truncated, info)."
        )
    return FromGymnax(env, env_params, six_value_step=num_values == 6)


# What `max_steps_in_episode` says for an environment without a time limit.
_UNLIMITED_EPISODE_STEPS = 10_000


class GymnaxParams(eqx.Module):
    """The params of a [`ToGymnax`][eqxrl.envs.ToGymnax] environment, shaped like
    gymnax's `EnvParams`: what gymnax-style code reads and replaces.

    **Fields:**

    - `arrays`: the array fields of the eqxrl environment (for CartPole its physics
      constants), as `eqx.filter(env, eqx.is_array)` gives them: `jax.vmap` over them
      randomizes the domain.
    - `max_steps_in_episode`: the time limit (a static int). For an environment
      wrapped in [`TimeLimit`][eqxrl.envs.TimeLimit], `.replace(max_steps_in_episode=n)`
      changes that limit; for one without, it is 10,000 and only informs tools that
      need an episode length (gymnax's `RolloutWrapper`, rejax's evaluation).
    """

    arrays: PyTree
    max_steps_in_episode: int = eqx.field(static=True)

    def replace(self, **changes: Any) -> "GymnaxParams":
        """A copy with `changes` (field names as keywords), as gymnax's
        `EnvParams.replace`."""
        return dataclasses.replace(self, **changes)


class ToGymnax:
    """An eqxrl environment behind gymnax's interface; build it with
    [`to_gymnax`][eqxrl.envs.to_gymnax].

    Unlike the rest of eqxrl this is a plain Python object, not an `eqx.Module`,
    because gymnax code treats environments that way: it hashes them (gymnax's
    wrappers jit their methods with a static `self`, users write
    `jax.jit(env.step)`), and a Module holding arrays cannot be hashed.

    Methods take `(key, state, action, params)` in gymnax's order and are jitted, as
    gymnax's are (a call and the same call inside your own `jit` give the same bits).
    Actions may be Python or NumPy numbers and arrays. The params are a
    [`GymnaxParams`][eqxrl.envs.GymnaxParams]: the array leaves of the eqxrl
    environment (`jax.vmap` over them randomizes the domain as in gymnax) and
    `max_steps_in_episode`; `params=None` means `default_params`. The state is the
    eqxrl state.

    `step` auto-resets like gymnax's (through [`AutoReset`][eqxrl.envs.AutoReset]).
    Its `info` dict holds `terminated`, `truncated`, `final_observation` (the
    observation before the reset), `discount` (`1 - terminated`), the eqxrl
    timestep's `extras` and, for environments with masks, `action_mask` (of the
    returned observation; gymnax has no place for the mask after `reset`).

    **Arguments:**

    - `env`: the eqxrl environment (without `AutoReset`).
    - `six_value_step`: `False` for gymnax 0.x's `step` (`obs, state, reward, done,
      info`; what PureJaxRL scripts unpack), `True` for gymnax 1.0's (`obs, state,
      reward, terminated, truncated, info`; what gymnax 1.0's own wrappers unpack).
    """

    def __init__(self, env: AbstractEnvironment, six_value_step: bool = False):
        self.env = env
        self.six_value_step = six_value_step
        # Jitted like gymnax's methods (`self` is static: its hash is its identity).
        self._jitted_reset = jax.jit(self._reset)
        self._jitted_step = jax.jit(self._step)
        self._jitted_step_env = jax.jit(self._step_env)

    def __repr__(self) -> str:
        return f"ToGymnax({self.env!r}, six_value_step={self.six_value_step})"

    @property
    def default_params(self) -> GymnaxParams:
        """The array leaves of the wrapped environment and its time limit."""
        limit = (
            self.env.max_episode_steps
            if isinstance(self.env, TimeLimit)
            else _UNLIMITED_EPISODE_STEPS
        )
        return GymnaxParams(eqx.filter(self.env, eqx.is_array), limit)

    @property
    def name(self) -> str:
        return type(self.env).__name__

    @property
    def num_actions(self) -> int:
        """The number of discrete actions, or the size of a continuous action."""
        space = self.env.action_space
        if isinstance(space, Discrete):
            return space.num_values
        return math.prod(space.shape)

    def _env(self, params: PyTree | None) -> AbstractEnvironment:
        if params is None:
            return self.env
        arrays = params.arrays if isinstance(params, GymnaxParams) else params
        env = eqx.combine(arrays, eqx.filter(self.env, eqx.is_array, inverse=True))
        if (
            isinstance(params, GymnaxParams)
            and isinstance(env, TimeLimit)
            and params.max_steps_in_episode != env.max_episode_steps
        ):
            env = TimeLimit(env.env, params.max_steps_in_episode)
        return env

    def _action(self, action: ArrayLike) -> Array:
        """Python / NumPy / JAX numbers and arrays, as the action space's dtype."""
        return jnp.asarray(action, self.env.action_space.dtype)

    def _reset(self, key: PRNGKeyArray, params: PyTree | None) -> tuple[PyTree, PyTree]:
        state, timestep = self._env(params).reset(key)
        return timestep.observation, state

    def reset_env(
        self, key: PRNGKeyArray, params: PyTree | None = None
    ) -> tuple[PyTree, PyTree]:
        """gymnax's `reset_env`: `(observation, state)`."""
        return self._jitted_reset(key, params)

    def reset(
        self, key: PRNGKeyArray, params: PyTree | None = None
    ) -> tuple[PyTree, PyTree]:
        """gymnax's `reset`: `(observation, state)`."""
        return self._jitted_reset(key, params)

    def _outputs(self, state: PyTree, timestep: TimeStep, final_observation: PyTree):
        info = dict(timestep.extras)
        info.update(
            terminated=timestep.terminated,
            truncated=timestep.truncated,
            final_observation=final_observation,
            discount=(~timestep.terminated).astype(jnp.float32),
        )
        if timestep.action_mask is not None:
            info["action_mask"] = timestep.action_mask
        if self.six_value_step:
            flags = (timestep.terminated, timestep.truncated)
        else:
            flags = (timestep.terminated | timestep.truncated,)
        return (timestep.observation, state, timestep.reward, *flags, info)

    def _step_env(
        self, key: PRNGKeyArray, state: PyTree, action: ArrayLike, params: PyTree
    ) -> tuple:
        state, timestep = self._env(params).step(state, self._action(action), key)
        return self._outputs(state, timestep, timestep.observation)

    def step_env(
        self,
        key: PRNGKeyArray,
        state: PyTree,
        action: ArrayLike,
        params: PyTree | None = None,
    ) -> tuple:
        """gymnax's `step_env`: one step without auto-reset."""
        return self._jitted_step_env(key, state, action, params)

    def _step(
        self, key: PRNGKeyArray, state: PyTree, action: ArrayLike, params: PyTree
    ) -> tuple:
        env = AutoReset(self._env(params))
        state, timestep = env.step(state, self._action(action), key)
        extras = dict(timestep.extras)
        final_observation = extras.pop("final_observation")
        timestep = eqx.tree_at(lambda t: t.extras, timestep, extras)
        return self._outputs(state, timestep, final_observation)

    def step(
        self,
        key: PRNGKeyArray,
        state: PyTree,
        action: ArrayLike,
        params: PyTree | None = None,
    ) -> tuple:
        """gymnax's `step`: one step, resetting the episode when it ends.

        **Returns:**

        `(observation, state, reward, done, info)`, or with `six_value_step`
        `(observation, state, reward, terminated, truncated, info)`. When the episode
        ends, `observation` and `state` are those of the next episode's start.
        """
        return self._jitted_step(key, state, action, params)

    def observation_space(self, params: PyTree | None = None) -> Any:
        """The observation space as a gymnax space."""
        return _space_to_gymnax(self._env(params).observation_space)

    def action_space(self, params: PyTree | None = None) -> Any:
        """The action space as a gymnax space."""
        return _space_to_gymnax(self._env(params).action_space)

    def state_space(self, params: PyTree | None = None) -> Any:
        """The state as a gymnax `Dict` space: one unbounded `Box` per state leaf,
        named by its path (eqxrl states carry no bounds). Its `contains(state)` is
        true for a state of this structure without NaNs."""
        from gymnax.environments import spaces

        state = eqx.filter_eval_shape(self._env(params).reset, jr.key(0))[0]
        return _path_dict_space()(
            {
                path: spaces.Box(-jnp.inf, jnp.inf, leaf.shape, leaf.dtype)
                for path, leaf in _state_leaves(state).items()
            }
        )


def _space_to_gymnax(space: AbstractSpace) -> Any:
    try:
        from gymnax.environments import spaces
    except ImportError:
        raise ImportError(
            "to_gymnax: gymnax-style spaces need gymnax; install it with "
            "`pip install 'eqxrl[gymnax]'` (reset and step work without it)."
        ) from None
    if isinstance(space, Discrete):
        return spaces.Discrete(space.num_values)
    if isinstance(space, Box):
        low, high = _gymnax_bound(space.low), _gymnax_bound(space.high)
        return spaces.Box(low, high, space.shape, jnp.float32)
    raise ValueError(
        f"to_gymnax: no gymnax equivalent for {type(space).__name__}; only Discrete "
        "and Box spaces convert."
    )


def _gymnax_bound(bound: Array) -> Array | float:
    """A `Box` bound as gymnax's own spaces give it: a Python float when it is the
    same everywhere (e.g. Snake's 0 and 1, Pendulum's torque), else the array.

    gymnax's wrappers expect that: `FlattenObservationWrapper` flattens a space's
    shape but keeps its bounds, so only scalar bounds still fit a flattened
    observation, and `GymnaxToGymWrapper` calls `float()` on bounds of size 1, which
    a JAX array of shape `(1,)` refuses. Bounds that depend on traced params (inside
    `jit`) stay arrays."""
    try:
        values = np.asarray(bound)
    except jax.errors.TracerArrayConversionError:
        return bound
    if values.size and (values == values.flat[0]).all():
        return float(values.flat[0])
    return bound


def _state_leaves(state: PyTree) -> dict[str, Any]:
    """The leaves of a state keyed by their path (`.env_state.physics`)."""
    leaves = jtu.tree_flatten_with_path(state)[0]
    return {jtu.keystr(path) or "state": leaf for path, leaf in leaves}


@functools.cache
def _path_dict_space() -> type:
    """gymnax's `Dict` space keyed by pytree paths, defined on first use (gymnax is
    optional).

    gymnax's own `Dict.contains` reads each key with `getattr(state, key)`, which
    cannot follow a path such as `.env_state.physics`; this `contains` flattens the
    state with paths instead."""
    from gymnax.environments import spaces

    class PathDict(spaces.Dict):
        def contains(self, x: PyTree) -> Array:
            leaves = _state_leaves(x)
            if leaves.keys() != self.spaces.keys():
                return jnp.bool_(False)  # another structure: not this state
            inside = [space.contains(leaves[k]) for k, space in self.spaces.items()]
            return jnp.all(jnp.stack(inside))

    return PathDict


def to_gymnax(
    env: AbstractEnvironment, *, six_value_step: bool = False
) -> tuple[ToGymnax, PyTree]:
    """Expose an eqxrl environment through gymnax's interface, e.g. to run it in a
    PureJaxRL script or with gymnax's wrappers.

    **Arguments:**

    - `env`: an eqxrl environment (not wrapped in `AutoReset`: the gymnax-style
      `step` resets by itself).
    - `six_value_step`: return gymnax 1.0's six values from `step` instead of gymnax
      0.x's five (the default, what PureJaxRL unpacks).

    **Returns:**

    `(gymnax_env, env_params)`, like `gymnax.make`: a [`ToGymnax`][eqxrl.envs.ToGymnax]
    with `reset(key, params) -> (obs, state)`, `step(key, state, action, params) ->
    (obs, state, reward, done, info)`, `observation_space(params)`,
    `action_space(params)` and `num_actions`, and its params.

    !!! example

        ```python
        env, env_params = eqxrl.envs.to_gymnax(eqxrl.envs.make("CartPole-v1"))
        keys = jax.random.split(jax.random.key(0), 8)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(keys, env_params)
        actions = jnp.zeros(8, jnp.int32)
        obs, state, reward, done, info = jax.vmap(
            env.step, in_axes=(0, 0, 0, None)
        )(keys, state, actions, env_params)
        ```
    """
    for inner in unwrap(env):
        if isinstance(inner, AutoReset):
            raise ValueError(
                "to_gymnax: pass the environment without AutoReset; the gymnax-style "
                "step resets by itself."
            )
    gymnax_env = ToGymnax(env, six_value_step=six_value_step)
    return gymnax_env, gymnax_env.default_params
