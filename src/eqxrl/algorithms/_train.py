import dataclasses
from typing import Any

import equinox as eqx
import jax
from jaxtyping import Array, Bool, PRNGKeyArray, PyTree

from ..envs import AbstractEnvironment, make
from ..nn import AbstractPolicy
from ._base import AbstractAlgorithm
from ._registry import get_algorithm


class TrainResult(eqx.Module):
    """What [`eqxrl.train`][eqxrl.train] returns.

    **Arguments:**

    - `algorithm`: the configured algorithm (hyperparameters included).
    - `state`: the final training state.
    - `metrics`: per-iteration metrics, each of shape `[num_iterations]`.
    - `policy`: the trained policy (stochastic; see `greedy_policy`).

    A feed-forward policy acts with `act(observation, key)`; a recurrent one
    (e.g. `network_factory=eqxrl.nn.GRUActorCritic.from_env`) with
    `carry, action = step(carry, observation, key)`, starting each episode from
    `initial_carry()`.
    """

    algorithm: AbstractAlgorithm
    state: PyTree
    metrics: dict[str, Array]
    policy: AbstractPolicy

    @property
    def greedy_policy(self) -> AbstractPolicy:
        """The trained policy acting deterministically (most probable action)."""
        return self.algorithm.policy(self.state, deterministic=True)

    def act(
        self,
        observation: PyTree[Array],
        key: PRNGKeyArray,
        action_mask: Bool[Array, " num_actions"] | None = None,
    ) -> Array:
        """Sample an action of the trained policy for one observation (jitted).

        A recurrent policy needs the carry of the episode's earlier steps: act
        with `step` instead (this raises a `TypeError` that says so).

        **Arguments:**

        - `observation`: one raw observation.
        - `key`: a PRNG key.
        - `action_mask`: bool `[num_actions]`, or `None`.

        **Returns:**

        The action (int32 scalar for discrete action spaces).
        """
        if self.policy.is_recurrent:
            raise TypeError(
                "TrainResult.act: the trained policy is recurrent, so an action "
                "depends on the episode's earlier observations. Act with "
                "`carry, action = result.step(carry, observation, key)`, starting "
                "each episode from `carry = result.initial_carry()`."
            )
        return self.policy.act(observation, key, action_mask)

    def initial_carry(self) -> PyTree[Array] | None:
        """The trained policy's carry at an episode's start (`None` for a
        feed-forward policy): what `step` reads with an episode's first
        observation."""
        return self.policy.initial_carry()

    def step(
        self,
        carry: PyTree[Array] | None,
        observation: PyTree[Array],
        key: PRNGKeyArray,
        action_mask: Bool[Array, " num_actions"] | None = None,
    ) -> tuple[PyTree[Array] | None, Array]:
        """Sample an action of the trained policy for one observation, with the
        carry of the episode's earlier steps (jitted): for recurrent policies, and
        for any policy in a loop that should not care which kind it has.

        **Arguments:**

        - `carry`: `initial_carry()` at an episode's first observation (after a
          reset), else the carry `step` returned at the previous one.
        - `observation`: one raw observation.
        - `key`: a PRNG key.
        - `action_mask`: bool `[num_actions]`, or `None`.

        **Returns:**

        `(next_carry, action)`; a feed-forward policy returns `carry` unchanged.

        !!! example

            ```python
            result = eqxrl.train(
                "StatelessCartPole-v1",
                network_factory=eqxrl.nn.GRUActorCritic.from_env,
                total_timesteps=100_000,
            )
            env = result.algorithm.env
            key, reset_key = jax.random.split(jax.random.key(0))
            env_state, timestep = env.reset(reset_key)
            carry = result.initial_carry()  # at every reset
            while not (timestep.terminated or timestep.truncated):
                key, action_key, step_key = jax.random.split(key, 3)
                carry, action = result.step(carry, timestep.observation, action_key)
                env_state, timestep = env.step(env_state, action, step_key)
            ```
        """
        return _policy_step(self.policy, carry, observation, key, action_mask)


@eqx.filter_jit
def _policy_step(
    policy: AbstractPolicy,
    carry: PyTree[Array] | None,
    observation: PyTree[Array],
    key: PRNGKeyArray,
    action_mask: Bool[Array, " num_actions"] | None,
) -> tuple[PyTree[Array] | None, Array]:
    return policy.step(carry, observation, key, action_mask)


def train(
    env: AbstractEnvironment | str,
    algorithm: str = "ppo",
    *,
    total_timesteps: int | None = None,
    num_envs: int | None = None,
    learning_rate: float | None = None,
    seed: int = 0,
    **hyperparameters: Any,
) -> TrainResult:
    """Train an agent in one call (the whole run is one compiled program).

    For users coming from Brax's `ppo.train` or Stable-Baselines3's `learn`.

    **Arguments:**

    - `env`: an environment, or the id of a registered one (e.g. `"CartPole-v1"`).
    - `algorithm`: a registered algorithm name (`"ppo"`, ...).
    - `total_timesteps`, `num_envs`, `learning_rate`: the common hyperparameters;
      `None` keeps the algorithm's default.
    - `seed`: the random seed of the run.
    - `**hyperparameters`: any other field of the algorithm (e.g. `gamma`,
      `num_steps`, `ent_coef` for PPO). Unknown names raise a `TypeError` that lists
      the valid ones.

    **Returns:**

    A [`TrainResult`][eqxrl.TrainResult] with the trained `policy` (and its jitted
    `act(observation, key, action_mask=None)`, or for a recurrent network
    `step(carry, observation, key, action_mask=None)` from `initial_carry()`), the
    final `state` and the `metrics`.

    !!! example

        ```python
        result = eqxrl.train("CartPole-v1", total_timesteps=200_000, seed=1)
        action = result.act(observation, jax.random.key(0))
        ```
    """
    algorithm_class = get_algorithm(algorithm)
    if isinstance(env, str):
        env = make(env)
    valid = [
        field.name
        for field in dataclasses.fields(algorithm_class)
        if field.name != "env" and field.init
    ]
    unknown = sorted(set(hyperparameters) - set(valid))
    if unknown:
        raise TypeError(
            f"eqxrl.train: unknown hyperparameter(s) {unknown} for {algorithm!r}; "
            f"valid ones are: {', '.join(sorted(valid))}."
        )
    common = dict(
        total_timesteps=total_timesteps, num_envs=num_envs, learning_rate=learning_rate
    )
    for name, value in common.items():
        if value is not None:
            if name not in valid:
                raise TypeError(f"eqxrl.train: {algorithm!r} has no {name!r}.")
            hyperparameters[name] = value
    configured = algorithm_class(env=env, **hyperparameters)
    state, metrics = configured.train(jax.random.key(seed))
    return TrainResult(
        algorithm=configured,
        state=state,
        metrics=metrics,
        policy=configured.policy(state),
    )
