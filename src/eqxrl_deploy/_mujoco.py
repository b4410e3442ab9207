"""Episodes of a policy in host MuJoCo (the `mujoco` package, no MJX, no JAX)."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class RolloutResult:
    """What [`run_mujoco`][eqxrl_deploy.run_mujoco] measured.

    **Arguments:**

    - `returns`: each episode's summed reward, float64 `[episodes]`.
    - `lengths`: each episode's number of control steps, int64 `[episodes]`.
    - `terminated`: whether each episode ended through `terminate` (rather than
      reaching `episode_length`), bool `[episodes]`.
    """

    returns: np.ndarray
    lengths: np.ndarray
    terminated: np.ndarray

    @property
    def mean_return(self) -> float:
        """The mean of `returns`."""
        return float(np.mean(self.returns))


def run_mujoco(
    policy: Callable[[np.ndarray], Any],
    model: Any,
    *,
    observe: Callable[[Any, Any], np.ndarray],
    reward: Callable[[Any, Any, np.ndarray], float],
    reset: Callable[[Any, Any, np.random.Generator], None],
    episode_length: int,
    episodes: int,
    n_substeps: int = 1,
    seed: int = 0,
    terminate: Callable[[Any, Any], bool] | None = None,
) -> RolloutResult:
    """Run a policy in a host MuJoCo model, one episode after another, and sum its
    rewards: sim-to-sim, the last check before a robot.

    Each episode: `mujoco.mj_resetData`, then `reset(model, data, rng)` (set `qpos`,
    `qvel`, ...), then `mujoco.mj_forward`, and `policy.reset()` where the policy has
    one (an [`OnnxPolicy`][eqxrl_deploy.OnnxPolicy] restarts its carry). Each control
    step: `action = policy(observe(model, data))` is written to `data.ctrl`,
    `mujoco.mj_step` runs `n_substeps` times, then `reward(model, data, action)` is
    added to the return and the episode ends if `terminate(model, data)` holds.

    The order matches MuJoCo Playground's and Brax's MJX environments (reward and next
    observation read from the data after the physics steps, with no extra
    `mj_forward`), so a NumPy port of an MJX environment's observation and reward
    reads the same quantities.

    **Arguments:**

    - `policy`: a callable from one observation to one action (e.g. an
      `OnnxPolicy`); its `reset()`, if it has one, is called at each episode's start.
    - `model`: a `mujoco.MjModel`; its `opt.timestep` is the physics step.
    - `observe`: `observe(model, data) -> observation`.
    - `reward`: `reward(model, data, action) -> float`, after the physics steps.
    - `reset`: `reset(model, data, rng)` sets the episode's initial state in place;
      `rng` is a `numpy.random.Generator`.
    - `episode_length`: the most control steps an episode takes.
    - `episodes`: how many episodes.
    - `n_substeps`: physics steps per control step (`ctrl_dt / sim_dt`).
    - `seed`: the seed of `rng`.
    - `terminate`: `terminate(model, data) -> bool`, checked after each step; by
      default an episode ends only when a state turns non-finite (as Playground's
      `done`) or at `episode_length`.

    **Returns:**

    A [`RolloutResult`][eqxrl_deploy.RolloutResult].

    !!! example

        ```python
        import mujoco
        import eqxrl_deploy

        model = mujoco.MjModel.from_xml_path("cartpole.xml")
        result = eqxrl_deploy.run_mujoco(
            eqxrl_deploy.OnnxPolicy("policy.onnx"), model,
            observe=observe, reward=reward, reset=reset,
            episode_length=1000, episodes=16,
        )
        print(result.mean_return)
        ```
    """
    import mujoco

    if episode_length < 1 or episodes < 1 or n_substeps < 1:
        raise ValueError(
            "run_mujoco: episode_length, episodes and n_substeps must be positive, "
            f"not {episode_length}, {episodes} and {n_substeps}."
        )
    rng = np.random.default_rng(seed)
    data = mujoco.MjData(model)
    returns = np.zeros(episodes)
    lengths = np.zeros(episodes, np.int64)
    terminated = np.zeros(episodes, np.bool_)
    for episode in range(episodes):
        mujoco.mj_resetData(model, data)
        reset(model, data, rng)
        mujoco.mj_forward(model, data)
        if callable(getattr(policy, "reset", None)):
            policy.reset()
        total = 0.0
        for step in range(episode_length):
            action = np.asarray(policy(observe(model, data)), np.float64)
            data.ctrl[:] = action.reshape(data.ctrl.shape)
            for _ in range(n_substeps):
                mujoco.mj_step(model, data)
            total += float(reward(model, data, action))
            ended = (
                terminate(model, data)
                if terminate is not None
                else not (np.isfinite(data.qpos).all() and np.isfinite(data.qvel).all())
            )
            if ended:
                terminated[episode] = True
                break
        returns[episode] = total
        lengths[episode] = step + 1
    return RolloutResult(returns, lengths, terminated)
