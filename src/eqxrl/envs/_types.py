from typing import Any

import equinox as eqx
from jaxtyping import Array, Bool, Float, PyTree


class TimeStep(eqx.Module):
    """What an environment returns from `reset` and `step`, for one environment.

    Termination (the episode reached a terminal state: do not bootstrap) and truncation
    (the episode was cut short, e.g. by a time limit: bootstrap from the last state) are
    kept apart everywhere; see [concepts][termination-vs-truncation].

    `reset` and `step` of one environment return TimeSteps with the same pytree
    structure, shapes and dtypes, so `(state, timestep)` can be carried through
    `jax.lax.scan`.

    **Arguments:**

    - `observation`: the observation (an array or a pytree of arrays).
    - `reward`: float32 scalar reward of the step that led here (zero after `reset`).
    - `terminated`: bool scalar, the episode reached a terminal state.
    - `truncated`: bool scalar, the episode was cut short (it may continue in
      principle).
    - `action_mask`: bool vector `[num_actions]`, `True` where an action is valid in
      this state, or `None` when every action is always valid.
    - `extras`: a dict of extra per-step information. Wrappers add to it, e.g.
      `final_observation` ([`AutoReset`][eqxrl.envs.AutoReset]) and `episode_return`
      ([`EpisodeStatistics`][eqxrl.envs.EpisodeStatistics]).
    """

    observation: PyTree[Array]
    reward: Float[Array, ""]
    terminated: Bool[Array, ""]
    truncated: Bool[Array, ""]
    action_mask: Bool[Array, " num_actions"] | None = None
    extras: dict[str, Any] = eqx.field(default_factory=dict)
