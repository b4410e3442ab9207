"""Curricula: a difficulty that each environment's resets read, advanced from its
success statistics inside the compiled training loop."""

from collections.abc import Callable

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray, PyTree

from .._config import in_range
from ._environment import ENV_METRICS, AbstractEnvironment, AbstractWrapper, unwrap
from ._randomization import replace_innermost
from ._types import TimeStep

DIFFICULTY_METRIC = "curriculum/difficulty"


class CurriculumProgress(eqx.Module):
    """One environment's progress through a [`Curriculum`][eqxrl.envs.Curriculum]:
    what its `reset_fn` reads, kept across episodes.

    **Arguments:**

    - `difficulty`: float32 in `[0, 1]`, where the curriculum stands.
    - `step_count`: steps this environment has taken since training began (all
      environments step together, so the global step is `num_envs` times this).
    - `episode_count`: episodes it has ended.
    - `success_count`: of those, the successes (`success_fn`).
    - `window_episodes`, `window_successes`: episodes and successes since the
      difficulty was last reconsidered (every `window` episodes).
    """

    difficulty: Float[Array, ""]
    step_count: Int[Array, ""]
    episode_count: Int[Array, ""]
    success_count: Int[Array, ""]
    window_episodes: Int[Array, ""]
    window_successes: Int[Array, ""]


class CurriculumState(eqx.Module):
    """State of [`Curriculum`][eqxrl.envs.Curriculum]: the wrapped environment's
    state and the curriculum's [`CurriculumProgress`][eqxrl.envs.CurriculumProgress].
    """

    env_state: PyTree
    progress: CurriculumProgress


def survived(timestep: TimeStep) -> Bool[Array, ""]:
    """The default success of a [`Curriculum`][eqxrl.envs.Curriculum]: the episode
    was truncated (by a time limit) without terminating, e.g. a CartPole pole
    balanced until the end."""
    return timestep.truncated & ~timestep.terminated


class _ResetWith(AbstractWrapper):
    """An environment whose `reset` is `reset_fn(env, key, progress)`."""

    env: AbstractEnvironment
    reset_fn: Callable = eqx.field(static=True)
    progress: CurriculumProgress

    def reset(self, key: PRNGKeyArray) -> tuple[PyTree, TimeStep]:
        return self.reset_fn(self.env, key, self.progress)

    def step(self, state: PyTree, action, key: PRNGKeyArray) -> tuple[PyTree, TimeStep]:
        return self.env.step(state, action, key)


class Curriculum(AbstractWrapper[CurriculumState]):
    """Make episodes harder as an agent succeeds: a difficulty in `[0, 1]` that the
    environment's resets read, advanced inside the compiled training loop.

    Each environment keeps a [`CurriculumProgress`][eqxrl.envs.CurriculumProgress]
    (its difficulty, its step count, its episodes and successes) in its state,
    updated by `step` with `jax.numpy` alone: no host callback, nothing to retrace,
    so `PPO(env=Curriculum(...)).train` compiles once and the difficulty advances
    inside the `lax.scan` of iterations. Being part of the training state, the
    progress is in every checkpoint, and a resumed run continues exactly.

    **The rule.** Every `window` episodes an environment looks back at them: if at
    least `success_threshold` of them were successes (`success_fn` on the step that
    ended them), its difficulty grows by `increment` (up to 1); the counts then
    restart. The difficulty never goes down.

    **Resets.** Every reset (the first, and each new episode) calls
    `reset_fn(env, key, progress)` on the *innermost* environment (e.g.
    [`CartPole`][eqxrl.envs.CartPole] inside `make("CartPole-v1")`'s
    [`TimeLimit`][eqxrl.envs.TimeLimit]), whose wrappers reset around it as usual;
    it returns the innermost environment's `(state, timestep)`, as its own `reset`
    would, drawn at `progress.difficulty` (e.g. a wider initial-state range).

    **Why the progress survives auto-resets.** [`AutoReset`][eqxrl.envs.AutoReset],
    which the algorithms put around the environment, starts new episodes with
    [`restart`][eqxrl.envs.AbstractEnvironment.restart]`(state, key)`, not
    `reset(key)`: the wrappers in between forward it, and this wrapper's `restart`
    keeps the ended episode's progress where `reset` would start a fresh one. So
    the natural `PPO(env=Curriculum(make("CartPole-v1"), reset_fn))` works, with
    the curriculum inside the episode statistics and the time limit outside
    nothing (a time limit must be inside, for `success_fn` to see truncations).

    The difficulty is in the training metrics: `extras["env_metrics"]`
    ([`ENV_METRICS`][eqxrl.envs.ENV_METRICS]) holds `"curriculum/difficulty"`,
    from `reset` on, which the algorithms average over each iteration.

    **Arguments:**

    - `env`: the environment (with its time limit, e.g. `make("CartPole-v1")`).
    - `reset_fn`: `reset_fn(env, key, progress) -> (state, timestep)`, a reset of
      the innermost environment `env` at `progress.difficulty` (a
      [`CurriculumProgress`][eqxrl.envs.CurriculumProgress]: a schedule on
      `progress.step_count` is possible too). A static field: a Python function.
    - `success_fn`: `success_fn(timestep) -> bool scalar`, whether the episode that
      `timestep` ends was a success (read only on steps that end one). Default
      [`survived`][eqxrl.envs.survived]: truncated without terminating.
    - `window`: episodes per decision (a Python int, at least 1).
    - `success_threshold`: the fraction of successes in a window that advances the
      difficulty, in `[0, 1]`.
    - `increment`: how much the difficulty grows at each advance, in `[0, 1]`.
    - `initial_difficulty`: where every environment starts, in `[0, 1]`.

    !!! example

        ```python
        def reset_fn(cartpole, key, progress):
            # The initial state's range widens from +-0.05 to +-0.2.
            bound = 0.05 + 0.15 * progress.difficulty
            physics = jax.random.uniform(key, (4,), minval=-bound, maxval=bound)
            state = eqxrl.envs.CartPoleState(physics)
            return state, eqxrl.envs.TimeStep(
                observation=physics,
                reward=jnp.float32(0.0),
                terminated=jnp.bool_(False),
                truncated=jnp.bool_(False),
            )

        env = eqxrl.envs.Curriculum(eqxrl.envs.make("CartPole-v1"), reset_fn)
        state, metrics = eqxrl.PPO(env=env, total_timesteps=200_000).train(
            jax.random.key(0)
        )
        metrics["curriculum/difficulty"]  # grows as the agent balances longer
        ```
    """

    env: AbstractEnvironment
    reset_fn: Callable[
        [AbstractEnvironment, PRNGKeyArray, CurriculumProgress],
        tuple[PyTree, TimeStep],
    ] = eqx.field(static=True)
    success_fn: Callable[[TimeStep], Bool[Array, ""]] = eqx.field(
        static=True, default=survived
    )
    window: int = eqx.field(static=True, default=8)
    success_threshold: Float[Array, ""] = eqx.field(
        default=0.8, converter=in_range("success_threshold", 0.0, 1.0)
    )
    increment: Float[Array, ""] = eqx.field(
        default=0.1, converter=in_range("increment", 0.0, 1.0)
    )
    initial_difficulty: Float[Array, ""] = eqx.field(
        default=0.0, converter=in_range("initial_difficulty", 0.0, 1.0)
    )

    def __check_init__(self):
        for name in ("reset_fn", "success_fn"):
            if not callable(getattr(self, name)):
                raise ValueError(
                    f"Curriculum: {name}={getattr(self, name)!r} is not callable; "
                    "see the Curriculum docstring for its signature."
                )
        if (
            not isinstance(self.window, int)
            or isinstance(self.window, bool)
            or self.window < 1
        ):
            raise ValueError(
                f"Curriculum: window={self.window!r} must be an int of at least 1 "
                "(the number of episodes between two decisions)."
            )

    def inner_state(self, state: CurriculumState) -> PyTree:
        return state.env_state

    def initial_progress(self) -> CurriculumProgress:
        """The progress every environment starts from: `initial_difficulty`, no
        steps, no episodes."""
        zero = jnp.int32(0)
        return CurriculumProgress(
            difficulty=jnp.asarray(self.initial_difficulty, jnp.float32),
            step_count=zero,
            episode_count=zero,
            success_count=zero,
            window_episodes=zero,
            window_successes=zero,
        )

    def _start(
        self, key: PRNGKeyArray, progress: CurriculumProgress
    ) -> tuple[CurriculumState, TimeStep]:
        """An episode at `progress`: `reset_fn` on the innermost environment, the
        wrappers in between reset around it."""
        inner = unwrap(self.env)[-1]
        starting = _ResetWith(inner, self.reset_fn, progress)
        env_state, timestep = replace_innermost(self.env, starting).reset(key)
        return CurriculumState(env_state, progress), _with_difficulty(
            timestep, progress
        )

    def reset(self, key: PRNGKeyArray) -> tuple[CurriculumState, TimeStep]:
        """A first episode, at `initial_difficulty`."""
        return self._start(key, self.initial_progress())

    def restart(
        self, state: CurriculumState, key: PRNGKeyArray
    ) -> tuple[CurriculumState, TimeStep]:
        """A new episode, at the progress of the one that ended (kept)."""
        return self._start(key, state.progress)

    def step(
        self, state: CurriculumState, action, key: PRNGKeyArray
    ) -> tuple[CurriculumState, TimeStep]:
        env_state, timestep = self.env.step(state.env_state, action, key)
        progress = self._advance(state.progress, timestep)
        return CurriculumState(env_state, progress), _with_difficulty(
            timestep, progress
        )

    def _advance(
        self, progress: CurriculumProgress, timestep: TimeStep
    ) -> CurriculumProgress:
        ended = timestep.terminated | timestep.truncated
        success = ended & jnp.asarray(self.success_fn(timestep), jnp.bool_)
        window_episodes = progress.window_episodes + ended.astype(jnp.int32)
        window_successes = progress.window_successes + success.astype(jnp.int32)
        decide = window_episodes >= self.window
        rate = window_successes.astype(jnp.float32) / self.window
        advance = decide & (rate >= self.success_threshold)
        difficulty = jnp.where(
            advance,
            jnp.minimum(progress.difficulty + self.increment, 1.0),
            progress.difficulty,
        )
        zero = jnp.int32(0)
        return CurriculumProgress(
            difficulty=difficulty,
            step_count=progress.step_count + 1,
            episode_count=progress.episode_count + ended.astype(jnp.int32),
            success_count=progress.success_count + success.astype(jnp.int32),
            window_episodes=jnp.where(decide, zero, window_episodes),
            window_successes=jnp.where(decide, zero, window_successes),
        )


def _with_difficulty(timestep: TimeStep, progress: CurriculumProgress) -> TimeStep:
    extras = dict(timestep.extras)
    extras[ENV_METRICS] = {
        **extras.get(ENV_METRICS, {}),
        DIFFICULTY_METRIC: progress.difficulty,
    }
    return eqx.tree_at(lambda t: t.extras, timestep, extras)
