"""MAPPO: PPO with a centralized critic (centralized training, decentralized
execution), on the independent learners' machinery."""

import dataclasses
import functools
from collections.abc import Callable
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray, PyTree

from ..algorithms import PPO, AbstractAlgorithm
from ..envs import (
    GLOBAL_STATE,
    AbstractEnvironment,
    AbstractSpace,
    Box,
    Dict,
    TimeStep,
    global_state_space_of,
)
from ..nn import AbstractPolicy
from ._agents import (
    AbstractAgentView,
    agent_major,
    replace_fields,
    without_global_state,
    world_major_columns,
)
from ._independent import AGENT_AXIS, AbstractPerAgentLearners, IndependentState
from ._policy import IndependentPolicy, SharedPolicy

# The keys of the observation a MAPPO network reads: the agent's own observation
# and, with shared parameters, its one-hot index (the actor's), and the critic's
# input (the critic's only).
OBSERVATION = "observation"
AGENT = "agent"
CRITIC = "critic"

CRITIC_INPUTS: tuple[str, ...] = ("global_state", "concatenated", "agent_specific")

# The team's clip scales every agent's gradient so that the largest norm is this
# fraction of `max_grad_norm`: PPO's own clip (of each agent's gradient, after it)
# then never triggers on a rounding difference, and every copy of the shared
# parameters receives the same update.
_TEAM_CLIP_MARGIN = 1.0 - 1e-4


def synchronized_shared_gradients(
    shared_mask: Callable[[PyTree], PyTree[bool]], max_grad_norm: Float[Array, ""]
) -> optax.GradientTransformation:
    """The gradient transformation of [`MAPPO`][eqxrl.multiagent.MAPPO]'s learners
    when the agents share one part of the network (the actor or the critic) and
    not the other. The learners are stacked on the agent axis (`vmap` with
    `axis_name="agents"`), each with a copy of the shared part; this makes the
    copies one network trained on every agent's data:

    - the shared part's gradient is the mean of the agents' (the gradient of the
      loss over the whole team's minibatch, as one shared network's);
    - every agent's gradient is scaled by one factor, so that the largest norm is
      within `max_grad_norm` (the team's global-norm clip, in place of each
      agent's own, which then does nothing).

    Equal gradients into equal Adam states give equal updates, so copies that
    start equal stay equal, bit for bit.

    **Arguments:**

    - `shared_mask`: a function of the gradients (a tree of the network's
      structure) returning `True` on the shared leaves.
    - `max_grad_norm`: PPO's clip.
    """

    def init(params: PyTree) -> optax.EmptyState:
        del params
        return optax.EmptyState()

    def update(updates: PyTree, state: optax.EmptyState, params: PyTree = None):
        del params
        updates = jax.tree.map(
            lambda g, shared: jax.lax.pmean(g, AGENT_AXIS) if shared else g,
            updates,
            shared_mask(updates),
        )
        largest = jax.lax.pmax(optax.tree.norm(updates), AGENT_AXIS)
        bound = _TEAM_CLIP_MARGIN * max_grad_norm
        scale = jnp.where(largest > bound, bound / largest, 1.0)
        return jax.tree.map(lambda g: g * scale, updates), state

    return optax.GradientTransformation(init, update)


def _flat_box(space: Box) -> tuple[Array, Array]:
    low = jnp.ravel(jnp.broadcast_to(space.low, space.shape))
    high = jnp.ravel(jnp.broadcast_to(space.high, space.shape))
    return low, high


def critic_space(env: AbstractEnvironment, num_agents: int, critic_input: str) -> Box:
    """The space of what a MAPPO critic reads of one agent (see
    [`MAPPO`][eqxrl.multiagent.MAPPO]'s `critic_input`)."""
    if critic_input == "global_state":
        space = global_state_space_of(env)
        assert space is not None
        return space
    if critic_input == "agent_specific":
        low, high = _flat_box(global_state_space_of(env))
        return Box(
            jnp.concatenate([low, jnp.zeros(num_agents, jnp.float32)]),
            jnp.concatenate([high, jnp.ones(num_agents, jnp.float32)]),
        )
    low, high = _flat_box(env.observation_space)
    return Box(jnp.tile(low, num_agents), jnp.tile(high, num_agents))


def _check_world(observation: PyTree[Array], num_agents: int, where: str) -> None:
    """One world's observation has the agent axis first: the trace-time error
    that a batch in the wrong layout (`[num_agents, num_envs, ...]` where
    `[num_envs, num_agents, ...]` is expected, or the reverse) meets."""
    for leaf in jax.tree.leaves(observation):
        if leaf.ndim == 0 or leaf.shape[0] != num_agents:
            raise ValueError(
                f"{where}: an observation leaf of one world has shape "
                f"{tuple(leaf.shape)}, whose first axis is not the "
                f"{num_agents} agents; batches of worlds are world-major, "
                f"[num_envs, num_agents, ...]."
            )


class CentralizedCriticView(AbstractAgentView):
    """What a [`MAPPO`][eqxrl.multiagent.MAPPO] network reads of a multi-agent
    environment: a `Dict` observation with the agent's own observation
    (`"observation"`), its one-hot index when the agents share the network
    (`"agent"`), and the critic's input (`"critic"`, see `MAPPO`'s
    `critic_input`); one agent's actions. It describes inputs for building the
    network (a `network_factory` receives it): `reset` gives agent 0's view, and
    `step` moves every agent with the same action; MAPPO trains on the multi-agent
    environment itself.

    **Arguments:**

    - `env`: the multi-agent environment.
    - `num_agents`: its number of agents.
    - `critic_input`: `"global_state"`, `"concatenated"` or `"agent_specific"`.
    - `agent_index`: whether the actor reads the one-hot agent index.
    """

    env: AbstractEnvironment
    num_agents: int = eqx.field(static=True)
    critic_input: str = eqx.field(static=True)
    agent_index: bool = eqx.field(static=True)

    @property
    def observation_space(self) -> Dict:
        spaces: dict[str, AbstractSpace] = {
            OBSERVATION: self.env.observation_space,
            CRITIC: critic_space(self.env, self.num_agents, self.critic_input),
        }
        if self.agent_index:
            spaces[AGENT] = Box(0.0, 1.0, shape=(self.num_agents,))
        return Dict(spaces)

    def agent_inputs(self, timestep: TimeStep) -> dict[str, Array]:
        """What every agent's network reads of one world's timestep: a dict of
        `[num_agents, ...]` leaves (`"observation"`, `"agent"` when shared,
        `"critic"`)."""
        num_agents = self.num_agents
        observation = timestep.observation
        _check_world(observation, num_agents, "MAPPO")
        one_hot = jnp.eye(num_agents, dtype=jnp.float32)
        if self.critic_input == "concatenated":
            joint = jnp.ravel(observation).astype(jnp.float32)
            critic = jnp.broadcast_to(joint, (num_agents, joint.size))
        else:
            global_state = timestep.extras[GLOBAL_STATE]
            if self.critic_input == "global_state":
                critic = jnp.broadcast_to(
                    global_state, (num_agents, *global_state.shape)
                )
            else:
                flat = jnp.broadcast_to(
                    jnp.ravel(global_state), (num_agents, global_state.size)
                )
                critic = jnp.concatenate([flat, one_hot], axis=1)
        inputs = {OBSERVATION: observation, CRITIC: critic}
        if self.agent_index:
            inputs[AGENT] = one_hot
        return inputs

    def first_agent_observation(self, timestep: TimeStep) -> dict[str, Array]:
        return jax.tree.map(lambda x: x[0], self.agent_inputs(timestep))


class MAPPO(AbstractPerAgentLearners):
    """Multi-agent PPO with a centralized critic (Yu et al., 2022): centralized
    training, decentralized execution.

    Every agent's actor acts on its own observation, as in independent PPO
    ([`Independent`][eqxrl.multiagent.Independent]`(PPO)`); its critic, used only
    in training, reads more (`critic_input`):

    - `"global_state"`: the environment's global state (see
      [the convention][the-global-state]; `TreasureHunt`'s whole grid, JaxMARL's
      world state), the same for every agent;
    - `"concatenated"`: every agent's observation, flattened and concatenated in
      agent order (needs a `Box` observation space; what JaxMARL's MAPPO feeds its
      critic on MPE);
    - `"agent_specific"`: the global state flattened, with the agent's one-hot
      index appended (each agent's critic values its own return).

    The network is PPO's, asymmetric: its observation is a `Dict`
    ([`CentralizedCriticView`][eqxrl.multiagent.CentralizedCriticView]) whose
    `"observation"` (and, with shared parameters, the one-hot `"agent"` index)
    only the actor reads and whose `"critic"` only the critic reads, with encoders
    (and, for recurrent networks, cells) of their own. PPO's default network is
    built with those keys; a `network_factory` (e.g. `GRUActorCritic.from_env`,
    for recurrent MAPPO) is called with `actor_keys` and `critic_keys` set so.
    Everything else is PPO's and `Independent`'s: rollouts of `num_envs` worlds,
    GAE per agent with the truncation bootstrap (the critic reads the final step's
    global state), epochs of minibatches, action masks, `Box` actions, observation
    normalization (of the critic's input too), recurrent networks with one carry
    per agent.

    `share_parameters=True` (JaxMARL's "homogeneous" MAPPO): one actor-critic for
    every agent, the agents its batch; `False`: one network and one optimizer
    state per agent, stacked on the agent axis. `share_critic` decides for the
    critic apart from the actor: with a shared actor and per-agent critics (or the
    reverse), the learners are stacked on the agent axis, each with a copy of the
    shared part that
    [`synchronized_shared_gradients`][eqxrl.multiagent.synchronized_shared_gradients]
    keeps equal to the others (one gradient, the team's, and one clip), so the
    copies train as one network on every agent's data. This needs a network whose
    critic has parameters of its own (`critic_mask`; PPO's default networks and
    the recurrent ones with MAPPO's keys have). Observation statistics
    (`normalize_observations`) are then each agent's own.

    **Arguments:**

    - `algorithm`: a [`PPO`][eqxrl.PPO] configured on the multi-agent environment
      (without `actor_keys` / `critic_keys`, which MAPPO sets).
    - `share_parameters`: one network for all agents (the actor reads the agent's
      one-hot index); with `share_critic` set, the actor's choice alone.
    - `share_critic`: one critic for all agents (`True`) or one per agent
      (`False`); `None` (default): as `share_parameters`.
    - `critic_input`: what the critic reads, by name (above).

    Metrics, state and policies are `Independent`'s; the policies act on the
    agents' own observations (the critic's input is not needed to act).

    !!! example

        ```python
        env = eqxrl.envs.from_jaxmarl("MPE_simple_spread_v3")
        ppo = eqxrl.PPO(env=env, num_envs=16, num_steps=128,
                        network_factory=eqxrl.nn.GRUActorCritic.from_env)
        mappo = eqxrl.multiagent.MAPPO(ppo, share_parameters=True)
        state, metrics = mappo.train(jax.random.key(0))
        ```
    """

    algorithm: AbstractAlgorithm
    share_parameters: bool = eqx.field(static=True, default=False)
    critic_input: str = eqx.field(static=True, default="global_state")
    share_critic: bool | None = eqx.field(static=True, default=None)

    critic_inputs: ClassVar[tuple[str, ...]] = CRITIC_INPUTS
    """The names `critic_input` takes."""

    def __check_init__(self):
        if not isinstance(self.algorithm, PPO):
            raise ValueError(
                "MAPPO: algorithm must be an eqxrl.PPO configured on the "
                f"multi-agent environment, got {type(self.algorithm).__name__}."
            )
        if self.critic_input not in CRITIC_INPUTS:
            raise ValueError(
                f"MAPPO: critic_input={self.critic_input!r} must be one of "
                f"{CRITIC_INPUTS}."
            )
        self._check_multi_agent_environment()
        if self.algorithm.actor_keys is not None or (
            self.algorithm.critic_keys is not None
        ):
            raise ValueError(
                "MAPPO: the PPO's actor_keys / critic_keys are MAPPO's to set (the "
                f"actor reads {OBSERVATION!r}, the critic {CRITIC!r}); leave them "
                "unset."
            )
        if self.critic_input != "concatenated" and (
            global_state_space_of(self.env) is None
        ):
            raise ValueError(
                f"MAPPO: critic_input={self.critic_input!r} reads the environment's "
                f"global state, but {type(self.env).__name__} declares none "
                "(global_state_space is None); use critic_input='concatenated' "
                "(every agent's observation), or declare one (see the multi-agent "
                "convention)."
            )
        if self.critic_input == "concatenated" and not isinstance(
            self.env.observation_space, Box
        ):
            raise ValueError(
                "MAPPO: critic_input='concatenated' flattens the agents' "
                "observations, which needs a Box observation space; this one is "
                f"{type(self.env.observation_space).__name__}."
            )
        self._check_sequence_minibatches()
        if self.share_parameters != self.critic_shared:
            network = eqx.filter_eval_shape(
                self.learner.make_network, jax.random.key(0)
            )
            try:
                network.critic_mask()
            except NotImplementedError as error:
                raise ValueError(
                    f"MAPPO: share_parameters={self.share_parameters} with "
                    f"share_critic={self.share_critic} shares one part of the "
                    "network and not the other, which needs a critic with "
                    f"parameters of its own: {error}"
                ) from None

    # ------------------------------------------------------------------ config
    @property
    def critic_shared(self) -> bool:
        """Whether the agents share one critic: `share_critic`, or
        `share_parameters` when it is `None`."""
        if self.share_critic is None:
            return self.share_parameters
        return self.share_critic

    @property
    def one_network(self) -> bool:
        """Whether one network serves every agent: the actor and the critic both
        shared."""
        return self.share_parameters and self.critic_shared

    def _shared_part(self, tree: PyTree) -> PyTree[bool]:
        """`True` on the leaves of a tree of the network's structure (the network,
        its gradients) that the agents share, when they share one part only."""
        critic = tree.critic_mask()
        if self.critic_shared:
            return critic
        return jax.tree.map(lambda is_critic: not is_critic, critic)

    def _initial_learners(self, learners: PyTree) -> PyTree:
        """With one part shared, every agent's copy of it starts as agent 0's."""
        if self.share_parameters == self.critic_shared:
            return learners
        model = learners.model
        model = jax.tree.map(
            lambda x, shared: jnp.broadcast_to(x[0], x.shape) if shared else x,
            model,
            self._shared_part(model),
        )
        return eqx.tree_at(lambda s: s.model, learners, model)

    @property
    def view(self) -> CentralizedCriticView:
        """What the network reads: the environment as a
        [`CentralizedCriticView`][eqxrl.multiagent.CentralizedCriticView]."""
        return CentralizedCriticView(
            self.env, self.num_agents, self.critic_input, self.share_parameters
        )

    @property
    def learner(self) -> PPO:
        """The PPO every learner runs: the algorithm on the centralized-critic
        view, its network reading `"observation"` (and `"agent"`) in the actor and
        `"critic"` in the critic."""
        actor_keys = (OBSERVATION, AGENT) if self.share_parameters else (OBSERVATION,)
        ppo = self.algorithm
        if self.share_parameters != self.critic_shared:
            ppo = dataclasses.replace(
                ppo,
                gradient_transform=synchronized_shared_gradients(
                    self._shared_part, ppo.max_grad_norm
                ),
            )
        if ppo.network_factory is None:
            return dataclasses.replace(
                ppo, env=self.view, actor_keys=actor_keys, critic_keys=(CRITIC,)
            )
        factory = functools.partial(
            ppo.network_factory, actor_keys=actor_keys, critic_keys=(CRITIC,)
        )
        return dataclasses.replace(ppo, env=self.view, network_factory=factory)

    def _agent_inputs(self, timestep: TimeStep) -> dict[str, Array]:
        return self.view.agent_inputs(timestep)

    def _views(self, timestep: TimeStep) -> TimeStep:
        """The learners' views of a batch of world timesteps (world-major,
        `[num_envs, num_agents, ...]`): each agent's network inputs, agent-major
        (one learner per agent) or merged into world-major columns (shared)."""
        observation = timestep.observation
        for leaf in jax.tree.leaves(observation):
            if leaf.shape[:2] != (self.num_envs, self.num_agents):
                raise ValueError(
                    f"MAPPO: a batch of world timesteps has an observation leaf of "
                    f"shape {tuple(leaf.shape)}, but the batch must be world-major, "
                    f"[num_envs={self.num_envs}, num_agents={self.num_agents}, "
                    f"...] = {(self.num_envs, self.num_agents, *leaf.shape[2:])}"
                    "; an agent-major batch [num_agents, num_envs, ...] swaps its "
                    "first two axes (jnp.swapaxes(x, 0, 1))."
                )
        inputs = jax.vmap(self._agent_inputs)(timestep)
        extras = dict(timestep.extras)
        # The network's inputs replace the observation; the final observation
        # (AutoReset's) has no use here: PPO bootstraps truncations through its
        # hook, which reads the final step itself.
        extras.pop("final_observation", None)
        timestep = without_global_state(
            replace_fields(timestep, observation=inputs, extras=extras)
        )
        if self.one_network:
            return world_major_columns(timestep, self.num_agents)
        return agent_major(timestep, self.num_agents)

    # ---------------------------------------------------------------- outputs
    def values(
        self, state: IndependentState, timestep: TimeStep
    ) -> Float[Array, "num_envs num_agents"]:
        """The critics' values of a batch of world timesteps: every agent's value
        in every world, read with the learners' current carries (recurrent
        networks) and observation statistics.

        **Arguments:**

        - `state`: a training state.
        - `timestep`: `num_envs` worlds' timesteps, world-major: observation
          leaves `[num_envs, num_agents, ...]`, with the global state in `extras`
          when the critic reads it. Another layout is a `ValueError` naming both
          shapes.

        **Returns:**

        float32 `[num_envs, num_agents]`.
        """
        views = self._views(timestep)
        ppo = self.learner
        learners = state.learners

        def value(model, statistics, carry, observation):
            acting = ppo.acting_model(model, statistics)
            return jax.vmap(acting.step_value)(carry, observation)

        if self.one_network:
            values = value(
                learners.model,
                learners.observation_statistics,
                learners.carry,
                views.observation,
            )
            return values.reshape(self.num_envs, self.num_agents)
        values = eqx.filter_vmap(value)(
            learners.model,
            learners.observation_statistics,
            learners.carry,
            views.observation,
        )
        return jnp.swapaxes(values, 0, 1)

    def policy(
        self,
        state: IndependentState,
        deterministic: bool = False,
        agent: int | None = None,
    ) -> AbstractPolicy:
        """The agents' decentralized policy, from a training state: it acts on the
        agents' own observations (the critic, and so the global state, is for
        training only).

        **Arguments:**

        - `state`: a training state.
        - `deterministic`: act greedily instead of exploring.
        - `agent`: `None` for the joint policy (one multi-agent observation in,
          one action per agent out), or an agent index for that agent's policy
          alone (one agent's observation in, its action out).

        **Returns:**

        A [`DecentralizedPolicy`][eqxrl.multiagent.DecentralizedPolicy].
        """
        inner = AbstractPerAgentLearners.policy(self, state, deterministic, agent)
        if isinstance(inner, SharedPolicy):
            policy = inner.policy
        elif isinstance(inner, IndependentPolicy):
            policy = inner.policies
        else:  # one agent's own policy
            policy = inner
        critic = critic_space(self.env, self.num_agents, self.critic_input)
        return DecentralizedPolicy(
            policy=policy,
            num_agents=self.num_agents,
            agent=agent,
            stacked=not self.one_network and agent is None,
            agent_index=self.share_parameters,
            critic_shape=tuple(critic.shape),
        )


class DecentralizedPolicy(AbstractPolicy):
    """The acting part of a [`MAPPO`][eqxrl.multiagent.MAPPO] network: each agent
    acts on its own observation. The network's input is built from it (with the
    one-hot agent index when the agents share the network); the critic's input,
    which acting does not read, is zeros.

    With `agent=None`, a joint policy: one multi-agent observation in
    (`[num_agents, ...]` leaves), one action per agent out (each agent with its
    own key, `jax.random.split(key, num_agents)`). With `agent=i`, agent `i`'s
    policy: one agent's observation in, its action out. Recurrent networks act
    with `step` and `initial_carry()` (one carry per agent on a leading agent axis
    for the joint policy).

    **Arguments:**

    - `policy`: the network's policy (PPO's), stacked on a leading agent axis when
      `stacked`.
    - `num_agents`: the number of agents.
    - `agent`: `None` for the joint policy, or an agent index.
    - `stacked`: `policy` holds one policy per agent (unshared parameters).
    - `agent_index`: the network reads the one-hot agent index.
    - `critic_shape`: the shape of the critic's input.
    """

    policy: AbstractPolicy
    num_agents: int = eqx.field(static=True)
    agent: int | None = eqx.field(static=True, default=None)
    stacked: bool = eqx.field(static=True, default=False)
    agent_index: bool = eqx.field(static=True, default=True)
    critic_shape: tuple[int, ...] = eqx.field(static=True, default=())

    def _inputs(
        self, observation: PyTree[Array], agent: Int[Array, ""] | int
    ) -> dict[str, Array]:
        inputs = {
            OBSERVATION: observation,
            CRITIC: jnp.zeros(self.critic_shape, jnp.float32),
        }
        if self.agent_index:
            inputs[AGENT] = jax.nn.one_hot(agent, self.num_agents, dtype=jnp.float32)
        return inputs

    def _every_agent(self, function, *per_agent):
        agents = jnp.arange(self.num_agents, dtype=jnp.int32)
        if self.stacked:
            return eqx.filter_vmap(function)(self.policy, agents, *per_agent)
        return eqx.filter_vmap(
            lambda agent, *rest: function(self.policy, agent, *rest)
        )(agents, *per_agent)

    def __call__(
        self,
        observation: PyTree[Array],
        key: PRNGKeyArray,
        action_mask: Bool[Array, "..."] | None = None,
    ) -> Array:
        """The action of agent `agent` (or of every agent, for the joint policy)."""
        if self.agent is not None:
            return self.policy(self._inputs(observation, self.agent), key, action_mask)

        def act(policy, agent, observation, key, action_mask):
            return policy(self._inputs(observation, agent), key, action_mask)

        keys = jax.random.split(key, self.num_agents)
        return self._every_agent(act, observation, keys, action_mask)

    @property
    def is_recurrent(self) -> bool:
        """Whether the network carries a state from step to step."""
        return self.policy.is_recurrent

    def initial_carry(self) -> PyTree[Array] | None:
        """The initial carry: one per agent on a leading agent axis for the joint
        policy, agent `agent`'s alone otherwise; `None` for a feed-forward
        network."""
        if self.stacked:
            if not self.is_recurrent:
                return None
            return eqx.filter_vmap(lambda policy: policy.initial_carry())(self.policy)
        carry = self.policy.initial_carry()
        if carry is None or self.agent is not None:
            return carry
        return jax.tree.map(
            lambda x: jnp.broadcast_to(x, (self.num_agents, *x.shape)), carry
        )

    def step(
        self,
        carry: PyTree[Array] | None,
        observation: PyTree[Array],
        key: PRNGKeyArray,
        action_mask: Bool[Array, "..."] | None = None,
    ) -> tuple[PyTree[Array] | None, Array]:
        """The action of agent `agent` (or of every agent), each agent reading its
        observation with its own carry: `(next_carry, action)`."""
        if not self.is_recurrent:
            return carry, self(observation, key, action_mask)
        if self.agent is not None:
            inputs = self._inputs(observation, self.agent)
            return self.policy.step(carry, inputs, key, action_mask)

        def act(policy, agent, carry, observation, key, action_mask):
            return policy.step(
                carry, self._inputs(observation, agent), key, action_mask
            )

        keys = jax.random.split(key, self.num_agents)
        return self._every_agent(act, carry, observation, keys, action_mask)
