"""From the multi-agent convention to what a single-agent learner sees: timesteps
split per agent, and the agent index appended to observations for a shared
network."""

import abc
from typing import Any, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray, PyTree

from ..algorithms import (
    AbstractAlgorithm,
    iteration_episode_metrics,
)
from ..envs import (
    FINAL_GLOBAL_STATE,
    GLOBAL_STATE,
    AbstractEnvironment,
    AbstractSpace,
    Box,
    TimeStep,
    num_agents_of,
)

StateT = TypeVar("StateT")


class AbstractTeamAlgorithm(AbstractAlgorithm[StateT]):
    """A multi-agent algorithm built on one single-agent `algorithm` configured on
    the multi-agent environment: its environment, schedule and compiler options
    are the algorithm's."""

    algorithm: eqx.AbstractVar[AbstractAlgorithm]

    @property
    def env(self) -> AbstractEnvironment:
        """The multi-agent environment (the algorithm's)."""
        return self.algorithm.env

    @property
    def num_agents(self) -> int:
        """The number of agents of the environment."""
        num_agents = num_agents_of(self.env)
        assert num_agents is not None
        return num_agents

    @property
    def num_envs(self) -> int:
        """Worlds stepped in parallel (the algorithm's `num_envs`)."""
        return self.algorithm.num_envs

    @property
    def steps_per_iteration(self) -> int:
        """World steps per iteration (the algorithm's; every agent acts in each)."""
        return self.algorithm.steps_per_iteration

    @property
    def num_iterations(self) -> int:
        return self.algorithm.num_iterations

    @property
    def compiler_options(self) -> dict[str, Any]:
        """The algorithm's."""
        return self.algorithm.compiler_options


# The extras that belong to one agent (they mirror per-agent fields: AutoReset's
# final observation, the final action mask kept by the Q-learners, EpisodeStatistics'
# return, which has the reward's shape, from_jaxmarl's per-agent dones). Every other
# extra is about the world.
PER_AGENT_EXTRAS = (
    "final_observation",
    "final_action_mask",
    "episode_return",
    "agent_dones",
)


def _per_agent_fields(timestep: TimeStep) -> dict[str, bool]:
    return {key: key in PER_AGENT_EXTRAS for key in timestep.extras}


def agent_major(timestep: TimeStep, num_agents: int) -> TimeStep:
    """A batch of multi-agent timesteps (`[num_envs, num_agents, ...]` per-agent
    leaves, `[num_envs, ...]` world leaves) as one single-agent batch per agent:
    every leaf `[num_agents, num_envs, ...]`, world leaves (`terminated`,
    `truncated`, world extras) repeated for every agent."""

    def agents_first(x: Array) -> Array:
        return jnp.swapaxes(x, 0, 1)

    def repeated(x: Array) -> Array:
        return jnp.broadcast_to(x[None], (num_agents, *x.shape))

    extras = {
        key: jax.tree.map(agents_first if per_agent else repeated, value)
        for (key, value), per_agent in zip(
            timestep.extras.items(), _per_agent_fields(timestep).values()
        )
    }
    return replace_fields(
        timestep,
        observation=jax.tree.map(agents_first, timestep.observation),
        reward=agents_first(timestep.reward),
        terminated=repeated(timestep.terminated),
        truncated=repeated(timestep.truncated),
        action_mask=jax.tree.map(agents_first, timestep.action_mask),
        extras=extras,
    )


def without_global_state(timestep: TimeStep) -> TimeStep:
    """`timestep` without its global state (`extras["global_state"]`, and
    `AutoReset`'s `"final_global_state"`), for learners that do not read it, so
    that they do not carry it."""
    dropped = (GLOBAL_STATE, FINAL_GLOBAL_STATE)
    if not any(key in timestep.extras for key in dropped):
        return timestep
    extras = {k: v for k, v in timestep.extras.items() if k not in dropped}
    return replace_fields(timestep, extras=extras)


def replace_fields(timestep: TimeStep, **fields: Any) -> TimeStep:
    """`timestep` with new fields, without `TimeStep.__init__` (whose shape checks
    are for one example; these are batches)."""
    names = tuple(fields)
    return eqx.tree_at(
        lambda t: tuple(getattr(t, name) for name in names),
        timestep,
        tuple(fields.values()),
        is_leaf=lambda x: x is None,
    )


def with_agent_index(
    observation: Float[Array, "..."], agent: Int[Array, ""] | int, num_agents: int
) -> Float[Array, " features"]:
    """One agent's observation flattened, with the one-hot agent index appended
    (what a network shared by all agents sees)."""
    one_hot = jax.nn.one_hot(agent, num_agents, dtype=jnp.float32)
    return jnp.concatenate([jnp.ravel(observation).astype(jnp.float32), one_hot])


def every_agent_with_index(
    observation: Float[Array, "num_agents ..."], num_agents: int
) -> Float[Array, "num_agents features"]:
    """`with_agent_index` for every agent of one world."""
    agents = jnp.arange(num_agents, dtype=jnp.int32)
    return jax.vmap(lambda o, a: with_agent_index(o, a, num_agents))(
        observation, agents
    )


def flat_with_agent_index(timestep: TimeStep, num_agents: int) -> TimeStep:
    """A batch of multi-agent timesteps as one single-agent batch of
    `num_envs * num_agents` (world-major: agent `a` of world `n` at `n *
    num_agents + a`), each observation flattened with the one-hot agent index
    appended (also `final_observation`)."""

    def with_index(observations: Array) -> Array:  # [num_envs, num_agents, ...]
        return jax.vmap(lambda o: every_agent_with_index(o, num_agents))(observations)

    extras = dict(timestep.extras)
    if "final_observation" in extras:
        extras["final_observation"] = with_index(extras["final_observation"])
    timestep = replace_fields(
        timestep, observation=with_index(timestep.observation), extras=extras
    )
    return world_major_columns(timestep, num_agents)


def world_major_columns(timestep: TimeStep, num_agents: int) -> TimeStep:
    """A batch of multi-agent timesteps as one single-agent batch of
    `num_envs * num_agents` columns, world-major (agent `a` of world `n` at `n *
    num_agents + a`): per-agent leaves `[num_envs, num_agents, ...]` merged, world
    leaves repeated for every agent. The observation (already one column per
    agent, `[num_envs, num_agents, ...]` leaves) is merged as it is."""

    def flat(x: Array) -> Array:
        return x.reshape(-1, *x.shape[2:])

    def repeated(x: Array) -> Array:
        return jnp.repeat(x, num_agents, axis=0)

    extras = {
        key: jax.tree.map(flat if key in PER_AGENT_EXTRAS else repeated, value)
        for key, value in timestep.extras.items()
    }
    return replace_fields(
        timestep,
        observation=jax.tree.map(flat, timestep.observation),
        reward=flat(timestep.reward),
        terminated=repeated(timestep.terminated),
        truncated=repeated(timestep.truncated),
        action_mask=jax.tree.map(flat, timestep.action_mask),
        extras=extras,
    )


def shared_observation_space(space: AbstractSpace, num_agents: int) -> Box:
    """The observation space of a network shared by all agents: one agent's `Box`
    flattened, then the one-hot agent index (in `[0, 1]`)."""
    low = jnp.ravel(jnp.broadcast_to(space.low, space.shape))
    high = jnp.ravel(jnp.broadcast_to(space.high, space.shape))
    return Box(
        jnp.concatenate([low, jnp.zeros(num_agents, jnp.float32)]),
        jnp.concatenate([high, jnp.ones(num_agents, jnp.float32)]),
    )


class AbstractAgentView(AbstractEnvironment):
    """One agent's view of a multi-agent environment, for building the network a
    learner trains (a `network_factory` receives it): `reset` gives agent 0's
    view, and `step` moves every agent with the same action. Learners are trained
    on the multi-agent environment itself. Subclasses say what agent 0 reads."""

    env: eqx.AbstractVar[AbstractEnvironment]
    num_agents: eqx.AbstractVar[int]

    @abc.abstractmethod
    def first_agent_observation(self, timestep: TimeStep) -> PyTree[Array]:
        """What agent 0's network reads of one world's multi-agent timestep."""

    @property
    def action_space(self) -> AbstractSpace:
        return self.env.action_space

    def _view(self, timestep: TimeStep) -> TimeStep:
        return TimeStep(
            observation=self.first_agent_observation(timestep),
            reward=timestep.reward[0],
            terminated=timestep.terminated,
            truncated=timestep.truncated,
            action_mask=jax.tree.map(lambda x: x[0], timestep.action_mask),
        )

    def reset(self, key: PRNGKeyArray) -> tuple[PyTree, TimeStep]:
        state, timestep = self.env.reset(key)
        return state, self._view(timestep)

    def step(self, state: PyTree, action: Any, key: PRNGKeyArray):
        joint = jnp.broadcast_to(action, (self.num_agents, *jnp.shape(action)))
        state, timestep = self.env.step(state, joint, key)
        return state, self._view(timestep)


class SharedObservations(AbstractAgentView):
    """What a network shared by all agents sees of a multi-agent environment: one
    agent's observation flattened with its one-hot agent index appended, and one
    agent's actions. It describes inputs for building the network (and for a
    `network_factory`): `reset` gives agent 0's view, and `step` moves every agent
    with the same action; learners are trained on the multi-agent environment
    itself.

    **Arguments:**

    - `env`: the multi-agent environment.
    - `num_agents`: its number of agents.
    """

    env: AbstractEnvironment
    num_agents: int = eqx.field(static=True)

    @property
    def observation_space(self) -> Box:
        return shared_observation_space(self.env.observation_space, self.num_agents)

    def first_agent_observation(self, timestep: TimeStep) -> Array:
        return with_agent_index(timestep.observation[0], 0, self.num_agents)


def team_episode_metrics(
    done: Bool[Array, "steps num_envs"], statistics: dict[str, Any]
) -> dict[str, Array]:
    """Per agent, the mean return of the episodes that ended in an iteration
    (`episode_return`, `[num_agents]`), their sum (`total_episode_return`, the
    team's return), the episodes' mean length and count, and the worlds' own
    metrics (domain parameters, a curriculum's difficulty): from the iteration's
    [`ended_episodes`][eqxrl.algorithms.ended_episodes] (`done` `[steps,
    num_envs]`, `episode_return` `[steps, num_envs, num_agents]`)."""
    per_agent = jax.vmap(
        lambda r: iteration_episode_metrics(done, {**statistics, "episode_return": r})
    )(jnp.moveaxis(statistics["episode_return"], -1, 0))
    returns = per_agent.pop("episode_return")
    metrics = {"episode_return": returns, "total_episode_return": jnp.sum(returns)}
    # The episodes' lengths and the worlds' metrics are every agent's. (Lengths
    # and counts first, in the order programs always computed them: unchanged
    # programs, by benchmarks/program_hashes.py.)
    others = sorted(set(per_agent) - {"episode_length", "episode_count"})
    for name in ("episode_length", "episode_count", *others):
        metrics[name] = per_agent[name][0]
    return metrics
