from collections.abc import Callable

import equinox as eqx
import jax
import jax.lax as lax
import jax.numpy as jnp
import jax.tree_util as jtu
from jaxtyping import Array, Bool, Float, Int, Key, PRNGKeyArray, PyTree, UInt32

from .._random import split
from ._environment import AbstractEnvironment, AbstractWrapper
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

    @property
    def has_state_observation(self) -> bool:
        return self.env.has_state_observation

    def observation(self, state: TimeLimitState) -> PyTree:
        return self.env.observation(state.env_state)

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
    """State of [`EpisodeStatistics`][eqxrl.envs.EpisodeStatistics]."""

    env_state: PyTree
    episode_return: Float[Array, ""]
    episode_length: Int[Array, ""]


class EpisodeStatistics(AbstractWrapper[EpisodeStatisticsState]):
    """Track the undiscounted return and length of the running episode.

    Adds `extras["episode_return"]` (float32) and `extras["episode_length"]` (int32):
    the totals so far, including the current step. On the step where an episode ends
    they are the episode's final return and length. Put it inside `AutoReset` so that
    the counters restart with every episode.

    **Arguments:**

    - `env`: the environment to wrap.
    """

    env: AbstractEnvironment

    @property
    def has_state_observation(self) -> bool:
        return self.env.has_state_observation

    def observation(self, state: EpisodeStatisticsState) -> PyTree:
        return self.env.observation(state.env_state)

    def reset(self, key: PRNGKeyArray) -> tuple[EpisodeStatisticsState, TimeStep]:
        env_state, timestep = self.env.reset(key)
        state = EpisodeStatisticsState(env_state, jnp.float32(0.0), jnp.int32(0))
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
    bootstrap through a truncation.

    If the environment implements `observation(state)` (see
    [`AbstractEnvironment.observation`][eqxrl.envs.AbstractEnvironment.observation]),
    the returned observation is built once, from the state after the reset select;
    otherwise the stepped and the reset observations are selected between.

    **Arguments:**

    - `env`: the environment to wrap.
    """

    env: AbstractEnvironment

    @property
    def has_state_observation(self) -> bool:
        return self.env.has_state_observation

    def observation(self, state: PyTree) -> PyTree:
        return self.env.observation(state)

    def reset(self, key: PRNGKeyArray) -> tuple[PyTree, TimeStep]:
        state, timestep = self.env.reset(key)
        extras = dict(timestep.extras)
        extras["final_observation"] = timestep.observation
        return state, eqx.tree_at(lambda t: t.extras, timestep, extras)

    def step(self, state: PyTree, action, key: PRNGKeyArray) -> tuple[PyTree, TimeStep]:
        step_key, reset_key = split(key)
        state, timestep = self.env.step(state, action, step_key)
        reset_state, reset_timestep = self.env.reset(reset_key)
        done = timestep.terminated | timestep.truncated

        def select(reset_leaf: Array, leaf: Array) -> Array:
            return jnp.where(done, reset_leaf, leaf)

        extras = dict(timestep.extras)
        extras["final_observation"] = timestep.observation
        next_state = jtu.tree_map(select, reset_state, state)
        if self.env.has_state_observation:
            # One observation, of the state after the select, rather than two and
            # a select of them: much cheaper for large observations (Snake's board).
            observation = self.env.observation(next_state)
        else:
            observation = jtu.tree_map(
                select, reset_timestep.observation, timestep.observation
            )
        timestep = TimeStep(
            observation=observation,
            reward=timestep.reward,
            terminated=timestep.terminated,
            truncated=timestep.truncated,
            action_mask=jtu.tree_map(
                select, reset_timestep.action_mask, timestep.action_mask
            ),
            extras=extras,
        )
        return next_state, timestep


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

    @property
    def has_state_observation(self) -> bool:
        return self.env.has_state_observation

    def observation(self, state: PyTree) -> PyTree:
        return self.env.observation(state)

    def reset(self, key: PRNGKeyArray) -> tuple[PyTree, TimeStep]:
        return self.env.reset(key)

    def step(
        self, state: PyTree, action: Float[Array, "..."], key: PRNGKeyArray
    ) -> tuple[PyTree, TimeStep]:
        space = self.env.action_space
        return self.env.step(state, jnp.clip(action, space.low, space.high), key)


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
    def has_state_observation(self) -> bool:
        return self.env.has_state_observation

    def observation(self, state: PyTree) -> PyTree:
        return self.env.observation(state)

    @property
    def action_space(self) -> Box:
        return Box(self.low, self.high, shape=self.env.action_space.shape)

    def reset(self, key: PRNGKeyArray) -> tuple[PyTree, TimeStep]:
        return self.env.reset(key)

    def step(
        self, state: PyTree, action: Float[Array, "..."], key: PRNGKeyArray
    ) -> tuple[PyTree, TimeStep]:
        space = self.env.action_space
        fraction = (jnp.clip(action, self.low, self.high) - self.low) / (
            self.high - self.low
        )
        return self.env.step(
            state, space.low + fraction * (space.high - space.low), key
        )


# One PRNG key per environment: typed keys, or legacy uint32 keys.
BatchedKeys = Key[Array, " num_envs"] | UInt32[Array, "num_envs 2"]


def step_with_auto_reset(
    env: AbstractEnvironment,
    state: PyTree,
    action: PyTree,
    step_keys: BatchedKeys,
    reset_keys: BatchedKeys,
) -> tuple[PyTree, TimeStep]:
    """`jax.vmap(AutoReset(env).step)` for a batch of environments, resetting lazily.

    The same result as stepping every environment through
    [`AutoReset`][eqxrl.envs.AutoReset] (up to which keys draw the resets), but the
    batch of resets is computed only on steps where some environment's episode
    ended (a `lax.cond` on the whole batch). Resets are rare, so this saves most of
    the reset work, which otherwise doubles the cost of a cheap environment's step.
    Under a further `vmap` (e.g. over seeds or hyperparameters) the condition is
    reduced over the whole vmapped batch, so it stays a `lax.cond` (run when an
    episode ended anywhere) instead of becoming a select that resets at every step.

    **Arguments:**

    - `env`: the (unbatched, not auto-resetting) environment.
    - `state`, `action`: batched over a leading `num_envs` axis.
    - `step_keys`, `reset_keys`: one PRNG key per environment, for the step and for
      a possible reset.

    **Returns:**

    `(state, timestep)` batched, with `extras["final_observation"]` as `AutoReset`
    sets it.
    """
    next_state, timestep, _ = step_with_lazy_resets(
        env, state, action, step_keys, reset_keys
    )
    return next_state, timestep


@jax.custom_batching.custom_vmap
def _any_in_vmapped_batch(flag: Bool[Array, ""]) -> Bool[Array, ""]:
    """`flag`; under `vmap`, whether it holds for any member of the batch, as one
    unbatched boolean. A `lax.cond` on it stays a conditional under `vmap`, where a
    batched predicate would turn it into a select that runs both branches."""
    return flag


@_any_in_vmapped_batch.def_vmap
def _any_in_vmapped_batch_rule(axis_size, in_batched, flag):
    del axis_size
    (batched,) = in_batched
    return (jnp.any(flag) if batched else flag), False


def step_with_lazy_resets(
    env: AbstractEnvironment,
    state: PyTree,
    action: PyTree,
    step_keys: BatchedKeys,
    reset_keys: BatchedKeys,
    on_episode_end: Callable[[TimeStep], PyTree] | None = None,
) -> tuple[PyTree, TimeStep, PyTree]:
    """`step_with_auto_reset`, plus `on_episode_end(final_timestep)` (of the batch,
    before the resets) evaluated in the same `lax.cond` branch as the resets, so
    work needed only when an episode ends costs nothing on other steps. Returns
    its output, or zeros of the same structure on steps where no episode ended
    (`None` without `on_episode_end`)."""
    state, timestep = jax.vmap(env.step)(state, action, step_keys)
    done = timestep.terminated | timestep.truncated
    resettable = (state, timestep.observation, timestep.action_mask)
    if on_episode_end is None:
        nothing = None
    else:
        nothing = jtu.tree_map(
            lambda leaf: jnp.zeros(leaf.shape, leaf.dtype),
            jax.eval_shape(on_episode_end, timestep),
        )

    def with_resets():
        reset_state, reset_timestep = jax.vmap(env.reset)(reset_keys)

        def select(reset_leaf: Array, leaf: Array) -> Array:
            mask = done.reshape(done.shape + (1,) * (leaf.ndim - 1))
            return jnp.where(mask, reset_leaf, leaf)

        fresh = (reset_state, reset_timestep.observation, reset_timestep.action_mask)
        selected = jtu.tree_map(select, fresh, resettable)
        if on_episode_end is None:
            return selected, nothing
        return selected, on_episode_end(timestep)

    (next_state, observation, action_mask), episode_end_output = lax.cond(
        _any_in_vmapped_batch(jnp.any(done)),
        with_resets,
        lambda: (resettable, nothing),
    )
    extras = dict(timestep.extras)
    extras["final_observation"] = timestep.observation
    # Batched leaves: replace fields in place (the constructor checks one example).
    timestep = eqx.tree_at(
        lambda t: (t.observation, t.action_mask, t.extras),
        timestep,
        (observation, action_mask, extras),
        is_leaf=lambda x: x is None,
    )
    return next_state, timestep, episode_end_output
