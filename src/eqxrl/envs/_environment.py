import abc
from typing import Any, Generic, TypeVar

import equinox as eqx
from jaxtyping import PRNGKeyArray, PyTree

from ._spaces import AbstractSpace
from ._types import TimeStep

StateT = TypeVar("StateT")


class AbstractEnvironment(eqx.Module, Generic[StateT]):
    """A pure-JAX environment: one environment, pure functions, no auto-reset.

    Subclasses hold their parameters as fields (physics constants as arrays, so a
    `jax.vmap` over an environment with batched fields randomizes the domain) and
    implement `reset`, `step` and the two spaces. Batch them with `jax.vmap`; end
    episodes with [`AutoReset`][eqxrl.envs.AutoReset] when a trainer needs it.

    !!! example

        ```python
        env = eqxrl.envs.make("CartPole-v1")
        state, timestep = env.reset(jax.random.key(0))
        state, timestep = env.step(state, jnp.int32(1), jax.random.key(1))
        ```
    """

    @abc.abstractmethod
    def reset(self, key: PRNGKeyArray) -> tuple[StateT, TimeStep]:
        """Start an episode.

        **Arguments:**

        - `key`: a PRNG key for the initial state.

        **Returns:**

        `(state, timestep)`, with `timestep.reward` zero and both flags `False`.
        """

    @abc.abstractmethod
    def step(
        self, state: StateT, action: PyTree[Any], key: PRNGKeyArray
    ) -> tuple[StateT, TimeStep]:
        """Advance one step.

        **Arguments:**

        - `state`: the state returned by the previous `reset` or `step`.
        - `action`: one action from `action_space`.
        - `key`: a PRNG key for any randomness of the transition.

        **Returns:**

        `(next_state, timestep)`. Stepping an episode that has ended is allowed but
        its result is unspecified: reset it (or wrap in `AutoReset`).
        """

    def observation(self, state: StateT) -> PyTree[Any]:
        """The observation of a state (optional).

        Environments whose observation is a function of the state alone may
        implement it; `reset` and `step` must then return `observation(state)` as
        their timestep's observation. [`AutoReset`][eqxrl.envs.AutoReset] uses it
        to build one observation per step, of the state after the reset select,
        instead of building the stepped and the reset observations and selecting
        between them: much cheaper when observations are large (e.g. Snake's
        board). The default raises `NotImplementedError`; see
        `has_state_observation`.

        **Arguments:**

        - `state`: a state returned by `reset` or `step`.

        **Returns:**

        The observation `reset` or `step` returned with `state`.
        """
        raise NotImplementedError(
            f"{type(self).__name__} does not implement observation(state)."
        )

    @property
    def has_state_observation(self) -> bool:
        """Whether `observation(state)` is implemented (`True` when a subclass
        overrides it; wrappers answer for the environment they wrap)."""
        return type(self).observation is not AbstractEnvironment.observation

    @property
    @abc.abstractmethod
    def observation_space(self) -> AbstractSpace:
        """The space observations come from."""

    @property
    @abc.abstractmethod
    def action_space(self) -> AbstractSpace:
        """The space actions come from."""


class AbstractWrapper(AbstractEnvironment[StateT]):
    """An environment built around another one, changing part of its behaviour.

    Wrappers compose, e.g. `AutoReset(EpisodeStatistics(TimeLimit(env, 500)))`.
    The spaces are those of the wrapped environment unless a wrapper overrides them.
    """

    env: eqx.AbstractVar[AbstractEnvironment]

    @property
    def observation_space(self) -> AbstractSpace:
        """The wrapped environment's observation space."""
        return self.env.observation_space

    @property
    def action_space(self) -> AbstractSpace:
        """The wrapped environment's action space."""
        return self.env.action_space


def unwrap(env: AbstractEnvironment) -> list[AbstractEnvironment]:
    """The chain of environments from `env` down to the innermost one."""
    chain = [env]
    while isinstance(chain[-1], AbstractWrapper):
        chain.append(chain[-1].env)
    return chain
