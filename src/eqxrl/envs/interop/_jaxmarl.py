"""An adapter from JaxMARL's multi-agent environments to eqxrl's multi-agent
interface.

jaxmarl is not a dependency of eqxrl: this module imports it only when a JaxMARL
environment is converted (install `eqxrl[jaxmarl]`).
"""

import contextlib
import math
import numbers
import sys
import warnings
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np
from jaxtyping import (
    Array,
    ArrayLike,
    Bool,
    Float,
    Int,
    PRNGKeyArray,
    PyTree,
    Shaped,
)

from .._checks import _SKIP_ACTION_CHECKS, check_action
from .._environment import GLOBAL_STATE, AbstractMultiAgentEnvironment
from .._spaces import AbstractSpace, Box, Discrete
from .._types import TimeStep
from ._common import legacy_key, make_by_name, strongly_typed
from ._jaxmarl_info import _info_tree

# The key of JaxMARL's `dones` (and of some environments' rewards) for the whole
# episode rather than one agent.
_ALL = "__all__"

# Where the adapter puts JaxMARL's per-agent `dones` and its `infos` in
# `TimeStep.extras`; observation entries of no agent may not take these names.
_AGENT_DONES = "agent_dones"
_INFO = "info"

# The observation entry in which JaxMARL environments that have a world state (SMAX
# and its heuristic- and learned-enemy variants) return it, for centralized critics;
# JaxMARL's MAPPO baselines and `CTRolloutManager` read it there.
_WORLD_STATE = "world_state"


def _jaxmarl() -> ModuleType:
    # With brax installed, importing jaxmarl (its MABrax module) sets sys.stdout and
    # sys.stderr to the process's original streams, undoing any redirection the
    # caller had (a notebook's, pytest's): they are put back.
    streams = sys.stdout, sys.stderr
    try:
        with warnings.catch_warnings():
            # JaxMARL imports jaxopt, which warns on import that it is no longer
            # maintained; nothing an eqxrl user can act on.
            warnings.filterwarnings(
                "ignore", message="JAXopt is no longer maintained", category=Warning
            )
            import jaxmarl
            import jaxmarl.environments.multi_agent_env
            import jaxmarl.environments.spaces
    except ImportError:
        raise ImportError(
            "from_jaxmarl needs jaxmarl: `pip install 'eqxrl[jaxmarl]'`."
        ) from None
    finally:
        sys.stdout, sys.stderr = streams
    return jaxmarl


def _describe(space: Any) -> str:
    """A JaxMARL space in a line, for messages."""
    spaces = _jaxmarl().environments.spaces
    name = type(space).__name__
    if isinstance(space, spaces.Discrete):
        return f"Discrete({space.n})"
    if isinstance(space, spaces.Box):
        low, high = np.asarray(space.low), np.asarray(space.high)
        bounds = (
            f", low={low.item():g}, high={high.item():g}"
            if low.size == 1 and high.size == 1
            else ""
        )
        return f"Box(shape={_shape(space.shape)}{bounds})"
    if isinstance(space, spaces.MultiDiscrete):
        return f"MultiDiscrete({np.asarray(space.num_categories).tolist()})"
    return name


def _shape(shape: Any) -> tuple[int, ...]:
    """A JaxMARL space's shape as a tuple (Hanabi's `Box` has a bare int)."""
    if isinstance(shape, numbers.Integral):
        return (int(shape),)
    return tuple(int(n) for n in shape)


def _signature(space: Any) -> tuple:
    """What makes two JaxMARL spaces the same, as a hashable value."""
    spaces = _jaxmarl().environments.spaces
    if isinstance(space, spaces.Discrete):
        return ("Discrete", int(space.n))
    if isinstance(space, spaces.Box):
        low = np.asarray(space.low, np.float32)
        high = np.asarray(space.high, np.float32)
        return (
            "Box",
            _shape(space.shape),
            low.shape,
            low.tobytes(),
            high.shape,
            high.tobytes(),
        )
    return (type(space).__name__, id(space))


def _agent_groups(env: Any, signature: Callable[[str], Any]) -> list[list[str]]:
    """The agents grouped by `signature(agent)`, in the environment's order."""
    groups: dict[Any, list[str]] = {}
    for agent in env.agents:
        groups.setdefault(signature(agent), []).append(agent)
    return list(groups.values())


def _names(agents: list[str]) -> str:
    if len(agents) == 1:
        return agents[0]
    return ", ".join(agents[:-1]) + " and " + agents[-1]


def _groups_text(groups: list[tuple[list[str], str]]) -> str:
    """`agent_0 has X; agent_1 and agent_2 have Y`, for messages."""
    return "; ".join(
        f"{_names(agents)} {'has' if len(agents) == 1 else 'have'} {text}"
        for agents, text in groups
    )


def _bounds(
    space: Any, shape: tuple[int, ...], where: str
) -> tuple[np.ndarray, np.ndarray]:
    """A JaxMARL `Discrete` or `Box` space's bounds as float32 NumPy arrays of
    `shape` (a `Discrete(n)` space's values lie in 0 to n - 1). NumPy, so that they
    stay constants where a space is asked for inside a trace."""
    if isinstance(space, _jaxmarl().environments.spaces.Discrete):
        low = np.zeros(shape, np.float32)
        return low, np.full(shape, int(space.n) - 1, np.float32)
    try:
        low = np.broadcast_to(np.asarray(space.low, np.float32), shape)
        high = np.broadcast_to(np.asarray(space.high, np.float32), shape)
    except ValueError:
        raise ValueError(
            f"from_jaxmarl: {where} is {_describe(space)} with bounds of shape "
            f"{np.shape(space.low)} and {np.shape(space.high)}, which do not "
            f"broadcast to its values' shape {shape}."
        ) from None
    return low, high


def _hull(
    bounds: list[tuple[np.ndarray, np.ndarray]],
    shape: tuple[int, ...],
    padding: tuple[float, float],
) -> Box:
    """The smallest `Box` of `shape` holding every agent's bounds: the bounds as
    they are where every agent's have `shape`, else flattened and padded to its
    size with `padding`'s low and high."""
    lows, highs = [], []
    for low, high in bounds:
        if low.shape != shape:
            (size,) = shape
            low = np.pad(low.ravel(), (0, size - low.size), constant_values=padding[0])
            high = np.pad(
                high.ravel(), (0, size - high.size), constant_values=padding[1]
            )
        lows.append(low)
        highs.append(high)
    return Box(np.min(lows, axis=0), np.max(highs, axis=0))


@contextlib.contextmanager
def _jaxmarl_rules() -> Iterator[None]:
    """JAX's default promotion rules, under which JaxMARL's code is written (it
    broadcasts arrays of different ranks and mixes dtypes), whatever the caller set
    (eqxrl's tests raise on both)."""
    with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
        yield


def _mask_method(env: Any) -> Callable[[Any], dict[str, Array]] | None:
    """The environment's per-agent available actions: `get_avail_actions` where the
    environment implements it, else `get_legal_moves` (Hanabi), else `None`."""
    base = _jaxmarl().environments.multi_agent_env.MultiAgentEnv
    if type(env).get_avail_actions is not base.get_avail_actions:
        return env.get_avail_actions
    legal_moves = getattr(env, "get_legal_moves", None)
    return legal_moves if callable(legal_moves) else None


class FromJaxMARLState(eqx.Module):
    """The state of a [`FromJaxMARL`][eqxrl.envs.FromJaxMARL] environment.

    **Arguments:**

    - `env_state`: JaxMARL's state (e.g. MPE's `State`), its Python numbers made
      arrays.
    - `step_count`: int32 scalar, steps since `reset` (for the time-limit rule).
    """

    env_state: PyTree
    step_count: Int[Array, ""]


class FromJaxMARL(AbstractMultiAgentEnvironment[FromJaxMARLState]):
    """A [JaxMARL](https://github.com/FLAIROx/JaxMARL) environment as an eqxrl
    multi-agent environment; build it with
    [`from_jaxmarl`][eqxrl.envs.from_jaxmarl].

    JaxMARL's dicts keyed by agent become arrays stacked along a leading agent axis,
    in the environment's agent order (`jaxmarl_env.agents`, e.g. `agent_0, agent_1,
    agent_2` for MPE's simple spread; `num_agents` is their count):

    - **Observations**: `observations[agent]` stacked, `[num_agents, *shape]`,
      float32 for a `Box` space (integer grids such as Overcooked's are cast), int32
      for a `Discrete` one. Entries of JaxMARL's observation dict that belong to no
      agent go to `timestep.extras` under their name, except SMAX's `world_state`,
      which is the global state (below).
    - **Global state**: `timestep.extras["global_state"]`
      ([`GLOBAL_STATE`][eqxrl.envs.GLOBAL_STATE]), float32, flat, with no agent
      axis, described by `global_state_space`: JaxMARL's own world state where the
      environment returns one (the `world_state` observation entry of SMAX,
      `HeuristicEnemySMAX` and `LearnedPolicyEnemySMAX`, which JaxMARL's MAPPO
      baseline gives its critic: 72 numbers for SMAX's `3m`, unbounded), else the
      agents' observations flattened and concatenated in the agents' order, one
      copy (as JaxMARL's MAPPO `MPEWorldStateWrapper` builds it, without the
      padding below: 3 x 18 = 54 numbers for `MPE_simple_spread_v3`), bounded by
      the observations' bounds.
    - **Actions**: one per agent, `[num_agents]` int32 for `Discrete`,
      `[num_agents, *shape]` float32 for `Box` (MPE's continuous actions), passed
      to JaxMARL as `{agent: action[i]}`.
    - **Rewards**: `rewards[agent]` stacked, float32 `[num_agents]` (zeros after
      `reset`); an `"__all__"` reward (Hanabi's) is dropped.
    - **Action masks**: where the environment implements `get_avail_actions` (SMAX)
      or `get_legal_moves` (Hanabi), its masks of the new state, stacked, are
      `timestep.action_mask` (bool `[num_agents, num_actions]`, `True` where an
      action is available), with every agent's padding actions (below) `False`; a
      mask of padding actions alone where agents' action counts differ; otherwise
      `None`.
    - **Per-agent dones**: `dones[agent]` stacked, bool `[num_agents]`, in
      `timestep.extras["agent_dones"]` (all `False` after `reset`). An agent may be
      done before the episode ends (a dead SMAX unit); the episode's own end is
      `terminated`/`truncated` (below).
    - **Infos**: JaxMARL's `infos` dict, in `timestep.extras["info"]` with its own
      keys (e.g. Overcooked's `extras["info"]["shaped_reward"]`). A dict keyed by
      exactly the agents becomes an array stacked in the agents' order
      (`[num_agents, *shape]`), or stays a dict where the agents' values differ in
      shape or dtype; numbers and arrays become strongly typed arrays (an array
      with a leading agent axis, JaxNav's, is already in the agents' order);
      leaves that are neither (strings, objects) are dropped. After `reset` every
      leaf is zero: the structure comes from tracing one `step_env` abstractly
      (`jax.eval_shape`, which runs nothing), so `reset` and `step` return the same
      pytree, as a `lax.scan` and [`AutoReset`][eqxrl.envs.AutoReset] need.
    - **Spaces** describe one agent. `Discrete` and `Box` spaces convert (a `Box`
      to a float32 [`Box`][eqxrl.envs.Box] with JaxMARL's bounds, on the shape of
      the observations the environment really returns: Overcooked declares its
      height and width the other way round); other spaces (`MultiDiscrete`,
      `Dict`, `Tuple`) are refused by name.
    - **Agents that differ are padded** to the largest (`pad_agents=True`, the
      default), so that they stack on one axis, as JaxMARL's `CTRolloutManager`
      pads them:
        - `Box` observations of different shapes are flattened and padded with
          **zeros** to the largest size (`MPE_simple_adversary_v3`: the
          adversary's 8 entries, then 2 zeros, beside the good agents' 10); agents
          whose observations have one shape keep it;
        - `Discrete` actions of different counts become `Discrete` of the largest
          count, and an agent's padding actions (from its own count on) are
          `False` in its action mask (`MPE_simple_speaker_listener_v4`: the
          speaker's 3 of the listener's 5). Choosing one is refused as an
          out-of-range action is ([`check_action`][eqxrl.envs.check_action]): a
          `ValueError` at once, an `eqx.error_if` error in compiled code, unchecked
          inside [`skip_action_checks`][eqxrl.envs.skip_action_checks] (JaxMARL
          then gets the number as it is);
        - `Box` actions of different shapes become a flat `Box` of the largest
          size; each agent reads the first entries, shaped as its own space, and
          the rest is dropped;
        - the converted space holds every agent's: its bounds are the smallest that
          hold every agent's bounds (and the padding zeros), `Discrete`
          observations take the largest count;
        - a mix of `Discrete` and `Box` spaces among the agents cannot be padded:
          a `ValueError` names the agents and their spaces. With
          `pad_agents=False` every difference is refused that way.

    **Episode ends.** `reset(key)` calls JaxMARL's `reset`, and `step(state, action,
    key)` its `step_env`, which does not auto-reset (JaxMARL's `step` does):
    the state after the last step is the final state, and eqxrl's
    [`AutoReset`][eqxrl.envs.AutoReset] starts the next episode. `step` splits
    `key` as JaxMARL's `step` does and gives `step_env` the first half, so the same
    key gives the transition JaxMARL's `step` gives. A step ends the episode where
    JaxMARL's `dones["__all__"]` is true; JaxMARL has one flag for both kinds of
    ending, so eqxrl tells them apart by a step count: the ending is **truncated**
    when the episode has run at least `time_limit` steps (by default the
    environment's `max_steps`: MPE, SMAX, Overcooked, JaxNav) and **terminated**
    otherwise (a team wiped out, a Hanabi game over, every ending of an environment
    without `max_steps`). The counter is this adapter's own (`state.step_count`),
    since JaxMARL environments count steps differently. The rule is exact for
    environments whose only ending at that count is the time limit; an episode that
    ends for another reason from step `time_limit` on is truncated too (SMAX, whose
    limit ends episodes on step `max_steps + 1`, would call a battle decided on step
    `max_steps` truncated: pass `time_limit=env.max_steps + 1` there).

    JaxMARL's code runs under JAX's default promotion rules (rank promotion
    allowed, standard dtype promotion), which it is written for, whatever the
    caller's settings. Rendering is not implemented (JaxMARL draws with matplotlib
    on the host). JaxMARL's own wrappers (`LogWrapper`, ...) are refused: eqxrl's
    wrappers do their work.

    **Arguments:**

    - `jaxmarl_env`: the JaxMARL environment (a `MultiAgentEnv`). It is a static
      field: the environment hashes by identity.
    - `time_limit`: the step count from which an ending is a truncation, a Python
      int; `None` makes every ending a termination (as JaxMARL's baselines treat
      them); `"max_steps"` (the default) takes the environment's `max_steps` if it
      has one, else `None`.
    - `pad_agents`: whether agents whose spaces differ are padded to the largest
      (above), a Python bool; `False` refuses them.
    """

    jaxmarl_env: Any = eqx.field(static=True)
    time_limit: int | None = eqx.field(static=True)
    pad_agents: bool = eqx.field(static=True)
    # Each agent's observation shape as `reset` returns it, and the stacked
    # observations' shape per agent: the common shape, or the largest size where the
    # agents' shapes differ (flattened and zero-padded).
    _agent_observation_shapes: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    _observation_shape: tuple[int, ...] = eqx.field(static=True)
    # The global state's size, and whether it is JaxMARL's own world state (else the
    # agents' observations, concatenated).
    _global_state_size: int = eqx.field(static=True)
    _has_world_state: bool = eqx.field(static=True)

    def __init__(
        self,
        jaxmarl_env: Any,
        time_limit: int | None | Literal["max_steps"] = "max_steps",
        pad_agents: bool = True,
    ):
        jaxmarl = _jaxmarl()
        base = jaxmarl.environments.multi_agent_env.MultiAgentEnv
        if not isinstance(jaxmarl_env, base):
            hint = (
                "; it looks like one of JaxMARL's wrappers: pass the environment "
                "without it (eqxrl's AutoReset and EpisodeStatistics do their work)"
                if hasattr(jaxmarl_env, "_env")
                else "; `from_jaxmarl(name)` builds one by name"
            )
            raise TypeError(
                "FromJaxMARL: expected a jaxmarl MultiAgentEnv, got "
                f"{type(jaxmarl_env).__name__}{hint}."
            )
        if time_limit == "max_steps":
            max_steps = getattr(jaxmarl_env, "max_steps", None)
            is_count = isinstance(max_steps, numbers.Integral | np.integer)
            time_limit = int(max_steps) if is_count else None
        self.jaxmarl_env = jaxmarl_env
        self.time_limit = time_limit
        self.pad_agents = pad_agents
        (
            self._agent_observation_shapes,
            self._observation_shape,
            self._global_state_size,
            self._has_world_state,
        ) = self._check_spaces()

    def __check_init__(self):
        limit = self.time_limit
        if limit is not None and (
            not isinstance(limit, int) or isinstance(limit, bool) or limit < 1
        ):
            raise ValueError(
                f"FromJaxMARL: time_limit={limit!r} must be a positive int, None "
                "(every ending terminates) or 'max_steps' (the environment's)."
            )
        if not isinstance(self.pad_agents, bool):
            raise ValueError(
                f"FromJaxMARL: pad_agents={self.pad_agents!r} must be a bool."
            )

    @property
    def _env_name(self) -> str:
        return type(self.jaxmarl_env).__name__

    @property
    def num_agents(self) -> int:
        """How many agents act: `len(jaxmarl_env.agents)`."""
        return len(self.jaxmarl_env.agents)

    def _spaces(self, kind: str) -> list[Any]:
        """Every agent's JaxMARL `kind` ("observation" or "action") space, in the
        agents' order."""
        method = getattr(self.jaxmarl_env, f"{kind}_space")
        return [method(agent) for agent in self.jaxmarl_env.agents]

    def _check_spaces(
        self,
    ) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...], int, bool]:
        """Check that the agents' spaces convert and stack (the same, or paddable
        with `pad_agents`); return each agent's observation shape, the stacked
        observations' shape per agent, the global state's size and whether it is
        JaxMARL's world state."""
        env = self.jaxmarl_env
        spaces = _jaxmarl().environments.spaces
        if not env.agents:
            raise ValueError(f"FromJaxMARL: {self._env_name} has no agents.")
        for kind in ("observation", "action"):
            for agent, space in zip(env.agents, self._spaces(kind), strict=True):
                if not isinstance(space, spaces.Discrete | spaces.Box):
                    raise ValueError(
                        f"from_jaxmarl: {self._env_name}'s {kind} space of {agent} is "
                        f"{_describe(space)}, which eqxrl does not convert; eqxrl "
                        "converts Discrete and Box spaces."
                    )
            groups = _agent_groups(
                env, lambda agent: _signature(getattr(env, f"{kind}_space")(agent))
            )
            described = [
                (group, _describe(getattr(env, f"{kind}_space")(group[0])))
                for group in groups
            ]
            if len(groups) > 1 and not self.pad_agents:
                self._refuse_differing(f"{kind} space", described)
            kinds = {type(space) for space in self._spaces(kind)}
            if len(kinds) > 1:
                self._refuse_unpaddable(
                    f"{kind} space",
                    described,
                    "one agent's Discrete values and another's Box vectors have "
                    "no common space",
                )
        with _jaxmarl_rules():
            observations, _ = jax.eval_shape(env.reset, jr.key_data(jr.key(0)))
        missing = [agent for agent in env.agents if agent not in observations]
        if missing:
            raise ValueError(
                f"from_jaxmarl: {self._env_name}'s reset returns no observation for "
                f"{_names(missing)}."
            )
        reserved = {_AGENT_DONES, _INFO, GLOBAL_STATE}
        taken = sorted(reserved & (set(observations) - set(env.agents)))
        if taken:
            raise ValueError(
                f"from_jaxmarl: {self._env_name}'s observations have entries named "
                f"{taken}, the extras where the adapter keeps JaxMARL's per-agent "
                "dones, infos and the global state; rename them in the environment."
            )
        shapes = tuple(tuple(observations[agent].shape) for agent in env.agents)
        groups = _agent_groups(env, lambda agent: observations[agent].shape)
        if len(groups) > 1 and not self.pad_agents:
            self._refuse_differing(
                "observation shape",
                [(group, str(observations[group[0]].shape)) for group in groups],
            )
        space = env.observation_space(env.agents[0])
        if isinstance(space, spaces.Discrete) and shapes[0] != ():
            raise ValueError(
                f"from_jaxmarl: {self._env_name}'s observation space is "
                f"{_describe(space)} but its observations have shape {shapes[0]}."
            )
        if len(set(shapes)) == 1:
            shape = shapes[0]
        else:
            shape = (max(math.prod(shape) for shape in shapes),)
        world_state = observations.get(_WORLD_STATE)
        if world_state is not None:
            global_state_size = math.prod(world_state.shape)
        else:
            global_state_size = sum(math.prod(shape) for shape in shapes)
        return shapes, shape, global_state_size, world_state is not None

    def _refuse_differing(self, what: str, groups: list[tuple[list[str], str]]):
        raise ValueError(
            f"from_jaxmarl: {self._env_name}'s agents do not share one {what}: "
            f"{_groups_text(groups)}. "
            "With pad_agents=False eqxrl stacks the agents of an environment along "
            "one axis only where they share their observation and action spaces; "
            "the default pad_agents=True pads the smaller ones to the largest."
        )

    def _refuse_unpaddable(
        self, what: str, groups: list[tuple[list[str], str]], why: str
    ):
        raise ValueError(
            f"from_jaxmarl: {self._env_name}'s agents do not share one {what} and "
            f"cannot be padded to one: {_groups_text(groups)}; {why}. eqxrl stacks "
            "the agents of an environment along one axis: it pads Box "
            "observations and actions of different sizes and Discrete spaces of "
            "different counts, but not a mix of Discrete and Box spaces."
        )

    @property
    def _is_padded(self) -> bool:
        """Whether the agents' observations are flattened and zero-padded."""
        return any(
            shape != self._observation_shape for shape in self._agent_observation_shapes
        )

    @property
    def observation_space(self) -> AbstractSpace:
        """One agent's observations: every agent's where they share it; else
        (agents padded) `Discrete` of the largest count, or a flat `Box` of the
        largest size whose bounds hold every agent's values and the zeros of the
        padding."""
        spaces = self._spaces("observation")
        if isinstance(spaces[0], _jaxmarl().environments.spaces.Discrete):
            return Discrete(max(int(space.n) for space in spaces))
        bounds = [
            _bounds(space, shape, "the observation space")
            for space, shape in zip(spaces, self._agent_observation_shapes, strict=True)
        ]
        return _hull(bounds, self._observation_shape, padding=(0.0, 0.0))

    @property
    def action_space(self) -> AbstractSpace:
        """One agent's actions: every agent's where they share it; else (agents
        padded) `Discrete` of the largest count (the action mask marks each agent's
        padding actions invalid), or a flat `Box` of the largest size (an agent's
        padding entries are dropped) whose bounds hold every agent's."""
        spaces = self._spaces("action")
        if isinstance(spaces[0], _jaxmarl().environments.spaces.Discrete):
            return Discrete(max(self._action_counts))
        shapes = [_shape(space.shape) for space in spaces]
        bounds = [
            _bounds(space, shape, "the action space")
            for space, shape in zip(spaces, shapes, strict=True)
        ]
        shape = shapes[0] if len(set(shapes)) == 1 else (max(map(math.prod, shapes)),)
        # A padding entry is dropped, so it bounds nothing: the others' bounds hold.
        return _hull(bounds, shape, padding=(np.inf, -np.inf))

    @property
    def global_state_space(self) -> Box:
        """The global state in `timestep.extras["global_state"]`, a flat float32
        `Box`: JaxMARL's world state where the environment has one (SMAX's
        `world_state`, unbounded), else the agents' observations concatenated in
        their order, with their bounds."""
        size = self._global_state_size
        if self._has_world_state:
            return Box(-jnp.inf, jnp.inf, (size,))
        bounds = [
            _bounds(space, shape, "the observation space")
            for space, shape in zip(
                self._spaces("observation"), self._agent_observation_shapes, strict=True
            )
        ]
        low = np.concatenate([low.ravel() for low, _ in bounds])
        high = np.concatenate([high.ravel() for _, high in bounds])
        return Box(low, high)

    @property
    def _action_counts(self) -> tuple[int, ...]:
        """Each agent's number of `Discrete` actions."""
        return tuple(int(space.n) for space in self._spaces("action"))

    def _action_mask(
        self, env_state: PyTree
    ) -> Bool[Array, "num_agents num_actions"] | None:
        space = self.action_space
        if not isinstance(space, Discrete):
            return None
        method = _mask_method(self.jaxmarl_env)
        counts = self._action_counts
        if method is None and len(set(counts)) == 1:
            return None
        if method is not None:
            with _jaxmarl_rules():
                masks = method(env_state)
        rows = []
        for agent, count in zip(self.jaxmarl_env.agents, counts, strict=True):
            if method is None:
                row = jnp.ones(count, jnp.bool_)
            else:
                row = jnp.asarray(masks[agent]) != 0
            if row.shape != (count,):
                raise ValueError(
                    f"FromJaxMARL: {self._env_name}'s available actions of {agent} "
                    f"have shape {row.shape} but its action space is "
                    f"Discrete({count})."
                )
            # The padding actions beyond the agent's own are never available.
            rows.append(jnp.pad(row, (0, space.num_values - count)))
        return jnp.stack(rows)

    def _observation(
        self, observations: dict[str, Any]
    ) -> Shaped[Array, " num_agents *observation_shape"]:
        dtype = self.observation_space.dtype
        rows = []
        for agent, shape in zip(
            self.jaxmarl_env.agents, self._agent_observation_shapes, strict=True
        ):
            row = jnp.reshape(jnp.asarray(observations[agent]), shape).astype(dtype)
            if self._is_padded:
                row = jnp.ravel(row)
                row = jnp.pad(row, (0, self._observation_shape[0] - row.size))
            rows.append(row)
        return jnp.stack(rows)

    def _global_state(
        self, observations: dict[str, Any]
    ) -> Float[Array, " global_state_size"]:
        if self._has_world_state:
            parts = [observations[_WORLD_STATE]]
        else:
            parts = [observations[agent] for agent in self.jaxmarl_env.agents]
        return jnp.concatenate(
            [jnp.ravel(jnp.asarray(part)).astype(jnp.float32) for part in parts]
        )

    def _timestep(
        self,
        observations: dict[str, Any],
        env_state: PyTree,
        reward: Array,
        terminated: Array,
        truncated: Array,
        agent_dones: Bool[Array, " num_agents"],
        info: PyTree,
    ) -> TimeStep:
        agents = self.jaxmarl_env.agents
        extras = {
            name: strongly_typed(value)
            for name, value in observations.items()
            if name not in agents and name != _WORLD_STATE
        }
        extras[_AGENT_DONES] = agent_dones
        extras[_INFO] = info
        extras[GLOBAL_STATE] = self._global_state(observations)
        return TimeStep(
            observation=self._observation(observations),
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            action_mask=self._action_mask(env_state),
            extras=extras,
        )

    def _agent_actions(
        self, action: Shaped[Array, " num_agents *action_shape"]
    ) -> dict[str, Array]:
        """The stacked actions as JaxMARL's dict, each agent's `Box` action cut
        from its padding and shaped as its space."""
        actions = {}
        for i, (agent, space) in enumerate(
            zip(self.jaxmarl_env.agents, self._spaces("action"), strict=True)
        ):
            if isinstance(space, _jaxmarl().environments.spaces.Box):
                shape = _shape(space.shape)
                actions[agent] = jnp.reshape(action[i][: math.prod(shape)], shape)
            else:
                actions[agent] = action[i]
        return actions

    def _check_own_counts(self, action: Int[Array, " num_agents"]) -> Array:
        """`action`, after checking that no agent chose one of its padding actions
        (as [`check_action`][eqxrl.envs.check_action] checks the range)."""
        counts = self._action_counts
        if _SKIP_ACTION_CHECKS.get() or len(set(counts)) == 1:
            return action
        largest = max(counts)
        if not isinstance(action, jax.core.Tracer):
            value = np.asarray(action)
            outside = value >= np.asarray(counts)
            if outside.any():
                i = int(np.argmax(outside))
                agent = self.jaxmarl_env.agents[i]
                raise ValueError(
                    f"FromJaxMARL.step: action {value[i].item()} of {agent} (index "
                    f"{i} of actions {value.tolist()}) is one of its padding "
                    f"actions: {agent} has Discrete({counts[i]}), padded to "
                    f"Discrete({largest}) to stack it with the other agents; its "
                    f"valid actions are the integers 0 to {counts[i] - 1}, as its "
                    "action mask says."
                )
            return action
        return eqx.error_if(
            action,
            action >= jnp.asarray(counts, action.dtype),
            "FromJaxMARL.step: an agent chose one of its padding actions (beyond "
            f"its own count, padded to Discrete({largest})); its action mask marks "
            "them invalid.",
        )

    def _step_env(
        self, key: PRNGKeyArray, env_state: PyTree, action: Array
    ) -> tuple[dict[str, Any], PyTree, dict[str, Any], dict[str, Any], PyTree]:
        """JaxMARL's `step_env` with the key JaxMARL's `step` would give it, the
        action split per agent, and its info converted to extras."""
        agents = self.jaxmarl_env.agents
        actions = self._agent_actions(action)
        # JaxMARL's `step` splits its key into the transition's and a reset's.
        step_key, _ = jr.split(legacy_key(key))
        with _jaxmarl_rules():
            observations, env_state, rewards, dones, info = self.jaxmarl_env.step_env(
                step_key, env_state, actions
            )
        missing = [name for name in (*agents, _ALL) if name not in dones]
        if missing:
            raise ValueError(
                f"FromJaxMARL: {self._env_name}'s step_env returns no done for "
                f"{_names(missing)}; a JaxMARL environment's `dones` has one per "
                f"agent and {_ALL!r} for the episode."
            )
        return observations, env_state, rewards, dones, _info_tree(info, agents)

    def _info_zeros(self, key: PRNGKeyArray, env_state: PyTree) -> PyTree:
        """Zeros shaped like `step`'s info, so that `reset` and `step` return the
        same structure: one `step_env` traced abstractly, never run."""
        space = self.action_space
        action = jnp.zeros((self.num_agents, *space.shape), space.dtype)
        shapes = jax.eval_shape(
            lambda: self._step_env(key, env_state, action)[4],
        )
        return jtu.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    def reset(self, key: PRNGKeyArray) -> tuple[FromJaxMARLState, TimeStep]:
        with _jaxmarl_rules():
            observations, env_state = self.jaxmarl_env.reset(legacy_key(key))
        env_state = strongly_typed(env_state)
        state = FromJaxMARLState(env_state=env_state, step_count=jnp.int32(0))
        false = jnp.bool_(False)
        reward = jnp.zeros(self.num_agents, jnp.float32)
        agent_dones = jnp.zeros(self.num_agents, jnp.bool_)
        info = self._info_zeros(key, env_state)
        timestep = self._timestep(
            observations, env_state, reward, false, false, agent_dones, info
        )
        return state, timestep

    def step(
        self,
        state: FromJaxMARLState,
        action: Shaped[ArrayLike, " num_agents *action_shape"],
        key: PRNGKeyArray,
    ) -> tuple[FromJaxMARLState, TimeStep]:
        space = self.action_space
        if isinstance(space, Discrete):
            action = check_action(space, action, "FromJaxMARL.step")
        action = jnp.asarray(action)
        want = (self.num_agents, *space.shape)
        if action.shape != want:
            raise ValueError(
                f"FromJaxMARL.step: action has shape {action.shape} but "
                f"{self._env_name} has {self.num_agents} agents: give one action per "
                "agent, shape "
                f"{want}."
            )
        action = action.astype(space.dtype)
        if isinstance(space, Discrete):
            action = self._check_own_counts(action)
        agents = self.jaxmarl_env.agents
        observations, env_state, rewards, dones, info = self._step_env(
            key, state.env_state, action
        )
        env_state = strongly_typed(env_state)
        step_count = state.step_count + 1
        done = jnp.reshape(jnp.asarray(dones[_ALL]), ()).astype(jnp.bool_)
        if self.time_limit is None:
            truncated = jnp.bool_(False)
        else:
            truncated = done & (step_count >= self.time_limit)
        reward = jnp.stack(
            [jnp.reshape(jnp.asarray(rewards[agent]), ()) for agent in agents]
        ).astype(jnp.float32)
        agent_dones = jnp.stack(
            [jnp.reshape(jnp.asarray(dones[agent]), ()) for agent in agents]
        ).astype(jnp.bool_)
        next_state = FromJaxMARLState(env_state=env_state, step_count=step_count)
        timestep = self._timestep(
            observations,
            env_state,
            reward,
            done & ~truncated,
            truncated,
            agent_dones,
            info,
        )
        return next_state, timestep


def from_jaxmarl(
    env: Any,
    *,
    time_limit: int | None | Literal["max_steps"] = "max_steps",
    pad_agents: bool = True,
    **make_kwargs: Any,
) -> FromJaxMARL:
    """Use a [JaxMARL](https://github.com/FLAIROx/JaxMARL) environment (MPE, SMAX,
    Overcooked, Hanabi, ...) as an eqxrl multi-agent environment: one world, pure,
    no auto-reset, every per-agent field stacked along a leading agent axis.

    JaxMARL's dicts keyed by agent become arrays in the environment's agent order;
    `get_avail_actions` (or Hanabi's `get_legal_moves`) becomes
    `TimeStep.action_mask`; an episode that ends (`dones["__all__"]`) after at least
    `time_limit` steps (the environment's `max_steps`) is truncated, earlier it is
    terminated; the per-agent dones are `extras["agent_dones"]`, JaxMARL's infos
    `extras["info"]`, and a global state for centralized critics
    `extras["global_state"]` (JaxMARL's world state where it has one, SMAX's, else
    the agents' observations concatenated; its space is `env.global_state_space`).
    Agents whose spaces differ are padded to the largest: observations with zeros,
    `Discrete` actions with padding actions the action mask marks invalid. See
    [`FromJaxMARL`][eqxrl.envs.FromJaxMARL] for every rule and
    [multi-agent environments][multi-agent] for the conventions.

    **Arguments:**

    - `env`: a JaxMARL `MultiAgentEnv`, or the name of a registered one (e.g.
      `"MPE_simple_spread_v3"`), which is built with `jaxmarl.make(env,
      **make_kwargs)`.
    - `time_limit`: the step count from which an ending is a truncation (see
      `FromJaxMARL`); by default the environment's `max_steps`.
    - `pad_agents`: pad agents whose spaces differ to the largest (the default),
      or refuse them (`False`); see `FromJaxMARL`.
    - `make_kwargs`: keyword arguments of the environment's constructor (e.g.
      `max_steps=50`, or SMAX's `scenario`), only with a name.

    **Returns:**

    A [`FromJaxMARL`][eqxrl.envs.FromJaxMARL] environment.

    **Raises:**

    `ValueError` naming the agents whose spaces differ where they cannot be padded
    (one `Discrete`, another `Box`; any difference with `pad_agents=False`), or the
    space eqxrl cannot convert (`MultiDiscrete`, `Dict`, `Tuple`); `ImportError`
    without jaxmarl installed.

    !!! example

        ```python
        env = eqxrl.envs.from_jaxmarl("MPE_simple_spread_v3")
        eqxrl.envs.num_agents_of(env)  # 3
        state, timestep = env.reset(jax.random.key(0))
        timestep.observation.shape  # (3, 18)
        actions = jnp.array([0, 1, 4], jnp.int32)
        state, timestep = env.step(state, actions, jax.random.key(1))
        timestep.reward.shape  # (3,)
        timestep.extras["agent_dones"]  # [False, False, False]
        timestep.extras["global_state"].shape  # (54,): the 3 observations
        adversary = eqxrl.envs.from_jaxmarl("MPE_simple_adversary_v3")
        adversary.observation_space.shape  # (10,): adversary_0's 8, zero-padded
        ```
    """
    jaxmarl = _jaxmarl()
    env = make_by_name("from_jaxmarl", "JaxMARL", jaxmarl.make, env, make_kwargs)
    return FromJaxMARL(env, time_limit=time_limit, pad_agents=pad_agents)
