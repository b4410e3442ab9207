"""An adapter from Jumanji environments to eqxrl environments.

jumanji is not a dependency of eqxrl: this module imports it only when a Jumanji
environment is converted (install `eqxrl[jumanji]`).
"""

import math
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, PRNGKeyArray, PyTree

from .._checks import check_action
from .._environment import AbstractEnvironment
from .._spaces import AbstractSpace, Box, Dict, Discrete
from .._types import TimeStep
from ._common import legacy_key, make_by_name, strongly_typed

# The observation field that Jumanji environments put their action mask in.
_MASK = "action_mask"
# Jumanji wrappers that would change what one `reset` / `step` is.
_BATCHING_WRAPPERS = ("AutoResetWrapper", "VmapAutoResetWrapper", "VmapWrapper")


def _jumanji() -> ModuleType:
    try:
        import jumanji
        import jumanji.wrappers
    except ImportError:
        raise ImportError(
            "from_jumanji needs jumanji: `pip install 'eqxrl[jumanji]'`."
        ) from None
    return jumanji


def _spec(env: Any, name: str) -> Any:
    """`env.observation_spec` (or another spec): a property in jumanji >= 1.0, a
    method before."""
    spec = getattr(env, name)
    return spec() if callable(spec) else spec


def _children(spec: Any) -> dict[str, Any]:
    """The fields of a nested Jumanji `Spec` (a NamedTuple or dataclass observation),
    in the order the environment declares them."""
    specs = _jumanji().specs
    return {
        name: child
        for name, child in vars(spec).items()
        if not name.startswith("_") and isinstance(child, specs.Spec)
    }


def _field(value: Any, name: str) -> Any:
    return value[name] if isinstance(value, Mapping) else getattr(value, name)


def _describe(spec: Any) -> str:
    return " ".join(repr(spec).split())  # Jumanji's nested reprs span lines


def _space_from_spec(spec: Any, where: str) -> AbstractSpace:
    """An observation spec as an eqxrl space: `DiscreteArray` as `Discrete`, other
    arrays (any dtype) as a float32 `Box` with the spec's bounds, a nested spec as a
    `Dict` of its fields."""
    specs = _jumanji().specs
    if isinstance(spec, specs.DiscreteArray):
        return Discrete(int(spec.num_values))
    if isinstance(spec, specs.BoundedArray):
        low = np.broadcast_to(np.asarray(spec.minimum, np.float32), spec.shape)
        high = np.broadcast_to(np.asarray(spec.maximum, np.float32), spec.shape)
        return Box(low, high)
    if isinstance(spec, specs.Array):
        return Box(-jnp.inf, jnp.inf, spec.shape)
    fields = _children(spec)
    if not fields:
        raise ValueError(
            f"from_jumanji: the observation spec at {where} is a "
            f"{type(spec).__name__} with no array fields: {_describe(spec)}."
        )
    return Dict(
        {
            name: _space_from_spec(child, f"{where}.{name}")
            for name, child in fields.items()
        }
    )


def _observation_fields(spec: Any) -> tuple[str, ...] | None:
    """The observation fields that become the eqxrl observation (all but the action
    mask), or `None` when the observation is one array."""
    if isinstance(spec, _jumanji().specs.Array):
        return None
    return tuple(name for name in _children(spec) if name != _MASK)


def _mask_spec(env: Any) -> Any | None:
    spec = _spec(env, "observation_spec")
    if isinstance(spec, _jumanji().specs.Array):
        return None
    return _children(spec).get(_MASK)


def _multi_discrete_values(env: Any) -> tuple[int, ...] | None:
    """The `num_values` of a `MultiDiscreteArray` action spec (flattened), or `None`
    for other action specs."""
    spec = _spec(env, "action_spec")
    if not isinstance(spec, _jumanji().specs.MultiDiscreteArray):
        return None
    return tuple(int(n) for n in np.asarray(spec.num_values).ravel())


def _action_space_from_spec(env: Any) -> AbstractSpace:
    specs = _jumanji().specs
    spec = _spec(env, "action_spec")
    mask = _mask_spec(env)
    name = type(env.unwrapped).__name__
    if isinstance(spec, specs.DiscreteArray):
        space = Discrete(int(spec.num_values))
        joint_mask_shape: tuple[int, ...] = (space.num_values,)
    elif isinstance(spec, specs.MultiDiscreteArray):
        num_values = _multi_discrete_values(env)
        assert num_values is not None
        joint_mask_shape = num_values
        if math.prod(num_values) > np.iinfo(np.int32).max:
            raise ValueError(
                f"from_jumanji: {name}'s action spec {_describe(spec)} has "
                f"{math.prod(num_values):,} combinations, too many for one int32 "
                "Discrete action."
            )
        space = Discrete(math.prod(num_values))
        if mask is not None and tuple(mask.shape) != joint_mask_shape:
            raise ValueError(
                f"from_jumanji: {name}'s action spec is {_describe(spec)} and its "
                f"action_mask has shape {tuple(mask.shape)}, one row per action "
                "component (as in Jumanji's multi-agent environments). eqxrl flattens "
                "a MultiDiscreteArray into one Discrete action only with a joint "
                f"mask of shape {joint_mask_shape} (one entry per combination); a "
                "joint mask cannot be recovered from per-component masks in "
                "general. Wrap the environment so that it has such a mask."
            )
    elif isinstance(spec, specs.Array) and jnp.issubdtype(spec.dtype, jnp.floating):
        if mask is not None:
            raise ValueError(
                f"from_jumanji: {name} has continuous actions ({_describe(spec)}) "
                "and an action_mask; eqxrl masks only Discrete actions."
            )
        if isinstance(spec, specs.BoundedArray):
            low = np.broadcast_to(np.asarray(spec.minimum, np.float32), spec.shape)
            high = np.broadcast_to(np.asarray(spec.maximum, np.float32), spec.shape)
            return Box(low, high)
        return Box(-jnp.inf, jnp.inf, spec.shape)
    else:
        raise ValueError(
            f"from_jumanji: {name}'s action spec {_describe(spec)} has no eqxrl "
            "equivalent; eqxrl converts DiscreteArray and MultiDiscreteArray (to "
            "Discrete) and float Array / BoundedArray (to Box) action specs."
        )
    if mask is not None and (
        tuple(mask.shape) != joint_mask_shape or mask.dtype != jnp.bool_
    ):
        raise ValueError(
            f"from_jumanji: {name}'s action_mask is {_describe(mask)} but its action "
            f"spec {_describe(spec)} needs a bool mask of shape {joint_mask_shape}."
        )
    return space


def _convert(value: Any, space: AbstractSpace) -> PyTree[Array]:
    """A Jumanji observation (field) in the dtype of its eqxrl space; a `Dict` space
    reads the fields of a NamedTuple, dataclass or dict by name."""
    if isinstance(space, Dict):
        return {
            name: _convert(_field(value, name), part)
            for name, part in space.spaces.items()
        }
    return jnp.reshape(jnp.asarray(value).astype(space.dtype), space.shape)


def _scalar(value: Any, dtype: Any) -> Array:
    return jnp.reshape(jnp.asarray(value).astype(dtype), ())


class FromJumanji(AbstractEnvironment[PyTree]):
    """A [Jumanji](https://github.com/instadeepai/jumanji) environment as an eqxrl
    environment; build it with [`from_jumanji`][eqxrl.envs.from_jumanji].

    `reset(key)` and `step(state, action, key)` call Jumanji's `reset(key)` and
    `step(state, action)` (Jumanji's step takes no key: `key` is unused). Jumanji
    environments do not auto-reset, and neither does this one. The state is the
    Jumanji state; a typed `reset` key (`jax.random.key`) reaches Jumanji as its raw
    uint32 data, the legacy keys Jumanji is written for, so states that keep a key
    hold plain arrays.

    **Termination and truncation** come from Jumanji's `TimeStep`: a last step
    (`step_type == StepType.LAST`) with `discount == 0` is `terminated`, a last step
    with a nonzero discount (Jumanji's `truncation`, e.g. a time limit that
    bootstraps) is `truncated`. Whichever Jumanji chose is kept: `Snake-v1`, for
    example, ends its time limit with `discount == 0`, so it is `terminated`.
    `reward` is a float32 scalar, zero after `reset`.

    **Observations.** The `action_mask` field of a Jumanji observation becomes
    `TimeStep.action_mask` (bool `[num_actions]`) and leaves the observation. The
    other fields become a dict `{field_name: array}` with a
    [`Dict`][eqxrl.envs.Dict] observation space (nested NamedTuples become nested
    dicts); a single remaining field (or an observation that is one array) is that
    array with its space. Specs convert as:

    - `DiscreteArray` to [`Discrete`][eqxrl.envs.Discrete], the value as int32;
    - `BoundedArray` and `Array` to a float32 [`Box`][eqxrl.envs.Box] with the spec's
      bounds (infinite without them). Integer and boolean arrays (boards, grids,
      counters) are cast to float32 as well, since `Box` is float32 only.

    **Actions.** `DiscreteArray` becomes `Discrete`. A `MultiDiscreteArray` (e.g.
    Minesweeper's row and column, Tetris's rotation and column) becomes one
    `Discrete(prod(num_values))`: action `i` is the combination
    `jnp.unravel_index(i, num_values)` (row-major), and the mask is Jumanji's joint
    mask flattened the same way. This needs a joint mask of shape `num_values` (or
    no mask); the per-component masks of Jumanji's multi-agent environments (one
    row per agent) are refused, since the valid combinations cannot be recovered
    from them in general. Float `BoundedArray` / `Array` actions become a `Box`.
    Other action specs (integer arrays that are not `MultiDiscreteArray`, nested
    actions) are refused with a `ValueError`, as are environments with a reward
    or discount per agent.

    Jumanji's `extras` are dropped (their structure may differ between `reset` and
    `step`). `render` is not implemented: Jumanji draws with matplotlib on the host.

    **Arguments:**

    - `jumanji_env`: the Jumanji `Environment` (not wrapped in Jumanji's
      `AutoResetWrapper` or `VmapWrapper`: eqxrl batches and resets itself). It is
      a static field: the environment hashes by identity.
    """

    jumanji_env: Any = eqx.field(static=True)

    def __check_init__(self):
        specs = _jumanji().specs
        env = self.jumanji_env
        if not isinstance(env, _jumanji().env.Environment):
            raise TypeError(
                f"FromJumanji: expected a jumanji Environment, got "
                f"{type(env).__name__}; `from_jumanji(name)` builds one by name."
            )
        inner = env
        while isinstance(inner, _jumanji().wrappers.Wrapper):
            if type(inner).__name__ in _BATCHING_WRAPPERS:
                raise ValueError(
                    f"FromJumanji: the environment is wrapped in Jumanji's "
                    f"{type(inner).__name__}; pass it without (eqxrl's algorithms "
                    "vmap and auto-reset environments themselves)."
                )
            # Jumanji's wrappers expose only the innermost environment
            # (`unwrapped`); the chain between is their `_env`.
            inner = inner._env
        for what in ("reward_spec", "discount_spec"):
            spec = _spec(env, what)
            if isinstance(spec, specs.Array) and spec.shape != ():
                raise ValueError(
                    f"FromJumanji: {type(env.unwrapped).__name__}'s {what} has shape "
                    f"{spec.shape}, one value per agent; eqxrl converts "
                    "single-agent Jumanji environments (scalar reward and discount)."
                )
        fields = _observation_fields(_spec(env, "observation_spec"))
        if fields == ():
            raise ValueError(
                f"FromJumanji: {type(env.unwrapped).__name__}'s observation has only "
                "an action_mask; there is nothing left to observe."
            )
        self.observation_space  # noqa: B018  (unsupported specs raise here)
        self.action_space  # noqa: B018

    @property
    def observation_space(self) -> AbstractSpace:
        spec = _spec(self.jumanji_env, "observation_spec")
        fields = _observation_fields(spec)
        if fields is None:
            return _space_from_spec(spec, "observation")
        children = _children(spec)
        if len(fields) == 1:
            (name,) = fields
            return _space_from_spec(children[name], f"observation.{name}")
        return Dict(
            {
                name: _space_from_spec(children[name], f"observation.{name}")
                for name in fields
            }
        )

    @property
    def action_space(self) -> AbstractSpace:
        return _action_space_from_spec(self.jumanji_env)

    def _observation(self, observation: Any) -> PyTree[Array]:
        space = self.observation_space
        fields = _observation_fields(_spec(self.jumanji_env, "observation_spec"))
        if fields is not None and len(fields) == 1:
            observation = _field(observation, fields[0])
        elif fields is not None:
            observation = {name: _field(observation, name) for name in fields}
        return _convert(observation, space)

    def _action_mask(self, observation: Any) -> Bool[Array, " num_actions"] | None:
        if _mask_spec(self.jumanji_env) is None:
            return None
        return jnp.reshape(jnp.asarray(_field(observation, _MASK), jnp.bool_), (-1,))

    def _timestep(self, jumanji_timestep: Any, first: bool) -> TimeStep:
        last = _scalar(jumanji_timestep.step_type, jnp.int32) == 2  # StepType.LAST
        ended_at_zero = _scalar(jumanji_timestep.discount, jnp.float32) == 0.0
        observation = jumanji_timestep.observation
        return TimeStep(
            observation=self._observation(observation),
            reward=(
                jnp.float32(0.0)
                if first
                else _scalar(jumanji_timestep.reward, jnp.float32)
            ),
            terminated=jnp.bool_(False) if first else last & ended_at_zero,
            truncated=jnp.bool_(False) if first else last & ~ended_at_zero,
            action_mask=self._action_mask(observation),
        )

    def reset(self, key: PRNGKeyArray) -> tuple[PyTree, TimeStep]:
        state, jumanji_timestep = self.jumanji_env.reset(legacy_key(key))
        return strongly_typed(state), self._timestep(jumanji_timestep, first=True)

    def step(
        self, state: PyTree, action: Array, key: PRNGKeyArray
    ) -> tuple[PyTree, TimeStep]:
        del key  # Jumanji's step is deterministic given the state
        space = self.action_space
        spec = _spec(self.jumanji_env, "action_spec")
        action = check_action(space, action, "FromJumanji.step")
        num_values = _multi_discrete_values(self.jumanji_env)
        if num_values is not None:
            components = jnp.unravel_index(jnp.asarray(action), num_values)
            action = jnp.reshape(jnp.stack(components), spec.shape)
        action = jnp.asarray(action).astype(spec.dtype)
        state, jumanji_timestep = self.jumanji_env.step(state, action)
        return strongly_typed(state), self._timestep(jumanji_timestep, first=False)


def from_jumanji(env: Any, **make_kwargs: Any) -> FromJumanji:
    """Use a [Jumanji](https://github.com/instadeepai/jumanji) environment as an
    eqxrl environment (one environment, pure, no auto-reset), e.g. to train masked
    [`PPO`][eqxrl.PPO] on it.

    Jumanji's `action_mask` becomes `TimeStep.action_mask`, the other observation
    fields a dict observation; a last step with `discount == 0` is `terminated`,
    one with a nonzero discount `truncated`. See
    [`FromJumanji`][eqxrl.envs.FromJumanji] for every conversion rule.

    **Arguments:**

    - `env`: a Jumanji `Environment`, or the name of a registered one (e.g.
      `"Snake-v1"`), which is built with `jumanji.make(env, **make_kwargs)`.
    - `make_kwargs`: keyword arguments of the environment's constructor (e.g.
      `num_rows=6, num_cols=6` for Snake), only with a name.

    **Returns:**

    A [`FromJumanji`][eqxrl.envs.FromJumanji] environment.

    **Raises:**

    `ValueError` naming the spec for an environment eqxrl cannot represent (see
    `FromJumanji`), `ImportError` without jumanji installed.

    !!! example

        ```python
        env = eqxrl.envs.from_jumanji("Snake-v1", num_rows=6, num_cols=6)
        env.observation_space  # Dict(grid=Box [6, 6, 5], step_count=Discrete(4000))
        ppo = eqxrl.PPO(env=env, total_timesteps=500_000)
        state, metrics = ppo.train(jax.random.key(0))
        ```
    """
    jumanji = _jumanji()
    env = make_by_name("from_jumanji", "Jumanji", jumanji.make, env, make_kwargs)
    return FromJumanji(env)
