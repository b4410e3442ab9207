"""What every rollout's step shares: the environment stepped with episode
statistics and automatic resets, and a truncated episode's bootstrap value."""

from collections.abc import Callable

import equinox as eqx
from jaxtyping import Array, PRNGKeyArray, PyTree

from ..envs import AbstractEnvironment, AutoReset, EpisodeStatistics, TimeStep


def step_with_truncation_value(
    env: AbstractEnvironment,
    truncation_value: Callable[[TimeStep], PyTree[Array]],
    state: PyTree,
    action: PyTree[Array],
    key: PRNGKeyArray,
) -> tuple[PyTree, TimeStep, PyTree[Array]]:
    """One step of one environment as the algorithms' rollouts step it:
    [`EpisodeStatistics`][eqxrl.envs.EpisodeStatistics] inside
    [`AutoReset`][eqxrl.envs.AutoReset], which starts the next episode where one
    ended. A truncated episode (a time limit) could have gone on, so a return
    bootstraps from the value of the state it reached: where the step truncated an
    episode, `truncation_value(final)` of the episode's final timestep (before the
    reset; AutoReset calls it only there), zeros elsewhere.

    **Arguments:**

    - `env`: the environment (without `AutoReset` or `EpisodeStatistics`).
    - `truncation_value`: `truncation_value(final) -> value`, e.g. the critic's
      value of `final.observation` (with the carry of the episode's last step, for
      a recurrent network).
    - `state`, `action`, `key`: as for `env.step`, of the wrapped environment.

    **Returns:**

    `(state, timestep, value)`: the wrapped environment's state, the timestep
    (its `extras` with the episode statistics and `final_observation`), and the
    truncation value.
    """
    stepped = AutoReset(EpisodeStatistics(env), on_truncation=truncation_value)
    state, timestep = stepped.step(state, action, key)
    extras = dict(timestep.extras)
    value = extras.pop("at_truncation")
    return state, eqx.tree_at(lambda t: t.extras, timestep, extras), value
