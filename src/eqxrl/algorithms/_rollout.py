"""What every rollout's step shares: the environment stepped with episode
statistics and automatic resets, and a truncated episode's bootstrap value; and
the epsilon-greedy collection of the replay-based value learners (DQN, IQN,
independent learners, value decomposition)."""

from collections.abc import Callable

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, Key, PRNGKeyArray, PyTree

from .._filters import scan_or_step
from .._random import split as random_split, uniform as random_uniform
from ..envs import (
    AbstractEnvironment,
    AutoReset,
    EpisodeStatistics,
    TimeStep,
    skip_action_checks,
)


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


def epsilon_greedy_draws(
    value_key: PRNGKeyArray,
    uniform_key: PRNGKeyArray,
    step_key: PRNGKeyArray,
    num_steps: int,
    num_envs: int,
    uniform_shape: tuple[int, ...] = (),
) -> tuple[
    Int[Array, " num_steps"],
    Key[Array, "num_steps num_envs"],
    Float[Array, "num_steps num_envs ..."],
    Key[Array, "num_steps num_envs"],
]:
    """The `inputs` of
    [`epsilon_greedy_collect`][eqxrl.algorithms.epsilon_greedy_collect]: every
    step's randomness drawn up front, in three PRNG calls rather than
    several per step (with the hash computed inline, not XLA's rolled threefry
    loop).

    **Arguments:**

    - `value_key`, `uniform_key`, `step_key`: PRNG keys of the action values (a
      distributional network samples them), of the uniform numbers that explore,
      and of the environments' steps.
    - `num_steps`: steps of every environment.
    - `num_envs`: environments stepped together.
    - `uniform_shape`: the uniform numbers of one environment's step: `()`, one;
      `(num_agents,)`, one per agent of a team.

    **Returns:**

    `(step_index, value_keys, uniforms, step_keys)`: the steps' indices `0, 1,
    ...` (int32), a key per step and environment, `[num_steps, num_envs,
    *uniform_shape]` uniform numbers in `[0, 1)`, and a key per step and
    environment.
    """
    shape = (num_steps, num_envs)
    return (
        jnp.arange(num_steps, dtype=jnp.int32),
        random_split(value_key, shape),
        random_uniform(uniform_key, (*shape, *uniform_shape)),
        random_split(step_key, shape),
    )


def epsilon_greedy_collect(
    act: Callable[..., tuple[PyTree[Array], PyTree[Array]]],
    step_environments: Callable[..., tuple[PyTree, TimeStep]],
    record: Callable[..., tuple[PyTree, TimeStep, PyTree[Array]]],
    carry: tuple[PyTree, TimeStep, PyTree, PyTree[Array]],
    inputs: tuple[Int[Array, " num_steps"], PyTree[Array], PyTree[Array], PyTree],
    first_step: Int[Array, ""],
    num_envs: int,
) -> tuple[tuple[PyTree, TimeStep, PyTree, PyTree[Array]], PyTree[Array]]:
    """Epsilon-greedy collection into a replay buffer, as DQN, IQN, independent
    learners and value decomposition collect: every step, act on the latest
    timesteps (exploring with the rate reached after the environment steps
    collected so far), step the environments, and record the step. A `lax.scan`
    over the steps (the body itself for one step). Environments step without action
    checks: epsilon-greedy actions are valid by construction (masked actions are
    never chosen).

    **Arguments:**

    - `act`: `act(agent_carry, timestep, env_steps, value_keys, uniforms) ->
      (agent_carry, action)`: the actions at `timestep`, the learners' view of
      the latest timesteps, after `env_steps` environment steps in the run (which
      sets epsilon); `agent_carry` is what recurrent agents carry (`None` for
      feed-forward ones).
    - `step_environments`: `step_environments(env_state, action, step_keys) ->
      (env_state, next_timestep)`, every environment stepped once.
    - `record`: `record(buffer, timestep, action, next_timestep) -> (buffer,
      next_view, output)`: the step stored, the learners' view of
      `next_timestep` (what `act` reads next), and what the iteration keeps of
      the step (e.g. its [`ended_episodes`][eqxrl.algorithms.ended_episodes]).
    - `carry`: `(env_state, timestep, buffer, agent_carry)` before the first step.
    - `inputs`: per step (leading `num_steps` axis): its index, the value keys
      and uniform numbers of `act`, and the step keys of `step_environments`;
      [`epsilon_greedy_draws`][eqxrl.algorithms.epsilon_greedy_draws] draws them.
    - `first_step`: environment steps of the run before the first step.
    - `num_envs`: environment steps per step (the count that `env_steps`
      advances by).

    **Returns:**

    `(carry, outputs)`: the carry after the last step, and the `record` outputs
    stacked over the steps.
    """

    def step(carry, inputs):
        env_state, timestep, buffer, agent_carry = carry
        index, value_keys, uniforms, step_keys = inputs
        env_steps = first_step + index * num_envs
        agent_carry, action = act(
            agent_carry, timestep, env_steps, value_keys, uniforms
        )
        env_state, next_timestep = step_environments(env_state, action, step_keys)
        buffer, next_view, output = record(buffer, timestep, action, next_timestep)
        return (env_state, next_view, buffer, agent_carry), output

    with skip_action_checks():
        return scan_or_step(step, carry, inputs)
