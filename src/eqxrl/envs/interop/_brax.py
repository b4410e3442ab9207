"""Adapters between eqxrl environments and Brax environments (every Brax backend,
MJX included, and MuJoCo Playground's `MjxEnv`, which shares Brax's `State`), both
ways.

Brax is not a dependency of eqxrl: `from_brax` only calls the methods of the object
it is given (it imports `brax.envs` only to look a name up), and `to_brax` imports
Brax when it is called (install `eqxrl[brax]`).
"""

import math
from collections.abc import Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, ArrayLike, Bool, Float, PRNGKeyArray, PyTree

from .._checks import skip_action_checks
from .._environment import AbstractEnvironment, unwrap
from .._spaces import AbstractSpace, Box, Dict, Discrete, Tuple, is_leaf_space
from .._types import TimeStep
from .._wrappers import AutoReset, TimeLimit
from ._common import is_typed_key, legacy_key, strongly_typed

_INSTALL = "pip install 'eqxrl[brax]'"


def _import_brax_envs() -> Any:
    try:
        from brax import envs
    except ImportError as error:
        raise ImportError(f"Brax is not installed ({error}): {_INSTALL}.") from None
    return envs


def _typed_key(key: PRNGKeyArray) -> PRNGKeyArray:
    """A key as eqxrl takes it: a typed key (Brax hands out uint32 words)."""
    return key if is_typed_key(key) else jr.wrap_key_data(key)


def _as_float32(observation: PyTree) -> PyTree:
    """Observation leaves as float32, mappings as `dict`s (Playground's observation
    dicts stay dicts, with the sorted keys of an eqxrl `Dict`)."""
    if isinstance(observation, Mapping):
        return {str(name): _as_float32(part) for name, part in observation.items()}
    if isinstance(observation, tuple | list):
        return tuple(_as_float32(part) for part in observation)
    return jnp.asarray(observation).astype(jnp.float32)


def _unbounded_space(observation: PyTree) -> AbstractSpace:
    """The unbounded float32 space of an observation (shapes only): a `Box` per array,
    a `Dict` per mapping, a `Tuple` per sequence."""
    if isinstance(observation, Mapping):
        return Dict({str(k): _unbounded_space(v) for k, v in observation.items()})
    if isinstance(observation, tuple | list):
        return Tuple([_unbounded_space(part) for part in observation])
    return Box(-jnp.inf, jnp.inf, tuple(observation.shape))


def _wrapper_names(env: Any) -> list[str]:
    """The class names of a Brax / Playground wrapper chain, outermost first (read
    through `vars`, since Brax's wrappers forward unknown attributes)."""
    names = []
    while env is not None:
        names.append(type(env).__name__)
        env = vars(env).get("env") if hasattr(env, "__dict__") else None
    return names


class FromBrax(AbstractEnvironment[PyTree]):
    """A Brax or MuJoCo Playground environment as an eqxrl environment; build it with
    [`from_brax`][eqxrl.envs.from_brax].

    The state is the Brax `State` itself (`pipeline_state` / Playground's `data`,
    `obs`, `reward`, `done`, `metrics`, `info`), so nothing Brax keeps is lost:
    its `metrics` and `info` are in the state, not in the
    [`TimeStep`][eqxrl.envs.TimeStep], whose `extras` stay empty.
    Numbers a Brax `step` returns as Python floats become float32 arrays, so `reset`
    and `step` return states of one structure and dtype.

    **Conversion rules.**

    - `reset(key)` calls Brax's `reset` with the key's uint32 words (what
      `jax.random.PRNGKey` gives); the `TimeStep` has reward 0 and both flags
      `False`.
    - `step(state, action, key)` calls Brax's `step(state, action)`; `key` is not
      used (a Brax step is deterministic given its state; Playground environments
      keep their own key in `info["rng"]`). Actions are clipped to `[-1, 1]`, Brax's
      action range, so that a Gaussian policy's samples are valid.
    - `terminated` is `done and not info["truncation"]`, `truncated` is `done and
      info["truncation"]`. Brax's `EpisodeWrapper` (and Playground's wrappers) set
      `info["truncation"]` at their time limit; a Brax environment without one has
      no time limit and never truncates: wrap the result in
      [`TimeLimit`][eqxrl.envs.TimeLimit] to truncate its episodes, or wrap the Brax
      environment in Brax's `EpisodeWrapper` before converting it.
    - Observations are float32: an array becomes an unbounded
      [`Box`][eqxrl.envs.Box], a dict of arrays (Playground's `{"state": ...,
      "privileged_state": ...}`) a [`Dict`][eqxrl.envs.Dict] of them, kept
      structured (e.g. for PPO's `actor_keys` / `critic_keys`).
    - The action space is `Box(-1, 1, (action_size,))`.

    **Arguments:**

    - `brax_env`: the Brax environment (a `brax.envs.Env` or a Playground `MjxEnv`,
      for one environment: without Brax's `VmapWrapper` or `AutoResetWrapper`).
      It is a static field: the environment is compiled into the program, as in
      Brax's own trainers.
    """

    brax_env: Any = eqx.field(static=True)
    _observation_space: AbstractSpace
    _action_space: Box

    def __init__(self, brax_env: Any):
        wrappers = _wrapper_names(brax_env)
        batched = [n for n in wrappers if "Vmap" in n or "AutoReset" in n]
        if batched:
            raise ValueError(
                f"FromBrax: the Brax environment is wrapped in {batched[0]}; pass "
                "one environment without Brax's VmapWrapper / AutoResetWrapper "
                "(eqxrl batches with jax.vmap and resets with AutoReset). Brax's "
                "EpisodeWrapper alone is fine: its time limit becomes `truncated`."
            )
        self.brax_env = brax_env
        reset = jax.eval_shape(brax_env.reset, jr.key_data(jr.key(0)))
        self._observation_space = _unbounded_space(reset.obs)
        self._action_space = Box(-1.0, 1.0, (int(brax_env.action_size),))

    @property
    def observation_space(self) -> AbstractSpace:
        return self._observation_space

    @property
    def action_space(self) -> Box:
        return self._action_space

    def reset(self, key: PRNGKeyArray) -> tuple[PyTree, TimeStep]:
        state = strongly_typed(self.brax_env.reset(legacy_key(key)))
        timestep = TimeStep(
            observation=_as_float32(state.obs),
            reward=jnp.float32(0.0),
            terminated=jnp.bool_(False),
            truncated=jnp.bool_(False),
        )
        return state, timestep

    def step(
        self,
        state: PyTree,
        action: Float[ArrayLike, " action_size"],
        key: PRNGKeyArray,
    ) -> tuple[PyTree, TimeStep]:
        del key  # a Brax step takes its randomness from the state
        action = jnp.clip(jnp.asarray(action, jnp.float32), -1.0, 1.0)
        state = strongly_typed(self.brax_env.step(state, action))
        done = jnp.reshape(state.done, ()).astype(jnp.bool_)
        truncation = state.info.get("truncation", jnp.float32(0.0))
        truncation = jnp.reshape(truncation, ()).astype(jnp.bool_)
        timestep = TimeStep(
            observation=_as_float32(state.obs),
            reward=jnp.reshape(state.reward, ()).astype(jnp.float32),
            terminated=done & ~truncation,
            truncated=done & truncation,
        )
        return state, timestep


def from_brax(env: Any, **kwargs: Any) -> FromBrax:
    """Use a Brax or MuJoCo Playground environment as an eqxrl environment (one
    environment, pure, no auto-reset), e.g. to train [`PPO`][eqxrl.PPO] on it.

    Brax's `done` and `info["truncation"]` become `terminated` and `truncated`;
    observation dicts stay structured; see [`FromBrax`][eqxrl.envs.FromBrax] for
    every rule. A Brax environment has no time limit of its own: wrap the result in
    [`TimeLimit`][eqxrl.envs.TimeLimit].

    **Arguments:**

    - `env`: a `brax.envs.Env` (any backend: `"generalized"`, `"positional"`,
      `"spring"`, `"mjx"`), a MuJoCo Playground `MjxEnv` (e.g.
      `mujoco_playground.registry.load("CartpoleBalance")`), or the name of a Brax
      environment for `brax.envs.get_environment`.
    - `**kwargs`: with a name, passed to `brax.envs.get_environment` (e.g.
      `backend="generalized"`).

    **Returns:**

    A [`FromBrax`][eqxrl.envs.FromBrax] environment.

    !!! example

        ```python
        env = eqxrl.envs.TimeLimit(
            eqxrl.envs.from_brax("inverted_pendulum", backend="generalized"), 1000
        )
        ppo = eqxrl.PPO(env=env, total_timesteps=200_000)
        state, metrics = ppo.train(jax.random.key(0))
        ```
    """
    if isinstance(env, str):
        env = _import_brax_envs().get_environment(env, **kwargs)
    elif kwargs:
        raise TypeError(
            f"from_brax: keyword arguments ({', '.join(kwargs)}) are for "
            "brax.envs.get_environment, when the environment is given by name."
        )
    return FromBrax(env)


class ToBraxState(eqx.Module):
    """What a [`ToBrax`][eqxrl.envs.ToBrax] environment keeps in Brax's
    `State.pipeline_state` (which Brax's `AutoResetWrapper` resets with the
    observation).

    **Arguments:**

    - `env_state`: the eqxrl environment's state.
    - `action_mask`: the action mask of the latest timestep (bool `[num_actions]`),
      or `None` for an environment without masks.
    """

    env_state: PyTree
    action_mask: Bool[Array, " num_actions"] | None = None


class ToBrax:
    """An eqxrl environment behind Brax's interface; build it with
    [`to_brax`][eqxrl.envs.to_brax].

    Like Brax's environments this is a plain Python object with `reset(rng) ->
    State` and `step(state, action) -> State` (per environment: Brax's trainers add
    `VmapWrapper`, `EpisodeWrapper` and `AutoResetWrapper`), `observation_size`,
    `action_size` and `backend` (`"eqxrl"`). `to_brax` registers the class as a
    virtual subclass of `brax.envs.Env`, so `isinstance(env, brax.envs.Env)` holds.

    **The state.** A Brax `State` whose `pipeline_state` is a
    [`ToBraxState`][eqxrl.envs.ToBraxState] (the eqxrl state and action mask),
    `obs` the observation (every leaf float32; a dict observation stays a dict),
    `reward` the float32 reward, `done` float32 (`terminated or truncated`), and
    `info` with `"rng"` (the key of the next step, uint32 words as Brax keeps
    keys), `"truncation"` (float32: truncated and not terminated, the key Brax's
    wrappers and PPO read to bootstrap) and `"extras"` (the timestep's `extras`).

    **Actions.** Brax's agents output float vectors in `[-1, 1]` (PPO's
    tanh-squashed Gaussian), decoded as follows:

    - `Discrete(n)`: the action vector has `n` entries and the eqxrl action is the
      index of the largest, among the valid actions when the environment returns an
      action mask (so a masked action is never taken). `n == 2` is no exception: two
      entries, not one.
    - `Box`: the vector has one entry per element (reshaped to the space's shape);
      it is clipped to `[-1, 1]` and mapped linearly onto `[low, high]` where both
      bounds are finite (as Brax's environments map `[-1, 1]` onto their control
      range), passed as it is where they are not.

    **Time limits.** `to_brax` takes an outermost [`TimeLimit`][eqxrl.envs.TimeLimit]
    off the environment and keeps its limit in `episode_length`, because in Brax the
    time limit is the trainer's `EpisodeWrapper(env, episode_length)`: that wrapper
    overwrites `info["truncation"]` on every step, from its own step count, so a
    truncation of the inner environment would count as a termination there. Pass
    `episode_length=env.episode_length` to Brax's trainer. Truncations from deeper
    inside the environment still end the episode with `info["truncation"] = 1`,
    which Brax's `EpisodeWrapper` replaces by 0 (a termination) unless its own limit
    is reached on the same step.

    **Arguments:**

    - `env`: the eqxrl environment (without `AutoReset`; without its outermost
      `TimeLimit`).
    - `episode_length`: the time limit taken off it, or `None`.
    """

    def __init__(self, env: AbstractEnvironment, episode_length: int | None = None):
        self.env = env
        self.episode_length = episode_length
        _check_brax_space(env.action_space, "action")
        _check_brax_space(env.observation_space, "observation")

    def __repr__(self) -> str:
        return f"ToBrax({self.env!r}, episode_length={self.episode_length})"

    @property
    def unwrapped(self) -> "ToBrax":
        """This environment (Brax's wrappers reach the innermost one through it)."""
        return self

    @property
    def backend(self) -> str:
        """`"eqxrl"`: the physics is the eqxrl environment's own, not a Brax
        pipeline."""
        return "eqxrl"

    @property
    def observation_size(self) -> int | tuple[int, ...] | dict[str, Any]:
        """The observation's size: an int for a vector (as Brax's environments
        give it), the shape for other arrays, a dict of shapes for a dict
        observation (as MuJoCo Playground's environments give it)."""

        space = self.env.observation_space
        if isinstance(space, Dict):
            return {name: tuple(part.shape) for name, part in space.spaces.items()}
        shape = tuple(space.shape)
        return shape[0] if len(shape) == 1 else shape

    @property
    def action_size(self) -> int:
        """Entries of Brax's action vector: `n` for `Discrete(n)`, the number of
        elements for a `Box`."""
        space = self.env.action_space
        if isinstance(space, Discrete):
            return space.num_values
        return math.prod(space.shape)

    def _state(self, state: Any, env_state: PyTree, timestep: TimeStep, key, info):
        info = dict(info)
        info.update(
            rng=legacy_key(key),
            truncation=(timestep.truncated & ~timestep.terminated).astype(jnp.float32),
            extras=dict(timestep.extras),
        )
        done = (timestep.terminated | timestep.truncated).astype(jnp.float32)
        return state.replace(
            pipeline_state=ToBraxState(env_state, timestep.action_mask),
            obs=_as_float32(timestep.observation),
            reward=timestep.reward.astype(jnp.float32),
            done=done,
            info=info,
        )

    def reset(self, rng: PRNGKeyArray) -> Any:
        """Start an episode: Brax's `reset`.

        **Arguments:**

        - `rng`: a key (`jax.random.PRNGKey`'s uint32 words, as Brax passes them,
          or a typed key).

        **Returns:**

        A Brax `State`.
        """
        from brax.envs.base import State

        key, reset_key = jr.split(_typed_key(rng))
        env_state, timestep = self.env.reset(reset_key)
        empty = State(
            pipeline_state=None,
            obs=None,
            reward=jnp.float32(0.0),
            done=jnp.float32(0.0),
            metrics={},
            info={},
        )
        return self._state(empty, env_state, timestep, key, {})

    def step(self, state: Any, action: Float[ArrayLike, " action_size"]) -> Any:
        """Advance one step: Brax's `step` (no reset: Brax's `AutoResetWrapper`
        resets).

        **Arguments:**

        - `state`: the `State` of the previous `reset` or `step`.
        - `action`: float `[action_size]` in `[-1, 1]`, decoded as the class
          description says.

        **Returns:**

        The next `State`.
        """
        key, step_key = jr.split(_typed_key(state.info["rng"]))
        pipeline_state = state.pipeline_state
        decoded = self._decode(action, pipeline_state.action_mask)
        with skip_action_checks():  # decoded actions are valid by construction
            env_state, timestep = self.env.step(
                pipeline_state.env_state, decoded, step_key
            )
        return self._state(state, env_state, timestep, key, state.info)

    def _decode(self, action: ArrayLike, action_mask: Array | None) -> Array:
        space = self.env.action_space
        action = jnp.reshape(jnp.asarray(action, jnp.float32), (self.action_size,))
        if isinstance(space, Discrete):
            if action_mask is not None:
                action = jnp.where(action_mask, action, -jnp.inf)
            return jnp.argmax(action).astype(jnp.int32)
        action = jnp.reshape(jnp.clip(action, -1.0, 1.0), space.shape)
        finite = jnp.isfinite(space.low) & jnp.isfinite(space.high)
        low = jnp.where(finite, space.low, -1.0)
        high = jnp.where(finite, space.high, 1.0)
        return low + (action + 1.0) * 0.5 * (high - low)


def _check_brax_space(space: AbstractSpace, what: str) -> None:
    if what == "action" and not isinstance(space, Discrete | Box):
        raise ValueError(
            f"to_brax: the action space is a {type(space).__name__}; Brax's actions "
            "are one float vector, so only Discrete and Box action spaces convert."
        )
    parts = space.spaces.values() if isinstance(space, Dict) else [space]
    if not all(is_leaf_space(part) for part in parts):
        raise ValueError(
            f"to_brax: the {what} space is {space}; Brax's observations are an "
            "array or a dict of arrays. Flatten nested or Tuple spaces first."
        )


def to_brax(env: AbstractEnvironment) -> ToBrax:
    """Expose an eqxrl environment through Brax's interface, e.g. to train it with
    Brax's own agents (`brax.training.agents.ppo.train`) unchanged.

    An outermost [`TimeLimit`][eqxrl.envs.TimeLimit] is taken off and its limit kept
    in `episode_length`, for the trainer's `episode_length` argument (in Brax the
    trainer's `EpisodeWrapper` owns the time limit); a `Discrete(n)` action is the
    argmax of an `n`-entry action vector; see [`ToBrax`][eqxrl.envs.ToBrax] for
    every rule.

    Brax's trainers (0.14) call `jax.device_put_replicated`, which JAX 0.9 removed:
    run them with `jax<0.9`. The environment itself works with any JAX eqxrl does.

    **Arguments:**

    - `env`: an eqxrl environment (not wrapped in `AutoReset`: Brax's
      `AutoResetWrapper` resets).

    **Returns:**

    A [`ToBrax`][eqxrl.envs.ToBrax], a `brax.envs.Env`.

    !!! example

        ```python
        from brax.training.agents.ppo import train as ppo

        env = eqxrl.envs.to_brax(eqxrl.envs.make("CartPole-v1"))
        make_policy, params, metrics = ppo.train(
            environment=env,
            episode_length=env.episode_length,  # 500, CartPole-v1's limit
            num_timesteps=200_000,
        )
        ```
    """
    envs = _import_brax_envs()
    for inner in unwrap(env):
        if isinstance(inner, AutoReset):
            raise ValueError(
                "to_brax: pass the environment without AutoReset; Brax's trainers "
                "reset it with their AutoResetWrapper."
            )
    episode_length = None
    if isinstance(env, TimeLimit):
        env, episode_length = env.env, env.max_episode_steps
    envs.Env.register(ToBrax)
    return ToBrax(env, episode_length)
