import math
from collections.abc import Callable, Iterable

import equinox as eqx
import jax
import jax.lax as lax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree

from .._filters import any_in_vmapped_batch
from .._random import split
from .._speed_tricks import cpu_speed_tricks_apply
from ._checks import describe
from ._environment import (
    FINAL_GLOBAL_STATE,
    GLOBAL_STATE,
    AbstractEnvironment,
    AbstractWrapper,
)
from ._spaces import Box
from ._types import TimeStep


class TimeLimitState(eqx.Module):
    """State of [`TimeLimit`][eqxrl.envs.TimeLimit]: inner state and step count."""

    env_state: PyTree
    step_count: Int[Array, ""]


class TimeLimit(AbstractWrapper[TimeLimitState]):
    """Truncate episodes after `max_episode_steps` steps.

    Sets `truncated` (never `terminated`) on the step that reaches the limit, as
    gymnasium's `TimeLimit` does; a step that both terminates and reaches the limit
    has both flags set, and termination wins when bootstrapping.

    **Arguments:**

    - `env`: the environment to wrap.
    - `max_episode_steps`: the step limit, at least 1.
    """

    env: AbstractEnvironment
    max_episode_steps: int = eqx.field(static=True)

    def __check_init__(self):
        if self.max_episode_steps < 1:
            raise ValueError(
                f"TimeLimit(max_episode_steps={self.max_episode_steps}): "
                "the limit must be at least 1."
            )

    def inner_state(self, state: TimeLimitState) -> PyTree:
        return state.env_state

    def reset(self, key: PRNGKeyArray) -> tuple[TimeLimitState, TimeStep]:
        env_state, timestep = self.env.reset(key)
        return TimeLimitState(env_state, jnp.int32(0)), timestep

    def step(
        self, state: TimeLimitState, action, key: PRNGKeyArray
    ) -> tuple[TimeLimitState, TimeStep]:
        env_state, timestep = self.env.step(state.env_state, action, key)
        step_count = state.step_count + 1
        truncated = timestep.truncated | (step_count >= self.max_episode_steps)
        timestep = eqx.tree_at(lambda t: t.truncated, timestep, truncated)
        return TimeLimitState(env_state, step_count), timestep


class EpisodeStatisticsState(eqx.Module):
    """State of [`EpisodeStatistics`][eqxrl.envs.EpisodeStatistics]: the inner state,
    the return so far (one per agent in a multi-agent environment, shaped like the
    reward) and the length so far."""

    env_state: PyTree
    episode_return: Float[Array, "*num_agents"]
    episode_length: Int[Array, ""]


class EpisodeStatistics(AbstractWrapper[EpisodeStatisticsState]):
    """Track the undiscounted return and length of the running episode.

    Adds `extras["episode_return"]` (float32, shaped like the reward: one return per
    agent in a multi-agent environment) and `extras["episode_length"]` (int32
    scalar): the totals so far, including the current step. On the step where an
    episode ends they are the episode's final return and length. Put it inside
    `AutoReset` so that the counters restart with every episode.

    **Arguments:**

    - `env`: the environment to wrap.
    """

    env: AbstractEnvironment

    def inner_state(self, state: EpisodeStatisticsState) -> PyTree:
        return state.env_state

    def reset(self, key: PRNGKeyArray) -> tuple[EpisodeStatisticsState, TimeStep]:
        env_state, timestep = self.env.reset(key)
        episode_return = jnp.zeros(jnp.shape(timestep.reward), jnp.float32)
        state = EpisodeStatisticsState(env_state, episode_return, jnp.int32(0))
        return state, _with_extras(timestep, state)

    def step(
        self, state: EpisodeStatisticsState, action, key: PRNGKeyArray
    ) -> tuple[EpisodeStatisticsState, TimeStep]:
        env_state, timestep = self.env.step(state.env_state, action, key)
        state = EpisodeStatisticsState(
            env_state,
            state.episode_return + timestep.reward,
            state.episode_length + 1,
        )
        return state, _with_extras(timestep, state)


def _with_extras(timestep: TimeStep, state: EpisodeStatisticsState) -> TimeStep:
    extras = dict(timestep.extras)
    extras["episode_return"] = state.episode_return
    extras["episode_length"] = state.episode_length
    return eqx.tree_at(lambda t: t.extras, timestep, extras)


class AutoReset(AbstractWrapper):
    """Start a new episode as soon as one ends.

    On a step where the inner episode terminates or is truncated, the returned state
    and `observation` (and `action_mask`) are those of a fresh `reset`, while `reward`,
    `terminated`, `truncated` and `extras` stay those of the final step. The
    pre-reset observation is kept in `extras["final_observation"]` (equal to
    `observation` on every other step), which is what a value function must see to
    bootstrap through a truncation. A multi-agent environment's global state
    (`extras["global_state"]`, see
    [`global_state_space`][eqxrl.envs.AbstractMultiAgentEnvironment.global_state_space])
    is part of what a reset renews, like the observation: it is the fresh episode's,
    and the pre-reset one is kept in `extras["final_global_state"]`. The new
    episode comes from the wrapped environment's
    [`restart`][eqxrl.envs.AbstractEnvironment.restart] (its `reset`, unless
    something inside keeps progress across episodes, as a
    [`Curriculum`][eqxrl.envs.Curriculum] does).

    On the CPU the reset is lazy: it runs in a `lax.cond`, only on steps where the
    episode ended. Under `vmap` (environments, seeds, hyperparameters) the
    condition is whether any member of the batch ended its episode
    ([`any_in_vmapped_batch`][eqxrl.envs.any_in_vmapped_batch]), so the cond stays a
    cond instead of becoming a select that resets every environment at every step:
    resets are rare, and would otherwise double the cost of a cheap environment's
    step. Elsewhere (GPU), where a conditional is a round trip to the host, every
    step computes the reset and selects it (see
    [`cpu_speed_tricks`][eqxrl.algorithms.cpu_speed_tricks]). This is how PPO, DQN
    and IQN step their environments: `jax.vmap(AutoReset(env).step)`.

    **Arguments:**

    - `env`: the environment to wrap.
    - `on_truncation`: optional `function(final_timestep) -> pytree of arrays`, for
      work needed only when an episode is truncated (PPO passes its critic, to value
      the final observation it bootstraps from). It runs in a `lax.cond` of its own,
      nested in the reset's, only on steps where an episode was truncated (under
      `vmap`, where any member's was; on every step off the CPU), so it costs
      nothing on other steps,
      including the far more frequent steps where episodes only terminate; its
      output is `extras["at_truncation"]`, zeros on steps where the episode was not
      truncated (and after `reset`).
    """

    env: AbstractEnvironment
    on_truncation: Callable[[TimeStep], PyTree] | None = eqx.field(
        static=True, default=None
    )

    def reset(self, key: PRNGKeyArray) -> tuple[PyTree, TimeStep]:
        state, timestep = self.env.reset(key)
        extras = dict(timestep.extras)
        extras["final_observation"] = timestep.observation
        if GLOBAL_STATE in extras:
            extras[FINAL_GLOBAL_STATE] = extras[GLOBAL_STATE]
        if self.on_truncation is not None:
            extras["at_truncation"] = self._nothing(timestep)
        return state, eqx.tree_at(lambda t: t.extras, timestep, extras)

    def _nothing(self, timestep: TimeStep) -> PyTree:
        """Zeros shaped like `on_truncation`'s output."""
        shapes = jax.eval_shape(self.on_truncation, timestep)
        return jtu.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    def step(self, state: PyTree, action, key: PRNGKeyArray) -> tuple[PyTree, TimeStep]:
        step_key, reset_key = split(key)
        state, timestep = self.env.step(state, action, step_key)
        done = timestep.terminated | timestep.truncated
        # What a reset renews (a global state, like the observation, is the new
        # episode's: a centralized critic reads it beside the observations).
        global_state = timestep.extras.get(GLOBAL_STATE)
        stepped = (state, timestep.observation, timestep.action_mask, global_state)
        hook = self.on_truncation
        nothing = None if hook is None else self._nothing(timestep)

        def episode_ended(eager: bool = False):
            # `restart`, not `reset`: what outlives an episode (a curriculum's
            # progress) is read from the ended one; for every other environment
            # it is `reset`.
            reset_state, reset_timestep = self.env.restart(state, reset_key)
            fresh = (
                reset_state,
                reset_timestep.observation,
                reset_timestep.action_mask,
                reset_timestep.extras.get(GLOBAL_STATE),
            )
            restarted = jtu.tree_map(
                lambda new, old: jnp.where(done, new, old), fresh, stepped
            )
            # A truncation ends an episode, so the hook's conditional can live
            # inside the reset's: on most steps (no episode ended) the step pays
            # for one conditional, not two, and where episodes end at nearly every
            # step (thousands of environments) the hook still runs only on
            # truncations.
            at_truncation = (
                None if hook is None else self._at_truncation(timestep, eager)
            )
            return restarted, at_truncation

        if cpu_speed_tricks_apply():
            ended = any_in_vmapped_batch(done)
            renewed, at_truncation = lax.cond(
                ended, episode_ended, lambda: (stepped, nothing)
            )
        else:
            # Off the CPU, a conditional costs more than the work it saves: XLA's
            # GPU backend reads the predicate on the host, a round trip per step
            # (on an H200, with the conditional: PPO at PureJaxRL's config 0.97x,
            # Snake with 4,096 environments 0.85x). There every step computes the
            # reset and selects it, as gymnax's and Jumanji's auto-resets do.
            renewed, at_truncation = episode_ended(eager=True)
        next_state, observation, action_mask, next_global_state = renewed
        extras = dict(timestep.extras)
        extras["final_observation"] = timestep.observation
        if global_state is not None:
            extras[GLOBAL_STATE] = next_global_state
            extras[FINAL_GLOBAL_STATE] = global_state
        if hook is not None:
            extras["at_truncation"] = at_truncation
        timestep = TimeStep(
            observation=observation,
            reward=timestep.reward,
            terminated=timestep.terminated,
            truncated=timestep.truncated,
            action_mask=action_mask,
            extras=extras,
        )
        return next_state, timestep

    def _at_truncation(self, final: TimeStep, eager: bool = False) -> PyTree:
        """`on_truncation(final)` where the episode was truncated, zeros elsewhere;
        run only when some episode was (every step if `eager`). A conditional of
        its own inside the reset's: episodes terminate far more often than they are
        truncated (with thousands of environments some terminate at nearly every
        step), and the hook (a critic) can cost more than the environment step."""
        nothing = self._nothing(final)

        def run():
            # Under vmap this branch runs for the whole batch: members whose
            # episode was not truncated get zeros.
            return jtu.tree_map(
                lambda out, zero: jnp.where(final.truncated, out, zero),
                self.on_truncation(final),
                nothing,
            )

        if eager:
            return run()
        return lax.cond(any_in_vmapped_batch(final.truncated), run, lambda: nothing)


class ClipAction(AbstractWrapper):
    """Clip continuous actions to the action space's bounds before stepping.

    Lets a Gaussian policy sample unbounded actions (its log-probabilities stay those
    of the unclipped sample) while the environment only sees valid ones.

    **Arguments:**

    - `env`: an environment with a [`Box`][eqxrl.envs.Box] action space.
    """

    env: AbstractEnvironment

    def __check_init__(self):
        if not isinstance(self.env.action_space, Box):
            raise ValueError("ClipAction needs an environment with a Box action space.")

    def reset(self, key: PRNGKeyArray) -> tuple[PyTree, TimeStep]:
        return self.env.reset(key)

    def step(
        self, state: PyTree, action: Float[Array, "..."], key: PRNGKeyArray
    ) -> tuple[PyTree, TimeStep]:
        return self.env.step(state, self.transform_action(action), key)

    def transform_action(self, action: Float[Array, "..."]) -> Float[Array, "..."]:
        """The action the wrapped environment receives: clipped to its bounds
        ([`export_policy`][eqxrl.export_policy] folds this into the policy)."""
        space = self.env.action_space
        return jnp.clip(action, space.low, space.high)


class RescaleAction(AbstractWrapper):
    """Accept actions in `[low, high]` (default `[-1, 1]`) and map them linearly onto
    the wrapped environment's bounds.

    Pairs with a tanh-squashed policy, whose actions lie in `(-1, 1)`. Actions outside
    `[low, high]` are clipped first.

    **Arguments:**

    - `env`: an environment with a bounded [`Box`][eqxrl.envs.Box] action space.
    - `low`, `high`: the action range the agent uses.
    """

    env: AbstractEnvironment
    low: float = eqx.field(static=True, default=-1.0)
    high: float = eqx.field(static=True, default=1.0)

    def __check_init__(self):
        space = self.env.action_space
        if not isinstance(space, Box):
            raise ValueError(
                "RescaleAction needs an environment with a Box action space."
            )
        if not (jnp.isfinite(space.low).all() and jnp.isfinite(space.high).all()):
            raise ValueError("RescaleAction needs finite action bounds.")
        if not self.low < self.high:
            raise ValueError(
                f"RescaleAction: low={self.low} must be < high={self.high}."
            )

    @property
    def action_space(self) -> Box:
        return Box(self.low, self.high, shape=self.env.action_space.shape)

    def reset(self, key: PRNGKeyArray) -> tuple[PyTree, TimeStep]:
        return self.env.reset(key)

    def step(
        self, state: PyTree, action: Float[Array, "..."], key: PRNGKeyArray
    ) -> tuple[PyTree, TimeStep]:
        return self.env.step(state, self.transform_action(action), key)

    def transform_action(self, action: Float[Array, "..."]) -> Float[Array, "..."]:
        """The action the wrapped environment receives: clipped to `[low, high]`,
        then mapped linearly onto its bounds
        ([`export_policy`][eqxrl.export_policy] folds this into the policy)."""
        space = self.env.action_space
        fraction = (jnp.clip(action, self.low, self.high) - self.low) / (
            self.high - self.low
        )
        return space.low + fraction * (space.high - space.low)


def _as_indices(value: int | Iterable) -> tuple:
    """Field converter: one index or a sequence of them as a tuple (a hashable
    static field); NumPy integers become Python ints, anything else is left for
    `__check_init__` to name."""
    if isinstance(value, int | np.integer):
        value = (value,)
    return tuple(
        int(index)
        if isinstance(index, int | np.integer) and not isinstance(index, bool)
        else index
        for index in value
    )


class HideObservation(AbstractWrapper):
    """Hide chosen entries of a vector observation, turning a fully observed task
    into a partially observed one (a memory task).

    The observation keeps the entries not listed in `hidden`, in their original
    order; `observation_space` is the wrapped `Box` with those entries' bounds. The
    state, the dynamics, rewards, flags, action masks and `render` are those of the
    wrapped environment. `extras["final_observation"]` (from an
    [`AutoReset`][eqxrl.envs.AutoReset] inside this wrapper) is hidden the same way,
    so nothing hidden reaches a policy or a critic. In a multi-agent environment the
    same entries are hidden from every agent (the last axis is the one indexed).

    `eqxrl.envs.make("StatelessCartPole-v1")` is this wrapper around
    [`CartPole`][eqxrl.envs.CartPole] hiding both velocities.

    **Arguments:**

    - `env`: an environment whose `observation_space` is a 1-D
      [`Box`][eqxrl.envs.Box] (a vector of `size` entries).
    - `hidden`: the indices of the entries to hide (an int or a sequence of ints,
      each from 0 to `size - 1`, each once; at least one entry must stay visible).

    !!! example

        ```python
        # CartPole observing [x, theta]: velocities must be inferred from the past.
        env = eqxrl.envs.HideObservation(eqxrl.envs.CartPole(), hidden=(1, 3))
        env.observation_space.shape  # (2,)
        state, timestep = env.reset(jax.random.key(0))
        timestep.observation  # [x, theta] of state.physics
        ```
    """

    env: AbstractEnvironment
    hidden: tuple[int, ...] = eqx.field(static=True, converter=_as_indices)

    def __check_init__(self):
        space = self.env.observation_space
        name = f"HideObservation(hidden={self.hidden})"
        if not isinstance(space, Box) or len(space.shape) != 1:
            if isinstance(space, Box):
                what = f"a Box of shape {space.shape}"
                fix = (
                    "reshape it to one vector in your environment (e.g. "
                    f"({math.prod(space.shape)},)) and hide indices of that vector"
                )
            else:
                what = f"a {type(space).__name__} space"
                fix = (
                    "give the environment a Box observation (one float32 vector), or "
                    "leave the parts out of its observation in its own code"
                )
            raise ValueError(
                f"{name}: the wrapped environment {describe(self.env)} has {what} "
                "as its observation_space, but HideObservation hides entries of a "
                f"1-D Box (a vector); {fix}."
            )
        (size,) = space.shape
        valid = f"indices are the integers 0 to {size - 1}"
        for index in self.hidden:
            if not isinstance(index, int) or isinstance(index, bool):
                raise ValueError(f"{name}: {index!r} is not an integer index; {valid}.")
            if index < 0:
                raise ValueError(
                    f"{name}: index {index} is negative; {valid} (the last entry "
                    f"is {size - 1})."
                )
            if index >= size:
                raise ValueError(
                    f"{name}: index {index} is out of range for observations of "
                    f"shape ({size},); {valid}."
                )
        repeated = sorted(
            {index for index in self.hidden if self.hidden.count(index) > 1}
        )
        if repeated:
            raise ValueError(
                f"{name}: "
                + (
                    f"index {repeated[0]} is"
                    if len(repeated) == 1
                    else f"indices {', '.join(map(str, repeated))} are"
                )
                + " listed more than once; list each hidden index once."
            )
        if len(self.hidden) == size:
            raise ValueError(
                f"{name} hides all {size} entries of the observation, which would "
                "leave nothing to observe; keep at least one entry visible."
            )

    @property
    def kept(self) -> tuple[int, ...]:
        """The indices of the entries still observed, in increasing order."""
        (size,) = self.env.observation_space.shape
        return tuple(index for index in range(size) if index not in self.hidden)

    @property
    def observation_space(self) -> Box:
        """The wrapped `Box` restricted to the [`kept`][eqxrl.envs.HideObservation.kept]
        entries."""
        space = self.env.observation_space
        kept = np.asarray(self.kept)
        return Box(space.low[kept], space.high[kept])

    def _hide(
        self, observation: Float[Array, "*num_agents size"]
    ) -> Float[Array, "*num_agents kept"]:
        return observation[..., np.asarray(self.kept)]

    def _hide_timestep(self, timestep: TimeStep) -> TimeStep:
        extras = dict(timestep.extras)
        if "final_observation" in extras:
            extras["final_observation"] = self._hide(extras["final_observation"])
        return TimeStep(
            observation=self._hide(timestep.observation),
            reward=timestep.reward,
            terminated=timestep.terminated,
            truncated=timestep.truncated,
            action_mask=timestep.action_mask,
            extras=extras,
        )

    def reset(self, key: PRNGKeyArray) -> tuple[PyTree, TimeStep]:
        state, timestep = self.env.reset(key)
        return state, self._hide_timestep(timestep)

    def step(self, state: PyTree, action, key: PRNGKeyArray) -> tuple[PyTree, TimeStep]:
        state, timestep = self.env.step(state, action, key)
        return state, self._hide_timestep(timestep)
