from typing import Any

import equinox as eqx
from jaxtyping import Array, Bool, Float, PyTree


class Transition(eqx.Module):
    """One environment step as an on-policy learner stores it (one environment).

    Built per environment inside the vmapped rollout step; a rollout stacks them to
    `[num_steps, num_envs, ...]` leaves.

    **Arguments:**

    - `observation`: the observation the action was chosen from.
    - `action`: the action taken.
    - `log_prob`: log-probability of `action` under the behaviour policy.
    - `value`: the critic's value of `observation`.
    - `reward`, `terminated`, `truncated`: what the step returned.
    - `action_mask`: the mask the action was sampled under (`None` if unmasked); the
      update evaluates the policy under the same mask.
    - `extras`: per-step statistics from the environment, e.g. `episode_return`.
    """

    observation: PyTree[Array]
    action: Array
    log_prob: Float[Array, ""]
    value: Float[Array, ""]
    reward: Float[Array, ""]
    terminated: Bool[Array, ""]
    truncated: Bool[Array, ""]
    action_mask: Bool[Array, " num_actions"] | None
    extras: dict[str, Any]
