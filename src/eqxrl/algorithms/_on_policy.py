"""What the rollout-and-epochs learners (PPO, PQN) share: their base class, the
rollout schedule's fields and what follows from them."""

import equinox as eqx

from ..envs import AbstractEnvironment
from ._base import AbstractAlgorithm, StateT


class AbstractOnPolicyAlgorithm(AbstractAlgorithm[StateT]):
    """What the learners that update on their latest rollout ([`PPO`][eqxrl.PPO],
    [`PQN`][eqxrl.PQN]) share: an iteration steps `num_envs` auto-resetting
    environments `num_steps` times, then takes `num_epochs` passes over that
    rollout in `num_minibatches` minibatches, and a run is `total_timesteps` steps.
    The fields below come first in every subclass, in this order; a subclass
    changes their defaults by declaring them again, and adds its networks, targets
    and loss.

    **Arguments:**

    - `env`: the environment (not auto-resetting: the algorithm adds `AutoReset`
      and `EpisodeStatistics` itself).
    - `num_envs`: environments stepped in parallel.
    - `num_steps`: steps of every environment per iteration.
    - `total_timesteps`: environment steps of the whole run; the run has
      `total_timesteps // (num_envs * num_steps)` iterations.
    - `num_epochs`: passes over each rollout.
    - `num_minibatches`: minibatches per pass.
    """

    env: AbstractEnvironment
    num_envs: int = eqx.field(static=True, default=4)
    num_steps: int = eqx.field(static=True, default=128)
    total_timesteps: int = eqx.field(static=True, default=500_000)
    num_epochs: int = eqx.field(static=True, default=4)
    num_minibatches: int = eqx.field(static=True, default=4)

    @property
    def steps_per_iteration(self) -> int:
        """Environment steps collected per iteration: `num_envs * num_steps`."""
        return self.num_envs * self.num_steps

    @property
    def num_iterations(self) -> int:
        """Iterations of a run: `total_timesteps // steps_per_iteration`."""
        return self.total_timesteps // self.steps_per_iteration

    @property
    def minibatch_size(self) -> int:
        """Transitions per minibatch: `num_envs * num_steps // num_minibatches`."""
        return self.steps_per_iteration // self.num_minibatches
