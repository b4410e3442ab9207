"""eqxrl environments as gymnasium environments (`to_gymnasium`): NumPy in, NumPy
out, for Stable-Baselines3, CleanRL-style loops and gymnasium's own tools.

This module imports gymnasium at the top; `eqxrl.envs.to_gymnasium` imports it only
when called (install `eqxrl[gymnasium]`).
"""

from typing import Any

import equinox as eqx
import gymnasium
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from .._checks import describe
from .._environment import AbstractEnvironment
from .._spaces import AbstractSpace, Box, Dict, Discrete, Tuple
from .._wrappers import AutoReset

_RENDER_FPS = 30


def gymnasium_space(space: AbstractSpace, what: str) -> gymnasium.spaces.Space:
    """An eqxrl space as gymnasium's (same bounds and dtype; `Dict` and `Tuple`
    recursively)."""
    if isinstance(space, Dict):
        return gymnasium.spaces.Dict(
            {name: gymnasium_space(part, what) for name, part in space.spaces.items()}
        )
    if isinstance(space, Tuple):
        return gymnasium.spaces.Tuple([gymnasium_space(p, what) for p in space.spaces])
    if isinstance(space, Discrete):
        return gymnasium.spaces.Discrete(space.num_values)
    if isinstance(space, Box):
        # Unbounded entries as float32's largest value, as gymnasium's own
        # environments write them (its checker warns about infinite bounds).
        largest = np.finfo(np.float32).max
        return gymnasium.spaces.Box(
            np.maximum(np.asarray(space.low), -largest),
            np.minimum(np.asarray(space.high), largest),
            dtype=np.float32,
        )
    raise ValueError(
        f"to_gymnasium: the {what} space is a {type(space).__name__}; only Discrete, "
        "Box, Dict and Tuple spaces have a gymnasium counterpart here."
    )


def _renders(env: AbstractEnvironment) -> bool:
    state = eqx.filter_eval_shape(env.reset, jr.key(0))[0]
    try:
        eqx.filter_eval_shape(env.render, state)
    except NotImplementedError:
        return False
    return True


def _reset(env: AbstractEnvironment, key: jax.Array) -> tuple[Any, Any]:
    return env.reset(key)


def _step(env: AbstractEnvironment, state: Any, action: Any, key: jax.Array):
    return env.step(state, action, key)


def _render(env: AbstractEnvironment, state: Any) -> jax.Array:
    return env.render(state)


# One compilation per environment structure (the environment is an argument: its
# array fields are inputs, not constants).
_jitted_reset = eqx.filter_jit(_reset)
_jitted_step = eqx.filter_jit(_step)
_jitted_render = eqx.filter_jit(_render)
_jitted_vector_reset = eqx.filter_jit(lambda env, keys: jax.vmap(env.reset)(keys))
_jitted_vector_step = eqx.filter_jit(
    lambda env, states, actions, keys: jax.vmap(env.step)(states, actions, keys)
)


def _check_render_mode(env: AbstractEnvironment, render_mode: str | None) -> None:
    if render_mode not in (None, "rgb_array"):
        raise ValueError(
            f"to_gymnasium: render_mode={render_mode!r}; eqxrl environments draw "
            "frames, so the render mode is 'rgb_array' (or None)."
        )
    if render_mode is not None and not _renders(env):
        raise ValueError(
            f"to_gymnasium: {describe(env)} has no render(state) method, so "
            "render_mode='rgb_array' has nothing to draw."
        )


def _actions(env: AbstractEnvironment, actions: Any) -> jax.Array:
    """NumPy / Python actions as the action space's dtype; a Discrete space takes
    integers in range only (a float or 7 is an error, not a truncated action)."""
    actions = np.asarray(actions)
    space = env.action_space
    if isinstance(space, Discrete):
        if not np.issubdtype(actions.dtype, np.integer):
            raise ValueError(
                f"{describe(env)}: a Discrete action must be an integer, got "
                f"{actions.dtype} {actions!r}."
            )
        outside = (actions < 0) | (actions >= space.num_values)
        if outside.any():
            raise ValueError(
                f"{describe(env)}: action {actions[outside].ravel()[0]} is outside "
                f"the action space Discrete({space.num_values})."
            )
        return jnp.asarray(actions, jnp.int32)
    return jnp.asarray(actions, jnp.float32)


def _key(np_random: np.random.Generator) -> jax.Array:
    """A JAX key drawn from gymnasium's generator (seeded by `reset(seed=...)`)."""
    return jr.key(int(np_random.integers(0, 2**31 - 1)))


def _numpy(observation: Any) -> Any:
    """An observation (an array, or a dict / tuple of arrays) in NumPy; integer
    (`Discrete`) leaves as int64, the dtype of gymnasium's `Discrete`."""

    def leaf(x: Any) -> Any:
        x = np.asarray(x)
        if np.issubdtype(x.dtype, np.integer):
            x = x.astype(np.int64)
            return x[()] if x.ndim == 0 else x
        return x

    return jax.tree.map(leaf, observation)


def _info(timestep: Any) -> dict[str, Any]:
    return (
        {}
        if timestep.action_mask is None
        else {"action_mask": np.asarray(timestep.action_mask)}
    )


class GymnasiumEnv(gymnasium.Env):
    """One eqxrl environment behind gymnasium's `Env` interface (see
    [`to_gymnasium`][eqxrl.envs.to_gymnasium])."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": _RENDER_FPS}

    def __init__(self, env: AbstractEnvironment, render_mode: str | None = None):
        _check_render_mode(env, render_mode)
        self.env = env
        self.render_mode = render_mode
        self.observation_space = gymnasium_space(env.observation_space, "observation")
        self.action_space = gymnasium_space(env.action_space, "action")
        self._state = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self._state, timestep = _jitted_reset(self.env, _key(self.np_random))
        return _numpy(timestep.observation), _info(timestep)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if self._state is None:
            raise RuntimeError("to_gymnasium: call reset() before step().")
        self._state, timestep = _jitted_step(
            self.env, self._state, _actions(self.env, action), _key(self.np_random)
        )
        return (
            _numpy(timestep.observation),
            float(timestep.reward),
            bool(timestep.terminated),
            bool(timestep.truncated),
            _info(timestep),
        )

    def render(self) -> np.ndarray | None:
        if self.render_mode is None or self._state is None:
            return None
        return np.asarray(_jitted_render(self.env, self._state))


class GymnasiumVectorEnv(VectorEnv):
    """`num_envs` copies of an eqxrl environment behind gymnasium's `VectorEnv`,
    stepped in one compiled call, with gymnasium's same-step autoreset (see
    [`to_gymnasium`][eqxrl.envs.to_gymnasium])."""

    metadata = {
        "render_modes": ["rgb_array"],
        "render_fps": _RENDER_FPS,
        "autoreset_mode": AutoresetMode.SAME_STEP,
    }

    def __init__(
        self,
        env: AbstractEnvironment,
        num_envs: int,
        render_mode: str | None = None,
    ):
        if not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(
                f"to_gymnasium: num_envs={num_envs!r} must be an int >= 1."
            )
        _check_render_mode(env, render_mode)
        self.env = AutoReset(env)
        self.num_envs = num_envs
        self.render_mode = render_mode
        self.single_observation_space = gymnasium_space(
            env.observation_space, "observation"
        )
        self.single_action_space = gymnasium_space(env.action_space, "action")
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._states = None

    def _keys(self) -> jax.Array:
        return jr.split(_key(self.np_random), self.num_envs)

    def reset(
        self,
        *,
        seed: int | list[int] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        if isinstance(seed, list | tuple):
            seed = seed[0]
        super().reset(seed=seed)
        self._states, timesteps = _jitted_vector_reset(self.env, self._keys())
        return _numpy(timesteps.observation), _info(timesteps)

    def step(
        self, actions: Any
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if self._states is None:
            raise RuntimeError("to_gymnasium: call reset() before step().")
        actions = _actions(self.env, actions)
        if actions.shape[:1] != (self.num_envs,):
            raise ValueError(
                f"to_gymnasium: step takes one action per environment, a leading "
                f"axis of {self.num_envs}; got shape {tuple(actions.shape)}."
            )
        self._states, timesteps = _jitted_vector_step(
            self.env, self._states, actions, self._keys()
        )
        terminated = np.asarray(timesteps.terminated)
        truncated = np.asarray(timesteps.truncated)
        info = _info(timesteps)
        done = terminated | truncated
        if done.any():
            # gymnasium's same-step autoreset: the observation is the next episode's
            # first; the episode's last is in info["final_obs"] where it ended.
            final = _numpy(timesteps.extras["final_observation"])
            info["final_obs"] = np.empty(self.num_envs, dtype=object)
            for index in np.flatnonzero(done):
                info["final_obs"][index] = jax.tree.map(lambda x: x[index], final)
            info["_final_obs"] = done
        return (
            _numpy(timesteps.observation),
            np.asarray(timesteps.reward),
            terminated,
            truncated,
            info,
        )

    def render(self) -> tuple[np.ndarray, ...] | None:
        if self.render_mode is None or self._states is None:
            return None
        frames = _jitted_render_batch(self.env, self._states)
        return tuple(np.asarray(frames))


_jitted_render_batch = eqx.filter_jit(lambda env, states: jax.vmap(env.render)(states))
