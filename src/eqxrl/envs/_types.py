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

    In a multi-agent environment (an
    [`AbstractMultiAgentEnvironment`][eqxrl.envs.AbstractMultiAgentEnvironment]),
    every per-agent field (`observation`, `reward`, `action_mask`) has a leading
    `num_agents` axis, while `terminated` and `truncated` stay scalars: the episode
    ends for every agent at once. See
    [multi-agent environments][multi-agent].

    **Arguments:**

    - `observation`: the observation (an array or a pytree of arrays); with
      `num_agents` agents, every leaf has a leading `num_agents` axis.
    - `reward`: float32 scalar reward of the step that led here (zero after `reset`);
      float32 `[num_agents]` with several agents, one reward per agent.
    - `terminated`: bool scalar, the episode reached a terminal state.
    - `truncated`: bool scalar, the episode was cut short (it may continue in
      principle).
    - `action_mask`: bool `[num_actions]` (`[num_agents, num_actions]` with several
      agents), `True` where an action is valid in this state, or `None` when every
      action is always valid.
    - `extras`: a dict of extra per-step information. Wrappers add to it, e.g.
      `final_observation` ([`AutoReset`][eqxrl.envs.AutoReset]) and `episode_return`
      ([`EpisodeStatistics`][eqxrl.envs.EpisodeStatistics]).
    """

    # `*num_agents` is empty (one agent) or one axis (several agents); the shape
    # checker binds it once per TimeStep, so a reward of one agent with a mask of
    # several (or the other way round) is refused, and `__check_init__` refuses more
    # than one agent axis.
    observation: PyTree[Array]
    reward: Float[Array, "*num_agents"]
    terminated: Bool[Array, ""]
    truncated: Bool[Array, ""]
    action_mask: Bool[Array, "*num_agents num_actions"] | None = None
    extras: dict[str, Any] = eqx.field(default_factory=dict)

    def __check_init__(self):
        # Trace-time only (shapes), so free inside jit; the shape checker may be
        # off (EQXRL_TYPECHECK=0) but this is not.
        shape = getattr(self.reward, "shape", None)
        if shape is not None and len(shape) > 1:
            raise ValueError(
                f"TimeStep: reward has shape {tuple(shape)}; it must be a scalar "
                "(one agent) or a vector [num_agents] (several agents). Build "
                "TimeSteps for one environment and batch them with jax.vmap."
            )
