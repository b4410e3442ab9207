"""Checks of what environments are given and what they return: actions in range, and
the contract between `reset`, `step` and the spaces."""

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np
from jaxtyping import Array, ArrayLike, Int, PyTree

from .._shape_memo import memoized_on_shapes
from ._environment import (
    GLOBAL_STATE,
    AbstractEnvironment,
    AbstractWrapper,
    global_state_space_of,
    num_agents_of,
)
from ._spaces import AbstractSpace, Discrete
from ._types import TimeStep

_SKIP_ACTION_CHECKS: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "eqxrl_skip_action_checks", default=False
)


@contextlib.contextmanager
def skip_action_checks() -> Iterator[None]:
    """Trace-time: environments traced inside skip
    [`check_action`][eqxrl.envs.check_action].

    For code whose actions are valid by construction. PPO, DQN and IQN trace their
    rollouts inside it: their policies sample from distributions over exactly the
    action space (checked when the algorithm is built), so the check would only
    add a conditional to every step.

    !!! example

        ```python
        with eqxrl.envs.skip_action_checks():
            state, timestep = jax.jit(env.step)(state, action, key)  # traced here
        ```
    """
    token = _SKIP_ACTION_CHECKS.set(True)
    try:
        yield
    finally:
        _SKIP_ACTION_CHECKS.reset(token)


def check_action(
    space: AbstractSpace, action: Int[ArrayLike, "*num_agents"], where: str
) -> Int[ArrayLike, "*num_agents"]:
    """`action`, after checking that it lies in a `Discrete` action space.

    The built-in environments call it at the start of `step`, so that an action such
    as 7 or -1 is an error instead of being read as some valid action. A concrete
    action that is out of range raises a `ValueError` at once; a traced one (inside
    `jit` or `vmap`) goes through `eqx.error_if`, which raises when the compiled
    program runs. Inside [`skip_action_checks`][eqxrl.envs.skip_action_checks] and
    for spaces other than `Discrete`, `action` is returned unchecked.

    **Arguments:**

    - `space`: the environment's action space.
    - `action`: the action given to `step`: a scalar, or one action per agent
      (`[num_agents]`) in a multi-agent environment (every entry is checked).
    - `where`: the caller, for the message (e.g. `"CartPole.step"`).

    **Returns:**

    `action` (through `eqx.error_if` when traced: use the returned value).
    """
    if _SKIP_ACTION_CHECKS.get() or not isinstance(space, Discrete):
        return action
    valid = f"valid actions are the integers 0 to {space.num_values - 1}"
    if not isinstance(action, jax.core.Tracer):
        value = np.asarray(action)
        outside = (value < 0) | (value >= space.num_values)
        if value.size == 1 and outside.any():
            raise ValueError(
                f"{where}: action {value.item()} is outside the action space "
                f"Discrete({space.num_values}); {valid}."
            )
        if outside.any():
            index = tuple(int(i) for i in np.argwhere(outside)[0])
            raise ValueError(
                f"{where}: action {value[index].item()} (at index "
                f"{index[0] if len(index) == 1 else index} of actions "
                f"{value.tolist()}) is outside the action space "
                f"Discrete({space.num_values}); {valid}."
            )
        return action
    action = jnp.asarray(action)
    return eqx.error_if(
        action,
        (action < 0) | (action >= space.num_values),
        f"{where}: an action is outside the action space Discrete("
        f"{space.num_values}); {valid}.",
    )


def describe(env: AbstractEnvironment) -> str:
    """`TimeLimit(CartPole)`: the chain of wrappers by class name."""
    if isinstance(env, AbstractWrapper):
        return f"{type(env).__name__}({describe(env.env)})"
    return type(env).__name__


def _shape_text(leaf: Any) -> str:
    if leaf is None:
        return "None"
    return f"{leaf.dtype}{list(leaf.shape)}"


def _action_like(space: AbstractSpace, num_agents: int | None) -> Any:
    if num_agents is None:
        return eqx.filter_eval_shape(space.sample, jr.key(0))
    return eqx.filter_eval_shape(
        jax.vmap(space.sample), jr.split(jr.key(0), num_agents)
    )


@memoized_on_shapes
def check_environment(env: AbstractEnvironment) -> None:
    """Check that an environment keeps the contract the algorithms rely on, without
    running it (shapes and dtypes only, with `eqx.filter_eval_shape`).

    - `reset(key)` and `step(state, action, key)` return a state and a
      [`TimeStep`][eqxrl.envs.TimeStep];
    - both return states of the same structure, shapes and dtypes, and TimeSteps
      of the same structure, shapes and dtypes (`extras` keys included), so that
      `(state, timestep)` can be carried through `lax.scan`;
    - the observation has the shape of `observation_space`;
    - the reward is a scalar, and `terminated` and `truncated` are scalars;
    - with a `Discrete(n)` action space, the action mask is `None` or bool `[n]`.

    A multi-agent environment
    ([`num_agents_of`][eqxrl.envs.num_agents_of] is not `None`) is stepped with one
    action per agent, and its observation leaves, reward and action mask must have a
    leading `num_agents` axis (the spaces describe one agent); `terminated` and
    `truncated` stay scalars. One that declares a global state
    ([`global_state_space_of`][eqxrl.envs.global_state_space_of] is not `None`) puts
    it in `timestep.extras["global_state"]`, float32 of that space's shape (no
    agent axis); an environment that declares none does not use that key.

    PPO, DQN and IQN call it when they are built. A check that passed is
    remembered by what it depends on (the environment's structure, static fields
    and arrays' shapes and dtypes, never their values), so checking an environment
    of the same shapes again costs no trace.

    **Arguments:**

    - `env`: the environment (wrapped or not).

    **Raises:**

    `ValueError` naming the method, the field and both shapes.

    !!! example

        ```python
        eqxrl.envs.check_environment(MyEnvironment())
        ```
    """
    name = describe(env)
    num_agents = num_agents_of(env)
    key = jr.key(0)
    reset_output = eqx.filter_eval_shape(env.reset, key)
    _check_output(name, "reset", reset_output)
    reset_state, reset_timestep = reset_output
    step_output = eqx.filter_eval_shape(
        env.step, reset_state, _action_like(env.action_space, num_agents), key
    )
    _check_output(name, "step", step_output)
    step_state, step_timestep = step_output

    _compare(name, "state", reset_state, step_state)
    for field in ("observation", "reward", "terminated", "truncated", "action_mask"):
        _compare(
            name,
            f"timestep.{field}",
            getattr(reset_timestep, field),
            getattr(step_timestep, field),
        )
    reset_extras = sorted(reset_timestep.extras)
    step_extras = sorted(step_timestep.extras)
    if reset_extras != step_extras:
        raise ValueError(
            f"{name}: reset returns timestep.extras with keys {reset_extras} but step "
            f"returns {step_extras}; return the same keys from both (e.g. zeros "
            "from reset), so that (state, timestep) can be carried through a scan."
        )
    for extra in reset_extras:
        _compare(
            name,
            f"timestep.extras[{extra!r}]",
            reset_timestep.extras[extra],
            step_timestep.extras[extra],
        )

    agents = () if num_agents is None else (num_agents,)
    per_agent = "" if num_agents is None else f" with {num_agents} agents"
    _check_observation_shapes(
        name, env.observation_space, reset_timestep.observation, agents
    )
    for field, want in (("reward", agents), ("terminated", ()), ("truncated", ())):
        got = getattr(reset_timestep, field)
        if tuple(got.shape) == want:
            continue
        if want:
            rule = f"a vector {list(want)}, one reward per agent"
        elif num_agents is not None:
            rule = "a scalar (the episode ends for every agent at once)"
        else:
            rule = "a scalar"
        raise ValueError(
            f"{name}: timestep.{field} is {_shape_text(got)} but must be {rule}."
        )
    _check_global_state(name, global_state_space_of(env), reset_timestep.extras)
    mask = reset_timestep.action_mask
    actions = env.action_space
    if mask is not None and isinstance(actions, Discrete):
        want = (*agents, actions.num_values)
        if tuple(mask.shape) != want or mask.dtype != jnp.bool_:
            raise ValueError(
                f"{name}: timestep.action_mask is {_shape_text(mask)} but the action "
                f"space is Discrete({actions.num_values}){per_agent}, which needs "
                f"bool{list(want)} (True where an action is valid)."
            )


def _check_global_state(name: str, space: Any, extras: dict[str, Any]) -> None:
    """The global state's extras entry agrees with the declared space."""
    global_state = extras.get(GLOBAL_STATE)
    if space is None:
        if global_state is not None:
            raise ValueError(
                f"{name}: timestep.extras[{GLOBAL_STATE!r}] is set but the "
                "environment declares no global_state_space; declare it (a property "
                "returning a Box of the global state's shape) or use another key."
            )
        return
    if global_state is None:
        raise ValueError(
            f"{name}: global_state_space is {space} but reset returns no "
            f"timestep.extras[{GLOBAL_STATE!r}]; put the global state there in "
            "reset and step."
        )
    want = tuple(space.shape)
    if tuple(global_state.shape) != want or global_state.dtype != jnp.float32:
        raise ValueError(
            f"{name}: timestep.extras[{GLOBAL_STATE!r}] is "
            f"{_shape_text(global_state)} but global_state_space needs "
            f"float32{list(want)}: one global state for the whole world, with no "
            "agent axis."
        )


def _check_observation_shapes(
    name: str,
    space: AbstractSpace,
    observation: PyTree,
    agents: tuple[int, ...] = (),
) -> None:
    """The observation has the structure and leaf shapes of the space's elements,
    after a leading agent axis `agents` (`()` for one agent)."""
    expected = eqx.filter_eval_shape(space.sample, jr.key(0))
    if jax.tree.structure(expected) != jax.tree.structure(observation):
        raise ValueError(
            f"{name}: reset and step return observations structured as "
            f"{_structure_text(observation)} but observation_space "
            f"({type(space).__name__}) describes {_structure_text(expected)}; make "
            "them agree."
        )
    paths_and_leaves = jax.tree_util.tree_flatten_with_path(expected)[0]
    for (path, want), got in zip(paths_and_leaves, jax.tree.leaves(observation)):
        if tuple(got.shape) != (*agents, *want.shape):
            where = "observations" + jax.tree_util.keystr(path)
            if agents:
                raise ValueError(
                    f"{name}: reset and step return {where} of shape "
                    f"{tuple(got.shape)} but with {agents[0]} agents and "
                    f"observation_space of shape {tuple(want.shape)} (one agent) "
                    f"it must be {(*agents, *want.shape)}; make them agree."
                )
            raise ValueError(
                f"{name}: reset and step return {where} of shape "
                f"{tuple(got.shape)} but observation_space has shape "
                f"{tuple(want.shape)} there; make them agree."
            )


def _check_output(name: str, method: str, output: Any) -> None:
    if (
        not isinstance(output, tuple)
        or len(output) != 2
        or not isinstance(output[1], TimeStep)
    ):
        raise ValueError(
            f"{name}.{method} must return (state, TimeStep), got "
            f"{type(output).__name__}"
            + (
                f" of {', '.join(type(item).__name__ for item in output)}"
                if isinstance(output, tuple)
                else ""
            )
            + "."
        )


def _compare(name: str, what: str, from_reset: Any, from_step: Any) -> None:
    """Same structure, shapes and dtypes, or a ValueError saying where they differ."""
    reset_leaves, reset_structure = jtu.tree_flatten_with_path(
        from_reset, is_leaf=lambda x: x is None
    )
    step_leaves, step_structure = jtu.tree_flatten_with_path(
        from_step, is_leaf=lambda x: x is None
    )
    if reset_structure != step_structure:
        raise ValueError(
            f"{name}: reset and step return {what} of different structures "
            f"({_structure_text(from_reset)} from reset, {_structure_text(from_step)} "
            "from step); return the same structure from both."
        )
    for (path, a), (_, b) in zip(reset_leaves, step_leaves):
        if (a is None) != (b is None) or (
            a is not None and (tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype)
        ):
            where = what + jtu.keystr(path)
            raise ValueError(
                f"{name}: reset returns {where} as {_shape_text(a)} but step returns "
                f"{_shape_text(b)}; return the same shape and dtype from both, so "
                "that (state, timestep) can be carried through a scan."
            )


def _structure_text(tree: Any) -> str:
    if tree is None or isinstance(tree, jax.ShapeDtypeStruct | Array):
        return _shape_text(tree)
    return str(jtu.tree_structure(tree, is_leaf=lambda x: x is None))
