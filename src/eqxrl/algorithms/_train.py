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

        **Arguments:**

        - `observation`: one raw observation.
        - `key`: a PRNG key.
        - `action_mask`: bool `[num_actions]`, or `None`.
        """
        return self.policy.act(observation, key, action_mask)


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
    `act(observation, key, action_mask=None)`), the final `state` and the `metrics`.

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
