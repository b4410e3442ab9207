"""What the replay-based algorithms (DQN, IQN, SAC) share: their base class (the
collection schedule's fields and what follows from them), the checks of that
schedule, the per-step episode statistics, and the target networks' Polyak
averaging and periodic copies."""

from typing import Any

import equinox as eqx
import jax.lax as lax
import jax.tree_util as jtu
from jaxtyping import Array, Float, Int, PyTree

from ..envs import AbstractEnvironment, TimeStep
from ._base import AbstractAlgorithm, StateT


class AbstractOffPolicyAlgorithm(AbstractAlgorithm[StateT]):
    """What the replay-based algorithms ([`DQN`][eqxrl.DQN], [`IQN`][eqxrl.IQN]
    through [`AbstractQLearning`][eqxrl.algorithms.AbstractQLearning], and
    [`SAC`][eqxrl.SAC]) share: an iteration steps `num_envs` auto-resetting
    environments `train_frequency` times, adds every step to a replay buffer of
    `buffer_size` transitions, and (once `learning_starts` environment steps are
    collected) runs `gradient_steps` updates on minibatches of `batch_size`. The
    fields below come first in every subclass, in this order; a subclass changes
    their defaults by declaring them again, and adds its network, loss and update.

    **Arguments:**

    - `env`: the environment (not auto-resetting: the algorithm adds `AutoReset`
      and `EpisodeStatistics` itself).
    - `num_envs`: environments stepped in parallel.
    - `total_timesteps`: environment steps of the whole run; the run has
      `total_timesteps // (num_envs * train_frequency)` iterations.
    - `buffer_size`: transitions the replay buffer keeps.
    - `learning_starts`: environment steps collected before the first update.
    - `train_frequency`: steps of every environment per iteration.
    - `gradient_steps`: updates per iteration.
    - `batch_size`: transitions per update.
    """

    env: AbstractEnvironment
    num_envs: int = eqx.field(static=True, default=1)
    total_timesteps: int = eqx.field(static=True, default=20_000)
    buffer_size: int = eqx.field(static=True, default=100_000)
    learning_starts: int = eqx.field(static=True, default=1_000)
    train_frequency: int = eqx.field(static=True, default=1)
    gradient_steps: int = eqx.field(static=True, default=1)
    batch_size: int = eqx.field(static=True, default=256)

    @property
    def steps_per_iteration(self) -> int:
        """Environment steps collected per iteration: `num_envs * train_frequency`."""
        return self.num_envs * self.train_frequency

    @property
    def num_iterations(self) -> int:
        """Iterations of a run: `total_timesteps // steps_per_iteration`."""
        return self.total_timesteps // self.steps_per_iteration

    @property
    def buffer_capacity(self) -> int:
        """Rows of the replay buffer (`buffer_size // num_envs`); each row holds one
        step of every environment."""
        return self.buffer_size // self.num_envs


def check_replay_schedule(
    name: str,
    algorithm: Any,
    positive_fields: tuple[str, ...],
    min_buffer_size: int,
    min_buffer_text: str,
) -> None:
    """Raise a `ValueError` naming the field unless the schedule of a replay-based
    algorithm can run: positive integer sizes, `learning_starts` reached within
    the run, and a buffer that holds a minibatch and the transitions collected
    before the first update.

    **Arguments:**

    - `name`: the algorithm's name, for the messages.
    - `algorithm`: it (its `num_envs`, `total_timesteps`, `buffer_size`,
      `batch_size`, `learning_starts`, `hidden_sizes`, `steps_per_iteration`,
      `num_iterations`).
    - `positive_fields`: the fields that must be positive integers.
    - `min_buffer_size`: the smallest `buffer_size` it can work with, which
      `min_buffer_text` explains.
    """
    for field in positive_fields:
        value = getattr(algorithm, field)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: {field}={value!r} must be a positive int.")
    learning_starts = algorithm.learning_starts
    if not isinstance(learning_starts, int) or learning_starts < 0:
        raise ValueError(
            f"{name}: learning_starts={learning_starts!r} must be an int >= 0."
        )
    if any(not isinstance(w, int) or w < 1 for w in algorithm.hidden_sizes):
        raise ValueError(
            f"{name}: hidden_sizes={algorithm.hidden_sizes} must be positive integers."
        )
    steps_per_iteration = algorithm.steps_per_iteration
    if algorithm.total_timesteps < steps_per_iteration:
        raise ValueError(
            f"{name}: total_timesteps={algorithm.total_timesteps} is less than one "
            f"iteration (num_envs * train_frequency = {steps_per_iteration});"
            " raise total_timesteps or lower num_envs / train_frequency."
        )
    last_collected = algorithm.num_iterations * steps_per_iteration
    if learning_starts > last_collected:
        raise ValueError(
            f"{name}: learning_starts={learning_starts} exceeds the "
            f"{last_collected} environment steps of the run, so it would never "
            "update; lower learning_starts or raise total_timesteps."
        )
    buffer_size, num_envs = algorithm.buffer_size, algorithm.num_envs
    if buffer_size < min_buffer_size:
        raise ValueError(
            f"{name}: buffer_size={buffer_size} must hold at least {min_buffer_text}."
        )
    if algorithm.batch_size > buffer_size:
        raise ValueError(
            f"{name}: batch_size={algorithm.batch_size} is larger than "
            f"buffer_size={buffer_size}: a minibatch would repeat "
            "transitions; raise buffer_size or lower batch_size."
        )
    # The buffer keeps whole rows of num_envs steps: buffer_size rounded down.
    stored = buffer_size // num_envs * num_envs
    if stored < learning_starts:
        raise ValueError(
            f"{name}: the buffer holds {stored} transitions "
            f"(buffer_size={buffer_size} rounded down to whole rows of "
            f"num_envs={num_envs}), fewer than "
            f"learning_starts={learning_starts}: it would drop transitions "
            "before the first update; raise buffer_size or lower learning_starts."
        )


def episode_step_statistics(next_timestep: TimeStep) -> dict[str, Array]:
    """What `ended_episode_metrics` needs of a (batched) step: whether an episode
    ended, and the return and length `EpisodeStatistics` recorded."""
    return {
        "done": next_timestep.terminated | next_timestep.truncated,
        "episode_return": next_timestep.extras["episode_return"],
        "episode_length": next_timestep.extras["episode_length"],
    }


def polyak_update(
    online: PyTree[Array],
    target: PyTree[Array],
    tau: Float[Array, ""],
    update_index: Int[Array, ""],
    interval: int,
) -> PyTree[Array]:
    """The target parameters after update `update_index`: moved a fraction `tau`
    toward the online ones every `interval` updates, unchanged in between."""

    def soft_update(online: PyTree, target: PyTree) -> PyTree:
        return jtu.tree_map(lambda o, t: tau * o + (1.0 - tau) * t, online, target)

    if interval == 1:
        return soft_update(online, target)
    due = (update_index + 1) % interval == 0
    return lax.cond(due, soft_update, lambda _, t: t, online, target)


def copy_if_due(
    online: PyTree[Array],
    target: PyTree[Array],
    update_index: Int[Array, ""],
    interval: int,
) -> PyTree[Array]:
    """The target parameters after update `update_index`: a copy of the online ones
    every `interval` updates, unchanged in between."""
    due = (update_index + 1) % interval == 0
    return lax.cond(due, lambda o, _: o, lambda _, t: t, online, target)
