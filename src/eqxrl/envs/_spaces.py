import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray, PyTree


class AbstractSpace(eqx.Module):
    """The set of valid observations or actions of an environment."""

    @property
    @abc.abstractmethod
    def shape(self) -> tuple[int, ...]:
        """Shape of one element."""

    @property
    @abc.abstractmethod
    def dtype(self) -> jnp.dtype:
        """Dtype of one element."""

    @abc.abstractmethod
    def sample(self, key: PRNGKeyArray) -> PyTree[Array]:
        """A uniformly random element."""

    @abc.abstractmethod
    def contains(self, value: ArrayLike) -> Bool[Array, ""]:
        """Whether `value` (of the right shape) lies in the space."""


class Discrete(AbstractSpace):
    """The integers `0, 1, ..., num_values - 1`, as int32 scalars.

    **Arguments:**

    - `num_values`: how many values there are (at least 1).
    """

    num_values: int = eqx.field(static=True)

    def __check_init__(self):
        if self.num_values < 1:
            raise ValueError(
                f"Discrete(num_values={self.num_values}): num_values must be >= 1."
            )

    @property
    def shape(self) -> tuple[int, ...]:
        return ()

    @property
    def dtype(self) -> jnp.dtype:
        return jnp.dtype(jnp.int32)

    def sample(self, key: PRNGKeyArray) -> Int[Array, ""]:
        return jr.randint(key, (), 0, self.num_values, dtype=jnp.int32)

    def contains(self, value: ArrayLike) -> Bool[Array, ""]:
        value = jnp.asarray(value)
        return (value >= 0) & (value < self.num_values)


class Box(AbstractSpace):
    """A box `low <= x <= high` of float32 arrays (bounds may be infinite).

    **Arguments:**

    - `low`: lower bounds, broadcast to `shape`.
    - `high`: upper bounds, broadcast to `shape`.
    - `shape`: the shape of one element; defaults to the shape of `low`.
    """

    low: Float[Array, "..."]
    high: Float[Array, "..."]

    def __init__(
        self,
        low: Float[ArrayLike, "..."],
        high: Float[ArrayLike, "..."],
        shape: tuple[int, ...] | None = None,
    ):
        if shape is None:
            shape = np.broadcast_shapes(np.shape(low), np.shape(high))
        if not any(isinstance(bound, jax.core.Tracer) for bound in (low, high)):
            if np.any(np.asarray(low) > np.asarray(high)):
                raise ValueError(
                    f"Box(low={low}, high={high}): every entry of `low` must be "
                    "<= the matching entry of `high`."
                )
        self.low = jnp.broadcast_to(jnp.asarray(low, jnp.float32), shape)
        self.high = jnp.broadcast_to(jnp.asarray(high, jnp.float32), shape)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.low.shape

    @property
    def dtype(self) -> jnp.dtype:
        return jnp.dtype(jnp.float32)

    def sample(self, key: PRNGKeyArray) -> Float[Array, "..."]:
        """Uniform in the box; unbounded sides draw from a standard normal instead."""
        uniform_key, normal_key = jr.split(key)
        finite = jnp.isfinite(self.low) & jnp.isfinite(self.high)
        low = jnp.where(finite, self.low, 0.0)
        high = jnp.where(finite, self.high, 1.0)
        uniform = jr.uniform(uniform_key, self.shape, minval=low, maxval=high)
        normal = jnp.clip(jr.normal(normal_key, self.shape), self.low, self.high)
        return jnp.where(finite, uniform, normal)

    def contains(self, value: ArrayLike) -> Bool[Array, ""]:
        value = jnp.asarray(value)
        return jnp.all((value >= self.low) & (value <= self.high))


def _no_single(space: AbstractSpace, what: str) -> TypeError:
    return TypeError(
        f"{type(space).__name__} space has no single {what}: its elements are "
        "pytrees. Ask its parts (`space.spaces`), or "
        "`eqx.filter_eval_shape(space.sample, key)` for the shapes and dtypes of "
        "every leaf."
    )


def is_leaf_space(space: object) -> bool:
    """Whether `space` is an array space (not a `Dict` or `Tuple` of spaces): the
    `is_leaf` for `jax.tree` functions over a structured space."""
    return isinstance(space, AbstractSpace) and not isinstance(space, Dict | Tuple)


class Dict(AbstractSpace):
    """Observations (or actions) that are dicts of arrays, one space per key.

    An element is a `dict` with the same keys; its leaves come in the order of
    `jax.tree.leaves` (sorted keys), as do the leaves of the space
    (`jax.tree.leaves(space, is_leaf=...)`). The default networks encode each
    leaf by its kind (see [`ObservationEncoder`][eqxrl.nn.ObservationEncoder]).
    `shape` and `dtype` raise `TypeError`: each part has its own.

    **Arguments:**

    - `spaces`: a mapping from string keys to spaces (`Box`, `Discrete`, or further
      `Dict` / `Tuple`); keyword arguments are added to it.

    !!! example

        ```python
        space = eqxrl.envs.Dict(
            {"state": eqxrl.envs.Box(-1.0, 1.0, (4,)), "goal": eqxrl.envs.Discrete(3)}
        )
        observation = space.sample(jax.random.key(0))  # {"goal": ..., "state": ...}
        ```
    """

    spaces: dict[str, AbstractSpace]

    def __init__(
        self,
        spaces: "dict[str, AbstractSpace] | None" = None,
        **more_spaces: AbstractSpace,
    ):
        merged = dict(spaces or {})
        merged.update(more_spaces)
        if not merged:
            raise ValueError("Dict(): give at least one space.")
        for name, space in merged.items():
            if not isinstance(name, str):
                raise TypeError(f"Dict: keys must be strings, got {name!r}.")
            if not isinstance(space, AbstractSpace):
                raise TypeError(
                    f"Dict: {name!r} maps to a {type(space).__name__}, not an "
                    "eqxrl space (Box, Discrete, Dict or Tuple)."
                )
        self.spaces = {name: merged[name] for name in sorted(merged)}

    def __getitem__(self, name: str) -> AbstractSpace:
        return self.spaces[name]

    def keys(self) -> list[str]:
        """The keys, sorted (the order of the element's leaves)."""
        return list(self.spaces)

    def subset(self, names: "tuple[str, ...] | list[str]") -> "Dict":
        """The space of the same dicts restricted to `names`.

        Raises `KeyError` naming the keys that exist when a name is missing.
        """
        missing = [name for name in names if name not in self.spaces]
        if missing:
            raise KeyError(
                f"Dict space has no key(s) {missing}; its keys are {self.keys()}."
            )
        return Dict({name: self.spaces[name] for name in names})

    @property
    def shape(self) -> tuple[int, ...]:
        raise _no_single(self, "shape")

    @property
    def dtype(self) -> jnp.dtype:
        raise _no_single(self, "dtype")

    def sample(self, key: PRNGKeyArray) -> dict[str, PyTree[Array]]:
        keys = jr.split(key, len(self.spaces))
        return {
            name: space.sample(part_key)
            for (name, space), part_key in zip(self.spaces.items(), keys)
        }

    def contains(self, value: dict) -> Bool[Array, ""]:
        if not isinstance(value, dict) or set(value) != set(self.spaces):
            return jnp.bool_(False)
        return jnp.all(
            jnp.stack([space.contains(value[n]) for n, space in self.spaces.items()])
        )


class Tuple(AbstractSpace):
    """Observations (or actions) that are tuples of arrays, one space per position.

    Like [`Dict`][eqxrl.envs.Dict] with positions instead of keys.

    **Arguments:**

    - `spaces`: a sequence of spaces.
    """

    spaces: tuple[AbstractSpace, ...]

    def __init__(self, spaces: "tuple[AbstractSpace, ...] | list[AbstractSpace]"):
        spaces = tuple(spaces)
        if not spaces:
            raise ValueError("Tuple(): give at least one space.")
        for index, space in enumerate(spaces):
            if not isinstance(space, AbstractSpace):
                raise TypeError(
                    f"Tuple: entry {index} is a {type(space).__name__}, not an "
                    "eqxrl space (Box, Discrete, Dict or Tuple)."
                )
        self.spaces = spaces

    def __getitem__(self, index: int) -> AbstractSpace:
        return self.spaces[index]

    def __len__(self) -> int:
        return len(self.spaces)

    @property
    def shape(self) -> tuple[int, ...]:
        raise _no_single(self, "shape")

    @property
    def dtype(self) -> jnp.dtype:
        raise _no_single(self, "dtype")

    def sample(self, key: PRNGKeyArray) -> tuple[PyTree[Array], ...]:
        keys = jr.split(key, len(self.spaces))
        return tuple(space.sample(k) for space, k in zip(self.spaces, keys))

    def contains(self, value: tuple) -> Bool[Array, ""]:
        if not isinstance(value, tuple | list) or len(value) != len(self.spaces):
            return jnp.bool_(False)
        return jnp.all(
            jnp.stack([space.contains(v) for space, v in zip(self.spaces, value)])
        )
