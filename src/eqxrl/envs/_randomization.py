"""Domain randomization: physical parameters sampled per environment and per
episode, inside the compiled training loop."""

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
from jaxtyping import Array, Float, PRNGKeyArray, PyTree, Shaped

from .._random import split
from ._environment import ENV_METRICS, AbstractEnvironment, AbstractWrapper, unwrap
from ._types import TimeStep

PARAMETER_METRIC_PREFIX = "domain_parameters/"


class DomainRandomizationState(eqx.Module):
    """State of [`DomainRandomization`][eqxrl.envs.DomainRandomization]: the wrapped
    environment's state and the parameters of the running episode.

    **Arguments:**

    - `env_state`: the wrapped environment's state.
    - `parameters`: what `sample_fn` returned at the episode's reset (a dict from
      field names to values with the default `apply_fn`), one per environment.
    """

    env_state: PyTree
    parameters: PyTree[Shaped[Array, "..."]]


def array_fields(env: AbstractEnvironment) -> dict[str, Array]:
    """The array fields of the innermost environment of `env` (e.g. CartPole's
    physics constants), by name."""
    inner = unwrap(env)[-1]
    fields = {}
    for field in dataclasses.fields(inner):
        value = getattr(inner, field.name, None)
        if eqx.is_array(value):
            fields[field.name] = value
    return fields


def replace_innermost(
    env: AbstractEnvironment, inner: AbstractEnvironment
) -> AbstractEnvironment:
    """`env` with its innermost environment replaced by `inner` (the wrappers in
    between are kept)."""
    if unwrap(env)[-1] is env:
        return inner
    return eqx.tree_at(lambda chain: unwrap(chain)[-1], env, inner)


def _check_field_parameters(env: AbstractEnvironment, parameters: Any) -> None:
    """Check that `parameters` (shapes) name array fields of the innermost
    environment of `env`, with their shapes; a `ValueError` saying how to fix it."""
    inner = type(unwrap(env)[-1]).__name__
    fields = array_fields(env)
    listed = ", ".join(sorted(fields)) or "none"
    if not isinstance(parameters, Mapping) or not parameters:
        raise ValueError(
            f"DomainRandomization: sample_fn returned {type(parameters).__name__} "
            f"{parameters!r}; without an apply_fn it must return a non-empty dict "
            f"from names of array fields of {inner} to values (its array fields: "
            f"{listed}), e.g. {{'gravity': jax.random.uniform(key, (), "
            "minval=8.0, maxval=12.0)}. To randomize anything else, pass "
            "apply_fn(env, parameters) -> env."
        )
    for name, value in parameters.items():
        if name not in fields:
            raise ValueError(
                f"DomainRandomization: sample_fn returns {name!r}, which is not an "
                f"array field of {inner}; its array fields are: {listed}. Rename "
                "the entry, or pass apply_fn(env, parameters) -> env to apply it "
                "yourself."
            )
        expected = jnp.shape(fields[name])
        if tuple(value.shape) != tuple(expected):
            raise ValueError(
                f"DomainRandomization: sample_fn returns {name!r} of shape "
                f"{tuple(value.shape)}, but {inner}.{name} has shape "
                f"{tuple(expected)}. sample_fn draws the parameters of one "
                "environment (it is vmapped over environments): return one value "
                "of the field's shape."
            )


def _apply_fields(
    env: AbstractEnvironment, parameters: Mapping[str, Array]
) -> AbstractEnvironment:
    """The default `apply_fn`: set array fields of the innermost environment."""
    inner = unwrap(env)[-1]
    names = sorted(parameters)
    values = [
        jnp.asarray(parameters[name]).astype(jnp.result_type(getattr(inner, name)))
        for name in names
    ]
    inner = eqx.tree_at(lambda e: [getattr(e, name) for name in names], inner, values)
    return replace_innermost(env, inner)


def _key_name(key: Any) -> str:
    for attribute in ("name", "key", "idx"):
        if hasattr(key, attribute):
            return str(getattr(key, attribute))
    return str(key)


def path_name(path: tuple) -> str:
    """A pytree path as a dotted name (`geom_friction`, `actuator.gain`)."""
    return ".".join(_key_name(key) for key in path) or "value"


def parameter_metrics(parameters: PyTree[Array]) -> dict[str, Float[Array, ""]]:
    """The parameters as float32 scalars named
    `"domain_parameters/<flattened name>"` (the path of the leaf, joined with
    dots: `gravity`, `geom_friction`, ...); a leaf with several values gives its
    mean."""
    metrics = {}
    for path, leaf in jtu.tree_flatten_with_path(parameters)[0]:
        metrics[PARAMETER_METRIC_PREFIX + path_name(path)] = jnp.mean(
            jnp.asarray(leaf).astype(jnp.float32)
        )
    return metrics


class DomainRandomization(AbstractWrapper[DomainRandomizationState]):
    """Sample an environment's parameters (physics constants) at every reset, one
    draw per environment and per episode (or, with `per_episode=False`, one draw per
    environment for the whole run, as Brax's trainers do), and step with them.

    `reset(key)` splits the key, draws `parameters = sample_fn(key)`, applies them
    to the wrapped environment and resets it; the parameters stay in the state
    ([`DomainRandomizationState`][eqxrl.envs.DomainRandomizationState]) and every
    `step` applies them again. Inside [`AutoReset`][eqxrl.envs.AutoReset] (which is
    how [`PPO`][eqxrl.PPO] and the other algorithms step an environment:
    `PPO(env=DomainRandomization(CartPole(), sample_fn))`), every episode of every
    environment gets fresh parameters, inside the compiled loop: it is all `vmap`
    and `lax` code.

    The parameters are visible in the training metrics: every timestep's
    `extras["env_metrics"]` ([`ENV_METRICS`][eqxrl.envs.ENV_METRICS]) holds each
    one as a float32 scalar named `"domain_parameters/<name>"` (a parameter with
    several values gives its mean), from `reset` on; the algorithms average them
    over each iteration into their metrics under the same names. On the step where
    an episode ends, they are the ended episode's.

    With `per_episode=False`, an episode that [`AutoReset`][eqxrl.envs.AutoReset]
    starts after another keeps the ended episode's parameters
    ([`restart`][eqxrl.envs.AbstractEnvironment.restart] keeps them): each
    environment is drawn once, at its first reset, and trains on that draw for the
    whole run. That is what Brax's `DomainRandomizationVmapWrapper` does (its
    `randomization_fn` draws one system per environment before training). A fresh
    `reset` (a new run, an evaluation episode) always draws anew.

    To evaluate on parameters held out from training, evaluate
    [`with_sample_fn`][eqxrl.envs.DomainRandomization.with_sample_fn]`(held_out)`
    (see the example). Brax and MuJoCo Playground randomization functions are
    taken as they are by [`brax_randomization`][eqxrl.envs.brax_randomization].

    **Arguments:**

    - `env`: the environment to randomize (wrapped or not, e.g. `TimeLimit(...)`).
    - `sample_fn`: `sample_fn(key) -> parameters`, the parameters of one episode of
      one environment. With the default `apply_fn`, a dict from names of array
      fields of the innermost environment (e.g.
      [`CartPole`][eqxrl.envs.CartPole]'s `gravity`, `pole_mass`) to values of
      the fields' shapes; they are checked when the wrapper is built. A static
      field: a Python function.
    - `apply_fn`: optional `apply_fn(env, parameters) -> env`, the wrapped
      environment with the parameters applied, for anything that is not a plain
      field (e.g. a scale of several fields). By default, the dict's values replace
      the innermost environment's fields of those names.
    - `per_episode`: draw new parameters for every episode (`True`, the default),
      or once per environment, at its first reset, keeping them across the
      episodes `AutoReset` starts (`False`).

    !!! example

        ```python
        def sample_fn(key):
            gravity_key, mass_key = jax.random.split(key)
            return {
                "gravity": jax.random.uniform(gravity_key, (), minval=7.0, maxval=13.0),
                "pole_mass": jax.random.uniform(mass_key, (), minval=0.05, maxval=0.2),
            }

        env = eqxrl.envs.DomainRandomization(eqxrl.envs.make("CartPole-v1"), sample_fn)
        ppo = eqxrl.PPO(env=env, total_timesteps=100_000)
        state, metrics = ppo.train(jax.random.key(0))
        metrics["domain_parameters/gravity"]  # the mean gravity of each rollout

        # Held out: evaluate on heavier poles than any seen in training.
        def held_out(key):
            return {"pole_mass": jax.random.uniform(key, (), minval=0.3, maxval=0.5)}

        evaluation_env = env.with_sample_fn(held_out)
        policy = ppo.policy(state, deterministic=True)
        eqxrl.training.evaluate(policy, evaluation_env, jax.random.key(1))
        ```
    """

    env: AbstractEnvironment
    sample_fn: Callable[[PRNGKeyArray], PyTree] = eqx.field(static=True)
    apply_fn: Callable[[AbstractEnvironment, PyTree], AbstractEnvironment] | None = (
        eqx.field(static=True, default=None)
    )
    per_episode: bool = eqx.field(static=True, default=True)

    def __check_init__(self):
        if not callable(self.sample_fn):
            raise ValueError(
                f"DomainRandomization: sample_fn={self.sample_fn!r} is not callable; "
                "pass a function sample_fn(key) -> parameters."
            )
        if self.apply_fn is not None and not callable(self.apply_fn):
            raise ValueError(
                f"DomainRandomization: apply_fn={self.apply_fn!r} is not callable; "
                "pass a function apply_fn(env, parameters) -> env, or leave it out."
            )
        if self.apply_fn is None:
            _check_field_parameters(self.env, jax.eval_shape(self.sample_fn, jr.key(0)))

    def with_sample_fn(
        self, sample_fn: Callable[[PRNGKeyArray], PyTree]
    ) -> "DomainRandomization":
        """The same randomization with another sampler, e.g. a held-out range of
        parameters to evaluate on (`apply_fn` and the wrapped environment are
        kept).

        **Arguments:**

        - `sample_fn`: `sample_fn(key) -> parameters`, as for the constructor.

        **Returns:**

        A new [`DomainRandomization`][eqxrl.envs.DomainRandomization] (`apply_fn`
        and `per_episode` kept).
        """
        return DomainRandomization(self.env, sample_fn, self.apply_fn, self.per_episode)

    def sample(self, key: PRNGKeyArray) -> PyTree:
        """One draw of `sample_fn` (with the default `apply_fn`, each value cast to
        the dtype of the field it replaces)."""
        parameters = self.sample_fn(key)
        if self.apply_fn is None:
            fields = array_fields(self.env)
            parameters = {
                name: jnp.asarray(value).astype(jnp.result_type(fields[name]))
                for name, value in parameters.items()
            }
        return parameters

    def environment(self, parameters: PyTree) -> AbstractEnvironment:
        """The wrapped environment with `parameters` applied.

        **Arguments:**

        - `parameters`: what `sample_fn` returns.

        **Returns:**

        The wrapped environment, its parameters replaced.
        """
        if self.apply_fn is None:
            return _apply_fields(self.env, parameters)
        return self.apply_fn(self.env, parameters)

    def inner_state(self, state: DomainRandomizationState) -> PyTree:
        return state.env_state

    def render(self, state: DomainRandomizationState):
        """The wrapped environment's drawing, with the episode's parameters (a pole
        of a sampled length is drawn at that length)."""
        return self.environment(state.parameters).render(state.env_state)

    def reset(self, key: PRNGKeyArray) -> tuple[DomainRandomizationState, TimeStep]:
        sample_key, reset_key = split(key)
        parameters = self.sample(sample_key)
        env_state, timestep = self.environment(parameters).reset(reset_key)
        state = DomainRandomizationState(env_state, parameters)
        return state, _with_parameter_metrics(timestep, parameters)

    def restart(
        self, state: DomainRandomizationState, key: PRNGKeyArray
    ) -> tuple[DomainRandomizationState, TimeStep]:
        """A new episode after the one in `state`: with fresh parameters
        (`per_episode=True`), or with the ended episode's (`per_episode=False`)."""
        if self.per_episode:
            return super().restart(state, key)
        # The same key use as `reset`, so a run's episodes are drawn from the
        # same stream whichever way its parameters are kept.
        _, reset_key = split(key)
        env = self.environment(state.parameters)
        env_state, timestep = env.restart(state.env_state, reset_key)
        state = DomainRandomizationState(env_state, state.parameters)
        return state, _with_parameter_metrics(timestep, state.parameters)

    def step(
        self, state: DomainRandomizationState, action, key: PRNGKeyArray
    ) -> tuple[DomainRandomizationState, TimeStep]:
        env = self.environment(state.parameters)
        env_state, timestep = env.step(state.env_state, action, key)
        state = DomainRandomizationState(env_state, state.parameters)
        return state, _with_parameter_metrics(timestep, state.parameters)


def _with_parameter_metrics(timestep: TimeStep, parameters: PyTree) -> TimeStep:
    extras = dict(timestep.extras)
    extras[ENV_METRICS] = {
        **extras.get(ENV_METRICS, {}),
        **parameter_metrics(parameters),
    }
    return eqx.tree_at(lambda t: t.extras, timestep, extras)
