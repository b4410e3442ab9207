"""Brax and MuJoCo Playground domain randomization functions, as they are, for
[`DomainRandomization`][eqxrl.envs.DomainRandomization] around `from_brax`."""

import copy
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
from jaxtyping import Array, PRNGKeyArray

from .._environment import AbstractEnvironment, unwrap
from .._randomization import DomainRandomization, path_name, replace_innermost
from ._brax import FromBrax
from ._common import legacy_key

# Where the base environment keeps its system: Playground's `MjxEnv` its MJX model
# (`mjx_model` reads `_mjx_model`), Brax's `PipelineEnv` its `sys`.
_SYSTEM_ATTRIBUTES = ("_mjx_model", "sys")


def _base(brax_env: Any) -> Any:
    """The innermost object of a Brax / Playground wrapper chain (read through
    `vars`, since Brax's wrappers forward unknown attributes)."""
    while "env" in vars(brax_env):
        brax_env = vars(brax_env)["env"]
    return brax_env


def _system_attribute(brax_env: Any) -> str:
    base = _base(brax_env)
    for attribute in _SYSTEM_ATTRIBUTES:
        if attribute in vars(base):
            return attribute
    raise ValueError(
        f"brax_randomization: the Brax environment {type(base).__name__} has "
        "neither `sys` (a Brax PipelineEnv's system) nor `_mjx_model` (a MuJoCo "
        "Playground MjxEnv's model), which a randomization function takes."
    )


def _with_system(brax_env: Any, attribute: str, system: Any) -> Any:
    """A copy of the wrapper chain `brax_env` whose base holds `system` (what
    Brax's `DomainRandomizationVmapWrapper` does by assignment, without changing
    the environment it was given)."""
    new = copy.copy(brax_env)
    if "env" in vars(brax_env):
        vars(new)["env"] = _with_system(vars(brax_env)["env"], attribute, system)
    else:
        vars(new)[attribute] = system
    return new


def _take_first(batched: Any, in_axes: Any) -> dict[str, Array]:
    """Element 0 of every leaf of `batched` that `in_axes` (a prefix of it, `None`
    where nothing is batched) maps over, by dotted path."""

    def take(axis: int | None, subtree: Any) -> Any:
        if axis is None:
            return None
        return jtu.tree_map(lambda leaf: jnp.take(leaf, 0, axis=axis), subtree)

    taken = jtu.tree_map(take, in_axes, batched, is_leaf=lambda x: x is None)
    return {
        path_name(path): leaf for path, leaf in jtu.tree_flatten_with_path(taken)[0]
    }


def brax_randomization(
    env: AbstractEnvironment,
    randomization_fn: Callable[[Any, Array], Any],
    per_episode: bool = True,
) -> DomainRandomization:
    """Randomize a Brax or MuJoCo Playground environment with a randomization
    function written for Brax's trainers, as it is.

    Brax's `ppo.train(..., randomization_fn=...)` and Playground's
    `registry.get_domain_randomizer(name)` take
    `randomization_fn(sys, rng) -> (batched_sys, in_axes)`: the system (a Brax
    `System` or an MJX `Model`), a batch of keys, the system with one entry per key
    along `in_axes` on the leaves it randomizes. Here it is called with a batch of
    one key (uint32 words, as Brax keys are) at every reset of every environment,
    and element 0 along `in_axes` of each randomized leaf is kept in the state, so
    parameters are drawn per environment and per episode inside the compiled loop,
    or, with `per_episode=False`, once per environment for the whole run, as Brax's
    trainers draw them. Every step sets the
    system's leaves to those values (in a copy of the Brax environment: the one
    given is never changed).

    The randomized leaves are the parameters, named by their path in the system
    (`geom_friction`, `body_mass`, ...): `extras["env_metrics"]` holds the mean of
    each as `"domain_parameters/<name>"`, and PPO's metrics do.

    **Arguments:**

    - `env`: an environment made by [`from_brax`][eqxrl.envs.from_brax], possibly
      wrapped (e.g. in [`TimeLimit`][eqxrl.envs.TimeLimit]).
    - `randomization_fn`: `randomization_fn(sys, rng) -> (batched_sys, in_axes)`,
      as Brax and Playground define it.
    - `per_episode`: draw per episode (`True`, the default) or once per environment
      (`False`); see [`DomainRandomization`][eqxrl.envs.DomainRandomization].

    **Returns:**

    A [`DomainRandomization`][eqxrl.envs.DomainRandomization] around `env`.

    !!! example

        ```python
        from mujoco_playground import registry

        name = "Go1JoystickFlatTerrain"  # one of the tasks that ship a randomizer
        env = eqxrl.envs.TimeLimit(eqxrl.envs.from_brax(registry.load(name)), 1000)
        env = eqxrl.envs.brax_randomization(env, registry.get_domain_randomizer(name))
        ppo = eqxrl.PPO(env=env, total_timesteps=1_000_000)
        ```
    """
    inner = unwrap(env)[-1]
    if not isinstance(inner, FromBrax):
        raise ValueError(
            "brax_randomization: the innermost environment is "
            f"{type(inner).__name__}, not a FromBrax; build the environment with "
            "eqxrl.envs.from_brax(brax_env) (a Brax or Playground environment). For "
            "an eqxrl environment, use DomainRandomization(env, sample_fn) directly."
        )
    brax_env = inner.brax_env
    attribute = _system_attribute(brax_env)
    system = vars(_base(brax_env))[attribute]

    def sample_fn(key: PRNGKeyArray) -> dict[str, Array]:
        batched, in_axes = randomization_fn(system, legacy_key(key)[None])
        return _take_first(batched, in_axes)

    def apply_fn(
        env: AbstractEnvironment, parameters: dict[str, Array]
    ) -> AbstractEnvironment:
        leaves, treedef = jtu.tree_flatten_with_path(system)
        unknown = set(parameters) - {path_name(path) for path, _ in leaves}
        if unknown:
            raise ValueError(
                f"brax_randomization: the randomization function batches "
                f"{sorted(unknown)}, which are not leaves of the system."
            )
        leaves = [
            jnp.asarray(parameters[path_name(path)]).astype(jnp.result_type(leaf))
            if path_name(path) in parameters
            else leaf
            for path, leaf in leaves
        ]
        randomized = jtu.tree_unflatten(treedef, leaves)
        from_brax = unwrap(env)[-1]
        replaced = copy.copy(from_brax)
        object.__setattr__(
            replaced,
            "brax_env",
            _with_system(from_brax.brax_env, attribute, randomized),
        )
        return replace_innermost(env, replaced)

    jax.eval_shape(sample_fn, jax.random.key(0))  # a wrong function fails here
    return DomainRandomization(env, sample_fn, apply_fn, per_episode)
